//! The durable engine of infraflow and its workflows. Workflow code calls `ctx.step(...)`; the
//! engine journals each step, skips completed ones on replay, retries durably, compensates on
//! failure, and runs workflows under leases so two processes never run the same one.

// The engine (`engine/`): journaled steps, replay, retries, compensation, leases. It never
// imports a workflow or `infraflow_activities`. Paths keep the flat module names.
#[path = "engine/clock.rs"]
mod clock;
#[path = "engine/context.rs"]
mod context;
#[path = "engine/engine.rs"]
mod engine;
#[path = "engine/error.rs"]
mod error;
#[path = "engine/ids.rs"]
mod ids;
#[path = "engine/lease.rs"]
mod lease;
#[path = "engine/progress.rs"]
mod progress;
#[path = "engine/registry.rs"]
mod registry;
#[path = "engine/retry.rs"]
mod retry;
#[path = "engine/runner.rs"]
mod runner;
#[path = "engine/signals.rs"]
mod signals;

// The workflows (`flows/`), built on the engine and the AWS activities.
#[path = "flows/aws_steps.rs"]
mod aws_steps;
#[path = "flows/canary.rs"]
pub mod canary;
#[path = "flows/create_cluster.rs"]
pub mod create_cluster;
#[path = "flows/create_privatelink.rs"]
pub mod create_privatelink;
#[path = "flows/policy.rs"]
pub mod policy;
#[path = "flows/provision_dag.rs"]
mod provision_dag;
#[path = "flows/provision_infra.rs"]
pub mod provision_infra;
#[path = "flows/scale_nodepool.rs"]
pub mod scale_nodepool;
#[path = "flows/teardown.rs"]
pub mod teardown;
#[path = "flows/teardown_plan.rs"]
pub mod teardown_plan;
#[path = "flows/validate.rs"]
mod validate;

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
