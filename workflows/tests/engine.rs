//! Engine tests on real journal files with a test clock: crash and resume at every step boundary,
//! compensation order and resumption, pause and retry, cancel, nondeterminism.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use common::{World, completions, config, drive_and_crash_after, submit};
use infraflow_engine::{
    ActivityError, BoxFuture, Engine, InputError, Progress, Registry, Signals, StepError, Submission, SystemClock,
    Validated, WfCtx, WorkflowDef,
};
use infraflow_journal::{Event, Journal, StepState, WorkflowState};
use infraflow_workflows::base_registry;
use serde_json::{Value, json};

#[tokio::test]
async fn resume_after_a_crash_at_each_step_boundary_completes_each_step_once() {
    for crash_after in 0..=5u32 {
        let w = World::new();
        let id = {
            let engine = w.engine(base_registry());
            // stepMillis > 0: the crash lands inside the next step, after the boundary.
            let id = submit(&engine, "canary", json!({"steps": 6, "stepMillis": 3})).await;
            drive_and_crash_after(engine, &id, crash_after).await;
            id
        };
        // A new process (new owner) takes over once the dead owner's lease expires.
        let engine = w.engine(base_registry());
        let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
        assert_eq!(out.state, WorkflowState::Completed, "crash after {crash_after}");
        assert_eq!(out.output, Some(json!({"steps": 6, "branches": 1})));
        let c = completions(engine.journal(), &id);
        assert_eq!(c.len(), 6, "crash after {crash_after}: {c:?}");
        assert!(c.values().all(|n| *n == 1), "crash after {crash_after}: {c:?}");
    }
}

#[tokio::test]
async fn concurrent_branches_replay_identically_after_a_crash() {
    let w = World::new();
    let engine = w.engine(base_registry());
    let id = submit(&engine, "canary", json!({"steps": 5, "branches": 4, "stepMillis": 2})).await;
    drive_and_crash_after(engine, &id, 9).await;
    let engine = w.engine(base_registry());
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Completed);
    let c = completions(engine.journal(), &id);
    assert_eq!(c.len(), 20);
    assert!(c.values().all(|n| *n == 1));
    assert!(c.contains_key("b3/s5"));
}

#[tokio::test]
async fn a_terminal_failure_compensates_started_steps_newest_first() {
    let w = World::new();
    let engine = w.engine(base_registry());
    let id = submit(&engine, "canary", json!({"steps": 6, "failAt": 4, "effectsFile": w.effects()})).await;
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Compensated);
    assert!(out.error.unwrap().contains("s4"), "the error names the failed step");
    let expected: Vec<String> = ["tick s1", "tick s2", "tick s3", "untick s4", "untick s3", "untick s2", "untick s1"]
        .iter()
        .map(|s| s.replacen(' ', &format!(" {id}/"), 1))
        .collect();
    assert_eq!(w.effect_lines(), expected);
    let view = engine.journal().load(&id).unwrap().unwrap();
    assert!(view.step("s5").is_none(), "nothing runs after the failure");
}

#[tokio::test]
async fn no_rollback_keeps_completed_steps_and_ends_failed() {
    let w = World::new();
    let engine = w.engine(base_registry());
    let id = engine
        .submit(Submission {
            workflow: "canary".into(),
            input: json!({"steps": 3, "failAt": 2, "effectsFile": w.effects()}),
            id: Some("keep-1".into()),
            no_rollback: true,
            submitter: None,
            traceparent: None,
        })
        .await
        .unwrap()
        .id;
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Failed);
    assert!(out.error.unwrap().contains("--no-rollback"));
    assert_eq!(w.effect_lines(), [format!("tick {id}/s1")]);
}

#[tokio::test]
async fn a_crash_during_compensation_resumes_it_and_undoes_each_step_once() {
    let w = World::new();
    let engine = w.engine(base_registry());
    let id = submit(&engine, "canary", json!({"steps": 5, "failAt": 5, "effectsFile": w.effects()})).await;
    // Completions: 4 ticks, then undo s5 and undo s4; crash after the second undo.
    drive_and_crash_after(engine, &id, 6).await;
    let engine = w.engine(base_registry());
    let mid = engine.journal().row(&id).unwrap().unwrap().state;
    assert_eq!(mid, WorkflowState::Compensating);
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Compensated);
    let c = completions(engine.journal(), &id);
    for k in ["undo:s1", "undo:s2", "undo:s3", "undo:s4", "undo:s5"] {
        assert_eq!(c.get(k), Some(&1), "{k} in {c:?}");
    }
    let unticks: Vec<_> = w.effect_lines().into_iter().filter(|l| l.starts_with("untick")).collect();
    let expected: Vec<String> = (1..=5).rev().map(|i| format!("untick {id}/s{i}")).collect();
    assert_eq!(unticks, expected);
}

