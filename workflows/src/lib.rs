//! infraflow's workflows, one per file, built on the engine (`infraflow-engine`) and the AWS
//! activities (`infraflow-activities`): `provision-infra`, `create-privatelink`,
//! `scale-nodepool`, `create-iam`, `teardown`, `create-cluster` (the infrastructure in order),
//! and the `canary` the engine's and the daemon's tests run.

mod aws_steps;
pub mod canary;
pub mod check;
pub mod cluster;
mod cluster_roles;
pub mod create_cluster;
pub mod create_iam;
pub mod create_management;
pub mod create_privatelink;
pub mod expiry;
pub mod hold;
pub mod janitor;
pub mod nodepool;
pub mod policy;
pub mod provision;
pub mod provision_infra;
pub mod quota;
mod read_again;
pub mod scale_nodepool;
pub mod teardown;
pub mod teardown_management;
mod user_data;
mod validate;

use infraflow_engine::Registry;

pub use aws_steps::{aws_retry, consistency_settle, role_of, set_consistency_settle};
pub use read_again::read_retrying;

/// An AWS region's name as every workflow's input requires it (`us-east-1`): the message names
/// the value and what is wrong.
pub fn check_region(region: &str) -> Result<(), infraflow_engine::InputError> {
    validate::region("region", region)
}

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
    provision::customer::register_undo(&mut r, pool.clone());
    provision::revoke::register_undo(&mut r, pool.clone());
    r.add_workflow(provision_infra::ProvisionInfra { pool: pool.clone() });
    r.add_workflow(scale_nodepool::ScaleNodePool { pool: pool.clone() });
    r.add_workflow(create_privatelink::CreatePrivateLink { pool: pool.clone() });
    r.add_workflow(create_iam::CreateIam { pool: pool.clone() });
    r.add_workflow(create_cluster::CreateCluster { pool: pool.clone() });
    create_management::register_undo(&mut r, pool.clone());
    r.add_workflow(create_management::CreateManagement { pool: pool.clone() });
    r.add_workflow(teardown_management::TeardownManagement { pool: pool.clone() });
    r.add_workflow(teardown::Teardown { pool });
    r
}
