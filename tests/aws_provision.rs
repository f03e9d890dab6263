//! provision-infra and teardown, black box: the real binaries against moto on loopback, a real
//! journal, and the AWS state read back through the SDK.
//!
//! Why this file is one (570 lines): one concept, provision-infra as a user meets it on moto — its
//! output, adoption by a second run, crash resumes, rollbacks, metrics of the daemon that ran it;
//! they share its input and inventory helpers. The safety cases across clusters are
//! `one_authority.rs`, across journals `cross_journal.rs`.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::inventory::Inventory;
use support::moto::{Clients, Moto};
use support::proxy::{KillAt, Proxy};
use support::strict::Strict;
use support::*;

fn provision_input(name: &str, infra: &str, zones: &[&str]) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "zones": zones, "baseDomain": "example.com"})
}

#[test]
fn provision_one_zone_creates_the_exact_inventory_and_hypershift_output() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("one", "one-abcde", &["us-east-1a"]));
    let file = e.s.file("infra.json");
    let out = ok(&e.cli(&[
        "run",
        "provision-infra",
        "--input",
        &input,
        "--id",
        "p1",
        "--output-file",
        file.to_str().unwrap(),
    ]));
    let inv = Inventory::read(&e.c, "one-abcde");
    inv.assert_provisioned(&e.c, 1, 1, "one", "example.com");
    let written: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written, out, "--output-file holds what stdout printed");

    // HyperShift's CreateInfraOutput, every key of it with its casing, then ours.
    support::hypershift::assert_output_keys(&out, "create-infra-output.keys", &["securityGroupID", "publicSubnetIDs"]);
    assert!(out.get("name").is_none(), "HyperShift writes Name, capital N: {out}");
    assert_eq!(out["Name"], "one");
    assert_eq!(out["zone"], "", "HyperShift never fills it");
    assert_eq!(out["baseDomainPrefix"], "", "empty unless given, as HyperShift writes it");
    for key in
        ["proxyAddr", "secureProxyAddr", "proxyPrivateSSHKey", "proxyCA", "vpcCreatorAccountID", "clusterAccountID"]
    {
        assert_eq!(out[key], "", "{key}: no proxy, no shared VPC");
    }
    assert_eq!(out["publicOnly"], false);
    assert_eq!(out["infraID"], "one-abcde");
    assert_eq!(out["machineCIDR"], "10.0.0.0/16");
    assert_eq!(out["vpcID"], inv.vpcs[0].vpc_id().unwrap());
    assert_eq!(out["securityGroupID"], inv.security_groups[0].group_id().unwrap());
    assert_eq!(out["zones"][0]["name"], "us-east-1a");
    let private = inv.subnets.iter().find(|s| s.cidr_block() == Some("10.0.128.0/20")).unwrap();
    assert_eq!(out["zones"][0]["subnetID"], private.subnet_id().unwrap(), "zones list the private subnets");
    let zone_ids: Vec<&str> = inv.zones.iter().map(|z| z.0.as_str()).collect();
    assert!(zone_ids.contains(&out["privateZoneID"].as_str().unwrap()));
    assert!(zone_ids.contains(&out["localZoneID"].as_str().unwrap()));
    let st = e.s.status("p1");
    assert!(st["steps"].as_array().unwrap().iter().all(|s| s["completions"] == 1));
    // The run drawn: every step a node, the zone's branch hanging off the root chain and joining it.
    let graph = e.s.cli(&["graph", "provision-infra"]);
    assert!(graph.status.success(), "{}", stderr(&graph));
    let text = stdout(&graph);
    let nodes: Vec<&str> = text.lines().filter(|l| l.contains("[\"")).collect();
    assert_eq!(nodes.len(), st["steps"].as_array().unwrap().len(), "{text}");
    let id_of = |key: &str| {
        nodes
            .iter()
            .find(|l| l.contains(&format!("[\"{key}<br/>")))
            .map(|l| l.trim().split('[').next().unwrap().to_string())
    };
    let (vpc, nat, public_rt) =
        (id_of("vpc").unwrap(), id_of("zone/us-east-1a/nat-gateway").unwrap(), id_of("public-route-table").unwrap());
    let edges: Vec<&str> = text.lines().filter(|l| l.contains(" --> ")).map(str::trim).collect();
    assert!(edges.len() + 1 >= nodes.len(), "{text}");
    assert!(edges.iter().any(|e| e.starts_with(&format!("{vpc} --> "))), "{text}");
    assert!(edges.iter().any(|e| e.ends_with(&format!(" --> {nat}"))), "{text}");
    assert!(text.contains(&format!("{public_rt}[")), "{text}");
}

