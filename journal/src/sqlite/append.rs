//! The write path's transactions: loading a workflow's summary, appending events and folding them
//! into the summary row (fenced by the lease), and recording a new workflow. They run on the
//! writer thread, inside the batch transaction of `writer`.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::api::{Fence, NewWorkflow, SubmitOutcome};
use crate::error::{JournalError, Result};
use crate::event::Event;
use crate::projection::{Summary, WorkflowState};
use crate::rules::{HeldLease, fold_append};

/// The summary row of a workflow plus its last sequence number and lease.
pub(crate) fn load_summary(c: &Connection, id: &str) -> Result<(Summary, (i64, HeldLease))> {
    let mut st = c.prepare_cached(
        "SELECT state, seq, current_step, attempts, error, output, cancel_requested, lease_owner, compensating, lease_epoch FROM workflows WHERE id = ?1",
    )?;
    let row = st
        .query_row([id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, u32>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, Option<String>>(7)?,
                r.get::<_, i64>(8)?,
                r.get::<_, Option<i64>>(9)?,
            ))
        })
        .optional()?
        .ok_or_else(|| JournalError::UnknownWorkflow(id.to_string()))?;
    let (state, seq, current_step, attempts, error, output, cancel, owner, compensating, epoch) = row;
    let summary = Summary {
        state: WorkflowState::parse(&state).unwrap_or(WorkflowState::Failed),
        current_step,
        attempts,
        error,
        output: output.map(|o| serde_json::from_str(&o)).transpose()?,
        cancel_requested: cancel != 0,
        compensating: compensating != 0,
        waiting: None,
        holding: None,
    };
    Ok((summary, (seq, HeldLease { owner, epoch })))
}

/// Appends events and folds them into the summary row, in the caller's transaction.
pub(crate) fn append_tx(
    c: &Connection,
    id: &str,
    fence: Option<&Fence>,
    events: &[Event],
    at: i64,
) -> Result<WorkflowState> {
    let (summary, (seq, held)) = load_summary(c, id)?;
    let f = fold_append(id, summary, seq, &held, fence, events)?;
    let mut ins = c.prepare_cached(
        "INSERT INTO events (workflow_id, seq, at, kind, step, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for row in &f.rows {
        ins.execute(params![id, row.seq, at, row.kind, row.step, row.data])?;
    }
    // A finished workflow needs no owner: its lease goes in the same transaction. `state` is
    // set only when it changes: SQLite rewrites the entries of every index on a column the SET
    // names, and two indexes hold `state` — on a step that leaves it as it was, that is two more
    // pages in the WAL for every commit (measured: BENCHMARKS.md). ?2 stays bound but unused.
    let mut up = c.prepare_cached(if f.state_changed {
        "UPDATE workflows SET state = ?2, seq = ?3, current_step = ?4, attempts = ?5, error = ?6,
            output = COALESCE(?7, output), cancel_requested = ?8, updated_at = ?9,
            lease_owner = CASE WHEN ?10 THEN NULL ELSE lease_owner END,
            lease_expires_at = CASE WHEN ?10 THEN NULL ELSE lease_expires_at END,
            compensating = ?11
         WHERE id = ?1"
    } else {
        "UPDATE workflows SET seq = ?3, current_step = ?4, attempts = ?5, error = ?6,
            output = COALESCE(?7, output), cancel_requested = ?8, updated_at = ?9,
            lease_owner = CASE WHEN ?10 THEN NULL ELSE lease_owner END,
            lease_expires_at = CASE WHEN ?10 THEN NULL ELSE lease_expires_at END,
            compensating = ?11
         WHERE id = ?1"
    })?;
    let s = &f.summary;
    up.execute(params![
        id,
        s.state.as_str(),
        f.seq,
        s.current_step,
        s.attempts,
        s.error,
        f.output,
        s.cancel_requested as i64,
        at,
        s.state.is_finished(),
        s.compensating as i64
    ])?;
    Ok(s.state)
}

