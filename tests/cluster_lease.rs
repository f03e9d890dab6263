//! One writer per cluster across journals: the cluster lease in S3 (`--lock-bucket`), on moto
//! behind the test proxy (which serialises S3's conditional writes, as AWS does and moto does
//! not). Two journals provisioning one cluster at the same moment make one of everything, the
//! second waiting and adopting; a holder killed -9 is taken over only after its lease's time
//! to live; a store that ignores `If-None-Match` is refused before anything acts.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::aws::AwsEnv as Env;
use support::inventory::Inventory;
use support::moto::aws_env;
use support::*;

const BUCKET: &str = "infraflow-locks";

fn input(e: &Env, infra: &str) -> String {
    e.input(
        &format!("{infra}.json"),
        json!({"name": infra.split('-').next().unwrap(), "infraID": infra, "region": "us-east-1",
               "zones": ["us-east-1a"], "baseDomain": "example.com"}),
    )
}

/// `infraflow --lock-bucket … ARGS` on `journal` through the env's proxy, in the background.
fn spawn_locked(e: &Env, journal: &Scratch, args: &[&str], ttl: &str) -> Child {
    spawn_locked_at(&e.proxy.endpoint(), journal, args, ttl)
}

/// `spawn_locked` through `endpoint` (a proxy of the test's own).
fn spawn_locked_at(endpoint: &str, journal: &Scratch, args: &[&str], ttl: &str) -> Child {
    let mut c = Command::new(infraflow());
    c.arg("--db").arg(journal.db()).args(["--lock-bucket", BUCKET, "--lock-ttl", ttl]).args(args);
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c.envs(aws_env(endpoint));
    c.spawn().unwrap()
}

fn finish(child: Child) -> std::process::Output {
    child.wait_with_output().unwrap()
}

fn lock_bucket(e: &Env) {
    e.c.block_on(e.c.s3.create_bucket().bucket(BUCKET).send()).unwrap();
}

/// The lease objects in the bucket (the self-test's probes aside).
fn leases(e: &Env) -> Vec<String> {
    let out = e.c.block_on(e.c.s3.list_objects_v2().bucket(BUCKET).send()).unwrap();
    out.contents().iter().filter_map(|o| o.key()).filter(|k| !k.contains("/.self-test/")).map(str::to_string).collect()
}

/// The lease records left in the bucket: (key, holder's workflow, holder's journal). A release
/// is best effort (a record left expires after its time to live), so the tests require only
/// that no record outlives its workflow as anyone else's.
fn leftover_leases(e: &Env) -> Vec<(String, String, String)> {
    leases(e)
        .into_iter()
        .map(|key| {
            let got = e.c.block_on(e.c.s3.get_object().bucket(BUCKET).key(&key).send()).unwrap();
            let body = e.c.block_on(got.body.collect()).unwrap().into_bytes();
            let record: Value = serde_json::from_slice(&body).unwrap();
            let field = |f: &str| record["holder"][f].as_str().unwrap_or_default().to_string();
            (key, field("workflow"), field("journal"))
        })
        .collect()
}

