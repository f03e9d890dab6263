//! Least-privilege IAM policies: the AWS actions a workflow may call, composed from what each
//! activities file declares that its lookups, creates and deletes call, and the policy document
//! `infraflow policy` prints. The AWS suites prove the declarations complete: every call a
//! workflow makes through the test proxy is in its policy.

use std::collections::BTreeSet;

use infraflow_activities as act;
use serde_json::{Value, json};

pub mod scoped;
pub mod trust;

/// One activities file's declared actions.
#[derive(Clone, Copy)]
pub struct Area {
    read: &'static [&'static str],
    write: &'static [&'static str],
    delete: &'static [&'static str],
}

macro_rules! area {
    ($m:ident) => {
        Area { read: act::$m::IAM_READ, write: act::$m::IAM_WRITE, delete: act::$m::IAM_DELETE }
    };
}

pub const NETWORK: Area = area!(network);
pub const NAT: Area = area!(nat);
pub const ROUTING: Area = area!(routing);
pub const SECURITY: Area = area!(security);
pub const ENDPOINTS: Area = area!(endpoints);
pub const PRIVATELINK: Area = area!(privatelink);
pub const ELB: Area = area!(elb);
pub const CLASSIC_ELB: Area = area!(classic_elb);
pub const COMPUTE: Area = area!(compute);
pub const DNS: Area = area!(dns);
pub const IAM: Area = area!(iam);
/// Explaining a DependencyViolation (which network interfaces hold a subnet or group).
pub const RESOURCES: Area = area!(resources);
/// What a running cluster's controllers leave: EBS volumes and snapshots, network interfaces.
pub const EBS: Area = area!(ebs);
pub const INTERFACES: Area = area!(interfaces);
/// The teardown's last check: what still carries the cluster's tag, of any service.
pub const TAGGING: Area = area!(tagging);
/// The image registry's bucket of a cluster that ran.
pub const S3: Area = area!(s3);
/// A customer's network (bring your own VPC): read and checked, its subnets and VPC marked.
pub const CUSTOMER_NETWORK: Area = area!(customer_network);
/// The janitor's census of the account's clusters, and teardown's protection check.
pub const CENSUS: Area = area!(census);
/// `infraflow check`: everything in a cluster's VPC, read.
pub const VPC_STATE: Area = area!(vpc_state);
/// A provision's quota check: Service Quotas and the account's usage, read.
pub const QUOTAS: Area = area!(quotas);

/// Every area, for the checks that run over all of them.
pub const ALL_AREAS: [Area; 20] = [
    NETWORK,
    NAT,
    ROUTING,
    SECURITY,
    ENDPOINTS,
    PRIVATELINK,
    ELB,
    CLASSIC_ELB,
    COMPUTE,
    DNS,
    IAM,
    RESOURCES,
    CENSUS,
    EBS,
    INTERFACES,
    TAGGING,
    S3,
    CUSTOMER_NETWORK,
    VPC_STATE,
    QUOTAS,
];

/// What a workflow does in an area.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Looks things up only.
    Read,
    /// Creates and configures, and deletes what it created when compensating.
    Manage,
    /// Finds and deletes (teardown).
    Remove,
}

/// The actions of an AWS workflow that uses these areas so, plus the environment probe every AWS
/// workflow journals first.
pub fn actions(uses: &[(Area, Use)]) -> BTreeSet<&'static str> {
    let mut out: BTreeSet<&'static str> = act::IAM_ENVIRONMENT.iter().copied().collect();
    for (area, how) in uses {
        out.extend(area.read);
        if *how == Use::Manage {
            out.extend(area.write);
        }
        if matches!(how, Use::Manage | Use::Remove) {
            out.extend(area.delete);
        }
    }
    // A workflow that creates also rolls back, and a rollback removes the adoption marks its
    // workflow wrote (`marks`).
    if uses.iter().any(|(_, how)| *how == Use::Manage) {
        out.extend(act::marks::IAM_READ);
        out.extend(act::marks::IAM_WRITE);
    }
    out
}

/// An IAM policy document (version 2012-10-17): one statement per workflow, `Resource: *`
/// (infraflow finds its resources by tag; `scoped` conditions each action on one cluster's tag).
pub fn document(workflows: &[(&str, BTreeSet<&'static str>)]) -> Value {
    let statements: Vec<Value> = workflows
        .iter()
        .filter(|(_, actions)| !actions.is_empty())
        .map(|(name, actions)| {
            json!({
                "Sid": statement_id(name),
                "Effect": "Allow",
                "Action": actions.iter().collect::<Vec<_>>(),
                "Resource": "*",
            })
        })
        .collect();
    json!({"Version": "2012-10-17", "Statement": statements})
}

/// `provision-infra` → `ProvisionInfra` (a statement id is alphanumeric).
fn statement_id(name: &str) -> String {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_teardown_area_grants_lookups_and_deletes_but_no_create() {
        let a = actions(&[(NETWORK, Use::Remove)]);
        assert!(a.contains("ec2:DeleteVpc") && a.contains("ec2:DescribeVpcs"));
        assert!(!a.contains("ec2:CreateVpc"));
        assert!(a.contains("sts:GetCallerIdentity"));
    }

    #[test]
    fn statement_ids_are_alphanumeric() {
        assert_eq!(statement_id("provision-infra"), "ProvisionInfra");
        assert_eq!(statement_id("create-cluster"), "CreateCluster");
    }

    #[test]
    fn every_declared_action_is_service_colon_action() {
        for area in ALL_AREAS {
            for a in area.read.iter().chain(area.write).chain(area.delete) {
                let (service, action) = a.split_once(':').unwrap();
                assert!(
                    ["ec2", "elasticloadbalancing", "route53", "iam", "sts", "tag", "s3", "servicequotas"]
                        .contains(&service),
                    "{a}"
                );
                assert!(action.chars().next().is_some_and(|c| c.is_ascii_uppercase()), "{a}");
            }
        }
    }
}