/// A workflow with one step whose activity fails (retryably) a set number of times, then a second
/// step whose input depends on a version knob (to provoke nondeterminism).
struct Flaky {
    failures_left: Arc<AtomicU32>,
    calls: Arc<AtomicU32>,
    version: Arc<AtomicU32>,
    /// 1: step a is called a2 (a rename); 2: the code version is 2; 3: the rename made by the
    /// rule — version 2, which keeps step a for runs submitted to version 1.
    change: Arc<AtomicU32>,
}

impl WorkflowDef for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }
    fn summary(&self) -> &'static str {
        "test"
    }
    fn validate(&self, _id: &str, input: &Value) -> Result<Validated, InputError> {
        Ok(Validated { input: input.clone(), cluster: String::new() })
    }
    fn version(&self) -> u32 {
        if self.change.load(Ordering::SeqCst) >= 2 { 2 } else { 1 }
    }
    fn oldest_version(&self) -> u32 {
        if self.change.load(Ordering::SeqCst) == 3 { 1 } else { self.version() }
    }
    fn run(&self, ctx: WfCtx, _input: Value) -> BoxFuture<Result<Value, StepError>> {
        let (left, calls, version) = (self.failures_left.clone(), self.calls.clone(), self.version.clone());
        let change = self.change.load(Ordering::SeqCst);
        let a_key = match change {
            1 => "a2",
            3 if ctx.code_version() >= 2 => "a2",
            _ => "a",
        };
        Box::pin(async move {
            let v = version.load(Ordering::SeqCst);
            let a: u32 = ctx.step(a_key, "noop", &json!({"v": v}), || async { Ok(1u32) }).await?;
            let b: u32 = ctx
                .step("b", "flaky", &json!({}), || {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let fail = left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
                    async move { if fail { Err(ActivityError::retryable("throttled")) } else { Ok(2u32) } }
                })
                .await?;
            Ok(json!(a + b))
        })
    }
}

fn flaky_registry(f: &Flaky) -> Registry {
    let mut r = Registry::new();
    r.add_workflow(Flaky {
        failures_left: f.failures_left.clone(),
        calls: f.calls.clone(),
        version: f.version.clone(),
        change: f.change.clone(),
    });
    r
}

fn flaky(failures: u32) -> Flaky {
    Flaky {
        failures_left: Arc::new(AtomicU32::new(failures)),
        calls: Arc::new(AtomicU32::new(0)),
        version: Arc::new(AtomicU32::new(1)),
        change: Arc::new(AtomicU32::new(0)),
    }
}

#[tokio::test]
async fn retryable_errors_back_off_durably_then_succeed() {
    let w = World::new();
    let f = flaky(2);
    let engine = w.engine(flaky_registry(&f));
    let id = submit(&engine, "flaky", json!({})).await;
    let t0 = w.clock.now();
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Completed);
    assert_eq!(f.calls.load(Ordering::SeqCst), 3);
    let waits: Vec<i64> = engine
        .journal()
        .events(&id)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.event {
            Event::StepFailed { next_attempt_at, .. } => Some(next_attempt_at.unwrap() - e.at),
            _ => None,
        })
        .collect();
    assert_eq!(waits, [1000, 2000], "the next attempt time is journaled with the backoff");
    assert!(w.clock.now() - t0 >= 3000, "the engine waited for the backoff (on the test clock)");
}

