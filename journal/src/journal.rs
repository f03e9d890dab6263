//! The journal's one handle: every read and write of workflow records goes through `Journal`,
//! which hands it to the backend the location names — a SQLite file (`sqlite/`, the embedded
//! default) or a PostgreSQL database shared by daemons on several hosts (`postgres/`). The engine
//! and the binaries never know which. The dispatcher sits above both backends; what they share
//! (the call's types) is `api`, below them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::api::{
    AcquireOutcome, CommitObserver, Durability, Fence, NewWorkflow, Pruned, Renewal, RequestOutcome, SubmitOutcome,
    WorkflowOutcome, WorkflowRow,
};
use crate::error::Result;
use crate::event::{Event, EventRecord};
use crate::postgres::{PgTarget, Postgres};
use crate::projection::{WorkflowState, WorkflowView};
use crate::sqlite::Sqlite;

/// Where a journal lives.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // one per process: boxing the URL would buy nothing
pub enum Location {
    /// A SQLite file on this host.
    Sqlite(PathBuf),
    /// A PostgreSQL database, shared by any number of daemons on any number of hosts.
    Postgres(PgTarget),
}

impl Location {
    /// A `postgres://` or `postgresql://` URL names a PostgreSQL database (libpq's URL form);
    /// anything else is a file path. `password` is used when the URL carries none.
    pub fn parse(s: &str, password: impl FnOnce(&PgTarget) -> Option<String>) -> Result<Location> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            let mut target = PgTarget::parse(s)?;
            if !target.has_password()
                && let Some(p) = password(&target)
            {
                target.set_password(&p);
            }
            Ok(Location::Postgres(target))
        } else {
            Ok(Location::Sqlite(PathBuf::from(s)))
        }
    }
}

/// Shown in messages and logs: a file's path, or the URL without its password.
impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(p) => write!(f, "{}", p.display()),
            Location::Postgres(t) => write!(f, "{t}"),
        }
    }
}

/// A handle on one journal. Cheap to clone; the backend's writer stops with the last clone.
#[derive(Clone)]
pub struct Journal {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Sqlite(Arc<Sqlite>),
    Postgres(Arc<Postgres>),
}

/// Calls the same method on whichever backend this journal has.
macro_rules! dispatch {
    ($self:ident, $b:ident => $e:expr) => {
        match &$self.backend {
            Backend::Sqlite($b) => $e,
            Backend::Postgres($b) => $e,
        }
    };
}

impl Journal {
    /// Opens (creating with mode 0600 and migrating if needed) a SQLite journal for reading and
    /// writing. Cheap whatever the journal's size: reading every page is `verify`'s job.
    pub fn open(path: &Path) -> Result<Journal> {
        Ok(Journal { backend: Backend::Sqlite(Arc::new(Sqlite::open(path)?)) })
    }

    /// Opens an existing SQLite journal for reading only; never creates or changes the file.
    pub fn open_read_only(path: &Path) -> Result<Journal> {
        Ok(Journal { backend: Backend::Sqlite(Arc::new(Sqlite::open_read_only(path)?)) })
    }

    /// Opens the journal at `location` for reading and writing, creating or migrating it.
    pub fn open_at(location: &Location) -> Result<Journal> {
        match location {
            Location::Sqlite(p) => Journal::open(p),
            Location::Postgres(t) => Ok(Journal { backend: Backend::Postgres(Arc::new(Postgres::open(t, false)?)) }),
        }
    }

    /// Opens an existing journal at `location` for reading only.
    pub fn open_read_only_at(location: &Location) -> Result<Journal> {
        match location {
            Location::Sqlite(p) => Journal::open_read_only(p),
            Location::Postgres(t) => Ok(Journal { backend: Backend::Postgres(Arc::new(Postgres::open(t, true)?)) }),
        }
    }

    /// Where this journal lives, for messages (never a password).
    pub fn describe(&self) -> String {
        dispatch!(self, b => b.describe())
    }

    /// Installs the observer of every commit batch (latency, size), for metrics; false if one
    /// was installed already.
    pub fn observe_commits(&self, f: CommitObserver) -> bool {
        dispatch!(self, b => b.observe_commits(f))
    }

    /// Checks the journal as a whole (SQLite: reads every page; PostgreSQL: the schema's
    /// version): a damaged journal is found at daemon start, not half-way through a run.
    pub fn verify(&self) -> Result<()> {
        dispatch!(self, b => b.verify())
    }

    /// Resolves once the journal can be written now (readiness; waits while another process
    /// holds SQLite's write lock, fails while PostgreSQL is unreachable).
    pub async fn ping_writer(&self) -> Result<()> {
        dispatch!(self, b => b.ping_writer().await)
    }

    /// Resolves when another process may have made work claimable (PostgreSQL: a notification
    /// on submit, resume, release or a finished workflow). SQLite has no such signal: never
    /// resolves, and daemons find work by polling.
    pub async fn work_arrived(&self) {
        match &self.backend {
            Backend::Sqlite(_) => std::future::pending().await,
            Backend::Postgres(b) => b.work_arrived().await,
        }
    }

