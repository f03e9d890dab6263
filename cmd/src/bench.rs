//! `infraflow bench`: durable no-op steps per second on this disk, against SQLite's own ceiling
//! measured in the same run and mode, so the figures travel between machines as ratios.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use infraflow_journal::{Journal, WorkflowState};
use infraflow_workflows::{Engine, EngineConfig, Signals, Submission, SystemClock, base_registry};
use serde_json::json;

use crate::failure::{CmdResult, Failure, OK};

const RAW_TRANSACTIONS: u32 = 2000;
const CONCURRENT_WORKFLOWS: u32 = 100;
const CONCURRENT_STEPS: u32 = 20;

struct Scratch(PathBuf);

impl Scratch {
    fn file(&self, name: &str) -> PathBuf {
        self.0.join(format!("infraflow-bench-{}-{name}.sqlite3", std::process::id()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for name in ["raw", "seq", "par"] {
            for suffix in ["", "-wal", "-shm"] {
                let mut p = self.file(name).into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

async fn steps_per_second(path: &Path, workflows: u32, steps: u32) -> Result<f64, Failure> {
    let journal = Journal::open(path)?;
    let engine = Arc::new(Engine::new(journal, base_registry(), Arc::new(SystemClock), EngineConfig::default()));
    let mut ids = Vec::new();
    for _ in 0..workflows {
        let s =
            Submission { workflow: "canary".into(), input: json!({ "steps": steps }), id: None, no_rollback: false };
        ids.push(engine.submit(s).await?.id);
    }
    let start = Instant::now();
    let runs = ids.into_iter().map(|id| {
        let engine = engine.clone();
        tokio::spawn(async move { engine.drive(&id, Arc::new(Signals::default())).await })
    });
    for r in futures_join(runs).await {
        let out = r.map_err(|e| Failure::other(format!("bench task failed: {e}")))??;
        if out.state != WorkflowState::Completed {
            return Err(Failure::other(format!("bench workflow {} ended {}", out.id, out.state)));
        }
    }
    Ok(f64::from(workflows * steps) / start.elapsed().as_secs_f64())
}

async fn futures_join<T>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::new();
    for h in handles.collect::<Vec<_>>() {
        out.push(h.await);
    }
    out
}

pub async fn bench(dir: &Path, steps: u32, json_out: bool) -> CmdResult {
    if !dir.is_dir() {
        return Err(Failure::usage(format!("bench: {} is not a directory", dir.display())));
    }
    let scratch = Scratch(dir.to_path_buf());
    if !json_out {
        eprintln!("infraflow bench: scratch journals in {} (removed afterwards)", dir.display());
    }
    let raw_path = scratch.file("raw");
    let c = tokio::task::spawn_blocking(move || infraflow_journal::raw_insert_ceiling(&raw_path, RAW_TRANSACTIONS))
        .await
        .map_err(|e| Failure::other(e.to_string()))??;
    let a = steps_per_second(&scratch.file("seq"), 1, steps).await?;
    let b = steps_per_second(&scratch.file("par"), CONCURRENT_WORKFLOWS, CONCURRENT_STEPS).await?;
    if json_out {
        let v = json!({
            "rawInsertTxPerSec": c,
            "sequentialStepsPerSec": a,
            "concurrentStepsPerSec": b,
            "sequentialOverRaw": a / c,
            "concurrentOverRaw": b / c,
            "sequentialSteps": steps,
            "concurrentWorkflows": CONCURRENT_WORKFLOWS,
            "concurrentStepsEach": CONCURRENT_STEPS,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("(c) raw ceiling: single-row INSERT transactions, WAL + synchronous=FULL: {c:>9.0} tx/s");
        println!(
            "(a) 1 workflow x {steps} sequential durable steps:              {a:>9.0} steps/s   a/c = {:.2}",
            a / c
        );
        println!(
            "(b) {CONCURRENT_WORKFLOWS} workflows x {CONCURRENT_STEPS} steps, all at once:                     {b:>9.0} steps/s   b/c = {:.2}",
            b / c
        );
    }
    Ok(OK)
}