fn changes_outside_s3(counts: &std::collections::BTreeMap<String, u32>) -> u32 {
    let s3 = ["PutObject", "DeleteObject", "GetObject", "CreateBucket", "ListObjects"];
    counts
        .iter()
        .filter(|(a, _)| support::chain::is_change(a) && !s3.contains(&a.as_str()) && *a != "AssumeRole")
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn two_journals_provisioning_one_cluster_at_once_make_one_of_each_kind_and_the_second_adopts() {
    let e = Env::new();
    lock_bucket(&e);
    let b = Scratch::new();
    const RUNS: usize = 20;
    for i in 0..RUNS {
        let infra = format!("lk{i}-abcde");
        let p = input(&e, &infra);
        let args = ["run", "provision-infra", "--input", p.as_str(), "--id", "p"];
        // `--id p` in both journals: the same operator's command, run from two laptops.
        let args: Vec<&str> = args.iter().map(|a| if *a == "p" { infra.as_str() } else { a }).collect();
        let (first, second) = (spawn_locked(&e, &e.s, &args, "10s"), spawn_locked(&e, &b, &args, "10s"));
        let (first, second) = (finish(first), finish(second));
        for out in [&first, &second] {
            assert!(out.status.success(), "run {i}: {}", stderr(out));
        }
        let (a, b_out): (Value, Value) =
            (serde_json::from_str(&stdout(&first)).unwrap(), serde_json::from_str(&stdout(&second)).unwrap());
        assert_eq!(a["vpcID"], b_out["vpcID"], "run {i}: both name one VPC");
        Inventory::read(&e.c, &infra).assert_provisioned(&e.c, 1, 1, infra.split('-').next().unwrap(), "example.com");
        let waited = [&first, &second].iter().filter(|o| stderr(o).contains("waits for: workflow")).count();
        assert!(waited >= 1, "run {i}: one of them waited for the other: {}\n{}", stderr(&first), stderr(&second));
    }
    let counts = e.proxy.counts();
    assert_eq!(counts.get("CreateVpc"), Some(&(RUNS as u32)), "one VPC a cluster: {counts:?}");
    assert_eq!(counts.get("CreateNatGateway"), Some(&(RUNS as u32)), "{counts:?}");
    for (key, workflow, _) in leftover_leases(&e) {
        assert!(key.ends_with(&format!("/{workflow}")), "{key} left as {workflow}'s");
    }
}

#[test]
fn a_holder_killed_mid_provision_is_taken_over_only_after_its_lease_runs_out_and_the_cluster_converges() {
    let e = Env::new();
    lock_bucket(&e);
    let b = Scratch::new();
    let p = input(&e, "kh-abcde");
    let args = ["run", "provision-infra", "--input", p.as_str(), "--id", "kh"];
    let ttl = Duration::from_secs(6);
    let mut holder = spawn_locked(&e, &e.s, &args, "6s");
    // Killed once it made the VPC: the lease is held, the cluster half made.
    assert!(
        wait_until(Duration::from_secs(60), || e.proxy.counts().get("CreateSubnet").is_some()),
        "the holder never got as far as its subnets"
    );
    kill9(&mut holder);
    let killed_at = Instant::now();
    let before = changes_outside_s3(&e.proxy.counts());
    assert_eq!(leases(&e).len(), 1, "the killed holder's lease stands");
    let other = spawn_locked(&e, &b, &args, "6s");
    // The first change the other journal makes outside S3, and when.
    let mut first_change = None;
    let mut other = Some(other);
    while let Some(child) = other.as_mut() {
        if first_change.is_none() && changes_outside_s3(&e.proxy.counts()) > before {
            first_change = Some(killed_at.elapsed());
        }
        if child.try_wait().unwrap().is_some() {
            let out = finish(other.take().unwrap());
            assert!(out.status.success(), "{}", stderr(&out));
            assert!(stderr(&out).contains("waits for: workflow kh of journal"), "{}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let first_change = first_change.expect("the other journal finished the cluster");
    assert!(
        first_change >= ttl,
        "the other journal changed AWS {first_change:?} after the kill, inside the lease's {ttl:?}"
    );
    Inventory::read(&e.c, "kh-abcde").assert_provisioned(&e.c, 1, 1, "kh", "example.com");
    for (key, _, journal) in leftover_leases(&e) {
        assert_eq!(journal, b.db().display().to_string(), "{key} left as the killed holder's");
    }
}

/// Another journal's live holder (its record in the bucket, standing for an hour): a workflow
/// waits for it no longer than `--wait-limit`, then pauses naming the holder and the lease,
/// having changed nothing; once the holder is gone, `retry` takes the lease and provisions.
#[test]
fn a_workflow_waits_for_a_live_holder_no_longer_than_its_wait_limit_then_pauses_naming_it() {
    let e = Env::new();
    lock_bucket(&e);
    let key = "infraflow/leases/123456789012/us-east-1/wl-abcde";
    let theirs = json!({"holder": {"journal": "/home/op/other.db", "workflow": "theirs", "creator": "theirs@0193",
                        "host": "bastion"},
                        "ttl_ms": 3_600_000, "written_at_ms": 0, "serial": 1});
    let put = e.c.s3.put_object().bucket(BUCKET).key(key).body(theirs.to_string().into_bytes().into());
    e.c.block_on(put.send()).unwrap();
    let p = input(&e, "wl-abcde");
    let started = Instant::now();
    let args = ["--wait-limit", "3s", "run", "provision-infra", "--input", &p, "--id", "ours"];
    let out = finish(spawn_locked(&e, &e.s, &args, "10s"));
    let waited = started.elapsed();
    assert!(!out.status.success(), "it ran though the cluster is held: {}", stderr(&out));
    let st = e.s.status("ours");
    assert_eq!(st["state"], "paused", "{st}");
    let why = st["error"].as_str().unwrap_or_default();
    assert!(why.contains("held by workflow theirs of journal /home/op/other.db on bastion for over 3 s"), "{why}");
    assert!(why.contains(&format!("s3://{BUCKET}/{key}")), "{why}");
    assert!(stderr(&out).contains("workflow theirs of journal"), "{}", stderr(&out));
    assert!(waited >= Duration::from_secs(3), "paused after {waited:?}, before its limit");
    assert!(e.s.history("ours").iter().any(|ev| ev.to_string().contains("\"waiting\"")), "its wait is on record");
    assert_eq!(changes_outside_s3(&e.proxy.counts()), 0, "nothing changed: {:?}", e.proxy.counts());
    // The holder's record is theirs still: a pause takes nothing over.
    assert_eq!(leftover_leases(&e), vec![(key.to_string(), "theirs".to_string(), "/home/op/other.db".to_string())]);
    // The holder done (its record released), the retry provisions.
    e.c.block_on(e.c.s3.delete_object().bucket(BUCKET).key(key).send()).unwrap();
    let out = finish(spawn_locked(&e, &e.s, &["retry", "ours"], "10s"));
    assert!(out.status.success(), "{}", stderr(&out));
    e.s.wait_for_state("ours", &["completed"], Duration::from_secs(60));
    Inventory::read(&e.c, "wl-abcde").assert_provisioned(&e.c, 1, 1, "wl", "example.com");
    assert!(leases(&e).is_empty(), "released: {:?}", leases(&e));
}

#[test]
fn a_store_that_ignores_if_none_match_is_refused_before_anything_acts() {
    let e = Env::new();
    lock_bucket(&e);
    e.proxy.ignore_conditions(true);
    let p = input(&e, "ig-abcde");
    let out = finish(spawn_locked(&e, &e.s, &["run", "provision-infra", "--input", &p, "--id", "ig"], "10s"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("ignores If-None-Match"), "{err}");
    assert_eq!(changes_outside_s3(&e.proxy.counts()), 0, "nothing changed: {:?}", e.proxy.counts());
    assert!(!e.s.db().exists(), "nothing journaled");
}

/// SAFETY-A7937A6 G5: a store that honours `If-None-Match` but drops `If-Match` would let a
/// lapsed holder's release delete its successor's record: refused by the proof too.
#[test]
fn a_store_that_ignores_if_match_is_refused_before_anything_acts() {
    let e = Env::new();
    lock_bucket(&e);
    e.proxy.ignore_if_match(true);
    let p = input(&e, "im-abcde");
    let out = finish(spawn_locked(&e, &e.s, &["run", "provision-infra", "--input", &p, "--id", "im"], "10s"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("ignores If-Match"), "{err}");
    assert_eq!(changes_outside_s3(&e.proxy.counts()), 0, "nothing changed: {:?}", e.proxy.counts());
    assert!(!e.s.db().exists(), "nothing journaled");
    // The same store honouring it again passes: the proof left its probe as it was.
    e.proxy.ignore_if_match(false);
    let out = finish(spawn_locked(&e, &e.s, &["run", "provision-infra", "--input", &p, "--id", "im"], "10s"));
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_sweep_in_one_journal_classes_a_cluster_another_journal_holds_active_and_submits_no_teardown() {
    let e = Env::new();
    lock_bucket(&e);
    let b = Scratch::new();
    let p = input(&e, "sw-abcde");
    let made = finish(spawn_locked(&e, &b, &["run", "provision-infra", "--input", &p, "--id", "first"], "10s"));
    assert!(made.status.success(), "{}", stderr(&made));
    let vpc = serde_json::from_str::<Value>(&stdout(&made)).unwrap()["vpcID"].as_str().unwrap().to_string();
    // Expired long ago, by its anchor's date.
    let past = aws_sdk_ec2::types::Tag::builder().key("expirationDate").value("2020-01-01T00:00:00Z").build();
    e.c.block_on(e.c.ec2.create_tags().resources(&vpc).tags(past).send()).unwrap();
    // Journal B runs the cluster's provision again (it converges what drifted) and holds the
    // lease while AWS throttles its VPC lookups, until the sweep is done.
    let slow = support::proxy::Proxy::start(e.moto.port);
    slow.fail_with("DescribeVpcs", "RequestLimitExceeded", 1_000_000);
    let again =
        spawn_locked_at(&slow.endpoint(), &b, &["run", "provision-infra", "--input", &p, "--id", "again"], "10s");
    assert!(wait_until(Duration::from_secs(30), || leases(&e).len() == 1), "journal B holds the lease");
    let env = aws_env(&e.proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let sweep = e.s.cli_env(&["--lock-bucket", BUCKET, "sweep", "--region", "us-east-1", "--json"], &env);
    assert!(sweep.status.success(), "{}", stderr(&sweep));
    let swept: Value = serde_json::from_str(&stdout(&sweep)).unwrap();
    let this = swept.as_array().unwrap().iter().find(|s| s["infraID"] == "sw-abcde").expect("swept").clone();
    assert_eq!(this["class"], "active", "{swept:#}");
    assert!(this["reason"].as_str().unwrap().contains("held by workflow again of journal"), "{this}");
    assert!(this.get("teardown").is_none(), "no teardown submitted: {this}");
    assert!(slow.counts().get("DescribeVpcs").is_some(), "journal B was held up where meant");
    slow.clear_fail_with();
    let again = finish(again);
    assert!(again.status.success(), "{}", stderr(&again));
    Inventory::read(&e.c, "sw-abcde").assert_provisioned(&e.c, 1, 1, "sw", "example.com");
    // Without the lease (B finished), the same sweep classes it expired: the lease decided.
    let dry = e.s.cli_env(&["--lock-bucket", BUCKET, "sweep", "--region", "us-east-1", "--dry-run", "--json"], &env);
    let dry: Value = serde_json::from_str(&stdout(&dry)).unwrap();
    let this = dry.as_array().unwrap().iter().find(|s| s["infraID"] == "sw-abcde").unwrap().clone();
    assert_eq!(this["class"], "expired", "{dry:#}");
}

/// SAFETY-A7937A6 G2: create-cluster keeps its cluster's infraID under `infra`; it holds the
/// lease all the same, so another journal's teardown of that cluster waits for it instead of
/// deleting what it is making.
#[test]
fn another_journals_teardown_waits_for_a_create_cluster_holding_the_clusters_lease() {
    let e = Env::new();
    lock_bucket(&e);
    let b = Scratch::new();
    let cc = e.input(
        "cc.json",
        json!({"infra": {"name": "cc", "infraID": "cc-abcde", "region": "us-east-1", "zones": ["us-east-1a"],
                         "baseDomain": "example.com", "endpointAccess": "Public"},
               "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"}}),
    );
    // The create is held at its node pool's launch (throttled) once its network is made.
    let slow = support::proxy::Proxy::start(e.moto.port);
    slow.fail_with("RunInstances", "RequestLimitExceeded", 1_000_000);
    let create =
        spawn_locked_at(&slow.endpoint(), &e.s, &["run", "create-cluster", "--input", &cc, "--id", "cc"], "10s");
    assert!(
        wait_until(Duration::from_secs(60), || slow.counts().get("RunInstances").is_some()),
        "the create never reached its node pool"
    );
    assert!(
        leases(&e).iter().any(|k| k.ends_with("/us-east-1/cc-abcde")),
        "create-cluster holds the lease: {:?}",
        leases(&e)
    );
    let td = e.input("td.json", json!({"infraID": "cc-abcde", "region": "us-east-1"}));
    let before = e.proxy.counts().get("GetObject").copied().unwrap_or(0);
    let teardown = spawn_locked(&e, &b, &["run", "teardown", "--input", &td, "--id", "td"], "10s");
    // The teardown read the holder's record (it waits) and deleted nothing meanwhile.
    assert!(
        wait_until(Duration::from_secs(30), || e.proxy.counts().get("GetObject").copied().unwrap_or(0) > before + 1),
        "the teardown never looked at the lease"
    );
    std::thread::sleep(Duration::from_secs(2));
    let deletes: Vec<String> =
        e.proxy.counts().keys().filter(|a| a.starts_with("Delete") && *a != "DeleteObject").cloned().collect();
    assert!(deletes.is_empty(), "the teardown deleted while the create held the cluster: {deletes:?}");
    slow.clear_fail_with();
    let create = finish(create);
    assert!(create.status.success(), "{}", stderr(&create));
    let teardown = finish(teardown);
    assert!(teardown.status.success(), "{}", stderr(&teardown));
    assert!(stderr(&teardown).contains("waits for: workflow cc"), "{}", stderr(&teardown));
    assert!(Inventory::read(&e.c, "cc-abcde").counts().values().all(|n| *n == 0), "torn down once the create was done");
}

/// SIGKILL at every AWS call of a provision holding the lease — the lease's own calls among
/// them (the store's proof, the take, the release) — each kill's resume killed at its next
/// call, before the call reaches AWS or after AWS acted: the cluster is made exactly once. (A
/// request a killed process had sent is known by the port it came to, one per process of the
/// chain, not by when the proxy reads it: `support::proxy::listen`.)
fn leased_provision_chain(after_aws_acts: bool) {
    let tag = if after_aws_acts { "a" } else { "b" };
    let world = || {
        let e = Env::new();
        lock_bucket(&e);
        let proxy = support::proxy::Proxy::start(e.moto.port);
        (e, proxy)
    };
    let run = |(e, proxy): &(Env, support::proxy::Proxy), name: &str, part: Option<&support::sweep::Part>| {
        let infra = format!("{name}-abcde");
        let p = input(e, &infra);
        let args = ["run", "provision-infra", "--input", p.as_str(), "--id", name, "--lock-bucket", BUCKET];
        let killed = part.map(|part| support::sweep::chain(e, proxy, part, &args));
        // The clean run's calls are held to the workflow's policy with the lease's statement
        // (`cli_at`); after a chain, the same command reads the finished run's output.
        let out = e.cli_at(&proxy.endpoint(), &args);
        assert!(out.status.success(), "{part:?}: {}", stderr(&out));
        Inventory::read(&e.c, &infra).assert_provisioned(&e.c, 1, 1, name, "example.com");
        killed.unwrap_or_default()
    };
    let first = world();
    first.1.reset_counts();
    run(&first, &format!("clean{tag}"), None);
    let clean = first.1.counts();
    for lease_call in ["PutObject", "DeleteObject"] {
        assert!(clean.contains_key(lease_call), "the clean run made no {lease_call}: {clean:?}");
    }
    support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part))
    });
}

#[test]
fn a_provision_holding_the_lease_killed_at_every_aws_call_before_it_reaches_aws_makes_everything_once() {
    leased_provision_chain(false);
}

#[test]
fn a_provision_holding_the_lease_killed_at_every_aws_call_after_aws_acted_makes_everything_once() {
    leased_provision_chain(true);
}

#[test]
fn a_daemon_whose_workflow_waits_for_another_journals_lease_shows_it_in_metrics_and_runs_it_after() {
    let e = Env::new();
    lock_bucket(&e);
    let b = Scratch::new();
    let p = input(&e, "md-abcde");
    // Journal B provisions slowly (each call answered 300 ms late): it holds the lease a while.
    let slow = support::proxy::Proxy::start(e.moto.port);
    slow.set_latency(Duration::from_millis(300));
    let theirs =
        spawn_locked_at(&slow.endpoint(), &b, &["run", "provision-infra", "--input", &p, "--id", "theirs"], "10s");
    assert!(wait_until(Duration::from_secs(30), || leases(&e).len() == 1), "journal B holds the lease");
    // Its `status` says so, from its journal.
    let key = format!("cluster lease s3://{BUCKET}/infraflow/leases/123456789012/us-east-1/md-abcde");
    assert!(
        wait_until(Duration::from_secs(10), || b.status("theirs")["holds"].as_str() == Some(key.as_str())),
        "{}",
        b.status("theirs")
    );
    // Journal A's daemon is given the same cluster's provision.
    let env = aws_env(&e.proxy.endpoint());
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.extend([("INFRAFLOW_LOCK_BUCKET", BUCKET), ("INFRAFLOW_LOCK_TTL", "10s")]);
    let port = free_port();
    let mut daemon = e.s.spawn_daemon(&["--listen", &format!("127.0.0.1:{port}")], &env);
    e.s.wait_for_daemon_start(1);
    let submitted = e.s.cli_env(&["submit", "provision-infra", "--input", &p, "--id", "ours"], &env);
    assert!(submitted.status.success(), "{}", stderr(&submitted));
    let metric = |state: &str| {
        let (_, body) = http_get(port, "/metrics");
        sample(&body, &format!("infraflow_cluster_leases{{state=\"{state}\"}}"))
    };
    assert!(
        wait_until(Duration::from_secs(30), || metric("waiting") == 1.0),
        "the daemon's workflow waits: {}",
        e.s.daemon_log()
    );
    // `status` (another process, reading the journal) names the holder.
    let says = || e.s.status("ours")["waitsFor"].as_str().map(str::to_string).unwrap_or_default();
    assert!(wait_until(Duration::from_secs(10), || says().starts_with("workflow theirs of journal")), "{}", says());
    assert!(says().contains(&format!("(cluster lease s3://{BUCKET}/")), "{}", says());
    // The list says it too, on the workflow's line, and in its --json.
    let list = stdout(&e.s.cli(&["status"]));
    assert!(
        list.lines().any(|l| l.starts_with("ours ") && l.contains("waits for: workflow theirs of journal")),
        "{list}"
    );
    let listed: Value = serde_json::from_str(&stdout(&e.s.cli(&["status", "--json"]))).unwrap();
    let ours = listed.as_array().unwrap().iter().find(|w| w["id"] == "ours").unwrap().clone();
    assert!(ours["waitsFor"].as_str().is_some_and(|w| w.starts_with("workflow theirs of journal")), "{ours}");
    // And the daemon's page, on the workflow's row.
    let (_, page) = http_get(port, "/");
    let row = page.split("<tr").find(|r| r.contains("data-id=\"ours\"")).unwrap_or_default();
    assert!(row.contains("waits for: workflow theirs of journal"), "{page}");
    let theirs = finish(theirs);
    assert!(theirs.status.success(), "{}", stderr(&theirs));
    e.s.wait_for_state("ours", &["completed"], Duration::from_secs(60));
    assert_eq!(b.status("theirs")["holds"], Value::Null, "a finished workflow holds nothing");
    assert!(
        e.s.history("ours").iter().any(|ev| ev.to_string().contains("\"holding\"")),
        "the daemon's workflow journaled the lease it held"
    );
    // Released just after the workflow's last record.
    assert!(
        wait_until(Duration::from_secs(10), || (metric("held"), metric("waiting")) == (0.0, 0.0)),
        "released once done"
    );
    assert!(e.s.daemon_log().contains("workflow theirs of journal"), "{}", e.s.daemon_log());
    assert_eq!(says(), "", "a wait ends with the first step");
    terminate(&mut daemon, Duration::from_secs(20));
    Inventory::read(&e.c, "md-abcde").assert_provisioned(&e.c, 1, 1, "md", "example.com");
    assert_eq!(e.proxy.counts().get("CreateVpc"), None, "journal A adopted what B made: {:?}", e.proxy.counts());
}

#[test]
fn a_holder_cut_off_from_s3_stops_changing_aws_before_its_lease_could_expire_and_finishes_once_it_returns() {
    let e = Env::new();
    lock_bucket(&e);
    let p = e.input(
        "cut.json",
        json!({"name": "cut", "infraID": "cut-abcde", "region": "us-east-1",
               "zones": ["us-east-1a", "us-east-1b", "us-east-1c"], "baseDomain": "example.com"}),
    );
    // Its own proxy, each call a second late: a provision of a minute, cut off from S3 mid-way.
    let own = support::proxy::Proxy::start(e.moto.port);
    own.set_latency(Duration::from_secs(1));
    let mut holder =
        spawn_locked_at(&own.endpoint(), &e.s, &["run", "provision-infra", "--input", &p, "--id", "cut"], "6s");
    assert!(wait_until(Duration::from_secs(60), || own.counts().get("CreateSubnet").is_some()), "it got going");
    own.cut_off(&["PutObject", "GetObject", "DeleteObject"]);
    let ttl = Duration::from_secs(6);
    std::thread::sleep(ttl);
    // By now any other journal may take the lease: the holder must have stopped changing AWS.
    let at_expiry = changes_outside_s3(&own.counts());
    std::thread::sleep(Duration::from_secs(4));
    let later = changes_outside_s3(&own.counts());
    assert_eq!(later, at_expiry, "changes after the lease could have expired: {:?}", own.counts());
    if holder.try_wait().unwrap().is_some() {
        panic!("it ended while cut off from S3, rather than wait for it: {}", stderr(&finish(holder)));
    }
    // S3 back: it takes its own lease again and finishes, making nothing twice.
    own.cut_off(&[]);
    let out = finish(holder);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("succeeded in time"), "it said why it stopped: {}", stderr(&out));
    Inventory::read(&e.c, "cut-abcde").assert_provisioned(&e.c, 3, 3, "cut", "example.com");
    for (key, workflow, _) in leftover_leases(&e) {
        assert_eq!(workflow, "cut", "{key}: {}", stderr(&out));
    }
}
