//! `infraflow policy`: the least-privilege IAM policy of the named workflows, as IAM JSON.

use crate::failure::{CmdResult, Failure, OK};

pub fn policy(workflows: &[String]) -> CmdResult {
    let registry = crate::registry::full_registry();
    let names: Vec<String> = if workflows.is_empty() {
        registry.workflow_names().iter().map(|n| n.to_string()).collect()
    } else {
        workflows.to_vec()
    };
    let mut grants = Vec::new();
    for name in &names {
        let def = registry.workflow(name).ok_or_else(|| {
            Failure::usage(format!(
                "unknown workflow {name:?}; known workflows: {}",
                registry.workflow_names().join(", ")
            ))
        })?;
        grants.push((def.name(), def.iam_actions()));
    }
    let doc = infraflow_workflows::policy::document(&grants);
    println!("{}", serde_json::to_string_pretty(&doc).map_err(|e| Failure::other(e.to_string()))?);
    Ok(OK)
}