pub(crate) fn submit_tx(c: &Connection, new: &NewWorkflow) -> Result<SubmitOutcome> {
    let existing: Option<(String, String, i64)> = c
        .prepare_cached("SELECT workflow, input, no_rollback FROM workflows WHERE id = ?1")?
        .query_row([&new.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    if let Some((workflow, input, no_rollback)) = existing {
        let input: Value = serde_json::from_str(&input)?;
        return Ok(if workflow == new.workflow && input == new.input && (no_rollback != 0) == new.no_rollback {
            SubmitOutcome::AlreadyExists
        } else {
            SubmitOutcome::Conflict { existing_workflow: workflow }
        });
    }
    if c.prepare_cached("SELECT 1 FROM pruned WHERE id = ?1")?.exists([&new.id])? {
        return Ok(SubmitOutcome::Archived);
    }
    c.prepare_cached(
        "INSERT INTO workflows (id, workflow, input, cluster, no_rollback, created_at, updated_at, seq, state, attempts, cancel_requested, ticket)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 0, 'pending', 0, 0, (SELECT COALESCE(MAX(ticket), 0) + 1 FROM workflows))",
    )?
    .execute(params![new.id, new.workflow, serde_json::to_string(&new.input)?, new.cluster, new.no_rollback as i64, new.at])?;
    append_tx(
        c,
        &new.id,
        None,
        &[Event::Submitted {
            workflow: new.workflow.clone(),
            input: new.input.clone(),
            no_rollback: new.no_rollback,
            code_version: new.code_version,
            creator: new.creator.clone(),
            submitter: new.submitter.clone(),
            traceparent: new.traceparent.clone(),
        }],
        new.at,
    )?;
    Ok(SubmitOutcome::Created)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sqlite::schema;

    /// WAL frames (pages) one commit of an append from each of `n` workflows writes, after enough
    /// earlier commits that every workflow's events span pages.
    fn frames_of_one_batch(n: usize) -> u64 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.sqlite3");
        let c = schema::open_writer(&path).unwrap();
        c.execute_batch("PRAGMA wal_autocheckpoint=0").unwrap();
        let ids: Vec<String> = (0..n).map(|_| format!("canary-{}", uuid::Uuid::now_v7())).collect();
        for id in &ids {
            let new = NewWorkflow {
                id: id.clone(),
                workflow: "canary".into(),
                input: json!({ "steps": 20 }),
                cluster: String::new(),
                no_rollback: false,
                code_version: Some(1),
                creator: None,
                submitter: None,
                traceparent: None,
                at: 1,
            };
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            submit_tx(&c, &new).unwrap();
            c.execute_batch("COMMIT").unwrap();
        }
        let wal = path.with_file_name("j.sqlite3-wal");
        let mut before = 0;
        for round in 1..=20u32 {
            before = std::fs::metadata(&wal).unwrap().len();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            for id in &ids {
                let done = Event::StepCompleted {
                    step: format!("step-{round}"),
                    attempt: 1,
                    activity: "canary.tick".into(),
                    input_hash: "0123456789abcdef".into(),
                    output: json!(round),
                    position: Some(format!("#{round}")),
                };
                append_tx(&c, id, None, &[done], i64::from(round)).unwrap();
            }
            c.execute_batch("COMMIT").unwrap();
        }
        let page: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        (std::fs::metadata(&wal).unwrap().len() - before) / (page as u64 + 24)
    }

    #[test]
    fn a_batch_of_appends_from_fifty_workflows_writes_a_few_pages_not_one_per_workflow() {
        // Stored by (workflow, seq), each append of the batch dirtied a leaf page of its own
        // (65 frames for 50 workflows, measured); in write order they share pages: 24.
        let frames = frames_of_one_batch(50);
        assert!(frames <= 40, "one commit of 50 appends wrote {frames} WAL frames");
    }
}