#[test]
fn provision_three_zones_then_a_new_workflow_for_the_same_infra_id_creates_nothing() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    let input = e.input("p.json", provision_input("three", "three-abcde", &["us-east-1a", "us-east-1b", "us-east-1c"]));
    let first = ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "first"]));
    let inv = Inventory::read(&e.c, "three-abcde");
    inv.assert_provisioned(&e.c, 3, 3, "three", "example.com");

    proxy.reset_counts();
    let second = ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "second"]));
    let creates: Vec<_> = proxy
        .counts()
        .into_iter()
        // CreateTags writes the adoption mark on what it takes over: it creates nothing.
        .filter(|(a, _)| a.starts_with("Create") && a != "CreateTags")
        .chain(proxy.counts().into_iter().filter(|(a, _)| a.starts_with("Allocate") || a == "route53 POST /hostedzone"))
        .collect();
    assert!(creates.is_empty(), "a second workflow adopts, never creates: {creates:?}");
    assert_eq!(first, second, "the same resources are reported");
    let again = Inventory::read(&e.c, "three-abcde");
    assert_eq!(again.ids(), inv.ids());
    let vpc = again.vpcs[0].vpc_id().unwrap();
    assert!(
        again.tags_of(vpc).iter().any(|(k, _)| k.starts_with("infraflow.io/adopted-by/")),
        "what it took over says so, for every journal's rollbacks to read: {:?}",
        again.tags_of(vpc)
    );
}

#[test]
fn a_failed_second_workflow_on_a_live_cluster_leaves_the_cluster_exactly_as_it_was() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    let input = e.input("p.json", provision_input("live", "live-abcde", &["us-east-1a", "us-east-1b", "us-east-1c"]));
    ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "live"]));
    let before = Inventory::read(&e.c, "live-abcde");
    before.assert_provisioned(&e.c, 3, 3, "live", "example.com");

    // The same cluster with a fourth zone: it adopts the VPC, gateways, subnets, NAT gateways and
    // zones of the live cluster, then AWS refuses a create (quota, permission). First the new
    // zone's NAT gateway; then the very first thing the second workflow would make.
    let grown = e.input(
        "p4.json",
        provision_input("live", "live-abcde", &["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]),
    );
    for (id, refused) in [("grow", "CreateNatGateway"), ("grow-again", "CreateSubnet")] {
        proxy.fail_action(Some(refused));
        let out = e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &grown, "--id", id]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let st = e.s.status(id);
        assert_eq!(st["state"], "compensated", "{refused}: {st}");
        let undone = st["steps"].as_array().unwrap().iter().filter(|s| s["key"].as_str().unwrap().starts_with("undo:"));
        assert!(undone.count() >= 5, "{refused}: every adopted step had its undo run (as a no-op): {st}");
        let after = Inventory::read(&e.c, "live-abcde");
        assert_eq!(
            after.ids(),
            before.ids(),
            "{refused}: every id of the live cluster is still there, and nothing else"
        );
    }
    proxy.fail_action(None);
    // And the live cluster is still whole enough to grow for real.
    ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &grown, "--id", "grow-for-real"]));
    Inventory::read(&e.c, "live-abcde").assert_provisioned(&e.c, 4, 4, "live", "example.com");
}

