//! The SQLite backend: one file, one writer thread doing group commit, a reader connection. The
//! embedded default.

mod append;
pub(crate) mod bench;
mod prune;
mod queue;
mod schema;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};

use rusqlite::{Connection, OptionalExtension, params};

use self::append::{append_tx, load_summary, submit_tx};
use self::queue::{acquire_tx, cluster_blocker, ever_started};
use self::writer::{Job, Op};
use crate::api::{
    AcquireOutcome, CommitObserver, Durability, Fence, NewWorkflow, Renewal, RequestOutcome, SubmitOutcome,
    WorkflowOutcome, WorkflowRow,
};
use crate::error::{JournalError, Result};
use crate::event::{Event, EventRecord};
use crate::projection::{WorkflowState, WorkflowView};
use crate::rules::{CancelPlan, LATER_STARTED_SQL, ResumePlan, claimable_by, plan_cancel, plan_resume};

pub use self::schema::archive_path;

/// A handle on one journal file; the writer thread stops when it is dropped.
pub(crate) struct Sqlite {
    path: PathBuf,
    tx: Option<mpsc::Sender<Box<dyn Job>>>,
    reader: Mutex<Connection>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    commit_observer: Arc<std::sync::OnceLock<CommitObserver>>,
}

impl Drop for Sqlite {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.writer.lock().unwrap().take() {
            let _ = h.join();
        }
    }
}

