//! The real daemon binary under SIGKILL and side by side with another daemon on one journal.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::*;

fn completions_per_step(status: &serde_json::Value) -> BTreeMap<String, u64> {
    status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["key"].as_str().unwrap().to_string(), s["completions"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_daemon_killed_repeatedly_mid_run_still_completes_every_step_once() {
    let s = Scratch::new();
    let effects = s.file("effects.log");
    let input = s.write_json("in.json", &json!({"steps": 80, "stepMillis": 40, "effectsFile": effects}));
    let out = s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "victim"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut rng = Rng::from_env_or_time();
    let taken = || s.history("victim").iter().filter(|e| e["type"] == "lease_taken").count();
    for round in 0..8 {
        let mut d = s.spawn_daemon(&[], &[]);
        // Killed a random moment after it took the workflow (a daemon slow to start on a loaded
        // machine would otherwise be killed before it claimed anything).
        assert!(wait_until(Duration::from_secs(30), || taken() > round), "daemon {round} never took the workflow");
        std::thread::sleep(Duration::from_millis(20 + rng.below(150)));
        kill9(&mut d);
    }
    let partial = s.status("victim");
    assert_ne!(partial["state"], "completed", "the kills should land before the end: {partial}");

    let mut d = s.spawn_daemon(&[], &[]);
    let done = s.wait_for_state("victim", &["completed", "paused", "failed", "compensated"], Duration::from_secs(60));
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    assert_eq!(done["state"], "completed", "{done}");

    let per_step = completions_per_step(&done);
    assert_eq!(per_step.len(), 80, "{per_step:?}");
    assert!(per_step.values().all(|n| *n == 1), "every step's completion is journaled once: {per_step:?}");
    // Each daemon start after a kill took the lease over at once from its dead predecessor.
    let takeovers = s.history("victim").iter().filter(|e| e["type"] == "lease_taken").count();
    assert!(takeovers >= 9, "{takeovers} lease takeovers");
    // Every step ran at least once; a step re-runs only if a kill hit it mid-flight.
    let ticks = lines_of(&effects);
    for i in 1..=80 {
        assert!(ticks.iter().any(|l| l.starts_with(&format!("tick victim/s{i} "))), "s{i} never ran");
    }
    assert!(ticks.len() <= 80 + 9, "at most one re-run per kill: {} ticks", ticks.len());
}

#[test]
fn two_daemons_on_one_journal_never_run_the_same_step_twice() {
    let s = Scratch::new();
    let effects = s.file("effects.log");
    let input = s.write_json("in.json", &json!({"steps": 8, "stepMillis": 15, "effectsFile": effects}));
    let ids: Vec<String> = (0..12)
        .map(|i| {
            let id = format!("w{i}");
            let out = s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", &id]);
            assert!(out.status.success(), "{}", stderr(&out));
            id
        })
        .collect();
    let mut a = s.spawn_daemon(&["--workers", "3"], &[]);
    let mut b = s.spawn_daemon(&["--workers", "3"], &[]);
    for id in &ids {
        let st = s.wait_for_state(id, &["completed", "paused", "failed"], Duration::from_secs(60));
        assert_eq!(st["state"], "completed", "{st}");
    }
    assert_eq!(terminate(&mut a, Duration::from_secs(30)).code(), Some(0));
    assert_eq!(terminate(&mut b, Duration::from_secs(30)).code(), Some(0));

    let lines = lines_of(&effects);
    assert_eq!(lines.len(), 12 * 8, "each step ran exactly once in all: {lines:#?}");
    let mut seen = std::collections::HashSet::new();
    for l in &lines {
        let key = l.rsplit_once(' ').unwrap().0;
        assert!(seen.insert(key.to_string()), "{key} ran twice");
    }
    for id in &ids {
        let takes = s.history(id).iter().filter(|e| e["type"] == "lease_taken").count();
        assert_eq!(takes, 1, "{id} was claimed once");
    }
}

#[test]
fn sigterm_stops_the_daemon_gracefully_and_releases_its_leases() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 200, "stepMillis": 50}));
    let out = s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "long"]);
    assert!(out.status.success());
    let mut d = s.spawn_daemon(&[], &[]);
    let start = std::time::Instant::now();
    while completions_per_step(&s.status("long")).len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "no progress: {}", s.daemon_log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0), "{}", s.daemon_log());
    let st = s.status("long");
    assert_eq!(st["owner"], serde_json::Value::Null, "lease released: {st}");
    assert_eq!(st["state"], "running");
    let done_before = completions_per_step(&st).len();
    assert!(done_before < 200);
    // Another process continues at once, with no lease to wait out.
    let out = s.cli(&["retry", "long"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let st = s.status("long");
    assert_eq!(st["state"], "completed");
    assert!(completions_per_step(&st).values().all(|n| *n == 1));
}

#[test]
fn cancel_reaches_a_workflow_running_in_a_daemon_and_compensates_it() {
    let s = Scratch::new();
    let effects = s.file("effects.log");
    let input = s.write_json("in.json", &json!({"steps": 300, "stepMillis": 20, "effectsFile": effects}));
    assert!(s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "c"]).status.success());
    let mut d = s.spawn_daemon(&[], &[]);
    while completions_per_step(&s.status("c")).len() < 3 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = s.cli(&["cancel", "c", "--detach"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let st = s.wait_for_state("c", &["compensated", "compensation_failed"], Duration::from_secs(60));
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    assert_eq!(st["state"], "compensated");
    let lines = lines_of(&effects);
    let ticked: std::collections::BTreeSet<_> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("tick c/"))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    let unticked: std::collections::BTreeSet<_> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("untick c/"))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    assert!(ticked.len() < 300);
    assert!(ticked.is_subset(&unticked), "every tick undone: {ticked:?} vs {unticked:?}");
}

