//! A benchmark, not a test: provision-infra, create-cluster and teardown through the test proxy
//! with a fixed delay on every AWS call, as AWS answers in 50–300 ms. Run by
//! `scripts/bench-latency.sh`; prints calls, mutating calls, wall time and wall / (calls × delay),
//! the share of the calls' summed latency that the run waited for (1.0: fully sequential).

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::aws::AwsEnv;
use support::*;

struct Row {
    what: String,
    calls: u32,
    mutating: u32,
    wall: Duration,
}

/// Lookups, reads and waits do not change AWS; everything else does.
fn is_mutating(action: &str) -> bool {
    match action.strip_prefix("route53 ") {
        Some(rest) => !rest.starts_with("GET"),
        None => !["Describe", "List", "Get"].iter().any(|p| action.starts_with(p)),
    }
}

/// `bin --db <journal> ARGS` through the env's proxy; `paced`: with the default `--aws-rate`
/// (the tests turn pacing off).
fn run(e: &AwsEnv, bin: &Path, args: &[&str], paced: bool) -> std::process::Output {
    let mut c = std::process::Command::new(bin);
    c.arg("--db").arg(e.s.db()).args(args).stdin(std::process::Stdio::null());
    for (k, v) in support::moto::aws_env(&e.proxy.endpoint()) {
        c.env(k, v);
    }
    if paced {
        c.env_remove("INFRAFLOW_AWS_RATE");
    }
    c.output().unwrap()
}

/// `infraflow ARGS` through the env's proxy, timed, with its calls: `--skip-quota-check` in
/// `args` decides, not the suites' INFRAFLOW_SKIP_QUOTA_CHECK.
fn run_quota_flagged(e: &AwsEnv, args: &[&str]) -> (Duration, std::collections::BTreeMap<String, u32>) {
    e.proxy.reset_counts();
    let t0 = Instant::now();
    let mut c = std::process::Command::new(infraflow());
    c.arg("--db").arg(e.s.db()).args(args).stdin(std::process::Stdio::null());
    for (k, v) in support::moto::aws_env(&e.proxy.endpoint()) {
        if k != "INFRAFLOW_SKIP_QUOTA_CHECK" {
            c.env(k, v);
        }
    }
    let out = c.output().unwrap();
    let wall = t0.elapsed();
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    (wall, e.proxy.counts())
}

fn measure(e: &AwsEnv, bin: &Path, what: &str, args: &[&str]) -> Row {
    measure_paced(e, bin, what, args, false)
}

fn measure_paced(e: &AwsEnv, bin: &Path, what: &str, args: &[&str], paced: bool) -> Row {
    e.proxy.reset_counts();
    let t0 = Instant::now();
    let out = run(e, bin, args, paced);
    let wall = t0.elapsed();
    assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
    let counts = e.proxy.counts();
    if std::env::var_os("INFRAFLOW_BENCH_VERBOSE").is_some() {
        eprintln!("{}", stderr(&out));
        for (action, n) in &counts {
            eprintln!("  {what}: {n:>3}  {action}");
        }
    }
    let calls = counts.values().sum();
    let mutating = counts.iter().filter(|(a, _)| is_mutating(a)).map(|(_, n)| n).sum();
    Row { what: what.to_string(), calls, mutating, wall }
}

