//! Group commit for PostgreSQL: one task takes every queued append and writes them in one
//! transaction (`append::commit_appends`: one pipelined round trip, or two when a summary changed
//! behind the writer's back), so a hundred workflows' steps cost one commit, not a hundred.
//!
//! Why the batch is one round trip: the fold is done in Rust (`rules::fold_append`, as SQLite
//! does), then one `INSERT … SELECT FROM unnest(…)` writes every event and one `UPDATE … FROM
//! unnest(…)` every summary, prepared, pipelined with `BEGIN` and `COMMIT`. The writer folds from
//! the summaries it last committed itself; the `UPDATE` is guarded by each row's sequence number
//! and lease owner (and lease epoch) and aborts the whole transaction (`summaries_unchanged`,
//! SQLSTATE IF001) if anyone changed one since (a cancel, a claim, a release — all of which change
//! one or the other). Then the batch runs the locking way: `SELECT … FOR UPDATE` of the summaries
//! (in id order: no deadlocks), fold, write (two round trips). A fenced-off append fails alone. A
//! claim leaves the writer the summary it committed, so a workflow's first step takes the
//! one-round-trip way too.
//!
//! Every summary `UPDATE` also names its rows by primary key (`w.id = ANY($1)`): joined to `unnest`
//! alone, the generic plan PostgreSQL switches a prepared statement to scanned every summary per
//! append at a few hundred workflows. BENCHMARKS.md has what each step of this bought.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::append::{AppendReq, Written, commit_appends};
use super::pool::SharedPool;
use crate::api::CommitObserver;
use crate::error::{JournalError, Result};
use crate::projection::WorkflowState;

/// As SQLite's writer: lazy records wait this long for company, since nobody waits on them.
const LAZY_LINGER: Duration = Duration::from_millis(5);
const MAX_BATCH: usize = 4096;

pub(crate) struct Job {
    pub req: AppendReq,
    /// None for a lazy append: a refusal resurfaces on the owner's next durable append.
    pub reply: Option<oneshot::Sender<Result<()>>>,
}

/// The writer task's loop: returns when every sender is gone and the queue is empty.
pub(crate) async fn run(
    pool: SharedPool,
    mut rx: mpsc::UnboundedReceiver<Job>,
    observer: Arc<OnceLock<CommitObserver>>,
    written: Arc<Written>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        drain(&mut rx, &mut batch);
        if batch.iter().all(|j| j.reply.is_none()) {
            let deadline = tokio::time::Instant::now() + LAZY_LINGER;
            while let Ok(Some(job)) = tokio::time::timeout_at(deadline, rx.recv()).await {
                let awaited = job.reply.is_some();
                batch.push(job);
                drain(&mut rx, &mut batch);
                if awaited {
                    break;
                }
            }
        }
        let (started, size) = (Instant::now(), batch.len());
        let (reqs, replies): (Vec<AppendReq>, Vec<_>) = batch.into_iter().map(|j| (j.req, j.reply)).unzip();
        let outcome = commit_batch(&pool, &written, reqs).await;
        if let Some(observe) = observer.get() {
            observe(started.elapsed(), size);
        }
        match outcome {
            Ok(results) => {
                for (reply, r) in replies.into_iter().zip(results) {
                    match (reply, r) {
                        (Some(reply), r) => {
                            let _ = reply.send(r.map(|_| ()));
                        }
                        (None, Err(e)) => tracing::debug!(error = %e, "a lazy append was refused"),
                        (None, Ok(_)) => {}
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "journal commit failed");
                let unknown = matches!(e, JournalError::CommitUnknown);
                for reply in replies.into_iter().flatten() {
                    let _ = reply.send(Err(if unknown {
                        JournalError::CommitUnknown
                    } else {
                        JournalError::CommitFailed(e.to_string())
                    }));
                }
            }
        }
    }
}

fn drain(rx: &mut mpsc::UnboundedReceiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

async fn commit_batch(
    pool: &SharedPool,
    written: &Arc<Written>,
    reqs: Vec<AppendReq>,
) -> Result<Vec<Result<WorkflowState>>> {
    let (reqs, written) = (Arc::new(reqs), written.clone());
    pool.run(move |c| {
        let (reqs, written) = (reqs.clone(), written.clone());
        Box::pin(async move { commit_appends(c, &reqs, &written).await })
    })
    .await
}
