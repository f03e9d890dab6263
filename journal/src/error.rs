//! Errors of the journal, classified by whether retrying the same call can help. A database
//! error is classified where it arises, by its backend (`postgres::pool`, `sqlite::writer`,
//! which convert the driver's errors), so this module names no backend.

use std::path::PathBuf;

/// Everything that can go wrong talking to the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{path}: not an infraflow journal ({reason}); pass another --db or move the file away")]
    NotAJournal { path: PathBuf, reason: String },
    #[error("{path}: the journal is corrupt ({detail}); restore it from a backup")]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "{path}: the journal has schema version {found}, newer than this infraflow understands ({supported}); upgrade infraflow"
    )]
    TooNew { path: PathBuf, found: i64, supported: i64 },
    #[error("{path}: no journal there; submit a workflow first or pass the right --db")]
    Missing { path: PathBuf },
    #[error("{path}: cannot create the journal: {source}")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("the journal is opened read-only; writes go through a writable journal")]
    ReadOnly,
    #[error("lease lost on workflow {workflow}: it is now held by {holder}; this process stops running it")]
    LeaseLost { workflow: String, holder: String },
    #[error("no workflow with id {0}")]
    UnknownWorkflow(String),
    #[error("the journal commit failed: {0}")]
    CommitFailed(String),
    #[error("the journal writer has stopped")]
    WriterGone,
    #[error("the journal is busy (another process holds the write lock too long); try again")]
    Busy,
    #[error("{location}: {detail}")]
    BadLocation { location: String, detail: String },
    #[error(
        "{location}: cannot reach PostgreSQL ({detail}); check that the server runs and the URL, user and password are right"
    )]
    Unreachable { location: String, detail: String },
    /// TLS refused the connection (no TLS on the server, an untrusted certificate): final.
    #[error("{location}: {detail}")]
    Tls { location: String, detail: String },
    #[error(
        "the connection to PostgreSQL was lost while committing; the transaction may or may not have been applied, so it is not retried here (the engine replays from the journal)"
    )]
    CommitUnknown,
    /// `transient`: the backend's judgement that the same transaction may succeed if run again.
    #[error("postgres: {}", postgres_detail(source))]
    Postgres { source: tokio_postgres::Error, transient: bool },
    /// `busy`: another process held the lock (the backend's judgement).
    #[error("sqlite: {source}")]
    Sqlite { source: rusqlite::Error, busy: bool },
    #[error("a journal record does not decode: {0}")]
    Decode(#[from] serde_json::Error),
    #[error(
        "event {seq} of workflow {workflow} does not decode ({detail}): it was written by a newer infraflow, or the journal was damaged or edited; run a version that reads it, or restore the journal from a backup"
    )]
    BadRecord { workflow: String, seq: i64, detail: String },
}

impl JournalError {
    /// Whether the same call may succeed if made again later.
    pub fn is_retryable(&self) -> bool {
        match self {
            JournalError::Busy | JournalError::Unreachable { .. } => true,
            JournalError::Postgres { transient, .. } => *transient,
            JournalError::Sqlite { busy, .. } => *busy,
            _ => false,
        }
    }
}

/// The server's own message and SQLSTATE, which the driver's `Display` leaves out.
fn postgres_detail(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => e.to_string(),
    }
}

pub type Result<T, E = JournalError> = std::result::Result<T, E>;
