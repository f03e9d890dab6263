//! A workflow that failed for good (or was cancelled) undone: the undos its steps journaled
//! before they acted, run newest first, each a journaled, retried step; a failure among them
//! ends the workflow `compensation_failed` naming what is still there.
//!
//! Why this order: reverse journal order of the steps' completion (or start, for steps that never
//! completed: their undo deletes only what this workflow created, so it is harmless if nothing was
//! made). Exhausted undo retries end in `compensation_failed` listing what is left; `retry`
//! resumes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use infraflow_journal::{Durability, Event, StepState, Undo, WorkflowState, WorkflowView};
use serde_json::Value;

use crate::context::{Run, StepOptions, WfCtx};
use crate::engine::Engine;
use crate::error::{ActivityError, EngineError, StepError};
use crate::progress::Progress;

impl Engine {
    /// A terminal failure or a cancel: compensate, unless the user asked to keep what was made.
    pub(crate) async fn fail(
        &self,
        run: &Arc<Run>,
        view: &WorkflowView,
        reason: String,
    ) -> Result<WorkflowState, EngineError> {
        if view.no_rollback {
            let error = format!("{reason}; completed steps were kept (--no-rollback): remove them with teardown");
            run.record(vec![Event::Failed { error }], Durability::Durable).await?;
            return Ok(WorkflowState::Failed);
        }
        run.record(vec![Event::CompensationStarted { reason: reason.clone() }], Durability::Durable).await?;
        self.compensate(run, view).await
    }

    /// Runs the registered undos of every started step, newest first, each as a journaled step.
    pub(crate) async fn compensate(&self, run: &Arc<Run>, _view: &WorkflowView) -> Result<WorkflowState, EngineError> {
        run.compensating.store(true, Ordering::SeqCst);
        run.failing.store(false, Ordering::SeqCst);
        // Reload: branches may have journaled steps since the view was read.
        let view = self.journal.load_async(&run.id).await?.ok_or_else(|| EngineError::NotFound(run.id.clone()))?;
        run.report(Progress::Compensating {
            workflow: run.id.clone(),
            reason: view.summary.error.clone().unwrap_or_default(),
        });
        // Every registered undo of every attempt, newest step first.
        let mut steps: Vec<_> =
            view.steps.iter().filter(|s| !s.undos.is_empty() && !s.key.starts_with(UNDO_PREFIX)).collect();
        steps.sort_by_key(|s| std::cmp::Reverse(s.order));
        let todo: Vec<(String, String, &Undo)> = steps
            .iter()
            .flat_map(|s| s.undos.iter().enumerate().map(|(i, u)| (s.key.clone(), undo_key(&s.key, i), u)))
            .collect();
        let done = |key: &str| view.step(key).is_some_and(|s| s.state == StepState::Completed);
        // The steps whose undos are still to run, from the `i`-th on.
        let remaining_from = |i: usize| {
            let mut remaining: Vec<String> =
                todo[i..].iter().filter(|(_, u, _)| !done(u)).map(|(k, _, _)| k.clone()).collect();
            remaining.dedup();
            remaining
        };
        // Where the workflow acts, for every undo (its role): from its journaled input.
        let context = self.registry.workflow(&view.workflow).map(|d| d.undo_context(&view.input)).unwrap_or_default();
        let ctx = WfCtx::new(run.clone());
        for (i, (step_key, undo_key, undo)) in todo.iter().enumerate() {
            if done(undo_key) {
                continue;
            }
            // The settle counts from the attempt's end, not its start: a create sent late in a
            // long attempt (in-place retries of a minute) is then as settled as one sent at once
            // before its undo looks for it by tag (SAFETY-7243D60 N10).
            if let Some(at) = view.step(step_key).and_then(|s| s.started_at.max(s.ended_at)) {
                run.sleep_until(at + self.config.undo_settle.as_millis() as i64).await;
            }
            let result = match self.registry.undo(&undo.activity) {
                Some(handler) => {
                    let options = StepOptions { retry: Some(self.config.undo_retry.clone()), undo: None, settle: None };
                    let mut input = with_step_output(&undo.input, view.step(step_key));
                    if let Value::Object(m) = &mut input {
                        m.extend(context.clone());
                    }
                    ctx.step_with(undo_key, &undo.activity, &undo.input, options, || handler(input.clone()))
                        .await
                        .map(|_: Value| ())
                }
                None => Err(StepError::Failed {
                    step: undo_key.clone(),
                    error: ActivityError::terminal(format!("no handler for compensating activity {}", undo.activity)),
                }),
            };
            match result {
                Ok(()) => {}
                Err(StepError::Failed { step: failed, error }) => {
                    let remaining = remaining_from(i);
                    let error = format!(
                        "compensation {failed} failed: {error}; still there: {}; fix the cause and run `infraflow retry {}`",
                        remaining.join(", "),
                        run.id
                    );
                    run.record(vec![Event::CompensationFailed { error, remaining }], Durability::Durable).await?;
                    return Ok(WorkflowState::CompensationFailed);
                }
                Err(StepError::Stopped) => return Ok(WorkflowState::Compensating),
                Err(StepError::Journal(e)) => return Err(e.into()),
                // Credentials or permissions (the pause is journaled): the workflow keeps its
                // cluster and resumes compensating on `retry`. Ending it here would free the
                // cluster for a later workflow to adopt what this one still has to delete.
                Err(StepError::Paused { .. }) => return Ok(WorkflowState::Paused),
                Err(other) => {
                    let error = other.to_string();
                    let remaining = remaining_from(i);
                    run.record(vec![Event::CompensationFailed { error, remaining }], Durability::Durable).await?;
                    return Ok(WorkflowState::CompensationFailed);
                }
            }
        }
        run.record(vec![Event::Compensated], Durability::Durable).await?;
        Ok(WorkflowState::Compensated)
    }
}

/// What an undo's handler is given: its journaled input, plus, when the step it undoes completed,
/// that step's output as `stepOutput` (the ids it made: found by id, an undo does not depend on
/// AWS listing them by tag yet). The undo step's own recorded input stays the journaled one.
fn with_step_output(input: &Value, step: Option<&infraflow_journal::StepView>) -> Value {
    let output = step.filter(|s| s.state == StepState::Completed).and_then(|s| s.output.clone());
    match (input, output) {
        (Value::Object(m), Some(out)) => {
            let mut m = m.clone();
            m.insert("stepOutput".into(), out);
            Value::Object(m)
        }
        _ => input.clone(),
    }
}

/// Undo steps are journaled under the key of the step they undo, with this prefix.
pub const UNDO_PREFIX: &str = "undo:";

/// The key of the `i`-th distinct undo a step registered: `undo:<key>`, then `undo:<key>#2`, ...
fn undo_key(step: &str, i: usize) -> String {
    if i == 0 { format!("{UNDO_PREFIX}{step}") } else { format!("{UNDO_PREFIX}{step}#{}", i + 1) }
}