/// The four runs on a fresh moto with `bin`.
fn suite(bin: &Path, delay: Duration) -> Vec<Row> {
    let zones = json!(["us-east-1a", "us-east-1b", "us-east-1c"]);
    let mut rows = Vec::new();
    let e = AwsEnv::new();
    // moto builds each service's state on its first request (seconds, once): not AWS's cost.
    e.c.block_on(e.c.ec2.describe_availability_zones().send()).unwrap();
    e.c.block_on(e.c.ec2.describe_vpcs().send()).unwrap();
    e.c.block_on(e.c.elb.describe_load_balancers().send()).unwrap();
    e.c.block_on(e.c.classic.describe_load_balancers().send()).unwrap();
    e.proxy.set_latency(delay);
    let infra = json!({"name": "lat", "infraID": "lat-abcde", "region": "us-east-1", "zones": zones,
                       "baseDomain": "example.com"});
    let input = e.input("p.json", infra);
    rows.push(measure(
        &e,
        bin,
        "provision-infra (3 zones)",
        &["run", "provision-infra", "--input", &input, "--id", "p"],
    ));
    let down = e.input("t.json", json!({"infraID": "lat-abcde", "region": "us-east-1"}));
    rows.push(measure(&e, bin, "teardown of it", &["run", "teardown", "--input", &down, "--id", "t"]));

    let cluster: Value = json!({
        "infra": {"name": "cc", "infraID": "cc-abcde", "region": "us-east-1", "zones": zones,
                  "baseDomain": "example.com", "endpointAccess": "PublicAndPrivate"},
        "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"},
        "privateLink": {"allowedPrincipals": ["arn:aws:iam::123456789012:role/cpo"]}
    });
    let input = e.input("c.json", cluster);
    rows.push(measure(
        &e,
        bin,
        "create-cluster (3 zones, PrivateLink, 1 node/zone)",
        &["run", "create-cluster", "--input", &input, "--id", "c"],
    ));
    let down = e.input("t2.json", json!({"infraID": "cc-abcde", "region": "us-east-1"}));
    rows.push(measure(&e, bin, "teardown of it", &["run", "teardown", "--input", &down, "--id", "t2"]));

    // The same provision and teardown with the default pacing: what a lone cluster pays for it.
    let infra = json!({"name": "pac", "infraID": "pac-abcde", "region": "us-east-1", "zones": zones,
                       "baseDomain": "example.com"});
    let input = e.input("pp.json", infra);
    let args = ["run", "provision-infra", "--input", &input, "--id", "pp"];
    rows.push(measure_paced(&e, bin, "provision-infra (3 zones), default pacing", &args, true));
    let down = e.input("pt.json", json!({"infraID": "pac-abcde", "region": "us-east-1"}));
    let args = ["run", "teardown", "--input", &down, "--id", "pt"];
    rows.push(measure_paced(&e, bin, "teardown of it, default pacing", &args, true));
    rows
}

