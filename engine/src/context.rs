//! The workflow context: `ctx.step(...)` is where checkpoint-and-skip, durable retries and
//! write-ahead compensation registration happen.
//!
//! Why start records are lazy, or elided: a step's start is journaled durably only when it carries
//! an undo (write-ahead). Otherwise it is journaled lazily, riding the next commit, only if the
//! step is still running after 2 ms (`START_RECORD_DELAY`); a fast step's completion records its
//! attempt number. This keeps a sequential no-op step at one commit (BENCHMARKS.md) and journals
//! half the size.
//!
//! Why this file stays one (579 lines; the engine was split by concept at 600 around it): `ctx.step`
//! is one concept — positions, replay, retries and the write-ahead undo are one algorithm over one
//! journal cursor (`Run`), and the context's accessors are what a step reads of it; split, each
//! half would reach into the other's state. The combinators of concurrent branches are `branches`;
//! `engine` (342 lines) is one forward execution (submit, running the body, the terminal records),
//! what it passes before it acts is `gate` (the environment check and the hold), its undoing
//! `compensate`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use infraflow_journal::{Durability, Event, Journal, JournalError, StepState, StepView, Undo};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::clock::Clock;
use crate::error::{ActivityError, StepError};
use crate::lease::BootInstant;
pub use crate::lease::LeaseCell;
use crate::progress::{Observer, Progress};
use crate::retry::RetryPolicy;
pub use crate::signals::Signals;

/// The step that journals where a workflow acts (the gate's probe; a step every run replays).
pub const ENVIRONMENT_STEP: &str = "environment";

/// How long a step without an undo runs before its start is journaled.
const START_RECORD_DELAY: std::time::Duration = std::time::Duration::from_millis(2);

/// Per-step settings.
#[derive(Clone, Debug, Default)]
pub struct StepOptions {
    /// Overrides the engine's default retry policy.
    pub retry: Option<RetryPolicy>,
    /// The compensating action, journaled durably *before* the step acts, so that a crash
    /// between the action and its record can never leak what the action made.
    pub undo: Option<Undo>,
    /// After an attempt that may have made something (any failure, or a crash mid-way), the
    /// next attempt starts no sooner than this after the failure (or after the resume that
    /// found it unfinished): what it may have made must be visible to the next attempt's lookup.
    pub settle: Option<std::time::Duration>,
}

/// State shared by every branch of one execution of one workflow.
pub(crate) struct Run {
    pub id: String,
    /// `WfCtx::creator`.
    pub creator: String,
    /// When the workflow was submitted (ms since the epoch, from the journal).
    pub submitted_at: i64,
    /// `WfCtx::resumes`.
    pub resumes: u32,
    /// `WfCtx::code_version`.
    pub code_version: u32,
    pub journal: Journal,
    pub clock: Arc<dyn Clock>,
    pub lease: Arc<LeaseCell>,
    pub signals: Arc<Signals>,
    pub observer: Observer,
    pub default_retry: RetryPolicy,
    /// Set when a branch failed for good: other branches start no new step.
    pub failing: AtomicBool,
    /// Undo steps run: cancel and failing no longer stop steps, and exhausted retries end the
    /// compensation instead of pausing.
    pub compensating: AtomicBool,
    pub recorded: Mutex<HashMap<String, StepView>>,
    /// Where the workflow acts, as journaled at its start (see `WorkflowDef::environment`).
    pub environment: Mutex<Option<Value>>,
    /// How many steps the code has called so far in each scope.
    pub positions: Mutex<HashMap<String, u32>>,
    /// The journal's step at each recorded position (`<scope>#<n>`).
    pub by_position: HashMap<String, String>,
    /// This execution's spans, when tracing is on and its trace sampled.
    pub trace: Option<crate::trace::ExecTrace>,
}

impl Run {
    pub(crate) async fn record(&self, events: Vec<Event>, durability: Durability) -> Result<(), JournalError> {
        self.journal.append(&self.id, &self.lease.fence, events, self.clock.now_ms(), durability).await
    }