    /// How many workflows are in each state.
    pub fn count_by_state(&self) -> Result<Vec<(String, u64)>> {
        dispatch!(self, b => b.count_by_state())
    }

    /// Records a new workflow, or recognises a repeated submission of the same one.
    pub async fn submit(&self, new: NewWorkflow) -> Result<SubmitOutcome> {
        dispatch!(self, b => b.submit(new).await)
    }

    /// Appends events of a workflow held under `fence`; refused unless that acquisition still
    /// holds its lease (same owner and epoch).
    pub async fn append(
        &self,
        id: &str,
        fence: &Fence,
        events: Vec<Event>,
        at: i64,
        durability: Durability,
    ) -> Result<()> {
        dispatch!(self, b => b.append(id, fence, events, at, durability).await)
    }

    /// Takes the lease of a runnable workflow if it is free, expired, or held by a dead process
    /// of this machine, and if no older workflow of its cluster is unfinished. `now` is the
    /// caller's clock; PostgreSQL keeps every lease by the database's clock instead.
    pub async fn acquire(&self, id: &str, owner: &str, now: i64, ttl_ms: i64) -> Result<AcquireOutcome> {
        dispatch!(self, b => b.acquire(id, owner, now, ttl_ms).await)
    }

    /// Extends the leases `owner` holds; tells which are still held and which have a cancel request.
    pub async fn renew(&self, owner: &str, ids: Vec<String>, now: i64, ttl_ms: i64) -> Result<Vec<Renewal>> {
        dispatch!(self, b => b.renew(owner, ids, now, ttl_ms).await)
    }

    /// Gives leases back, so another daemon can take over at once.
    pub async fn release(&self, owner: &str, ids: Vec<String>) -> Result<()> {
        dispatch!(self, b => b.release(owner, ids).await)
    }

    /// Records a cancel request; the owner stops at its next step boundary and compensates.
    pub async fn request_cancel(&self, id: &str, at: i64) -> Result<RequestOutcome> {
        dispatch!(self, b => b.request_cancel(id, at).await)
    }

    /// Records a resume request for a paused, failed or compensation_failed workflow.
    pub async fn request_resume(&self, id: &str, at: i64) -> Result<RequestOutcome> {
        dispatch!(self, b => b.request_resume(id, at).await)
    }

    /// Every workflow, oldest first.
    pub fn list(&self) -> Result<Vec<WorkflowRow>> {
        dispatch!(self, b => b.list())
    }

    /// One workflow's summary row.
    pub fn row(&self, id: &str) -> Result<Option<WorkflowRow>> {
        dispatch!(self, b => b.row(id))
    }

    /// State, output and error of one workflow, from its summary row alone.
    pub fn outcome(&self, id: &str) -> Result<Option<WorkflowOutcome>> {
        dispatch!(self, b => b.outcome(id))
    }

    /// `outcome` for async callers: a PostgreSQL round trip does not hold the caller's thread
    /// (SQLite's local read is made in place, as `outcome` makes it).
    pub async fn outcome_async(&self, id: &str) -> Result<Option<WorkflowOutcome>> {
        match &self.backend {
            Backend::Sqlite(b) => b.outcome(id),
            Backend::Postgres(b) => b.outcome_async(id).await,
        }
    }

    /// Runnable workflows whose lease `me` could take now, oldest ticket first. Only the head of
    /// each cluster's queue is a candidate, so `limit` is never used up by workflows that would
    /// only wait: one runnable workflow behind thousands of blocked ones is still found.
    pub fn claimable(&self, now: i64, me: &str, limit: usize) -> Result<Vec<String>> {
        dispatch!(self, b => b.claimable(now, me, limit))
    }

    /// The workflow `id` waits for on its cluster (id, workflow name, state), if it waits.
    pub fn waiting_for(&self, id: &str, now: i64) -> Result<Option<(String, String, WorkflowState)>> {
        dispatch!(self, b => b.waiting_for(id, now))
    }

    /// The complete event log of one workflow.
    pub fn events(&self, id: &str) -> Result<Vec<EventRecord>> {
        dispatch!(self, b => b.events(id))
    }

    /// The full view of one workflow (summary, steps, lease), or None if unknown.
    pub fn load(&self, id: &str) -> Result<Option<WorkflowView>> {
        dispatch!(self, b => b.load(id))
    }

    /// `load` for async callers, as `outcome_async`.
    pub async fn load_async(&self, id: &str) -> Result<Option<WorkflowView>> {
        match &self.backend {
            Backend::Sqlite(b) => b.load(id),
            Backend::Postgres(b) => b.load_async(id).await,
        }
    }

    /// Moves every workflow that finished for good (`completed`, `compensated`) before
    /// `before_ms` (its last record's time) to the archive: for SQLite a journal file beside
    /// this one, for PostgreSQL the `archived_*` tables of the same database.
    pub fn prune(&self, before_ms: i64) -> Result<Pruned> {
        dispatch!(self, b => b.prune(before_ms))
    }
}
