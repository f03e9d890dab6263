//! Saga safety in the engine: a pause keeps its phase, a recorded terminal failure is replayed and
//! never re-executed, the environment a workflow started in is checked before it goes on, a
//! stepped-back clock cannot hang a step, and cancel of a queued workflow does not wait its turn.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{World, completions, drive_and_crash_after, drive_and_crash_when, submit};
use infraflow_engine::{
    ActivityError, BoxFuture, InputError, Progress, Registry, Signals, StepError, StepOptions, Validated, WfCtx,
    WorkflowDef, join_branches,
};
use infraflow_journal::Undo;
use infraflow_journal::{RequestOutcome, WorkflowState};
use infraflow_workflows::base_registry;
use serde_json::{Value, json};

/// Counters a test reads and knobs it turns, shared with the workflow definition.
#[derive(Clone, Default)]
struct Knobs {
    undo_calls: Arc<AtomicU32>,
    b_calls: Arc<AtomicU32>,
    slow_calls: Arc<AtomicU32>,
    /// The environment the definition reports; None for a workflow without one.
    env: Arc<Mutex<Option<Value>>>,
}

/// Steps a1 and a2 (each with undo "u"), then b, which fails for good on its first call and
/// succeeds on any later one. With `slow_branch`, a concurrent branch runs a step that takes an
/// hour on its first call (so the failure is journaled while a sibling is still in flight).
struct Saga {
    k: Knobs,
    slow_branch: bool,
}

impl WorkflowDef for Saga {
    fn name(&self) -> &'static str {
        "saga"
    }
    fn summary(&self) -> &'static str {
        "test"
    }
    fn validate(&self, _id: &str, input: &Value) -> Result<Validated, InputError> {
        Ok(Validated { input: input.clone(), cluster: String::new() })
    }
    fn environment(&self, _input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let env = self.k.env.lock().unwrap().clone()?;
        Some(Box::pin(async move { Ok(env) }))
    }
    fn run(&self, ctx: WfCtx, _input: Value) -> BoxFuture<Result<Value, StepError>> {
        let (k, slow_branch) = (self.k.clone(), self.slow_branch);
        Box::pin(async move {
            let undo = |key: &str| StepOptions {
                retry: None,
                undo: Some(Undo { activity: "u".into(), input: json!(key) }),
                settle: None,
            };
            for key in ["a1", "a2"] {
                ctx.step_with(key, "make", &json!(key), undo(key), || async { Ok(1u32) }).await?;
            }
            let main = async {
                ctx.step("b", "fails-once", &json!({}), || {
                    let first = k.b_calls.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        if first {
                            // Long enough for the slow sibling to be in flight when this fails.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            return Err(ActivityError::terminal("quota exceeded"));
                        }
                        Ok(2u32)
                    }
                })
                .await
            };
            let slow = async {
                if !slow_branch {
                    return Ok(0u32);
                }
                ctx.step("slow", "slow", &json!({}), || {
                    let first = k.slow_calls.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        if first {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        Ok(0u32)
                    }
                })
                .await
            };
            use futures::FutureExt;
            join_branches([main.boxed(), slow.boxed()]).await?;
            Ok(json!("done"))
        })
    }
}

fn registry(k: &Knobs, slow_branch: bool) -> Registry {
    let mut r = base_registry();
    r.add_workflow(Saga { k: k.clone(), slow_branch });
    let calls = k.undo_calls.clone();
    r.add_undo("u", move |_input: Value| {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            assert_ne!(n, 2, "the second undo call panics (a bug in an undo handler)");
            Ok(Value::Null)
        }
    });
    r
}

#[tokio::test]
async fn an_undo_that_panics_pauses_and_retry_resumes_compensating_not_forward() {
    let w = World::new();
    let k = Knobs::default();
    let engine = w.engine(registry(&k, false));
    let id = submit(&engine, "saga", json!({})).await;
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Paused, "{:?}", out.error);
    assert!(out.error.unwrap().contains("panicked"));

    assert!(matches!(engine.journal().request_resume(&id, w.clock.now()).await.unwrap(), RequestOutcome::Done(_)));
    assert_eq!(engine.journal().row(&id).unwrap().unwrap().state, WorkflowState::Compensating);
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Compensated, "{:?}", out.error);
    assert_eq!(k.b_calls.load(Ordering::SeqCst), 1, "the failed step never ran again");
    let c = completions(engine.journal(), &id);
    assert_eq!(c.get("undo:a1"), Some(&1), "{c:?}");
    assert_eq!(c.get("undo:a2"), Some(&1), "{c:?}");
    assert!(!c.contains_key("b"), "{c:?}");
}

