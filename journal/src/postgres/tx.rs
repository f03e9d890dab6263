//! The PostgreSQL journal's write transactions other than appends (`append`): submitting,
//! claiming a lease (`FOR UPDATE SKIP LOCKED`, the cluster queue under an advisory lock),
//! renewing, releasing, and the cancel and resume requests. The decisions are
//! `rules`'s, shared with SQLite; only the SQL is here.

use std::collections::HashMap;

use serde_json::Value;
use tokio_postgres::{GenericClient, Statement};

use super::append::{AppendReq, AppendStatements, NOTIFY_SQL, Written, append_one, append_one_hinted, lock_summaries};
use super::pool::{Conn, commit};
use crate::api::{AcquireOutcome, Fence, NewWorkflow, Renewal, RequestOutcome, SubmitOutcome};
use crate::error::{JournalError, Result};
use crate::event::Event;
use crate::projection::WorkflowState;
use crate::rules::{
    CLUSTER_BLOCKER_SQL, CancelPlan, LATER_STARTED_SQL, ResumePlan, lease_is_free, plan_cancel, plan_resume,
};

const SUBMIT_SQL: &str =
    "INSERT INTO workflows (id, workflow, input, cluster, no_rollback, created_at, updated_at, seq,
                                    state, attempts, cancel_requested, ticket)
     VALUES ($1, $2, $3, $4, $5, $6, $6, 0, 'pending', 0, false, nextval('tickets'))
     ON CONFLICT (id) DO NOTHING";
const SUBMITTED_SQL: &str = "SELECT workflow, input, no_rollback FROM workflows WHERE id = $1";
const PRUNED_SQL: &str = "SELECT EXISTS (SELECT 1 FROM archived_workflows WHERE id = $1)";
/// SKIP LOCKED: a row another daemon is claiming this instant is theirs to decide.
const CLAIM_SQL: &str =
    "SELECT state, lease_owner, lease_expires_at, cluster, now_ms(), seq FROM workflows WHERE id = $1
     FOR UPDATE SKIP LOCKED";
const EXISTS_SQL: &str = "SELECT EXISTS (SELECT 1 FROM workflows WHERE id = $1)";
const CLUSTER_LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(hashtextextended('infraflow/cluster/' || $1, 0))";
const TAKE_SQL: &str =
    "UPDATE workflows SET lease_owner = $2, lease_expires_at = now_ms() + $3, lease_epoch = $4 WHERE id = $1";
const RENEW_SQL: &str = "UPDATE workflows SET lease_expires_at = now_ms() + $3 WHERE id = ANY($1) AND lease_owner = $2
     RETURNING id, cancel_requested";
const RELEASE_SQL: &str =
    "UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL WHERE id = ANY($1) AND lease_owner = $2";

pub(crate) async fn submit(c: &mut Conn, new: &NewWorkflow) -> Result<SubmitOutcome> {
    let [insert, existing, pruned, cluster_lock] =
        c.prepared_all([SUBMIT_SQL, SUBMITTED_SQL, PRUNED_SQL, CLUSTER_LOCK_SQL]).await?;
    let appends = AppendStatements::of(c).await?;
    let tx = c.transaction().await?;
    if !new.cluster.is_empty() {
        // The ticket is taken under the cluster's lock, which is held until COMMIT: a ticket of a
        // cluster never becomes visible after a higher one (a claim takes the same lock).
        tx.execute(&cluster_lock, &[&new.cluster]).await?;
    }
    let input = serde_json::to_string(&new.input)?;
    let inserted =
        tx.execute(&insert, &[&new.id, &new.workflow, &input, &new.cluster, &new.no_rollback, &new.at]).await?;
    if inserted == 0 {
        let r = tx.query_one(&existing, &[&new.id]).await?;
        let (workflow, input, no_rollback): (String, String, bool) = (r.get(0), r.get(1), r.get(2));
        let input: Value = serde_json::from_str(&input)?;
        return Ok(if workflow == new.workflow && input == new.input && no_rollback == new.no_rollback {
            SubmitOutcome::AlreadyExists
        } else {
            SubmitOutcome::Conflict { existing_workflow: workflow }
        });
    }
    // Checked after the INSERT: a prune that moves this id commits either before this statement
    // (seen here) or after our INSERT waited for its delete (then the id was live: a conflict).
    if tx.query_one(&pruned, &[&new.id]).await?.get::<_, bool>(0) {
        return Ok(SubmitOutcome::Archived);
    }
    let submitted = Event::Submitted {
        workflow: new.workflow.clone(),
        input: new.input.clone(),
        no_rollback: new.no_rollback,
        code_version: new.code_version,
        creator: new.creator.clone(),
        submitter: new.submitter.clone(),
        traceparent: new.traceparent.clone(),
    };
    append_one(&tx, &appends, AppendReq { id: new.id.clone(), fence: None, events: vec![submitted], at: new.at })
        .await?;
    commit(tx).await?;
    Ok(SubmitOutcome::Created)
}

