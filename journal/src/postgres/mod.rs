//! The PostgreSQL backend: a journal shared by daemons on several hosts. Its connections live on
//! a runtime of its own (one thread), so a handle works from any caller, async or not; appends go through one group-commit task (`writer`),
//! everything else through a small pool (`pool`), and a listener wakes idle daemons (`listen`).
//!
//! Why a runtime of the journal's own: the driver's connections live on it, so a handle can be
//! opened and dropped from sync code, from `#[tokio::test]`'s current-thread runtime or from the
//! daemon's (measured: running them on the daemon's runtime instead was no faster, and its LISTEN
//! connection was read seconds late). Synchronous reads (the CLI's) hand their thread over
//! (`block_in_place`, in `block_on`) while they wait, and the engine's reads of a workflow's
//! history and outcome are awaited (`load_async`, `outcome_async`), so a hundred workflows starting
//! at once do not park the daemon's runtime threads.

mod append;
mod bench;
mod listen;
mod pool;
mod prune;
mod reads;
mod schema;
mod target;
mod tls;
mod tx;
mod writer;

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::{Notify, mpsc, oneshot};

use self::append::{AppendReq, Written};
use self::pool::{Pool, SharedPool};
use crate::api::{
    AcquireOutcome, CommitObserver, Durability, Fence, NewWorkflow, Pruned, Renewal, RequestOutcome, SubmitOutcome,
    WorkflowOutcome, WorkflowRow,
};
use crate::error::{JournalError, Result};
use crate::event::{Event, EventRecord};
use crate::projection::{WorkflowState, WorkflowView};

pub use self::bench::raw_commit_ceiling;
pub use self::target::PgTarget;

/// How long dropping the last handle waits for queued appends to be committed.
const FLUSH_ON_DROP: Duration = Duration::from_secs(10);

pub(crate) struct Postgres {
    runtime: Option<tokio::runtime::Runtime>,
    handle: Handle,
    pool: SharedPool,
    writer: Option<mpsc::UnboundedSender<writer::Job>>,
    writer_done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    work: Arc<Notify>,
    listener: OnceLock<tokio::task::JoinHandle<()>>,
    observer: Arc<OnceLock<CommitObserver>>,
    /// What this process last committed to each workflow it owns: the writer's hints.
    written: Arc<Written>,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Lazy appends still queued are committed before the connections go.
        self.writer.take();
        if let Some(done) = self.writer_done.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = done.recv_timeout(FLUSH_ON_DROP);
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs `fut` on the journal's runtime and blocks this thread for its result. On a
/// multi-threaded runtime the thread is handed over first, so its other tasks (heartbeats,
/// self-fencing watchdogs) go on meanwhile.
fn block_on<R: Send + 'static>(handle: &Handle, fut: impl Future<Output = Result<R>> + Send + 'static) -> Result<R> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let wait = move || rx.recv().unwrap_or(Err(JournalError::WriterGone));
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(wait),
        _ => wait(),
    }
}

impl Postgres {
    /// Connects, and creates or migrates the schema (read-only: only checks it).
    pub fn open(target: &PgTarget, read_only: bool) -> Result<Postgres> {
        // A runtime of its own: measured against running on the caller's multi-threaded runtime,
        // the same speed, and a LISTEN connection there was read seconds late.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("journal-postgres")
            .enable_all()
            .build()
            .map_err(|e| JournalError::Unreachable { location: target.to_string(), detail: e.to_string() })?;
        let (handle, runtime) = (rt.handle().clone(), Some(rt));
        let pool: SharedPool = Arc::new(Pool::new(target.clone()));
        let shown = target.to_string();
        let p = pool.clone();
        let ready = block_on(&handle, async move {
            let mut c = p.connect().await?;
            if read_only {
                match schema::version(&c).await? {
                    None => Err(JournalError::Missing { path: shown.into() }),
                    Some(v) => schema::too_new(v, &shown),
                }
            } else {
                schema::migrate(&mut c, &shown).await
            }
        });
        if let Err(e) = ready {
            // Dropping a runtime waits for its threads, which an async caller must not do.
            if let Some(rt) = runtime {
                rt.shutdown_background();
            }
            return Err(e);
        }
        let observer = Arc::new(OnceLock::new());
        let written = Arc::new(Written::default());
        let (writer, writer_done) = if read_only {
            (None, None)
        } else {
            let (tx, rx) = mpsc::unbounded_channel();
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            let (p, o, w) = (pool.clone(), observer.clone(), written.clone());
            handle.spawn(async move {
                writer::run(p, rx, o, w).await;
                let _ = done_tx.send(());
            });
            (Some(tx), Some(done_rx))
        };
        Ok(Postgres {
            runtime,
            handle,
            pool,
            writer,
            writer_done: Mutex::new(writer_done),
            work: Arc::new(Notify::new()),
            listener: OnceLock::new(),
            observer,
            written,
        })
    }