#[test]
fn a_workflow_resumed_in_another_account_pauses_naming_both_and_changes_nothing_there() {
    let e = Env::new();
    let other = Moto::start_as("222222222222");
    Clients::new(&other.endpoint()).create_public_zone("example.com");
    let slow = Proxy::start(e.moto.port);
    slow.set_latency(Duration::from_millis(150));
    let input = e.input("p.json", provision_input("acct", "acct-abcde", &["us-east-1a"]));
    let mut first = e.spawn_cli_at(&slow.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "acct"]);
    e.wait_for_step("acct", "vpc", Duration::from_secs(60));
    kill9(&mut first);

    // The same command from a shell whose credentials point at another account.
    let there = Proxy::start(other.port);
    let out = e.cli_at(&there.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "acct"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("acct");
    assert_eq!(st["state"], "paused", "{st}");
    let err = st["error"].as_str().unwrap();
    assert!(err.contains("account 123456789012") && err.contains("account 222222222222"), "{err}");
    let writes: Vec<_> = there.counts().into_iter().filter(|(a, _)| !is_read(a)).collect();
    assert!(writes.is_empty(), "no mutating call in the other account: {writes:?}");
    assert_eq!(Inventory::read(&Clients::new(&other.endpoint()), "acct-abcde").total(), 0);

    // With the right credentials, `retry` finishes it where it stopped.
    let out = e.cli(&["retry", "acct"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    Inventory::read(&e.c, "acct-abcde").assert_provisioned(&e.c, 1, 1, "acct", "example.com");
}

fn lagging(e: &Env) -> Proxy {
    let proxy = Proxy::start(e.moto.port);
    // Every new EC2 id is NotFound to calls naming it, and missing from Describe, for 2 s.
    proxy.set_strict(Strict { lag: Some(Duration::from_secs(2)), tokens: true, ..Strict::default() });
    proxy
}

#[test]
fn a_three_zone_provision_under_a_two_second_consistency_lag_makes_nothing_twice() {
    let e = Env::new();
    let proxy = lagging(&e);
    let input = e.input("p.json", provision_input("lag", "lag-abcde", &["us-east-1a", "us-east-1b", "us-east-1c"]));
    ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "lag"]));
    Inventory::read(&e.c, "lag-abcde").assert_provisioned(&e.c, 3, 3, "lag", "example.com");
    let effects = proxy.strict_effects();
    assert!(effects.get("lag-not-found").is_some_and(|n| *n > 0), "the lag was met: {effects:?}");
}

/// SAFETY-A5DD907 finding 4: the VPC, the internet gateway and the DHCP options are made, then a
/// call that configures them fails with a retryable 4xx. The retry's lookup runs after the
/// settle, counted from the failure, so it finds what was made under the lag instead of making
/// a second one.
#[test]
fn a_create_whose_follow_up_call_fails_is_found_by_its_retry_and_made_once() {
    let e = Env::new();
    let proxy = lagging(&e);
    for action in ["ModifyVpcAttribute", "AttachInternetGateway", "AssociateDhcpOptions"] {
        proxy.fail_with(action, "IncorrectState", 1);
    }
    let input = e.input("p.json", provision_input("follow", "follow-abcde", &["us-east-1a"]));
    ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "follow"]));
    assert_eq!(proxy.faults().get("coded").copied().unwrap_or(0), 3, "{:?}", proxy.faults());
    let inv = Inventory::read(&e.c, "follow-abcde");
    let counts = inv.counts();
    for kind in ["vpc", "internet-gateway", "dhcp-options"] {
        assert_eq!(counts.get(kind).copied(), Some(1), "{kind}: {counts:?}");
    }
    inv.assert_provisioned(&e.c, 1, 1, "follow", "example.com");
}

/// SAFETY-A5DD907 finding 4b: kill -9 just after AWS made a subnet, and the same command at once.
/// Under a 4 s lag the subnet's create went out seconds after its step started (the new VPC was
/// not known yet), so a settle counted from the step's start ended before AWS listed it: the
/// lookup missed it and the second CreateSubnet met InvalidSubnet.Conflict, a rollback. Counted
/// from the resume, the lookup finds it; and a conflict is now resolved to the subnet holding
/// the range (ours: adopted). Everything else in flight at the kill is found too.
#[test]
fn a_provision_killed_after_a_subnet_was_made_under_lag_resumes_without_a_rollback() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    proxy.set_strict(Strict { lag: Some(Duration::from_secs(4)), tokens: true, ..Strict::default() });
    let input = e.input("p.json", provision_input("sub", "sub-abcde", &["us-east-1a"]));
    let args = ["run", "provision-infra", "--input", input.as_str(), "--id", "sub"];
    let mut child = e.spawn_cli_at(&proxy.endpoint(), &args);
    proxy.kill_at_action("CreateSubnet", KillAt { call: 0, after_aws_acts: true, pid: child.id() });
    let status = child.wait().unwrap();
    assert!(proxy.action_kill_fired() && !status.success(), "{status:?}");
    ok(&e.cli_at(&proxy.endpoint(), &args));
    assert_eq!(e.s.status("sub")["state"], "completed");
    Inventory::read(&e.c, "sub-abcde").assert_provisioned(&e.c, 1, 1, "sub", "example.com");
}

