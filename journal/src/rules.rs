//! What every backend's transactions decide the same way — fencing an append and folding it into
//! the summary, whether a lease is free, what a cancel or resume request does — so SQLite and
//! PostgreSQL differ only in their SQL.
//!
//! Why the workflows of one cluster are serialized by ticket (`CLUSTER_BLOCKER_SQL`: one at a time,
//! in the order they were submitted or retried): simpler than ordering by "became runnable"
//! timestamps, and immune to clock steps. `status ID` shows what a workflow waits for as
//! `waitingFor`.

use crate::api::Fence;
use crate::error::{JournalError, Result};
use crate::event::Event;
use crate::owner::owner_is_gone;
use crate::projection::{Summary, WorkflowState};

/// One event as stored: its sequence number, kind, step and JSON.
pub(crate) struct EventRow {
    pub seq: i64,
    pub kind: &'static str,
    pub step: Option<String>,
    pub data: String,
}

/// An append decided: the rows to insert and the summary row to write.
pub(crate) struct Folded {
    pub summary: Summary,
    pub rows: Vec<EventRow>,
    /// The last sequence number after the append.
    pub seq: i64,
    /// The output's JSON, only when the append changed it (the column is written only then).
    pub output: Option<String>,
    pub state_changed: bool,
}

/// The lease a summary row records: its owner and the epoch of the acquisition that took it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeldLease {
    pub owner: Option<String>,
    pub epoch: Option<i64>,
}

/// Fences (`fence`: the acquisition the caller believes holds the lease; `None` for requests that
/// need no lease) and folds `events` into a summary whose last sequence number is `seq` and whose
/// lease is `held`.
pub(crate) fn fold_append(
    id: &str,
    mut summary: Summary,
    mut seq: i64,
    held: &HeldLease,
    fence: Option<&Fence>,
    events: &[Event],
) -> Result<Folded> {
    if let Some(f) = fence
        && (held.owner.as_deref() != Some(f.owner.as_str()) || held.epoch != Some(f.epoch))
    {
        let holder = match held.owner.as_deref() {
            None => "nobody".to_string(),
            // Same owner, later acquisition: this append was left over from an earlier one.
            Some(o) if o == f.owner => format!("{o} again (a later acquisition, epoch {})", held.epoch.unwrap_or(0)),
            Some(o) => o.to_string(),
        };
        return Err(JournalError::LeaseLost { workflow: id.to_string(), holder });
    }
    let (output_before, state_before) = (summary.output.clone(), summary.state);
    let mut rows = Vec::with_capacity(events.len());
    for ev in events {
        seq += 1;
        summary.apply(ev);
        rows.push(EventRow {
            seq,
            kind: ev.kind(),
            step: ev.step().map(str::to_string),
            data: serde_json::to_string(ev)?,
        });
    }
    let output = if summary.output != output_before {
        summary.output.as_ref().map(serde_json::to_string).transpose()?
    } else {
        None
    };
    Ok(Folded { state_changed: summary.state != state_before, summary, rows, seq, output })
}

/// Whether `me` may take a lease now held by `owner` until `expires` (`now` on the clock the
/// backend keeps leases by): free, already mine, expired, or held by a dead process of this
/// machine (same boot and pid namespace; anything else is presumed alive until expiry).
pub(crate) fn lease_is_free(owner: Option<&str>, expires: Option<i64>, me: &str, now: i64) -> bool {
    match owner {
        None => true,
        Some(o) => o == me || expires.is_none_or(|t| t < now) || owner_is_gone(o),
    }
}

/// Whether a daemon `me` lists a workflow leased by `owner` until `expires` as claimable: a lease
/// free for it, except its own live ones (it runs those). Its own *expired* lease is listed: a
/// release that failed after a self-fence, or a claim whose COMMIT was reported unknown, leaves
/// the lease naming it, and nothing else would ever claim that workflow from a single daemon.
/// The daemon skips what it is running.
pub(crate) fn claimable_by(owner: Option<&str>, expires: Option<i64>, me: &str, now: i64) -> bool {
    if owner == Some(me) {
        return expires.is_none_or(|t| t < now);
    }
    lease_is_free(owner, expires, me, now)
}

/// What a cancel request does to a workflow in `summary`, held by `owner`.
pub(crate) enum CancelPlan {
    NotApplicable(WorkflowState),
    AlreadyRequested(WorkflowState),
    /// Append these events.
    Append(Vec<Event>),
}