    pub fn describe(&self) -> String {
        self.pool.target().to_string()
    }

    pub fn observe_commits(&self, f: CommitObserver) -> bool {
        self.observer.set(f).is_ok()
    }

    /// Runs `fut` on the journal's runtime and waits for it from any async context.
    async fn spawn<R: Send + 'static>(&self, fut: impl Future<Output = Result<R>> + Send + 'static) -> Result<R> {
        self.handle.spawn(fut).await.map_err(|_| JournalError::WriterGone)?
    }

    /// A transaction on a pooled connection, retried as `pool::run` says.
    async fn transaction<R, F>(&self, op: F) -> Result<R>
    where
        R: Send + 'static,
        F: for<'c> FnMut(&'c mut pool::Conn) -> pool::BoxFuture<'c, Result<R>> + Send + 'static,
    {
        if self.writer.is_none() {
            return Err(JournalError::ReadOnly);
        }
        let pool = self.pool.clone();
        self.spawn(async move { pool.run(op).await }).await
    }

    fn read<R, F>(&self, op: F) -> Result<R>
    where
        R: Send + 'static,
        F: for<'c> FnMut(&'c mut pool::Conn) -> pool::BoxFuture<'c, Result<R>> + Send + 'static,
    {
        let pool = self.pool.clone();
        block_on(&self.handle, async move { pool.read(op).await })
    }

    /// As `read`, awaited: the caller's thread goes on with its other tasks meanwhile.
    async fn read_async<R, F>(&self, op: F) -> Result<R>
    where
        R: Send + 'static,
        F: for<'c> FnMut(&'c mut pool::Conn) -> pool::BoxFuture<'c, Result<R>> + Send + 'static,
    {
        let pool = self.pool.clone();
        self.spawn(async move { pool.read(op).await }).await
    }

    pub fn verify(&self) -> Result<()> {
        let shown = self.describe();
        self.read(move |c| {
            let shown = shown.clone();
            Box::pin(async move {
                match schema::version(c).await? {
                    None => Err(JournalError::Missing { path: shown.into() }),
                    Some(v) => schema::too_new(v, &shown),
                }
            })
        })
    }

    pub async fn ping_writer(&self) -> Result<()> {
        self.transaction(|c| Box::pin(async move { Ok(c.simple_query("SELECT 1").await.map(|_| ())?) })).await
    }

    pub async fn work_arrived(&self) {
        self.listener.get_or_init(|| self.handle.spawn(listen::listen(self.pool.clone(), self.work.clone())));
        self.work.notified().await;
    }

    pub fn count_by_state(&self) -> Result<Vec<(String, u64)>> {
        self.read(|c| Box::pin(reads::count_by_state(c)))
    }

    pub async fn submit(&self, new: NewWorkflow) -> Result<SubmitOutcome> {
        let new = Arc::new(new);
        self.transaction(move |c| {
            let new = new.clone();
            Box::pin(async move { tx::submit(c, &new).await })
        })
        .await
    }

    pub async fn append(
        &self,
        id: &str,
        fence: &Fence,
        events: Vec<Event>,
        at: i64,
        durability: Durability,
    ) -> Result<()> {
        let sender = self.writer.as_ref().ok_or(JournalError::ReadOnly)?;
        let req = AppendReq { id: id.to_string(), fence: Some(fence.clone()), events, at };
        match durability {
            Durability::Lazy => {
                sender.send(writer::Job { req, reply: None }).map_err(|_| JournalError::WriterGone)?;
                Ok(())
            }
            Durability::Durable => {
                let (tx, rx) = oneshot::channel();
                sender.send(writer::Job { req, reply: Some(tx) }).map_err(|_| JournalError::WriterGone)?;
                rx.await.map_err(|_| JournalError::WriterGone)?
            }
        }
    }

    pub async fn acquire(&self, id: &str, owner: &str, now: i64, ttl_ms: i64) -> Result<AcquireOutcome> {
        let (id, owner, written) = (id.to_string(), owner.to_string(), self.written.clone());
        self.transaction(move |c| {
            let (id, owner, written) = (id.clone(), owner.clone(), written.clone());
            Box::pin(async move { tx::acquire(c, &written, &id, &owner, now, ttl_ms).await })
        })
        .await
    }

    /// `now` is unused: leases are kept by the database's clock.
    pub async fn renew(&self, owner: &str, ids: Vec<String>, _now: i64, ttl_ms: i64) -> Result<Vec<Renewal>> {
        let (owner, ids) = (owner.to_string(), Arc::new(ids));
        self.transaction(move |c| {
            let (owner, ids) = (owner.clone(), ids.clone());
            Box::pin(async move { tx::renew(c, &owner, &ids, ttl_ms).await })
        })
        .await
    }

    pub async fn release(&self, owner: &str, ids: Vec<String>) -> Result<()> {
        let (owner, ids) = (owner.to_string(), Arc::new(ids));
        self.transaction(move |c| {
            let (owner, ids) = (owner.clone(), ids.clone());
            Box::pin(async move { tx::release(c, &owner, &ids).await })
        })
        .await
    }

    pub async fn request_cancel(&self, id: &str, at: i64) -> Result<RequestOutcome> {
        let id = id.to_string();
        self.transaction(move |c| {
            let id = id.clone();
            Box::pin(async move { tx::request_cancel(c, &id, at).await })
        })
        .await
    }

    pub async fn request_resume(&self, id: &str, at: i64) -> Result<RequestOutcome> {
        let id = id.to_string();
        self.transaction(move |c| {
            let id = id.clone();
            Box::pin(async move { tx::request_resume(c, &id, at).await })
        })
        .await
    }

    pub fn list(&self) -> Result<Vec<WorkflowRow>> {
        self.read(|c| Box::pin(reads::list(c)))
    }

    pub fn row(&self, id: &str) -> Result<Option<WorkflowRow>> {
        let id = id.to_string();
        self.read(move |c| Box::pin(reads::row(c, id.clone())))
    }

    pub fn outcome(&self, id: &str) -> Result<Option<WorkflowOutcome>> {
        let id = id.to_string();
        self.read(move |c| Box::pin(reads::outcome(c, id.clone())))
    }

    pub async fn outcome_async(&self, id: &str) -> Result<Option<WorkflowOutcome>> {
        let id = id.to_string();
        self.read_async(move |c| Box::pin(reads::outcome(c, id.clone()))).await
    }

    /// `now` is unused: leases are judged by the database's clock.
    pub fn claimable(&self, _now: i64, me: &str, limit: usize) -> Result<Vec<String>> {
        let me = me.to_string();
        self.read(move |c| Box::pin(reads::claimable(c, me.clone(), limit)))
    }

    pub fn waiting_for(&self, id: &str, _now: i64) -> Result<Option<(String, String, WorkflowState)>> {
        let id = id.to_string();
        self.read(move |c| Box::pin(reads::waiting_for(c, id.clone())))
    }

    pub fn events(&self, id: &str) -> Result<Vec<EventRecord>> {
        let id = id.to_string();
        self.read(move |c| {
            let id = id.clone();
            Box::pin(async move { reads::events(&**c, &id).await })
        })
    }

    pub fn load(&self, id: &str) -> Result<Option<WorkflowView>> {
        let id = id.to_string();
        self.read(move |c| Box::pin(reads::load(c, id.clone())))
    }

    pub async fn load_async(&self, id: &str) -> Result<Option<WorkflowView>> {
        let id = id.to_string();
        self.read_async(move |c| Box::pin(reads::load(c, id.clone()))).await
    }

    pub fn prune(&self, before_ms: i64) -> Result<Pruned> {
        if self.writer.is_none() {
            return Err(JournalError::ReadOnly);
        }
        let pool = self.pool.clone();
        let (workflows, events) =
            block_on(&self.handle, async move { pool.run(move |c| Box::pin(prune::prune(c, before_ms))).await })?;
        Ok(Pruned {
            workflows,
            events,
            archive: format!("{} (tables archived_workflows, archived_events)", self.describe()),
        })
    }
}
