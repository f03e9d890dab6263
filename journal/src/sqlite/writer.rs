//! Group commit: one thread owns the write connection and commits the queued operations of every
//! workflow together, one fsync for many records.
//!
//! Why one writer thread: operations from all workflows queue to it, and it commits whatever is
//! queued in one `BEGIN IMMEDIATE` transaction, each operation in its own savepoint (a fenced-off
//! append does not undo its neighbours). What the file is opened with (`synchronous=FULL`, WAL,
//! STRICT tables, numbered migrations) is `schema`'s.

use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::api::CommitObserver;
use crate::error::{JournalError, Result};

/// How long the writer waits for company when only lazy records are queued. Nobody waits on
/// lazy records, so lingering costs no latency and lets them share the next awaited commit.
const LAZY_LINGER: Duration = Duration::from_millis(5);
/// An upper bound on one transaction, so a flood of writers cannot starve replies.
const MAX_BATCH: usize = 4096;

/// One queued operation: runs inside the batch transaction, learns the outcome after COMMIT.
pub(crate) trait Job: Send {
    fn lazy(&self) -> bool;
    /// Returns false when the operation failed and its changes must be rolled back.
    fn apply(&mut self, conn: &Connection) -> bool;
    fn finish(self: Box<Self>, commit: std::result::Result<(), &str>);
}

pub(crate) struct Op<R, F> {
    f: Option<F>,
    out: Option<Result<R>>,
    reply: Option<oneshot::Sender<Result<R>>>,
    lazy: bool,
}

impl<R, F> Op<R, F>
where
    R: Send + 'static,
    F: FnOnce(&Connection) -> Result<R> + Send + 'static,
{
    pub(crate) fn boxed(lazy: bool, f: F) -> (Box<dyn Job>, oneshot::Receiver<Result<R>>) {
        let (tx, rx) = oneshot::channel();
        (Box::new(Op { f: Some(f), out: None, reply: Some(tx), lazy }), rx)
    }
}

impl<R, F> Job for Op<R, F>
where
    R: Send + 'static,
    F: FnOnce(&Connection) -> Result<R> + Send + 'static,
{
    fn lazy(&self) -> bool {
        self.lazy
    }

    fn apply(&mut self, conn: &Connection) -> bool {
        let f = self.f.take().expect("a job is applied once");
        let out = f(conn);
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn finish(mut self: Box<Self>, commit: std::result::Result<(), &str>) {
        let out = match (commit, self.out.take()) {
            (Ok(()), Some(out)) => out,
            (Err(_), Some(Err(e))) => Err(e),
            (Err(msg), _) => Err(JournalError::CommitFailed(msg.to_string())),
            (Ok(()), None) => Err(JournalError::WriterGone),
        };
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(out);
        }
    }
}

/// How long the writer polls for the next operation before sleeping: an operation queued while
/// the previous commit finished arrives within microseconds, and a thread wake-up costs more.
/// Short on purpose: on two cores a longer spin takes the CPU from the very task that prepares
/// the next step (measured with `infraflow bench`: 250 µs gave a/c 0.49, 60 µs 0.59, 15 µs
/// 0.63–0.66).
const SPIN: Duration = Duration::from_micros(15);

