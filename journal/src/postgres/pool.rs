//! A small pool of PostgreSQL connections and the retry rule of every journal transaction:
//! transient failures (serialization failure, deadlock, a connection lost before COMMIT was sent)
//! are retried on a fresh connection; a connection lost during COMMIT is reported as such, never
//! as a commit.
//!
//! Why tokio-postgres, a pool of our own, and no ORM: tokio-postgres is the maintained async driver
//! that speaks the protocol natively (pipelining, `LISTEN` via `poll_message`, SQLSTATE codes for
//! the retry rule) with few dependencies and no C library. The pool is 6 connections (`SIZE`),
//! shared by the group-commit writer (`writer`) and the other transactions (the listener has one of
//! its own), about 60 lines (`attempts`): a pool crate would add dependencies for features
//! (recycling policies, metrics) a daemon's short transactions do not need. Every statement is
//! prepared once per connection (`Conn`'s cache): a statement sent as text costs a second round
//! trip, and a claim is seven, not twelve.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Statement, Transaction};

use super::target::Connected;

use super::schema::SEARCH_PATH;
use super::target::PgTarget;
use crate::error::{JournalError, Result};

/// Connections beside the writer's and the listener's. A daemon's transactions are short; more
/// connections than this only queue inside the server.
const SIZE: usize = 6;
/// How long one attempt may take before it is abandoned (its connection is dropped).
const ATTEMPT: Duration = Duration::from_secs(10);
/// How long transient failures are retried before the caller is told.
const BUDGET: Duration = Duration::from_secs(30);

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub(crate) struct Pool {
    target: PgTarget,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
}

/// A connection and the statements prepared on it: a prepared statement runs in one round trip
/// instead of two (parse, then execute).
pub(crate) struct Conn {
    client: Client,
    prepared: HashMap<&'static str, Statement>,
}

