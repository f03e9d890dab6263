//! Every workflow this binary can run, on AWS clients paced as `--aws-rate` says.

use std::sync::OnceLock;

use infraflow_activities::pacing::PacingConfig;
use infraflow_activities::{AwsPool, RoleAllowList};
use infraflow_engine::Registry;

static PACING: OnceLock<PacingConfig> = OnceLock::new();
static ALLOWED_ROLES: OnceLock<RoleAllowList> = OnceLock::new();

/// The roles this process may act through (a daemon's `--allow-role`); any, unless set before
/// the first registry.
pub fn set_allowed_roles(list: RoleAllowList) {
    let _ = ALLOWED_ROLES.set(list);
}

/// The process's pacing (`--aws-rate`); AWS's defaults unless set before the first registry.
pub fn set_pacing(pacing: PacingConfig) {
    let _ = PACING.set(pacing);
}

pub fn pool() -> AwsPool {
    AwsPool::with_pacing(PACING.get().cloned().unwrap_or_default()).allowing(ALLOWED_ROLES.get().cloned())
}

pub fn full_registry() -> Registry {
    infraflow_workflows::full_registry(pool())
}
