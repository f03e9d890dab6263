//! Quotas, black box: the proxy plays AWS's Service Quotas and enforces them on creates (moto
//! does neither); a provision that would meet a quota half-way is refused before anything is
//! journaled or changed, one that fits runs, and Service Quotas denied means AWS's published
//! defaults, said.
//!
//! Why this file is one (620 lines, over 600): one concept, the quota contract as a user meets it —
//! each quota's refusal before journaling (Elastic IPs, NAT gateways per zone, VPCs, IAM roles,
//! load balancers, vCPUs, hosted zones), the published defaults when Service Quotas is denied, and
//! the daemon's admission (six provisions, two node pools, a wait past its limit, a waiter that
//! leaves its worker to the teardown that frees it, a kill chain of a provision whose admission
//! waited); they share the proxy's quota setup and the checking environment. A split would add a
//! test binary to link (the build's slowest part) to move ~60 lines.

mod support;

use std::process::Output;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::chain::is_change;
use support::quotas::{
    ELASTIC_IPS, HOSTED_ZONES, INTERNET_GATEWAYS, NAT_GATEWAYS_PER_ZONE, NLBS, Quotas, STANDARD_VCPUS, VPCS,
};
use support::*;

fn input(name: &str, zones: &[&str], extra: Value) -> Value {
    let mut v = json!({"name": name, "infraID": format!("{name}-abcde"), "region": "us-east-1",
                       "baseDomain": "example.com", "zones": zones});
    v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    v
}

/// `infraflow ARGS` through the env's proxy with the quota check on (the suites turn it off), its
/// calls held to the workflow's policy.
fn cli_checking_quotas(e: &Env, args: &[&str]) -> Output {
    let env: Vec<(&str, String)> = support::moto::aws_env(&e.proxy.endpoint())
        .into_iter()
        .filter(|(k, _)| *k != "INFRAFLOW_SKIP_QUOTA_CHECK")
        .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let before = support::proxy::iam_counts_at(&e.proxy.endpoint()).unwrap();
    let out = e.s.cli_env(args, &env);
    let after = support::proxy::iam_counts_at(&e.proxy.endpoint()).unwrap();
    if let ["run", workflow, ..] = args {
        support::iam::assert_policy_with_lock_covers(workflow, None, &before, &after);
    }
    out
}

fn addresses(e: &Env) -> usize {
    e.c.block_on(e.c.ec2.describe_addresses().send()).unwrap().addresses().len()
}

fn changes(e: &Env) -> Vec<String> {
    e.proxy.counts().into_iter().filter(|(a, _)| is_change(a)).map(|(a, n)| format!("{a}×{n}")).collect()
}

