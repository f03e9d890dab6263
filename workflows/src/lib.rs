//! The durable engine of infraflow and its workflows. Workflow code calls `ctx.step(...)`; the
//! engine journals each step, skips completed ones on replay, retries durably, compensates on
//! failure, and runs workflows under leases so two processes never run the same one.

mod aws_steps;
mod clock;
mod context;
mod engine;
mod error;
mod ids;
mod lease;
mod progress;
mod provision_dag;
mod registry;
mod retry;
mod runner;
mod signals;
mod validate;

pub mod canary;
pub mod create_cluster;
pub mod create_privatelink;
pub mod policy;
pub mod provision_infra;
pub mod scale_nodepool;
pub mod teardown;

pub use clock::{Clock, Sleep, SystemClock, TestClock};
pub use context::{Signals, StepOptions, WfCtx, input_hash, join_branches};
pub use engine::{Engine, EngineConfig, Submission, Submitted, UNDO_PREFIX};
pub use error::{ActivityError, EngineError, InputError, StepError};
pub use ids::{check_id, new_id};
pub use progress::{Observer, Progress, silent};
pub use registry::{BoxFuture, Registry, UndoFn, Validated, WorkflowDef};
pub use retry::RetryPolicy;
pub use runner::Outcome;

/// The registry with every built-in workflow that needs no cloud access.
pub fn base_registry() -> Registry {
    let mut r = Registry::new();
    canary::register(&mut r);
    r
}

/// Every workflow, the AWS ones with clients from `pool` (created on first use, so building the
/// registry touches no network).
pub fn full_registry(pool: infraflow_activities::AwsPool) -> Registry {
    let mut r = base_registry();
    aws_steps::register(&mut r, pool.clone());
    r.add_workflow(provision_infra::ProvisionInfra { pool: pool.clone() });
    r.add_workflow(scale_nodepool::ScaleNodePool { pool: pool.clone() });
    r.add_workflow(create_privatelink::CreatePrivateLink { pool: pool.clone() });
    r.add_workflow(create_cluster::CreateCluster { pool: pool.clone() });
    r.add_workflow(teardown::Teardown { pool });
    r
}