    /// Renews the lease when less than half of it is left, so no step starts on a lease that
    /// could expire under it.
    pub(crate) async fn ensure_lease(&self) -> Result<(), JournalError> {
        if BootInstant::now() >= self.lease.fence_at() {
            // No renewal succeeded in time: another process may soon take over.
            self.signals.lose();
            return Err(JournalError::LeaseLost {
                workflow: self.id.clone(),
                holder: "nobody yet (no renewal succeeded in time; dropped before it could expire)".into(),
            });
        }
        let now = self.clock.now_ms();
        if self.lease.expires_at.load(Ordering::SeqCst) - now >= self.lease.ttl_ms / 2 {
            return Ok(());
        }
        let sent = BootInstant::now();
        let r = self.journal.renew(&self.lease.fence.owner, vec![self.id.clone()], now, self.lease.ttl_ms).await?;
        if r.first().is_some_and(|r| r.held) {
            self.lease.renewed(sent, now + self.lease.ttl_ms);
            Ok(())
        } else {
            self.signals.stop();
            let holder = self.journal.row(&self.id)?.and_then(|r| r.lease_owner).unwrap_or_else(|| "nobody".into());
            Err(JournalError::LeaseLost { workflow: self.id.clone(), holder })
        }
    }

    /// Pauses the workflow at `key` (after the failure record, if any): journals why, tells the
    /// observer, and stops sibling branches at their next boundary.
    pub(crate) async fn pause(
        &self,
        key: String,
        failure: Option<Event>,
        reason: String,
    ) -> Result<StepError, JournalError> {
        let (attempt, activity) = match &failure {
            Some(Event::StepFailed { attempt, activity, .. }) => (*attempt, activity.clone()),
            _ => (0, String::new()),
        };
        let mut events: Vec<Event> = failure.into_iter().collect();
        events.push(Event::Paused { step: Some(key.clone()), reason: reason.clone() });
        self.record(events, Durability::Durable).await?;
        self.report(Progress::StepFailed {
            workflow: self.id.clone(),
            step: key.clone(),
            activity,
            attempt,
            error: reason.clone(),
        });
        self.failing.store(true, Ordering::SeqCst);
        Ok(StepError::Paused { step: key, reason })
    }

    pub(crate) fn report(&self, p: Progress) {
        (self.observer)(&p);
    }

    /// Sleeps until `at`, waking early for cancel or stop.
    pub(crate) async fn sleep_until(&self, at: i64) {
        let compensating = self.compensating.load(Ordering::SeqCst);
        tokio::select! {
            _ = self.clock.sleep_until(at) => {}
            _ = self.signals.interrupted(compensating) => {}
        }
    }
}

/// What workflow code holds: runs steps, scoped by a key prefix so branches have distinct keys.
#[derive(Clone)]
pub struct WfCtx {
    pub(crate) run: Arc<Run>,
    prefix: String,
}

