//! Helpers shared by the engine test files: a journal in a temp dir with a test clock, and a
//! drive that "crashes" (aborts its task) after a number of completed steps.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use infraflow_engine::{Engine, EngineConfig, Progress, Registry, RetryPolicy, Signals, Submission, TestClock};
use infraflow_journal::{Event, Journal};
use serde_json::Value;

pub fn config() -> EngineConfig {
    EngineConfig {
        lease_ttl: Duration::from_secs(15),
        heartbeat: Duration::from_millis(10),
        poll: Duration::from_millis(200),
        shutdown_grace: Duration::from_secs(5),
        default_retry: RetryPolicy {
            initial: Duration::from_secs(1),
            coefficient: 2.0,
            max_interval: Duration::from_secs(10),
            max_attempts: 3,
            jitter: 0.0,
        },
        undo_retry: RetryPolicy { max_attempts: 3, jitter: 0.0, ..RetryPolicy::default() },
        undo_settle: Duration::from_secs(5),
    }
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub clock: Arc<TestClock>,
}

impl World {
    pub fn new() -> World {
        World { dir: tempfile::tempdir().unwrap(), clock: Arc::new(TestClock::new(1_800_000_000_000)) }
    }

    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("journal.sqlite3")
    }

    pub fn engine(&self, registry: Registry) -> Engine {
        Engine::new(Journal::open(&self.path()).unwrap(), registry, self.clock.clone(), config())
    }

    pub fn effects(&self) -> String {
        self.dir.path().join("effects.log").display().to_string()
    }

    pub fn effect_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.effects())
            .unwrap_or_default()
            .lines()
            .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
            .collect()
    }
}

pub async fn submit(engine: &Engine, workflow: &str, input: Value) -> String {
    engine
        .submit(Submission {
            workflow: workflow.into(),
            input,
            id: None,
            no_rollback: false,
            submitter: None,
            traceparent: None,
        })
        .await
        .unwrap()
        .id
}

pub fn completions(journal: &Journal, id: &str) -> std::collections::BTreeMap<String, u32> {
    let mut m = std::collections::BTreeMap::new();
    for e in journal.events(id).unwrap() {
        if let Event::StepCompleted { step, .. } = e.event {
            *m.entry(step).or_insert(0) += 1;
        }
    }
    m
}

/// Runs `drive` and aborts it (a crash, as far as the journal can tell) once `after` steps have
/// completed. Returns whether the abort happened.
pub async fn drive_and_crash_after(engine: Engine, id: &str, after: u32) -> bool {
    if after == 0 {
        return false;
    }
    let done = Arc::new(AtomicU32::new(0));
    drive_and_crash_when(engine, id, move |p| {
        matches!(p, Progress::StepCompleted { .. }) && done.fetch_add(1, Ordering::SeqCst) + 1 == after
    })
    .await
}

/// Runs `drive` and aborts it at the first progress report for which `when` holds.
pub async fn drive_and_crash_when(
    engine: Engine,
    id: &str,
    when: impl Fn(&Progress) -> bool + Send + Sync + 'static,
) -> bool {
    let gate: Arc<OnceLock<tokio::task::AbortHandle>> = Arc::new(OnceLock::new());
    let observer = {
        let gate = gate.clone();
        Arc::new(move |p: &Progress| {
            if when(p)
                && let Some(h) = gate.get()
            {
                h.abort();
            }
        })
    };
    let engine = engine.with_observer(observer);
    let id = id.to_string();
    let task = tokio::spawn(async move {
        engine.drive(&id, Arc::new(Signals::default())).await.unwrap();
    });
    let _ = gate.set(task.abort_handle());
    task.await.is_err()
}
