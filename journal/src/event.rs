//! The event vocabulary of the journal: what can happen to a workflow, as appended records.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A compensating action, stored as data so it can run after a restart without the workflow code.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Undo {
    pub activity: String,
    pub input: Value,
}

/// One appended record. Events are never updated or deleted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    Submitted {
        workflow: String,
        input: Value,
        #[serde(default)]
        no_rollback: bool,
        /// The version of the workflow's code it was submitted to (see `WorkflowDef::version`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code_version: Option<u32>,
        /// Who this submission is to AWS: the created-by tag, zone marker and token salt of what
        /// it makes. Unique per submission (`<id>@<UUIDv7>`), so a workflow id used again (after
        /// `prune`, in another journal) is never the creator of what its namesake made. Absent in
        /// records of versions before it: their creator is the workflow id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        creator: Option<String>,
        /// Who asked for it through the daemon's API, as `<tenant>/<subject>`: shown by `status`,
        /// `history` and the page, and the tenant the workflow (and its cluster) belongs to.
        /// Absent for submissions through the journal path. An older binary ignores it, which
        /// loses nothing but the showing: it acts the same.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        submitter: Option<String>,
        /// The caller's W3C `traceparent` the submission's trace continues (`TRACEPARENT`, the
        /// API's header). An older binary ignores it: its executions start traces of their own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
    LeaseTaken {
        owner: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<String>,
    },
    StepStarted {
        step: String,
        attempt: u32,
        activity: String,
        input_hash: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        undo: Option<Undo>,
        /// Where the code called the step: `<scope>#<n>`, the n-th step called in its scope.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        position: Option<String>,
    },
    StepCompleted {
        step: String,
        /// The attempt that succeeded; its start record may have been elided (fast steps).
        #[serde(default)]
        attempt: u32,
        activity: String,
        input_hash: String,
        output: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        position: Option<String>,
    },
    StepFailed {
        step: String,
        attempt: u32,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        activity: String,
        error: String,
        retryable: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_attempt_at: Option<i64>,
    },
    Paused {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        reason: String,
    },
    CancelRequested,
    ResumeRequested,
    CompensationStarted {
        reason: String,
    },
    Completed {
        output: Value,
    },
    Failed {
        error: String,
    },
    Compensated,
    CompensationFailed {
        error: String,
        remaining: Vec<String>,
    },
    /// The execution waits, before anything acts, for a hold held elsewhere (another journal's
    /// lease on the cluster, the account's quota): whom or what, for `status`. Anything the
    /// workflow records next ends the wait.
    Waiting {
        reason: String,
    },
    /// The execution holds what it waited for (`Waiting`), until it ends: for `status`.
    Holding {
        what: String,
    },
}

impl Event {
    /// The short name stored in the `kind` column.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Submitted { .. } => "submitted",
            Event::LeaseTaken { .. } => "lease_taken",
            Event::StepStarted { .. } => "step_started",
            Event::StepCompleted { .. } => "step_completed",
            Event::StepFailed { .. } => "step_failed",
            Event::Paused { .. } => "paused",
            Event::CancelRequested => "cancel_requested",
            Event::ResumeRequested => "resume_requested",
            Event::CompensationStarted { .. } => "compensation_started",
            Event::Completed { .. } => "completed",
            Event::Failed { .. } => "failed",
            Event::Compensated => "compensated",
            Event::CompensationFailed { .. } => "compensation_failed",
            Event::Waiting { .. } => "waiting",
            Event::Holding { .. } => "holding",
        }
    }

    /// The step the event is about, if any.
    pub fn step(&self) -> Option<&str> {
        match self {
            Event::StepStarted { step, .. } | Event::StepCompleted { step, .. } | Event::StepFailed { step, .. } => {
                Some(step)
            }
            Event::Paused { step, .. } => step.as_deref(),
            _ => None,
        }
    }
}

/// An event as read back, with its position and time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventRecord {
    pub seq: i64,
    /// Milliseconds since the Unix epoch.
    pub at: i64,
    #[serde(flatten)]
    pub event: Event,
}

impl EventRecord {
    /// Decodes a stored event; one that does not decode is named, so the workflow can be paused
    /// with that reason instead of failing again at every claim.
    pub(crate) fn decode(workflow: &str, seq: i64, at: i64, data: &str) -> crate::error::Result<EventRecord> {
        let event = serde_json::from_str(data).map_err(|e| crate::error::JournalError::BadRecord {
            workflow: workflow.to_string(),
            seq,
            detail: e.to_string(),
        })?;
        Ok(EventRecord { seq, at, event })
    }
}