/// A stable digest of a step's input, used to detect code that changed under a journal.
pub fn input_hash(input: &Value) -> String {
    let text = serde_json::to_string(input).unwrap_or_default();
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl WfCtx {
    pub(crate) fn new(run: Arc<Run>) -> WfCtx {
        WfCtx { run, prefix: String::new() }
    }

    /// The id of the workflow being run.
    pub fn workflow_id(&self) -> &str {
        &self.run.id
    }

    /// Who this workflow is to what it creates (created-by tags, token salts): unique to its
    /// submission, unlike the id, which a user may choose again (`Event::Submitted::creator`).
    pub fn creator(&self) -> &str {
        &self.run.creator
    }

    /// When the workflow was submitted (ms since the epoch), as the journal recorded it: the
    /// same on every replay and resume, so what a workflow derives from it (an expiration date)
    /// never moves.
    pub fn submitted_ms(&self) -> i64 {
        self.run.submitted_at
    }

    /// How many times an operator has resumed this workflow (`retry`): the same on every replay
    /// until the next `retry`. A workflow that must look at the world afresh after an operator
    /// fixed something (teardown's discovery) keys those steps by it.
    pub fn resumes(&self) -> u32 {
        self.run.resumes
    }

    /// The version of the workflow's code this run was submitted to (`WorkflowDef::version` at
    /// submit): a flow changed since keeps its former steps for runs below the version that
    /// changed them — `if ctx.code_version() < 3 { old } else { new }` — so a run started by the
    /// previous binary finishes under this one (ARCHITECTURE.md, "Changing a flow").
    pub fn code_version(&self) -> u32 {
        self.run.code_version
    }

    /// A context whose step keys are prefixed with `scope/`: one per independent branch.
    pub fn scoped(&self, scope: &str) -> WfCtx {
        WfCtx { run: self.run.clone(), prefix: self.key(scope) }
    }

    /// The full journal key of `key` in this scope.
    pub fn key(&self, key: &str) -> String {
        if self.prefix.is_empty() { key.to_string() } else { format!("{}/{key}", self.prefix) }
    }

    /// The current time of the engine's clock.
    pub fn now_ms(&self) -> i64 {
        self.run.clock.now_ms()
    }

    /// Where the workflow acts, as journaled at its first execution and checked since; None for
    /// workflows without an environment.
    pub fn environment(&self) -> Option<Value> {
        self.run.environment.lock().unwrap().clone()
    }

    /// Runs `activity` once durably: a step already completed in the journal returns its recorded
    /// output without running again.
    pub fn step<'a, I, O, F, Fut>(
        &'a self,
        key: &str,
        activity: &str,
        input: &I,
        f: F,
    ) -> impl Future<Output = Result<O, StepError>> + use<'a, I, O, F, Fut>
    where
        I: Serialize + ?Sized,
        O: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<O, ActivityError>>,
    {
        self.step_with(key, activity, input, StepOptions::default(), f)
    }

    /// `step` with a retry policy and/or a compensating action.
    /// The input is read at the call, so the returned future does not borrow it.
    pub fn step_with<'a, I, O, F, Fut>(
        &'a self,
        key: &str,
        activity: &str,
        input: &I,
        options: StepOptions,
        f: F,
    ) -> impl Future<Output = Result<O, StepError>> + use<'a, I, O, F, Fut>
    where
        I: Serialize + ?Sized,
        O: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<O, ActivityError>>,
    {
        let key = self.key(key);
        let input =
            serde_json::to_value(input).map_err(|e| StepError::Decode { step: key.clone(), detail: e.to_string() });
        let position = self.next_position(&key);
        self.run_step(key, activity.to_string(), input, position, options, f)
    }

    /// The position of a step of the workflow body: the n-th step its scope calls, counted at
    /// the call (program order, deterministic even when steps then run concurrently). Undo steps
    /// and the environment probe are not part of the body and take none.
    fn next_position(&self, key: &str) -> Option<String> {
        if self.run.compensating.load(Ordering::SeqCst) || key == ENVIRONMENT_STEP {
            return None;
        }
        let mut positions = self.run.positions.lock().unwrap();
        let n = match positions.get_mut(self.prefix.as_str()) {
            Some(n) => {
                *n += 1;
                *n
            }
            None => {
                positions.insert(self.prefix.clone(), 1);
                1
            }
        };
        Some(format!("{}#{n}", self.prefix))
    }

    async fn run_step<O, F, Fut>(
        &self,
        key: String,
        activity: String,
        input: Result<Value, StepError>,
        position: Option<String>,
        options: StepOptions,
        mut f: F,
    ) -> Result<O, StepError>
    where
        O: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<O, ActivityError>>,
    {
        let activity = activity.as_str();
        let hash = input_hash(&input?);
        let run = &self.run;
        let prior = run.recorded.lock().unwrap().get(&key).cloned();
        if let Some(p) = &position
            && let Some(there) = run.by_position.get(p)
            && *there != key
        {
            return Err(StepError::Nondeterminism {
                step: key,
                detail: format!(
                    "the journal has step {there} at this point of the workflow ({p}); a step was renamed, added, removed or reordered"
                ),
            });
        }
        if let Some(rec) = &prior
            && let (Some(was), Some(now)) = (&rec.position, &position)
            && was != now
        {
            return Err(StepError::Nondeterminism {
                step: key,
                detail: format!("recorded at {was}, now called at {now}; steps were added, removed or reordered"),
            });
        }
        // An unfinished step too: its recorded start names what it was running.
        if let Some(rec) = &prior
            && rec.state != StepState::Completed
            && !rec.activity.is_empty()
            && !rec.input_hash.is_empty()
            && (rec.activity != activity || rec.input_hash != hash)
        {
            return Err(StepError::Nondeterminism {
                step: key,
                detail: format!(
                    "started as {} with input {}, now called as {} with input {}",
                    rec.activity, rec.input_hash, activity, hash
                ),
            });
        }
        if let Some(rec) = &prior
            && rec.state == StepState::Completed
        {
            if rec.activity != activity || rec.input_hash != hash {
                return Err(StepError::Nondeterminism {
                    step: key,
                    detail: format!(
                        "recorded activity {} with input {}, now called as {} with input {}",
                        rec.activity, rec.input_hash, activity, hash
                    ),
                });
            }
            let out = rec.output.clone().unwrap_or(Value::Null);
            return serde_json::from_value(out).map_err(|e| StepError::Decode { step: key, detail: e.to_string() });
        }
        if let Some(rec) = &prior
            && rec.terminal
        {
            // A recorded terminal failure is a fact of the past: replayed, never re-executed (if
            // it succeeded now, a workflow on its way to compensation would carry on forward).
            run.failing.store(true, Ordering::SeqCst);
            let error = ActivityError::terminal(rec.error.clone().unwrap_or_else(|| "failed".into()));
            return Err(StepError::Failed { step: key, error });
        }
        self.check_boundary()?;
        let policy = options.retry.clone().unwrap_or_else(|| run.default_retry.clone());
        let (mut total, mut round) = prior.as_ref().map_or((0, 0), |r| (r.attempts, r.round_attempts));
        if let Some(settle) = options.settle
            && let Some(rec) = &prior
            && rec.state == StepState::Running
        {
            // The last attempt started and nothing was heard of it: a crash mid-step. Its create
            // may have been sent at any moment of the attempt (after in-place retries of a new
            // id's NotFound, long after it started): AWS shows it to lookups `settle` after that,
            // so the settle is counted from now, not from the attempt's start (or another host's
            // clock).
            run.sleep_until(run.clock.now_ms() + settle.as_millis() as i64).await;
            self.check_boundary()?;
        }
        if let Some(at) = prior.as_ref().and_then(|r| r.next_attempt_at) {
            // A backoff journaled before a restart still applies, but never longer than the
            // policy allows: a stepped-back clock or another host's clock must not hang the step.
            let cap = run.clock.now_ms() + policy.max_interval.as_millis() as i64;
            run.sleep_until(at.min(cap)).await;
            self.check_boundary()?;
        }
        let step_span = run.trace.as_ref().map_or_else(crate::trace::StepSpan::none, |t| {
            t.step(&key, activity, run.compensating.load(Ordering::SeqCst))
        });
        loop {
            if round >= policy.max_attempts {
                if run.compensating.load(Ordering::SeqCst) {
                    let error = ActivityError::terminal(format!("did not finish in {round} attempts"));
                    return Err(StepError::Failed { step: key, error });
                }
                let reason = format!(
                    "step {key} did not finish in {round} attempts (the process stopped during it, or it kept failing); fix the cause and run `infraflow retry {}`",
                    run.id
                );
                return Err(run.pause(key.clone(), None, reason).await?);
            }
            run.ensure_lease().await?;
            total += 1;
            round += 1;
            let started = Event::StepStarted {
                step: key.clone(),
                attempt: total,
                activity: activity.to_string(),
                input_hash: hash.clone(),
                undo: options.undo.clone(),
                position: position.clone(),
            };
            // Write-ahead only where it protects something: a step with an undo must be known to
            // have started before it acts. Other starts are recorded only if the step is still
            // running after a moment (as Temporal does): a fast step's completion says it all,
            // and the journal stays half the size.
            run.report(Progress::StepStarted {
                workflow: run.id.clone(),
                step: key.clone(),
                activity: activity.to_string(),
                attempt: total,
            });
            let t0 = Instant::now();
            let step_id = crate::current_step::StepId { workflow: run.id.clone(), step: key.clone() };
            let attempt = step_span.attempt(total);
            let result = if options.undo.is_some() {
                run.record(vec![started], Durability::Durable).await?;
                attempt.within(crate::current_step::within_step(step_id, f())).await
            } else {
                let work = attempt.within(crate::current_step::within_step(step_id, f()));
                tokio::pin!(work);
                tokio::select! {
                    biased;
                    r = &mut work => r,
                    _ = tokio::time::sleep(START_RECORD_DELAY) => {
                        run.record(vec![started], Durability::Lazy).await?;
                        work.await
                    }
                }
            };
            attempt.end(result.as_ref().err().map(ToString::to_string));
            let failed = |error: &ActivityError, retryable: bool, next_attempt_at: Option<i64>| Event::StepFailed {
                step: key.clone(),
                attempt: total,
                activity: activity.to_string(),
                error: error.to_string(),
                retryable,
                next_attempt_at,
            };
            match result {
                Ok(out) => {
                    let output = serde_json::to_value(&out)
                        .map_err(|e| StepError::Decode { step: key.clone(), detail: e.to_string() })?;
                    run.record(
                        vec![Event::StepCompleted {
                            step: key.clone(),
                            attempt: total,
                            activity: activity.to_string(),
                            input_hash: hash.clone(),
                            output: output.clone(),
                            position: position.clone(),
                        }],
                        Durability::Durable,
                    )
                    .await?;
                    run.recorded.lock().unwrap().insert(
                        key.clone(),
                        StepView {
                            key: key.clone(),
                            activity: activity.to_string(),
                            input_hash: hash,
                            state: StepState::Completed,
                            attempts: total,
                            round_attempts: round,
                            round_failures: 0,
                            error: None,
                            output: Some(output),
                            next_attempt_at: None,
                            undos: options.undo.iter().cloned().collect(),
                            position: position.clone(),
                            started_at: None,
                            ended_at: None,
                            order: 0,
                            completions: 1,
                            terminal: false,
                        },
                    );
                    run.report(Progress::StepCompleted {
                        workflow: run.id.clone(),
                        step: key,
                        activity: activity.to_string(),
                        attempt: total,
                        millis: t0.elapsed().as_millis() as u64,
                    });
                    step_span.ok();
                    return Ok(out);
                }
                Err(error) if error.operator => {
                    // Credentials, permissions, or a choice only the operator can make (an AWS
                    // code: AWS refused; none: our own check, whose message says what to do).
                    // Rolling back would fail the same way or guess; a `retry` after the
                    // operator's fix finishes the work.
                    let reason = match error.code {
                        Some(_) => format!(
                            "step {key}: AWS refused the credentials or permissions ({error}); fix them (for example `aws sso login`, or the IAM policy) and run `infraflow retry {}`",
                            run.id
                        ),
                        None => format!("step {key} needs the operator: {error}"),
                    };
                    return Err(run.pause(key.clone(), Some(failed(&error, true, None)), reason).await?);
                }
                Err(error) if error.retryable && round < policy.max_attempts => {
                    let mut delay = policy.delay_after(round);
                    if let Some(settle) = options.settle {
                        // Any failed attempt of a create step may have made the resource: a
                        // follow-up call (tags, attributes, attach) can fail with a retryable 4xx
                        // after the create succeeded. The next attempt's lookup must see it.
                        delay = delay.max(settle);
                    }
                    let next = run.clock.now_ms() + delay.as_millis() as i64;
                    run.record(vec![failed(&error, true, Some(next))], Durability::Durable).await?;
                    run.report(Progress::StepRetrying {
                        workflow: run.id.clone(),
                        step: key.clone(),
                        activity: activity.to_string(),
                        attempt: total,
                        error: error.to_string(),
                        delay_ms: delay.as_millis() as u64,
                    });
                    run.sleep_until(next).await;
                    self.check_boundary()?;
                }
                Err(error) if error.retryable && !run.compensating.load(Ordering::SeqCst) => {
                    let reason = format!(
                        "step {key} failed {round} times, last with {error}; fix the cause and run `infraflow retry {}`",
                        run.id
                    );
                    return Err(run.pause(key.clone(), Some(failed(&error, true, None)), reason).await?);
                }
                Err(error) => {
                    run.failing.store(true, Ordering::SeqCst);
                    run.record(vec![failed(&error, false, None)], Durability::Durable).await?;
                    run.report(Progress::StepFailed {
                        workflow: run.id.clone(),
                        step: key.clone(),
                        activity: activity.to_string(),
                        attempt: total,
                        error: error.to_string(),
                    });
                    return Err(StepError::Failed { step: key, error });
                }
            }
        }
    }

    /// Step boundaries are where cancel, shutdown and a sibling's failure take effect.
    fn check_boundary(&self) -> Result<(), StepError> {
        let run = &self.run;
        if run.signals.stop_requested() {
            return Err(StepError::Stopped);
        }
        if run.compensating.load(Ordering::SeqCst) {
            return Ok(());
        }
        if run.signals.cancel_requested() {
            return Err(StepError::Cancelled);
        }
        if run.failing.load(Ordering::SeqCst) {
            return Err(StepError::Aborted);
        }
        Ok(())
    }
}
