//! A benchmark, not a test: a CI account's fleet. N 3-zone create-clusters submitted at once to
//! one daemon, then their N teardowns, through a proxy answering like AWS's account-wide request
//! buckets (`support/buckets.rs`). Run by `scripts/bench-fleet.sh`; prints, per phase, the wall
//! time, the buckets' floor for the requests they admitted and the throttled requests, for this
//! build and (`INFRAFLOW_BENCH_BASELINE=<binary>`) another one, each on a fresh moto. A second
//! run puts half the fleet in another account (`roleARN`), against half the fleet alone.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use support::aws::AwsEnv;
use support::buckets::aws_account;
use support::fleet::{Phase, create_cluster_input, daemon, submit_all, wait_all};
use support::inventory::Inventory;
use support::moto::Clients;
use support::*;

/// The role of the second account's half of a fleet.
const SECOND_ACCOUNT: &str = "arn:aws:iam::111111111111:role/infraflow";

fn phase(e: &AwsEnv, bin: &Path, workflow: &str, prefix: &str, inputs: &[serde_json::Value], extra: &[&str]) -> Phase {
    // AWS's buckets are full after a quiet spell; each phase starts so.
    e.proxy.set_buckets(aws_account());
    e.proxy.reset_counts();
    // From the first submit: its checks before journaling (a teardown's protection, a create's
    // quotas) draw on the same buckets as the runs.
    let start = Instant::now();
    let ids = submit_all(e, bin, workflow, prefix, inputs);
    let submitted = start.elapsed();
    let mut d = daemon(e, bin, &[&["--workers", "32"], extra].concat());
    let states = wait_all(e, &ids, Duration::from_secs(3600));
    let wall = start.elapsed();
    assert_eq!(terminate(&mut d, Duration::from_secs(60)).code(), Some(0), "{}", e.s.daemon_log());
    // INFRAFLOW_BENCH_LOGS=<folder>: each phase's daemon log kept there, to read where time went.
    if let Some(dir) = std::env::var_os("INFRAFLOW_BENCH_LOGS") {
        let name = format!("{workflow}-{}.log", bin.display().to_string().replace('/', "_"));
        std::fs::write(PathBuf::from(dir).join(name), e.s.daemon_log()).unwrap();
        println!("{workflow}: submitted in {:.1} s", submitted.as_secs_f64());
    }
    for st in &states {
        assert_eq!(st["state"], "completed", "{st}");
    }
    let mut actions: Vec<(String, u32)> = e.proxy.counts().into_iter().collect();
    actions.sort_by_key(|(a, n)| (std::cmp::Reverse(*n), a.clone()));
    Phase { wall, report: e.proxy.bucket_report(), actions }
}

/// The fleet on a fresh moto with `bin`: (create phase, teardown phase).
fn fleet(bin: &Path, n: usize) -> (Phase, Phase) {
    fleet_across(bin, n, 0)
}

/// `fleet`, its last `elsewhere` clusters in a second account (through `SECOND_ACCOUNT`).
fn fleet_across(bin: &Path, n: usize, elsewhere: usize) -> (Phase, Phase) {
    let e = AwsEnv::new();
    let second = Clients::as_role(&e.moto.endpoint(), SECOND_ACCOUNT);
    second.create_public_zone("example.com");
    // moto builds each service's state on its first request (seconds, once): not AWS's cost.
    for c in [&e.c, &second] {
        c.block_on(c.ec2.describe_availability_zones().send()).unwrap();
        c.block_on(c.elb.describe_load_balancers().send()).unwrap();
    }
    let account = |i: usize| if i >= n - elsewhere { &second } else { &e.c };
    let with_role = |i: usize, mut input: serde_json::Value| {
        if i >= n - elsewhere {
            input["roleARN"] = json!(SECOND_ACCOUNT);
        }
        input
    };
    let inputs: Vec<_> = (0..n).map(|i| with_role(i, create_cluster_input(i))).collect();
    // The daemon acts through the second account's role only when told it may.
    let allow: &[&str] = if elsewhere > 0 { &["--allow-role", SECOND_ACCOUNT] } else { &[] };
    let create = phase(&e, bin, "create-cluster", "c", &inputs, allow);
    for i in 0..n {
        let inv = Inventory::read(account(i), &format!("fleet{i}-abcde"));
        inv.assert_provisioned_with_extras(account(i), 3, 3, &format!("fleet{i}"), "example.com");
    }
    let downs: Vec<_> =
        (0..n).map(|i| with_role(i, json!({"infraID": format!("fleet{i}-abcde"), "region": "us-east-1"}))).collect();
    let teardown = phase(&e, bin, "teardown", "t", &downs, allow);
    for i in 0..n {
        let left = Inventory::read(account(i), &format!("fleet{i}-abcde"));
        assert_eq!(left.total(), 0, "cluster {i} left {:?}", left.counts());
    }
    (create, teardown)
}

