//! What the engine reports while it works, for live progress lines and logs.

use std::sync::Arc;

/// One thing that happened to a running workflow.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress {
    StepStarted { workflow: String, step: String, attempt: u32 },
    StepCompleted { workflow: String, step: String, millis: u64 },
    StepRetrying { workflow: String, step: String, attempt: u32, error: String, delay_ms: u64 },
    StepFailed { workflow: String, step: String, error: String },
    Compensating { workflow: String, reason: String },
    Waiting { workflow: String, reason: String },
    Finished { workflow: String, state: String },
}

/// Receives progress; must be cheap and never block.
pub type Observer = Arc<dyn Fn(&Progress) + Send + Sync>;

pub fn silent() -> Observer {
    Arc::new(|_| {})
}
