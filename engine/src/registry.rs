//! The catalogue an engine runs from: workflow definitions by name, and compensating actions by
//! activity name (compensations are journaled as data and must run after a restart).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::context::WfCtx;
use crate::error::{ActivityError, InputError, StepError};

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Input accepted by a workflow's validation, ready to journal.
#[derive(Clone, Debug, PartialEq)]
pub struct Validated {
    /// The normalized input (defaults filled in), as journaled and replayed.
    pub input: Value,
    /// Workflows with the same cluster key never interleave; empty for none.
    pub cluster: String,
}

/// One kind of workflow.
pub trait WorkflowDef: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    /// One line for `--help` and errors.
    fn summary(&self) -> &'static str;
    /// Checks everything that can be checked without side effects. `id` is the workflow id
    /// (some inputs derive names from it).
    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError>;
    /// The workflow body; must be deterministic given its input and the recorded step outputs.
    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>>;
    /// The version of this workflow's code, recorded at submit. Bump it whenever steps are
    /// renamed, added, removed or reordered, or their inputs change, and keep the former steps
    /// for runs below it (`WfCtx::code_version`): ARCHITECTURE.md, "Changing a flow".
    fn version(&self) -> u32 {
        1
    }
    /// The oldest recorded version `run` still replays. A journal outside `oldest_version()
    /// ..= version()` pauses, naming both, so a changed sequence of steps never meets a journal
    /// written by code it does not keep.
    fn oldest_version(&self) -> u32 {
        self.version()
    }
    /// Where the workflow acts (for AWS: account and region), as a flat JSON object of strings.
    /// The engine journals it at the first execution and, on every later one (resume, retry,
    /// compensation, takeover), compares it before anything else runs: a mismatch pauses.
    /// None for workflows that act nowhere but the journal.
    fn environment(&self, _input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        None
    }
    /// What every undo of this workflow is given beside its journaled input, merged in at
    /// compensation and never journaled: for AWS, the role the workflow acts through (from its
    /// journaled input, so undos journaled before roles existed still run where they should).
    fn undo_context(&self, _input: &Value) -> serde_json::Map<String, Value> {
        serde_json::Map::new()
    }
    /// The hold this workflow takes on what it acts on beyond the journal (a cluster lease),
    /// taken before anything acts and kept while it runs (`hold.rs`). The future waits while
    /// another holds it. None: no hold (the default; also when none is configured).
    fn hold(&self, _request: crate::HoldRequest, _input: &Value) -> Option<crate::TakeHold> {
        None
    }
    /// Every AWS action this workflow may call, compensation included (the workflows' `policy` module composes it): what
    /// `infraflow policy` grants. Empty for workflows that never call AWS.
    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        std::collections::BTreeSet::new()
    }
}

pub type UndoFn = Arc<dyn Fn(Value) -> BoxFuture<Result<Value, ActivityError>> + Send + Sync>;

#[derive(Default, Clone)]
pub struct Registry {
    workflows: BTreeMap<&'static str, Arc<dyn WorkflowDef>>,
    undos: HashMap<String, UndoFn>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn add_workflow(&mut self, def: impl WorkflowDef) -> &mut Self {
        self.workflows.insert(def.name(), Arc::new(def));
        self
    }

    /// Registers the handler of a compensating activity.
    pub fn add_undo<F, Fut>(&mut self, activity: &str, f: F) -> &mut Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ActivityError>> + Send + 'static,
    {
        self.undos.insert(activity.to_string(), Arc::new(move |v| Box::pin(f(v))));
        self
    }

    pub fn workflow(&self, name: &str) -> Option<Arc<dyn WorkflowDef>> {
        self.workflows.get(name).cloned()
    }

    pub fn undo(&self, activity: &str) -> Option<UndoFn> {
        self.undos.get(activity).cloned()
    }

    pub fn workflow_names(&self) -> Vec<&'static str> {
        self.workflows.keys().copied().collect()
    }

    pub fn workflows(&self) -> impl Iterator<Item = &Arc<dyn WorkflowDef>> {
        self.workflows.values()
    }
}
