//! The rules of the worker group that nobody owns (neither the provision's nor a controller's),
//! taken out by a provision as journaled steps (flow version 4): read first — the rules are that
//! step's output, named in `history` — then revoked with a write-ahead undo that authorizes them
//! again, so a rollback gives a person's rules back (SAFETY-A7937A6 G7: a provision run again
//! revoked them, journaled nothing and undid nothing).

use infraflow_activities::security::{self, IngressRule, Rule};
use infraflow_activities::{AssumedRole, AwsPool};
use infraflow_engine::{Registry, StepError, StepOptions};
use infraflow_journal::Undo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::plan::Plan;
use crate::aws_steps::{aws_retry, from_aws, read_opts};

/// The compensation of the revoke: the rules go back as they were.
pub(crate) const RESTORE_INGRESS: &str = "ec2.restore-ingress";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Restore {
    region: String,
    group: String,
    rules: Vec<IngressRule>,
    /// Given at compensation (`role_context`), never journaled here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    role: Option<AssumedRole>,
}

pub(crate) fn register_undo(r: &mut Registry, pool: AwsPool) {
    r.add_undo(RESTORE_INGRESS, move |input: Value| {
        let pool = pool.clone();
        async move {
            let d: Restore = serde_json::from_value(input)
                .map_err(|e| infraflow_engine::ActivityError::terminal(format!("bad undo input: {e}")))?;
            let aws = pool.assuming(d.role.as_ref()).region(&d.region).await;
            security::restore_ingress(&aws, &d.group, &d.rules).await.map_err(from_aws)?;
            Ok(serde_json::json!({ "restored": d.rules.iter().map(IngressRule::describe).collect::<Vec<_>>() }))
        }
    });
}

/// Reads the worker group `group`'s rules that are neither `wanted` nor a controller's (in a
/// group infraflow made), and revokes exactly those. Returns them.
pub(super) async fn revoke_unwanted(
    plan: &Plan<'_>,
    group: &str,
    wanted: &[Rule],
) -> Result<Vec<IngressRule>, StepError> {
    // A scope of their own: they start when the group's branch has joined, at a moment the
    // network's steps do not wait for, so they must not take positions among the network's.
    let ctx = plan.ctx.scoped("worker-sg");
    let found: Vec<IngressRule> = ctx
        .step_with("unwanted", "ec2.read-unwanted-ingress", &(group, wanted), read_opts(), || async {
            let aws = plan.pool.region(plan.region).await;
            security::unwanted_ingress(&aws, group, wanted).await.map_err(from_aws)
        })
        .await?;
    if found.is_empty() {
        return Ok(found);
    }
    for r in &found {
        tracing::info!(group, rule = %r.describe(), description = %r.description, "revoking a rule nobody owns from the worker group (undone at rollback)");
    }
    let restore =
        Restore { region: plan.region.to_string(), group: group.to_string(), rules: found.clone(), role: None };
    let options = StepOptions {
        retry: Some(aws_retry()),
        undo: Some(Undo {
            activity: RESTORE_INGRESS.to_string(),
            input: serde_json::to_value(&restore).unwrap_or(Value::Null),
        }),
        settle: None,
    };
    let _: Vec<String> = ctx
        .step_with("revoke", "ec2.revoke-unwanted-ingress", &(group, &found), options, || async {
            let aws = plan.pool.region(plan.region).await;
            security::revoke_ingress(&aws, group, &found).await.map_err(from_aws)?;
            Ok(found.iter().map(IngressRule::describe).collect())
        })
        .await?;
    Ok(found)
}
