//! What an execution passes before it acts, forward or rolling back: the environment check
//! (the same account and region as at its start) and the workflow's hold (its cluster, beyond
//! the journal). At a workflow's first execution the two run side by side: the hold finds its
//! account itself, so taking it costs no round trip after the environment's.

use std::sync::Arc;

use infraflow_journal::{Durability, Event, StepState, WorkflowState, WorkflowView};
use serde_json::Value;

use crate::context::{ENVIRONMENT_STEP, Run, Signals, StepOptions, WfCtx};
use crate::engine::Engine;
use crate::error::{EngineError, StepError};
use crate::progress::Progress;
use crate::registry::WorkflowDef;

/// What passing the gate gives: the hold to act under (if the workflow has one), or the state
/// to return instead (paused, or as it was when stopped).
pub(crate) type Passed = Result<Option<Box<dyn crate::Hold>>, WorkflowState>;

/// How a first execution's environment check went, for the hold taken beside it: None while it
/// runs, then whether it passed.
type EnvChecked = tokio::sync::watch::Receiver<Option<bool>>;

impl Engine {
    /// Checks the environment and takes the hold (none for a finished workflow). A first
    /// execution does both at once; a later one checks first, so that a hold is never taken
    /// for a workflow this process must not continue (another account or region).
    pub(crate) async fn pass_gate(
        &self,
        run: &Arc<Run>,
        def: &dyn WorkflowDef,
        view: &WorkflowView,
        signals: &Arc<Signals>,
    ) -> Result<Passed, EngineError> {
        let first = view.step(ENVIRONMENT_STEP).is_none_or(|s| s.state != StepState::Completed);
        let holds = !view.summary.state.is_finished();
        let checked = |r: Result<(), StepError>| match r {
            Ok(()) => Ok(None),
            Err(StepError::Paused { .. }) => Ok(Some(WorkflowState::Paused)),
            Err(StepError::Journal(e)) => Err(EngineError::from(e)),
            Err(_) => Ok(Some(view.summary.state)),
        };
        if !(first && holds) {
            if let Some(state) = checked(self.check_environment(run, def, view).await)? {
                return Ok(Err(state));
            }
            return if holds { self.take_hold(run, def, view, signals, None).await } else { Ok(Ok(None)) };
        }
        let (said, env_checked) = tokio::sync::watch::channel(None);
        let env = async {
            let r = self.check_environment(run, def, view).await;
            let _ = said.send(Some(r.is_ok()));
            r
        };
        let (env, hold) = tokio::join!(env, self.take_hold(run, def, view, signals, Some(env_checked)));
        match checked(env)? {
            Some(state) => Ok(Err(state)),
            None => hold,
        }
    }

    /// Takes the workflow's hold (waiting while another holds it), or says what to return
    /// instead: paused (the operator must act) or the state it was in (stopped while waiting).
    /// Beside a first execution's environment check (`env_checked`), nothing is journaled before
    /// that check's own records (a wait recorded first would be folded away by them), and a
    /// check that fails ends the taking: a hold taken is released.
    async fn take_hold(
        &self,
        run: &Arc<Run>,
        def: &dyn WorkflowDef,
        view: &WorkflowView,
        signals: &Arc<Signals>,
        env_checked: Option<EnvChecked>,
    ) -> Result<Passed, EngineError> {
        let observer = self.observer.clone();
        let workflow = run.id.clone();
        // Whether the environment check passed (at once without one running beside).
        let passed = |rx: Option<EnvChecked>| async move {
            match rx {
                None => true,
                Some(mut rx) => rx.wait_for(Option::is_some).await.is_ok_and(|v| *v == Some(true)),
            }
        };
        // What the hold waits for is journaled (`status` reads it), in the order said, by one
        // task: drained before the execution acts, so no wait is recorded after its first step.
        let (said, mut to_record) = tokio::sync::mpsc::unbounded_channel::<Option<String>>();
        let recorder = {
            let (run, env_checked) = (run.clone(), env_checked.clone());
            tokio::spawn(async move {
                if !passed(env_checked).await {
                    return;
                }
                while let Some(Some(reason)) = to_record.recv().await {
                    if let Err(e) = run.record(vec![Event::Waiting { reason }], Durability::Lazy).await {
                        tracing::debug!(workflow = %run.id, error = %e, "what the hold waits for was not journaled");
                    }
                }
            })
        };
        let say = said.clone();
        let waiter = signals.clone();
        let request = crate::HoldRequest {
            workflow: run.id.clone(),
            creator: run.creator.clone(),
            environment: run.environment.lock().unwrap().clone(),
            undoing: matches!(view.summary.state, WorkflowState::Compensating | WorkflowState::Cancelling),
            waiting: Arc::new(move |reason: String| {
                waiter.leave_slot_while_waiting();
                let _ = say.send(Some(reason.clone()));
                observer(&Progress::Waiting { workflow: workflow.clone(), reason })
            }),
        };
        let Some(taking) = def.hold(request, &view.input) else { return Ok(Ok(None)) };
        let failed = {
            let env_checked = env_checked.clone();
            async move {
                match env_checked {
                    Some(_) if !passed(env_checked).await => {}
                    _ => std::future::pending().await,
                }
            }
        };
        let taken = tokio::select! {
            taken = taking => Some(taken),
            _ = signals.stopped() => None,
            _ = failed => None,
        };
        signals.occupy_again().await;
        // Every wait said is on record before what follows it (a pause, the hold, a step).
        let _ = said.send(None);
        let _ = recorder.await;
        if !passed(env_checked).await {
            if let Some(Ok(held)) = taken {
                held.release().await;
            }
            return Ok(Err(view.summary.state));
        }
        match taken {
            None => Ok(Err(view.summary.state)),
            Some(Err(crate::HoldError::Operator(reason))) => {
                run.record(vec![Event::Paused { step: None, reason }], Durability::Durable).await?;
                Ok(Err(WorkflowState::Paused))
            }
            Some(Ok(held)) => {
                if let Some(what) = held.what()
                    && let Err(e) = run.record(vec![Event::Holding { what }], Durability::Lazy).await
                {
                    tracing::debug!(workflow = %run.id, error = %e, "what the workflow holds was not journaled");
                }
                Ok(Ok(Some(held)))
            }
        }
    }

