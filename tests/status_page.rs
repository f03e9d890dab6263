//! The status page of `daemon --listen`, in a real browser: headless Chromium (Debian's, installed
//! by `scripts/test.sh`) loads the page of a live daemon running a canary and a provision-infra on
//! moto; the test reads the DOM Chromium rendered and keeps a screenshot. The page's actions are
//! POSTs from the page only, and absent where the daemon listens beyond loopback.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use support::aws::{AwsEnv, ok};
use support::*;

fn chromium() -> PathBuf {
    let path = PathBuf::from(std::env::var("INFRAFLOW_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(path.exists(), "{} is missing: scripts/test.sh installs Debian's chromium", path.display());
    path
}

/// Chromium, headless, on a fresh profile, with nothing but the page to talk to.
fn browser(profile: &Path) -> Command {
    let mut c = Command::new(chromium());
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// The DOM Chromium built from `url`.
fn dom(profile: &Path, url: &str) -> String {
    let out = browser(profile).arg("--dump-dom").arg(url).output().unwrap();
    assert!(out.status.success(), "chromium --dump-dom {url}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Where a test's screenshots go: `target/test-output/<test>/`.
fn output_dir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-output").join(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Chromium's screenshot of `url` at `size` (`W,H`), as `target/test-output/status_page/<name>`.
fn screenshot(profile: &Path, name: &str, size: &str, url: &str) {
    let shot = output_dir("status_page").join(name);
    let out = browser(profile)
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("--window-size={size}"))
        .arg(url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a real screenshot at {}", shot.display());
}

fn post(port: u16, path: &str, origin: &str, form: &str) -> (u16, String) {
    post_as(port, &format!("127.0.0.1:{port}"), path, origin, form)
}

/// A POST with the `Host` header a browser sends for `host`.
fn post_as(port: u16, host: &str, path: &str, origin: &str, form: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    let status = out.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, out)
}

#[test]
fn a_browser_shows_the_workflows_of_a_live_daemon_their_run_graph_and_their_state_changing() {
    let e = AwsEnv::new();
    // Each AWS call takes 300 ms, as on a slow day: the provision runs for seconds.
    e.proxy.set_latency(Duration::from_millis(300));
    let infra = e.input(
        "p.json",
        json!({"name": "page", "infraID": "page-abcde", "region": "us-east-1", "zones": ["us-east-1a"],
               "baseDomain": "example.com"}),
    );
    let canary = e.input("c.json", json!({"steps": 4, "branches": 2, "stepMillis": 200}));
    assert!(e.cli(&["submit", "canary", "--input", &canary, "--id", "canary-1"]).status.success());
    // Runs through the whole test (60 s of steps): the list is seen with running work however
    // quick the provision is (a loaded CI machine's browser started after it had finished).
    let long = e.input("long.json", json!({"steps": 600, "stepMillis": 100}));
    assert!(e.cli(&["submit", "canary", "--input", &long, "--id", "canary-long"]).status.success());
    assert!(e.cli(&["submit", "provision-infra", "--input", &infra, "--id", "prov-1"]).status.success());
    let port = free_port();
    let mut d = e.daemon_with(&e.proxy.endpoint(), &["--listen", &format!("127.0.0.1:{port}")]);
    let profile = tempfile::tempdir().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    assert!(wait_until(Duration::from_secs(30), || e.s.status("prov-1")["state"] == "running"), "never ran");

    // While it runs: the list has both rows, and refreshes itself.
    let list = dom(profile.path(), &format!("{base}/"));
    assert!(list.contains(r#"data-id="canary-long" data-state="running""#), "{list}");
    assert!(list.contains(r#"data-id="prov-1" data-state=""#), "{list}");
    assert!(list.contains(r#"data-id="canary-1""#), "{list}");
    assert!(list.contains(r#"http-equiv="refresh""#), "a page with running work refreshes itself");
    let running = dom(profile.path(), &format!("{base}/workflows/prov-1"));
    assert!(running.contains(r#"class="node" data-key="environment""#), "the graph's first node: {running}");
    // On a quick machine the provision can finish while the browser starts: the button is on
    // the page exactly while the page shows the workflow running.
    let shown_running = running.contains(r#"id="state">running<"#);
    assert_eq!(running.contains(r#"class="cancel""#), shown_running, "loopback: a cancel button while it runs");

    let done = e.s.wait_for_state("prov-1", &["completed"], Duration::from_secs(120));
    let graph_nodes = done["steps"].as_array().unwrap().len();
    // After a reload: the state changed, every step is a node of the graph, the output is there.
    let after = dom(profile.path(), &format!("{base}/workflows/prov-1"));
    assert!(after.contains(r#"id="state">completed<"#), "{after}");
    assert_eq!(after.matches(r#"class="node""#).count(), graph_nodes, "one node per step");
    assert!(after.matches(r#"data-state="completed""#).count() >= graph_nodes, "every node completed");
    assert!(after.contains("&quot;vpcID&quot;") || after.contains("\"vpcID\""), "the output: {after}");
    assert!(!after.contains(r#"http-equiv="refresh""#), "nothing left to refresh for");
    let filtered = dom(profile.path(), &format!("{base}/?workflow=canary"));
    assert!(filtered.contains(r#"data-id="canary-1""#) && !filtered.contains(r#"data-id="prov-1""#), "{filtered}");

    screenshot(profile.path(), "workflow.png", "1280,1100", &format!("{base}/workflows/prov-1"));
    assert!(e.cli(&["cancel", "canary-long"]).status.success());
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0), "{}", e.s.daemon_log());
}

#[test]
fn cancel_from_the_page_needs_the_pages_origin_and_compensates_the_workflow() {
    let s = Scratch::new();
    let input = s.write_json("c.json", &json!({"steps": 200, "stepMillis": 100}));
    assert!(s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "long"]).status.success());
    let port = free_port();
    let mut d = s.spawn_daemon(&["--listen", &format!("127.0.0.1:{port}")], &[]);
    assert!(wait_until(Duration::from_secs(30), || s.status("long")["state"] == "running"));
    let (status, page) = http_get(port, "/workflows/long/cancel");
    assert_eq!(status, 200);
    let form = page.split(r#"<form method="post" action=""#).nth(1).unwrap_or_else(|| panic!("no action form: {page}"));
    let action = form.split('"').next().unwrap().to_string();
    assert_eq!(action, "/workflows/long/cancel", "the token is never in the URL (history, proxy logs)");
    let token = form
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no token in the form: {page}"));
    assert!(token.len() >= 32, "{token}");
    let with_token = format!("csrf={token}");
    let (status, _) = post(port, &action, "http://evil.example", &with_token);
    assert_eq!(status, 403, "a POST from another site is refused, token or not");
    assert_eq!(s.status("long")["state"], "running", "and changes nothing");
    let own = format!("http://127.0.0.1:{port}");
    let (status, _) = post(port, &action, &own, "");
    assert_eq!(status, 403, "a POST without the page's token is refused");
    let (status, _) = post(port, &action, &own, "csrf=0123456789abcdef0123456789abcdef");
    assert_eq!(status, 403, "and one with another token");
    let (status, _) = post(port, &format!("{action}?{with_token}"), &own, "");
    assert_eq!(status, 403, "and one with the token in the URL");
    // SAFETY-7243D60 N3: a page rebound to 127.0.0.1 sends its own name as Host and Origin.
    let rebound = format!("evil.example:{port}");
    let (status, _) = post_as(port, &rebound, &action, &format!("http://{rebound}"), &with_token);
    assert_eq!(status, 421, "a rebound name is not the page's");
    let (status, body) = http_get_as(port, &rebound, "/");
    assert_eq!(status, 421, "nor can it read the list: {body}");
    let (status, _) = http_get_as(port, &rebound, "/metrics");
    assert_eq!(status, 200, "scrapers reach /metrics under any name");
    assert_eq!(s.status("long")["state"], "running", "none of these changed anything");
    let (status, answer) = post(port, &action, &own, &with_token);
    assert_eq!(status, 303, "{answer}");
    s.wait_for_state("long", &["compensated"], Duration::from_secs(60));
    let (status, _) = post(port, &action, &own, &with_token);
    assert_eq!(status, 409, "nothing left to cancel");
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
}

#[test]
fn listening_beyond_loopback_the_page_has_no_buttons_unless_remote_actions_are_allowed() {
    let s = Scratch::new();
    let input = s.write_json("c.json", &json!({"steps": 1}));
    assert!(s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", "one-step"]).status.success());
    for (allow, buttons) in [(false, false), (true, true)] {
        let port = free_port();
        let mut args = vec!["--listen".to_string(), format!("0.0.0.0:{port}"), "--workers".into(), "1".into()];
        // The name this test reaches the page under (a wildcard bind has no name of its own).
        args.extend(["--page-host".into(), "127.0.0.1".into()]);
        if allow {
            args.push("--allow-remote-actions".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut d = s.spawn_daemon(&args, &[]);
        assert!(wait_until(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()));
        // A cancel page for any workflow exists only with actions on.
        let (status, page) = http_get(port, "/workflows/one-step/cancel");
        assert_eq!(status == 200, buttons, "allow-remote-actions {allow}: GET the confirmation answered {status}");
        let token = page.split(r#"name="csrf" value=""#).nth(1).and_then(|r| r.split('"').next());
        let form = format!("csrf={}", token.unwrap_or_default());
        let (status, _) = post(port, "/workflows/one-step/cancel", &format!("http://127.0.0.1:{port}"), &form);
        if !buttons {
            assert_eq!(status, 403, "no actions from beyond loopback");
        }
        assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    }
}

/// The list is opened when something needs attention: a workflow that failed and compensated
/// shows its error in its row (a template filter minijinja's core lacks once answered 500 here).
#[test]
fn the_list_draws_a_compensated_workflow_with_its_error() {
    let s = Scratch::new();
    let input = s.write_json("c.json", &json!({"steps": 3, "failAt": 2}));
    let out = s.cli(&["run", "canary", "--input", input.to_str().unwrap(), "--id", "fails"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let error = s.status("fails")["error"].as_str().unwrap_or_default().to_string();
    assert!(!error.is_empty(), "{}", s.status("fails"));
    let port = free_port();
    let mut d = s.spawn_daemon(&["--listen", &format!("127.0.0.1:{port}")], &[]);
    assert!(wait_until(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()));
    let (status, list) = http_get(port, "/");
    assert_eq!(status, 200, "{list}");
    assert!(list.contains(r#"data-id="fails" data-state="compensated""#), "{list}");
    let shown: String = error.chars().take(40).collect();
    // As minijinja escapes HTML.
    let escaped = shown
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;");
    assert!(list.contains(&format!(r#"<span class="error">{escaped}"#)), "{list}");
    let (status, page) = http_get(port, "/workflows/fails");
    assert_eq!(status, 200, "{page}");
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
}

/// The list and each workflow's page in every state a journal holds when someone opens the page
/// because something needs them — completed, compensated, failed, paused, a paused compensation,
/// compensation failed, running, queued behind its cluster — drawn by headless Chromium: each
/// row in its state with its error, each page answering 200 with its timeline, input and
/// journal; a pruned workflow's page says it is not in the journal (404, never 500). The search
/// by error text and by part of a cluster narrows the list. Screenshots of the list and of a
/// paused page are left in `target/test-output/status_page/`.
#[test]
fn every_state_draws_in_the_list_and_on_its_own_page_in_a_browser() {
    let e = AwsEnv::new();
    let canary = |name: &str, v: serde_json::Value| e.input(name, v);
    let c1 = canary("c1.json", json!({"steps": 2}));
    let fails = canary("f.json", json!({"steps": 3, "failAt": 2}));
    assert!(e.cli(&["run", "canary", "--input", &c1, "--id", "pruned-1"]).status.success());
    assert!(e.cli(&["prune", "--before", "0s"]).status.success());
    assert!(e.cli(&["run", "canary", "--input", &c1, "--id", "done-1"]).status.success());
    assert_eq!(e.cli(&["run", "canary", "--input", &fails, "--id", "undone-1"]).status.code(), Some(1));
    let kept = e.cli(&["run", "canary", "--input", &fails, "--id", "failed-1", "--no-rollback"]);
    assert_eq!(kept.status.code(), Some(1), "{}", stderr(&kept));
    // AWS refusing the credentials pauses a provision; a failure whose undo AWS then refuses
    // pauses the compensation; an undo AWS rejects for good fails it.
    let provision = |id: &str, refuse: &[(&str, &str)]| {
        let proxy = support::proxy::Proxy::start(e.moto.port);
        for (action, code) in refuse {
            proxy.fail_with(action, code, 1000);
        }
        let input = e.input(
            &format!("{id}.json"),
            json!({"name": id, "infraID": format!("{id}-abcde"), "region": "us-east-1", "zones": ["us-east-1a"],
                   "baseDomain": "example.com"}),
        );
        let out = e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", id]);
        assert_eq!(out.status.code(), Some(1), "{id}: {}", stderr(&out));
    };
    provision("paused-1", &[("CreateVpc", "UnauthorizedOperation")]);
    provision(
        "undo-paused-1",
        &[("CreateInternetGateway", "InvalidParameterValue"), ("DeleteVpc", "UnauthorizedOperation")],
    );
    provision(
        "undo-failed-1",
        &[("CreateInternetGateway", "InvalidParameterValue"), ("DeleteVpc", "InvalidParameterValue")],
    );
    let slow = canary("s.json", json!({"steps": 5, "stepMillis": 20_000, "cluster": "busy-cluster"}));
    assert!(e.cli(&["submit", "canary", "--input", &slow, "--id", "running-1"]).status.success());
    assert!(e.cli(&["submit", "canary", "--input", &slow, "--id", "queued-1"]).status.success());

    let port = free_port();
    let mut d = e.daemon_with(&e.proxy.endpoint(), &["--listen", &format!("127.0.0.1:{port}")]);
    assert!(wait_until(Duration::from_secs(30), || e.s.status("running-1")["state"] == "running"), "never ran");
    let expected = [
        ("done-1", "completed"),
        ("undone-1", "compensated"),
        ("failed-1", "failed"),
        ("paused-1", "paused"),
        ("undo-paused-1", "paused"),
        ("undo-failed-1", "compensation_failed"),
        ("running-1", "running"),
        ("queued-1", "pending"),
    ];
    for (id, state) in expected {
        assert_eq!(e.s.status(id)["state"], state, "{id}: {}", e.s.status(id));
    }
    let profile = tempfile::tempdir().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let list = dom(profile.path(), &format!("{base}/"));
    for (id, state) in expected {
        assert!(list.contains(&format!(r#"data-id="{id}" data-state="{state}""#)), "{id} {state}: {list}");
    }
    assert!(!list.contains("cannot draw") && !list.contains("pruned-1"), "{list}");
    assert_eq!(list.matches(r#"<span class="error">"#).count(), 5, "an error in each row that has one: {list}");
    for (id, state) in expected {
        let (status, page) = http_get(port, &format!("/workflows/{id}"));
        assert_eq!(status, 200, "{id}: {page}");
        assert!(page.contains(&format!(r#"id="state">{state}<"#)), "{id}: {page}");
        let timeline =
            if id == "queued-1" { r#"<p class="empty">no step has started yet"# } else { r#"class="timeline""# };
        assert!(page.contains(timeline) && page.contains(r#"<pre class="input">"#), "{id}: {page}");
        assert!(page.contains(r#"class="event" data-kind="submitted""#), "{id}'s journal: {page}");
    }
    let (status, page) = http_get(port, "/workflows/undo-paused-1");
    assert!(status == 200 && page.contains("compensation_started"), "the paused compensation's journal: {page}");
    let (status, gone) = http_get(port, "/workflows/pruned-1");
    assert_eq!(status, 404, "{gone}");
    assert!(gone.contains("no workflow pruned-1"), "{gone}");

    let refused = dom(profile.path(), &format!("{base}/?error=unauthorized"));
    let shown: Vec<&str> =
        expected.iter().map(|(id, _)| *id).filter(|id| refused.contains(&format!(r#"data-id="{id}""#))).collect();
    assert_eq!(shown, ["paused-1", "undo-paused-1"], "the search by error text, any case");
    let busy = dom(profile.path(), &format!("{base}/?cluster=busy"));
    assert!(
        busy.contains(r#"data-id="running-1""#)
            && busy.contains(r#"data-id="queued-1""#)
            && !busy.contains(r#"data-id="done-1""#)
    );

    screenshot(profile.path(), "list-every-state.png", "1280,900", &format!("{base}/"));
    screenshot(profile.path(), "paused.png", "1280,900", &format!("{base}/workflows/paused-1"));
    e.cli(&["cancel", "running-1"]);
    e.cli(&["cancel", "queued-1"]);
    assert_eq!(terminate(&mut d, Duration::from_secs(60)).code(), Some(0), "{}", e.s.daemon_log());
}

/// A 3-zone provision at 150 ms a call: its page's timeline draws the zones' subnets, addresses
/// and NAT gateways side by side (their bars overlap in time), each step's first start and last
/// end in the step table. The screenshot is `docs/timeline.png`'s source.
#[test]
fn a_three_zone_provisions_timeline_shows_its_zones_overlapping() {
    let e = AwsEnv::new();
    e.proxy.set_latency(Duration::from_millis(150));
    let zones = ["us-east-1a", "us-east-1b", "us-east-1c"];
    let input = e.input(
        "p.json",
        json!({"name": "tl", "infraID": "tl-abcde", "region": "us-east-1", "zones": zones, "baseDomain": "example.com"}),
    );
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "tl"]));
    let port = free_port();
    let mut d = e.daemon_with(&e.proxy.endpoint(), &["--listen", &format!("127.0.0.1:{port}")]);
    assert!(wait_until(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()));
    let (status, page) = http_get(port, "/workflows/tl");
    assert_eq!(status, 200, "{page}");
    // A lane's `data-first-start` and `data-last-end` (ms from the run's first start).
    let span = |key: &str| -> (i64, i64) {
        let at =
            page.find(&format!(r#"class="lane" data-key="{key}""#)).unwrap_or_else(|| panic!("no lane {key}: {page}"));
        let attr = |name: &str| -> i64 {
            let from = page[at..].find(&format!(r#"{name}=""#)).unwrap() + at + name.len() + 2;
            page[from..].split('"').next().unwrap().parse().unwrap()
        };
        (attr("data-first-start"), attr("data-last-end"))
    };
    for role in ["public-subnet", "eip", "nat-gateway"] {
        let spans: Vec<(i64, i64)> = zones.iter().map(|z| span(&format!("zone/{z}/{role}"))).collect();
        let (latest_start, earliest_end) =
            (spans.iter().map(|s| s.0).max().unwrap(), spans.iter().map(|s| s.1).min().unwrap());
        assert!(latest_start < earliest_end, "{role}: the three zones' bars overlap: {spans:?}");
    }
    // Each step's first start and last end in the table (ISO times end in Z), as many as steps.
    let rows: Vec<&str> = page.split(r#"<tr class="step""#).skip(1).map(|r| r.split("</tr>").next().unwrap()).collect();
    assert!(rows.len() > 20, "{page}");
    for row in rows {
        assert_eq!(row.matches("Z</td>").count(), 2, "each step's first start and last end: {row}");
    }
    let profile = tempfile::tempdir().unwrap();
    screenshot(profile.path(), "timeline.png", "1280,1000", &format!("http://127.0.0.1:{port}/workflows/tl"));
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
}

/// Past 500 workflows the list pages: the first page shows the 500 last changed and links to the
/// older ones, which the second page shows, keeping the filter.
#[test]
fn the_list_pages_past_five_hundred_rows_keeping_its_filters() {
    let s = Scratch::new();
    // The first holds its cluster for a minute: the others wait behind it, so the list does not
    // change between two pages.
    let first = s.write_json("f.json", &json!({"steps": 1, "stepMillis": 60_000, "cluster": "one-at-a-time"}));
    assert!(s.cli(&["submit", "canary", "--input", first.to_str().unwrap(), "--id", "p-first"]).status.success());
    let input = s.write_json("c.json", &json!({"steps": 1, "cluster": "one-at-a-time"}));
    for i in 0..504 {
        let out = s.cli(&["submit", "canary", "--input", input.to_str().unwrap(), "--id", &format!("p-{i:03}")]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let port = free_port();
    let mut d = s.spawn_daemon(&["--listen", &format!("127.0.0.1:{port}")], &[]);
    // Once the first runs, nothing changes until the pages are read (a claim is a change, and
    // the list is sorted by the last one).
    assert!(wait_until(Duration::from_secs(30), || s.status("p-first")["state"] == "running"));
    assert!(wait_until(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()));
    let (status, first) = http_get(port, "/?cluster=one-at");
    assert_eq!(status, 200);
    assert_eq!(first.matches(r#"<tr class="workflow""#).count(), 500, "{first}");
    assert!(first.contains("505 workflows") && first.contains("1–500 shown"), "{first}");
    assert!(first.contains(r#"href="/?cluster=one-at&amp;offset=500">older<"#), "{first}");
    let (_, second) = http_get(port, "/?cluster=one-at&offset=500");
    let ids: Vec<&str> =
        second.split(r#"<tr class="workflow" data-id=""#).skip(1).filter_map(|r| r.split('"').next()).collect();
    assert_eq!(ids.len(), 5, "{second}");
    assert!(ids.iter().all(|id| !first.contains(&format!(r#"data-id="{id}""#))), "no row on both pages: {ids:?}");
    assert!(second.contains(r#"href="/?cluster=one-at&amp;offset=0">newer<"#), "{second}");
    // The minute-long step is not waited for: the journal is the test's own.
    d.kill().unwrap();
    d.wait().unwrap();
}
