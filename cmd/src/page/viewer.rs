//! Who is looking at the page: the operator, on `daemon --listen`'s page, sees and acts on every
//! workflow; a tenant signed in on the API's listener sees only its own, acts on them only with
//! the `operate` permission, and sees nothing of the daemon (its journal, the other tenants'
//! rate waits, the sweep, the drift checks).

use std::collections::BTreeSet;

pub enum Viewer {
    Operator,
    Tenant {
        /// `<tenant>/<subject>`, shown in the header.
        signed_in_as: String,
        /// The ids of the tenant's own workflows.
        own: BTreeSet<String>,
        may_act: bool,
        /// The token its action forms carry: its session's own, so that one tenant's page never
        /// holds a token that acts in another's session.
        csrf: String,
    },
}

impl Viewer {
    /// Whether workflow `id` is shown: another tenant's is as absent as one that never was.
    pub fn sees(&self, id: &str) -> bool {
        match self {
            Viewer::Operator => true,
            Viewer::Tenant { own, .. } => own.contains(id),
        }
    }

    pub fn may_act_on(&self, id: &str) -> bool {
        match self {
            Viewer::Operator => true,
            Viewer::Tenant { may_act, .. } => *may_act && self.sees(id),
        }
    }

    /// Whether the daemon's own state (journal, sweep, drift checks, rate waits) is shown.
    pub fn sees_the_daemon(&self) -> bool {
        matches!(self, Viewer::Operator)
    }

    /// The token an action form of this viewer carries and its action must.
    pub fn csrf<'a>(&'a self, guard: &'a super::Guard) -> &'a str {
        match self {
            Viewer::Operator => &guard.csrf,
            Viewer::Tenant { csrf, .. } => csrf,
        }
    }

    pub fn signed_in_as(&self) -> Option<&str> {
        match self {
            Viewer::Operator => None,
            Viewer::Tenant { signed_in_as, .. } => Some(signed_in_as),
        }
    }
}