#[test]
#[ignore = "a benchmark: scripts/bench-latency.sh runs it"]
fn provision_create_cluster_and_teardown_at_a_fixed_delay_per_call() {
    let delay_ms: u64 = std::env::var("INFRAFLOW_BENCH_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let delay = Duration::from_millis(delay_ms);
    // Another build of infraflow (an earlier commit, say) measured in the same run, on its own moto.
    let baseline = std::env::var_os("INFRAFLOW_BENCH_BASELINE").map(PathBuf::from);
    let rows = suite(&infraflow(), delay);
    let base = baseline.as_deref().map(|b| suite(b, delay));

    println!("delay per AWS call: {delay_ms} ms{}", if base.is_some() { "; baseline in brackets" } else { "" });
    println!("| run | calls | mutating | wall (s) | wall / (calls x delay) |");
    println!("|---|---|---|---|---|");
    let ratio = |r: &Row| r.wall.as_secs_f64() / (delay.as_secs_f64() * f64::from(r.calls));
    for (i, r) in rows.iter().enumerate() {
        let b = base.as_ref().map(|b| &b[i]);
        let with = |now: String, then: Option<String>| match then {
            Some(t) => format!("{now} [{t}]"),
            None => now,
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            r.what,
            with(r.calls.to_string(), b.map(|b| b.calls.to_string())),
            with(r.mutating.to_string(), b.map(|b| b.mutating.to_string())),
            with(format!("{:.2}", r.wall.as_secs_f64()), b.map(|b| format!("{:.2}", b.wall.as_secs_f64()))),
            with(format!("{:.2}", ratio(r)), b.map(|b| format!("{:.2}", ratio(b)))),
        );
    }
    // What the default pacing costs a lone cluster: paced wall / unpaced wall.
    let cost =
        |rows: &[Row], paced: usize, unpaced: usize| rows[paced].wall.as_secs_f64() / rows[unpaced].wall.as_secs_f64();
    for (what, paced, unpaced) in [("provision", 4, 0), ("teardown", 5, 1)] {
        println!(
            "default pacing / no pacing, {what}: {:.2}{}",
            cost(&rows, paced, unpaced),
            base.as_ref().map(|b| format!(" [{:.2}]", cost(b, paced, unpaced))).unwrap_or_default()
        );
    }
}

#[test]
#[ignore = "a benchmark: scripts/bench-latency.sh runs it"]
fn a_provision_holding_the_cluster_lease_against_one_without_at_a_fixed_delay_per_call() {
    let delay_ms: u64 = std::env::var("INFRAFLOW_BENCH_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let delay = Duration::from_millis(delay_ms);
    let e = AwsEnv::new();
    e.c.block_on(e.c.ec2.describe_availability_zones().send()).unwrap();
    e.c.block_on(e.c.ec2.describe_vpcs().send()).unwrap();
    e.c.block_on(e.c.s3.create_bucket().bucket("bench-locks").send()).unwrap();
    e.proxy.set_latency(delay);
    // The account has room for the twenty (AWS's published default is five of each).
    use support::quotas::{ELASTIC_IPS, INTERNET_GATEWAYS, NAT_GATEWAYS_PER_ZONE, Quotas, VPCS};
    e.proxy.set_quotas(Quotas::with(&[
        (ELASTIC_IPS, 100),
        (VPCS, 50),
        (INTERNET_GATEWAYS, 50),
        (NAT_GATEWAYS_PER_ZONE, 50),
    ]));
    // Alternated, five of each, on one emulator: the median of each side; with the quota check
    // (the default: the store's proof runs beside its reads) and without it.
    let mut rows: Vec<(bool, bool, Row)> = Vec::new();
    for round in 0..20 {
        let (leased, checked) = (round % 2 == 0, (round / 2) % 2 == 1);
        let infra = format!("l{round}-abcde");
        let input = e.input(
            &format!("{infra}.json"),
            json!({"name": format!("l{round}"), "infraID": infra, "region": "us-east-1",
                   "zones": ["us-east-1a", "us-east-1b", "us-east-1c"], "baseDomain": "example.com"}),
        );
        let mut args = vec!["run", "provision-infra", "--input", input.as_str(), "--id", infra.as_str()];
        if leased {
            args.extend(["--lock-bucket", "bench-locks"]);
        }
        if !checked {
            args.push("--skip-quota-check");
        }
        let (wall, counts) = run_quota_flagged(&e, &args);
        let calls = counts.values().sum();
        rows.push((leased, checked, Row { what: infra.clone(), calls, mutating: 0, wall }));
    }
    let median = |leased: bool, checked: bool| {
        let mut side: Vec<&Row> = rows.iter().filter(|r| r.0 == leased && r.1 == checked).map(|r| &r.2).collect();
        side.sort_by_key(|r| r.wall);
        (side[side.len() / 2].wall.as_secs_f64(), side[0].calls)
    };
    for checked in [false, true] {
        let ((lw, lc), (nw, nc)) = (median(true, checked), median(false, checked));
        println!(
            "lease: a 3-zone provision at {delay_ms} ms a call, {}, median of 5: {lw:.2} s and {lc} calls holding the lease, {nw:.2} s and {nc} calls without; lease / no lease {:.3}",
            if checked { "quota check on (the default)" } else { "--skip-quota-check" },
            lw / nw
        );
    }
}

#[test]
#[ignore = "a benchmark: scripts/bench-latency.sh runs it"]
fn a_check_of_a_cluster_against_its_provision_at_a_fixed_delay_per_call() {
    let delay_ms: u64 = std::env::var("INFRAFLOW_BENCH_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let delay = Duration::from_millis(delay_ms);
    let e = AwsEnv::new();
    e.c.block_on(e.c.ec2.describe_vpcs().send()).unwrap();
    e.proxy.set_latency(delay);
    let mut rows = Vec::new();
    for zones in [1usize, 3] {
        let names: Vec<String> = ["a", "b", "c"].iter().take(zones).map(|z| format!("us-east-1{z}")).collect();
        let infra = format!("chk{zones}-abcde");
        let input = e.input(
            &format!("p{zones}.json"),
            json!({"name": format!("chk{zones}"), "infraID": infra, "region": "us-east-1", "zones": names,
                   "baseDomain": "example.com"}),
        );
        let id = format!("p{zones}");
        let provision = measure(
            &e,
            &infraflow(),
            &format!("provision-infra ({zones} zones)"),
            &["run", "provision-infra", "--input", &input, "--id", &id],
        );
        let reads = {
            let counts = e.proxy.counts();
            counts.iter().filter(|(a, _)| !is_mutating(a)).map(|(_, n)| *n).sum::<u32>()
        };
        let check = measure(
            &e,
            &infraflow(),
            &format!("check of it ({zones} zones)"),
            &["check", "--infra-id", &infra, "--region", "us-east-1"],
        );
        assert_eq!(check.mutating, 0, "a check writes nothing");
        rows.push((provision, reads, check));
    }
    println!("delay per AWS call: {delay_ms} ms");
    println!("| run | calls | reads | wall (s) |");
    println!("|---|---|---|---|");
    for (p, reads, c) in &rows {
        println!("| {} | {} | {reads} | {:.2} |", p.what, p.calls, p.wall.as_secs_f64());
        println!("| {} | {} | {} | {:.2} |", c.what, c.calls, c.calls, c.wall.as_secs_f64());
    }
    for (p, reads, c) in &rows {
        println!(
            "check: {}: {} reads against the provision's {reads} ({:.2}), wall {:.2} of the provision's",
            p.what,
            c.calls,
            f64::from(c.calls) / f64::from(*reads),
            c.wall.as_secs_f64() / p.wall.as_secs_f64()
        );
    }
}

#[test]
#[ignore = "a benchmark: scripts/bench-latency.sh runs it"]
fn the_quota_check_against_a_provision_without_it_at_a_fixed_delay_per_call() {
    let delay_ms: u64 = std::env::var("INFRAFLOW_BENCH_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let delay = Duration::from_millis(delay_ms);
    let e = AwsEnv::new();
    e.c.block_on(e.c.ec2.describe_vpcs().send()).unwrap();
    e.proxy.set_quotas(support::quotas::Quotas::with(&[
        (support::quotas::VPCS, 50),
        (support::quotas::INTERNET_GATEWAYS, 50),
    ]));
    e.proxy.set_latency(delay);
    let zones = json!(["us-east-1a", "us-east-1b", "us-east-1c"]);
    let mut walls = Vec::new();
    // Alternated, twice each: the order of runs on one moto does not favour either.
    for (round, checked) in [(0, false), (1, true), (2, true), (3, false)] {
        let infra = format!("qc{round}-abcde");
        let input = e.input(
            &format!("q{round}.json"),
            json!({"name": format!("qc{round}"), "infraID": infra, "region": "us-east-1", "zones": zones,
                   "baseDomain": "example.com", "singleNATGateway": true}),
        );
        let id = format!("q{round}");
        let mut args = vec!["run", "provision-infra", "--input", &input, "--id", &id];
        if !checked {
            args.push("--skip-quota-check");
        }
        let (wall, counts) = run_quota_flagged(&e, &args);
        let quota_reads: u32 = counts.get("GetServiceQuota").copied().unwrap_or(0);
        walls.push((checked, wall, counts.values().sum::<u32>(), quota_reads));
    }
    println!("delay per AWS call: {delay_ms} ms");
    let mean = |checked: bool| {
        let w: Vec<f64> = walls.iter().filter(|r| r.0 == checked).map(|r| r.1.as_secs_f64()).collect();
        w.iter().sum::<f64>() / w.len() as f64
    };
    let calls = |checked: bool| walls.iter().find(|r| r.0 == checked).map(|r| r.2).unwrap_or(0);
    println!(
        "quota: a 3-zone provision (single NAT gateway) with the quota check: {} calls, {:.2} s; without: {} calls, {:.2} s; ratio {:.2}",
        calls(true),
        mean(true),
        calls(false),
        mean(false),
        mean(true) / mean(false)
    );
}