    /// Journals the workflow's environment at its first execution; on every later one, probes it
    /// again and pauses (naming both) if it differs, so that no process continues or compensates
    /// a workflow in another account or region than the one it started in.
    async fn check_environment(
        &self,
        run: &Arc<Run>,
        def: &dyn WorkflowDef,
        view: &WorkflowView,
    ) -> Result<(), StepError> {
        let Some(first_probe) = def.environment(&view.input) else { return Ok(()) };
        let recorded =
            view.step(ENVIRONMENT_STEP).filter(|s| s.state == StepState::Completed).and_then(|s| s.output.clone());
        let pause = |reason: String| async move {
            run.record(
                vec![Event::Paused { step: Some(ENVIRONMENT_STEP.into()), reason: reason.clone() }],
                Durability::Durable,
            )
            .await?;
            Err(StepError::Paused { step: ENVIRONMENT_STEP.into(), reason })
        };
        let Some(recorded) = recorded else {
            let ctx = WfCtx::new(run.clone());
            let mut probe = Some(first_probe);
            let result: Result<Value, StepError> = ctx
                .step_with(ENVIRONMENT_STEP, "environment.probe", &Value::Null, StepOptions::default(), || {
                    probe.take().or_else(|| def.environment(&view.input)).expect("the definition has an environment")
                })
                .await;
            return match result {
                Ok(env) => {
                    *run.environment.lock().unwrap() = Some(env);
                    Ok(())
                }
                Err(StepError::Failed { error, .. }) => {
                    pause(format!(
                        "cannot tell which account and region this workflow acts in ({error}); fix it and run `infraflow retry {}`",
                        run.id
                    ))
                    .await
                }
                Err(e) => Err(e),
            };
        };
        let mut probe = first_probe;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match probe.await {
                Ok(now) if now == recorded => {
                    *run.environment.lock().unwrap() = Some(recorded);
                    return Ok(());
                }
                Ok(now) => {
                    return pause(format!(
                        "the AWS environment differs from the one this workflow started in: it started in {}, this process is in {}; resume it with the credentials and region it started with",
                        describe(&recorded),
                        describe(&now)
                    ))
                    .await;
                }
                Err(e) if e.retryable && attempt < self.config.default_retry.max_attempts => {
                    let next = run.clock.now_ms() + self.config.default_retry.delay_after(attempt).as_millis() as i64;
                    run.sleep_until(next).await;
                    if run.signals.stop_requested() {
                        return Err(StepError::Stopped);
                    }
                }
                Err(e) => {
                    return pause(format!(
                        "cannot check that this process acts in the account and region this workflow started in ({}): {e}; fix it and run `infraflow retry {}`",
                        describe(&recorded),
                        run.id
                    ))
                    .await;
                }
            }
            probe = def.environment(&view.input).expect("the definition has an environment");
        }
    }
}

/// `{"account":"1","region":"r"}` as `account 1, region r`.
fn describe(env: &Value) -> String {
    match env.as_object() {
        Some(m) => m
            .iter()
            .map(|(k, v)| format!("{k} {}", v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())))
            .collect::<Vec<_>>()
            .join(", "),
        None => env.to_string(),
    }
}
