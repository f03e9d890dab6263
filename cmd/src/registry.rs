//! Every workflow this binary can run.

use infraflow_activities::AwsPool;
use infraflow_engine::Registry;

pub fn full_registry() -> Registry {
    infraflow_workflows::full_registry(AwsPool::new())
}
