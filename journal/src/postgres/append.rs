//! Appending to the PostgreSQL journal: many workflows' events in one transaction — one locking
//! read of their summaries, the fold in Rust (`rules::fold_append`, as SQLite), one INSERT of all
//! events, one UPDATE of all summaries. A request transaction (submit, claim, cancel, resume) runs
//! that plan inside its own (`append_one`). The group-commit writer (`commit_appends`) folds from
//! what it last wrote itself and sends the whole transaction in one round trip, its UPDATE guarded
//! by each summary's sequence number and lease owner; when anything else changed a summary since
//! (a cancel, a claim, a release), the guard aborts the transaction and the batch runs again the
//! locking way, in two round trips.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Statement, Transaction};

use super::pool::Conn;
use crate::api::Fence;
use crate::error::{JournalError, Result};
use crate::event::Event;
use crate::projection::{Summary, WorkflowState};
use crate::rules::{HeldLease, fold_append};

/// One append of one workflow's events; `fence`: the acquisition it must be made under.
pub(crate) struct AppendReq {
    pub id: String,
    pub fence: Option<Fence>,
    pub events: Vec<Event>,
    pub at: i64,
}

/// The summary rows of `ids`, locked until the transaction ends (in id order: two transactions
/// locking overlapping sets never deadlock).
const LOCK_SQL: &str =
    "SELECT id, state, seq, current_step, attempts, error, output, cancel_requested, lease_owner, compensating, lease_epoch
     FROM workflows WHERE id = ANY($1) ORDER BY id FOR UPDATE";

const INSERT_SQL: &str = "INSERT INTO events (workflow_id, seq, at, kind, step, data)
     SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[], $5::text[], $6::text[])";

/// The summaries' `UPDATE` from parameter arrays $1–$11, up to the open `unnest(` list: the
/// plain and the guarded statement differ only in what follows. A finished workflow needs no
/// owner: its lease goes in the same transaction.
macro_rules! summaries_update {
    () => {
        "UPDATE workflows w SET state = u.state, seq = u.seq, current_step = u.current_step,
        attempts = u.attempts, error = u.error, output = COALESCE(u.output, w.output), cancel_requested = u.cancel,
        updated_at = u.at,
        lease_owner = CASE WHEN u.finished THEN NULL ELSE w.lease_owner END,
        lease_expires_at = CASE WHEN u.finished THEN NULL ELSE w.lease_expires_at END,
        compensating = u.compensating
     FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::int4[], $6::text[], $7::text[], $8::bool[],
                 $9::int8[], $10::bool[], $11::bool[]"
    };
}

/// Every summary of a batch, unguarded (inside a transaction that locked them).
///
/// `w.id = ANY($1)` beside the join is for the planner: a prepared statement's generic plan
/// guesses ten rows from `unnest` and, joining on `w.id = u.id` alone, hashes them against a
/// sequential scan of every summary up to about a thousand workflows — 0.5 ms a step at 800
/// (measured). With it, the summaries are found through the primary key whatever the table holds
/// (test `postgres_appends_never_scan_every_workflow_summary`).
const UPDATE_SQL: &str = concat!(
    summaries_update!(),
    ")
          AS u(id, state, seq, current_step, attempts, error, output, cancel, at, finished, compensating)
     WHERE w.id = ANY($1) AND w.id = u.id"
);

pub(crate) const NOTIFY_SQL: &str = "SELECT pg_notify($1, '')";

/// The writes of a batch when every summary is as the writer last wrote it: the UPDATE's guard
/// (`expected` sequence numbers, lease `owner`s and `epoch`s) makes `summaries_unchanged` abort the transaction
/// (SQLSTATE IF001) unless it changed every row. `w.id = ANY($1)`: as in `UPDATE_SQL`.
const GUARDED_UPDATE_SQL: &str = concat!(
    "WITH changed AS (",
    summaries_update!(),
    ", $12::int8[], $13::text[], $14::int8[])
          AS u(id, state, seq, current_step, attempts, error, output, cancel, at, finished, compensating, expected, owner, epoch)
     WHERE w.id = ANY($1) AND w.id = u.id AND w.seq = u.expected AND w.lease_owner IS NOT DISTINCT FROM u.owner
       AND w.lease_epoch IS NOT DISTINCT FROM u.epoch
     RETURNING 1)
   SELECT summaries_unchanged($15, count(*)) FROM changed"
);

/// The SQLSTATE of `summaries_unchanged`'s refusal.
const STALE: &str = "IF001";