#[test]
fn ctrl_c_stops_a_run_at_a_step_boundary_and_the_same_command_resumes_it() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 100, "stepMillis": 20}));
    let db = s.db();
    let args = ["--db", db.to_str().unwrap(), "run", "canary", "--input", input.to_str().unwrap(), "--id", "ctrlc"];
    let child = std::process::Command::new(infraflow())
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    // The journal may exist before the workflow is in it: poll until status answers.
    let progress = || {
        let out = s.cli(&["status", "ctrlc", "--json"]);
        if !out.status.success() {
            return 0;
        }
        completions_per_step(&serde_json::from_slice(&out.stdout).unwrap()).len()
    };
    while progress() < 3 {
        assert!(start.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stopping the workflow at the next step boundary"));
    let st = s.status("ctrlc");
    assert_eq!(st["state"], "running");
    assert_eq!(st["owner"], serde_json::Value::Null, "the lease was released");
    let done = completions_per_step(&st).len();
    assert!(done < 100, "it stopped early");

    let again = std::process::Command::new(infraflow()).args(args).output().unwrap();
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    let st = s.status("ctrlc");
    assert_eq!(st["state"], "completed");
    let per_step = completions_per_step(&st);
    assert_eq!(per_step.len(), 100);
    assert!(per_step.values().all(|n| *n == 1));
}

/// A rollback that ended `compensation_failed` gave its cluster up; a newer workflow of the
/// cluster has run since and may have adopted what it left. Retrying the old rollback is refused
/// (it would delete from under the newer one); the newer one runs undisturbed.
#[test]
fn retry_of_an_older_rollback_is_refused_once_a_newer_workflow_of_its_cluster_ran() {
    let s = Scratch::new();
    let missing = s.file("missing/effects.log");
    // The older one's compensation cannot write its effects file: it ends compensation_failed.
    let older = s.write_json("w1.json", &json!({"steps": 2, "failAt": 2, "cluster": "c", "effectsFile": missing}));
    let out = s.cli(&["run", "canary", "--input", older.to_str().unwrap(), "--id", "w1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(s.status("w1")["state"], "compensation_failed");

    let newer = s.write_json("w2.json", &json!({"steps": 40, "stepMillis": 50, "cluster": "c"}));
    assert!(s.cli(&["submit", "canary", "--input", newer.to_str().unwrap(), "--id", "w2"]).status.success());
    let mut d = s.spawn_daemon(&[], &[]);
    while completions_per_step(&s.status("w2")).len() < 2 {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The operator fixes the cause and retries the older one, as its error message says.
    std::fs::create_dir(s.file("missing")).unwrap();
    let out = s.cli(&["retry", "w1", "--detach"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("w2") && err.contains("teardown"), "{err}");
    s.wait_for_state("w2", &["completed"], Duration::from_secs(60));
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    assert_eq!(s.status("w1")["state"], "compensation_failed", "nothing of w1 ran again");
    let w1 = s.history("w1");
    assert!(!w1.iter().any(|e| e["type"] == "resume_requested"), "the refusal journaled nothing: {w1:?}");
}
