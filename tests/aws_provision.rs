//! provision-infra and teardown, black box: the real binaries against moto on loopback, a real
//! journal, and the AWS state read back through the SDK.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::inventory::Inventory;
use support::moto::{Clients, Moto};
use support::proxy::Proxy;
use support::strict::Strict;
use support::*;

fn provision_input(name: &str, infra: &str, zones: &[&str]) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "zones": zones, "baseDomain": "example.com"})
}

#[test]
fn provision_one_zone_creates_the_exact_inventory_and_hypershift_output() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("one", "one-abcde", &["us-east-1a"]));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "p1"]));
    let inv = Inventory::read(&e.c, "one-abcde");
    inv.assert_provisioned(&e.c, 1, 1, "one", "example.com");

    for field in [
        "region",
        "infraID",
        "machineCIDR",
        "vpcID",
        "zones",
        "baseDomain",
        "publicZoneID",
        "privateZoneID",
        "localZoneID",
        "securityGroupID",
        "publicSubnetIDs",
    ] {
        assert!(out.get(field).is_some(), "output lacks {field}: {out}");
    }
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
        .filter(|(a, _)| a.starts_with("Create") || a.starts_with("Allocate") || a == "route53 POST /hostedzone")
        .collect();
    assert!(creates.is_empty(), "a second workflow adopts, never creates: {creates:?}");
    assert_eq!(first, second, "the same resources are reported");
    let again = Inventory::read(&e.c, "three-abcde");
    assert_eq!(again.ids(), inv.ids());
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
    assert_eq!(tags.resource_tag_set().unwrap().tags().len(), 12, "4 of infraflow's and 8 of the user's");

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
fn teardown_among_three_hundred_unrelated_private_zones_at_five_route53_requests_a_second() {
    use aws_sdk_route53::types::{HostedZoneConfig, Vpc, VpcRegion};
    let e = Env::new();
    let input = e.input("p.json", provision_input("busy", "busy-abcde", &["us-east-1a"]));
    ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    // A management account: hundreds of other clusters' private zones.
    let other_vpc = e.c.block_on(e.c.ec2.create_vpc().cidr_block("10.20.0.0/16").send()).unwrap();
    let other_vpc = other_vpc.vpc().unwrap().vpc_id().unwrap().to_string();
    for i in 0..300 {
        let vpc = Vpc::builder().vpc_id(&other_vpc).vpc_region(VpcRegion::UsEast1).build();
        let config = HostedZoneConfig::builder().private_zone(true).comment(format!("cluster {i}")).build();
        e.c.block_on(
            e.c.r53
                .create_hosted_zone()
                .name(format!("c{i}.example.net"))
                .caller_reference(format!("other-{i}"))
                .vpc(vpc)
                .hosted_zone_config(config)
                .send(),
        )
        .unwrap();
    }
    let proxy = Proxy::start(e.moto.port);
    proxy.set_strict(Strict { route53_limits: true, route53_rate: 5, ..Strict::default() });
    let t = e.input("t.json", json!({"infraID": "busy-abcde", "region": "us-east-1"}));
    ok(&e.cli_at(&proxy.endpoint(), &["run", "teardown", "--input", &t, "--id", "busy"]));
    assert_eq!(Inventory::read(&e.c, "busy-abcde").total(), 0);
    let zones = e.c.block_on(e.c.r53.get_hosted_zone_count().send()).unwrap().hosted_zone_count();
    assert_eq!(zones, 301, "the 300 other zones and the public one are untouched");
    let route53: u32 = proxy.counts().iter().filter(|(a, _)| a.starts_with("route53")).map(|(_, n)| n).sum();
    let throttled = proxy.strict_effects().get("route53-throttled").copied().unwrap_or(0);
    eprintln!("BENCH teardown among 300 zones: {route53} Route53 calls ({throttled} throttled)");
    assert!(route53 <= 60, "scoped reads, not a scan per zone: {:?}", proxy.counts());
}