/// What the writer last committed for each workflow it appends to, so it can fold without
/// reading. Only ever a hint: the guarded UPDATE checks it against the row.
#[derive(Default)]
pub(crate) struct Written(Mutex<HashMap<String, Current>>);

/// Beyond this many workflows in flight, the hints start again from empty.
const WRITTEN_MAX: usize = 100_000;

impl Written {
    /// The summaries of every workflow of `reqs`, if all are known.
    fn lookup(&self, reqs: &[AppendReq]) -> Option<HashMap<String, Current>> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = HashMap::with_capacity(reqs.len());
        for r in reqs {
            if !out.contains_key(&r.id) {
                out.insert(r.id.clone(), map.get(&r.id)?.clone());
            }
        }
        Some(out)
    }

    fn forget(&self, reqs: &[AppendReq]) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for r in reqs {
            map.remove(&r.id);
        }
    }

    /// Remembers what was committed; a finished workflow is appended to no more.
    pub(crate) fn remember(&self, current: HashMap<String, Current>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > WRITTEN_MAX {
            map.clear();
        }
        for (id, mut cur) in current {
            if cur.summary.state.is_finished() {
                map.remove(&id);
            } else {
                cur.touched = None;
                cur.seq_before = cur.seq;
                map.insert(id, cur);
            }
        }
    }
}

/// A workflow's summary as locked, and what this transaction wrote to it.
#[derive(Clone)]
pub(crate) struct Current {
    pub summary: Summary,
    pub seq: i64,
    pub lease: HeldLease,
    /// The sequence number before this transaction.
    seq_before: i64,
    /// Written by this transaction: (the time of its last append, the output if changed).
    touched: Option<(i64, Option<String>)>,
}

fn currents(rows: Vec<tokio_postgres::Row>) -> Result<HashMap<String, Current>> {
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        let output: Option<String> = r.get(6);
        let summary = Summary {
            state: WorkflowState::parse(r.get(1)).unwrap_or(WorkflowState::Failed),
            current_step: r.get(3),
            attempts: r.get::<_, i32>(4) as u32,
            error: r.get(5),
            output: output.map(|o| serde_json::from_str::<Value>(&o)).transpose()?,
            cancel_requested: r.get(7),
            compensating: r.get(9),
            waiting: None,
            holding: None,
        };
        let seq = r.get(2);
        let lease = HeldLease { owner: r.get(8), epoch: r.get(10) };
        out.insert(r.get(0), Current { summary, seq, seq_before: seq, lease, touched: None });
    }
    Ok(out)
}

pub(crate) async fn lock_summaries(
    tx: &Transaction<'_>,
    lock: &Statement,
    ids: &[&str],
) -> Result<HashMap<String, Current>> {
    currents(tx.query(lock, &[&ids]).await?)
}

/// The statements of an append inside a request transaction, from the connection's cache (a
/// statement prepared anew costs a round trip of its own).
pub(crate) struct AppendStatements {
    pub lock: Statement,
    insert: Statement,
    update: Statement,
    notify: Statement,
}

impl AppendStatements {
    pub(crate) async fn of(c: &mut Conn) -> Result<AppendStatements> {
        let [lock, insert, update, notify] = c.prepared_all([LOCK_SQL, INSERT_SQL, UPDATE_SQL, NOTIFY_SQL]).await?;
        Ok(AppendStatements { lock, insert, update, notify })
    }
}