/// SAFETY-A5DD907 finding 9: AWS lists new resources by tag 30 s late (longer than the undo
/// settle), and the provision fails for good right after its NAT gateway. Each undo deletes what
/// its completed step returned, by id, once the resource's own tags show this identity and
/// creator: nothing is left, the NAT gateway included.
#[test]
fn a_rollback_under_a_long_tag_lag_deletes_what_its_steps_made_by_id() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    // Longer than a loaded machine takes from the first create to the rollback's last lookup, so
    // the lag is met however slow the run (its deletes go by id and do not wait it out).
    let lag = Strict { lag: Some(Duration::from_secs(30)), lag_tag_filters_only: true, ..Strict::default() };
    proxy.set_strict(lag);
    proxy.fail_action(Some("CreateVpcEndpoint"));
    let input = e.input("p.json", provision_input("tlag", "tlag-abcde", &["us-east-1a"]));
    let out = e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "tlag"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(e.s.status("tlag")["state"], "compensated");
    assert!(proxy.strict_effects().get("lag-hidden-from-describe").is_some_and(|n| *n > 0), "the lag was met");
    let inv = Inventory::read(&e.c, "tlag-abcde");
    assert_eq!(inv.counts().get("nat-gateway").copied(), Some(0), "{:?}", inv.counts());
    assert_eq!(inv.total(), 0, "nothing it created remains: {:?}", inv.counts());
}

#[test]
fn a_daemon_killed_at_random_moments_under_a_consistency_lag_makes_nothing_twice() {
    let e = Env::new();
    let proxy = lagging(&e);
    proxy.set_latency(Duration::from_millis(100));
    let input = e.input("p.json", provision_input("lagk", "lagk-abcde", &["us-east-1a", "us-east-1b", "us-east-1c"]));
    assert!(e.cli(&["submit", "provision-infra", "--input", &input, "--id", "prov"]).status.success());
    let mut rng = Rng::from_env_or_time();
    let (landed, st) = e.kill_daemons_until_done(&proxy.endpoint(), "prov", 8, &mut rng);
    assert!(landed >= 6, "only {landed} kills landed mid-run");
    assert_eq!(st["state"], "completed", "{st}\n{}", e.s.daemon_log());
    Inventory::read(&e.c, "lagk-abcde").assert_provisioned(&e.c, 3, 3, "lagk", "example.com");
}

#[test]
fn eight_additional_tags_fit_and_default_zones_are_never_local_zones() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    proxy.set_strict(Strict { local_zone: true, route53_limits: true, route53_rate: 5, ..Strict::default() });
    let mut v = json!({"name": "tags", "infraID": "tags-abcde", "region": "us-east-1", "baseDomain": "example.com"});
    v["additionalTags"] = Value::Object((0..8).map(|i| (format!("team/k{i}"), json!(format!("v{i}")))).collect());
    let input = e.input("p.json", v);
    let out = ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "tags"]));
    assert_eq!(out["zones"][0]["name"], "us-east-1a", "the first Availability Zone, not the Local Zone listed first");
    Inventory::read(&e.c, "tags-abcde").assert_provisioned(&e.c, 1, 1, "tags", "example.com");
    let zone = out["localZoneID"].as_str().unwrap();
    let tags =
        e.c.block_on(
            e.c.r53
                .list_tags_for_resource()
                .resource_type(aws_sdk_route53::types::TagResourceType::Hostedzone)
                .resource_id(zone)
                .send(),
        )
        .unwrap();
    assert_eq!(
        tags.resource_tag_set().unwrap().tags().len(),
        14,
        "6 of infraflow's (ownership, Name, identity, created-by, HyperShift's infra-id and cluster-name) and 8 of the user's"
    );

    let mut many = json!({"name": "many", "region": "us-east-1", "baseDomain": "example.com"});
    many["additionalTags"] = Value::Object((0..41).map(|i| (format!("k{i}"), json!("v"))).collect());
    let path = e.input("many.json", many);
    let res = e.cli(&["submit", "provision-infra", "--input", &path]);
    assert_eq!(res.status.code(), Some(2));
    assert!(stderr(&res).contains("additionalTags") && stderr(&res).contains("at most 40"), "{}", stderr(&res));
}