#[test]
fn a_provision_past_the_elastic_ip_quota_is_refused_before_any_change_and_a_single_nat_gateway_fits() {
    let e = Env::new();
    e.proxy.set_quotas(Quotas::with(&[(ELASTIC_IPS, 5)]));
    for _ in 0..4 {
        e.c.block_on(e.c.ec2.allocate_address().domain(aws_sdk_ec2::types::DomainType::Vpc).send()).unwrap();
    }
    let three = ["us-east-1a", "us-east-1b", "us-east-1c"];
    let p = e.input("p.json", input("quota", &three, json!({})));

    // Refused: one line naming the quota, exit 2, not one change, nothing journaled.
    e.proxy.reset_counts();
    let out = cli_checking_quotas(&e, &["run", "provision-infra", "--input", &p, "--id", "three"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("needs 3 Elastic IPs, 1 free (quota 5, 4 in use)"), "{err}");
    assert!(err.contains("singleNATGateway") && err.contains("--skip-quota-check"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(changes(&e), Vec::<String>::new(), "no change before the refusal");
    assert!(e.proxy.counts().contains_key("GetServiceQuota"), "{:?}", e.proxy.counts());
    let listed = e.s.cli(&["status", "--json"]);
    assert!(stdout(&listed).trim() == "[]" || !e.s.db().exists(), "nothing journaled: {}", stdout(&listed));
    assert_eq!(addresses(&e), 4);

    // What the check spares: the same run unchecked meets AWS's AddressLimitExceeded half-way and
    // rolls back everything it made.
    e.proxy.reset_counts();
    let out =
        cli_checking_quotas(&e, &["run", "provision-infra", "--input", &p, "--id", "unchecked", "--skip-quota-check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("AddressLimitExceeded"), "{}", stderr(&out));
    let made: u32 = e.proxy.counts().iter().filter(|(a, _)| is_change(a)).map(|(_, n)| n).sum();
    eprintln!("unchecked, the 3-zone provision made {made} changes before and while rolling back: {:?}", changes(&e));
    assert_eq!(addresses(&e), 4, "its one address released by the rollback");
    assert_eq!(support::inventory::Inventory::read(&e.c, "quota-abcde").total(), 0, "rolled back whole");

    // A single NAT gateway needs one address: it fits and completes.
    let single = e.input("s.json", input("single", &three, json!({"singleNATGateway": true})));
    ok(&cli_checking_quotas(&e, &["run", "provision-infra", "--input", &single, "--id", "single"]));
    assert_eq!(addresses(&e), 5);
    // Run again (a repair), it needs no new address: the quota is full, and it still fits.
    ok(&cli_checking_quotas(&e, &["run", "provision-infra", "--input", &single, "--id", "single-again"]));
    assert_eq!(addresses(&e), 5);
}

#[test]
fn a_provision_that_names_no_zone_is_held_to_the_nat_gateway_quota_of_the_zone_it_would_get() {
    let e = Env::new();
    // No NAT gateway fits in any zone (as in an account whose zones are full).
    e.proxy.set_quotas(Quotas::with(&[(ELASTIC_IPS, 5), (NAT_GATEWAYS_PER_ZONE, 0)]));
    let mut p = input("nozone", &[], json!({}));
    p.as_object_mut().unwrap().remove("zones");
    let p = e.input("p.json", p);
    e.proxy.reset_counts();
    let out = cli_checking_quotas(&e, &["run", "provision-infra", "--input", &p, "--id", "nozone"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("needs 1 NAT gateway in us-east-1a, 0 free (quota 0 per zone, 0 in use)"),
        "{}",
        stderr(&out)
    );
    assert!(changes(&e).is_empty(), "refused before any change: {:?}", changes(&e));
}

/// IAM's roles in use, as the proxy's moto counts them.
fn roles_in_use(e: &Env) -> u32 {
    let summary = e.c.block_on(e.c.iam.get_account_summary().send()).unwrap();
    let map = summary.summary_map().unwrap();
    *map.get(&aws_sdk_iam::types::SummaryKeyType::Roles).unwrap() as u32
}

#[test]
fn a_create_iam_past_the_role_quota_is_refused_before_any_change_and_one_run_again_keeps_what_it_made() {
    let e = Env::new();
    let input = |infra: &str| {
        json!({"infraID": infra, "region": "us-east-1", "oidcBucket": "oidc-store",
               "publicZoneID": "ZPUBLIC1", "privateZoneID": "ZPRIVATE1", "localZoneID": "ZLOCAL1"})
    };
    // Three roles free: the eight a create-iam makes (seven operators', the workers') do not fit.
    let in_use = roles_in_use(&e);
    e.proxy.set_quotas(Quotas::with(&[("RolesQuota", in_use + 3)]));
    let p = e.input("iam.json", input("iq-abcde"));
    e.proxy.reset_counts();
    let out = cli_checking_quotas(&e, &["run", "create-iam", "--input", &p, "--id", "iq"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let line = format!("needs 8 IAM roles, 3 free (quota {}, {in_use} in use)", in_use + 3);
    assert!(stderr(&out).contains(&line), "{}", stderr(&out));
    assert!(!stderr(&out).contains("singleNATGateway"), "no network hint for IAM: {}", stderr(&out));
    assert!(changes(&e).is_empty(), "refused before any change: {:?}", changes(&e));
    assert!(!e.s.db().exists() || e.s.status("iq")["state"].is_null(), "nothing journaled");

    // Room for it: it runs. Then the account is full, and the same IAM asked for again (a new
    // journal's run, say) makes nothing new: it fits.
    e.proxy.set_quotas(Quotas::with(&[("RolesQuota", in_use + 8)]));
    ok(&cli_checking_quotas(&e, &["run", "create-iam", "--input", &p, "--id", "iq"]));
    assert_eq!(roles_in_use(&e), in_use + 8);
    // Once IAM shows what it made (under AWS's contract a new role reads as NoSuchEntity for a
    // moment, and would be counted as still to make).
    std::thread::sleep(e.proxy.consistency_settle());
    let again = cli_checking_quotas(&e, &["run", "create-iam", "--input", &p, "--id", "iq-again"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(roles_in_use(&e), in_use + 8, "nothing made twice");
}

#[test]
fn service_quotas_denied_by_policy_means_the_published_defaults_and_says_so() {
    let e = Env::new();
    e.proxy.set_quotas(Quotas { denied: true, ..Quotas::default() });
    let p = e.input("p.json", input("denied", &["us-east-1a"], json!({})));
    let out = cli_checking_quotas(&e, &["run", "provision-infra", "--input", &p, "--id", "denied"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("Service Quotas could not be read (AccessDeniedException)"), "{err}");
    assert!(
        err.contains("AWS's published defaults used (5 Elastic IPs, 5 VPCs, 5 internet gateways, 5 NAT gateways)"),
        "{err}"
    );

    // The defaults hold the line too: with five VPCs in the account (moto's default VPC among
    // them) a sixth is refused.
    while e.c.block_on(e.c.ec2.describe_vpcs().send()).unwrap().vpcs().len() < 5 {
        e.c.create_vpc("10.9.0.0/16");
    }
    let q = e.input("q.json", input("sixth", &["us-east-1a"], json!({"singleNATGateway": true})));
    let out = cli_checking_quotas(&e, &["run", "provision-infra", "--input", &q, "--id", "sixth"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("needs 1 VPC, 0 free (quota 5, 5 in use)"), "{}", stderr(&out));
}

/// The env of a command or daemon through the env's proxy with the quota check on.
fn checking_env(e: &Env) -> Vec<(&'static str, String)> {
    support::moto::aws_env(&e.proxy.endpoint())
        .into_iter()
        .filter(|(k, _)| *k != "INFRAFLOW_SKIP_QUOTA_CHECK")
        .collect()
}

#[test]
fn six_provisions_submitted_at_once_with_five_free_addresses_run_five_and_the_sixth_waits_for_a_teardown() {
    let e = Env::new();
    // Six VPCs and gateways fit (the account asked AWS for more); five Elastic IPs, none in use.
    e.proxy.set_quotas(Quotas::with(&[(ELASTIC_IPS, 5), (VPCS, 20), (INTERNET_GATEWAYS, 20)]));
    let env = checking_env(&e);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // Submitted before any runs: each fits the account as it is (nothing in use), so each is
    // journaled; the daemon admits them one beside the other.
    for i in 0..6 {
        let p = e.input(&format!("f{i}.json"), input(&format!("f{i}"), &["us-east-1a"], json!({})));
        let out = e.s.cli_env(&["submit", "provision-infra", "--input", &p, "--id", &format!("f{i}")], &env);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let settle = format!("{}ms", e.proxy.consistency_settle().as_millis());
    let mut daemon = e.s.spawn_daemon(&["--workers", "8", "--consistency-settle", &settle], &env);
    let state = |id: &str| e.s.status(id)["state"].as_str().unwrap_or_default().to_string();
    let completed = || (0..6).filter(|i| state(&format!("f{i}")) == "completed").count();
    let five = wait_until(std::time::Duration::from_secs(120), || completed() == 5);
    let log = e.s.daemon_log();
    assert!(five, "five run: {:?}\n{log}", (0..6).map(|i| state(&format!("f{i}"))).collect::<Vec<_>>());
    // The sixth waits, naming the quota, and has made nothing.
    let waiting: Vec<usize> = (0..6).filter(|i| state(&format!("f{i}")) != "completed").collect();
    assert_eq!(waiting.len(), 1);
    let sixth = format!("f{}", waiting[0]);
    assert!(log.contains("quota: needs 1 Elastic IP, 0 free (quota 5, 5 in use)"), "{log}");
    // `status` says so too, from the journal (another process's view of the daemon's wait).
    let says = |id: &str| e.s.status(id)["waitsFor"].as_str().map(str::to_string);
    let said = says(&sixth).unwrap_or_default();
    assert!(said.starts_with("quota: needs 1 Elastic IP, 0 free (quota 5, 5 in use)"), "{said}");
    let text = e.s.cli(&["status", &sixth]);
    assert!(stdout(&text).contains("waits for: quota: needs 1 Elastic IP"), "{}", stdout(&text));
    assert_eq!(
        support::inventory::Inventory::read(&e.c, &format!("{sixth}-abcde")).total(),
        0,
        "the sixth made nothing"
    );
    assert_eq!(addresses(&e), 5);

    // A teardown of one of the five releases its address: the sixth starts and completes.
    let gone = (0..6).map(|i| format!("f{i}")).find(|id| *id != sixth).unwrap();
    let td = e.input("td.json", json!({"infraID": format!("{gone}-abcde"), "region": "us-east-1"}));
    let out = e.s.cli_env(&["submit", "teardown", "--input", &td, "--id", "down"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let done = wait_until(std::time::Duration::from_secs(120), || state(&sixth) == "completed");
    terminate(&mut daemon, std::time::Duration::from_secs(20));
    assert!(done, "the sixth ran once an address was free: {}\n{}", state(&sixth), e.s.daemon_log());
    assert_eq!(state("down"), "completed");
    assert_eq!(says(&sixth), None, "a wait ends with the first step");
    // No run met the quota: every address asked for was given; none is left but the five clusters'.
    let allocated = e.proxy.counts().get("AllocateAddress").copied().unwrap_or(0);
    assert_eq!(allocated, 6, "six addresses asked for, none refused: {:?}", e.proxy.counts());
    assert_eq!(addresses(&e), 5);
    for i in 0..6 {
        let id = format!("f{i}");
        assert!(!e.s.history(&id).iter().any(|ev| ev.to_string().contains("AddressLimitExceeded")), "{id}");
    }
}

/// SAFETY-A7937A6 G6: a daemon with one worker, whose provision waits for quota: the wait does
/// not hold the worker, so the teardown that frees the quota is claimed at once, and the
/// provision completes after it (before: the teardown stayed queued until the wait limit).
#[test]
fn a_provision_waiting_for_quota_leaves_its_worker_to_the_teardown_that_frees_it() {
    let e = Env::new();
    e.proxy.set_quotas(Quotas::with(&[(ELASTIC_IPS, 1), (VPCS, 20), (INTERNET_GATEWAYS, 20)]));
    let env = checking_env(&e);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for i in 0..2 {
        let p = e.input(&format!("w{i}.json"), input(&format!("w{i}"), &["us-east-1a"], json!({})));
        let out = e.s.cli_env(&["submit", "provision-infra", "--input", &p, "--id", &format!("w{i}")], &env);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let settle = format!("{}ms", e.proxy.consistency_settle().as_millis());
    let mut daemon = e.s.spawn_daemon(&["--workers", "1", "--consistency-settle", &settle], &env);
    let state = |id: &str| e.s.status(id)["state"].as_str().unwrap_or_default().to_string();
    let waits =
        |id: &str| e.s.status(id)["waitsFor"].as_str().unwrap_or_default().contains("quota: needs 1 Elastic IP");
    let one_waits = wait_until(std::time::Duration::from_secs(120), || {
        (state("w0") == "completed" && waits("w1")) || (state("w1") == "completed" && waits("w0"))
    });
    assert!(one_waits, "one ran, the other waits for quota: {} {}\n{}", state("w0"), state("w1"), e.s.daemon_log());
    let (done, waiting) = if state("w0") == "completed" { ("w0", "w1") } else { ("w1", "w0") };
    let td = e.input("td.json", json!({"infraID": format!("{done}-abcde"), "region": "us-east-1"}));
    let out = e.s.cli_env(&["submit", "teardown", "--input", &td, "--id", "free"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ran = wait_until(std::time::Duration::from_secs(120), || state(waiting) == "completed");
    terminate(&mut daemon, std::time::Duration::from_secs(20));
    assert!(
        ran,
        "the waiter ran once the teardown freed its address: {} / free {}\n{}",
        state(waiting),
        state("free"),
        e.s.daemon_log()
    );
    assert_eq!(state("free"), "completed");
    assert_eq!(addresses(&e), 1, "the waiter's address, and nobody's else");
}

/// A world where a 1-zone provision's admission must wait: the Elastic IP quota is two more than
/// the world holds, one of them taken by someone else; the provision is journaled while the other is free, then a second address
/// of someone else's takes it. The run (a resumed `run`, as after a crash: no check before the
/// journal) waits for quota; a thread frees that address once the run journaled its wait and
/// waited a few rechecks more, which the chain kills meanwhile. Returns the chain's kills.
fn provision_whose_admission_waits(e: &Env, name: &str, part: Option<&support::sweep::Part>) -> support::chain::Kills {
    use aws_sdk_ec2::types::DomainType;
    // Two more than the world holds already (the first world holds the clean run's cluster).
    let before = addresses(e);
    e.proxy.set_quotas(Quotas::with(&[(ELASTIC_IPS, before as u32 + 2), (VPCS, 20), (INTERNET_GATEWAYS, 20)]));
    let allocate = || {
        let a = e.c.block_on(e.c.ec2.allocate_address().domain(DomainType::Vpc).send()).unwrap();
        a.allocation_id().unwrap().to_string()
    };
    allocate();
    let p = e.input(&format!("{name}.json"), input(name, &["us-east-1a"], json!({})));
    let env = checking_env(e);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = e.s.cli_env(&["submit", "provision-infra", "--input", &p, "--id", name], &env);
    assert_eq!(out.status.code(), Some(0), "journaled while an address is free: {}", stderr(&out));
    let blocker = allocate();
    let args = ["run", "provision-infra", "--input", p.as_str(), "--id", name];
    let checking = [("INFRAFLOW_SKIP_QUOTA_CHECK", "false"), ("INFRAFLOW_QUOTA_RECHECK", "300ms")];
    let kills = std::thread::scope(|s| {
        let freer = s.spawn(|| {
            let waits =
                || e.s.status(name)["waitsFor"].as_str().is_some_and(|w| w.starts_with("quota: needs 1 Elastic IP"));
            let waited = wait_until(std::time::Duration::from_secs(120), waits);
            std::thread::sleep(std::time::Duration::from_millis(1500));
            e.c.block_on(e.c.ec2.release_address().allocation_id(&blocker).send()).unwrap();
            waited
        });
        let kills = match part {
            Some(part) => support::sweep::chain_with(e, &e.proxy, part, &args, &checking),
            None => {
                let mut vars = env.clone();
                vars.extend(checking);
                let out = e.s.cli_env(&args, &vars);
                assert!(out.status.success(), "{}", stderr(&out));
                support::chain::Kills::default()
            }
        };
        assert!(freer.join().unwrap(), "{name}'s admission journaled its wait for the address");
        kills
    });
    let out = e.cli_at(&e.proxy.endpoint(), &args);
    assert!(out.status.success(), "{part:?}: {}", stderr(&out));
    let infra = format!("{name}-abcde");
    support::inventory::Inventory::read(&e.c, &infra).assert_provisioned(&e.c, 1, 1, name, "example.com");
    assert_eq!(addresses(e), before + 2, "the cluster's address and someone else's, no other");
    let history: Vec<String> = e.s.history(name).iter().map(|ev| ev.to_string()).collect();
    assert!(history.iter().any(|ev| ev.contains("\"waiting\"") && ev.contains("Elastic IP")), "{history:?}");
    assert!(!history.iter().any(|ev| ev.contains("AddressLimitExceeded")), "no create met the quota");
    kills
}

#[test]
fn a_provision_whose_admission_waited_killed_at_every_aws_call_before_it_reaches_aws_makes_everything_once() {
    let first = Env::new();
    first.proxy.reset_counts();
    provision_whose_admission_waits(&first, "clean", None);
    let clean = first.proxy.counts();
    for read in ["GetServiceQuota", "DescribeAddresses"] {
        assert!(clean.contains_key(read), "the clean run's admission read no {read}: {clean:?}");
    }
    support::sweep::every_call_chained(&clean, false, first, Env::new, |e, part| {
        provision_whose_admission_waits(e, &format!("k{}", part.index), Some(part))
    });
}

/// A provision journaled while an address was free, then resumed once someone else took it: it
/// waits for quota no longer than `--wait-limit`, then pauses naming the quota, having changed
/// nothing; with the address freed, `retry` provisions.
#[test]
fn a_provision_waiting_for_quota_past_its_wait_limit_pauses_naming_the_quota_and_a_retry_runs_once_it_fits() {
    use aws_sdk_ec2::types::DomainType;
    let e = Env::new();
    e.proxy.set_quotas(Quotas::with(&[(ELASTIC_IPS, 1), (VPCS, 20), (INTERNET_GATEWAYS, 20)]));
    let p = e.input("wl.json", input("wl", &["us-east-1a"], json!({})));
    let env = checking_env(&e);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = e.s.cli_env(&["submit", "provision-infra", "--input", &p, "--id", "wl"], &env);
    assert!(out.status.success(), "journaled while an address is free: {}", stderr(&out));
    let theirs = e.c.block_on(e.c.ec2.allocate_address().domain(DomainType::Vpc).send()).unwrap();
    e.proxy.reset_counts();
    env.extend([("INFRAFLOW_QUOTA_RECHECK", "300ms"), ("INFRAFLOW_WAIT_LIMIT", "2s")]);
    let out = e.s.cli_env(&["run", "provision-infra", "--input", &p, "--id", "wl"], &env);
    assert!(!out.status.success(), "it ran past the quota: {}", stderr(&out));
    let st = e.s.status("wl");
    assert_eq!(st["state"], "paused", "{st}");
    let why = st["error"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("waited 2 s for the account's quota: needs 1 Elastic IP, 0 free (quota 1, 1 in use)"),
        "{why}"
    );
    assert!(
        e.proxy.counts().get("GetServiceQuota").is_some_and(|n| *n >= 2),
        "it read the quota again while it waited"
    );
    assert_eq!(changes(&e), Vec::<String>::new(), "nothing changed while it waited");
    e.c.block_on(e.c.ec2.release_address().allocation_id(theirs.allocation_id().unwrap()).send()).unwrap();
    let out = e.s.cli_env(&["retry", "wl"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    e.s.wait_for_state("wl", &["completed"], std::time::Duration::from_secs(60));
    support::inventory::Inventory::read(&e.c, "wl-abcde").assert_provisioned(&e.c, 1, 1, "wl", "example.com");
    assert_eq!(addresses(&e), 1, "the cluster's address alone");
}

/// The network load balancers in the region, by name.
fn nlbs(e: &Env) -> Vec<String> {
    let out = e.c.block_on(e.c.elb.describe_load_balancers().send()).unwrap();
    out.load_balancers().iter().filter_map(|l| l.load_balancer_name().map(str::to_string)).collect()
}

/// ELB's limit of network load balancers one above what the region has: a link exposing the API
/// server too (two load balancers) is refused before it is journaled, naming the quota; the
/// router's alone fits and runs; the API server's asked for after it needs one more (the
/// router's is not counted again) and is refused; run unchecked, ELB refuses it half-way
/// (`TooManyLoadBalancers`, the proxy enforcing the limit as AWS does) and the run rolls back.
#[test]
fn a_privatelink_past_the_load_balancer_quota_is_refused_before_any_change_and_one_that_fits_runs() {
    let e = Env::new();
    let p = e.input("lq.json", input("lq", &["us-east-1a", "us-east-1b"], json!({"singleNATGateway": true})));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &p]));
    let link = |expose: bool| {
        json!({"name": "lq", "infraID": "lq-abcde", "region": "us-east-1",
               "management": {"vpcID": out["vpcID"], "subnetIDs": out["publicSubnetIDs"]},
               "guest": {"vpcID": out["vpcID"], "subnetIDs": [out["zones"][0]["subnetID"], out["zones"][1]["subnetID"]],
                         "machineCIDR": out["machineCIDR"]},
               "exposeAPIServer": expose})
    };
    let before = nlbs(&e).len() as u32;
    e.proxy.set_quotas(Quotas::with(&[(NLBS, before + 1)]));
    e.proxy.reset_counts();
    let both = e.input("both.json", link(true));
    let refused = cli_checking_quotas(&e, &["run", "create-privatelink", "--input", &both, "--id", "both"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains(&format!(
            "create-privatelink would not fit the account's quotas in us-east-1: needs 2 network load balancers, 1 free (quota {}, {before} in use)",
            before + 1
        )),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(changes(&e), Vec::<String>::new(), "nothing changed");
    assert!(e.proxy.counts().contains_key("DescribeAccountLimits"), "{:?}", e.proxy.counts());
    assert!(!e.s.cli(&["status", "both"]).status.success(), "nothing journaled");
    // The router's link alone fits.
    let router = e.input("router.json", link(false));
    let linked = cli_checking_quotas(&e, &["run", "create-privatelink", "--input", &router, "--id", "router"]);
    assert!(linked.status.success(), "{}", stderr(&linked));
    assert_eq!(nlbs(&e).len() as u32, before + 1);
    // Now both: the router's is there already, the API server's is one more than the limit.
    let refused = cli_checking_quotas(&e, &["run", "create-privatelink", "--input", &both, "--id", "both"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("needs 1 network load balancer, 0 free"), "{}", stderr(&refused));
    // Unchecked, ELB refuses the create half-way; the run undoes what it made.
    let env = checking_env(&e);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("INFRAFLOW_SKIP_QUOTA_CHECK", "1"));
    let unchecked = e.s.cli_env(&["run", "create-privatelink", "--input", &both, "--id", "unchecked"], &env);
    assert!(!unchecked.status.success(), "it made a load balancer past the limit");
    let history: Vec<String> = e.s.history("unchecked").iter().map(|ev| ev.to_string()).collect();
    assert!(history.iter().any(|ev| ev.contains("TooManyLoadBalancers")), "{history:?}");
    assert_eq!(e.s.status("unchecked")["state"], "compensated", "{}", e.s.status("unchecked"));
    assert_eq!(nlbs(&e).len() as u32, before + 1, "the router's load balancer alone: {:?}", nlbs(&e));
}

/// Pending and running instances in the region.
fn instances(e: &Env) -> usize {
    let out = e.c.block_on(e.c.ec2.describe_instances().send()).unwrap();
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| matches!(i.state().and_then(|s| s.name()).map(|n| n.as_str()), Some("pending" | "running")))
        .count()
}

/// On-Demand standard vCPUs at 8: three 4-vCPU nodes are refused before the scale is journaled,
/// naming the quota; two fit and run; three asked for after them need one more node (the pool's
/// two are not counted again) and are refused; run unchecked, EC2 refuses the launch
/// (`VcpuLimitExceeded`, the proxy enforcing the quota as AWS does) and the run rolls back.
#[test]
fn a_scale_past_the_vcpu_quota_is_refused_before_any_change_and_one_that_fits_runs() {
    let e = Env::new();
    let p = e.input("vq.json", input("vq", &["us-east-1a"], json!({})));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &p]));
    let scale = |replicas: i64| {
        json!({"infraID": "vq-abcde", "nodePool": "workers", "replicas": replicas, "region": "us-east-1",
               "subnetID": out["zones"][0]["subnetID"], "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b",
               "securityGroupIDs": [out["securityGroupID"]]})
    };
    e.proxy.set_quotas(Quotas::with(&[(STANDARD_VCPUS, 8)]));
    e.proxy.reset_counts();
    let three = e.input("three.json", scale(3));
    let refused = cli_checking_quotas(&e, &["run", "scale-nodepool", "--input", &three, "--id", "three"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains("scale-nodepool would not fit the account's quotas in us-east-1: needs 12 vCPUs of On-Demand standard instances (3 m6i.xlarge), 8 free (quota 8, 0 in use)"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(changes(&e), Vec::<String>::new(), "nothing changed");
    assert!(!e.s.cli(&["status", "three"]).status.success(), "nothing journaled");
    let two = e.input("two.json", scale(2));
    let scaled = cli_checking_quotas(&e, &["run", "scale-nodepool", "--input", &two, "--id", "two"]);
    assert!(scaled.status.success(), "{}", stderr(&scaled));
    assert_eq!(instances(&e), 2);
    let refused = cli_checking_quotas(&e, &["run", "scale-nodepool", "--input", &three, "--id", "three"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused)
            .contains("needs 4 vCPUs of On-Demand standard instances (1 m6i.xlarge), 0 free (quota 8, 8 in use)"),
        "{}",
        stderr(&refused)
    );
    let env = checking_env(&e);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("INFRAFLOW_SKIP_QUOTA_CHECK", "1"));
    let unchecked = e.s.cli_env(&["run", "scale-nodepool", "--input", &three, "--id", "unchecked"], &env);
    assert!(!unchecked.status.success(), "it launched past the quota");
    let history: Vec<String> = e.s.history("unchecked").iter().map(|ev| ev.to_string()).collect();
    assert!(history.iter().any(|ev| ev.contains("VcpuLimitExceeded")), "{history:?}");
    assert_eq!(e.s.status("unchecked")["state"], "compensated", "{}", e.s.status("unchecked"));
    assert_eq!(instances(&e), 2, "the pool's two nodes alone");
}

/// Node pools of two clusters submitted at once with room for one (On-Demand standard vCPUs at
/// 8, two 4-vCPU nodes each): the daemon runs one; the other waits, naming the vCPUs the first
/// claims or holds, and starts once the first pool is scaled to zero. No launch meets the quota
/// (without admission the second would, and roll back).
#[test]
fn node_pools_of_two_clusters_with_room_for_one_run_one_and_the_other_waits_for_a_scale_down() {
    let e = Env::new();
    let cluster = |name: &str| {
        let p = e.input(&format!("{name}.json"), input(name, &["us-east-1a"], json!({})));
        let out = ok(&e.cli(&["run", "provision-infra", "--input", &p]));
        let infra = format!("{name}-abcde");
        move |pool: &str, replicas: i64| {
            json!({"infraID": infra, "nodePool": pool, "replicas": replicas, "region": "us-east-1",
                   "subnetID": out["zones"][0]["subnetID"], "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b",
                   "securityGroupIDs": [out["securityGroupID"]]})
        }
    };
    let pools = [cluster("vw"), cluster("vx")];
    e.proxy.set_quotas(Quotas::with(&[(STANDARD_VCPUS, 8)]));
    let env = checking_env(&e);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let submit = |id: &str, input: Value| {
        let file = e.input(&format!("{id}.json"), input);
        let out = e.s.cli_env(&["submit", "scale-nodepool", "--input", &file, "--id", id], &env);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    };
    // Each fits the account as it is (nothing runs), so each is journaled.
    submit("a", pools[0]("workers", 2));
    submit("b", pools[1]("workers", 2));
    let mut daemon = e.s.spawn_daemon(&["--workers", "4", "--quota-recheck", "200ms"], &env);
    let state = |id: &str| e.s.status(id)["state"].as_str().unwrap_or_default().to_string();
    let says = |id: &str| e.s.status(id)["waitsFor"].as_str().map(str::to_string);
    let one_waits = || {
        let done: Vec<&str> = ["a", "b"].into_iter().filter(|id| state(id) == "completed").collect();
        done.len() == 1 && says(if done[0] == "a" { "b" } else { "a" }).is_some()
    };
    let one = wait_until(std::time::Duration::from_secs(60), one_waits);
    assert!(one, "one runs, one waits: a {}, b {}\n{}", state("a"), state("b"), e.s.daemon_log());
    let (first, other) = if state("a") == "completed" { (0, "b") } else { (1, "a") };
    let said = says(other).unwrap_or_default();
    assert!(
        said.starts_with("quota: needs 8 vCPUs of On-Demand standard instances (2 m6i.xlarge), 0 free (quota 8, "),
        "{said}"
    );
    assert_eq!(instances(&e), 2, "the other launched nothing");
    // The first pool scaled to zero frees its vCPUs: the other starts and completes.
    submit("down", pools[first]("workers", 0));
    let done = wait_until(std::time::Duration::from_secs(60), || state(other) == "completed");
    terminate(&mut daemon, std::time::Duration::from_secs(20));
    assert!(done, "the other ran once vCPUs were free: {}\n{}", state(other), e.s.daemon_log());
    assert_eq!(state("down"), "completed");
    assert_eq!(says(other), None, "a wait ends with the first step");
    let log = e.s.daemon_log();
    assert!(log.contains("claimed by workflows running here") || log.contains("(quota 8, 8 in use)"), "{log}");
    assert_eq!(e.proxy.counts().get("RunInstances").copied(), Some(4), "{:?}", e.proxy.counts());
    for id in ["a", "b", "down"] {
        assert!(!e.s.history(id).iter().any(|ev| ev.to_string().contains("VcpuLimitExceeded")), "{id}");
    }
    assert_eq!(instances(&e), 2);
}

/// The account's hosted zones (moto's listing).
fn hosted_zones(e: &Env) -> u32 {
    e.c.block_on(e.c.r53.list_hosted_zones().send()).unwrap().hosted_zones().len() as u32
}

/// Route53's hosted zone limit one above what the account has: a provision (two private zones)
/// is refused before it is journaled, naming the limit, its reads throttled once and read again;
/// at two above, it fits and runs; run again under a new id with the account then full, its
/// zones exist already and it fits.
#[test]
fn a_provision_past_the_hosted_zone_limit_is_refused_before_any_change_and_one_that_fits_runs() {
    let e = Env::new();
    let before = hosted_zones(&e);
    e.proxy.set_quotas(Quotas::with(&[(HOSTED_ZONES, before + 1)]));
    e.proxy.reset_counts();
    // Route53 throttles in storms (five requests a second an account): the check reads again.
    e.proxy.fail_with("route53 GET /accountlimit/MAX_HOSTED_ZONES_BY_OWNER", "Throttling", 1);
    e.proxy.fail_with("route53 GET /hostedzonesbyname", "Throttling", 1);
    let p = e.input("hz.json", input("hz", &["us-east-1a"], json!({"singleNATGateway": true})));
    let refused = cli_checking_quotas(&e, &["run", "provision-infra", "--input", &p, "--id", "hz"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(err.contains(&format!("needs 2 hosted zones, 1 free (quota {}, {before} in use)", before + 1)), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(changes(&e), Vec::<String>::new(), "nothing changed");
    assert!(!e.s.cli(&["status", "hz"]).status.success(), "nothing journaled");
    assert_eq!(e.proxy.faults().get("coded"), Some(&2), "both throttles met and read again");
    e.proxy.set_quotas(Quotas::with(&[(HOSTED_ZONES, before + 2)]));
    let ran = cli_checking_quotas(&e, &["run", "provision-infra", "--input", &p, "--id", "hz"]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    assert_eq!(hosted_zones(&e), before + 2);
    // The account now full, the same cluster asked for again: its two zones are not new.
    let again = cli_checking_quotas(&e, &["run", "provision-infra", "--input", &p, "--id", "hz-again"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(hosted_zones(&e), before + 2, "no zone made twice");
}