#[test]
fn teardown_removes_classic_elbs_referenced_groups_failed_endpoints_and_the_apps_record_and_nothing_foreign() {
    use aws_sdk_ec2::types::{IpPermission, ResourceType, Tag, TagSpecification, UserIdGroupPair};
    use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ResourceRecord, ResourceRecordSet, RrType};
    let e = Env::new();
    let input = e.input("p.json", provision_input("run", "run-abcde", &["us-east-1a"]));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    let (vpc, worker) = (out["vpcID"].as_str().unwrap(), out["securityGroupID"].as_str().unwrap());
    // The cloud provider's load balancer group, owned by the cluster, and rules naming each other.
    let owned = Tag::builder().key("kubernetes.io/cluster/run-abcde").value("owned").build();
    let spec = TagSpecification::builder().resource_type(ResourceType::SecurityGroup).tags(owned).build();
    let elb_sg =
        e.c.block_on(
            e.c.ec2
                .create_security_group()
                .group_name("k8s-elb-a1")
                .description("elb")
                .vpc_id(vpc)
                .tag_specifications(spec)
                .send(),
        )
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    let from = |group: &str| {
        IpPermission::builder()
            .ip_protocol("tcp")
            .from_port(30000)
            .to_port(32767)
            .user_id_group_pairs(UserIdGroupPair::builder().group_id(group).build())
            .build()
    };
    e.c.block_on(e.c.ec2.authorize_security_group_ingress().group_id(worker).ip_permissions(from(&elb_sg)).send())
        .unwrap();
    e.c.block_on(e.c.ec2.authorize_security_group_ingress().group_id(&elb_sg).ip_permissions(from(worker)).send())
        .unwrap();
    // The ingress's record in the public zone, and someone else's record beside it.
    let public = out["publicZoneID"].as_str().unwrap();
    let a = |name: &str| {
        let set = ResourceRecordSet::builder()
            .name(name)
            .r#type(RrType::A)
            .ttl(60)
            .resource_records(ResourceRecord::builder().value("192.0.2.10").build().unwrap())
            .build()
            .unwrap();
        Change::builder().action(ChangeAction::Create).resource_record_set(set).build().unwrap()
    };
    let batch =
        ChangeBatch::builder().changes(a("*.apps.run.example.com")).changes(a("www.example.com")).build().unwrap();
    e.c.block_on(e.c.r53.change_resource_record_sets().hosted_zone_id(public).change_batch(batch).send()).unwrap();

    // The cloud provider's classic load balancer for a Service, in the cluster's subnet behind
    // the k8s-elb group, and a classic one of another cluster that must survive.
    let subnet = out["zones"][0]["subnetID"].as_str().unwrap();
    let listener = aws_sdk_elasticloadbalancing::types::Listener::builder()
        .protocol("TCP")
        .load_balancer_port(443)
        .instance_port(30443)
        .build()
        .unwrap();
    let classic_tag = |infra: &str| {
        aws_sdk_elasticloadbalancing::types::Tag::builder()
            .key(format!("kubernetes.io/cluster/{infra}"))
            .value("owned")
            .build()
            .unwrap()
    };
    e.c.block_on(
        e.c.classic
            .create_load_balancer()
            .load_balancer_name("a1b2c3d4e5f6")
            .listeners(listener.clone())
            .subnets(subnet)
            .security_groups(&elb_sg)
            .scheme("internal")
            .tags(classic_tag("run-abcde"))
            .send(),
    )
    .unwrap();
    e.c.block_on(
        e.c.classic
            .create_load_balancer()
            .load_balancer_name("foreign-service")
            .listeners(listener)
            .availability_zones("us-east-1a")
            .tags(classic_tag("third-abcde"))
            .send(),
    )
    .unwrap();
    // An interface endpoint the cluster owns that AWS reports `failed`: it still sits in the VPC.
    let endpoint_spec = TagSpecification::builder()
        .resource_type(ResourceType::VpcEndpoint)
        .tags(Tag::builder().key("kubernetes.io/cluster/run-abcde").value("owned").build())
        .build();
    e.c.block_on(
        e.c.ec2
            .create_vpc_endpoint()
            .vpc_id(vpc)
            .vpc_endpoint_type(aws_sdk_ec2::types::VpcEndpointType::Interface)
            .service_name("com.amazonaws.us-east-1.sts")
            .subnet_ids(subnet)
            .security_group_ids(&elb_sg)
            .tag_specifications(endpoint_spec)
            .send(),
    )
    .unwrap();
    e.proxy.set_strict(Strict { failed_endpoints: true, ..Strict::from_env().unwrap_or_default() });

    // A teardown of another infraID that names this cluster must not touch its record.
    let wrong = e.input(
        "w.json",
        json!({"infraID": "other-abcde", "region": "us-east-1", "baseDomain": "example.com", "name": "run"}),
    );
    let res = ok(&e.cli(&["run", "teardown", "--input", &wrong, "--id", "wrong"]));
    assert!(res["deleted"].get("public-record").is_none(), "{res}");
    let t = e.input(
        "t.json",
        json!({"infraID": "run-abcde", "region": "us-east-1", "baseDomain": "example.com", "name": "run"}),
    );
    let res = ok(&e.cli(&["run", "teardown", "--input", &t, "--id", "down"]));
    assert_eq!(Inventory::read(&e.c, "run-abcde").total(), 0, "{res}");
    assert_eq!(res["deleted"]["security-group"].as_array().unwrap().len(), 2, "{res}");
    assert_eq!(res["deleted"]["public-record"], json!(["*.apps.run.example.com"]));
    assert_eq!(res["deleted"]["classic-load-balancer"], json!(["a1b2c3d4e5f6"]), "{res}");
    assert_eq!(res["deleted"]["vpc-endpoint"].as_array().unwrap().len(), 2, "gateway and failed interface: {res}");
    assert!(e.proxy.strict_effects().contains_key("endpoint-reported-failed"));
    assert_eq!(e.c.classic_load_balancers(), vec!["foreign-service".to_string()], "the other cluster's is untouched");
    let left = e.c.block_on(e.c.r53.list_resource_record_sets().hosted_zone_id(public).send()).unwrap();
    let names: Vec<&str> = left.resource_record_sets().iter().map(|r| r.name()).collect();
    assert!(names.contains(&"www.example.com.") && !names.iter().any(|n| n.contains("apps")), "{names:?}");
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
fn teardown_removes_everything_owned_and_spares_other_clusters_and_untagged_vpcs() {
    let e = Env::new();
    let a = e.input("a.json", provision_input("alpha", "alpha-abcde", &["us-east-1a", "us-east-1b"]));
    let b = e.input("b.json", provision_input("beta", "beta-abcde", &["us-east-1a"]));
    ok(&e.cli(&["run", "provision-infra", "--input", &a]));
    ok(&e.cli(&["run", "provision-infra", "--input", &b]));
    let untagged =
        e.c.block_on(e.c.ec2.create_vpc().cidr_block("10.9.0.0/16").send())
            .unwrap()
            .vpc()
            .unwrap()
            .vpc_id()
            .unwrap()
            .to_string();
    let beta_before = Inventory::read(&e.c, "beta-abcde");

    let t = e.input("t.json", json!({"infraID": "alpha-abcde", "region": "us-east-1"}));
    let out = ok(&e.cli(&["run", "teardown", "--input", &t, "--id", "t1"]));
    let left = Inventory::read(&e.c, "alpha-abcde");
    assert_eq!(left.total(), 0, "nothing owned is left: {:?} {:?}", left.counts(), left.endpoints);
    let deleted = out["deleted"].as_object().unwrap();
    assert_eq!(deleted["vpc"].as_array().unwrap().len(), 1);
    assert_eq!(deleted["nat-gateway"].as_array().unwrap().len(), 2);
    assert_eq!(deleted["hosted-zone"].as_array().unwrap().len(), 2);

    assert_eq!(Inventory::read(&e.c, "beta-abcde").ids(), beta_before.ids(), "another cluster is untouched");
    let still = e.c.block_on(e.c.ec2.describe_vpcs().vpc_ids(&untagged).send()).unwrap();
    assert_eq!(still.vpcs().len(), 1, "an untagged VPC is untouched");

    let again = ok(&e.cli(&["run", "teardown", "--input", &t, "--id", "t2"]));
    assert_eq!(again["deleted"], json!({}), "running it twice succeeds and finds nothing");
}

