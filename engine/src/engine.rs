//! The engine: validates and journals submissions, and executes one workflow under a lease by
//! replaying its journal and running its code; when it fails for good, `compensate` undoes it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use infraflow_journal::{
    Durability, Event, Journal, JournalError, NewWorkflow, Owner, SubmitOutcome, WorkflowState, WorkflowView,
};
use serde_json::Value;

use crate::clock::Clock;
use crate::context::{LeaseCell, Run, Signals, WfCtx};
use crate::error::{EngineError, InputError, StepError};
use crate::ids;
use crate::progress::{Observer, Progress, silent};
use crate::registry::{Registry, WorkflowDef};
use crate::retry::RetryPolicy;

/// Engine settings; the defaults suit a production daemon.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How long a lease lasts without renewal; a crashed owner on another host is taken over
    /// after this long.
    pub lease_ttl: Duration,
    /// How often leases are renewed and cancel requests noticed.
    pub heartbeat: Duration,
    /// How often a daemon looks for new work.
    pub poll: Duration,
    /// How long a stopping daemon lets in-flight steps finish before abandoning them.
    pub shutdown_grace: Duration,
    pub default_retry: RetryPolicy,
    /// Compensations try harder: giving up leaves resources behind.
    pub undo_retry: RetryPolicy,
    /// An undo of a step that started less than this ago waits until then: what the step made
    /// moments ago may not be visible to the undo's lookup yet (EC2's eventual consistency).
    pub undo_settle: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            lease_ttl: Duration::from_secs(15),
            heartbeat: Duration::from_secs(1),
            poll: Duration::from_millis(200),
            shutdown_grace: Duration::from_secs(20),
            default_retry: RetryPolicy::default(),
            // ≈ 15 minutes: an undo's delete may wait on what AWS releases
            // asynchronously, and giving up leaves resources behind.
            undo_retry: RetryPolicy { max_attempts: 36, ..RetryPolicy::default() },
            undo_settle: Duration::from_secs(5),
        }
    }
}

/// A request to start a workflow.
#[derive(Clone, Debug)]
pub struct Submission {
    pub workflow: String,
    pub input: Value,
    pub id: Option<String>,
    pub no_rollback: bool,
    /// Who asked, through the daemon's API (`<tenant>/<subject>`); none from the journal path.
    pub submitter: Option<String>,
    /// The caller's W3C `traceparent`, journaled: every execution's trace continues it.
    pub traceparent: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submitted {
    pub id: String,
    /// False when the same submission was journaled before.
    pub created: bool,
}

pub struct Engine {
    pub(crate) journal: Journal,
    pub(crate) registry: Arc<Registry>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) owner: Owner,
    pub(crate) config: EngineConfig,
    pub(crate) observer: Observer,
    /// Workflows `drive` waited for before it took their lease (since when, for what): the
    /// execution that then runs sends the wait as a span of its trace.
    pub(crate) queued: std::sync::Mutex<HashMap<String, (u64, String)>>,
}

impl Engine {
    pub fn new(journal: Journal, registry: Registry, clock: Arc<dyn Clock>, config: EngineConfig) -> Engine {
        Engine {
            journal,
            registry: Arc::new(registry),
            clock,
            owner: Owner::for_this_process(),
            config,
            observer: silent(),
            queued: Default::default(),
        }
    }

