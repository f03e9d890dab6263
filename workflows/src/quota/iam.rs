//! Whether a create-iam (or create-cluster's IAM) fits the account's IAM quotas before it is
//! journaled: the roles and the instance profile it makes, less those of its names that exist
//! already (a run again keeps them), against IAM's account-wide quota less what the account has.
//! One `GetAccountSummary` when it fits; a read of each name only when that count says it would
//! not.

use infraflow_activities::iam::{iam_existing, iam_room};
use infraflow_activities::{AwsError, AwsPool};
use serde_json::Value;

use crate::cluster_roles::{KMS_PROVIDER_SUFFIX, OPERATOR_ROLES, worker_names};

/// The roles and instance profiles a create-iam of cluster `infra` makes, by name (HyperShift's:
/// the seven operator roles, the KMS provider's with a key, the workers' role and profile).
pub fn names_made(infra: &str, kms: bool) -> (Vec<String>, Vec<String>) {
    let mut roles: Vec<String> = OPERATOR_ROLES.iter().map(|r| r.name(infra)).collect();
    if kms {
        roles.push(format!("{infra}-{KMS_PROVIDER_SUFFIX}"));
    }
    let (role, _, profile) = worker_names(infra);
    roles.push(role);
    (roles, vec![profile])
}

/// The cluster, region and whether a KMS key is named, of a workflow that makes IAM.
fn makes_iam(workflow: &str, input: &Value) -> Option<(String, String, bool)> {
    let (infra, iam) = match workflow {
        "create-iam" => (input, input),
        "create-cluster" if input.get("iam").is_some_and(|i| !i.is_null()) => (&input["infra"], &input["iam"]),
        _ => return None,
    };
    let id = infra["infraID"].as_str()?.to_string();
    let region = infra["region"].as_str()?.to_string();
    Some((id, region, iam.get("kmsKeyARN").is_some_and(|k| !k.is_null())))
}

/// What the IAM a workflow of `input` makes would overrun, as phrases (`needs 9 IAM roles, 3
/// free (quota 1000, 997 in use)`); none for a workflow that makes no IAM.
pub async fn shortfalls_before_submit(pool: &AwsPool, workflow: &str, input: &Value) -> Result<Vec<String>, AwsError> {
    let Some((infra, region, kms)) = makes_iam(workflow, input) else { return Ok(Vec::new()) };
    let (roles, profiles) = names_made(&infra, kms);
    let aws = pool.region(&region).await;
    let room = iam_room(&aws).await?;
    let free = |(in_use, quota): (u32, u32)| quota.saturating_sub(in_use);
    let (mut new_roles, mut new_profiles) = (roles.len() as u32, profiles.len() as u32);
    if new_roles > free(room.roles) || new_profiles > free(room.profiles) {
        let (had_roles, had_profiles) = iam_existing(&aws, &roles, &profiles).await?;
        new_roles -= had_roles.min(new_roles);
        new_profiles -= had_profiles.min(new_profiles);
    }
    let mut out = Vec::new();
    for (new, (in_use, quota), one, many) in [
        (new_roles, room.roles, "IAM role", "IAM roles"),
        (new_profiles, room.profiles, "instance profile", "instance profiles"),
    ] {
        if new > free((in_use, quota)) {
            let free = free((in_use, quota));
            out.push(format!(
                "needs {new} {}, {free} free (quota {quota}, {in_use} in use)",
                if new == 1 { one } else { many }
            ));
        }
    }
    Ok(out)
}
