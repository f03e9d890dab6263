//! What a check found, for people (`render`) and scripts (`--json`): each drift as kind, id,
//! expected, found and the repair it implies; what would hold a teardown up; what leaks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::teardown::planned::Planned;

/// What `run provision-infra` with the cluster's input does about a drift.
pub const BY_PROVISION: &str = "run provision-infra with the cluster's input";

/// One difference between the cluster as its provision made it and as AWS holds it now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    pub kind: String,
    pub id: String,
    pub expected: String,
    pub found: String,
    /// What repairs it: `BY_PROVISION`, or what to do by hand and why a provision does not.
    pub repair: String,
}

impl Drift {
    pub fn new(kind: &str, id: &str, expected: impl Into<String>, found: impl Into<String>) -> Drift {
        Drift {
            kind: kind.into(),
            id: id.into(),
            expected: expected.into(),
            found: found.into(),
            repair: BY_PROVISION.into(),
        }
    }

    /// A drift a provision does not repair, and what to do instead.
    pub fn by_hand(mut self, repair: impl Into<String>) -> Drift {
        self.repair = repair.into();
        self
    }

    pub fn repaired_by_provision(&self) -> bool {
        self.repair == BY_PROVISION
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    #[serde(rename = "infraID")]
    pub infra_id: String,
    pub account: String,
    pub region: String,
    /// The journaled workflow whose input and output the cluster is compared with.
    pub provision: String,
    pub in_sync: bool,
    pub drift: Vec<Drift>,
    /// Foreign resources a teardown would wait on and then pause naming (it never deletes them).
    pub hold_ups: Vec<Planned>,
    /// What the cluster's life left that costs or lingers: attached to nothing, or of a kind
    /// teardown does not delete.
    pub leaks: Vec<Planned>,
}

impl CheckReport {
    pub fn new(infra_id: &str, account: String, region: &str, provision: &str) -> CheckReport {
        CheckReport {
            infra_id: infra_id.into(),
            account,
            region: region.into(),
            provision: provision.into(),
            in_sync: true,
            drift: Vec::new(),
            hold_ups: Vec::new(),
            leaks: Vec::new(),
        }
    }

    /// Sorted, and `in_sync` set: nothing drifted, nothing holds a teardown up, nothing leaks.
    pub fn finish(mut self) -> CheckReport {
        self.drift.sort_by(|a, b| (&a.kind, &a.id, &a.expected).cmp(&(&b.kind, &b.id, &b.expected)));
        self.drift.dedup();
        for list in [&mut self.hold_ups, &mut self.leaks] {
            list.sort_by(|a, b| (&a.kind, &a.id).cmp(&(&b.kind, &b.id)));
            list.dedup_by(|a, b| a.kind == b.kind && a.id == b.id);
        }
        self.in_sync = self.drift.is_empty() && self.hold_ups.is_empty() && self.leaks.is_empty();
        self
    }

    /// How many findings of each kind: drift by its kind, then `hold-up` and `leak`.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for d in &self.drift {
            *out.entry(d.kind.clone()).or_insert(0) += 1;
        }
        if !self.hold_ups.is_empty() {
            out.insert("hold-up".into(), self.hold_ups.len());
        }
        if !self.leaks.is_empty() {
            out.insert("leak".into(), self.leaks.len());
        }
        out
    }

    /// The report for people: a line per finding, then the counts.
    pub fn render(&self) -> String {
        let mut out = format!(
            "check of {} in account {}, region {}, against {} (nothing changed):\n",
            self.infra_id, self.account, self.region, self.provision
        );
        for d in &self.drift {
            out.push_str(&format!(
                "  drift    {:<20} {}: expected {}, found {} → {}\n",
                d.kind, d.id, d.expected, d.found, d.repair
            ));
        }
        for h in &self.hold_ups {
            out.push_str(&format!("  hold-up  {:<20} {} ({})\n", h.kind, h.id, h.reason.as_deref().unwrap_or("")));
        }
        for l in &self.leaks {
            out.push_str(&format!("  leak     {:<20} {} ({})\n", l.kind, l.id, l.reason.as_deref().unwrap_or("")));
        }
        if self.in_sync {
            out.push_str("in sync: as its provision made it, nothing holding a teardown up, nothing leaking\n");
        } else {
            let repaired = self.drift.iter().filter(|d| d.repaired_by_provision()).count();
            out.push_str(&format!(
                "{} drifted ({repaired} repaired by running provision-infra again), {} holding a teardown up, {} leaking\n",
                self.drift.len(),
                self.hold_ups.len(),
                self.leaks.len()
            ));
        }
        out
    }
}
