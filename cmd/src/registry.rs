//! Every workflow this binary can run, on AWS clients paced as `--aws-rate` says.

use std::sync::OnceLock;

use infraflow_activities::AwsPool;
use infraflow_activities::pacing::PacingConfig;
use infraflow_engine::Registry;

static PACING: OnceLock<PacingConfig> = OnceLock::new();

/// The process's pacing (`--aws-rate`); AWS's defaults unless set before the first registry.
pub fn set_pacing(pacing: PacingConfig) {
    let _ = PACING.set(pacing);
}

pub fn pool() -> AwsPool {
    AwsPool::with_pacing(PACING.get().cloned().unwrap_or_default())
}

pub fn full_registry() -> Registry {
    infraflow_workflows::full_registry(pool())
}
