//! `infraflow policy`: the least-privilege IAM policy of the named workflows, as IAM JSON; with
//! `--infra-id`, conditioned on that cluster's ownership tag; with `--trust-for`, the trust
//! policy of a role the daemon's principal assumes.

use std::collections::BTreeSet;

use crate::failure::{CmdResult, Failure, OK};

pub fn policy(workflows: &[String], infra_id: Option<&str>) -> CmdResult {
    let registry = crate::registry::full_registry();
    let names: Vec<String> = if workflows.is_empty() {
        registry.workflow_names().iter().map(|n| n.to_string()).collect()
    } else {
        workflows.to_vec()
    };
    let mut grants = Vec::new();
    for name in &names {
        // Not a workflow: `infraflow check`'s reads.
        if name == "check" {
            grants.push(("check", infraflow_workflows::check::iam_actions()));
            continue;
        }
        let def = registry.workflow(name).ok_or_else(|| {
            Failure::usage(format!(
                "unknown workflow {name:?}; known workflows: {}, and check (`infraflow check`'s reads)",
                registry.workflow_names().join(", ")
            ))
        })?;
        grants.push((def.name(), def.iam_actions()));
    }
    let doc = match infra_id {
        None => infraflow_workflows::policy::document(&grants),
        Some(id) => {
            let all: BTreeSet<&'static str> = grants.iter().flat_map(|(_, a)| a.iter().copied()).collect();
            infraflow_workflows::policy::scoped::document(id, &all).map_err(|e| Failure::usage(e.to_string()))?
        }
    };
    let mut doc = doc;
    if let Some(lock) = infraflow_workflows::hold::lease::lock_config() {
        // The cluster lease (`--lock-bucket`): its objects under the prefix, nothing else of the
        // bucket's (the self-test's probes live under the same prefix).
        let objects = format!("arn:aws:s3:::{}/{}/*", lock.store.bucket, lock.store.prefix.trim_end_matches('/'));
        let statement = serde_json::json!({
            "Sid": "ClusterLease",
            "Effect": "Allow",
            "Action": infraflow_activities::cluster_lease::IAM_ACTIONS,
            "Resource": objects,
        });
        if let Some(list) = doc["Statement"].as_array_mut() {
            list.push(statement);
        }
    }
    println!("{}", serde_json::to_string_pretty(&doc).map_err(|e| Failure::other(e.to_string()))?);
    Ok(OK)
}

/// `policy --trust-for PRINCIPAL [--external-id ID]`: the role's trust policy, alone (a role's
/// trust and permissions are two documents wherever a role is written down).
pub fn trust(principal: &str, external_id: Option<&str>, with_permissions: bool) -> CmdResult {
    if with_permissions {
        return Err(Failure::usage(
            "--trust-for prints the role's trust policy alone; run `infraflow policy [WORKFLOW…] [--infra-id ID]` for the permissions it needs",
        ));
    }
    let doc = infraflow_workflows::policy::trust::document(principal, external_id)
        .map_err(|e| Failure::usage(e.to_string()))?;
    println!("{}", serde_json::to_string_pretty(&doc).map_err(|e| Failure::other(e.to_string()))?);
    Ok(OK)
}