/// Calls that change nothing: EC2/ELB Describe*, STS GetCallerIdentity, Route53 GETs.
fn is_read(action: &str) -> bool {
    action.starts_with("Describe")
        || action.starts_with("Get")
        || action.starts_with("List")
        || action.contains(" GET ")
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
    assert!(faults.values().sum::<u32>() >= 10, "the chaos was real: {faults:?}");
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
    assert!(!s.db().exists(), "nothing journaled");
}

#[test]
fn teardown_pauses_naming_what_blocks_the_vpc_never_deletes_it_and_retry_finishes() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("block", "block-abcde", &["us-east-1a"]));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    let vpc = out["vpcID"].as_str().unwrap();
    // Someone else's subnet inside the cluster's VPC: not tagged, so not teardown's to delete.
    let foreign = e
        .c
        .block_on(e.c.ec2.create_subnet().vpc_id(vpc).cidr_block("10.0.64.0/20").availability_zone("us-east-1a").send())
        .unwrap()
        .subnet()
        .unwrap()
        .subnet_id()
        .unwrap()
        .to_string();

    let t = e.input("t.json", json!({"infraID": "block-abcde", "region": "us-east-1", "maxDeleteAttempts": 2}));
    let res = e.cli(&["run", "teardown", "--input", &t, "--id", "blocked"]);
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    let st = e.s.status("blocked");
    assert_eq!(st["state"], "paused", "{st}");
    let err = st["error"].as_str().unwrap();
    assert!(err.contains(vpc) && err.contains(&format!("subnet {foreign}")), "names the VPC and its blocker: {err}");
    let still = e.c.block_on(e.c.ec2.describe_subnets().subnet_ids(&foreign).send()).unwrap();
    assert_eq!(still.subnets().len(), 1, "the foreign subnet is never deleted");

    // The owner removes their subnet; retry finishes from the paused step.
    e.c.block_on(e.c.ec2.delete_subnet().subnet_id(&foreign).send()).unwrap();
    let res = e.cli(&["retry", "blocked"]);
    assert_eq!(res.status.code(), Some(0), "{}", stderr(&res));
    assert_eq!(Inventory::read(&e.c, "block-abcde").total(), 0);
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
}
