//! Holds: exclusive claims on what a workflow acts on that live outside the journal (a cluster
//! lease in AWS, which every journal's workflows of the cluster honour). The engine takes a
//! workflow's hold after its environment check (beside it at a first execution: `gate`) and
//! before anything acts, forward or compensating; drops the running work the moment the hold lapses (as it does when the journal
//! lease is lost); and releases it when the execution ends. The engine knows no kind of hold:
//! workflows make them (`WorkflowDef::hold`).
//!
//! Why what a hold waits for is journaled: while a workflow's hold (another journal's lease on the
//! cluster, the account's quota) waits, each new reason is a `waiting` event, recorded in order by
//! one task the engine drains before the first step (`gate`), and what it then holds a `holding`
//! event (`Hold::what`: the cluster lease's key; an admission says nothing). The summary folds them
//! into `waiting`, until the workflow records anything else, and `holding`, until the execution
//! ends (the row does not keep it: `status ID`, its `waitsFor`, and the page read it from the
//! events). Older binaries cannot decode these events, so the schema moved (SQLite 7, PostgreSQL 6)
//! and they refuse such a journal rather than misread it.

use std::sync::Arc;

use crate::registry::BoxFuture;

/// What a workflow's hold is taken for.
#[derive(Clone)]
pub struct HoldRequest {
    pub workflow: String,
    pub creator: String,
    /// Where the workflow acts, as its environment check journaled it (for AWS: `account`,
    /// `region`): a hold need not ask again. None at a first execution, whose hold is taken
    /// beside that check: a hold that needs it asks the same way the check does.
    pub environment: Option<serde_json::Value>,
    /// The execution only undoes (compensating, or cancelling): it makes nothing, so a hold on
    /// what it would make (a quota's admission) need not wait for it.
    pub undoing: bool,
    /// Says, while the hold waits for another holder, whom it waits for (the engine's
    /// `Progress::Waiting`): called when the answer changes.
    pub waiting: Arc<dyn Fn(String) + Send + Sync>,
}

/// A hold taken: kept alive by its own task until released or lapsed.
pub trait Hold: Send + Sync {
    /// Resolves, with why, once the hold can no longer be trusted (not renewed in time, or taken
    /// over): everything the workflow runs must stop before another holder could start.
    fn lapsed(&self) -> BoxFuture<String>;
    /// Gives the hold up (only if it is still this holder's).
    fn release(self: Box<Self>) -> BoxFuture<()>;
    /// What is held, in words, for `status` (`cluster lease s3://…`); None for a hold not worth
    /// showing (a quota's admission: the account's usage says it).
    fn what(&self) -> Option<String> {
        None
    }
}

/// A hold being taken: resolves once it is held (or cannot be).
pub type TakeHold = BoxFuture<Result<Box<dyn Hold>, HoldError>>;

/// Why a hold could not be taken.
#[derive(Clone, Debug)]
pub enum HoldError {
    /// Only the operator can fix it (the store is missing, access is denied, the store ignores
    /// its conditions): the workflow pauses with this.
    Operator(String),
}
