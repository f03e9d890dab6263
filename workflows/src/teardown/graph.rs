//! A teardown round's deletes: each resource a journaled, retried step, and the kinds as a
//! dependency graph — a kind starts once every kind it waits for is gone.
//!
//! Why dependency budgets are wall-clock: AWS releases some dependencies asynchronously (a load
//! balancer's network interfaces outlive it by minutes), so a teardown delete (34 attempts of
//! `delete_retry`: `DEFAULT_DELETE_ATTEMPTS` in `workflow`) and an undo (36, the engine's
//! `undo_retry`) each wait about 15 minutes (checked by a test in `workflow` on the policies'
//! nominal budgets) before pausing or ending in `compensation_failed`.

use std::time::Duration;

use infraflow_activities::{AwsPool, Kind, resources};
use infraflow_engine::{RetryPolicy, StepError, StepOptions, WfCtx, join_branches};

use super::discovered::Discovered;
use crate::aws_steps::{DELETE, DeleteOne, from_aws};

/// Deletes `ids` of `kind` side by side, each a journaled step under its key in `ctx`: which of
/// them were still there.
pub(crate) async fn delete_kind(
    ctx: &WfCtx,
    pool: &AwsPool,
    (infra_id, region): (&str, &str),
    (kind, discovered): (Kind, &Discovered),
    ids: &[String],
    keys: impl Iterator<Item = String>,
    max_delete_attempts: u32,
) -> Result<Vec<(String, bool)>, StepError> {
    let deletes = ids.iter().zip(keys).map(|(id, key)| {
        let input = DeleteOne {
            region: region.to_string(),
            kind,
            id: id.clone(),
            incarnation: discovered.incarnation(kind, id),
        };
        async move {
            let options = StepOptions { retry: Some(delete_retry(max_delete_attempts)), undo: None, settle: None };
            let gone: bool = ctx
                .step_with(&key, DELETE, &input, options, || async {
                    let aws = pool.region(&input.region).await;
                    let incarnation = input.incarnation.as_deref();
                    resources::delete_if_still_the_clusters(&aws, input.kind, &input.id, infra_id, incarnation)
                        .await
                        .map_err(from_aws)
                })
                .await?;
            Ok::<_, StepError>((input.id.clone(), gone))
        }
    });
    join_branches(deletes).await
}

type KindDeletes<'a> =
    std::pin::Pin<Box<dyn Future<Output = (Kind, Result<Vec<(String, bool)>, StepError>)> + Send + 'a>>;

/// Deletes the inventory as a dependency graph: each kind starts as soon as every kind it waits
/// for (`Kind::deleted_after`, followed through kinds the cluster does not have) is deleted, so
/// what nothing waits on goes at once. Each kind's deletes are a scope of their own
/// (`delete/<kind>`), so their journal positions do not depend on which kind finished first.
/// Like `join_branches`, a failure starts nothing more, waits for what is in flight, and returns
/// the most telling error.
pub(crate) async fn delete_as_graph(
    rctx: &WfCtx,
    pool: &AwsPool,
    cluster: (&str, &str),
    discovered: &Discovered,
    max_delete_attempts: u32,
) -> Result<Vec<(Kind, Vec<(String, bool)>)>, StepError> {
    use futures::StreamExt;
    let inventory = discovered.found();
    let present: Vec<Kind> = inventory.keys().copied().collect();
    let waits_for = |kind: Kind| -> Vec<Kind> {
        let mut seen: Vec<Kind> = Vec::new();
        let mut todo: Vec<Kind> = kind.deleted_after().to_vec();
        while let Some(k) = todo.pop() {
            if !seen.contains(&k) {
                seen.push(k);
                todo.extend_from_slice(k.deleted_after());
            }
        }
        seen.retain(|k| present.contains(k));
        seen
    };
    let mut started: Vec<Kind> = Vec::new();
    let mut done: Vec<Kind> = Vec::new();
    let mut running: futures::stream::FuturesUnordered<KindDeletes<'_>> = futures::stream::FuturesUnordered::new();
    let mut out = Vec::new();
    let mut worst: Option<StepError> = None;
    loop {
        if worst.is_none() {
            for &kind in &present {
                if !started.contains(&kind) && waits_for(kind).iter().all(|k| done.contains(k)) {
                    started.push(kind);
                    let ctx = rctx.scoped(&format!("delete/{}", kind.as_str()));
                    let ids = &inventory[&kind];
                    running.push(Box::pin(async move {
                        let keys = ids.iter().cloned();
                        (
                            kind,
                            delete_kind(&ctx, pool, cluster, (kind, discovered), ids, keys, max_delete_attempts).await,
                        )
                    }));
                }
            }
        }
        match running.next().await {
            None => break,
            Some((kind, Ok(gone))) => {
                done.push(kind);
                out.push((kind, gone));
            }
            Some((_, Err(e))) => {
                if worst.as_ref().is_none_or(|w| e.severity() > w.severity()) {
                    worst = Some(e);
                }
            }
        }
    }
    match worst {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// DependencyViolation is waited out (15 minutes by default), then the workflow pauses naming
/// the resource that could not be deleted.
pub(crate) fn delete_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        initial: Duration::from_secs(2),
        coefficient: 2.0,
        max_interval: Duration::from_secs(30),
        max_attempts,
        jitter: 0.2,
    }
}
