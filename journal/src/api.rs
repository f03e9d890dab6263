//! The journal's contract, below both backends: the types every call takes or returns. Each
//! backend (`sqlite/`, `postgres/`) implements the calls of `Journal` on these; the dispatcher
//! (`journal.rs`) sits above them and is the only module that names both.

use serde::Serialize;
use serde_json::Value;

use crate::projection::WorkflowState;

/// Whether the caller waits for the record to be on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Returns once committed and fsynced.
    Durable,
    /// Queued; committed with the next durable batch (or within a few milliseconds). Lost only if
    /// the process dies in that window: for records that a crash may drop (an attempt's start).
    Lazy,
}

/// A workflow to record.
#[derive(Clone, Debug)]
pub struct NewWorkflow {
    pub id: String,
    pub workflow: String,
    pub input: Value,
    /// Workflows with the same non-empty cluster key run one at a time, oldest first.
    pub cluster: String,
    pub no_rollback: bool,
    /// The version of the workflow's code, recorded so a differing binary can refuse to replay.
    pub code_version: Option<u32>,
    /// The workflow's creator identity (`Event::Submitted::creator`).
    pub creator: Option<String>,
    /// Who asked for it through the API (`Event::Submitted::submitter`): none from the journal path.
    pub submitter: Option<String>,
    /// The caller's trace (`Event::Submitted::traceparent`).
    pub traceparent: Option<String>,
    pub at: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitOutcome {
    Created,
    /// The same id was submitted before with the same workflow and input: nothing was written.
    AlreadyExists,
    /// The id is taken by a different workflow or input.
    Conflict {
        existing_workflow: String,
    },
    /// The id belongs to a workflow that was pruned to the archive: ids are never used twice.
    Archived,
}

/// One acquisition of a lease: the owner, and the epoch — the sequence number of the
/// `LeaseTaken` event it appended. Appends are fenced on both, so an append left over from an
/// earlier acquisition by the same owner (a process that fenced itself, released, and claimed the
/// workflow again while the old append still waited in its writer) is refused, not folded in
/// after the new execution read the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub owner: String,
    pub epoch: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// `previous`: the other owner it was taken from, if any.
    Acquired {
        previous: Option<String>,
        fence: Fence,
    },
    HeldBy(String),
    /// An older unfinished workflow of the same cluster goes first.
    WaitingFor {
        id: String,
        workflow: String,
        state: WorkflowState,
    },
    NotRunnable(WorkflowState),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    pub id: String,
    pub held: bool,
    pub cancel_requested: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestOutcome {
    Done(WorkflowState),
    AlreadyRequested(WorkflowState),
    NotApplicable(WorkflowState),
    /// A compensation is not resumed: a later workflow of its cluster (`by`) has run since and may
    /// have adopted what the compensation would delete.
    Superseded {
        by: String,
    },
}

/// One line of `status`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkflowRow {
    pub id: String,
    pub workflow: String,
    pub state: WorkflowState,
    pub cluster: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub current_step: Option<String>,
    pub attempts: u32,
    pub error: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
}

/// Told of every batch a journal's writer committed (or failed to): how long it took and how
/// many operations it held. For metrics; must be cheap.
pub type CommitObserver = Box<dyn Fn(std::time::Duration, usize) + Send + Sync>;

/// A workflow's state, output and error, from its summary row.
pub type WorkflowOutcome = (WorkflowState, Option<Value>, Option<String>);

/// What a prune moved.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Pruned {
    pub workflows: u64,
    pub events: u64,
    /// Where the archive is: the archive journal's path, or PostgreSQL's archive tables.
    pub archive: String,
}
