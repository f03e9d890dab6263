//! What a teardown round's discovery found and journaled: the cluster's resources by kind, and
//! for names that can be made again (IAM, classic load balancers) which incarnation of the name
//! it found.

use std::collections::BTreeMap;

use infraflow_activities::{Aws, AwsError, Kind, resources};
use serde::{Deserialize, Serialize};

/// The kinds whose name, not an id AWS never reuses, is what the inventory holds and whose
/// incarnation is journaled beside it.
const NAMED_AGAIN: [Kind; 4] = [Kind::IamRole, Kind::InstanceProfile, Kind::OidcProvider, Kind::ClassicLoadBalancer];

/// A round's discovery as journaled. Rounds of teardowns before version 5 hold the bare map;
/// their deletes compare tags alone, as they did.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Discovered {
    Found {
        found: BTreeMap<Kind, Vec<String>>,
        /// `kind/name` → the incarnation discovery found (`resources::incarnation`); a name
        /// whose incarnation could not be read is not here, and its delete compares tags alone.
        incarnations: BTreeMap<String, String>,
    },
    Bare(BTreeMap<Kind, Vec<String>>),
}

impl Discovered {
    /// Reads the incarnation of each name in `found` that can be made again, so a delete
    /// replayed after a re-creation pauses on the newcomer (SAFETY-A7937A6 G12). One that
    /// cannot be read now (gone since it was listed, not visible yet, or an endpoint that does
    /// not say) gets none: never an empty one every later read would differ from.
    pub(crate) async fn read(aws: &Aws, found: BTreeMap<Kind, Vec<String>>) -> Result<Discovered, AwsError> {
        let names: Vec<(Kind, &String)> =
            NAMED_AGAIN.iter().flat_map(|k| found.get(k).into_iter().flatten().map(move |n| (*k, n))).collect();
        let reads = names.iter().map(|&(kind, name)| async move {
            resources::incarnation(aws, kind, name).await.map(|i| i.map(|i| (key(kind, name), i)))
        });
        let incarnations = futures::future::try_join_all(reads).await?.into_iter().flatten().collect();
        Ok(Discovered::Found { found, incarnations })
    }

    pub(crate) fn found(&self) -> &BTreeMap<Kind, Vec<String>> {
        match self {
            Discovered::Found { found, .. } | Discovered::Bare(found) => found,
        }
    }

    /// The incarnation journaled for `name` of `kind`: None for kinds whose ids are never
    /// reused, for a name discovery could not read one of, and for rounds before version 5.
    pub(crate) fn incarnation(&self, kind: Kind, name: &str) -> Option<String> {
        match self {
            Discovered::Found { incarnations, .. } => incarnations.get(&key(kind, name)).cloned(),
            Discovered::Bare(_) => None,
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
    fn a_name_whose_incarnation_could_not_be_read_is_left_to_its_tags() {
        let mut found = BTreeMap::new();
        found.insert(Kind::IamRole, vec!["x-role".to_string(), "y".to_string()]);
        let inv =
            Discovered::Found { found, incarnations: BTreeMap::from([(key(Kind::IamRole, "y"), "AROA1".into())]) };
        let back: Discovered = serde_json::from_value(serde_json::to_value(&inv).unwrap()).unwrap();
        assert_eq!(back.incarnation(Kind::IamRole, "y").as_deref(), Some("AROA1"));
        assert_eq!(back.incarnation(Kind::IamRole, "x-role"), None);
        assert_eq!(back.incarnation(Kind::Vpc, "vpc-1"), None);
    }
}
