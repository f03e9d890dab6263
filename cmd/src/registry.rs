//! Every workflow this binary can run, on AWS clients paced as `--aws-rate` says, and the engine
//! that runs them over a journal.

use std::sync::OnceLock;

use infraflow_activities::pacing::PacingConfig;
use infraflow_activities::{AwsPool, RoleAllowList};
use std::sync::Arc;

use infraflow_engine::{Engine, EngineConfig, Observer, Registry, SystemClock};
use infraflow_journal::{Journal, Location};

use crate::failure::Failure;
use crate::paths::prepare_dir;
use crate::progress::tracing_observer;

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

/// The engine over journal `db` with `registry`, reporting to `observer`.
pub(crate) fn open_engine(db: &Location, registry: Registry, observer: Observer) -> Result<Engine, Failure> {
    prepare_dir(db)?;
    let journal = Journal::open_at(db)?;
    Ok(Engine::new(journal, registry, Arc::new(SystemClock), engine_config()).with_observer(observer))
}

/// The engine's defaults, with an undo settling as long as an interrupted create
/// (`--consistency-settle`): both wait for AWS to show what it made.
fn engine_config() -> EngineConfig {
    EngineConfig { undo_settle: infraflow_workflows::consistency_settle(), ..EngineConfig::default() }
}

/// The engine of a command that reports nothing as it goes (`sweep`).
pub(crate) fn open_engine_quiet(db: &Location) -> Result<Engine, Failure> {
    open_engine(db, full_registry(), tracing_observer())
}
