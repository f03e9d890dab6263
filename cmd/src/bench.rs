//! `infraflow bench`: durable no-op steps per second on this disk (SQLite) or server
//! (PostgreSQL), against the backend's own raw commit ceiling measured in the same run, so the
//! figures travel between machines as ratios.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use infraflow_engine::{Engine, EngineConfig, Signals, Submission, SystemClock};
use infraflow_journal::{Journal, Location, PgTarget, WorkflowState};
use infraflow_workflows::base_registry;
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

impl Scratch {
    fn clear(&self) {
        for name in ["raw", "seq", "par"] {
            for suffix in ["", "-wal", "-shm"] {
                let mut p = self.file(name).into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.clear();
    }
}

async fn steps_per_second(location: &Location, workflows: u32, steps: u32) -> Result<f64, Failure> {
    let journal = Journal::open_at(location)?;
    let engine = Arc::new(Engine::new(journal, base_registry(), Arc::new(SystemClock), EngineConfig::default()));
    let mut ids = Vec::new();
    for _ in 0..workflows {
        let s = Submission {
            workflow: "canary".into(),
            input: json!({ "steps": steps }),
            id: None,
            no_rollback: false,
            submitter: None,
            traceparent: None,
        };
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

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// One round: (c), (a), (b) on fresh scratch journals.
async fn round(scratch: &Scratch, steps: u32) -> Result<(f64, f64, f64), Failure> {
    let raw_path = scratch.file("raw");
    let c = tokio::task::spawn_blocking(move || infraflow_journal::raw_insert_ceiling(&raw_path, RAW_TRANSACTIONS))
        .await
        .map_err(|e| Failure::other(e.to_string()))??;
    let a = steps_per_second(&Location::Sqlite(scratch.file("seq")), 1, steps).await?;
    let b = steps_per_second(&Location::Sqlite(scratch.file("par")), CONCURRENT_WORKFLOWS, CONCURRENT_STEPS).await?;
    scratch.clear();
    Ok((c, a, b))
}

pub async fn bench(dir: &Path, steps: u32, rounds: u32, json_out: bool) -> CmdResult {
    if !dir.is_dir() {
        return Err(Failure::usage(format!("bench: {} is not a directory", dir.display())));
    }
    if rounds == 0 {
        return Err(Failure::usage("bench: --rounds must be at least 1"));
    }
    let scratch = Scratch(dir.to_path_buf());
    if !json_out {
        eprintln!("infraflow bench: {rounds} rounds, scratch journals in {} (removed afterwards)", dir.display());
    }
    let (mut cs, mut as_, mut bs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let (c, a, b) = round(&scratch, steps).await?;
        if !json_out {
            eprintln!("  round {}: c {c:.0} tx/s, a {a:.0} steps/s, b {b:.0} steps/s", i + 1);
        }
        cs.push(c);
        as_.push(a);
        bs.push(b);
    }
    // Medians: this is a shared disk and a 50 ms workload; one stall must not decide.
    let (c, a, b) = (median(cs.clone()), median(as_.clone()), median(bs.clone()));
    if json_out {
        let v = json!({
            "rawInsertTxPerSec": c,
            "sequentialStepsPerSec": a,
            "concurrentStepsPerSec": b,
            "sequentialOverRaw": a / c,
            "concurrentOverRaw": b / c,
            "rounds": { "raw": cs, "sequential": as_, "concurrent": bs },
            "sequentialSteps": steps,
            "concurrentWorkflows": CONCURRENT_WORKFLOWS,
            "concurrentStepsEach": CONCURRENT_STEPS,
        });
        println!("{}", serde_json::to_string_pretty(&with_trace_spans(v)).unwrap_or_default());
    } else {
        print_trace_spans();
        println!("medians of {rounds} rounds:");
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

/// With tracing on, the spans sent and dropped so far: a figure counts only if its spans were
/// sent (those still queued are sent as the command ends).
fn trace_spans() -> Option<(u64, u64)> {
    infraflow_trace::enabled().map(|_| (crate::otlp::exported(), infraflow_trace::dropped()))
}

fn with_trace_spans(mut v: serde_json::Value) -> serde_json::Value {
    if let Some((sent, dropped)) = trace_spans() {
        v["traceSpans"] = json!({ "sent": sent, "dropped": dropped });
    }
    v
}

fn print_trace_spans() {
    if let Some((sent, dropped)) = trace_spans() {
        println!("tracing on: {sent} spans sent, {dropped} dropped; the queued rest is sent as the command ends");
    }
}

/// Clients of pgbench's usual many-client figure.
const PG_CLIENTS: u32 = 16;

/// The same (a) and (b) on a PostgreSQL journal, against the server's single-row INSERT ceiling
/// from 1 and from 16 clients. The bench's workflows stay in the database (they are finished
/// canaries; `prune` removes them).
pub async fn bench_postgres(target: &PgTarget, steps: u32, rounds: u32, json_out: bool) -> CmdResult {
    if rounds == 0 {
        return Err(Failure::usage("bench: --rounds must be at least 1"));
    }
    if !json_out {
        eprintln!("infraflow bench: {rounds} rounds against {target}");
    }
    let location = Location::Postgres(target.clone());
    let (mut c1s, mut c16s, mut as_, mut bs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let c1 = infraflow_journal::postgres_commit_ceiling(target, 1, RAW_TRANSACTIONS).await?;
        let c16 = infraflow_journal::postgres_commit_ceiling(target, PG_CLIENTS, RAW_TRANSACTIONS / 4).await?;
        let a = steps_per_second(&location, 1, steps).await?;
        let b = steps_per_second(&location, CONCURRENT_WORKFLOWS, CONCURRENT_STEPS).await?;
        if !json_out {
            eprintln!("  round {}: c1 {c1:.0} tx/s, c16 {c16:.0} tx/s, a {a:.0} steps/s, b {b:.0} steps/s", i + 1);
        }
        c1s.push(c1);
        c16s.push(c16);
        as_.push(a);
        bs.push(b);
    }
    let (c1, c16, a, b) = (median(c1s.clone()), median(c16s.clone()), median(as_.clone()), median(bs.clone()));
    if json_out {
        let v = json!({
            "rawInsertTxPerSec1Client": c1,
            "rawInsertTxPerSec16Clients": c16,
            "sequentialStepsPerSec": a,
            "concurrentStepsPerSec": b,
            "sequentialOverRaw1Client": a / c1,
            "rounds": { "raw1": c1s, "raw16": c16s, "sequential": as_, "concurrent": bs },
            "sequentialSteps": steps,
            "concurrentWorkflows": CONCURRENT_WORKFLOWS,
            "concurrentStepsEach": CONCURRENT_STEPS,
        });
        println!("{}", serde_json::to_string_pretty(&with_trace_spans(v)).unwrap_or_default());
    } else {
        print_trace_spans();
        println!("medians of {rounds} rounds, PostgreSQL at {target}:");
        println!("(c1) raw ceiling: single-row INSERT transactions, 1 client:   {c1:>9.0} tx/s");
        println!("(c16) raw ceiling: single-row INSERT transactions, {PG_CLIENTS} clients: {c16:>9.0} tx/s");
        println!(
            "(a) 1 workflow x {steps} sequential durable steps:              {a:>9.0} steps/s   a/c1 = {:.2}",
            a / c1
        );
        println!(
            "(b) {CONCURRENT_WORKFLOWS} workflows x {CONCURRENT_STEPS} steps, all at once:                     {b:>9.0} steps/s"
        );
    }
    Ok(OK)
}