    pub fn with_observer(mut self, observer: Observer) -> Engine {
        self.observer = observer;
        self
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn owner_id(&self) -> &str {
        &self.owner.id
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Validates the input and journals the workflow. Same id and input: nothing new is written.
    pub async fn submit(&self, s: Submission) -> Result<Submitted, EngineError> {
        let def = self.registry.workflow(&s.workflow).ok_or_else(|| {
            EngineError::UnknownWorkflow(s.workflow.clone(), self.registry.workflow_names().join(", "))
        })?;
        let id = match s.id {
            Some(id) => {
                ids::check_id(&id).map_err(InputError)?;
                id
            }
            None => ids::new_id(def.name(), self.clock.now_ms()),
        };
        let validated = def.validate(&id, &s.input)?;
        let outcome = self
            .journal
            .submit(NewWorkflow {
                id: id.clone(),
                workflow: def.name().to_string(),
                input: validated.input,
                cluster: validated.cluster,
                no_rollback: s.no_rollback,
                code_version: Some(def.version()),
                creator: Some(ids::new_creator(&id, self.clock.now_ms())),
                submitter: s.submitter,
                traceparent: s.traceparent,
                at: self.clock.now_ms(),
            })
            .await?;
        match outcome {
            SubmitOutcome::Created => Ok(Submitted { id, created: true }),
            SubmitOutcome::AlreadyExists => Ok(Submitted { id, created: false }),
            SubmitOutcome::Conflict { existing_workflow } => {
                Err(EngineError::IdConflict { id, existing: existing_workflow })
            }
            SubmitOutcome::Archived => Err(EngineError::IdPruned(id)),
        }
    }

    /// `execute`, with a panic in workflow or activity code turned into a pause: a panicking
    /// workflow must not crash the daemon, nor be retried forever.
    pub(crate) async fn execute_guarded(
        &self,
        id: &str,
        lease: Arc<LeaseCell>,
        signals: Arc<Signals>,
    ) -> Result<WorkflowState, EngineError> {
        use futures::FutureExt;
        let fence = lease.fence.clone();
        match std::panic::AssertUnwindSafe(self.execute(id, lease, signals)).catch_unwind().await {
            Ok(r) => r,
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                tracing::error!(workflow = %id, panic = %msg, "workflow panicked; pausing it");
                let reason = format!(
                    "infraflow panicked running this workflow ({msg}); this is a bug: report it, then run `infraflow retry {id}`"
                );
                self.journal
                    .append(
                        id,
                        &fence,
                        vec![Event::Paused { step: None, reason }],
                        self.clock.now_ms(),
                        Durability::Durable,
                    )
                    .await?;
                Ok(WorkflowState::Paused)
            }
        }
    }

    /// Executes a workflow whose lease this engine holds, until it finishes, pauses, or is
    /// stopped. Returns the state it was left in.
    pub(crate) async fn execute(
        &self,
        id: &str,
        lease: Arc<LeaseCell>,
        signals: Arc<Signals>,
    ) -> Result<WorkflowState, EngineError> {
        let view = match self.journal.load_async(id).await {
            Ok(v) => v.ok_or_else(|| EngineError::NotFound(id.to_string()))?,
            // Deterministic: trying again gives the same error. Pause once (the append folds
            // into the summary row, not the log) rather than claim, fail and release forever.
            Err(e @ JournalError::BadRecord { .. }) => {
                tracing::error!(workflow = %id, error = %e, "pausing a workflow whose journal does not decode");
                let paused = vec![Event::Paused { step: None, reason: e.to_string() }];
                self.journal.append(id, &lease.fence, paused, self.clock.now_ms(), Durability::Durable).await?;
                return Ok(WorkflowState::Paused);
            }
            Err(e) => return Err(e.into()),
        };
        if view.summary.cancel_requested {
            signals.cancel();
        }
        let queued = self.queued.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        let trace = crate::trace::ExecTrace::begin(&view);
        if let (Some(t), Some((since, reason))) = (&trace, queued) {
            t.queued(since, &reason);
        }
        let recorded: HashMap<_, _> = view.steps.iter().map(|s| (s.key.clone(), s.clone())).collect();
        let by_position: HashMap<_, _> =
            view.steps.iter().filter_map(|s| Some((s.position.clone()?, s.key.clone()))).collect();
        let run = Arc::new(Run {
            id: id.to_string(),
            creator: view.creator.clone(),
            submitted_at: view.created_at,
            resumes: view.resumes,
            // Journals from before versions were recorded ran the first version of every flow.
            code_version: view.code_version.unwrap_or(1),
            journal: self.journal.clone(),
            clock: self.clock.clone(),
            lease,
            signals: signals.clone(),
            observer: self.observer.clone(),
            default_retry: self.config.default_retry.clone(),
            failing: AtomicBool::new(false),
            compensating: AtomicBool::new(false),
            recorded: std::sync::Mutex::new(recorded),
            environment: std::sync::Mutex::new(None),
            positions: std::sync::Mutex::new(HashMap::new()),
            by_position,
            trace,
        });
        let Some(def) = self.registry.workflow(&view.workflow) else {
            // The pause keeps the saga phase: a compensating workflow resumes compensating.
            let reason = format!("this infraflow does not know workflow {:?}; run a version that does", view.workflow);
            run.record(vec![Event::Paused { step: None, reason }], Durability::Durable).await?;
            return Ok(WorkflowState::Paused);
        };
        // A journal without a recorded version ran version 1: checked as such (SAFETY-7243D60
        // N12), never replayed under whatever this binary runs.
        let recorded = run.code_version;
        if !(def.oldest_version()..=def.version()).contains(&recorded) {
            let (name, now, oldest) = (&view.workflow, def.version(), def.oldest_version());
            let detail = if recorded > now {
                format!(
                    "workflow {name} was submitted to version {recorded} of its code, newer than this infraflow's {now}; run it with a newer infraflow, or cancel it"
                )
            } else {
                let runs =
                    if oldest == now { format!("version {now} only") } else { format!("versions {oldest} to {now}") };
                format!(
                    "workflow {name} was submitted to version {recorded} of its code, and this infraflow runs {runs}; finish it with an infraflow that runs version {recorded}, or cancel it"
                )
            };
            let e = StepError::Nondeterminism { step: "(workflow)".into(), detail };
            run.record(vec![Event::Paused { step: None, reason: e.to_string() }], Durability::Durable).await?;
            return Ok(WorkflowState::Paused);
        }
        // Before anything acts, forward or compensating: the same account and region as at
        // start, and one writer per cluster across journals (the workflow's hold).
        let gate_started = infraflow_trace::now_ns();
        let gate = self.pass_gate(&run, def.as_ref(), &view, &signals);
        let hold = match crate::trace::within(&run.trace, gate).await? {
            Ok(hold) => hold,
            Err(state) => {
                crate::trace::end(&run.trace, state);
                return Ok(state);
            }
        };
        if let Some(t) = &run.trace {
            t.gate_passed(gate_started);
        }
        let work = crate::trace::within(&run.trace, self.act(&run, def.as_ref(), &view, &signals));
        let state = match &hold {
            None => work.await?,
            Some(h) => {
                tokio::select! {
                    state = work => state?,
                    why = h.lapsed() => {
                        // Dropped mid-step, as on a crash: a later execution takes the hold again
                        // (waiting for whoever has it) and resumes from the journal.
                        tracing::warn!(workflow = %id, reason = %why, "the cluster's hold lapsed; stopping here");
                        (self.observer)(&Progress::Waiting {
                            workflow: id.to_string(),
                            reason: format!("the cluster's hold again, which lapsed: {why}"),
                        });
                        view.summary.state
                    }
                }
            }
        };
        if let Some(h) = hold {
            // A finished workflow's journal lease went with its last record: the heartbeat must
            // not take that for a loss and drop the release.
            if state.is_finished() {
                signals.finishing();
            }
            h.release().await;
        }
        crate::trace::end(&run.trace, state);
        Ok(state)
    }

    /// The execution proper: forward, compensating or cancelling, as the journal left it.
    async fn act(
        &self,
        run: &Arc<Run>,
        def: &dyn WorkflowDef,
        view: &WorkflowView,
        signals: &Arc<Signals>,
    ) -> Result<WorkflowState, EngineError> {
        let state = match view.summary.state {
            WorkflowState::Compensating => self.compensate(run, view).await?,
            WorkflowState::Cancelling => self.fail(run, view, "cancel requested".into()).await?,
            WorkflowState::Pending | WorkflowState::Running => {
                let result = def.run(WfCtx::new(run.clone()), view.input.clone()).await;
                match result {
                    Ok(output) => {
                        run.record(vec![Event::Completed { output }], Durability::Durable).await?;
                        WorkflowState::Completed
                    }
                    Err(StepError::Failed { step, error }) => {
                        self.fail(run, view, format!("step {step} failed: {error}")).await?
                    }
                    Err(StepError::Cancelled) => self.fail(run, view, "cancel requested".into()).await?,
                    Err(StepError::Aborted) if signals.cancel_requested() => {
                        self.fail(run, view, "cancel requested".into()).await?
                    }
                    Err(StepError::Paused { .. }) => WorkflowState::Paused,
                    Err(e @ (StepError::Nondeterminism { .. } | StepError::Decode { .. })) => {
                        let step = match &e {
                            StepError::Nondeterminism { step, .. } | StepError::Decode { step, .. } => {
                                Some(step.clone())
                            }
                            _ => None,
                        };
                        let reason = e.to_string();
                        run.record(vec![Event::Paused { step, reason }], Durability::Durable).await?;
                        WorkflowState::Paused
                    }
                    Err(StepError::Stopped | StepError::Aborted) => return Ok(view.summary.state),
                    Err(StepError::Journal(e)) => return Err(e.into()),
                }
            }
            other => other,
        };
        run.report(Progress::Finished { workflow: run.id.clone(), state: state.to_string() });
        Ok(state)
    }
}
