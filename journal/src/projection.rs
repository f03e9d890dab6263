//! Folding events into state: the one-row summary kept beside the log, and the full per-step view.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::event::{Event, EventRecord, Undo};
use crate::executions::Executions;

/// Where a workflow stands. The strings are part of the CLI's JSON contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowState {
    Pending,
    Running,
    Paused,
    Completed,
    Failed,
    Cancelling,
    Compensating,
    Compensated,
    CompensationFailed,
}

impl WorkflowState {
    pub const ALL: [WorkflowState; 9] = [
        WorkflowState::Pending,
        WorkflowState::Running,
        WorkflowState::Paused,
        WorkflowState::Completed,
        WorkflowState::Failed,
        WorkflowState::Cancelling,
        WorkflowState::Compensating,
        WorkflowState::Compensated,
        WorkflowState::CompensationFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowState::Pending => "pending",
            WorkflowState::Running => "running",
            WorkflowState::Paused => "paused",
            WorkflowState::Completed => "completed",
            WorkflowState::Failed => "failed",
            WorkflowState::Cancelling => "cancelling",
            WorkflowState::Compensating => "compensating",
            WorkflowState::Compensated => "compensated",
            WorkflowState::CompensationFailed => "compensation_failed",
        }
    }

    pub fn parse(s: &str) -> Option<WorkflowState> {
        WorkflowState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Nothing more will happen without a user's command.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            WorkflowState::Completed
                | WorkflowState::Failed
                | WorkflowState::Compensated
                | WorkflowState::CompensationFailed
        )
    }

    /// An owner should be executing it.
    pub fn is_runnable(self) -> bool {
        matches!(
            self,
            WorkflowState::Pending | WorkflowState::Running | WorkflowState::Cancelling | WorkflowState::Compensating
        )
    }
}

impl std::fmt::Display for WorkflowState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The summary row: what `status` lists, updated in the same transaction as the events.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub state: WorkflowState,
    pub current_step: Option<String>,
    pub attempts: u32,
    pub error: Option<String>,
    pub output: Option<Value>,
    pub cancel_requested: bool,
    /// The saga phase: once compensation has started, nothing resumes the workflow forward.
    pub compensating: bool,
    /// What the execution waits for before it can act (`Event::Waiting`), until it records
    /// anything else. Folded from the events only: the summary row does not keep it.
    pub waiting: Option<String>,
    /// What the execution holds beyond the journal (`Event::Holding`: the cluster lease), until
    /// it ends or another execution starts. Folded from the events only, as `waiting`.
    pub holding: Option<String>,
}

impl Summary {
    pub fn new() -> Summary {
        Summary {
            state: WorkflowState::Pending,
            current_step: None,
            attempts: 0,
            error: None,
            output: None,
            cancel_requested: false,
            compensating: false,
            waiting: None,
            holding: None,
        }
    }

