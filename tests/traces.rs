//! OpenTelemetry traces, received by a test collector (`support::otlp`, its own protobuf
//! reader): one trace per submission across a kill -9 and its resume, every step that completed
//! sent once, every AWS call a child of its attempt; a caller's `TRACEPARENT` the root's parent;
//! a collector that never answers costs a run nothing it waits for; a slow one gets the end of a
//! run; a batch a collector may have kept is not sent twice.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use support::aws::{AwsEnv as Env, ok};
use support::otlp::{Collector, Got};
use support::proxy::KillAt;

fn env_of(c: &Collector) -> Vec<(String, String)> {
    c.env()
}

fn refs(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Waits (briefly: a finished run sent everything before it exited) until `enough` holds.
fn received(c: &Collector, enough: impl Fn(&[Got]) -> bool) -> Vec<Got> {
    for _ in 0..100 {
        let spans = c.spans();
        if enough(&spans) {
            return spans;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    c.spans()
}

#[test]
fn a_provision_killed_mid_way_and_resumed_is_one_trace_of_two_executions() {
    let e = Env::new();
    let collector = Collector::start();
    let vars = env_of(&collector);
    let input = e.input(
        "p.json",
        json!({"name": "tr", "infraID": "tr-abcde", "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"}),
    );
    e.c.create_public_zone("example.com");
    let args = ["run", "provision-infra", "--input", input.as_str(), "--id", "tr"];
    let mut child = e.spawn_cli_with(&e.proxy.endpoint(), &args, &refs(&vars));
    e.proxy.kill_at(KillAt { call: 12, after_aws_acts: true, pid: child.id() });
    let status = child.wait().unwrap();
    assert!(e.proxy.kill_fired() && !status.success(), "killed at its 12th call: {status:?}");
    let out = e.cli_with(&args, &refs(&vars));
    assert!(out.status.success(), "{}", support::stderr(&out));

    let st = e.s.status("tr");
    assert_eq!(st["state"], "completed", "{st}");
    let trace = st["traceId"].as_str().unwrap().to_string();
    let spans = received(&collector, |s| s.iter().any(|g| g.name.starts_with("provision-infra ")));
    assert!(
        spans.iter().all(|s| s.trace_id == trace),
        "one trace: {:?}",
        spans.iter().map(|s| &s.trace_id).collect::<BTreeSet<_>>()
    );
    let by_id: BTreeMap<&str, &Got> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();

    // The root: the submission, no parent; the two executions its children, the killed one sent
    // by the resume, ended without its steps.
    let roots: Vec<&Got> = spans.iter().filter(|s| s.name == "provision-infra tr").collect();
    assert_eq!(roots.len(), 1, "{roots:?}");
    assert_eq!(roots[0].parent, None);
    assert_eq!(roots[0].status, 1);
    let executions: Vec<&Got> = spans.iter().filter(|s| s.name == "execution").collect();
    assert_eq!(executions.len(), 2, "{executions:#?}");
    assert!(executions.iter().all(|x| x.parent.as_deref() == Some(roots[0].span_id.as_str())));
    let killed = executions.iter().find(|x| x.status == 2).expect("the killed execution");
    assert!(killed.message.contains("without its steps"), "{}", killed.message);
    let resumed = executions.iter().find(|x| x.status == 1).expect("the resumed execution");
    assert!(killed.end_ns <= resumed.start_ns, "the kill before the resume");

    // Every step completed exactly once: the resume's completions all sent, none twice; the
    // killed execution's completions (sent while it ran, the last ones lost with it) never again.
    let ok_steps: Vec<&Got> = spans.iter().filter(|s| s.name == "step" && s.status == 1).collect();
    let mut seen = BTreeSet::new();
    for s in &ok_steps {
        assert!(
            seen.insert(s.attrs["infraflow.step"].clone()),
            "step {} sent completed twice",
            s.attrs["infraflow.step"]
        );
    }
    let history = e.s.history("tr");
    let resumed_at =
        history.iter().filter(|ev| ev["type"] == "lease_taken").nth(1).and_then(|ev| ev["seq"].as_i64()).unwrap();
    let completed_on_resume: BTreeSet<String> = history
        .iter()
        .filter(|ev| ev["type"] == "step_completed" && ev["seq"].as_i64().unwrap() > resumed_at)
        .map(|ev| ev["step"].as_str().unwrap().to_string())
        .collect();
    assert!(!completed_on_resume.is_empty());
    for key in &completed_on_resume {
        let s = ok_steps
            .iter()
            .find(|s| &s.attrs["infraflow.step"] == key)
            .unwrap_or_else(|| panic!("no span of step {key}"));
        assert_eq!(s.parent.as_deref(), Some(resumed.span_id.as_str()), "{key}");
    }
    let all_completed: BTreeSet<String> = st["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["state"] == "completed")
        .map(|s| s["key"].as_str().unwrap().to_string())
        .collect();
    assert!(seen.is_subset(&all_completed), "{seen:?} vs {all_completed:?}");

    // Every AWS call a child of its attempt (or of the execution, for the gate's reads), the
    // attempt a child of its step; but for calls of the killed execution whose attempt died with it.
    let calls: Vec<&Got> = spans.iter().filter(|s| s.attrs.get("rpc.system").is_some_and(|v| v == "aws-api")).collect();
    assert!(calls.len() >= 20, "{} calls", calls.len());
    let mut under_attempts = 0;
    for c in &calls {
        assert!(c.attrs.contains_key("rpc.service") && c.attrs.contains_key("rpc.method"), "{c:?}");
        assert_eq!(c.name, format!("{}.{}", c.attrs["rpc.service"], c.attrs["rpc.method"]));
        assert!(c.attrs.contains_key("http.response.status_code"), "{c:?}");
        match c.parent.as_deref().and_then(|p| by_id.get(p)) {
            Some(p) if p.name == "attempt" => {
                under_attempts += 1;
                let step = p.parent.as_deref().and_then(|s| by_id.get(s));
                // An attempt of the killed execution may have ended (to be retried) and its
                // step died with the process: only those go without their step.
                let in_step = step.is_some_and(|s| s.name == "step" || s.name == "compensation");
                assert!(in_step || p.start_ns < resumed.start_ns, "an attempt of the resume without its step: {p:?}");
            }
            Some(p) => assert_eq!(p.name, "execution", "{c:?} under {p:?}"),
            None => assert!(c.start_ns < resumed.start_ns, "a call of the resume without its attempt: {c:?}"),
        }
    }
    assert!(under_attempts * 10 >= calls.len() * 8, "{under_attempts} of {} calls under attempts", calls.len());
}

#[test]
fn a_callers_traceparent_given_to_submit_is_the_parent_of_the_root_span() {
    let e = Env::new();
    let collector = Collector::start();
    let mut vars = env_of(&collector);
    let input = e.input("c.json", json!({"steps": 2}));
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let bad = e.s.cli_env(&["submit", "canary", "--input", &input, "--id", "tp"], &[("TRACEPARENT", "00-nope")]);
    assert_eq!(bad.status.code(), Some(2), "{}", support::stderr(&bad));
    assert!(support::stderr(&bad).contains("TRACEPARENT"), "{}", support::stderr(&bad));
    vars.push(("TRACEPARENT".into(), parent.into()));
    let sub = e.s.cli_env(&["submit", "canary", "--input", &input, "--id", "tp"], &refs(&vars));
    assert!(sub.status.success(), "{}", support::stderr(&sub));
    vars.pop();
    let run = e.s.cli_env(&["run", "canary", "--input", &input, "--id", "tp"], &refs(&vars));
    assert!(run.status.success(), "{}", support::stderr(&run));
    assert_eq!(e.s.status("tp")["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
    let spans = received(&collector, |s| s.iter().any(|g| g.name == "canary tp"));
    let root = spans.iter().find(|g| g.name == "canary tp").expect("the root span");
    assert_eq!(root.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(root.parent.as_deref(), Some("00f067aa0ba902b7"));
    assert!(spans.iter().filter(|g| g.name == "step").count() >= 2, "{spans:#?}");
}

/// A collector that takes the connection and never answers, given ten minutes to: the provision
/// finishes without waiting for it (a test's time, not a timing, is what would fail).
#[test]
fn a_collector_that_never_answers_does_not_hold_a_provision_up() {
    let e = Env::new();
    let silent = Collector::silent();
    let mut vars = env_of(&silent);
    vars.push(("OTEL_EXPORTER_OTLP_TIMEOUT".into(), "600000".into()));
    let input = e.input(
        "p.json",
        json!({"name": "sl", "infraID": "sl-abcde", "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"}),
    );
    e.c.create_public_zone("example.com");
    let started = std::time::Instant::now();
    let out = ok(&e.cli_with(&["run", "provision-infra", "--input", &input, "--id", "sl"], &refs(&vars)));
    eprintln!("a provision with a silent collector: {:?}", started.elapsed());
    assert!(out["vpcID"].is_string(), "{out}");
    assert!(silent.spans().is_empty());
}

/// A failed workflow can be retried: its root is sent once, when it ends for good, never at a
/// failure (a retry would send it again); both executions are in the one trace.
#[test]
fn a_failed_workflow_sends_no_root_until_it_ends_for_good() {
    let e = Env::new();
    let collector = Collector::start();
    let vars = env_of(&collector);
    let input = e.input("c.json", json!({"steps": 4, "failAt": 3}));
    let first = e.s.cli_env(&["run", "canary", "--input", &input, "--id", "r1", "--no-rollback"], &refs(&vars));
    assert!(!first.status.success());
    assert_eq!(e.s.status("r1")["state"], "failed");
    let spans = received(&collector, |s| s.iter().filter(|g| g.name == "execution").count() >= 1);
    assert!(!spans.iter().any(|g| g.name == "canary r1"), "a root at a failure retry can take further");
    e.s.cli_env(&["retry", "r1"], &refs(&vars));
    let state = e.s.status("r1")["state"].as_str().unwrap_or_default().to_string();
    let spans = received(&collector, |s| s.iter().filter(|g| g.name == "execution").count() >= 2);
    let roots = spans.iter().filter(|g| g.name == "canary r1").count();
    assert_eq!(roots, usize::from(state == "completed" || state == "compensated"), "{state}: {roots} roots");
    assert!(spans.iter().all(|g| g.trace_id == spans[0].trace_id), "one trace");
}

/// Spans still queued when a command ends are sent, and a send in flight then is waited for:
/// a collector that takes 150 ms an export, batches of 10, receives the whole run.
#[test]
fn a_send_in_flight_at_exit_is_waited_for_and_nothing_queued_is_lost() {
    let e = Env::new();
    let collector = Collector::slow(std::time::Duration::from_millis(150));
    let mut vars = env_of(&collector);
    vars.push(("OTEL_BSP_MAX_EXPORT_BATCH_SIZE".into(), "10".into()));
    let input = e.input("c.json", json!({"steps": 20, "stepMillis": 10}));
    let run = e.s.cli_env(&["run", "canary", "--input", &input, "--id", "slow"], &refs(&vars));
    assert!(run.status.success(), "{}", support::stderr(&run));
    let spans = collector.spans();
    let named = |n: &str| spans.iter().filter(|g| g.name == n).count();
    assert_eq!((named("canary slow"), named("execution"), named("step")), (1, 1, 20), "{spans:#?}");
}

/// A short command ends before its collector has answered anything: the exit waits 200 ms for
/// a collector not heard yet, and the full 2 s once it answers, so a healthy collector that
/// takes 80 ms an export gets all of a quick run's batches, not only those sent within 200 ms.
#[test]
fn a_quick_run_waits_for_a_collector_that_answers_while_it_exits() {
    let e = Env::new();
    let collector = Collector::slow(std::time::Duration::from_millis(80));
    let mut vars = env_of(&collector);
    vars.push(("OTEL_BSP_MAX_EXPORT_BATCH_SIZE".into(), "4".into()));
    let input = e.input("c.json", json!({"steps": 8}));
    let run = e.s.cli_env(&["run", "canary", "--input", &input, "--id", "quick"], &refs(&vars));
    assert!(run.status.success(), "{}", support::stderr(&run));
    let spans = collector.spans();
    let named = |n: &str| spans.iter().filter(|g| g.name == n).count();
    // 19 spans in batches of 4: five exports, 400 ms of answers.
    assert_eq!((named("canary quick"), named("execution"), named("step")), (1, 1, 8), "{spans:#?}");
}

/// A collector that read a batch and closed the connection without answering may have kept
/// it: the exporter does not send it again (it is counted dropped), so no span arrives twice.
#[test]
fn a_batch_the_collector_read_is_not_sent_again_when_it_closes_unanswered() {
    let e = Env::new();
    let collector = Collector::closing_unanswered();
    let mut vars = env_of(&collector);
    vars.push(("OTEL_BSP_MAX_EXPORT_BATCH_SIZE".into(), "5".into()));
    let input = e.input("c.json", json!({"steps": 20, "stepMillis": 5}));
    let run = e.s.cli_env(&["run", "canary", "--input", &input, "--id", "cu"], &refs(&vars));
    assert!(run.status.success(), "{}", support::stderr(&run));
    let spans = collector.spans();
    let mut seen = BTreeSet::new();
    let twice: Vec<_> = spans.iter().filter(|g| !seen.insert(g.span_id.clone())).map(|g| &g.name).collect();
    assert!(spans.len() >= 10, "two exports at least: {} spans", spans.len());
    assert!(twice.is_empty(), "sent twice: {twice:?}");
}

/// CPU time (clock ticks) the process's `otlp-exporter` thread has used.
fn exporter_ticks(pid: u32) -> u64 {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap_or_default();
        if let Some((_, rest)) = stat.split_once("(otlp-exporter) ") {
            let f: Vec<&str> = rest.split(' ').collect();
            return f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        }
    }
    panic!("no otlp-exporter thread in {pid}");
}

/// `OTEL_BSP_SCHEDULE_DELAY=0` (send at once) on an idle daemon: the exporter waits on its empty
/// queue rather than polling it; a second of idling costs it a small part of a second of CPU
/// (a busy loop would use all of it).
#[test]
fn an_idle_exporter_with_no_schedule_delay_waits_rather_than_spins() {
    let e = Env::new();
    let collector = Collector::start();
    let vars = env_of(&collector);
    assert!(vars.contains(&("OTEL_BSP_SCHEDULE_DELAY".into(), "0".into())));
    let mut daemon = e.s.spawn_daemon(&[], &refs(&vars));
    e.s.wait_for_daemon_start(1);
    let before = exporter_ticks(daemon.id());
    std::thread::sleep(std::time::Duration::from_secs(2));
    let used = exporter_ticks(daemon.id()) - before;
    support::terminate(&mut daemon, std::time::Duration::from_secs(10));
    // 100 ticks a second on Linux: a spinning thread would have used about 200.
    assert!(used < 40, "the idle exporter used {used} ticks in 2 s");
}

/// OTLP/gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, HTTP/2 on loopback) with a key in
/// `OTEL_EXPORTER_OTLP_HEADERS`: the whole run arrives, every export carries the header, and the
/// key is in no log line, even at debug.
#[test]
fn a_grpc_collector_receives_the_run_with_the_configured_headers_and_the_key_is_never_logged() {
    let e = Env::new();
    let collector = Collector::grpc();
    let key = "s3cr3t-k3y";
    let mut vars = env_of(&collector);
    vars.push(("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "grpc".into()));
    vars.push(("OTEL_EXPORTER_OTLP_HEADERS".into(), format!("x-tenant=blue, authorization=Bearer%20{key}")));
    vars.push(("OTEL_BSP_MAX_EXPORT_BATCH_SIZE".into(), "4".into()));
    vars.push(("RUST_LOG".into(), "debug".into()));
    let input = e.input("c.json", json!({"steps": 6}));
    let run = e.s.cli_env(&["run", "canary", "--input", &input, "--id", "g1"], &refs(&vars));
    assert!(run.status.success(), "{}", support::stderr(&run));
    let spans = collector.spans();
    let named = |n: &str| spans.iter().filter(|g| g.name == n).count();
    let why = support::stderr(&run).lines().filter(|l| l.contains("collector")).collect::<Vec<_>>().join("\n");
    assert_eq!((named("canary g1"), named("execution"), named("step")), (1, 1, 6), "{why}\n{spans:#?}");
    let heads = collector.heads();
    assert!(heads.len() >= 4, "batches of 4: {} exports", heads.len());
    for h in &heads {
        assert_eq!(h.get("x-tenant").map(String::as_str), Some("blue"), "{h:?}");
        assert_eq!(h.get("authorization").map(String::as_str), Some(format!("Bearer {key}").as_str()));
    }
    let logs = format!("{}{}", support::stdout(&run), support::stderr(&run));
    assert!(!logs.contains(key), "the key was logged");
}

/// Settings a collector cannot be reached by are refused before anything runs, naming the
/// variable, never echoing a header's value.
#[test]
fn exporter_settings_that_cannot_work_are_refused_naming_the_variable_and_never_the_key() {
    let e = Env::new();
    let collector = Collector::start();
    let input = e.input("c.json", json!({"steps": 1}));
    for (name, value, says) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-key=s3cr3t,broken", "entry 2 is not key=value"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "content-type=s3cr3t", "set by infraflow"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization:Basic s3cr3t=", "entry 1 does not start with a header name"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-key=s3cr3t\u{1}", "the value of x-key is not a header value"),
    ] {
        let mut vars = env_of(&collector);
        vars.push((name.into(), value.into()));
        let out = e.s.cli_env(&["run", "canary", "--input", &input, "--id", "bad"], &refs(&vars));
        let err = support::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}={value}: {err}");
        assert!(err.contains(name) && err.contains(says), "{name}={value}: {err}");
        assert!(!err.contains("s3cr3t"), "{name}: the value was echoed: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let mut vars = env_of(&collector);
    vars.push(("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "grpc".into()));
    vars.push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), format!("http://127.0.0.1:{}/otlp", collector.port)));
    let out = e.s.cli_env(&["run", "canary", "--input", &input, "--id", "bad"], &refs(&vars));
    assert!(support::stderr(&out).contains("no path"), "{}", support::stderr(&out));
    assert!(e.s.cli(&["status", "bad"]).status.code() != Some(0), "nothing was journaled");
    assert!(collector.spans().is_empty());
}

/// `daemon --trace-link`: the page links a workflow's trace id to the viewer named; a link
/// without `{traceId}`, or not http(s), is refused before the daemon starts.
#[test]
fn the_page_links_a_workflows_trace_id_to_the_trace_viewer_named() {
    let e = Env::new();
    let input = e.input("c.json", json!({"steps": 1}));
    assert!(e.s.cli(&["run", "canary", "--input", &input, "--id", "linked"]).status.success());
    let trace = e.s.status("linked")["traceId"].as_str().unwrap().to_string();
    for bad in ["https://jaeger.example/trace/", "javascript:alert(1)//{traceId}", "https://x/{traceId}\"><b>"] {
        let out = e.s.cli(&["daemon", "--trace-link", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", support::stderr(&out));
        assert!(support::stderr(&out).contains("--trace-link"), "{}", support::stderr(&out));
    }
    let port = support::free_port();
    let listen = format!("127.0.0.1:{port}");
    let link = "https://jaeger.example/trace/{traceId}?uiFind=x&y=1";
    let mut daemon = e.s.spawn_daemon(&["--listen", &listen, "--trace-link", link], &[]);
    e.s.wait_for_daemon_start(1);
    let (code, page) = support::http_get(port, "/workflows/linked");
    support::terminate(&mut daemon, std::time::Duration::from_secs(10));
    assert_eq!(code, 200, "{page}");
    // As a browser reads the attribute: the page escapes `&` and `/`.
    let page = page.replace("&#x2f;", "/").replace("&amp;", "&");
    let href = format!("href=\"https://jaeger.example/trace/{trace}?uiFind=x&y=1\"");
    assert!(page.contains(&href), "no {href} in the page: {page}");
}

/// Collectors that close a connection idle for a while (a keep-alive timeout): 100 ms while
/// the run exports about every 200 ms (the close is seen as it comes), 500 ms with exports
/// every 500 ms, and 100 ms with exports every 100 ms (the timeout and the next export fire
/// together: a batch may meet the close; this collector's close is seen first): each batch
/// goes on a connection the collector keeps, and the whole run arrives.
#[test]
fn a_collector_closing_idle_connections_loses_no_batch() {
    let e = Env::new();
    for (idle, delay, step) in [(100, 0, 200), (500, 500, 100), (100, 100, 40)] {
        let collector = Collector::closing_idle_after(std::time::Duration::from_millis(idle));
        let mut vars = env_of(&collector);
        vars.push(("OTEL_BSP_SCHEDULE_DELAY".into(), delay.to_string()));
        let input = e.input("c.json", json!({"steps": 8, "stepMillis": step}));
        let id = format!("idle{idle}-{delay}");
        let run = e.s.cli_env(&["run", "canary", "--input", &input, "--id", &id], &refs(&vars));
        assert!(run.status.success(), "{}", support::stderr(&run));
        let spans = collector.spans();
        let named = |n: &str| spans.iter().filter(|g| g.name == n).count();
        let got = (named(&format!("canary {id}")), named("execution"), named("step"));
        assert_eq!(got, (1, 1, 8), "idle {idle} ms, delay {delay} ms: {spans:#?}");
    }
}
