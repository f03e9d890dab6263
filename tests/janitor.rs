//! The account janitor on moto: `expiresIn` stamps one `expirationDate` on what a workflow made;
//! `sweep` classes clusters made as HyperShift's CLI would (future, past, protected, busy, no
//! date) and submits exactly one teardown, never a second — killed at every AWS call and at
//! every journal write; the daemon's scheduled sweep removes the expired cluster and nothing
//! else; a protected cluster's teardown is refused, and a running one pauses.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::hypershift::{self, Cut};
use support::inventory::Inventory;
use support::moto::aws_env;
use support::proxy::KillAt;
use support::*;

const PROTECT: &str = "infraflow.io/do-not-delete";

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// RFC 3339 in UTC of `t`, through `date` (an implementation that is not the one under test).
fn rfc3339(t: i64) -> String {
    let out = Command::new("date").args(["-u", "-d", &format!("@{t}"), "+%Y-%m-%dT%H:%M:%SZ"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn tag(e: &Env, id: &str, key: &str, value: &str) {
    let t = aws_sdk_ec2::types::Tag::builder().key(key).value(value).build();
    e.c.block_on(e.c.ec2.create_tags().resources(id).tags(t).send()).unwrap();
}

fn untag(e: &Env, id: &str, key: &str) {
    let t = aws_sdk_ec2::types::Tag::builder().key(key).build();
    e.c.block_on(e.c.ec2.delete_tags().resources(id).tags(t).send()).unwrap();
}

/// A cluster as HyperShift's CLI leaves it after its first zone's subnets (ownership tag + Name).
fn hypershift_cluster(e: &Env, infra: &str) -> hypershift::Made {
    hypershift::make(&e.c, infra, &["us-east-1a"], Cut::AfterFirstZoneSubnets)
}

/// `infraflow ARGS` on `journal`, through the env's proxy.
fn cli_in(e: &Env, journal: &Scratch, args: &[&str]) -> std::process::Output {
    let env = aws_env(&e.proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    journal.cli_env(args, &env)
}

fn classes(swept: &Value) -> BTreeMap<String, String> {
    swept
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["infraID"].as_str().unwrap().to_string(), s["class"].as_str().unwrap().to_string()))
        .collect()
}

/// Every workflow of a journal: (id, workflow, cluster, state).
fn workflows(journal: &Scratch) -> Vec<(String, String, String, String)> {
    let out = journal.cli(&["status", "--json"]);
    if !out.status.success() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = v.as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|w| {
            let s = |k: &str| w[k].as_str().unwrap_or_default().to_string();
            (s("id"), s("workflow"), s("cluster"), s("state"))
        })
        .collect()
}

/// Five clusters: a future date, a past one, a past one protected (on a subnet), a past one
/// with an unfinished (paused) workflow in `e`'s journal, and one without a date; plus a VPC of
/// nobody's cluster. Returns the VPC ids by infraID.
fn five_clusters(e: &Env) -> BTreeMap<&'static str, String> {
    let mut vpcs = BTreeMap::new();
    for infra in ["jan-future", "jan-past", "jan-protected", "jan-active", "jan-none"] {
        let made = hypershift_cluster(e, infra);
        vpcs.insert(infra, made["vpc"].clone());
        let date = match infra {
            "jan-future" => Some(rfc3339(now() + 86_400)),
            "jan-none" => None,
            _ => Some(rfc3339(now() - 3_600)),
        };
        if let Some(d) = date {
            tag(e, &made["vpc"], "expirationDate", &d);
        }
        if infra == "jan-protected" {
            tag(e, &made["public-subnet/us-east-1a"], PROTECT, "");
        }
    }
    e.c.create_vpc("10.9.0.0/16");
    // jan-active: a provision of it paused on expired credentials at its first read (nothing made).
    let input = e.input(
        "active.json",
        json!({"name": "active", "infraID": "jan-active", "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"}),
    );
    e.proxy.fail_with("DescribeAvailabilityZones", "ExpiredToken", 1000);
    let out = e.cli(&["run", "provision-infra", "--input", &input, "--id", "active"]);
    e.proxy.clear_fail_with();
    assert_eq!(e.s.status("active")["state"], "paused", "{}", stderr(&out));
    vpcs
}

