//! Errors of the engine and of the activities it runs, classified by whether a retry can help.

use infraflow_journal::JournalError;
use serde::{Deserialize, Serialize};

/// How an activity failed. `retryable` decides between a durable retry and a terminal failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}{message}", code.as_deref().map(|c| format!("{c}: ")).unwrap_or_default())]
pub struct ActivityError {
    pub retryable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub message: String,
    /// The activity may have acted although it failed (a lost reply): a step with a `settle`
    /// window waits that long before its next attempt looks for what it may have made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outcome_unknown: bool,
    /// Only the operator can fix it (credentials, permissions): the workflow pauses instead of
    /// failing or compensating, and `retry` resumes it once they have.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub operator: bool,
}

impl ActivityError {
    pub fn retryable(message: impl Into<String>) -> ActivityError {
        ActivityError { retryable: true, code: None, message: message.into(), outcome_unknown: false, operator: false }
    }

    pub fn terminal(message: impl Into<String>) -> ActivityError {
        ActivityError { retryable: false, code: None, message: message.into(), outcome_unknown: false, operator: false }
    }
}

/// Why a step did not return a value. Workflow code propagates it with `?`.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("step {step} failed: {error}")]
    Failed { step: String, error: ActivityError },
    #[error("paused at step {step}: {reason}")]
    Paused { step: String, reason: String },
    #[error("cancel requested")]
    Cancelled,
    #[error("this process is stopping")]
    Stopped,
    #[error("stopped because another branch failed")]
    Aborted,
    #[error("nondeterminism at step {step}: {detail}; the workflow code changed since the step was recorded")]
    Nondeterminism { step: String, detail: String },
    #[error("step {step}: recorded output does not decode: {detail}")]
    Decode { step: String, detail: String },
    #[error(transparent)]
    Journal(#[from] JournalError),
}

impl StepError {
    /// Ranks errors of concurrent branches: the most telling one is reported.
    pub fn severity(&self) -> u8 {
        match self {
            StepError::Journal(_) => 7,
            StepError::Nondeterminism { .. } => 6,
            StepError::Decode { .. } => 5,
            StepError::Failed { .. } => 4,
            StepError::Paused { .. } => 3,
            StepError::Cancelled => 2,
            StepError::Stopped => 1,
            StepError::Aborted => 0,
        }
    }
}

/// Input that cannot be accepted; the message names the field. Nothing is journaled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

impl InputError {
    pub fn field(field: &str, problem: impl std::fmt::Display) -> InputError {
        InputError(format!("invalid input: {field}: {problem}"))
    }
}

/// Errors of engine operations (submit, drive, daemon).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("unknown workflow {0:?}; known workflows: {1}")]
    UnknownWorkflow(String, String),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("workflow id {id} is already used by a {existing} workflow with a different input; choose another --id")]
    IdConflict { id: String, existing: String },
    #[error(
        "workflow id {0} belongs to a workflow pruned to the archive; an id is never used twice: choose another --id"
    )]
    IdPruned(String),
    #[error("no workflow with id {0}")]
    NotFound(String),
    #[error(transparent)]
    Journal(#[from] JournalError),
}