#[tokio::test]
async fn a_recorded_terminal_failure_is_replayed_after_a_crash_never_run_again() {
    let w = World::new();
    let k = Knobs::default();
    let id = {
        let engine = w.engine(registry(&k, true));
        let id = submit(&engine, "saga", json!({})).await;
        // The crash falls after b's failure is journaled, while the slow sibling still runs.
        let crashed = drive_and_crash_when(engine, &id, |p| matches!(p, Progress::StepFailed { .. })).await;
        assert!(crashed);
        id
    };
    let engine = w.engine(registry(&k, true));
    assert_eq!(engine.journal().row(&id).unwrap().unwrap().state, WorkflowState::Running);
    // The undo handler panics on its second call: let the first run through both undos.
    k.undo_calls.store(10, Ordering::SeqCst);
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Compensated, "{:?}", out.error);
    assert_eq!(k.b_calls.load(Ordering::SeqCst), 1, "b's recorded failure was replayed, not re-executed");
    assert!(out.error.unwrap().contains("quota exceeded"));
}

#[tokio::test]
async fn a_resume_in_another_environment_pauses_naming_both_and_runs_nothing() {
    let w = World::new();
    let k = Knobs::default();
    *k.env.lock().unwrap() = Some(json!({"account": "111111111111", "region": "us-east-1"}));
    let id = {
        let engine = w.engine(registry(&k, false));
        let id = submit(&engine, "saga", json!({})).await;
        // Completions: the environment, a1; the crash falls before a2.
        assert!(drive_and_crash_after(engine, &id, 2).await);
        id
    };
    *k.env.lock().unwrap() = Some(json!({"account": "222222222222", "region": "us-east-1"}));
    let engine = w.engine(registry(&k, false));
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Paused);
    let err = out.error.unwrap();
    assert!(err.contains("account 111111111111") && err.contains("account 222222222222"), "{err}");
    let c = completions(engine.journal(), &id);
    assert!(!c.contains_key("a2") && !c.contains_key("b"), "nothing ran in the other account: {c:?}");

    // Back in the right account, `retry` carries on from where it stopped.
    *k.env.lock().unwrap() = Some(json!({"account": "111111111111", "region": "us-east-1"}));
    engine.journal().request_resume(&id, w.clock.now()).await.unwrap();
    k.undo_calls.store(10, Ordering::SeqCst);
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Compensated, "b fails once, so it compensates: {:?}", out.error);
    assert_eq!(completions(engine.journal(), &id).get("environment"), Some(&1), "journaled once");
}

#[tokio::test]
async fn a_backoff_from_a_clock_that_stepped_back_is_capped_by_the_policy() {
    let w = World::new();
    let engine = w.engine(base_registry());
    let owner = engine.owner_id().to_string();
    // /dev/full: the tick's write fails retryably; crash once that failure is journaled.
    let id = submit(&engine, "canary", json!({"steps": 1, "effectsFile": "/dev/full"})).await;
    assert!(drive_and_crash_when(engine, &id, |p| matches!(p, Progress::StepRetrying { .. })).await);
    // The clock steps back a day: the journaled next attempt is now a day away.
    w.clock.advance(-86_400_000);
    let engine = w.engine(base_registry());
    engine.journal().release(&owner, vec![id.clone()]).await.unwrap();
    let before = w.clock.now();
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Paused, "/dev/full keeps failing: {:?}", out.error);
    let waited = w.clock.now() - before;
    assert!(waited < 60_000, "waited {waited} ms of test time, not a day");
}

