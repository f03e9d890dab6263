//! Running infraflow as a service: structured logs a pipeline can parse, the IAM policy a security
//! team grants, and the systemd unit.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

#[test]
fn the_daemon_logs_one_json_object_a_line_with_the_workflow_step_and_attempt() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 5}));
    assert!(s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "logged"]).status.success());
    let mut d = s.spawn_daemon(&[], &[("INFRAFLOW_LOG_FORMAT", "json")]);
    s.wait_for_state("logged", &["completed"], Duration::from_secs(60));
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    let log = s.daemon_log();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON object ({e}): {l}")))
        .collect();
    assert!(lines.iter().any(|l| l["message"] == "daemon started" && l["level"] == "INFO"), "{log}");
    let steps: Vec<&Value> = lines.iter().filter(|l| l["message"] == "step completed").collect();
    assert_eq!(steps.len(), 5, "{log}");
    for l in steps {
        assert_eq!(l["workflow"], "logged", "{l}");
        assert!(l["step"].as_str().is_some_and(|k| !k.is_empty()), "{l}");
        assert_eq!(l["activity"], "canary.tick", "{l}");
        assert_eq!(l["attempt"], 1, "{l}");
        assert!(l["timestamp"].is_string(), "{l}");
    }
}

#[test]
fn an_unknown_log_format_is_refused_naming_the_choices() {
    let s = Scratch::new();
    let out = s.cli(&["--log-format", "xml", "status"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("xml") && err.contains("json"), "{err}");
}

#[test]
fn the_systemd_unit_restarts_on_failure_keeps_state_and_is_sandboxed() {
    let unit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../contrib/infraflow.service")).unwrap();
    for line in [
        "ExecStart=/usr/local/bin/infraflow daemon",
        "Restart=on-failure",
        "StateDirectory=infraflow",
        "Environment=INFRAFLOW_DB=/var/lib/infraflow/journal.sqlite3",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
    ] {
        assert!(unit.lines().any(|l| l.starts_with(line)), "the unit lacks {line}");
    }
    // systemd's own checker, where the machine has it: nothing but the missing binary to complain of.
    if let Ok(out) = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../contrib/infraflow.service"))
        .output()
    {
        let err = String::from_utf8_lossy(&out.stderr);
        let other: Vec<&str> =
            err.lines().filter(|l| !l.contains("is not executable") && !l.trim().is_empty()).collect();
        assert!(other.is_empty(), "systemd-analyze verify: {err}");
    }
}

fn policy(args: &[&str]) -> std::process::Output {
    Scratch::new().cli(&[&["policy"], args].concat())
}

#[test]
fn every_policy_is_iam_json_and_teardown_may_create_nothing() {
    let out = policy(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["Version"], "2012-10-17");
    let statements = doc["Statement"].as_array().unwrap();
    let sids: Vec<&str> = statements.iter().map(|s| s["Sid"].as_str().unwrap()).collect();
    assert_eq!(
        sids,
        [
            "CreateCluster",
            "CreateIam",
            "CreateManagement",
            "CreatePrivatelink",
            "ProvisionInfra",
            "ScaleNodepool",
            "Teardown",
            "TeardownManagement"
        ]
    );
    for s in statements {
        assert_eq!(s["Effect"], "Allow");
        assert_eq!(s["Resource"], "*");
        let actions = s["Action"].as_array().unwrap();
        assert!(actions.iter().all(|a| a.as_str().unwrap().split_once(':').is_some()), "{s}");
    }
    let teardown: Value = serde_json::from_slice(&policy(&["teardown"]).stdout).unwrap();
    let actions: Vec<&str> =
        teardown["Statement"][0]["Action"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(actions.contains(&"ec2:DeleteVpc") && actions.contains(&"elasticloadbalancing:DeleteLoadBalancer"));
    let creates: Vec<&&str> = actions.iter().filter(|a| a.contains(":Create") || a.contains(":Run")).collect();
    assert!(creates.is_empty(), "teardown is granted {creates:?}");
}

#[test]
fn a_policy_for_an_unknown_workflow_exits_2_naming_the_known_ones() {
    let out = policy(&["provision-infr"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown workflow \"provision-infr\"") && stderr(&out).contains("provision-infra"));
}

/// The trust policy of a role the daemon assumes (issue 34): its principal may assume it, and
/// only with the external id when one is named; a principal that is not one is bad input.
#[test]
fn the_trust_policy_names_the_daemons_principal_and_its_external_id() {
    let out = policy(&["--trust-for", "arn:aws:iam::999999999999:role/infraflow-daemon", "--external-id", "team-a"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["Version"], "2012-10-17");
    let s = &doc["Statement"][0];
    assert_eq!(s["Effect"], "Allow");
    assert_eq!(s["Action"], serde_json::json!(["sts:AssumeRole", "sts:SetSourceIdentity"]));
    assert_eq!(s["Principal"]["AWS"], "arn:aws:iam::999999999999:role/infraflow-daemon");
    assert_eq!(s["Condition"]["StringEquals"]["sts:ExternalId"], "team-a");
    let plain: Value = serde_json::from_slice(&policy(&["--trust-for", "999999999999"]).stdout).unwrap();
    assert!(plain["Statement"][0].get("Condition").is_none(), "{plain}");
    for bad in [
        &["--trust-for", "arn:aws:sts::999999999999:assumed-role/daemon/s"][..],
        &["--trust-for", "999999999999", "--external-id", "x"],
        &["--trust-for", "999999999999", "teardown"],
        &["--external-id", "team-a"],
    ] {
        let out = policy(bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{bad:?}");
    }
    let err = stderr(&policy(&["--trust-for", "daemon"]));
    assert!(err.contains("\"daemon\" is not an account id or an IAM role or user ARN"), "{err}");
}

#[test]
#[should_panic(expected = "lacks [\"ec2:CreateVpc\"]")]
fn a_call_the_policy_does_not_grant_fails_the_completeness_check() {
    let before = std::collections::BTreeMap::new();
    let after = std::collections::BTreeMap::from([("ec2:CreateVpc".to_string(), 1), ("ec2:DeleteVpc".to_string(), 2)]);
    support::iam::assert_policy_covers("teardown", &before, &after);
}

#[test]
fn metrics_move_during_a_run_and_readyz_turns_unready_while_the_journal_cannot_be_written() {
    let s = Scratch::new();
    let port = free_port();
    let input = s.write_json("in.json", &json!({"steps": 40, "stepMillis": 50}));
    assert!(s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "watched"]).status.success());
    let listen = format!("127.0.0.1:{port}");
    let mut d = s.spawn_daemon(&["--listen", &listen], &[]);
    assert!(wait_until(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()));
    assert_eq!(http_get(port, "/healthz").0, 200);

    let completed = r#"infraflow_steps_total{activity="canary.tick",outcome="completed"}"#;
    let first = http_get(port, "/metrics");
    assert_eq!(first.0, 200);
    assert!(first.1.contains("# TYPE infraflow_journal_commit_seconds histogram"), "{}", first.1);
    assert!(wait_until(Duration::from_secs(30), || {
        let now = sample(&http_get(port, "/metrics").1, completed);
        now > sample(&first.1, completed) && now > 0.0
    }));
    s.wait_for_state("watched", &["completed"], Duration::from_secs(60));
    let done = http_get(port, "/metrics").1;
    assert_eq!(sample(&done, completed), 40.0, "{done}");
    assert_eq!(sample(&done, r#"infraflow_workflows{state="completed"}"#), 1.0, "{done}");
    assert!(sample(&done, "infraflow_journal_commit_batch_size_count") > 0.0, "{done}");
    assert!(wait_until(Duration::from_secs(10), || http_get(port, "/readyz").0 == 200));

    // Another process holds SQLite's write lock: the journal cannot be written, the daemon says so.
    let mut holder = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3, sys, time\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\nc.execute('BEGIN IMMEDIATE')\nprint('held', flush=True)\ntime.sleep(6)\nc.execute('COMMIT')")
        .arg(s.db())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "held");
    let (status, body) = http_get(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("journal"), "{body}");
    assert!(holder.wait().unwrap().success());
    assert!(
        wait_until(Duration::from_secs(20), || http_get(port, "/readyz").0 == 200),
        "ready again once the lock is gone"
    );
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
}

#[test]
fn a_listen_address_in_use_is_refused_with_exit_2() {
    let s = Scratch::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = s.cli(&["daemon", "--listen", &addr]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("cannot listen on {addr}")), "{}", stderr(&out));
}

/// Checks a mermaid flowchart by shape: a header, node lines, edge lines between declared nodes,
/// class lines; returns (nodes, edges).
fn mermaid_shape(text: &str) -> (Vec<String>, Vec<(String, String)>) {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("---"), "{text}");
    assert!(lines.next().is_some_and(|l| l.starts_with("title: ")), "{text}");
    assert_eq!(lines.next(), Some("---"));
    assert_eq!(lines.next(), Some("flowchart TD"));
    let (mut nodes, mut edges) = (Vec::new(), Vec::new());
    for l in lines {
        let l = l.trim();
        if let Some((a, b)) = l.split_once(" --> ") {
            edges.push((a.to_string(), b.to_string()));
        } else if let Some((id, rest)) = l.split_once("[\"") {
            assert!(rest.contains("\"]:::"), "a node line: {l}");
            nodes.push(id.to_string());
        } else {
            assert!(l.starts_with("classDef "), "unexpected line {l:?} in\n{text}");
        }
    }
    for (a, b) in &edges {
        assert!(nodes.contains(a) && nodes.contains(b), "edge {a} --> {b} names an undeclared node");
    }
    (nodes, edges)
}

#[test]
fn a_run_draws_as_one_chain_per_branch_in_mermaid_and_dot() {
    let s = Scratch::new();
    let input = s.write_json("in.json", &json!({"steps": 3, "branches": 2}));
    assert!(s.cli(&["run", "canary", "--input", input.to_str().unwrap(), "--id", "drawn"]).status.success());
    let out = s.cli(&["graph", "drawn"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let (nodes, edges) = mermaid_shape(&text);
    assert_eq!(nodes.len(), 6, "{text}");
    assert_eq!(edges.len(), 4, "two chains of three: {text}");
    assert!(text.contains("b1/s3<br/>canary.tick<br/>completed · 1 attempt"), "{text}");
    // The workflow's name draws its latest run; dot draws the same graph.
    let dot = stdout(&s.cli(&["graph", "canary", "--format", "dot"]));
    assert!(dot.starts_with("digraph \"canary drawn\" {") && dot.trim_end().ends_with('}'), "{dot}");
    assert_eq!(dot.matches(" -> ").count(), 4, "{dot}");
    assert_eq!(dot.matches("fillcolor=palegreen").count(), 6, "{dot}");
    let missing = s.cli(&["graph", "nothing-like-it"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("no workflow with id nothing-like-it"), "{}", stderr(&missing));
}