impl Sqlite {
    /// Opens (creating with mode 0600 and migrating if needed) a journal for reading and writing.
    /// Cheap whatever the journal's size: reading every page is `verify`'s job.
    pub fn open(path: &Path) -> Result<Sqlite> {
        let conn = schema::open_writer(path)?;
        let reader = Connection::open(path)?;
        reader.busy_timeout(writer::busy_budget())?;
        reader.execute_batch("PRAGMA query_only=ON")?;
        let (tx, rx) = mpsc::channel();
        let commit_observer = Arc::new(std::sync::OnceLock::new());
        let observer = commit_observer.clone();
        let handle = std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || writer::run(conn, rx, observer))
            .map_err(|e| JournalError::Create { path: path.to_path_buf(), source: e })?;
        Ok(Sqlite {
            path: path.to_path_buf(),
            tx: Some(tx),
            reader: Mutex::new(reader),
            writer: Mutex::new(Some(handle)),
            commit_observer,
        })
    }

    /// Opens an existing journal for reading only; never creates or changes the file.
    pub fn open_read_only(path: &Path) -> Result<Sqlite> {
        let reader = schema::open_reader(path)?;
        Ok(Sqlite {
            path: path.to_path_buf(),
            tx: None,
            reader: Mutex::new(reader),
            writer: Mutex::new(None),
            commit_observer: Arc::new(std::sync::OnceLock::new()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn describe(&self) -> String {
        self.path.display().to_string()
    }

    /// Installs the observer of every commit batch (latency, size), for metrics; false if one
    /// was installed already.
    pub fn observe_commits(&self, f: CommitObserver) -> bool {
        self.commit_observer.set(f).is_ok()
    }

    /// Reads every page once (`PRAGMA quick_check`): a damaged file is found at daemon start,
    /// not half-way through a run. Its cost grows with the journal, so it is not done per open.
    pub fn verify(&self) -> Result<()> {
        self.read(|c| schema::quick_check(c, &self.path))
    }

    async fn write<R, F>(&self, durability: Durability, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        let rx = self.enqueue(durability, f)?;
        rx.await.map_err(|_| JournalError::WriterGone)?
    }

    fn enqueue<R, F>(&self, durability: Durability, f: F) -> Result<tokio::sync::oneshot::Receiver<Result<R>>>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R> + Send + 'static,
    {
        let tx = self.tx.as_ref().ok_or(JournalError::ReadOnly)?;
        let (job, rx) = Op::boxed(durability == Durability::Lazy, f);
        tx.send(job).map_err(|_| JournalError::WriterGone)?;
        Ok(rx)
    }

    /// Resolves once the writer has taken SQLite's write lock and committed an empty batch: the
    /// journal can be written now (readiness; waits while another process holds the lock).
    pub async fn ping_writer(&self) -> Result<()> {
        self.write(Durability::Durable, |_| Ok(())).await
    }

    /// How many workflows are in each state.
    pub fn count_by_state(&self) -> Result<Vec<(String, u64)>> {
        self.read(|c| {
            let mut st = c.prepare_cached("SELECT state, COUNT(*) FROM workflows GROUP BY state")?;
            let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Records a new workflow, or recognises a repeated submission of the same one.
    pub async fn submit(&self, new: NewWorkflow) -> Result<SubmitOutcome> {
        self.write(Durability::Durable, move |c| submit_tx(c, &new)).await
    }

    /// Appends events of a workflow held by `owner`; refused unless `owner` still holds its lease.
    pub async fn append(
        &self,
        id: &str,
        fence: &Fence,
        events: Vec<Event>,
        at: i64,
        durability: Durability,
    ) -> Result<()> {
        let (id, fence) = (id.to_string(), fence.clone());
        match durability {
            Durability::Durable => {
                self.write(durability, move |c| append_tx(c, &id, Some(&fence), &events, at).map(|_| ())).await
            }
            Durability::Lazy => {
                // Nobody waits: a refusal resurfaces on the owner's next durable append.
                self.enqueue(durability, move |c| append_tx(c, &id, Some(&fence), &events, at).map(|_| ()))?;
                Ok(())
            }
        }
    }

    /// Takes the lease of a runnable workflow if it is free, expired, or held by a dead process
    /// of this host, and if no older workflow of its cluster is unfinished.
    pub async fn acquire(&self, id: &str, owner: &str, now: i64, ttl_ms: i64) -> Result<AcquireOutcome> {
        let (id, owner) = (id.to_string(), owner.to_string());
        self.write(Durability::Durable, move |c| acquire_tx(c, &id, &owner, now, ttl_ms)).await
    }

    /// Extends the leases `owner` holds; tells which are still held and which have a cancel request.
    pub async fn renew(&self, owner: &str, ids: Vec<String>, now: i64, ttl_ms: i64) -> Result<Vec<Renewal>> {
        let owner = owner.to_string();
        self.write(Durability::Durable, move |c| {
            let mut out = Vec::with_capacity(ids.len());
            let mut up = c.prepare_cached(
                "UPDATE workflows SET lease_expires_at = ?3 WHERE id = ?1 AND lease_owner = ?2 RETURNING cancel_requested",
            )?;
            for id in ids {
                let cancel: Option<i64> = up.query_row(params![id, owner, now + ttl_ms], |r| r.get(0)).optional()?;
                out.push(Renewal { id, held: cancel.is_some(), cancel_requested: cancel.unwrap_or(0) != 0 });
            }
            Ok(out)
        })
        .await
    }

    /// Gives leases back, so another daemon can take over at once.
    pub async fn release(&self, owner: &str, ids: Vec<String>) -> Result<()> {
        let owner = owner.to_string();
        self.write(Durability::Durable, move |c| {
            let mut up = c.prepare_cached(
                "UPDATE workflows SET lease_owner = NULL, lease_expires_at = NULL WHERE id = ?1 AND lease_owner = ?2",
            )?;
            for id in ids {
                up.execute(params![id, owner])?;
            }
            Ok(())
        })
        .await
    }

    /// Records a cancel request; the owner stops at its next step boundary and compensates.
    pub async fn request_cancel(&self, id: &str, at: i64) -> Result<RequestOutcome> {
        let id = id.to_string();
        self.write(Durability::Durable, move |c| {
            let (summary, (_, lease)) = load_summary(c, &id)?;
            match plan_cancel(&summary, lease.owner.as_deref(), || ever_started(c, &id))? {
                CancelPlan::NotApplicable(s) => Ok(RequestOutcome::NotApplicable(s)),
                CancelPlan::AlreadyRequested(s) => Ok(RequestOutcome::AlreadyRequested(s)),
                CancelPlan::Append(events) => Ok(RequestOutcome::Done(append_tx(c, &id, None, &events, at)?)),
            }
        })
        .await
    }

    /// Records a resume request for a paused, failed or compensation_failed workflow.
    pub async fn request_resume(&self, id: &str, at: i64) -> Result<RequestOutcome> {
        let id = id.to_string();
        self.write(Durability::Durable, move |c| {
            let (summary, _) = load_summary(c, &id)?;
            let later = || Ok(c.prepare_cached(LATER_STARTED_SQL)?.query_row([&id], |r| r.get(0)).optional()?);
            match plan_resume(summary.state, later)? {
                ResumePlan::Superseded(by) => Ok(RequestOutcome::Superseded { by }),
                ResumePlan::NotApplicable(s) => Ok(RequestOutcome::NotApplicable(s)),
                ResumePlan::AlreadyRequested(s) => Ok(RequestOutcome::AlreadyRequested(s)),
                ResumePlan::Resume { requeue } => {
                    let s = append_tx(c, &id, None, &[Event::ResumeRequested], at)?;
                    if requeue {
                        c.prepare_cached(
                            "UPDATE workflows SET ticket = (SELECT MAX(ticket) + 1 FROM workflows) WHERE id = ?1",
                        )?
                        .execute([&id])?;
                    }
                    Ok(RequestOutcome::Done(s))
                }
            }
        })
        .await
    }

    fn read<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let conn = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        f(&conn)
    }

    /// Every workflow, oldest first.
    pub fn list(&self) -> Result<Vec<WorkflowRow>> {
        self.read(|c| {
            let mut st = c.prepare_cached(&format!("SELECT {ROW_COLUMNS} FROM workflows ORDER BY rowid"))?;
            let rows = st.query_map([], row_from_sql)?.collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// One workflow's summary row.
    pub fn row(&self, id: &str) -> Result<Option<WorkflowRow>> {
        self.read(|c| {
            let mut st = c.prepare_cached(&format!("SELECT {ROW_COLUMNS} FROM workflows WHERE id = ?1"))?;
            Ok(st.query_row([id], row_from_sql).optional()?)
        })
    }

    /// State, output and error of one workflow, from its summary row alone.
    pub fn outcome(&self, id: &str) -> Result<Option<WorkflowOutcome>> {
        self.read(|c| {
            let row: Option<(String, Option<String>, Option<String>)> = c
                .prepare_cached("SELECT state, output, error FROM workflows WHERE id = ?1")?
                .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?;
            let Some((state, output, error)) = row else { return Ok(None) };
            let output = output.map(|o| serde_json::from_str(&o)).transpose()?;
            Ok(Some((WorkflowState::parse(&state).unwrap_or(WorkflowState::Failed), output, error)))
        })
    }

    /// Runnable workflows whose lease another process could take now, oldest ticket first.
    /// Only the head of each cluster's queue is a candidate, so `limit` is never used up by
    /// workflows that would only wait: one runnable workflow behind thousands of blocked ones on
    /// other clusters is still found.
    pub fn claimable(&self, now: i64, me: &str, limit: usize) -> Result<Vec<String>> {
        self.read(|c| {
            let mut st = c.prepare_cached(
                "WITH heads AS (
                     SELECT cluster, MIN(ticket) AS ticket FROM workflows
                     WHERE cluster <> '' AND state NOT IN ('completed','failed','compensated','compensation_failed')
                     GROUP BY cluster)
                 SELECT w.id, w.lease_owner, w.lease_expires_at FROM workflows w
                 LEFT JOIN heads h ON h.cluster = w.cluster
                 WHERE w.state IN ('pending','running','cancelling','compensating')
                   AND (w.cluster = '' OR w.ticket = h.ticket)
                 ORDER BY w.ticket",
            )?;
            let mut out = Vec::new();
            let rows = st.query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?, r.get::<_, Option<i64>>(2)?))
            })?;
            for row in rows {
                let (id, owner, expires) = row?;
                if claimable_by(owner.as_deref(), expires, me, now) {
                    out.push(id);
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            Ok(out)
        })
    }

    /// The workflow `id` waits for on its cluster (id, workflow name, state), if it waits.
    pub fn waiting_for(&self, id: &str, now: i64) -> Result<Option<(String, String, WorkflowState)>> {
        self.read(|c| {
            let row: Option<(String, String, Option<String>)> = c
                .prepare_cached("SELECT cluster, state, lease_owner FROM workflows WHERE id = ?1")?
                .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?;
            match row {
                Some((cluster, state, None)) if WorkflowState::parse(&state).is_some_and(|s| s.is_runnable()) => {
                    cluster_blocker(c, id, &cluster, now)
                }
                _ => Ok(None),
            }
        })
    }

    /// The complete event log of one workflow.
    pub fn events(&self, id: &str) -> Result<Vec<EventRecord>> {
        self.read(|c| read_events(c, id))
    }

    /// The full view of one workflow (summary, steps, lease), or None if unknown.
    pub fn load(&self, id: &str) -> Result<Option<WorkflowView>> {
        self.read(|c| {
            let lease: Option<(Option<String>, Option<i64>)> = c
                .prepare_cached("SELECT lease_owner, lease_expires_at FROM workflows WHERE id = ?1")?
                .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let Some((owner, expires)) = lease else { return Ok(None) };
            let events = read_events(c, id)?;
            let mut view = WorkflowView::fold(id, &events);
            view.lease_owner = owner;
            view.lease_expires_at = expires;
            Ok(Some(view))
        })
    }
}

const ROW_COLUMNS: &str = "id, workflow, state, cluster, created_at, updated_at, current_step, attempts, error, lease_owner, lease_expires_at";

fn row_from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<WorkflowRow> {
    let state: String = r.get(2)?;
    Ok(WorkflowRow {
        id: r.get(0)?,
        workflow: r.get(1)?,
        state: WorkflowState::parse(&state).unwrap_or(WorkflowState::Failed),
        cluster: r.get(3)?,
        created_at: r.get(4)?,
        updated_at: r.get(5)?,
        current_step: r.get(6)?,
        attempts: r.get(7)?,
        error: r.get(8)?,
        lease_owner: r.get(9)?,
        lease_expires_at: r.get(10)?,
    })
}

fn read_events(c: &Connection, id: &str) -> Result<Vec<EventRecord>> {
    let mut st = c.prepare_cached("SELECT seq, at, data FROM events WHERE workflow_id = ?1 ORDER BY seq")?;
    let rows = st.query_map([id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, at, data) = row?;
        out.push(EventRecord::decode(id, seq, at, &data)?);
    }
    Ok(out)
}
