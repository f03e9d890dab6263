//! The journal against what shares it in production: another process holding SQLite's write
//! lock, a record this binary cannot read, and daemons in containers with one hostname.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// Runs a Python sqlite3 snippet on the journal (`db` is bound to its path): another process,
/// with SQLite's own locking, as a backup tool or a second program would be.
fn sqlite(s: &Scratch, code: &str) -> std::process::Child {
    Command::new("python3")
        .arg("-c")
        .arg(format!("import sqlite3, sys, time\ndb = sys.argv[1]\n{code}"))
        .arg(s.db())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs")
}

fn sqlite_out(s: &Scratch, code: &str) -> String {
    let out = sqlite(s, code).wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Completed steps of `id`; 0 while the workflow is not journaled yet.
fn completed(s: &Scratch, id: &str) -> usize {
    let out = s.cli(&["status", id, "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    st["steps"].as_array().map_or(0, |a| a.iter().filter(|s| s["state"] == "completed").count())
}

#[test]
fn a_run_waits_out_another_process_holding_the_write_lock_for_seven_seconds() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 200, "stepMillis": 10}));
    let mut run = Command::new(infraflow())
        .arg("--db")
        .arg(s.db())
        .args(["run", "canary", "--input", input.to_str().unwrap(), "--id", "locked"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while completed(&s, "locked") < 3 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut holder = sqlite(
        &s,
        "c = sqlite3.connect(db, isolation_level=None)\nc.execute('BEGIN IMMEDIATE')\nprint('held', flush=True)\ntime.sleep(7)\nc.execute('COMMIT')",
    );
    let started = Instant::now();
    let status = run.wait().unwrap();
    assert!(holder.wait().unwrap().success());
    assert!(started.elapsed() >= Duration::from_secs(6), "the lock was held while the run went on");
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    let st = s.status("locked");
    assert_eq!(st["state"], "completed");
    let steps = st["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 200);
    assert!(steps.iter().all(|s| s["completions"] == 1), "every step once");
}

/// `submit`s started together on a journal that does not exist yet all create it, each switching
/// the new file to WAL, which SQLite may answer "database is locked" at once, without its busy
/// handler (a `submit` beside a daemon just started failed so in CI, once). Each must journal its
/// workflow.
#[test]
fn processes_creating_one_new_journal_at_once_each_journal_their_workflow() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 1}));
    for round in 0..8 {
        let db = s.file(&format!("new-{round}.sqlite3"));
        let submits: Vec<_> = (0..6)
            .map(|i| {
                Command::new(infraflow())
                    .arg("--db")
                    .arg(&db)
                    .args(["submit", "canary", "--input", input.to_str().unwrap(), "--id", &format!("w{i}")])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (i, submit) in submits.into_iter().enumerate() {
            let out = submit.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}, submit {i}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

#[test]
fn an_undecodable_event_pauses_its_workflow_once_instead_of_looping() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 3}));
    assert!(s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "w"]).status.success());
    // An event kind from a newer infraflow, appended as that version would.
    sqlite_out(
        &s,
        "c = sqlite3.connect(db, isolation_level=None)\nc.execute('BEGIN IMMEDIATE')\n\
         c.execute(\"INSERT INTO events VALUES('w', (SELECT seq + 1 FROM workflows WHERE id = 'w'), 0, 'future', NULL, '{\\\"type\\\":\\\"future\\\"}')\")\n\
         c.execute(\"UPDATE workflows SET seq = seq + 1 WHERE id = 'w'\")\nc.execute('COMMIT')",
    );
    let mut d = s.spawn_daemon(&[], &[]);
    s.wait_for_daemon_start(1);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    let row = sqlite_out(
        &s,
        "c = sqlite3.connect(db)\nprint(c.execute(\"SELECT count(*) FROM events WHERE workflow_id = 'w' AND kind = 'lease_taken'\").fetchone()[0])\n\
         print(c.execute(\"SELECT state || '|' || error FROM workflows WHERE id = 'w'\").fetchone()[0])",
    );
    let (takes, state) = row.split_once('\n').unwrap();
    assert!(takes.parse::<u32>().unwrap() <= 2, "{takes} lease_taken events in 5 s");
    assert!(state.starts_with("paused|"), "{state}");
    assert!(state.contains("event 2 of workflow w does not decode"), "the reason names the record: {state}");
}

