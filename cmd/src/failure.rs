//! How a command ends: exit codes and the one-line message that goes with a failure.

use std::process::ExitCode;

use infraflow_engine::EngineError;
use infraflow_journal::JournalError;

/// Exit codes of the CLI contract.
pub const OK: u8 = 0;
pub const WORKFLOW_FAILED: u8 = 1;
pub const USAGE: u8 = 2;
/// `wait`: the workflow paused, waiting for an operator.
pub const PAUSED: u8 = 3;
/// `check`: the cluster drifted, something would hold its teardown up, or something leaks.
pub const DRIFTED: u8 = 1;
/// `check`: AWS could not be read (the report is incomplete, so neither 0 nor 1).
pub const CHECK_FAILED: u8 = 4;
/// `wait`: the timeout passed first (as `timeout(1)` exits).
pub const TIMED_OUT: u8 = 124;
/// Stopped by SIGINT/SIGTERM with the workflow left resumable.
pub const INTERRUPTED: u8 = 130;

/// A command that could not do what was asked.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { code: USAGE, message: message.into() }
    }

    pub fn other(message: impl Into<String>) -> Failure {
        Failure { code: WORKFLOW_FAILED, message: message.into() }
    }

    pub fn exit(self) -> ExitCode {
        eprintln!("infraflow: {}", self.message);
        ExitCode::from(self.code)
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Failure {
        match e {
            EngineError::Journal(j) => j.into(),
            e @ (EngineError::UnknownWorkflow(..)
            | EngineError::Input(_)
            | EngineError::IdConflict { .. }
            | EngineError::IdPruned(_)
            | EngineError::NotFound(_)) => Failure::usage(e.to_string()),
        }
    }
}

impl From<JournalError> for Failure {
    fn from(e: JournalError) -> Failure {
        match e {
            e @ (JournalError::Missing { .. }
            | JournalError::UnknownWorkflow(_)
            | JournalError::NotAJournal { .. }
            | JournalError::TooNew { .. }
            | JournalError::BadLocation { .. }
            | JournalError::Tls { .. }) => Failure::usage(e.to_string()),
            e => Failure::other(e.to_string()),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::other(format!("{e:#}"))
    }
}

pub type CmdResult = Result<u8, Failure>;
