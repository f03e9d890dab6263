//! What a teardown round's discovery found and journaled: the cluster's resources by kind, and
//! for names that can be made again (IAM) which incarnation of the name it found.

use std::collections::BTreeMap;

use infraflow_activities::{Aws, AwsError, Kind, iam};
use serde::{Deserialize, Serialize};

/// The kinds whose name, not an id AWS never reuses, is what the inventory holds and whose
/// incarnation is journaled beside it.
const NAMED_AGAIN: [Kind; 3] = [Kind::IamRole, Kind::InstanceProfile, Kind::OidcProvider];

/// A round's discovery as journaled. Rounds journaled before incarnations existed hold the bare
/// map; they read back with none, and their deletes compare tags alone, as they did.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Discovered {
    Found {
        found: BTreeMap<Kind, Vec<String>>,
        /// `kind/name` → the incarnation discovery found (`iam::incarnation`).
        incarnations: BTreeMap<String, String>,
    },
    Bare(BTreeMap<Kind, Vec<String>>),
}

impl Discovered {
    /// Reads the incarnation of each name in `found` that can be made again, so a delete
    /// replayed after a re-creation leaves the newcomer (SAFETY-A7937A6 G12). One gone since
    /// it was listed has none: its delete finds it gone, or a newcomer it leaves.
    pub(crate) async fn read(aws: &Aws, found: BTreeMap<Kind, Vec<String>>) -> Result<Discovered, AwsError> {
        let names: Vec<(Kind, &String)> =
            NAMED_AGAIN.iter().flat_map(|k| found.get(k).into_iter().flatten().map(move |n| (*k, n))).collect();
        let reads = names.iter().map(|&(kind, name)| async move {
            iam::incarnation(aws, kind, name).await.map(|i| (key(kind, name), i.unwrap_or_default()))
        });
        let incarnations = futures::future::try_join_all(reads).await?.into_iter().collect();
        Ok(Discovered::Found { found, incarnations })
    }

    pub(crate) fn found(&self) -> &BTreeMap<Kind, Vec<String>> {
        match self {
            Discovered::Found { found, .. } | Discovered::Bare(found) => found,
        }
    }

    /// The incarnation journaled for `name` of `kind`: None for kinds whose ids are never
    /// reused, and for rounds journaled before incarnations. An empty one (gone at discovery)
    /// matches nothing that is there now.
    pub(crate) fn incarnation(&self, kind: Kind, name: &str) -> Option<String> {
        match self {
            Discovered::Found { incarnations, .. } if NAMED_AGAIN.contains(&kind) => {
                Some(incarnations.get(&key(kind, name)).cloned().unwrap_or_default())
            }
            _ => None,
        }
    }
}

fn key(kind: Kind, name: &str) -> String {
    format!("{}/{name}", kind.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_journaled_before_incarnations_reads_back_with_its_resources_and_none() {
        let old = serde_json::json!({ "vpc": ["vpc-1"], "iam-role": ["x-role"] });
        let inv: Discovered = serde_json::from_value(old).unwrap();
        assert_eq!(inv.found().get(&Kind::Vpc), Some(&vec!["vpc-1".to_string()]));
        assert_eq!(inv.incarnation(Kind::IamRole, "x-role"), None);
        let empty: Discovered = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(empty.found().is_empty());
    }

    #[test]
    fn a_name_gone_at_discovery_matches_no_incarnation_of_it() {
        let mut found = BTreeMap::new();
        found.insert(Kind::IamRole, vec!["x-role".to_string()]);
        let inv =
            Discovered::Found { found, incarnations: BTreeMap::from([(key(Kind::IamRole, "y"), "AROA1".into())]) };
        let back: Discovered = serde_json::from_value(serde_json::to_value(&inv).unwrap()).unwrap();
        assert_eq!(back.incarnation(Kind::IamRole, "y").as_deref(), Some("AROA1"));
        assert_eq!(back.incarnation(Kind::IamRole, "x-role").as_deref(), Some(""));
        assert_eq!(back.incarnation(Kind::Vpc, "vpc-1"), None);
    }
}
