//! The per-cluster queue and lease acquisition: who may run a workflow now, inside the
//! transaction that takes its lease.

use rusqlite::{Connection, OptionalExtension, params};

use crate::append::append_tx;
use crate::error::{JournalError, Result};
use crate::event::Event;
use crate::journal::AcquireOutcome;
use crate::owner::owner_is_gone;
use crate::projection::WorkflowState;

/// Whether the workflow ever started: a lease was taken or a step journaled.
pub(crate) fn ever_started(c: &Connection, id: &str) -> Result<bool> {
    Ok(c.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM events WHERE workflow_id = ?1
           AND kind IN ('step_started', 'step_completed', 'step_failed', 'lease_taken'))",
    )?
    .query_row([id], |r| r.get(0))?)
}

/// The workflow that `id` must wait for on its cluster, if any. The rule: workflows of one
/// cluster run one at a time in ticket order (a ticket is taken at submit, and again when a
/// finished workflow is retried), an unfinished one (paused included) keeps the cluster, and
/// nothing starts while another workflow of the cluster holds a live lease.
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
        .prepare_cached(
            "SELECT o.id, o.workflow, o.state FROM workflows o, workflows w
             WHERE w.id = ?1 AND o.cluster = ?2 AND o.id <> w.id
               AND ((o.ticket < w.ticket AND o.state NOT IN ('completed','failed','compensated','compensation_failed'))
                    OR (o.lease_owner IS NOT NULL AND o.lease_expires_at >= ?3))
             ORDER BY o.ticket LIMIT 1",
        )?
        .query_row(params![id, cluster, now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(row
        .map(|(bid, workflow, state)| (bid, workflow, WorkflowState::parse(&state).unwrap_or(WorkflowState::Running))))
}

pub(crate) fn acquire_tx(c: &Connection, id: &str, me: &str, now: i64, ttl_ms: i64) -> Result<AcquireOutcome> {
    let row: Option<(String, Option<String>, Option<i64>, String)> = c
        .prepare_cached("SELECT state, lease_owner, lease_expires_at, cluster FROM workflows WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?;
    let Some((state, owner, expires, cluster)) = row else {
        return Err(JournalError::UnknownWorkflow(id.to_string()));
    };
    let state = WorkflowState::parse(&state).unwrap_or(WorkflowState::Failed);
    if !state.is_runnable() {
        return Ok(AcquireOutcome::NotRunnable(state));
    }
    if let Some(o) = &owner {
        let free = o == me || expires.is_none_or(|t| t < now) || owner_is_gone(o);
        if !free {
            return Ok(AcquireOutcome::HeldBy(o.clone()));
        }
    }
    if let Some((bid, workflow, bstate)) = cluster_blocker(c, id, &cluster, now)? {
        return Ok(AcquireOutcome::WaitingFor { id: bid, workflow, state: bstate });
    }
    c.prepare_cached("UPDATE workflows SET lease_owner = ?2, lease_expires_at = ?3 WHERE id = ?1")?
        .execute(params![id, me, now + ttl_ms])?;
    if owner.as_deref() == Some(me) {
        return Ok(AcquireOutcome::Acquired { previous: None });
    }
    append_tx(c, id, Some(me), &[Event::LeaseTaken { owner: me.to_string(), previous: owner.clone() }], now)?;
    Ok(AcquireOutcome::Acquired { previous: owner })
}