#[tokio::test]
async fn exhausted_retries_pause_and_retry_resumes_from_the_failed_step() {
    let w = World::new();
    let f = flaky(5);
    let engine = w.engine(flaky_registry(&f));
    let id = submit(&engine, "flaky", json!({})).await;
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Paused);
    let err = out.error.unwrap();
    assert!(err.contains("step b") && err.contains("throttled") && err.contains("infraflow retry"), "{err}");
    assert_eq!(f.calls.load(Ordering::SeqCst), 3);

    engine.journal().request_resume(&id, w.clock.now()).await.unwrap();
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    // Two more failures were left, and the new round allows three attempts.
    assert_eq!(out.state, WorkflowState::Completed);
    assert_eq!(out.output, Some(json!(3)));
    let c = completions(engine.journal(), &id);
    assert_eq!(c.get("a"), Some(&1), "step a was not run again");
    let view = engine.journal().load(&id).unwrap().unwrap();
    assert_eq!(view.step("b").unwrap().attempts, 6);
}

#[tokio::test]
async fn changed_code_under_a_recorded_step_pauses_with_nondeterminism() {
    let w = World::new();
    let f = flaky(10);
    let engine = w.engine(flaky_registry(&f));
    let id = submit(&engine, "flaky", json!({})).await;
    assert_eq!(engine.drive(&id, Arc::new(Signals::default())).await.unwrap().state, WorkflowState::Paused);
    f.version.store(2, Ordering::SeqCst);
    engine.journal().request_resume(&id, w.clock.now()).await.unwrap();
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Paused);
    let err = out.error.unwrap();
    assert!(err.contains("nondeterminism at step a"), "{err}");
}

#[tokio::test]
async fn a_renamed_step_key_on_replay_pauses_with_nondeterminism() {
    let w = World::new();
    let f = flaky(10);
    let engine = w.engine(flaky_registry(&f));
    let id = submit(&engine, "flaky", json!({})).await;
    assert_eq!(engine.drive(&id, Arc::new(Signals::default())).await.unwrap().state, WorkflowState::Paused);
    f.change.store(1, Ordering::SeqCst);
    engine.journal().request_resume(&id, w.clock.now()).await.unwrap();
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Paused);
    let err = out.error.unwrap();
    assert!(err.contains("nondeterminism at step a2") && err.contains("the journal has step a at"), "{err}");
    assert!(!completions(engine.journal(), &id).contains_key("a2"), "the renamed step never ran");
}

#[tokio::test]
async fn a_binary_with_another_code_version_pauses_instead_of_replaying() {
    let w = World::new();
    let f = flaky(10);
    let engine = w.engine(flaky_registry(&f));
    let id = submit(&engine, "flaky", json!({})).await;
    assert_eq!(engine.drive(&id, Arc::new(Signals::default())).await.unwrap().state, WorkflowState::Paused);
    let calls = f.calls.load(Ordering::SeqCst);
    f.change.store(2, Ordering::SeqCst);
    engine.journal().request_resume(&id, w.clock.now()).await.unwrap();
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Paused);
    let err = out.error.unwrap();
    assert!(err.contains("version 1 of its code") && err.contains("version 2"), "{err}");
    assert_eq!(f.calls.load(Ordering::SeqCst), calls, "nothing ran");
}

/// The versioning rule: version 2 renames step a, keeping it for runs submitted to version 1.
/// A run paused under version 1 finishes under version 2 with its recorded step replayed, and a
/// run submitted to version 2 takes the new path.
#[tokio::test]
async fn a_run_of_the_previous_code_version_finishes_under_a_flow_that_keeps_its_path() {
    let w = World::new();
    let f = flaky(10);
    let engine = w.engine(flaky_registry(&f));
    let old = submit(&engine, "flaky", json!({})).await;
    assert_eq!(engine.drive(&old, Arc::new(Signals::default())).await.unwrap().state, WorkflowState::Paused);
    f.change.store(3, Ordering::SeqCst);
    f.failures_left.store(0, Ordering::SeqCst);
    engine.journal().request_resume(&old, w.clock.now()).await.unwrap();
    let out = engine.drive(&old, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Completed, "{:?}", out.error);
    let c = completions(engine.journal(), &old);
    assert_eq!((c.get("a"), c.get("a2")), (Some(&1), None), "the version-1 run kept its step a: {c:?}");
    let new = submit(&engine, "flaky", json!({})).await;
    assert_eq!(engine.drive(&new, Arc::new(Signals::default())).await.unwrap().state, WorkflowState::Completed);
    let c = completions(engine.journal(), &new);
    assert_eq!((c.get("a"), c.get("a2")), (None, Some(&1)), "a version-2 run takes the new path: {c:?}");
}