    /// Applies one event. Pure: the same events always give the same summary.
    pub fn apply(&mut self, event: &Event) {
        use WorkflowState as S;
        if !matches!(event, Event::Waiting { .. }) {
            self.waiting = None;
        }
        // An execution's hold ends with it: at its end, or when another takes the workflow.
        if matches!(
            event,
            Event::LeaseTaken { .. }
                | Event::Paused { .. }
                | Event::Completed { .. }
                | Event::Failed { .. }
                | Event::Compensated
                | Event::CompensationFailed { .. }
        ) {
            self.holding = None;
        }
        match event {
            Event::Submitted { .. } => *self = Summary::new(),
            Event::LeaseTaken { .. } => {
                if self.state == S::Pending {
                    self.state = S::Running;
                }
            }
            Event::StepStarted { step, attempt, .. } => {
                if self.state == S::Pending {
                    self.state = S::Running;
                }
                self.current_step = Some(step.clone());
                self.attempts = *attempt;
            }
            Event::StepCompleted { step, attempt, .. } => {
                if self.state == S::Pending {
                    self.state = S::Running;
                }
                self.current_step = Some(step.clone());
                self.attempts = (*attempt).max(1);
            }
            Event::StepFailed { step, attempt, error, .. } => {
                self.current_step = Some(step.clone());
                self.attempts = *attempt;
                // While compensating, the workflow's error stays what caused it: an undo's failed
                // attempt is its step's (a compensation that fails for good says so itself).
                if !self.compensating {
                    self.error = Some(format!("{step}: {error}"));
                }
            }
            Event::Paused { reason, .. } => {
                self.state = S::Paused;
                self.error = Some(reason.clone());
            }
            Event::CancelRequested => {
                self.cancel_requested = true;
                if matches!(self.state, S::Pending | S::Running | S::Paused) && !self.compensating {
                    self.state = S::Cancelling;
                }
            }
            Event::ResumeRequested => {
                self.state = match self.state {
                    S::CompensationFailed => S::Compensating,
                    // A pause keeps its phase: one taken while compensating resumes compensating.
                    S::Paused if self.compensating => S::Compensating,
                    S::Paused if self.cancel_requested => S::Cancelling,
                    S::Paused | S::Failed => S::Pending,
                    other => other,
                };
                self.error = None;
            }
            Event::CompensationStarted { reason } => {
                self.state = S::Compensating;
                self.compensating = true;
                if self.error.is_none() {
                    self.error = Some(reason.clone());
                }
            }
            Event::Completed { output } => {
                self.state = S::Completed;
                self.output = Some(output.clone());
                self.error = None;
                self.current_step = None;
            }
            Event::Failed { error } => {
                self.state = S::Failed;
                self.error = Some(error.clone());
            }
            Event::Compensated => {
                self.state = S::Compensated;
                self.current_step = None;
            }
            Event::CompensationFailed { error, .. } => {
                self.state = S::CompensationFailed;
                self.error = Some(error.clone());
            }
            Event::Waiting { reason } => self.waiting = Some(reason.clone()),
            Event::Holding { what } => self.holding = Some(what.clone()),
        }
    }
}

impl Default for Summary {
    fn default() -> Self {
        Summary::new()
    }
}

/// Where one step stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Running,
    Retrying,
    Failed,
    Completed,
}

/// One step, folded from its events.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepView {
    pub key: String,
    pub activity: String,
    pub input_hash: String,
    pub state: StepState,
    /// Attempts started over the workflow's life.
    pub attempts: u32,
    /// Attempts started since the last `retry` (the retry budget counts these).
    #[serde(skip)]
    pub round_attempts: u32,
    /// Attempts that ended in a recorded failure since the last `retry`.
    #[serde(skip)]
    pub round_failures: u32,
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(skip)]
    pub next_attempt_at: Option<i64>,
    /// The compensations its attempts registered, each once, oldest first: an attempt of
    /// another code version may have registered another one, and all of them must run.
    #[serde(skip)]
    pub undos: Vec<Undo>,
    /// Where the code called it (`<scope>#<n>`), if recorded.
    #[serde(skip)]
    pub position: Option<String>,
    /// When its last recorded attempt started.
    #[serde(skip)]
    pub started_at: Option<i64>,
    /// When its last recorded attempt ended (completed or failed).
    #[serde(skip)]
    pub ended_at: Option<i64>,
    /// Sequence number of the completion (or, while unfinished, of the first start).
    #[serde(skip)]
    pub order: i64,
    /// How many times the completion was recorded: 1 for every completed step, by construction.
    pub completions: u32,
    /// The last attempt failed for good, and no `retry` has been asked for since.
    #[serde(skip)]
    pub terminal: bool,
}

