//! A benchmark, not a test: what 10,000 waiting workflows cost a daemon in memory, and how fast a
//! daemon restarted after kill -9 has 1,000 in-flight workflows leased and running again. Canary
//! workflows (no AWS); run by `scripts/bench-daemon.sh`. Baseline of the same run: the RSS of an
//! idle daemon on an empty journal.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use infraflow_engine::{Engine, EngineConfig, Submission, SystemClock};
use infraflow_journal::{Journal, WorkflowState};
use infraflow_workflows::base_registry;
use serde_json::{Value, json};
use support::*;

/// Journals `inputs` as canary workflows, in-process (10,000 CLI processes would take minutes).
fn submit_canaries(s: &Scratch, inputs: impl Iterator<Item = Value>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let journal = Journal::open(&s.db()).unwrap();
        let engine = Engine::new(journal, base_registry(), Arc::new(SystemClock), EngineConfig::default());
        for input in inputs {
            let sub = Submission {
                workflow: "canary".into(),
                input,
                id: None,
                no_rollback: false,
                submitter: None,
                traceparent: None,
            };
            engine.submit(sub).await.unwrap();
        }
    });
}

/// (VmRSS, VmHWM) of a process, in MiB.
fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn rows(s: &Scratch) -> Vec<infraflow_journal::WorkflowRow> {
    Journal::open_read_only(&s.db()).unwrap().list().unwrap()
}

fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

#[test]
#[ignore = "a benchmark: scripts/bench-daemon.sh runs it"]
fn ten_thousand_waiting_workflows_and_a_restart_with_a_thousand_in_flight() {
    // Baseline: an idle daemon on an empty journal.
    let idle = Scratch::new();
    submit_canaries(&idle, std::iter::empty());
    let mut d = idle.spawn_daemon(&[], &[]);
    idle.wait_for_daemon_start(1);
    std::thread::sleep(Duration::from_secs(2));
    let (idle_rss, _) = memory_mib(d.id());
    terminate(&mut d, Duration::from_secs(30));

    // 10,000 canaries on 10 clusters: 10 run (a step of a minute), 9,990 wait their turn.
    let waiting = Scratch::new();
    let t0 = Instant::now();
    submit_canaries(
        &waiting,
        (0..10_000).map(|i| json!({"steps": 1, "stepMillis": 60_000, "cluster": format!("c{}", i % 10)})),
    );
    let submit_secs = t0.elapsed().as_secs_f64();
    let mut d = waiting.spawn_daemon(&["--workers", "16"], &[]);
    waiting.wait_for_daemon_start(1);
    wait_until(Duration::from_secs(60), "10 running", || {
        rows(&waiting).iter().filter(|r| r.state == WorkflowState::Running && r.lease_owner.is_some()).count() == 10
    });
    // Several claim passes over the queue, at steady state.
    std::thread::sleep(Duration::from_secs(5));
    let (rss, hwm) = memory_mib(d.id());
    terminate(&mut d, Duration::from_secs(30));

    // 1,000 canaries on their own clusters, all in flight; kill -9; a new daemon takes them over.
    let flight = Scratch::new();
    submit_canaries(&flight, (0..1_000).map(|_| json!({"steps": 2, "stepMillis": 60_000})));
    let mut d = flight.spawn_daemon(&["--workers", "1000"], &[]);
    flight.wait_for_daemon_start(1);
    let first = format!(":{}:", d.id());
    let all_leased_by = |marker: &str| {
        let rows = rows(&flight);
        rows.len() == 1_000
            && rows.iter().all(|r| {
                r.state == WorkflowState::Running && r.lease_owner.as_deref().is_some_and(|o| o.contains(marker))
            })
    };
    let started = wait_until(Duration::from_secs(120), "1,000 leased by the first daemon", || all_leased_by(&first));
    let (flight_rss, _) = memory_mib(d.id());
    kill9(&mut d);
    let t0 = Instant::now();
    let mut d = flight.spawn_daemon(&["--workers", "1000"], &[]);
    let second = format!(":{}:", d.id());
    wait_until(Duration::from_secs(120), "1,000 leased by the second daemon", || all_leased_by(&second));
    let restart = t0.elapsed();
    let (after_rss, _) = memory_mib(d.id());
    terminate(&mut d, Duration::from_secs(60));

    println!("| measure | value |");
    println!("|---|---|");
    println!("| idle daemon, empty journal: RSS (baseline) | {idle_rss:.1} MiB |");
    println!("| 10,000 workflows journaled (in-process submits) | {submit_secs:.1} s |");
    println!(
        "| daemon with 10,000 submitted (10 running, 9,990 queued behind their clusters): RSS / peak | {rss:.1} / {hwm:.1} MiB ({:.2}x idle) |",
        rss / idle_rss
    );
    println!(
        "| 1,000 in flight, first daemon: all leased after start | {:.2} s, RSS {flight_rss:.1} MiB |",
        started.as_secs_f64()
    );
    println!(
        "| kill -9, new daemon: all 1,000 leased by it and running again | {:.2} s (spawn included), RSS {after_rss:.1} MiB |",
        restart.as_secs_f64()
    );
}