/// The workflow `id` must wait for on its cluster, if any, by the database's clock `now`
/// (`rules::CLUSTER_BLOCKER_SQL`, as SQLite).
pub(crate) async fn cluster_blocker(
    c: &impl GenericClient,
    blocker: &Statement,
    id: &str,
    cluster: &str,
    now: i64,
) -> Result<Option<(String, String, WorkflowState)>> {
    if cluster.is_empty() {
        return Ok(None);
    }
    let row = c.query_opt(blocker, &[&id, &cluster, &now]).await?;
    Ok(row.map(|r| (r.get(0), r.get(1), WorkflowState::parse(r.get(2)).unwrap_or(WorkflowState::Running))))
}

/// Takes the lease of `id` for `me` if it is free; the summary it leaves is `written`'s hint.
pub(crate) async fn acquire(
    c: &mut Conn,
    written: &Written,
    id: &str,
    me: &str,
    at: i64,
    ttl_ms: i64,
) -> Result<AcquireOutcome> {
    let [claim, exists, cluster_lock, blocker, take] =
        c.prepared_all([CLAIM_SQL, EXISTS_SQL, CLUSTER_LOCK_SQL, CLUSTER_BLOCKER_SQL, TAKE_SQL]).await?;
    let appends = AppendStatements::of(c).await?;
    let tx = c.transaction().await?;
    let row = tx.query_opt(&claim, &[&id]).await?;
    let Some(row) = row else {
        let exists: bool = tx.query_one(&exists, &[&id]).await?.get(0);
        return if exists {
            Ok(AcquireOutcome::HeldBy("another daemon claiming it this instant".into()))
        } else {
            Err(JournalError::UnknownWorkflow(id.to_string()))
        };
    };
    let (owner, expires, cluster, now): (Option<String>, Option<i64>, String, i64) =
        (row.get(1), row.get(2), row.get(3), row.get(4));
    let state = WorkflowState::parse(row.get(0)).unwrap_or(WorkflowState::Failed);
    if !state.is_runnable() {
        return Ok(AcquireOutcome::NotRunnable(state));
    }
    if !lease_is_free(owner.as_deref(), expires, me, now) {
        return Ok(AcquireOutcome::HeldBy(owner.unwrap_or_default()));
    }
    if !cluster.is_empty() {
        // One claim at a time per cluster, on every host: the check below and the lease it
        // allows are one decision.
        tx.execute(&cluster_lock, &[&cluster]).await?;
    }
    if let Some((bid, workflow, bstate)) = cluster_blocker(&tx, &blocker, id, &cluster, now).await? {
        return Ok(AcquireOutcome::WaitingFor { id: bid, workflow, state: bstate });
    }
    // Every acquisition is a new epoch, its own owner's included: the `LeaseTaken` about to be
    // appended is its sequence number.
    let fence = Fence { owner: me.to_string(), epoch: row.get::<_, i64>(5) + 1 };
    tx.execute(&take, &[&id, &me, &ttl_ms, &fence.epoch]).await?;
    let taken = Event::LeaseTaken { owner: me.to_string(), previous: owner.clone() };
    let req = AppendReq { id: id.to_string(), fence: Some(fence.clone()), events: vec![taken], at };
    let (_, current) = append_one_hinted(&tx, &appends, req).await?;
    commit(tx).await?;
    written.remember(current);
    Ok(AcquireOutcome::Acquired { previous: owner.filter(|o| o != me), fence })
}