fn next_job(rx: &mpsc::Receiver<Box<dyn Job>>) -> Option<Box<dyn Job>> {
    let until = Instant::now() + SPIN;
    while Instant::now() < until {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
    rx.recv().ok()
}

/// Runs one transaction-control statement through the statement cache.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// The writer thread's loop: returns when every sender is gone.
pub(crate) fn run(mut conn: Connection, rx: mpsc::Receiver<Box<dyn Job>>, observer: Arc<OnceLock<CommitObserver>>) {
    while let Some(first) = next_job(&rx) {
        let mut batch = vec![first];
        drain(&rx, &mut batch);
        if batch.iter().all(|j| j.lazy()) {
            let deadline = Instant::now() + LAZY_LINGER;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                match rx.recv_timeout(left) {
                    Ok(job) => {
                        let awaited = !job.lazy();
                        batch.push(job);
                        drain(&rx, &mut batch);
                        if awaited || batch.iter().any(|j| !j.lazy()) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        }
        let (started, size) = (Instant::now(), batch.len());
        commit_batch(&mut conn, batch);
        if let Some(observe) = observer.get() {
            observe(started.elapsed(), size);
        }
    }
}

fn drain(rx: &mpsc::Receiver<Box<dyn Job>>, batch: &mut Vec<Box<dyn Job>>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

/// How long the writer keeps trying to take SQLite's write lock from another process (each try
/// also waits up to the connection's busy timeout) before failing the batch. Callers wait
/// meanwhile: a lock held for seconds by a backup or a second daemon is not an error.
/// `INFRAFLOW_SQLITE_BUSY_SECONDS` sets it (an operator whose backups hold the lock longer; a
/// test that must see the budget run out without waiting two minutes).
pub(crate) fn busy_budget() -> Duration {
    static BUDGET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        let set = std::env::var("INFRAFLOW_SQLITE_BUSY_SECONDS").ok().and_then(|v| v.trim().parse::<u64>().ok());
        Duration::from_secs(set.unwrap_or(120))
    })
}

/// Every driver error reaches the journal's callers classified here.
impl From<rusqlite::Error> for JournalError {
    fn from(e: rusqlite::Error) -> JournalError {
        let busy = is_busy(&e);
        JournalError::Sqlite { source: e, busy }
    }
}

pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// Runs a transaction-control statement, retrying while another process holds the lock.
fn exec_waiting(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    retry_while_busy(sql, || exec(conn, sql))
}

/// Runs `f` again, for up to the busy budget, while SQLite answers that another connection holds
/// the lock — also where SQLite answers so at once, without its busy handler, because waiting
/// could deadlock (two connections upgrading their locks, as two processes switching one new
/// file to WAL can).
pub(crate) fn retry_while_busy<T>(statement: &str, mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        match f() {
            Err(e) if is_busy(&e) && start.elapsed() < busy_budget() => {
                tracing::warn!(
                    statement,
                    waited_ms = start.elapsed().as_millis() as u64,
                    "the journal is locked by another process; waiting"
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            r => return r,
        }
    }
}

fn fail_all(batch: Vec<Box<dyn Job>>, msg: &str) {
    for job in batch {
        job.finish(Err(msg));
    }
}

/// After an I/O or out-of-memory error SQLite may roll the whole transaction back and return to
/// autocommit: the rest of the batch must then fail, not run as separate durable statements.
const ROLLED_BACK: &str = "SQLite rolled the batch's transaction back after an error; none of its records were written";

fn commit_batch(conn: &mut Connection, mut batch: Vec<Box<dyn Job>>) {
    if let Err(e) = exec_waiting(conn, "BEGIN IMMEDIATE") {
        fail_all(batch, &e.to_string());
        return;
    }
    if batch.len() == 1 {
        // Alone in its transaction, an operation needs no savepoint: a refusal rolls it all back.
        if !batch[0].apply(conn) {
            if !conn.is_autocommit() {
                let _ = exec(conn, "ROLLBACK");
            }
            for job in batch {
                job.finish(Ok(()));
            }
            return;
        }
        if conn.is_autocommit() {
            fail_all(batch, ROLLED_BACK);
            return;
        }
    } else {
        for job in batch.iter_mut() {
            // A savepoint per operation: one refused operation (a fenced-off append) must not
            // undo the others sharing its transaction.
            let _ = exec(conn, "SAVEPOINT op");
            if job.apply(conn) {
                let _ = exec(conn, "RELEASE op");
            } else {
                let _ = exec(conn, "ROLLBACK TO op");
                let _ = exec(conn, "RELEASE op");
            }
            if conn.is_autocommit() {
                fail_all(batch, ROLLED_BACK);
                return;
            }
        }
    }
    match exec_waiting(conn, "COMMIT") {
        Ok(()) => {
            for job in batch {
                job.finish(Ok(()));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "journal commit failed");
            let _ = exec(conn, "ROLLBACK");
            fail_all(batch, &e.to_string());
        }
    }
}
