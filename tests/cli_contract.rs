//! The command-line contract of DESIGN.md section 5, checked on the real binaries.

mod support;

use serde_json::json;
use support::*;

#[test]
fn submit_is_idempotent_by_id_and_refuses_a_different_input_for_it() {
    let s = Scratch::new();
    let a = s.write_json("a.json", &json!({"steps": 3}));
    let b = s.write_json("b.json", &json!({"steps": 4}));
    let first = s.cli(&["submit", "canary", "--input", a.to_str().unwrap(), "--id", "same"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(stdout(&first), "same");
    let again = s.cli(&["submit", "canary", "--input", a.to_str().unwrap(), "--id", "same"]);
    assert_eq!(stdout(&again), "same");
    assert_eq!(s.history("same").len(), 1, "the repeat journaled nothing");
    let other = s.cli(&["submit", "canary", "--input", b.to_str().unwrap(), "--id", "same"]);
    assert_eq!(other.status.code(), Some(2));
    assert!(stderr(&other).contains("already used"), "{}", stderr(&other));
}

#[test]
fn submit_without_id_prints_a_fresh_id_alone() {
    let s = Scratch::new();
    let a = s.write_json("a.json", &json!({"steps": 1}));
    let out = s.cli(&["submit", "canary", "--input", a.to_str().unwrap()]);
    assert!(out.status.success());
    let id = stdout(&out);
    assert!(id.starts_with("canary-") && !id.contains(char::is_whitespace), "{id:?}");
    assert_eq!(s.status(&id)["state"], "pending");
}

#[test]
fn bad_input_exits_2_with_one_line_and_journals_nothing() {
    let s = Scratch::new();
    let cases: Vec<(&str, &str, &str)> = vec![
        ("canary", "{not json", "not valid JSON"),
        ("canary", r#"{"steps": 2, "colour": "red"}"#, "unknown field `colour`"),
        ("canary", r#"{"steps": "two"}"#, "invalid type"),
        ("canary", r#"{"steps": 0}"#, "steps"),
        ("canary", r#"[1, 2]"#, "JSON object"),
        ("no-such-workflow", r#"{}"#, "unknown workflow"),
    ];
    for (workflow, text, expect) in cases {
        let path = s.file("bad.json");
        std::fs::write(&path, text).unwrap();
        for cmd in ["submit", "run"] {
            let out = s.cli(&[cmd, workflow, "--input", path.to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(2), "{cmd} {text}: {}", stderr(&out));
            let err = stderr(&out);
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            assert!(err.contains(expect), "{cmd} {text}: {err:?} lacks {expect:?}");
        }
    }
    let out = s.cli(&["submit", "canary", "--input", s.file("absent.json").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!s.db().exists(), "nothing was journaled, not even an empty journal");
    let out = s.cli(&["submit", "canary", "--input", "-", "--id", "bad id"]);
    assert_eq!(out.status.code(), Some(2));
    // --output-file: only `run` waits for an output, and the file must be writable before it acts.
    let good = s.write_json("good.json", &json!({"steps": 1}));
    let good = good.to_str().unwrap();
    let nowhere = s.file("no-such-folder/out.json");
    let folder = s.file("");
    for (args, expect) in [
        (vec!["submit", "canary", "--input", good, "--output-file", "o.json"], "--output-file is for `infraflow run`"),
        (vec!["run", "canary", "--input", good, "--output-file", nowhere.to_str().unwrap()], "no folder"),
        (vec!["run", "canary", "--input", good, "--output-file", folder.to_str().unwrap()], "is a folder"),
    ] {
        let out = s.cli(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "one line: {}", stderr(&out));
        assert!(stderr(&out).contains(expect), "{args:?}: {}", stderr(&out));
    }
    let out = s.cli(&["--consistency-settle", "5x", "submit", "canary", "--input", good]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("\"5x\" is not a duration: write e.g. 500ms or 5s"), "{}", stderr(&out));
    assert!(!s.db().exists(), "nothing was journaled");
}

#[test]
fn input_can_come_from_standard_input() {
    let s = Scratch::new();
    let mut child = std::process::Command::new(infraflow())
        .args(["--db", s.db().to_str().unwrap(), "run", "canary", "--input", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(br#"{"steps": 2}"#).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, json!({"steps": 2, "branches": 1}));
}

#[test]
fn run_prints_output_on_stdout_and_progress_on_stderr() {
    let s = Scratch::new();
    let a = s.write_json("a.json", &json!({"steps": 3}));
    let out = s.cli(&["run", "canary", "--input", a.to_str().unwrap(), "--id", "r1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["steps"], 3);
    let err = stderr(&out);
    assert!(err.contains("done      s3"), "{err}");
    // Running it again resumes (here: finds it done) and runs nothing.
    let again = s.cli(&["run", "canary", "--input", a.to_str().unwrap(), "--id", "r1"]);
    assert_eq!(again.status.code(), Some(0));
    assert!(!stderr(&again).contains("start "), "{}", stderr(&again));
}

#[test]
fn a_failing_run_compensates_and_exits_1_and_no_rollback_keeps_its_steps() {
    let s = Scratch::new();
    let effects = s.file("effects.log");
    let a = s.write_json("a.json", &json!({"steps": 4, "failAt": 3, "effectsFile": effects}));
    let out = s.cli(&["run", "canary", "--input", a.to_str().unwrap(), "--id", "f1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = s.status("f1");
    assert_eq!(st["state"], "compensated");
    assert!(st["error"].as_str().unwrap().contains("injected failure at f1/s3"), "{st}");

    let out = s.cli(&["run", "canary", "--input", a.to_str().unwrap(), "--id", "f2", "--no-rollback"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(s.status("f2")["state"], "failed");
    let lines = lines_of(&effects);
    assert!(lines.iter().any(|l| l.starts_with("tick f2/s2")));
    assert!(!lines.iter().any(|l| l.starts_with("untick f2/")), "{lines:?}");
}

#[test]
fn status_lists_workflows_and_both_binaries_agree() {
    let s = Scratch::new();
    let a = s.write_json("a.json", &json!({"steps": 1}));
    for id in ["x1", "x2"] {
        assert!(s.cli(&["run", "canary", "--input", a.to_str().unwrap(), "--id", id]).status.success());
    }
    let out = s.cli(&["status", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<_> = list.as_array().unwrap().iter().map(|w| w["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, ["x1", "x2"]);
    assert!(list.as_array().unwrap().iter().all(|w| w["workflow"] == "canary" && w["state"] == "completed"));

    let ws = std::process::Command::new(workflow_status())
        .args(["--db", s.db().to_str().unwrap(), "x1", "--json"])
        .output()
        .unwrap();
    assert!(ws.status.success());
    let via_ws: serde_json::Value = serde_json::from_slice(&ws.stdout).unwrap();
    assert_eq!(via_ws, s.status("x1"));
    for field in ["id", "workflow", "state", "steps", "output", "error"] {
        assert!(via_ws.get(field).is_some(), "{field} missing");
    }
    let step = &via_ws["steps"][0];
    for field in ["key", "state", "attempts", "error"] {
        assert!(step.get(field).is_some(), "step {field} missing");
    }
    let table = s.cli(&["status"]);
    assert!(stdout(&table).lines().nth(1).unwrap().starts_with("x1"));
}

#[test]
fn unknown_ids_and_missing_journals_exit_2() {
    let s = Scratch::new();
    let out = s.cli(&["status", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no journal"), "{}", stderr(&out));
    let a = s.write_json("a.json", &json!({"steps": 1}));
    assert!(s.cli(&["submit", "canary", "--input", a.to_str().unwrap()]).status.success());
    for args in [vec!["status", "nope"], vec!["history", "nope"], vec!["cancel", "nope"], vec!["retry", "nope"]] {
        let out = s.cli(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("nope"), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_file_that_is_not_a_journal_is_refused_by_name() {
    let s = Scratch::new();
    std::fs::write(s.db(), "hello, I am a text file and not a database").unwrap();
    for args in [vec!["status"], vec!["cancel", "x"]] {
        let out = s.cli(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("journal.sqlite3") && stderr(&out).contains("not an infraflow journal"),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(std::fs::read_to_string(s.db()).unwrap(), "hello, I am a text file and not a database");
}

#[test]
fn retry_and_cancel_refuse_finished_workflows() {
    let s = Scratch::new();
    let a = s.write_json("a.json", &json!({"steps": 1}));
    assert!(s.cli(&["run", "canary", "--input", a.to_str().unwrap(), "--id", "done"]).status.success());
    let out = s.cli(&["retry", "done"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("completed"));
    let out = s.cli(&["cancel", "done"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn prune_moves_finished_workflows_to_a_readable_archive_and_refuses_a_bad_duration() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 2}));
    assert!(s.cli(&["run", "canary", "--input", input.to_str().unwrap(), "--id", "old"]).status.success());
    let bad = s.cli(&["prune", "--before", "ten days"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("--before"), "{}", stderr(&bad));

    let out = s.cli(&["prune", "--before", "0s", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let pruned: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pruned["workflows"], 1);
    let listed = s.cli(&["status", "--json"]);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&listed.stdout).unwrap(), json!([]));
    let archive = pruned["archive"].as_str().unwrap();
    let out = std::process::Command::new(workflow_status()).args(["--db", archive, "old", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["state"], "completed");
}

#[test]
fn a_journal_written_by_a_newer_infraflow_is_refused_with_exit_2_naming_both_versions() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 1}));
    assert!(s.cli(&["run", "canary", "--input", input.to_str().unwrap(), "--id", "w"]).status.success());
    let bump = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA user_version=99'); c.commit()",
        ])
        .arg(s.db())
        .status()
        .unwrap();
    assert!(bump.success());
    for args in [&["status"][..], &["submit", "canary", "--input", input.to_str().unwrap()][..]] {
        let out = s.cli(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains("schema version 99") && err.contains("upgrade infraflow"), "{err}");
    }
}

#[test]
fn status_filters_by_state_workflow_cluster_and_age_and_pages() {
    let s = Scratch::new();
    let done = s.write_json("a.json", &json!({"steps": 1, "cluster": "c-one"}));
    let queued = s.write_json("b.json", &json!({"steps": 1, "cluster": "c-two"}));
    for id in ["d1", "d2", "d3"] {
        assert!(s.cli(&["run", "canary", "--input", done.to_str().unwrap(), "--id", id]).status.success());
    }
    assert!(s.cli(&["submit", "canary", "--input", queued.to_str().unwrap(), "--id", "q1"]).status.success());
    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["status", "--json"];
        all.extend_from_slice(args);
        let out = s.cli(&all);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        list.as_array().unwrap().iter().map(|w| w["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids(&["--state", "pending"]), ["q1"]);
    assert_eq!(ids(&["--state", "pending,completed"]), ["d1", "d2", "d3", "q1"]);
    assert_eq!(ids(&["--cluster", "c-one"]), ["d1", "d2", "d3"]);
    assert_eq!(ids(&["--workflow", "canary", "--cluster", "c-two"]), ["q1"]);
    assert!(ids(&["--workflow", "teardown"]).is_empty());
    assert_eq!(ids(&["--since", "1h"]).len(), 4);
    assert_eq!(ids(&["--cluster", "c-one", "--limit", "2", "--offset", "1"]), ["d2", "d3"]);
    let none = s.cli(&["status", "--state", "paused"]);
    assert_eq!(stdout(&none).trim(), "no workflow matches these filters");
    let bad = s.cli(&["status", "--state", "stuck"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("\"stuck\" is not a state"), "{}", stderr(&bad));
}

#[test]
fn wait_exits_by_outcome_and_at_its_timeout() {
    let s = Scratch::new();
    let good = s.write_json("a.json", &json!({"steps": 2}));
    let failing = s.write_json("f.json", &json!({"steps": 3, "failAt": 2}));
    assert!(s.cli(&["run", "canary", "--input", good.to_str().unwrap(), "--id", "ok"]).status.success());
    assert!(!s.cli(&["run", "canary", "--input", failing.to_str().unwrap(), "--id", "bad"]).status.success());
    let out = s.cli(&["wait", "ok"]);
    assert_eq!((out.status.code(), stdout(&out).trim()), (Some(0), "ok completed"));
    let out = s.cli(&["wait", "bad", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "compensated");
    // Nobody runs it: the timeout ends the wait, the workflow stays as it was.
    assert!(s.cli(&["submit", "canary", "--input", good.to_str().unwrap(), "--id", "idle"]).status.success());
    let out = s.cli(&["wait", "idle", "--timeout", "1s"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(stderr(&out).contains("idle is still pending after"), "{}", stderr(&out));
    assert_eq!(s.status("idle")["state"], "pending");
    // A daemon runs it: the wait ends when it completes.
    let mut daemon = s.spawn_daemon(&[], &[]);
    let out = s.cli(&["wait", "idle", "--timeout", "60s"]);
    terminate(&mut daemon, std::time::Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = s.cli(&["wait", "nope"]);
    assert_eq!(out.status.code(), Some(2));
}