impl Conn {
    pub(crate) async fn prepared(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).await?;
        self.prepared.insert(sql, s.clone());
        Ok(s)
    }

    /// Several statements of this connection's cache, prepared before a transaction borrows it.
    pub(crate) async fn prepared_all<const N: usize>(&mut self, sqls: [&'static str; N]) -> Result<[Statement; N]> {
        let mut out = Vec::with_capacity(N);
        for sql in sqls {
            out.push(self.prepared(sql).await?);
        }
        Ok(out.try_into().unwrap_or_else(|_| unreachable!("one statement per query")))
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// Whether an error says the same transaction may succeed if run again from the start.
/// Every driver error reaches the journal's callers classified here.
impl From<tokio_postgres::Error> for JournalError {
    fn from(e: tokio_postgres::Error) -> JournalError {
        let transient = is_transient(&e);
        JournalError::Postgres { source: e, transient }
    }
}

fn is_transient(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        Some(c) => {
            [SqlState::T_R_SERIALIZATION_FAILURE, SqlState::T_R_DEADLOCK_DETECTED, SqlState::ADMIN_SHUTDOWN].contains(c)
                || c.code().starts_with("08")
                || c == &SqlState::CANNOT_CONNECT_NOW
                || c == &SqlState::TOO_MANY_CONNECTIONS
        }
        // No SQLSTATE: transient only if the connection itself failed (closed, reset, timed
        // out), not for a value that does not convert.
        None => e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// Commits; a failure without a server answer leaves the outcome unknown, which is never
/// retried (nor reported as committed).
pub(crate) async fn commit(tx: Transaction<'_>) -> Result<()> {
    tx.commit().await.map_err(commit_error)
}

/// What a failed COMMIT means. Without a server answer, or with the server going down (57P01
/// admin shutdown, 57P02 crash shutdown, a connection error class 08: a fast shutdown under
/// synchronous replication answers COMMIT with FATAL 57P01 after committing locally), the
/// outcome is unknown and must not be retried. Any other server error rolled it back.
pub(crate) fn commit_error(e: tokio_postgres::Error) -> JournalError {
    let down = e.code().is_some_and(|c| {
        c == &SqlState::ADMIN_SHUTDOWN || c == &SqlState::CRASH_SHUTDOWN || c.code().starts_with("08")
    });
    if e.as_db_error().is_none() || down { JournalError::CommitUnknown } else { e.into() }
}

/// Whether this process has looked at whether a `prefer` connection ended in plaintext.
static PLAINTEXT_CHECKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Pool {
    pub(crate) fn new(target: PgTarget) -> Pool {
        Pool { target, idle: Mutex::new(Vec::new()), permits: Semaphore::new(SIZE) }
    }

    pub(crate) fn target(&self) -> &PgTarget {
        &self.target
    }

    /// A new connection and its driver, which the caller must poll.
    pub(crate) async fn connect_raw(&self) -> Result<Connected> {
        self.target.connect(Some(&format!("-c search_path={SEARCH_PATH}"))).await
    }

    /// A new connection, its driver spawned on the journal's runtime.
    pub(crate) async fn connect(&self) -> Result<Client> {
        let (client, connection) = self.connect_raw().await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a PostgreSQL connection ended");
            }
        });
        if self.target.ssl_mode() == super::tls::SslMode::Prefer && !PLAINTEXT_CHECKED.swap(true, Ordering::Relaxed) {
            // `prefer` (the default) falls back to plaintext when the server answers that it has
            // no TLS, and an active attacker can answer that: say so once, where it happened.
            let q = client.query_opt("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await;
            if let Ok(Some(row)) = q
                && !row.try_get::<_, bool>(0).unwrap_or(true)
            {
                tracing::warn!(
                    journal = %self.target,
                    "the journal's connection is not encrypted (sslmode=prefer and the server offers no TLS): use sslmode=verify-full with the server's CA to be sure whom you talk to"
                );
            }
        }
        Ok(client)
    }

    /// Runs the transaction `op` on a pooled connection, again from the start on a fresh one
    /// after a transient failure, for up to `BUDGET`.
    pub(crate) async fn run<R, F>(&self, op: F) -> Result<R>
    where
        F: for<'c> FnMut(&'c mut Conn) -> BoxFuture<'c, Result<R>>,
    {
        self.attempts(true, op).await
    }

    /// Runs the read-only `op` like `run`; one that takes too long is simply asked again.
    pub(crate) async fn read<R, F>(&self, op: F) -> Result<R>
    where
        F: for<'c> FnMut(&'c mut Conn) -> BoxFuture<'c, Result<R>>,
    {
        self.attempts(false, op).await
    }

    async fn attempts<R, F>(&self, writes: bool, mut op: F) -> Result<R>
    where
        F: for<'c> FnMut(&'c mut Conn) -> BoxFuture<'c, Result<R>>,
    {
        let _permit = self.permits.acquire().await.map_err(|_| JournalError::WriterGone)?;
        let started = Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            let pooled = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let mut client = match pooled {
                Some(c) if !c.is_closed() => c,
                _ => match self.connect().await {
                    Ok(client) => Conn { client, prepared: HashMap::new() },
                    Err(e) if e.is_retryable() && started.elapsed() < BUDGET => {
                        tracing::warn!(error = %e, "PostgreSQL unreachable; retrying");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            let outcome = tokio::time::timeout(ATTEMPT, op(&mut client)).await;
            match outcome {
                Ok(Ok(r)) => {
                    self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(client);
                    return Ok(r);
                }
                Ok(Err(JournalError::Postgres { source: e, transient: true })) if started.elapsed() < BUDGET => {
                    tracing::warn!(error = %e, "transient PostgreSQL failure; running the transaction again");
                    if !client.is_closed() && e.code().is_some() {
                        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(client);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Ok(Err(e)) => {
                    if !client.is_closed() {
                        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(client);
                    }
                    return Err(e);
                }
                // Dropped mid-flight: whether a COMMIT was on the wire is unknown.
                Err(_) if writes => return Err(JournalError::CommitUnknown),
                Err(_) if started.elapsed() < BUDGET => {
                    tracing::warn!("PostgreSQL did not answer a read in time; asking again")
                }
                Err(_) => {
                    return Err(JournalError::Unreachable {
                        location: self.target.to_string(),
                        detail: format!("no answer within {} s", BUDGET.as_secs()),
                    });
                }
            }
        }
    }
}

/// Shared by the handles of one journal and its tasks.
pub(crate) type SharedPool = Arc<Pool>;
