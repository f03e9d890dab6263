//! What the engine reports while it works, for live progress lines and logs.

use std::sync::Arc;

/// One thing that happened to a running workflow.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress {
    StepStarted {
        workflow: String,
        step: String,
        activity: String,
        attempt: u32,
    },
    StepCompleted {
        workflow: String,
        step: String,
        activity: String,
        attempt: u32,
        millis: u64,
    },
    StepRetrying {
        workflow: String,
        step: String,
        activity: String,
        attempt: u32,
        error: String,
        delay_ms: u64,
    },
    /// A step failed for good, or paused the workflow (`activity` empty when no attempt failed).
    StepFailed {
        workflow: String,
        step: String,
        activity: String,
        attempt: u32,
        error: String,
    },
    Compensating {
        workflow: String,
        reason: String,
    },
    /// The workflow cannot act yet; `reason` names what it waits for (a workflow ahead of it on
    /// the cluster, another journal's lease, the account's quota).
    Waiting {
        workflow: String,
        reason: String,
    },
    Finished {
        workflow: String,
        state: String,
    },
    /// This process took the workflow's lease; `previous` is the owner it took it from.
    LeaseTaken {
        workflow: String,
        previous: Option<String>,
    },
    /// One heartbeat renewed this process's leases (`ok`), or could not reach the journal.
    LeasesRenewed {
        ok: bool,
    },
}

/// Receives progress; must be cheap and never block.
pub type Observer = Arc<dyn Fn(&Progress) + Send + Sync>;

pub fn silent() -> Observer {
    Arc::new(|_| {})
}
