//! The census of a cluster's EC2 resources, from EC2's tag index (two reads side by side): lets
//! the first attempt of a create skip its own lookup when the census saw nothing there.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::Filter;
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::{IDENTITY_TAG, Identity, ownership_key};
use crate::throttle::read_retrying;

/// EC2 accepts at most 200 values in one filter.
pub const MAX_KEYS: usize = 200;

/// Whether a create first looks for what an earlier attempt or workflow made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Look up by identity before creating: always safe, and what every retry does.
    First,
    /// An inventory taken by this same execution, under the cluster's lease, found nothing with
    /// this identity, and no earlier attempt of the step exists: create straight away.
    Skip,
}

impl Lookup {
    pub fn first(self) -> bool {
        self == Lookup::First
    }
}

/// Which identity keys were looked for, and which of them exist in the account in any state (a
/// deleting NAT gateway counts).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    pub looked: BTreeSet<String>,
    pub present: BTreeSet<String>,
    /// Something of the cluster (its ownership tag) without an identity tag exists: what
    /// HyperShift's CLI made, which the creates adopt by looking up.
    #[serde(default)]
    pub unclaimed: bool,
}

impl Inventory {
    /// What the first attempt of the step creating `id` may do. Only a cluster with nothing of
    /// its own in the account skips lookups: one that has anything (a re-run, an adoption) may
    /// have more that AWS does not list yet (eventual consistency), and looks up step by step.
    pub fn lookup_for(&self, id: &Identity) -> Lookup {
        if self.present.is_empty() && !self.unclaimed && self.looked.contains(&id.key()) {
            Lookup::Skip
        } else {
            Lookup::First
        }
    }
}

/// Every EC2 resource carrying tag `key` (with a value matching `value`, wildcards allowed):
/// (resource id, value); None when more pages were left than a census reads.
async fn tagged(aws: &Aws, key: &str, value: Option<&str>) -> AwsResult<Option<Vec<(String, String)>>> {
    const PAGES: usize = 10;
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..PAGES {
        let mut call = aws.ec2.describe_tags().filters(Filter::builder().name("key").values(key).build());
        if let Some(v) = value {
            call = call.filters(Filter::builder().name("value").values(v).build());
        }
        let o = call.set_next_token(token.clone()).send().await.map_err(|e| classify("DescribeTags", e))?;
        // Checked on what comes back: some implementations ignore some filters.
        out.extend(
            o.tags()
                .iter()
                .filter(|t| t.key() == Some(key))
                .filter_map(|t| Some((t.resource_id()?.to_string(), t.value().unwrap_or_default().to_string()))),
        );
        token = o.next_token().filter(|t| !t.is_empty()).map(str::to_string);
        if token.is_none() {
            return Ok(Some(out));
        }
    }
    Ok(None)
}

/// The cluster's census: two reads of EC2's tag index side by side — everything carrying the
/// cluster's ownership tag, and every identity of the cluster — for which of `keys` exist, and
/// whether anything of the cluster, of any kind, has no identity (HyperShift's, or what the
/// cluster's controllers made: either way not a cluster with nothing, so nothing is skipped).
pub async fn take_inventory(aws: &Aws, infra_id: &str, keys: &BTreeSet<String>) -> AwsResult<Inventory> {
    let wanted: BTreeSet<String> = keys.iter().take(MAX_KEYS).cloned().collect();
    let owner = ownership_key(infra_id);
    let identities = format!("{infra_id}/*");
    let (owned, named) = futures::try_join!(
        read_retrying(|| tagged(aws, &owner, Some("owned"))),
        read_retrying(|| tagged(aws, IDENTITY_TAG, Some(&identities))),
    )?;
    let (Some(owned), Some(named)) = (owned, named) else {
        // Pages were left unread: nothing may be presumed absent.
        return Ok(Inventory { looked: wanted, present: keys.clone(), unclaimed: true });
    };
    let owned: BTreeSet<&str> = owned.iter().map(|(id, _)| id.as_str()).collect();
    let identity_of: std::collections::BTreeMap<&str, &str> =
        named.iter().map(|(id, v)| (id.as_str(), v.as_str())).collect();
    let present = owned
        .iter()
        .filter_map(|id| identity_of.get(id))
        .filter(|key| wanted.contains(**key))
        .map(|key| key.to_string())
        .collect();
    let unclaimed = owned.iter().any(|id| !identity_of.contains_key(id));
    Ok(Inventory { looked: wanted, present, unclaimed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(role: &str) -> Identity {
        Identity::new("c-abcde", role, None, String::new())
    }

    #[test]
    fn only_a_cluster_with_nothing_of_its_own_skips_lookups_and_only_for_keys_it_read() {
        let looked: BTreeSet<String> = [id("vpc").key(), id("nat").key()].into();
        let empty = Inventory { looked: looked.clone(), present: BTreeSet::new(), unclaimed: false };
        assert_eq!(empty.lookup_for(&id("vpc")), Lookup::Skip);
        assert_eq!(empty.lookup_for(&id("igw")), Lookup::First, "a key it did not read");
        let hypershifts = Inventory { unclaimed: true, ..empty.clone() };
        assert_eq!(hypershifts.lookup_for(&id("vpc")), Lookup::First, "HyperShift's resources: look up, to adopt");
        let live = Inventory { looked, present: [id("nat").key()].into(), unclaimed: false };
        assert_eq!(live.lookup_for(&id("vpc")), Lookup::First, "anything present: look up everything");
    }
}