fn sorted_ids(reqs: &[AppendReq]) -> Vec<&str> {
    let mut ids: Vec<&str> = reqs.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The writes of a batch: every event row, every touched summary, as column arrays.
#[derive(Default)]
struct Plan {
    results: Vec<Result<WorkflowState>>,
    ev_id: Vec<String>,
    ev_seq: Vec<i64>,
    ev_at: Vec<i64>,
    ev_kind: Vec<&'static str>,
    ev_step: Vec<Option<String>>,
    ev_data: Vec<String>,
    id: Vec<String>,
    state: Vec<&'static str>,
    seq: Vec<i64>,
    current_step: Vec<Option<String>>,
    attempts: Vec<i32>,
    error: Vec<Option<String>>,
    output: Vec<Option<String>>,
    cancel: Vec<bool>,
    at: Vec<i64>,
    finished: Vec<bool>,
    compensating: Vec<bool>,
    expected: Vec<i64>,
    owner: Vec<Option<String>>,
    epoch: Vec<Option<i64>>,
    /// A workflow finished (its cluster is free) or became pending (work): tell the daemons.
    wake: bool,
}

impl Plan {
    /// Folds every request in order, each fenced on its own: a refused one (a stale owner)
    /// fails alone.
    fn new(reqs: &[AppendReq], current: &mut HashMap<String, Current>) -> Plan {
        let mut p = Plan::default();
        for req in reqs {
            let Some(cur) = current.get_mut(&req.id) else {
                p.results.push(Err(JournalError::UnknownWorkflow(req.id.clone())));
                continue;
            };
            let folded =
                fold_append(&req.id, cur.summary.clone(), cur.seq, &cur.lease, req.fence.as_ref(), &req.events);
            match folded {
                Ok(f) => {
                    for row in f.rows {
                        p.ev_id.push(req.id.clone());
                        p.ev_seq.push(row.seq);
                        p.ev_at.push(req.at);
                        p.ev_kind.push(row.kind);
                        p.ev_step.push(row.step);
                        p.ev_data.push(row.data);
                    }
                    let output = f.output.or_else(|| cur.touched.take().and_then(|(_, o)| o));
                    cur.touched = Some((req.at, output));
                    cur.seq = f.seq;
                    cur.summary = f.summary;
                    p.results.push(Ok(cur.summary.state));
                }
                Err(e) => p.results.push(Err(e)),
            }
        }
        for (id, cur) in current.iter() {
            let Some((at, output)) = cur.touched.clone() else { continue };
            let s = cur.summary.clone();
            p.wake |= s.state.is_finished() || s.state == WorkflowState::Pending;
            p.id.push(id.clone());
            p.expected.push(cur.seq_before);
            p.owner.push(cur.lease.owner.clone());
            p.epoch.push(cur.lease.epoch);
            p.state.push(s.state.as_str());
            p.seq.push(cur.seq);
            p.attempts.push(s.attempts as i32);
            p.cancel.push(s.cancel_requested);
            p.at.push(at);
            p.finished.push(s.state.is_finished());
            p.compensating.push(s.compensating);
            p.current_step.push(s.current_step);
            p.error.push(s.error);
            p.output.push(output);
        }
        p
    }

    fn event_params(&self) -> [&(dyn ToSql + Sync); 6] {
        [&self.ev_id, &self.ev_seq, &self.ev_at, &self.ev_kind, &self.ev_step, &self.ev_data]
    }

    fn guarded_params<'a>(&'a self, rows: &'a i64) -> [&'a (dyn ToSql + Sync); 15] {
        let s = self.summary_params();
        [
            s[0],
            s[1],
            s[2],
            s[3],
            s[4],
            s[5],
            s[6],
            s[7],
            s[8],
            s[9],
            s[10],
            &self.expected,
            &self.owner,
            &self.epoch,
            rows,
        ]
    }

    fn summary_params(&self) -> [&(dyn ToSql + Sync); 11] {
        [
            &self.id,
            &self.state,
            &self.seq,
            &self.current_step,
            &self.attempts,
            &self.error,
            &self.output,
            &self.cancel,
            &self.at,
            &self.finished,
            &self.compensating,
        ]
    }
}

/// Appends one request in the caller's transaction.
pub(crate) async fn append_one(tx: &Transaction<'_>, s: &AppendStatements, req: AppendReq) -> Result<WorkflowState> {
    append_one_hinted(tx, s, req).await.map(|(state, _)| state)
}

/// `append_one`, also returning the summary it wrote: once committed, a hint for the writer
/// (`Written::remember`), so the workflow's next append takes the one-round-trip way.
pub(crate) async fn append_one_hinted(
    tx: &Transaction<'_>,
    s: &AppendStatements,
    req: AppendReq,
) -> Result<(WorkflowState, HashMap<String, Current>)> {
    let reqs = [req];
    let mut current = lock_summaries(tx, &s.lock, &sorted_ids(&reqs)).await?;
    let mut plan = Plan::new(&reqs, &mut current);
    if !plan.ev_id.is_empty() {
        tx.execute(&s.insert, &plan.event_params()).await?;
        tx.execute(&s.update, &plan.summary_params()).await?;
        if plan.wake {
            tx.execute(&s.notify, &[&super::listen::WORK_CHANNEL]).await?;
        }
    }
    let state = plan.results.pop().unwrap_or_else(|| Err(JournalError::UnknownWorkflow(reqs[0].id.clone())))?;
    current.retain(|_, cur| cur.touched.is_some());
    Ok((state, current))
}

