//! The per-cluster queue and lease acquisition: who may run a workflow now, inside the
//! transaction that takes its lease.

use rusqlite::{Connection, OptionalExtension, params};

use super::append::append_tx;
use crate::api::{AcquireOutcome, Fence};
use crate::error::{JournalError, Result};
use crate::event::Event;
use crate::projection::WorkflowState;
use crate::rules::{CLUSTER_BLOCKER_SQL, lease_is_free};

/// Whether the workflow ever started: a lease was taken or a step journaled.
pub(crate) fn ever_started(c: &Connection, id: &str) -> Result<bool> {
    Ok(c.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM events WHERE workflow_id = ?1
           AND kind IN ('step_started', 'step_completed', 'step_failed', 'lease_taken'))",
    )?
    .query_row([id], |r| r.get(0))?)
}

/// The workflow that `id` must wait for on its cluster, if any (`rules::CLUSTER_BLOCKER_SQL`).
pub(crate) fn cluster_blocker(
    c: &Connection,
    id: &str,
    cluster: &str,
    now: i64,
) -> Result<Option<(String, String, WorkflowState)>> {
    if cluster.is_empty() {
        return Ok(None);
    }
    let row: Option<(String, String, String)> = c
        .prepare_cached(CLUSTER_BLOCKER_SQL)?
        .query_row(params![id, cluster, now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(row
        .map(|(bid, workflow, state)| (bid, workflow, WorkflowState::parse(&state).unwrap_or(WorkflowState::Running))))
}

/// What a claim reads of a workflow: state, lease owner, lease expiry, cluster, sequence number.
type ClaimRow = (String, Option<String>, Option<i64>, String, i64);

pub(crate) fn acquire_tx(c: &Connection, id: &str, me: &str, now: i64, ttl_ms: i64) -> Result<AcquireOutcome> {
    let row: Option<ClaimRow> = c
        .prepare_cached("SELECT state, lease_owner, lease_expires_at, cluster, seq FROM workflows WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .optional()?;
    let Some((state, owner, expires, cluster, seq)) = row else {
        return Err(JournalError::UnknownWorkflow(id.to_string()));
    };
    let state = WorkflowState::parse(&state).unwrap_or(WorkflowState::Failed);
    if !state.is_runnable() {
        return Ok(AcquireOutcome::NotRunnable(state));
    }
    if !lease_is_free(owner.as_deref(), expires, me, now) {
        return Ok(AcquireOutcome::HeldBy(owner.unwrap_or_default()));
    }
    if let Some((bid, workflow, bstate)) = cluster_blocker(c, id, &cluster, now)? {
        return Ok(AcquireOutcome::WaitingFor { id: bid, workflow, state: bstate });
    }
    // Every acquisition is a new epoch, its own owner's included: the `LeaseTaken` about to be
    // appended is its sequence number.
    let fence = Fence { owner: me.to_string(), epoch: seq + 1 };
    c.prepare_cached("UPDATE workflows SET lease_owner = ?2, lease_expires_at = ?3, lease_epoch = ?4 WHERE id = ?1")?
        .execute(params![id, me, now + ttl_ms, fence.epoch])?;
    append_tx(c, id, Some(&fence), &[Event::LeaseTaken { owner: me.to_string(), previous: owner.clone() }], now)?;
    let previous = owner.filter(|o| o != me);
    Ok(AcquireOutcome::Acquired { previous, fence })
}