#[test]
fn expired_credentials_pause_instead_of_rolling_back_and_retry_finishes() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    // Right after a new subnet, AWS may not know it yet (transient); later the session expires.
    proxy.fail_with("CreateNatGateway", "InvalidSubnet", 1);
    let input = e.input("p.json", provision_input("cred", "cred-abcde", &["us-east-1a"]));
    proxy.fail_with("CreateRouteTable", "ExpiredToken", 1);
    let out = e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "cred"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("cred");
    assert_eq!(st["state"], "paused", "not compensated: {st}");
    let err = st["error"].as_str().unwrap();
    assert!(err.contains("ExpiredToken") && err.contains("infraflow retry cred"), "{err}");
    assert!(Inventory::read(&e.c, "cred-abcde").total() > 5, "what was made is kept for the retry");

    // After `aws sso login`, the operator retries.
    let res = e.cli_at(&proxy.endpoint(), &["retry", "cred"]);
    assert_eq!(res.status.code(), Some(0), "{}", stderr(&res));
    Inventory::read(&e.c, "cred-abcde").assert_provisioned(&e.c, 1, 1, "cred", "example.com");
}

#[test]
fn single_nat_gateway_serves_every_zone() {
    let e = Env::new();
    let mut v = provision_input("single", "single-abcde", &["us-east-1a", "us-east-1b"]);
    v["singleNATGateway"] = json!(true);
    let input = e.input("p.json", v);
    ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    Inventory::read(&e.c, "single-abcde").assert_provisioned(&e.c, 2, 1, "single", "example.com");
}

#[test]
fn a_missing_public_zone_fails_before_anything_is_created() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    let mut v = provision_input("nozone", "nozone-abcde", &["us-east-1a"]);
    v["baseDomain"] = json!("absent.example.org");
    let input = e.input("p.json", v);
    let out = e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "nz"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no public hosted zone named absent.example.org"), "{}", stderr(&out));
    let writes: Vec<_> = proxy.counts().into_iter().filter(|(a, _)| !is_read(a)).collect();
    assert!(writes.is_empty(), "no AWS write: {writes:?}");
    assert_eq!(Inventory::read(&e.c, "nozone-abcde").total(), 0);
}

#[test]
fn a_terminal_error_on_one_create_compensates_everything_it_made() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    proxy.fail_action(Some("CreateNatGateway"));
    let input = e.input("p.json", provision_input("saga", "saga-abcde", &["us-east-1a", "us-east-1b"]));
    let out = e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "saga"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("saga");
    assert_eq!(st["state"], "compensated", "{st}");
    assert!(st["error"].as_str().unwrap().contains("InvalidParameterValue"), "{st}");
    let inv = Inventory::read(&e.c, "saga-abcde");
    assert_eq!(inv.total(), 0, "nothing it created remains: {:?}", inv.counts());
}

#[test]
fn throttling_5xx_and_dropped_connections_on_a_quarter_of_requests_still_give_the_exact_inventory() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    let mut rng = Rng::from_env_or_time();
    proxy.set_chaos(0.25, rng.below(u64::MAX));
    let input = e.input("p.json", provision_input("chaos", "chaos-abcde", &["us-east-1a", "us-east-1b", "us-east-1c"]));
    let out = e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "chaos"]);
    let faults = proxy.faults();
    eprintln!("faults injected: {faults:?}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A quarter of ~64 calls (and their retries): 16 expected; 5 rules out a proxy that injected
    // nothing without failing one seed in a thousand.
    assert!(faults.values().sum::<u32>() >= 5, "the chaos was real: {faults:?}");
    Inventory::read(&e.c, "chaos-abcde").assert_provisioned(&e.c, 3, 3, "chaos", "example.com");
}

