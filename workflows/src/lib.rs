//! The durable engine of infraflow and its workflows. Workflow code calls `ctx.step(...)`; the
//! engine journals each step, skips completed ones on replay, retries durably, compensates on
//! failure, and runs workflows under leases so two processes never run the same one.

mod clock;
mod context;
mod engine;
mod error;
mod ids;
mod progress;
mod registry;
mod retry;
mod runner;

pub mod canary;

pub use clock::{Clock, Sleep, SystemClock, TestClock};
pub use context::{input_hash, join_branches, Signals, StepOptions, WfCtx};
pub use ids::{check_id, new_id};
pub use engine::{Engine, EngineConfig, Submission, Submitted, UNDO_PREFIX};
pub use error::{ActivityError, EngineError, InputError, StepError};
pub use progress::{silent, Observer, Progress};
pub use registry::{BoxFuture, Registry, UndoFn, Validated, WorkflowDef};
pub use retry::RetryPolicy;
pub use runner::Outcome;

/// The registry with every built-in workflow that needs no cloud access.
pub fn base_registry() -> Registry {
    let mut r = Registry::new();
    canary::register(&mut r);
    r
}