/// `ever_started` is asked only when the answer matters (a pending, unowned workflow).
pub(crate) fn plan_cancel(
    summary: &Summary,
    owner: Option<&str>,
    ever_started: impl FnOnce() -> Result<bool>,
) -> Result<CancelPlan> {
    if summary.state.is_finished() {
        return Ok(CancelPlan::NotApplicable(summary.state));
    }
    if summary.cancel_requested {
        return Ok(CancelPlan::AlreadyRequested(summary.state));
    }
    // Never started: nothing to compensate, so it ends now instead of waiting its turn.
    if summary.state == WorkflowState::Pending && owner.is_none() && !ever_started()? {
        return Ok(CancelPlan::Append(vec![Event::CancelRequested, Event::Compensated]));
    }
    Ok(CancelPlan::Append(vec![Event::CancelRequested]))
}

/// What a resume request does to a workflow in `state`.
pub(crate) enum ResumePlan {
    NotApplicable(WorkflowState),
    AlreadyRequested(WorkflowState),
    /// Append `ResumeRequested`; `requeue`: take a new ticket, behind whatever was submitted
    /// since (a workflow that failed forward gave its cluster up — the serialization rule in
    /// ARCHITECTURE.md).
    Resume {
        requeue: bool,
    },
    /// Refused: see `RequestOutcome::Superseded`.
    Superseded(String),
}

/// `later_started` names a workflow of the same cluster with a higher ticket that has taken a
/// lease (`LATER_STARTED_SQL`). A finished compensation gave the cluster up; a later workflow
/// that ran since may have adopted its leftovers (adoption is by identity, whoever created), and
/// resuming the compensation would delete them from under it. The cluster then belongs to the
/// later workflow's history: `teardown` removes it.
pub(crate) fn plan_resume(
    state: WorkflowState,
    later_started: impl FnOnce() -> Result<Option<String>>,
) -> Result<ResumePlan> {
    Ok(match state {
        WorkflowState::Paused => ResumePlan::Resume { requeue: false },
        // Nothing later has run: the compensation takes its cluster back at its old place in
        // the queue, ahead of whatever was submitted since (which then finds it undone, not half).
        WorkflowState::CompensationFailed => match later_started()? {
            Some(by) => ResumePlan::Superseded(by),
            None => ResumePlan::Resume { requeue: false },
        },
        WorkflowState::Failed => ResumePlan::Resume { requeue: true },
        s if s.is_runnable() => ResumePlan::AlreadyRequested(s),
        s => ResumePlan::NotApplicable(s),
    })
}

/// A workflow of the cluster of workflow $1 with a higher ticket that has ever taken a lease.
pub(crate) const LATER_STARTED_SQL: &str = "SELECT o.id FROM workflows o, workflows w
     WHERE w.id = $1 AND w.cluster <> '' AND o.cluster = w.cluster AND o.id <> w.id AND o.ticket > w.ticket
       AND EXISTS (SELECT 1 FROM events e WHERE e.workflow_id = o.id AND e.kind = 'lease_taken')
     ORDER BY o.ticket LIMIT 1";

/// What prune keeps although it finished: a workflow of a cluster that also has a compensation
/// that failed before it (lower ticket), the evidence that refuses resuming that compensation.
/// `w` is the candidate's row.
pub(crate) const PRUNE_KEEPS_SQL: &str = "EXISTS (SELECT 1 FROM workflows f WHERE w.cluster <> ''
       AND f.cluster = w.cluster AND f.state = 'compensation_failed' AND f.ticket < w.ticket)";

/// The workflow another must wait for on its cluster (parameters: its id, its cluster, now by the
/// lease clock), in SQL both backends run as is (`$N` is a positional parameter to PostgreSQL
/// and, numbered in order of appearance, to SQLite). The rule: workflows of one cluster run one
/// at a time in ticket order (a ticket is taken at submit, and again when a finished workflow is
/// retried), an unfinished one (paused included) keeps the cluster, and nothing starts while
/// another workflow of the cluster holds a live lease.
pub(crate) const CLUSTER_BLOCKER_SQL: &str = "SELECT o.id, o.workflow, o.state FROM workflows o, workflows w
     WHERE w.id = $1 AND o.cluster = $2 AND o.id <> w.id
       AND ((o.ticket < w.ticket AND o.state NOT IN ('completed','failed','compensated','compensation_failed'))
            OR (o.lease_owner IS NOT NULL AND o.lease_expires_at >= $3))
     ORDER BY o.ticket LIMIT 1";