pub(crate) async fn renew(c: &mut Conn, owner: &str, ids: &[String], ttl_ms: i64) -> Result<Vec<Renewal>> {
    let renew = c.prepared(RENEW_SQL).await?;
    let rows = c.query(&renew, &[&ids, &owner, &ttl_ms]).await?;
    let held: HashMap<String, bool> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(ids
        .iter()
        .map(|id| Renewal {
            id: id.clone(),
            held: held.contains_key(id),
            cancel_requested: held.get(id) == Some(&true),
        })
        .collect())
}

pub(crate) async fn release(c: &mut Conn, owner: &str, ids: &[String]) -> Result<()> {
    let [release, notify] = c.prepared_all([RELEASE_SQL, NOTIFY_SQL]).await?;
    let tx = c.transaction().await?;
    let n = tx.execute(&release, &[&ids, &owner]).await?;
    if n > 0 {
        tx.execute(&notify, &[&super::listen::WORK_CHANNEL]).await?;
    }
    commit(tx).await
}

pub(crate) async fn request_cancel(c: &mut Conn, id: &str, at: i64) -> Result<RequestOutcome> {
    let appends = AppendStatements::of(c).await?;
    let tx = c.transaction().await?;
    let mut current = lock_summaries(&tx, &appends.lock, &[id]).await?;
    let cur = current.remove(id).ok_or_else(|| JournalError::UnknownWorkflow(id.to_string()))?;
    let started = if cur.summary.state == WorkflowState::Pending && cur.lease.owner.is_none() {
        tx.query_one(
            "SELECT EXISTS (SELECT 1 FROM events WHERE workflow_id = $1
               AND kind IN ('step_started', 'step_completed', 'step_failed', 'lease_taken'))",
            &[&id],
        )
        .await?
        .get(0)
    } else {
        true
    };
    let outcome = match plan_cancel(&cur.summary, cur.lease.owner.as_deref(), || Ok(started))? {
        CancelPlan::NotApplicable(s) => RequestOutcome::NotApplicable(s),
        CancelPlan::AlreadyRequested(s) => RequestOutcome::AlreadyRequested(s),
        CancelPlan::Append(events) => RequestOutcome::Done(
            append_one(&tx, &appends, AppendReq { id: id.to_string(), fence: None, events, at }).await?,
        ),
    };
    commit(tx).await?;
    Ok(outcome)
}

pub(crate) async fn request_resume(c: &mut Conn, id: &str, at: i64) -> Result<RequestOutcome> {
    let appends = AppendStatements::of(c).await?;
    let tx = c.transaction().await?;
    let mut current = lock_summaries(&tx, &appends.lock, &[id]).await?;
    let cur = current.remove(id).ok_or_else(|| JournalError::UnknownWorkflow(id.to_string()))?;
    let later = if cur.summary.state == WorkflowState::CompensationFailed {
        // Under the cluster's lock, as a claim checks the queue: either a later workflow's claim
        // committed first (seen here) or it will see this compensation ahead of it.
        let cluster: String = tx.query_one("SELECT cluster FROM workflows WHERE id = $1", &[&id]).await?.get(0);
        if !cluster.is_empty() {
            tx.execute(CLUSTER_LOCK_SQL, &[&cluster]).await?;
        }
        tx.query_opt(LATER_STARTED_SQL, &[&id]).await?.map(|r| r.get::<_, String>(0))
    } else {
        None
    };
    let outcome = match plan_resume(cur.summary.state, || Ok(later))? {
        ResumePlan::Superseded(by) => RequestOutcome::Superseded { by },
        ResumePlan::NotApplicable(s) => RequestOutcome::NotApplicable(s),
        ResumePlan::AlreadyRequested(s) => RequestOutcome::AlreadyRequested(s),
        ResumePlan::Resume { requeue } => {
            let req = AppendReq { id: id.to_string(), fence: None, events: vec![Event::ResumeRequested], at };
            let s = append_one(&tx, &appends, req).await?;
            if requeue {
                // As at submit: the new ticket is taken under the cluster's lock.
                let cluster: String = tx.query_one("SELECT cluster FROM workflows WHERE id = $1", &[&id]).await?.get(0);
                if !cluster.is_empty() {
                    tx.execute(CLUSTER_LOCK_SQL, &[&cluster]).await?;
                }
                tx.execute("UPDATE workflows SET ticket = nextval('tickets') WHERE id = $1", &[&id]).await?;
            }
            RequestOutcome::Done(s)
        }
    };
    commit(tx).await?;
    Ok(outcome)
}