#[test]
fn sweep_classes_five_clusters_submits_one_teardown_once_and_the_daemon_removes_only_that_cluster() {
    let e = Env::new();
    let vpcs = five_clusters(&e);
    let before = workflows(&e.s);

    let dry = ok(&e.cli(&["sweep", "--region", "us-east-1", "--dry-run", "--json"]));
    let expected: BTreeMap<String, String> = [
        ("jan-active", "active"),
        ("jan-future", "unexpired"),
        ("jan-none", "unexpired"),
        ("jan-past", "expired"),
        ("jan-protected", "protected"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(classes(&dry), expected, "{dry:#}");
    let past = dry.as_array().unwrap().iter().find(|s| s["infraID"] == "jan-past").unwrap();
    assert!(past["expirationDate"].is_string() && past["reason"].as_str().unwrap().contains("expired at"), "{past}");
    assert_eq!(past["resources"]["vpc"], 1, "{past}");
    assert!(past["resources"]["subnet"].as_u64().unwrap() >= 2, "{past}");
    let protected = dry.as_array().unwrap().iter().find(|s| s["infraID"] == "jan-protected").unwrap();
    assert!(protected["reason"].as_str().unwrap().contains(PROTECT), "{protected}");
    assert_eq!(workflows(&e.s), before, "--dry-run journals nothing");

    let first = e.cli(&["sweep", "--region", "us-east-1"]);
    let ids: Vec<String> = stdout(&first).lines().map(str::to_string).collect();
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert_eq!(ids.len(), 1, "one teardown: {ids:?}");
    let teardowns: Vec<_> = workflows(&e.s).into_iter().filter(|w| w.1 == "teardown").collect();
    assert_eq!(teardowns.len(), 1);
    assert_eq!((teardowns[0].0.as_str(), teardowns[0].2.as_str()), (ids[0].as_str(), "jan-past"));
    let again = e.cli(&["sweep", "--region", "us-east-1"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(stdout(&again), "", "a second sweep while it is queued submits nothing");
    assert!(stderr(&again).contains("active"), "{}", stderr(&again));

    // The daemon's schedule: the queued teardown runs, its sweeps submit nothing more.
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut d = e
        .daemon_with(&e.proxy.endpoint(), &["--sweep-every", "2s", "--sweep-region", "us-east-1", "--listen", &listen]);
    let st = e.s.wait_for_state(&ids[0], &["completed", "paused", "failed"], Duration::from_secs(120));
    assert_eq!(st["state"], "completed", "{st:#}");
    assert!(wait_until(Duration::from_secs(20), || sample(
        &http_get(port, "/metrics").1,
        "infraflow_sweep_clusters{class=\"expired\"}"
    ) == 0.0));
    let (code, page) = http_get(port, "/");
    assert_eq!(code, 200);
    assert!(page.contains("the last sweep") && page.contains("jan-protected"), "{page}");
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0), "{}", e.s.daemon_log());

    assert_eq!(Inventory::read(&e.c, "jan-past").total(), 0, "{:?}", Inventory::read(&e.c, "jan-past").counts());
    for infra in ["jan-future", "jan-protected", "jan-active", "jan-none"] {
        let inv = Inventory::read(&e.c, infra);
        assert_eq!(inv.vpcs.len(), 1, "{infra} untouched: {:?}", inv.counts());
        assert!(inv.subnets.len() >= 2, "{infra} untouched: {:?}", inv.counts());
        assert!(vpcs.contains_key(infra));
    }
    let teardowns = workflows(&e.s).into_iter().filter(|w| w.1 == "teardown").count();
    assert_eq!(teardowns, 1, "the daemon's sweeps submitted nothing more");
    let after = ok(&e.cli(&["sweep", "--region", "us-east-1", "--dry-run", "--json"]));
    assert!(!classes(&after).contains_key("jan-past"), "a sweep after it completed finds nothing: {after:#}");
}

#[test]
fn a_protected_clusters_teardown_is_refused_at_submit_and_a_running_one_pauses() {
    let e = Env::new();
    let made = hypershift_cluster(&e, "prot-abcde");
    let igw = made["internet-gateway"].clone();
    // Someone else's protected VPC: EC2's tag index lists a protected resource, so the check
    // before journaling reads every kind of the cluster's.
    let theirs = e.c.block_on(e.c.ec2.create_vpc().cidr_block("10.9.0.0/16").send()).unwrap();
    let theirs = theirs.vpc().unwrap().vpc_id().unwrap().to_string();
    tag(&e, &theirs, PROTECT, "yes");
    tag(&e, &igw, PROTECT, "yes");
    let input = e.input("td.json", json!({"infraID": "prot-abcde", "region": "us-east-1"}));
    for verb in ["run", "submit"] {
        let out = e.cli(&[verb, "teardown", "--input", &input]);
        assert_eq!(out.status.code(), Some(2), "{verb}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(&igw) && err.contains(PROTECT), "{verb}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    assert!(workflows(&e.s).is_empty(), "nothing journaled");
    let dry = ok(&e.cli(&["sweep", "--region", "us-east-1", "--json"]));
    assert_eq!(classes(&dry)["prot-abcde"], "protected");
    assert!(workflows(&e.s).is_empty(), "sweep never submits a protected cluster's teardown");

    // Submitted while unprotected, protected before it runs: it pauses naming the resource.
    untag(&e, &igw, PROTECT);
    let id = stdout(&e.cli(&["submit", "teardown", "--input", &input])).trim().to_string();
    tag(&e, &igw, PROTECT, "yes");
    let mut d = e.daemon_at(&e.proxy.endpoint());
    let st = e.s.wait_for_state(&id, &["completed", "paused", "failed"], Duration::from_secs(60));
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    assert_eq!(st["state"], "paused", "{st:#}");
    assert!(st.to_string().contains(&igw), "{st:#}");
    assert_eq!(Inventory::read(&e.c, "prot-abcde").vpcs.len(), 1, "nothing deleted");
    untag(&e, &igw, PROTECT);
    let out = e.cli(&["retry", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(Inventory::read(&e.c, "prot-abcde").total(), 0);
    assert!(e.c.block_on(e.c.ec2.describe_vpcs().vpc_ids(&theirs).send()).is_ok(), "theirs untouched");

    // Nothing in EC2 protected: the check reads EC2's tag index once, not each EC2 kind.
    untag(&e, &theirs, PROTECT);
    e.proxy.reset_counts();
    let out = e.cli(&["submit", "teardown", "--input", &input]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let counts = e.proxy.counts();
    assert!(counts.get("DescribeTags").copied().unwrap_or(0) >= 1, "{counts:?}");
    for kind in ["DescribeInternetGateways", "DescribeSubnets", "DescribeInstances", "DescribeNetworkInterfaces"] {
        assert_eq!(counts.get(kind), None, "{kind}: {counts:?}");
    }
}

#[test]
fn expires_in_puts_one_expiration_date_on_everything_the_workflows_made() {
    let e = Env::new();
    let input = e.input(
        "p.json",
        json!({"name": "exp", "infraID": "exp-abcde", "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com", "expiresIn": "6h"}),
    );
    let t0 = now();
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "exp"]));
    let iam = e.input(
        "iam.json",
        json!({"infraID": "exp-abcde", "region": "us-east-1", "oidcBucket": "oidc", "expiresIn": "6h"}),
    );
    ok(&e.cli(&["run", "create-iam", "--input", &iam, "--id", "exp-iam"]));
    let t1 = now();
    let inv = Inventory::read(&e.c, "exp-abcde");
    let mut dates = std::collections::BTreeSet::new();
    let zones: std::collections::BTreeSet<String> = inv.zones.iter().map(|z| z.0.clone()).collect();
    for id in inv.ids().difference(&zones) {
        let stamped: Vec<String> =
            inv.tags_of(id).into_iter().filter(|(k, _)| k == "expirationDate").map(|(_, v)| v).collect();
        assert_eq!(stamped.len(), 1, "{id}: {stamped:?}");
        dates.insert(stamped[0].clone());
    }
    assert!(inv.total() >= 8, "{:?}", inv.counts());
    for zone in [&out["privateZoneID"], &out["localZoneID"]] {
        let zone = zone.as_str().unwrap();
        let tags = e.c.block_on(
            e.c.r53
                .list_tags_for_resource()
                .resource_type(aws_sdk_route53::types::TagResourceType::Hostedzone)
                .resource_id(zone)
                .send(),
        );
        let tags = tags.unwrap();
        let set = tags.resource_tag_set().unwrap().tags();
        dates.extend(
            set.iter().filter(|t| t.key() == Some("expirationDate")).filter_map(|t| t.value().map(str::to_string)),
        );
    }
    let roles = e.c.block_on(e.c.iam.list_roles().send()).unwrap();
    let mut role_dates = 0;
    for r in roles.roles().iter().filter(|r| r.role_name().starts_with("exp-abcde-")) {
        let got = e.c.block_on(e.c.iam.get_role().role_name(r.role_name()).send()).unwrap();
        let tags = got.role().unwrap().tags();
        let stamped: Vec<_> =
            tags.iter().filter(|t| t.key() == "expirationDate").map(|t| t.value().to_string()).collect();
        assert_eq!(stamped.len(), 1, "{}: {stamped:?}", r.role_name());
        role_dates += 1;
        dates.insert(stamped[0].clone());
    }
    assert!(role_dates >= 8, "every role of create-iam");
    // Two submissions (provision, create-iam), each its own date: each within the run's window.
    for d in &dates {
        let t = Command::new("date").args(["-u", "-d", d, "+%s"]).output().unwrap();
        let t: i64 = String::from_utf8(t.stdout).unwrap().trim().parse().unwrap();
        assert!((t0 + 21_600 - 2..=t1 + 21_600 + 2).contains(&t), "{d} is not 6h after the run");
    }
    assert!(dates.len() <= 2, "one date per workflow: {dates:?}");
    let bad = e.input(
        "bad.json",
        json!({"name": "exp", "region": "us-east-1", "baseDomain": "example.com", "expiresIn": "6 weeks"}),
    );
    let out = e.cli(&["submit", "provision-infra", "--input", &bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("expiresIn"), "{}", stderr(&out));
}

/// Kill -9 of `sweep` at every AWS call (before it reaches AWS and after AWS answered) and at
/// every write to its journal: whatever was left, a sweep run again submits the expired
/// cluster's teardown exactly once, and never one of another class.
#[test]
fn sweep_killed_at_every_aws_call_and_journal_write_never_submits_twice_nor_another_class() {
    let e = Env::new();
    for (infra, offset) in [("kill-past", -3_600), ("kill-future", 86_400), ("kill-prot", -3_600)] {
        let made = hypershift_cluster(&e, infra);
        tag(&e, &made["vpc"], "expirationDate", &rfc3339(now() + offset));
        if infra == "kill-prot" {
            tag(&e, &made["vpc"], PROTECT, "");
        }
    }
    let check = |journal: &Scratch, what: &str| {
        let out = cli_in(&e, journal, &["sweep", "--region", "us-east-1"]);
        assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
        let all = workflows(journal);
        assert_eq!(all.len(), 1, "{what}: exactly one workflow: {all:?}");
        assert_eq!((all[0].1.as_str(), all[0].2.as_str()), ("teardown", "kill-past"), "{what}: {all:?}");
    };
    e.proxy.reset_counts();
    let clean = Scratch::new();
    check(&clean, "a clean sweep");
    let calls = e.proxy.total();
    assert!(calls >= 10, "the census reads every kind: {calls}");
    let mut fired = 0;
    for call in 1..=calls {
        for after_aws_acts in [false, true] {
            let journal = Scratch::new();
            let env = aws_env(&e.proxy.endpoint());
            let mut c = Command::new(infraflow());
            c.arg("--db").arg(journal.db()).args(["sweep", "--region", "us-east-1"]);
            c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
            for (k, v) in env {
                c.env(k, v);
            }
            let mut child = c.spawn().unwrap();
            e.proxy.kill_at(KillAt { call, after_aws_acts, pid: child.id() });
            let status = child.wait().unwrap();
            if e.proxy.kill_fired() {
                fired += 1;
                assert!(!status.success());
            }
            check(&journal, &format!("killed at call {call} (after AWS acted: {after_aws_acts})"));
        }
    }
    assert!(fired >= calls as usize, "kills fired: {fired} of {}", calls * 2);
    println!("sweep: {calls} AWS calls, {fired} kills fired");

    // At the journal: SIGKILL at the n-th write (pwrite/fsync) the sweep makes, for every n
    // until a sweep gets through (journal creation and the teardown's submission among them).
    if !Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success()) {
        panic!("strace (the fault injector of this test) is not installed: .ci/run installs it");
    }
    let mut n = 1;
    loop {
        let journal = Scratch::new();
        let env = aws_env(&e.proxy.endpoint());
        let mut c = Command::new("strace");
        c.args(["-f", "-o", "/dev/null", "-e", "trace=pwrite64,fsync,fdatasync"]);
        c.arg("-e").arg(format!("inject=pwrite64,fsync,fdatasync:signal=SIGKILL:when={n}"));
        c.arg(infraflow()).arg("--db").arg(journal.db()).args(["sweep", "--region", "us-east-1"]);
        c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        let status = c.status().unwrap();
        check(&journal, &format!("killed at journal write {n}"));
        if status.success() {
            break;
        }
        n += 1;
        assert!(n < 400, "the sweep never got through");
    }
    assert!(n > 1, "no journal write was killed");
    println!("sweep: killed at each of its first {} journal writes", n - 1);
}
