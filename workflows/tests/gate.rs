//! What an execution passes before it acts, at a first execution where the environment check and
//! the hold run side by side: a failed check releases a hold taken beside it and journals no
//! wait; a wait said while the check runs is journaled after the check's records (which would
//! otherwise fold it away), and the hold after it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use common::{World, submit};
use infraflow_engine::{
    ActivityError, BoxFuture, Hold, HoldError, HoldRequest, InputError, Registry, Signals, StepError, TakeHold,
    Validated, WfCtx, WorkflowDef,
};
use infraflow_journal::{Event, WorkflowState};
use serde_json::{Value, json};

/// A workflow whose environment check takes 50 ms and passes or fails, and whose hold says it
/// waits for "the other holder" for 20 ms (or not), then is taken.
struct Gated {
    env_ok: bool,
    waits: bool,
    released: Arc<AtomicU32>,
    taken: Arc<AtomicU32>,
    environment_asked: Arc<Mutex<Vec<Option<Value>>>>,
}

struct Held(Arc<AtomicU32>);

impl Hold for Held {
    fn lapsed(&self) -> BoxFuture<String> {
        Box::pin(std::future::pending())
    }
    fn release(self: Box<Self>) -> BoxFuture<()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {})
    }
    fn what(&self) -> Option<String> {
        Some("the test's lease".into())
    }
}

impl WorkflowDef for Gated {
    fn name(&self) -> &'static str {
        "gated"
    }
    fn summary(&self) -> &'static str {
        "test"
    }
    fn validate(&self, _id: &str, input: &Value) -> Result<Validated, InputError> {
        Ok(Validated { input: input.clone(), cluster: String::new() })
    }
    fn environment(&self, _input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let ok = self.env_ok;
        Some(Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if ok { Ok(json!({"account": "1", "region": "r"})) } else { Err(ActivityError::terminal("no credentials")) }
        }))
    }
    fn hold(&self, request: HoldRequest, _input: &Value) -> Option<TakeHold> {
        self.environment_asked.lock().unwrap().push(request.environment.clone());
        let (waits, taken, released) = (self.waits, self.taken.clone(), self.released.clone());
        Some(Box::pin(async move {
            if waits {
                (request.waiting)("the other holder".into());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            taken.fetch_add(1, Ordering::SeqCst);
            Ok::<Box<dyn Hold>, HoldError>(Box::new(Held(released)))
        }))
    }
    fn run(&self, ctx: WfCtx, _input: Value) -> BoxFuture<Result<Value, StepError>> {
        Box::pin(async move { ctx.step("only", "noop", &json!({}), || async { Ok(json!(1)) }).await })
    }
}

fn gated(env_ok: bool, waits: bool) -> (Registry, Arc<AtomicU32>, Arc<AtomicU32>, Arc<Mutex<Vec<Option<Value>>>>) {
    let (released, taken, asked) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)), Arc::default());
    let mut r = Registry::new();
    r.add_workflow(Gated {
        env_ok,
        waits,
        released: released.clone(),
        taken: taken.clone(),
        environment_asked: Arc::clone(&asked),
    });
    (r, released, taken, asked)
}

fn kinds(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| serde_json::to_value(e).unwrap()["type"].as_str().unwrap_or("?").to_string()).collect()
}

#[tokio::test]
async fn a_first_executions_failed_environment_check_releases_the_hold_taken_beside_it_and_journals_no_wait() {
    let w = World::new();
    let (registry, released, taken, asked) = gated(false, true);
    let engine = w.engine(registry);
    let id = submit(&engine, "gated", json!({})).await;
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Paused, "{:?}", out.error);
    assert!(out.error.unwrap_or_default().contains("cannot tell which account and region"));
    assert_eq!(asked.lock().unwrap().as_slice(), &[None], "the hold was asked for beside the check");
    assert_eq!(taken.load(Ordering::SeqCst), 1, "taken beside the check");
    assert_eq!(released.load(Ordering::SeqCst), 1, "and released when the check failed");
    let events: Vec<Event> = engine.journal().events(&id).unwrap().into_iter().map(|e| e.event).collect();
    let kinds = kinds(&events);
    assert!(!kinds.iter().any(|k| k == "waiting" || k == "holding"), "{kinds:?}");
}

#[tokio::test]
async fn a_wait_said_beside_a_first_environment_check_is_journaled_after_the_checks_records() {
    let w = World::new();
    let (registry, released, _, asked) = gated(true, true);
    let engine = w.engine(registry);
    let id = submit(&engine, "gated", json!({})).await;
    let out = engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    assert_eq!(out.state, WorkflowState::Completed, "{:?}", out.error);
    assert_eq!(released.load(Ordering::SeqCst), 1);
    assert_eq!(asked.lock().unwrap().as_slice(), &[None]);
    let events: Vec<Event> = engine.journal().events(&id).unwrap().into_iter().map(|e| e.event).collect();
    let kinds = kinds(&events);
    let at = |k: &str| kinds.iter().position(|x| x == k).unwrap_or_else(|| panic!("no {k}: {kinds:?}"));
    let env_done = kinds.iter().position(|k| k == "step_completed").unwrap();
    assert!(env_done < at("waiting") && at("waiting") < at("holding"), "{kinds:?}");
}
