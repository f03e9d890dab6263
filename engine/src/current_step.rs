//! Which step's activity the current task runs: set by the engine around every attempt, read by
//! observers deep below the workflows (the AWS pacer's) that cannot be handed the step.

use std::future::Future;

/// A running step: its workflow and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepId {
    pub workflow: String,
    pub step: String,
}

tokio::task_local! {
    static CURRENT: StepId;
}

/// The step whose activity this task runs, if any (a task the activity spawned has none).
pub fn current_step() -> Option<StepId> {
    CURRENT.try_with(Clone::clone).ok()
}

pub(crate) fn within_step<F: Future>(id: StepId, f: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(id, f)
}
