//! `provision-infra`: the AWS infrastructure of a HyperShift hosted cluster, as
//! `hypershift create infra aws` makes it, built from idempotent steps with write-ahead undos.

use infraflow_activities::AwsPool;
use infraflow_engine::WfCtx;
use infraflow_engine::{ActivityError, InputError, StepError};
use infraflow_engine::{BoxFuture, Validated, WorkflowDef};
use serde_json::Value;

use crate::aws_steps::probe_environment;
pub use crate::provision::input::{
    CustomerZone, EndpointAccess, MAX_ADDITIONAL_TAGS, MAX_ZONES, OutputZone, ProvisionInput, ProvisionOutput,
    zone_cidrs,
};
pub use crate::provision::provision;
use crate::validate;

impl ProvisionInput {
    /// Checks every field; fills in the derived infra id.
    pub fn validate(mut self, workflow_id: &str) -> Result<ProvisionInput, InputError> {
        validate::dns_label("name", &self.name, 40)?;
        match &self.infra_id {
            Some(id) => validate::dns_label("infraID", id, 60)?,
            None => self.infra_id = Some(derive_infra_id(&self.name, workflow_id)),
        }
        validate::region("region", &self.region)?;
        if self.vpc_id.is_some() || self.subnets.is_some() {
            // A customer's VPC may be of any size: its CIDR is checked against the VPC's.
            validate::cidr("vpcCIDR", &self.vpc_cidr)?;
            crate::provision::customer_rules::validate_input(&mut self)?;
        } else {
            validate::cidr16("vpcCIDR", &self.vpc_cidr)?;
        }
        validate::domain("baseDomain", &self.base_domain)?;
        if let Some(prefix) = &self.base_domain_prefix {
            validate::dns_label("baseDomainPrefix", prefix, 63)?;
        }
        if let Some(zones) = &self.zones {
            if zones.is_empty() {
                return Err(InputError::field(
                    "zones",
                    "must name at least one zone (or be left out for the first available one)",
                ));
            }
            if zones.len() > MAX_ZONES {
                return Err(InputError::field(
                    "zones",
                    format!(
                        "{} zones do not fit in a /16: at most {MAX_ZONES} (each takes a public and a private /20)",
                        zones.len()
                    ),
                ));
            }
            for (i, z) in zones.iter().enumerate() {
                let suffix = z.strip_prefix(self.region.as_str()).unwrap_or("");
                if suffix.is_empty()
                    || !suffix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                {
                    return Err(InputError::field(
                        &format!("zones[{i}]"),
                        format!("{z:?} is not a zone of region {}", self.region),
                    ));
                }
                if zones[..i].contains(z) {
                    return Err(InputError::field(&format!("zones[{i}]"), format!("{z:?} is listed twice")));
                }
            }
        }
        validate::additional_tags("additionalTags", &self.additional_tags)?;
        crate::expiry::validate(self.expires_in.as_deref(), &self.additional_tags)?;
        Ok(self)
    }
}

/// `<name>-<5 letters>`, stable for a workflow id, as HyperShift derives `jparrill-dest-zjhcn`.
fn derive_infra_id(name: &str, workflow_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in workflow_id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let suffix: String = (0..5)
        .map(|i| {
            let c = (h >> (i * 5)) % 26;
            char::from(b'a' + c as u8)
        })
        .collect();
    format!("{name}-{suffix}")
}

pub struct ProvisionInfra {
    pub pool: AwsPool,
}

impl WorkflowDef for ProvisionInfra {
    /// Admitted to the account's quotas, then the cluster's lease.
    fn hold(&self, request: infraflow_engine::HoldRequest, input: &Value) -> Option<infraflow_engine::TakeHold> {
        crate::hold::admission::admission_and_lease(&self.pool, request, self.name(), input)
    }

    fn name(&self) -> &'static str {
        "provision-infra"
    }

    fn summary(&self) -> &'static str {
        "VPC, subnets, gateways, routes, security group, endpoints and DNS zones of a hosted cluster"
    }

    /// 2: steps start as soon as their inputs exist (the zones beside the gateway, the DNS zones
    /// beside everything after the VPC), which moved their positions. 3: a customer's VPC
    /// (`vpcID`), checked and marked instead of a network made; a run of 2 has the same steps.
    /// 4: the worker group's rules nobody owns are read and revoked in steps of their own, after
    /// the group's, and given back at rollback (`provision::revoke`).
    fn version(&self) -> u32 {
        4
    }

    fn oldest_version(&self) -> u32 {
        2
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        let p: ProvisionInput = validate::decode(input)?;
        let p = p.validate(id)?;
        let cluster = validate::cluster_key(p.infra_id(), validate::role(input)?.as_ref());
        let input = serde_json::to_value(&p).map_err(|e| InputError(e.to_string()))?;
        Ok(Validated { input: validate::session_named(id, input), cluster })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.assuming(crate::aws_steps::role_of(&input).as_ref());
        Box::pin(async move {
            let p: ProvisionInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let out = provision(&ctx, &pool, &p).await?;
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        use crate::policy::*;
        actions(&[
            (NETWORK, Use::Manage),
            (NAT, Use::Manage),
            (ROUTING, Use::Manage),
            (SECURITY, Use::Manage),
            (ENDPOINTS, Use::Manage),
            (DNS, Use::Manage),
            (RESOURCES, Use::Read),
            (CUSTOMER_NETWORK, Use::Manage),
            // The quota check `run` and `submit` make before journaling it.
            (QUOTAS, Use::Read),
        ])
    }

    fn undo_context(&self, input: &Value) -> serde_json::Map<String, Value> {
        crate::aws_steps::role_context(input)
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let region = serde_json::from_value::<ProvisionInput>(input.clone()).map(|p| p.region).unwrap_or_default();
        Some(probe_environment(&self.pool.assuming(crate::aws_steps::role_of(input).as_ref()), &region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_cidrs_follow_hypershift() {
        assert_eq!(zone_cidrs((10, 0), 0), ("10.0.0.0/20".into(), "10.0.128.0/20".into()));
        assert_eq!(zone_cidrs((10, 0), 2), ("10.0.32.0/20".into(), "10.0.160.0/20".into()));
        assert_eq!(zone_cidrs((10, 0), 7), ("10.0.112.0/20".into(), "10.0.240.0/20".into()));
    }

    #[test]
    fn the_derived_infra_id_is_stable_per_workflow() {
        assert_eq!(derive_infra_id("demo", "wf-1"), derive_infra_id("demo", "wf-1"));
        assert_ne!(derive_infra_id("demo", "wf-1"), derive_infra_id("demo", "wf-2"));
        assert!(derive_infra_id("demo", "wf-1").starts_with("demo-"));
    }
}