/// Commits a batch of appends: in one round trip when `written` knows every summary and the
/// guard agrees, else in two (`commit_locked`). Whatever fails, the hints of the batch go.
pub(crate) async fn commit_appends(
    c: &mut Conn,
    reqs: &[AppendReq],
    written: &Written,
) -> Result<Vec<Result<WorkflowState>>> {
    if let Some(mut current) = written.lookup(reqs) {
        let plan = Plan::new(reqs, &mut current);
        // A refusal judged from a hint could be wrong (the lease may be ours again): only the
        // locking way refuses.
        if plan.results.iter().all(|r| r.is_ok()) {
            match commit_guarded(c, &plan).await {
                Ok(()) => {
                    written.remember(current);
                    return Ok(plan.results);
                }
                Err(JournalError::Postgres { source: e, .. }) if e.code().is_some_and(|c| c.code() == STALE) => {}
                Err(e) => {
                    written.forget(reqs);
                    return Err(e);
                }
            }
        }
        written.forget(reqs);
    }
    let (results, current) = commit_locked(c, reqs).await?;
    written.remember(current);
    Ok(results)
}

/// The guarded way: BEGIN and the writes with their guard, in one round trip.
async fn commit_guarded(c: &mut Conn, plan: &Plan) -> Result<()> {
    let rows = plan.id.len() as i64;
    write_and_commit(c, plan, true, GUARDED_UPDATE_SQL, &plan.guarded_params(&rows)).await
}

/// The summaries' UPDATE (first: a guard aborts the transaction before the events it would
/// misnumber), the events' INSERT, the wake-up and COMMIT — after BEGIN if `begin` — pipelined:
/// sent together, answered in order.
async fn write_and_commit(
    c: &mut Conn,
    plan: &Plan,
    begin: bool,
    update: &'static str,
    update_params: &[&(dyn ToSql + Sync)],
) -> Result<()> {
    let (update, insert, notify) =
        (c.prepared(update).await?, c.prepared(INSERT_SQL).await?, c.prepared(NOTIFY_SQL).await?);
    let event_params = plan.event_params();
    let c = &**c;
    let (begun, summaries, events, woken, commit) = tokio::join!(
        async { if begin { c.batch_execute("BEGIN").await } else { Ok(()) } },
        c.query(&update, update_params),
        c.execute(&insert, &event_params),
        async { if plan.wake { c.execute(&notify, &[&super::listen::WORK_CHANNEL]).await.map(|_| 0) } else { Ok(0) } },
        c.batch_execute("COMMIT"),
    );
    settle(commit)?;
    begun?;
    summaries?;
    events?;
    woken?;
    Ok(())
}

/// A lost connection (or a server shutting down) leaves the COMMIT's fate unknown
/// (`pool::commit_error`), whatever the statements before it said.
/// Otherwise the statements' own answers tell: one that failed aborted the transaction, and the
/// COMMIT behind it rolled back (PostgreSQL answers it without an error).
fn settle(commit: std::result::Result<(), tokio_postgres::Error>) -> Result<()> {
    commit.map_err(super::pool::commit_error)
}

/// The locking way, in two round trips: `BEGIN` and the locking read, then the writes and
/// `COMMIT`, each pipelined. Returns the summaries as committed too.
async fn commit_locked(
    c: &mut Conn,
    reqs: &[AppendReq],
) -> Result<(Vec<Result<WorkflowState>>, HashMap<String, Current>)> {
    let lock = c.prepared(LOCK_SQL).await?;
    let ids = sorted_ids(reqs);
    let lock_params: [&(dyn ToSql + Sync); 1] = [&ids];
    let (begin, rows) = tokio::join!(c.batch_execute("BEGIN"), c.query(&lock, &lock_params));
    begin?;
    let current = match rows {
        Ok(rows) => currents(rows),
        Err(e) => Err(e.into()),
    };
    let mut current = match current {
        Ok(cur) => cur,
        Err(e) => {
            let _ = c.batch_execute("ROLLBACK").await;
            return Err(e);
        }
    };
    let plan = Plan::new(reqs, &mut current);
    if plan.ev_id.is_empty() {
        c.batch_execute("ROLLBACK").await?;
        return Ok((plan.results, HashMap::new()));
    }
    write_and_commit(c, &plan, false, UPDATE_SQL, &plan.summary_params()).await?;
    // Only what this batch wrote (a refused workflow's summary was not checked by a write).
    current.retain(|_, cur| cur.touched.is_some());
    Ok((plan.results, current))
}