#[tokio::test]
async fn cancel_of_a_workflow_queued_behind_another_on_its_cluster_ends_it_at_once() {
    let w = World::new();
    let engine = w.engine(base_registry());
    let first = submit(&engine, "canary", json!({"steps": 1, "cluster": "c", "effectsFile": "/dev/full"})).await;
    let out = engine.drive(&first, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Paused, "the first keeps the cluster");
    let queued = submit(&engine, "canary", json!({"steps": 1, "cluster": "c"})).await;
    let waiting = engine.journal().waiting_for(&queued, w.clock.now()).unwrap();
    assert_eq!(waiting.map(|(id, _, _)| id), Some(first.clone()), "status can say what it waits for");

    engine.journal().request_cancel(&queued, w.clock.now()).await.unwrap();
    let out = engine.drive(&queued, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Compensated, "never started, nothing to undo, no waiting");
    assert_eq!(engine.journal().row(&first).unwrap().unwrap().state, WorkflowState::Paused);
}

/// A compensation resumed before anything later of its cluster ran goes first: the workflow
/// queued meanwhile must not adopt what the compensation is about to delete.
#[tokio::test]
async fn retry_of_a_failed_compensation_goes_ahead_of_a_workflow_queued_since() {
    let w = World::new();
    let engine = w.engine(base_registry());
    let missing = w.dir.path().join("missing/e.log").display().to_string();
    let older =
        submit(&engine, "canary", json!({"steps": 2, "failAt": 2, "cluster": "c", "effectsFile": missing})).await;
    let out = engine.drive(&older, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::CompensationFailed, "{:?}", out.error);
    let newer = submit(&engine, "canary", json!({"steps": 3, "cluster": "c"})).await;
    std::fs::create_dir(w.dir.path().join("missing")).unwrap();
    engine.journal().request_resume(&older, w.clock.now()).await.unwrap();

    let waiting = engine.journal().waiting_for(&newer, w.clock.now()).unwrap();
    assert_eq!(waiting.map(|(id, _, _)| id), Some(older.clone()), "the newer one waits for the compensation");
    let out = engine.drive(&older, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Compensated, "{:?}", out.error);
    let out = engine.drive(&newer, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Completed);
}

/// Step a registers the undo `u2(<knob>)`; the old code's a (undo X) never finishes, the new
/// code's does. Then b fails for good.
struct Upgraded {
    undo_arg: Arc<Mutex<String>>,
}

impl WorkflowDef for Upgraded {
    fn name(&self) -> &'static str {
        "upgraded"
    }
    fn summary(&self) -> &'static str {
        "test"
    }
    fn validate(&self, _id: &str, input: &Value) -> Result<Validated, InputError> {
        Ok(Validated { input: input.clone(), cluster: String::new() })
    }
    fn run(&self, ctx: WfCtx, _input: Value) -> BoxFuture<Result<Value, StepError>> {
        let arg = self.undo_arg.lock().unwrap().clone();
        let undo = Undo { activity: "u2".into(), input: json!(arg) };
        Box::pin(async move {
            let options = StepOptions { retry: None, undo: Some(undo), settle: None };
            let old_code = arg == "X";
            ctx.step_with("a", "make", &json!({}), options, || async move {
                if old_code {
                    std::future::pending::<()>().await;
                }
                Ok(1u32)
            })
            .await?;
            ctx.step("b", "fails", &json!({}), || async { Err::<u32, _>(ActivityError::terminal("no")) }).await?;
            Ok(Value::Null)
        })
    }
}

#[tokio::test]
async fn the_undo_of_every_attempt_runs_even_when_new_code_registers_another() {
    let w = World::new();
    let undone = Arc::new(Mutex::new(Vec::<String>::new()));
    let undo_arg = Arc::new(Mutex::new("X".to_string()));
    let registry = || {
        let mut r = Registry::new();
        r.add_workflow(Upgraded { undo_arg: undo_arg.clone() });
        let undone = undone.clone();
        r.add_undo("u2", move |input: Value| {
            undone.lock().unwrap().push(input.as_str().unwrap_or_default().to_string());
            async { Ok(Value::Null) }
        });
        r
    };
    let engine = w.engine(registry());
    let id = submit(&engine, "upgraded", json!({})).await;
    // The crash falls while a's first attempt runs, after its start (with undo X) is journaled.
    assert!(drive_and_crash_when(engine, &id, |p| matches!(p, Progress::StepStarted { .. })).await);
    *undo_arg.lock().unwrap() = "Y".to_string();
    let engine = w.engine(registry());
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Compensated, "{:?}", out.error);
    assert_eq!(*undone.lock().unwrap(), ["X", "Y"], "both attempts' undos ran, the first one's first");
}
