//! What every phase of a provision shares (`Plan`), and what the network phase hands the
//! phases after it (`Network`): the types below the phases that use them.

use infraflow_activities::{AwsPool, Identity, Inventory, Kind};
use infraflow_engine::{StepOptions, WfCtx};

use super::input::ProvisionInput;
use crate::aws_steps::{FirstAttempt, create_opts};

/// What every phase shares: the workflow, the input, and how an identity is made and adopted.
pub(crate) struct Plan<'a> {
    pub ctx: &'a WfCtx,
    pub pool: &'a AwsPool,
    pub p: &'a ProvisionInput,
    pub infra: &'a str,
    pub region: &'a str,
    pub(super) extra: Vec<(String, String)>,
    pub(super) expires: Option<String>,
    /// Taken by this execution (None when the preflight was replayed from the journal: history).
    pub(super) inventory: Option<&'a Inventory>,
}

impl Plan<'_> {
    /// The identity of the resource of `role` (in `zone`), with every tag the cluster's
    /// resources carry.
    pub fn ident(&self, role: &str, zone: Option<&str>, name: String) -> Identity {
        Identity::new(self.infra, role, zone, name)
            .with_tags(&self.extra, self.ctx.creator())
            .with_hypershift_tags(Some(&self.p.name))
            .with_expiration(self.expires.as_deref())
    }

    /// Whether the first attempt of `id`'s create may skip its lookup.
    pub fn first(&self, id: &Identity) -> FirstAttempt {
        FirstAttempt::new(self.inventory, id)
    }

    /// A create step's options: retries, its write-ahead undo, the consistency settle.
    pub fn with_undo(&self, kind: Kind, id: &Identity) -> StepOptions {
        create_opts(self.region, kind, id)
    }
}

/// Each zone's subnets, made or the customer's.
pub(crate) struct ZoneNet {
    pub zone: String,
    pub public: Option<String>,
    pub private: Option<String>,
}

/// The network phase's result: the zones' subnets and the route tables an S3 endpoint serves.
pub(crate) struct Network {
    pub zones: Vec<ZoneNet>,
    pub route_tables: Vec<String>,
}