#[test]
fn two_daemons_in_separate_pid_namespaces_with_one_hostname_never_steal_each_others_leases() {
    let probe = Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: unshare --pid needs root or user namespaces, which this machine does not allow");
        return;
    }
    let s = Scratch::new();
    let effects = s.file("effects.log");
    let input = s.write_json("in.json", &json!({"steps": 10, "stepMillis": 150, "effectsFile": effects}));
    let ids: Vec<String> = (0..4).map(|i| format!("c{i}")).collect();
    for id in &ids {
        assert!(s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", id]).status.success());
    }
    // Daemon a is pid 2 of its namespace and daemon b pid 3 of its own: each pid, looked up in
    // the other's /proc, is missing (or another process), as it would be across containers.
    let daemons: Vec<_> = ["", "true & "]
        .iter()
        .map(|pad| {
            let cmd = format!("{pad}{} --db {} daemon --workers 2 & wait", infraflow().display(), s.db().display());
            Command::new("unshare")
                .args(["--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", &cmd])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for id in &ids {
        s.wait_for_state(id, &["completed", "paused", "failed"], Duration::from_secs(60));
    }
    // --kill-child: the namespace (and its daemon) goes with unshare.
    for mut d in daemons {
        kill9(&mut d);
    }
    for id in &ids {
        let st = s.status(id);
        assert_eq!(st["state"], "completed", "{st}");
        let takes = s.history(id).iter().filter(|e| e["type"] == "lease_taken").count();
        assert_eq!(takes, 1, "{id} changed hands {takes} times");
    }
    let ticks = lines_of(&effects);
    assert_eq!(ticks.len(), 40, "each step's effect exactly once: {ticks:?}");
}

/// The thread id of a process's journal writer (`journal-writer`, as the journal names it).
fn writer_thread(pid: u32) -> Option<String> {
    std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten().find_map(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        (comm.trim() == "journal-writer").then(|| t.file_name().to_string_lossy().to_string())
    })
}

#[test]
fn a_daemon_whose_journal_writer_stalls_past_its_lease_drops_the_workflow_before_another_takes_it() {
    if !Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: strace (the fault injector of this test) is not installed");
        return;
    }
    let s = Scratch::new();
    let effects = s.file("effects.log");
    // Long steps: daemon a is inside s1 when its journal stalls.
    let input = s.write_json("in.json", &json!({"steps": 2, "stepMillis": 20000, "effectsFile": effects}));
    assert!(s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "fenced"]).status.success());
    let mut a = s.spawn_daemon(&[], &[]);
    let running = |s: &Scratch| {
        let out = s.cli(&["status", "fenced", "--json"]);
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        st["steps"].as_array().is_some_and(|a| a.iter().any(|x| x["key"] == "s1"))
    };
    while !running(&s) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Daemon a's journal writer now waits 30 s on every lock call (fcntl), before it holds any
    // lock: its renewals cannot commit, while its other threads run s1 on and daemon b is free
    // to take the lease once it expires.
    let tid = writer_thread(a.id()).expect("the daemon has a journal-writer thread");
    let mut stall = Command::new("timeout")
        .args(["35", "strace", "-p", &tid, "-e", "trace=fcntl", "-e", "inject=fcntl:delay_enter=30s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut b = s.spawn_daemon(&[], &[]);
    let done = s.wait_for_state("fenced", &["completed", "paused", "failed"], Duration::from_secs(120));
    let _ = stall.wait();
    for d in [&mut a, &mut b] {
        terminate(d, Duration::from_secs(30));
    }
    assert_eq!(done["state"], "completed", "{done}");
    let takes = s.history("fenced").iter().filter(|e| e["type"] == "lease_taken").count();
    assert_eq!(takes, 2, "a, then b after a's lease expired");
    // Without self-fencing, a would finish s1 (and write its effect) after b had taken it over.
    let ticks = lines_of(&effects);
    for i in 1..=2 {
        let n = ticks.iter().filter(|l| l.starts_with(&format!("tick fenced/s{i} "))).count();
        assert_eq!(n, 1, "s{i} ran {n} times: {ticks:?}");
    }
    assert!(
        s.daemon_log().contains("dropping the workflow before its lease can expire"),
        "daemon a fenced itself: {}",
        s.daemon_log()
    );
}

/// Finding 5 of the safety review, scenario C: another process (a long `prune`, a backup) holds
/// the write lock past the writer's busy budget. The daemon's renewals fail, it fences itself,
/// and its release fails too, so the lease goes on naming it after it expires. A single daemon
/// must claim the workflow again once the lock is free, not leave it `running` until a restart.
/// The busy budget is 3 s here (`INFRAFLOW_SQLITE_BUSY_SECONDS`) instead of two minutes.
#[test]
fn a_daemon_whose_release_failed_under_a_held_write_lock_claims_its_workflow_again() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 60, "stepMillis": 200}));
    assert!(s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "stranded"]).status.success());
    let mut d = s.spawn_daemon(&[], &[("INFRAFLOW_SQLITE_BUSY_SECONDS", "3")]);
    while completed(&s, "stranded") < 3 {
        std::thread::sleep(Duration::from_millis(20));
    }
    // 22 s: past the self-fence (10 s after the last renewal) and the failed release behind it.
    let mut holder = sqlite(
        &s,
        "c = sqlite3.connect(db, isolation_level=None)\nc.execute('BEGIN IMMEDIATE')\nprint('held', flush=True)\ntime.sleep(22)\nc.execute('COMMIT')",
    );
    assert!(holder.wait().unwrap().success());
    let done = s.wait_for_state("stranded", &["completed", "paused", "failed"], Duration::from_secs(90));
    terminate(&mut d, Duration::from_secs(30));
    let log = s.daemon_log();
    assert_eq!(done["state"], "completed", "{done}\n{log}");
    assert!(log.contains("cannot release lease"), "the release failed under the lock: {log}");
    let takes: Vec<Value> = s.history("stranded").into_iter().filter(|e| e["type"] == "lease_taken").collect();
    assert_eq!(takes.len(), 2, "the same daemon took it twice: {takes:?}");
    assert_eq!(takes[0]["owner"], takes[1]["owner"]);
}
