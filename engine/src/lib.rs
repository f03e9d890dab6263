//! The durable engine of infraflow. Workflow code calls `ctx.step(...)`; the engine journals
//! each step, skips completed ones on replay, retries durably, compensates on failure, and runs
//! workflows under leases so two processes never run the same one. A crate of its own so that
//! its independence is a compile-time fact: it depends on the journal alone, never on a
//! workflow (`infraflow-workflows`) or on the AWS activities (`infraflow-activities`).

mod branches;
mod clock;
mod compensate;
mod context;
mod current_step;
mod engine;
mod error;
mod gate;
mod hold;
mod ids;
mod lease;
mod progress;
mod registry;
mod retry;
mod runner;
mod signals;
mod trace;

pub use branches::{join_branches, join_pair};
pub use clock::{Clock, Sleep, SystemClock, TestClock};
pub use compensate::UNDO_PREFIX;
pub use context::ENVIRONMENT_STEP;
pub use context::{Signals, StepOptions, WfCtx, input_hash};
pub use current_step::{StepId, current_step};
pub use engine::{Engine, EngineConfig, Submission, Submitted};
pub use error::{ActivityError, EngineError, InputError, StepError};
pub use hold::{Hold, HoldError, HoldRequest, TakeHold};
pub use ids::{check_id, new_id};
pub use lease::BootInstant;
pub use progress::{Observer, Progress, silent};
pub use registry::{BoxFuture, Registry, UndoFn, Validated, WorkflowDef};
pub use retry::RetryPolicy;
pub use runner::Outcome;
