//! Which cluster a workflow's journaled input is about: the one place every hold (the cluster
//! lease, the admission) reads a cluster's infraID, region and role from, so no feature derives
//! them from a field path of its own (SAFETY-A7937A6 G2: the lease read a top-level `infraID`
//! that create-cluster's input keeps under `infra`, and create-cluster ran without a lease).

use infraflow_activities::AssumedRole;
use serde_json::Value;

/// The cluster a workflow acts on.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterRef {
    pub infra_id: String,
    /// Empty where the input leaves it to the SDK's (scale-nodepool): the environment check
    /// then names it.
    pub region: String,
    /// The role the workflow acts through; its account is the cluster's.
    pub role: Option<AssumedRole>,
}

/// Where in a workflow's input its cluster's `infraID` and `region` sit: create-cluster keeps them
/// in its `infra` part; every other AWS workflow at the top. None for a workflow that acts on no
/// cluster (the canary).
fn cluster_fields<'a>(workflow: &str, input: &'a Value) -> Option<&'a Value> {
    match workflow {
        "create-cluster" => input.get("infra"),
        "provision-infra" | "teardown" | "create-iam" | "create-privatelink" | "scale-nodepool" => Some(input),
        _ => None,
    }
}

/// The cluster `workflow`'s validated `input` acts on, if it acts on one. The role is always the
/// input's own (create-cluster's parts act through create-cluster's role).
pub fn of(workflow: &str, input: &Value) -> Option<ClusterRef> {
    // The management side is a "cluster" of its own, `management.<namePrefix>` (a name no
    // infraID can be): two journals never make or tear it down at once either.
    if matches!(workflow, "create-management" | "teardown-management") {
        let prefix = input.get("namePrefix").and_then(Value::as_str).unwrap_or("hypershift");
        let region = input.get("region").and_then(Value::as_str).unwrap_or_default().to_string();
        return Some(ClusterRef {
            infra_id: format!("management.{prefix}"),
            region,
            role: crate::aws_steps::role_of(input),
        });
    }
    let fields = cluster_fields(workflow, input)?;
    let infra_id = fields.get("infraID")?.as_str().filter(|s| !s.is_empty())?.to_string();
    let region = fields.get("region").and_then(Value::as_str).unwrap_or_default().to_string();
    Some(ClusterRef { infra_id, region, role: crate::aws_steps::role_of(input) })
}

/// The part of `workflow`'s input a provision's network is described by (provision-infra's
/// input, create-cluster's `infra`), if the workflow makes one.
pub fn network_input<'a>(workflow: &str, input: &'a Value) -> Option<&'a Value> {
    match workflow {
        "provision-infra" | "create-cluster" => cluster_fields(workflow, input),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn create_cluster_names_the_cluster_of_its_infra_part() {
        let input = json!({"infra": {"infraID": "cc-abcde", "region": "us-east-1"}, "nodePool": {}});
        let c = of("create-cluster", &input).unwrap();
        assert_eq!((c.infra_id.as_str(), c.region.as_str()), ("cc-abcde", "us-east-1"));
    }

    /// A validated input of every AWS workflow, as `validate` journals it.
    fn sample(workflow: &str) -> Value {
        let provision = json!({"name": "s", "infraID": "s-abcde", "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"});
        match workflow {
            "provision-infra" => provision,
            "teardown" => json!({"infraID": "s-abcde", "region": "us-east-1"}),
            "create-iam" => {
                json!({"infraID": "s-abcde", "region": "us-east-1", "issuerURL": "https://oidc.example.com/s-abcde"})
            }
            "create-cluster" => {
                json!({"infra": provision, "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"}})
            }
            "scale-nodepool" => json!({"infraID": "s-abcde", "region": "us-east-1", "nodePool": "np", "replicas": 1,
                "subnetID": "subnet-0123abcd", "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b", "securityGroupIDs": ["sg-0123abcd"]}),
            "create-privatelink" => json!({"name": "s", "infraID": "s-abcde", "region": "us-east-1",
                "management": {"vpcID": "vpc-0123abcd", "subnetIDs": ["subnet-0123abcd"]},
                "guest": {"vpcID": "vpc-4567abcd", "subnetIDs": ["subnet-4567abcd"], "machineCIDR": "10.0.0.0/16"}}),
            "create-management" | "teardown-management" => json!({"region": "us-east-1", "oidcBucket": "s-oidc",
                "namePrefix": "s-abcde", "instanceRoleARN": "arn:aws:iam::123456789012:role/n"}),
            other => panic!("no sample input for workflow {other}: add one, with the cluster it names"),
        }
    }

    /// Every workflow that calls AWS takes the cluster lease once a store is configured: a
    /// workflow added without a cluster (or with its infraID somewhere `of` does not look) fails
    /// here, not as two writers on one cluster.
    #[test]
    fn every_aws_workflow_holds_its_clusters_lease_when_a_store_is_set() {
        crate::hold::lease::configure_lock(crate::hold::lease::LockConfig {
            store: infraflow_activities::cluster_lease::LeaseStore {
                bucket: "leases".into(),
                prefix: "infraflow/leases".into(),
            },
            region: "us-east-1".into(),
            ttl: std::time::Duration::from_secs(30),
            journal: "test".into(),
            host: "test".into(),
        });
        let registry = crate::full_registry(infraflow_activities::AwsPool::new());
        let mut held = Vec::new();
        for def in registry.workflows().filter(|d| !d.iam_actions().is_empty()) {
            let validated = def.validate("w-1", &sample(def.name())).unwrap_or_else(|e| panic!("{}: {e}", def.name()));
            let cluster = of(def.name(), &validated.input).unwrap_or_else(|| panic!("{} names no cluster", def.name()));
            let expected = if def.name().ends_with("-management") { "management.s-abcde" } else { "s-abcde" };
            assert_eq!(cluster.infra_id, expected, "{}", def.name());
            let request = infraflow_engine::HoldRequest {
                workflow: "w-1".into(),
                creator: "c".into(),
                environment: None,
                undoing: false,
                waiting: std::sync::Arc::new(|_| {}),
            };
            assert!(def.hold(request, &validated.input).is_some(), "{} takes no cluster lease", def.name());
            held.push(def.name());
        }
        assert_eq!(held.len(), 8, "the AWS workflows: {held:?}");
    }

    #[test]
    fn a_workflow_of_no_cluster_names_none() {
        assert_eq!(of("canary", &json!({"infraID": "x", "region": "us-east-1"})), None);
        assert_eq!(of("teardown", &json!({"region": "us-east-1"})), None);
    }
}