#[test]
fn a_daemon_killed_at_random_moments_provisions_and_tears_down_exactly() {
    let e = Env::new();
    // Latency stretches the run so that every kill lands mid-provision.
    let proxy = Proxy::start(e.moto.port);
    proxy.set_latency(Duration::from_millis(100));
    let input = e.input("p.json", provision_input("kill", "kill-abcde", &["us-east-1a", "us-east-1b", "us-east-1c"]));
    assert!(e.cli(&["submit", "provision-infra", "--input", &input, "--id", "prov"]).status.success());
    let mut rng = Rng::from_env_or_time();
    let (landed, st) = e.kill_daemons_until_done(&proxy.endpoint(), "prov", 12, &mut rng);
    assert!(landed >= 10, "only {landed} kills landed mid-run");
    assert_eq!(st["state"], "completed", "{st}\n{}", e.s.daemon_log());
    assert!(st["steps"].as_array().unwrap().iter().all(|s| s["completions"] == 1));
    Inventory::read(&e.c, "kill-abcde").assert_provisioned(&e.c, 3, 3, "kill", "example.com");

    let t = e.input("t.json", json!({"infraID": "kill-abcde", "region": "us-east-1"}));
    assert!(e.cli(&["submit", "teardown", "--input", &t, "--id", "down"]).status.success());
    let (landed, st) = e.kill_daemons_until_done(&proxy.endpoint(), "down", 5, &mut rng);
    eprintln!("kills that landed mid-run: {landed}");
    assert!(landed >= 1, "no kill landed while the workflow ran");
    assert_eq!(st["state"], "completed", "{st}");
    let left = Inventory::read(&e.c, "kill-abcde");
    assert_eq!(left.total(), 0, "{:?}", left.counts());
}