#[tokio::test]
async fn cancel_stops_at_the_next_step_boundary_and_compensates() {
    let w = World::new();
    let engine = Arc::new(w.engine(base_registry()));
    let id = submit(&engine, "canary", json!({"steps": 200, "stepMillis": 5, "effectsFile": w.effects()})).await;
    let task = {
        let (engine, id) = (engine.clone(), id.clone());
        tokio::spawn(async move { engine.drive(&id, Arc::new(Signals::default())).await.unwrap() })
    };
    while completions(engine.journal(), &id).len() < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    engine.journal().request_cancel(&id, w.clock.now()).await.unwrap();
    let out = task.await.unwrap();
    assert_eq!(out.state, WorkflowState::Compensated);
    let lines = w.effect_lines();
    let ticks = lines.iter().filter(|l| l.starts_with("tick")).count();
    let unticks = lines.iter().filter(|l| l.starts_with("untick")).count();
    assert!(ticks < 200, "it stopped early ({ticks} ticks)");
    assert!(unticks >= ticks, "every tick was undone ({ticks} ticks, {unticks} unticks)");
    let view = engine.journal().load(&id).unwrap().unwrap();
    assert!(view.steps.iter().filter(|s| s.key.starts_with("undo:")).all(|s| s.state == StepState::Completed));
}

#[tokio::test]
async fn a_live_lease_is_respected_and_a_second_engine_waits() {
    let w = World::new();
    // Real time here: the point is a lease kept alive by a heartbeat while another engine polls.
    let real = |r| Engine::new(Journal::open(&w.path()).unwrap(), r, Arc::new(SystemClock), config());
    let a = Arc::new(real(base_registry()));
    let b = real(base_registry());
    let id = submit(&a, "canary", json!({"steps": 20, "stepMillis": 2})).await;
    let waited = Arc::new(Mutex::new(Vec::new()));
    let b = b.with_observer({
        let waited = waited.clone();
        Arc::new(move |p: &Progress| {
            if let Progress::Waiting { reason, .. } = p {
                waited.lock().unwrap().push(reason.clone());
            }
        })
    });
    let ta = {
        let (a, id) = (a.clone(), id.clone());
        tokio::spawn(async move { a.drive(&id, Arc::new(Signals::default())).await.unwrap() })
    };
    while completions(a.journal(), &id).is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let ob = b.drive(&id, Arc::new(Signals::default())).await.unwrap();
    let oa = ta.await.unwrap();
    assert_eq!(oa.state, WorkflowState::Completed);
    assert_eq!(ob.state, WorkflowState::Completed);
    assert!(waited.lock().unwrap().iter().any(|r| r.contains("which holds it")), "{:?}", waited.lock().unwrap());
    assert!(completions(a.journal(), &id).values().all(|n| *n == 1));
}

#[tokio::test]
async fn a_workflow_behind_a_thousand_blocked_ones_on_another_cluster_still_runs() {
    let w = World::new();
    let engine = Arc::new(w.engine(base_registry()));
    // The head of cluster c pauses (/dev/full fails every attempt); a thousand more queue behind it.
    let head = submit(&engine, "canary", json!({"steps": 1, "cluster": "c", "effectsFile": "/dev/full"})).await;
    assert_eq!(engine.drive(&head, Arc::new(Signals::default())).await.unwrap().state, WorkflowState::Paused);
    let queued = (0..1000).map(|_| submit(&engine, "canary", json!({"steps": 1, "cluster": "c"})));
    futures::future::join_all(queued).await;
    let free = submit(&engine, "canary", json!({"steps": 2})).await;

    let shutdown = Arc::new(Signals::default());
    let daemon = tokio::spawn(engine.clone().daemon(4, shutdown.clone()));
    let start = std::time::Instant::now();
    while engine.journal().row(&free).unwrap().unwrap().state != WorkflowState::Completed {
        assert!(start.elapsed() < Duration::from_secs(30), "the free workflow was never claimed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.stop();
    daemon.await.unwrap().unwrap();
    let rows = engine.journal().list().unwrap();
    assert_eq!(rows.iter().filter(|r| r.state == WorkflowState::Pending).count(), 1000, "the queue waits its turn");
}