#[test]
#[ignore = "a benchmark: scripts/bench-fleet.sh runs it"]
fn a_fleet_of_create_clusters_and_teardowns_under_the_account_buckets() {
    let n: usize = std::env::var("INFRAFLOW_FLEET_N").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let baseline = std::env::var_os("INFRAFLOW_BENCH_BASELINE").map(PathBuf::from);
    let runs: Vec<(String, (Phase, Phase))> = std::iter::once(("this build".to_string(), infraflow()))
        .chain(baseline.map(|b| (format!("baseline {}", b.display()), b)))
        .map(|(name, bin)| (name, fleet(&bin, n)))
        .collect();
    println!("{n} x 3-zone create-cluster, then {n} teardowns; buckets: {:?}", aws_account());
    for (name, (create, teardown)) in &runs {
        println!("| {name} | create-cluster | {} |", create.line());
        println!("| {name} | teardown | {} |", teardown.line());
        println!("| {name} | create-cluster, most requested | {} |", create.top_actions(12));
        println!("| {name} | teardown, most requested | {} |", teardown.top_actions(12));
        for (class, seconds) in &teardown.report.seconds {
            println!("| {name} | teardown, {class} a second | {seconds:?} |");
        }
        for (api, seconds) in teardown.report.per_api.iter().filter(|(_, s)| s.iter().sum::<u32>() >= 40) {
            println!("| {name} | teardown, {api} a second | {seconds:?} |");
        }
    }
}

#[test]
#[ignore = "a benchmark: scripts/bench-fleet.sh runs it"]
fn a_fleet_across_two_accounts_is_paced_per_account() {
    let n: usize = std::env::var("INFRAFLOW_FLEET_N").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let half = n / 2;
    let alone = fleet(&infraflow(), half);
    let across = fleet_across(&infraflow(), 2 * half, half);
    let together = fleet(&infraflow(), 2 * half);
    println!(
        "{half} x 3-zone create-cluster in one account, {half} + {half} in two accounts, {} in one (one daemon)",
        2 * half
    );
    let runs = [
        (format!("{half} in one account"), &alone),
        (format!("{half} + {half} in two accounts"), &across),
        (format!("{} in one account", 2 * half), &together),
    ];
    for (name, (create, teardown)) in runs {
        println!("| {name} | create-cluster | {} |", create.line());
        println!("| {name} | teardown | {} |", teardown.line());
    }
    let ratio = |a: &Phase, b: &Phase| b.wall.as_secs_f64() / a.wall.as_secs_f64();
    println!(
        "| wall against {half} in one account | | {half} + {half} in two: create-cluster {:.2}, teardown {:.2}; {} in one: create-cluster {:.2}, teardown {:.2} |",
        ratio(&alone.0, &across.0),
        ratio(&alone.1, &across.1),
        2 * half,
        ratio(&alone.0, &together.0),
        ratio(&alone.1, &together.1)
    );
}