/// A workflow as the engine and `status ID` see it: the summary plus every step.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowView {
    pub id: String,
    pub workflow: String,
    pub input: Value,
    pub no_rollback: bool,
    /// The workflow code version it was submitted to, if recorded.
    pub code_version: Option<u32>,
    /// Who the workflow is to AWS (`Event::Submitted::creator`): its id in older records.
    pub creator: String,
    /// Who asked for it through the API (`Event::Submitted::submitter`), as `<tenant>/<subject>`.
    pub submitter: Option<String>,
    /// The caller's trace the submission continues (`Event::Submitted::traceparent`).
    pub traceparent: Option<String>,
    /// How many times the operator asked to resume it (`retry`).
    pub resumes: u32,
    pub created_at: i64,
    pub updated_at: i64,
    pub summary: Summary,
    /// Steps in the order they first started.
    pub steps: Vec<StepView>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    /// The executions it recorded, as a trace names them.
    pub executions: Executions,
}

impl WorkflowView {
    /// Folds a workflow's complete event log.
    pub fn fold(id: &str, events: &[EventRecord]) -> WorkflowView {
        let mut view = WorkflowView {
            id: id.to_string(),
            workflow: String::new(),
            input: Value::Null,
            no_rollback: false,
            code_version: None,
            creator: id.to_string(),
            submitter: None,
            traceparent: None,
            resumes: 0,
            created_at: events.first().map_or(0, |e| e.at),
            updated_at: events.last().map_or(0, |e| e.at),
            summary: Summary::new(),
            steps: Vec::new(),
            lease_owner: None,
            lease_expires_at: None,
            executions: Executions::default(),
        };
        let mut index: BTreeMap<String, usize> = BTreeMap::new();
        // Start records may be elided (fast steps) or lost (a crash): any step event creates the
        // step, and attempt numbers only move forward.
        fn entry<'v>(
            view: &'v mut WorkflowView,
            index: &mut BTreeMap<String, usize>,
            step: &str,
            seq: i64,
        ) -> &'v mut StepView {
            let i = *index.entry(step.to_string()).or_insert_with(|| {
                view.steps.push(StepView {
                    key: step.to_string(),
                    activity: String::new(),
                    input_hash: String::new(),
                    state: StepState::Running,
                    attempts: 0,
                    round_attempts: 0,
                    round_failures: 0,
                    error: None,
                    output: None,
                    next_attempt_at: None,
                    undos: Vec::new(),
                    position: None,
                    started_at: None,
                    ended_at: None,
                    order: seq,
                    completions: 0,
                    terminal: false,
                });
                view.steps.len() - 1
            });
            &mut view.steps[i]
        }
        fn bump(s: &mut StepView, attempt: u32) {
            let attempt = attempt.max(1);
            if attempt > s.attempts {
                s.round_attempts += attempt - s.attempts;
                s.attempts = attempt;
            }
        }
        for rec in events {
            view.summary.apply(&rec.event);
            view.executions.apply(rec);
            match &rec.event {
                Event::Submitted { workflow, input, no_rollback, code_version, creator, submitter, traceparent } => {
                    view.workflow = workflow.clone();
                    view.traceparent = traceparent.clone();
                    view.submitter = submitter.clone();
                    if let Some(c) = creator {
                        view.creator = c.clone();
                    }
                    view.input = input.clone();
                    view.no_rollback = *no_rollback;
                    view.code_version = *code_version;
                }
                Event::StepStarted { step, attempt, activity, input_hash, undo, position } => {
                    let s = entry(&mut view, &mut index, step, rec.seq);
                    bump(s, *attempt);
                    s.activity = activity.clone();
                    s.input_hash = input_hash.clone();
                    if s.state != StepState::Completed {
                        s.state = StepState::Running;
                    }
                    s.next_attempt_at = None;
                    s.terminal = false;
                    s.started_at = Some(rec.at);
                    if let Some(u) = undo
                        && !s.undos.contains(u)
                    {
                        s.undos.push(u.clone());
                    }
                    if position.is_some() {
                        s.position = position.clone();
                    }
                }
                Event::StepCompleted { step, attempt, activity, input_hash, output, position } => {
                    let s = entry(&mut view, &mut index, step, rec.seq);
                    if position.is_some() {
                        s.position = position.clone();
                    }
                    bump(s, *attempt);
                    s.state = StepState::Completed;
                    s.activity = activity.clone();
                    s.input_hash = input_hash.clone();
                    s.output = Some(output.clone());
                    s.error = None;
                    s.order = rec.seq;
                    s.completions += 1;
                    s.next_attempt_at = None;
                    s.ended_at = Some(rec.at);
                }
                Event::StepFailed { step, attempt, activity, error, retryable, next_attempt_at } => {
                    let s = entry(&mut view, &mut index, step, rec.seq);
                    bump(s, *attempt);
                    if !activity.is_empty() {
                        s.activity = activity.clone();
                    }
                    s.round_failures += 1;
                    s.ended_at = Some(rec.at);
                    s.error = Some(error.clone());
                    s.next_attempt_at = *next_attempt_at;
                    s.state =
                        if *retryable && next_attempt_at.is_some() { StepState::Retrying } else { StepState::Failed };
                    s.terminal = !*retryable;
                }
                Event::ResumeRequested => {
                    view.resumes += 1;
                    for s in view.steps.iter_mut().filter(|s| s.state != StepState::Completed) {
                        s.terminal = false;
                        s.round_attempts = 0;
                        s.round_failures = 0;
                        s.next_attempt_at = None;
                    }
                }
                _ => {}
            }
        }
        view
    }

    pub fn step(&self, key: &str) -> Option<&StepView> {
        self.steps.iter().find(|s| s.key == key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(step: &str, error: &str) -> Event {
        Event::StepFailed {
            step: step.into(),
            attempt: 1,
            activity: "a".into(),
            error: error.into(),
            retryable: true,
            next_attempt_at: None,
        }
    }

    #[test]
    fn an_undo_that_failed_once_does_not_replace_the_cause_of_the_compensation() {
        let mut s = Summary::new();
        s.apply(&failed("nat", "InvalidParameterValue"));
        s.apply(&Event::CompensationStarted { reason: "nat failed".into() });
        s.apply(&failed("undo:zone", "Throttling"));
        s.apply(&Event::Compensated);
        assert_eq!(s.state, WorkflowState::Compensated);
        assert_eq!(s.error.as_deref(), Some("nat: InvalidParameterValue"));
    }

    #[test]
    fn a_wait_is_shown_until_the_workflow_records_anything_else() {
        let mut s = Summary::new();
        s.apply(&Event::LeaseTaken { owner: "d".into(), previous: None });
        s.apply(&Event::Waiting { reason: "quota: needs 1 Elastic IP".into() });
        s.apply(&Event::Waiting { reason: "workflow w of journal j".into() });
        assert_eq!(s.waiting.as_deref(), Some("workflow w of journal j"));
        assert_eq!(s.state, WorkflowState::Running, "a wait changes no state");
        s.apply(&Event::StepStarted {
            step: "vpc".into(),
            attempt: 1,
            activity: "a".into(),
            input_hash: "h".into(),
            undo: None,
            position: None,
        });
        assert_eq!(s.waiting, None);
    }

    #[test]
    fn a_hold_is_shown_until_its_execution_ends() {
        let mut s = Summary::new();
        s.apply(&Event::LeaseTaken { owner: "d".into(), previous: None });
        s.apply(&Event::Holding { what: "cluster lease s3://b/k".into() });
        s.apply(&failed("vpc", "Throttling"));
        assert_eq!(s.holding.as_deref(), Some("cluster lease s3://b/k"), "held across its steps");
        s.apply(&Event::LeaseTaken { owner: "e".into(), previous: Some("d".into()) });
        assert_eq!(s.holding, None, "another execution holds nothing yet");
        s.apply(&Event::Holding { what: "cluster lease s3://b/k".into() });
        s.apply(&Event::Completed { output: serde_json::json!({}) });
        assert_eq!(s.holding, None);
    }
}