#[test]
fn bad_provision_inputs_exit_2_with_one_line_naming_the_field_and_journal_nothing() {
    let s = Scratch::new();
    let base = json!({"name": "ok", "region": "us-east-1", "baseDomain": "example.com"});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let cases: Vec<(Value, &str)> = vec![
        (with("colour", json!("red")), "unknown field `colour`"),
        (with("vpcCIDR", json!("10.0.0.0/20")), "vpcCIDR"),
        (with("vpcCIDR", json!("10.0.0.300/16")), "vpcCIDR"),
        (with("vpcCIDR", json!("not-a-cidr")), "vpcCIDR"),
        (
            with(
                "zones",
                json!([
                    "us-east-1a",
                    "us-east-1b",
                    "us-east-1c",
                    "us-east-1d",
                    "us-east-1e",
                    "us-east-1f",
                    "us-east-1g",
                    "us-east-1h",
                    "us-east-1i"
                ]),
            ),
            "do not fit",
        ),
        (with("endpointAccess", json!("Sideways")), "endpointAccess"),
        (with("singleNATGateway", json!("yes")), "singleNATGateway"),
        (with("zones", json!("us-east-1a")), "zones"),
        (with("name", json!("")), "name"),
        (with("region", json!("mars")), "region"),
        (with("zones", json!(["eu-west-1a"])), "zones[0]"),
        (json!({"name": "ok", "region": "us-east-1"}), "baseDomain"),
        // Ownership and identity are infraflow's: `kubernetes.io/cluster/<other>=owned` would
        // make another cluster's teardown delete this one (SAFETY-A5DD907 finding 8).
        (with("additionalTags", json!({"kubernetes.io/cluster/other-abcde": "owned"})), "reserved"),
        (with("additionalTags", json!({"infraflow.io/identity": "x/vpc"})), "reserved"),
        (with("additionalTags", json!({"Name": "mine"})), "reserved"),
    ];
    for (v, expect) in cases {
        let path = s.write_json("bad.json", &v);
        let out = s.cli(&["submit", "provision-infra", "--input", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{v}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(expect), "{v}: {err:?} lacks {expect:?}");
    }
    let path = s.write_json("bad.json", &json!({"infraID": "x"}));
    let out = s.cli(&["run", "teardown", "--input", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let good = s.write_json("good.json", &json!({"infraID": "x-abcde", "region": "us-east-1"}));
    let good = good.to_str().unwrap();
    for args in [
        vec!["run", "teardown", "--input", path.to_str().unwrap(), "--dry-run"],
        vec!["run", "provision-infra", "--input", good, "--dry-run"],
        vec!["submit", "teardown", "--input", good, "--dry-run"],
    ] {
        let out = s.cli(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{args:?}: {}", stderr(&out));
    }
    let out = s.cli(&["run", "teardown", "--input", good, "--json"]);
    assert_eq!(out.status.code(), Some(2), "--json is the plan's: {}", stderr(&out));
    assert!(!s.db().exists(), "nothing journaled");
}

#[test]
fn the_daemon_counts_aws_calls_and_errors_by_operation_in_its_metrics() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    proxy.fail_with("CreateSubnet", "RequestLimitExceeded", 1);
    let input = e.input("p.json", provision_input("met", "met-abcde", &["us-east-1a"]));
    assert!(e.cli(&["submit", "provision-infra", "--input", &input, "--id", "met"]).status.success());
    let port = free_port();
    let mut d = e.daemon_with(&proxy.endpoint(), &["--listen", &format!("127.0.0.1:{port}")]);
    e.s.wait_for_state("met", &["completed"], Duration::from_secs(120));
    let body = http_get(port, "/metrics").1;
    let made: u32 = proxy.counts().values().sum();
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    assert_eq!(
        sample(&body, r#"infraflow_aws_calls_total{service="ec2",operation="CreateVpc",status="200"}"#),
        1.0,
        "{body}"
    );
    assert_eq!(
        sample(&body, r#"infraflow_aws_calls_total{service="ec2",operation="CreateSubnet",status="400"}"#),
        1.0,
        "{body}"
    );
    assert_eq!(
        sample(&body, r#"infraflow_aws_errors_total{operation="CreateSubnet",code="RequestLimitExceeded"}"#),
        1.0,
        "{body}"
    );
    assert!(sample(&body, r#"infraflow_step_retries_total{activity="ec2.ensure-subnet"}"#) >= 1.0, "{body}");
    // Every call the daemon made is counted, its startup's own-account read among them
    // (SAFETY-A7937A6: one GetCallerIdentity went uncounted).
    let counted: f64 = body
        .lines()
        .filter(|l| l.starts_with("infraflow_aws_calls_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(counted as u32, made, "{:?}\n{body}", proxy.counts());
}

/// Calls that change nothing: EC2/ELB Describe*, STS GetCallerIdentity, Route53 GETs.
fn is_read(action: &str) -> bool {
    action.starts_with("Describe")
        || action.starts_with("Get")
        || action.starts_with("List")
        || action.contains(" GET ")
}

/// Both directions of the HyperShift interop: what infraflow makes carries HyperShift's names
/// and ownership tag, so `hypershift create infra aws` over it finds every resource (one match
/// per role, the one infraflow's output names) and creates nothing, and `hypershift destroy
/// infra aws`, which deletes by the same tags, removes it.
#[test]
fn an_infraflow_cluster_is_found_by_hypershifts_own_lookups_one_match_per_role() {
    let e = Env::new();
    let zones = ["us-east-1a", "us-east-1b"];
    let input = e.input("p.json", provision_input("hs", "hs-abcde", &zones));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    for (i, z) in zones.iter().enumerate() {
        assert_eq!(out["zones"][i]["name"], *z);
    }
    for (role, name) in support::hypershift::roles("hs-abcde", &zones) {
        let found = support::hypershift::lookup(&e.c, "hs-abcde", role, name.as_deref());
        assert_eq!(found.len(), 1, "{role} {name:?}: {found:?}");
        let zone = name.as_deref().and_then(|n| zones.iter().position(|z| n.ends_with(z)));
        let expected = match (role, zone) {
            ("vpc", _) => out["vpcID"].as_str(),
            ("private-subnet", Some(i)) => out["zones"][i]["subnetID"].as_str(),
            ("public-subnet", Some(i)) => out["publicSubnetIDs"][i].as_str(),
            _ => None,
        };
        if let Some(id) = expected {
            assert_eq!(found[0], id, "{role} {name:?}");
        }
    }
}
