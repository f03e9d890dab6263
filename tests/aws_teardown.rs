//! teardown, black box: the real binaries against moto on loopback, a real journal, and the AWS
//! state read back through the SDK — what a running cluster adds, account-scale reads, and
//! dependencies that block a delete.

mod support;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::inventory::Inventory;
use support::proxy::Proxy;
use support::strict::Strict;
use support::*;

fn provision_input(name: &str, infra: &str, zones: &[&str]) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "zones": zones, "baseDomain": "example.com"})
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
    use aws_sdk_route53::types::RrType;
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
    let ingress_lb =
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
        .unwrap()
        .dns_name()
        .unwrap()
        .to_string();
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
    // The ingress's record in the public zone (to the cluster's load balancer), and someone
    // else's record beside it.
    let public = out["publicZoneID"].as_str().unwrap();
    create_record(&e, public, "*.apps.run.example.com", RrType::Cname, &ingress_lb);
    create_record(&e, public, "www.example.com", RrType::A, "192.0.2.10");
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
fn teardown_removes_everything_owned_and_spares_other_clusters_and_untagged_vpcs() {
    let e = Env::new();
    let a = e.input("a.json", provision_input("alpha", "alpha-abcde", &["us-east-1a", "us-east-1b"]));
    let b = e.input("b.json", provision_input("beta", "beta-abcde", &["us-east-1a"]));
    ok(&e.cli(&["run", "provision-infra", "--input", &a]));
    ok(&e.cli(&["run", "provision-infra", "--input", &b]));
    let untagged = e.c.create_vpc("10.9.0.0/16");
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

/// Creates the record `name` of type `kind` with `value` in zone `zone`.
fn create_record(e: &Env, zone: &str, name: &str, kind: aws_sdk_route53::types::RrType, value: &str) {
    use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ResourceRecord, ResourceRecordSet};
    let set = ResourceRecordSet::builder()
        .name(name)
        .r#type(kind)
        .ttl(60)
        .resource_records(ResourceRecord::builder().value(value).build().unwrap())
        .build()
        .unwrap();
    let change = Change::builder().action(ChangeAction::Create).resource_record_set(set).build().unwrap();
    let batch = ChangeBatch::builder().changes(change).build().unwrap();
    e.c.block_on(e.c.r53.change_resource_record_sets().hosted_zone_id(zone).change_batch(batch).send()).unwrap();
}

/// A classic load balancer of the cluster, in its subnet: what a `Service` of type LoadBalancer
/// makes. Returns its DNS name.
fn classic_load_balancer(e: &Env, name: &str, owner: &str, subnet: Option<&str>) -> String {
    let listener = aws_sdk_elasticloadbalancing::types::Listener::builder()
        .protocol("TCP")
        .load_balancer_port(443)
        .instance_port(30443)
        .build()
        .unwrap();
    let tag = aws_sdk_elasticloadbalancing::types::Tag::builder()
        .key(format!("kubernetes.io/cluster/{owner}"))
        .value("owned")
        .build()
        .unwrap();
    let create = e.c.classic.create_load_balancer().load_balancer_name(name).listeners(listener).tags(tag);
    let create = match subnet {
        Some(s) => create.subnets(s),
        None => create.availability_zones("us-east-1a"),
    };
    e.c.block_on(create.send()).unwrap().dns_name().unwrap().to_string()
}

/// SAFETY-A5DD907 finding 7: a blue/green replacement (same name, new infraID) has pointed
/// `*.apps.<name>.<base>` at its own ingress load balancer. Tearing the old cluster down removes
/// the old cluster's load balancer but not the replacement's record.
#[test]
fn teardown_leaves_the_apps_record_that_a_replacement_cluster_points_at_its_own_load_balancer() {
    use aws_sdk_route53::types::RrType;
    let e = Env::new();
    let input = e.input("p.json", provision_input("prod", "prod-aaaaa", &["us-east-1a"]));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    classic_load_balancer(&e, "blue-ingress", "prod-aaaaa", out["zones"][0]["subnetID"].as_str());
    let green = classic_load_balancer(&e, "green-ingress", "prod-bbbbb", None);
    let public = out["publicZoneID"].as_str().unwrap();
    create_record(&e, public, "*.apps.prod.example.com", RrType::Cname, &green);

    let t = e.input(
        "t.json",
        json!({"infraID": "prod-aaaaa", "region": "us-east-1", "baseDomain": "example.com", "name": "prod"}),
    );
    let plan = ok(&e.cli(&["run", "teardown", "--input", &t, "--dry-run", "--json"]));
    assert_eq!(plan["leave"][0]["id"], "*.apps.prod.example.com", "{plan}");
    assert!(plan["leave"][0]["reason"].as_str().unwrap().contains("load balancers"), "{plan}");
    let res = ok(&e.cli(&["run", "teardown", "--input", &t]));
    assert!(res["deleted"].get("public-record").is_none(), "{res}");
    assert_eq!(res["deleted"]["classic-load-balancer"], json!(["blue-ingress"]), "{res}");
    let left = e.c.block_on(e.c.r53.list_resource_record_sets().hosted_zone_id(public).send()).unwrap();
    let apps: Vec<_> = left.resource_record_sets().iter().filter(|r| r.name().contains("apps.prod")).collect();
    assert_eq!(apps.len(), 1, "the replacement's record is still there: {left:?}");
    assert_eq!(e.c.classic_load_balancers(), vec!["green-ingress".to_string()]);
}

/// SAFETY-A5DD907 finding 6: a foreign classic load balancer vanishes between the listing and
/// the tag read, and AWS answers LoadBalancerNotFound for the whole batch of names. The cluster's
/// own load balancer is still found in the first round (the second round finds nothing left).
#[test]
fn teardown_finds_its_classic_load_balancer_when_a_foreign_one_vanishes_mid_read() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("van", "van-abcde", &["us-east-1a"]));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    classic_load_balancer(&e, "van-ingress", "van-abcde", out["zones"][0]["subnetID"].as_str());
    classic_load_balancer(&e, "someone-else", "other-abcde", None);
    e.proxy.fail_with("DescribeTags", "LoadBalancerNotFound", 1);
    let t = e.input("t.json", json!({"infraID": "van-abcde", "region": "us-east-1"}));
    let res = ok(&e.cli(&["run", "teardown", "--input", &t]));
    assert_eq!(e.proxy.faults().get("coded").copied(), Some(1), "the vanishing was met");
    assert_eq!(res["deleted"]["classic-load-balancer"], json!(["van-ingress"]), "{res}");
    assert_eq!(res["rounds"], 2, "deleted in the first round, not found late: {res}");
    assert_eq!(Inventory::read(&e.c, "van-abcde").total(), 0);
    assert_eq!(e.c.classic_load_balancers(), vec!["someone-else".to_string()]);
}

/// SAFETY-A5DD907 finding 8: the cluster's DHCP options are also used by a VPC that is not the
/// cluster's. Teardown never re-points that VPC: it pauses naming it, and finishes on `retry`
/// once the VPC's owner has moved it.
#[test]
fn teardown_never_repoints_a_foreign_vpc_that_uses_the_clusters_dhcp_options() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("dhcp", "dhcp-abcde", &["us-east-1a"]));
    ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    let dopt = Inventory::read(&e.c, "dhcp-abcde").dhcp[0].dhcp_options_id().unwrap().to_string();
    let foreign = e.c.create_vpc("10.7.0.0/16");
    e.c.block_on(e.c.ec2.associate_dhcp_options().dhcp_options_id(&dopt).vpc_id(&foreign).send()).unwrap();
    let uses = |vpc: &str| {
        let out = e.c.block_on(e.c.ec2.describe_vpcs().vpc_ids(vpc).send()).unwrap();
        out.vpcs()[0].dhcp_options_id().unwrap().to_string()
    };

    let t = e.input("t.json", json!({"infraID": "dhcp-abcde", "region": "us-east-1", "maxDeleteAttempts": 1}));
    assert_eq!(uses(&foreign), dopt);

    // The plan first: every resource by kind and id, the foreign VPC named as what will block,
    // and nothing changed (only reads reached AWS; no journal was made).
    let before = Inventory::read(&e.c, "dhcp-abcde");
    e.proxy.reset_counts();
    let plan = ok(&e.cli(&["run", "teardown", "--input", &t, "--dry-run", "--json"]));
    let writes: Vec<String> = e
        .proxy
        .counts()
        .into_keys()
        .filter(|a| !["Describe", "List", "Get"].iter().any(|p| a.starts_with(p)) && !a.contains(" GET "))
        .collect();
    assert!(writes.is_empty(), "a dry run only reads: {writes:?}");
    let journaled = e.s.cli(&["status", "--json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&journaled.stdout).unwrap().as_array().unwrap().len(),
        1,
        "only the provision is journaled"
    );
    // Interfaces left in the cluster's subnets are the cluster's to delete too (moto shows the NAT
    // gateway's as available there); the inventory does not count them.
    let planned: std::collections::BTreeSet<String> = plan["delete"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] != "network-interface")
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(planned, before.ids(), "{plan}");
    assert_eq!(plan["delete"].as_array().unwrap().last().unwrap()["kind"], "vpc", "in teardown order: {plan}");
    assert_eq!(plan["blocked"][0]["id"], foreign.as_str(), "{plan}");
    assert_eq!(plan["account"], "123456789012", "{plan}");
    let text = e.cli(&["run", "teardown", "--input", &t, "--dry-run"]);
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let listed = plan["delete"].as_array().unwrap().len();
    assert_eq!(stdout(&text).lines().filter(|l| l.trim_start().starts_with("delete ")).count(), listed);
    assert_eq!(Inventory::read(&e.c, "dhcp-abcde").ids(), before.ids());

    let res = e.cli(&["run", "teardown", "--input", &t, "--id", "shared"]);
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    let st = e.s.status("shared");
    assert_eq!(st["state"], "paused", "{st}");
    assert!(st["error"].as_str().unwrap().contains(&foreign), "names the foreign VPC: {st}");
    assert_eq!(uses(&foreign), dopt, "the foreign VPC keeps its DHCP options");

    e.c.block_on(e.c.ec2.associate_dhcp_options().dhcp_options_id("default").vpc_id(&foreign).send()).unwrap();
    let res = e.cli(&["retry", "shared"]);
    assert_eq!(res.status.code(), Some(0), "{}", stderr(&res));
    assert_eq!(Inventory::read(&e.c, "dhcp-abcde").total(), 0);
}

/// SAFETY-A5DD907 finding 6: a teardown paused on a dependency is retried after the operator
/// removed it; meanwhile something new of the cluster appeared (here a subnet the cluster owns).
/// The retry discovers afresh instead of replaying the inventory it journaled before the pause.
#[test]
fn a_retried_teardown_discovers_afresh_what_appeared_while_it_was_paused() {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    let e = Env::new();
    let input = e.input("p.json", provision_input("fresh", "fresh-abcde", &["us-east-1a"]));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    let vpc = out["vpcID"].as_str().unwrap();
    let subnet = |cidr: &str, owner: Option<&str>| {
        let mut create = e.c.ec2.create_subnet().vpc_id(vpc).cidr_block(cidr).availability_zone("us-east-1a");
        if let Some(o) = owner {
            let tag = Tag::builder().key(format!("kubernetes.io/cluster/{o}")).value("owned").build();
            create = create
                .tag_specifications(TagSpecification::builder().resource_type(ResourceType::Subnet).tags(tag).build());
        }
        e.c.block_on(create.send()).unwrap().subnet().unwrap().subnet_id().unwrap().to_string()
    };
    let foreign = subnet("10.0.64.0/20", None);
    let t = e.input("t.json", json!({"infraID": "fresh-abcde", "region": "us-east-1", "maxDeleteAttempts": 1}));
    let res = e.cli(&["run", "teardown", "--input", &t, "--id", "paused"]);
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    assert_eq!(e.s.status("paused")["state"], "paused");

    let late = subnet("10.0.80.0/20", Some("fresh-abcde"));
    e.c.block_on(e.c.ec2.delete_subnet().subnet_id(&foreign).send()).unwrap();
    let res = e.cli(&["retry", "paused"]);
    assert_eq!(res.status.code(), Some(0), "{}", stderr(&res));
    let out: Value = serde_json::from_slice(&res.stdout).unwrap();
    assert!(out["deleted"]["subnet"].as_array().unwrap().iter().any(|s| s == late.as_str()), "{out}");
    assert_eq!(Inventory::read(&e.c, "fresh-abcde").total(), 0);
}

/// SAFETY-7243D60 N14: the cluster's internet gateway, attached by someone to a VPC that is not
/// the cluster's, is not detached from it: the teardown pauses naming that VPC; once they detach
/// it, `retry` finishes.
#[test]
fn teardown_never_detaches_the_clusters_gateway_from_a_vpc_that_is_not_the_clusters() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("gw", "gw-abcde", &["us-east-1a"]));
    ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    let inv = Inventory::read(&e.c, "gw-abcde");
    let (igw, vpc) =
        (inv.igws[0].internet_gateway_id().unwrap().to_string(), inv.vpcs[0].vpc_id().unwrap().to_string());
    let foreign = e.c.create_vpc("10.8.0.0/16");
    e.c.block_on(e.c.ec2.detach_internet_gateway().internet_gateway_id(&igw).vpc_id(&vpc).send()).unwrap();
    e.c.block_on(e.c.ec2.attach_internet_gateway().internet_gateway_id(&igw).vpc_id(&foreign).send()).unwrap();
    let attached_to = || {
        let out = e.c.block_on(e.c.ec2.describe_internet_gateways().internet_gateway_ids(&igw).send()).unwrap();
        out.internet_gateways()[0]
            .attachments()
            .iter()
            .filter_map(|a| a.vpc_id().map(str::to_string))
            .collect::<Vec<_>>()
    };
    let t = e.input("t.json", json!({"infraID": "gw-abcde", "region": "us-east-1"}));
    let res = e.cli(&["run", "teardown", "--input", &t, "--id", "gw"]);
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    let st = e.s.status("gw");
    assert_eq!(st["state"], "paused", "{st}");
    assert!(st["error"].as_str().unwrap().contains(&foreign), "names the VPC: {st}");
    assert_eq!(attached_to(), vec![foreign.clone()], "still attached where they put it");
    e.c.block_on(e.c.ec2.detach_internet_gateway().internet_gateway_id(&igw).vpc_id(&foreign).send()).unwrap();
    let res = e.cli(&["retry", "gw"]);
    assert_eq!(res.status.code(), Some(0), "{}", stderr(&res));
    assert_eq!(Inventory::read(&e.c, "gw-abcde").total(), 0);
}

/// SAFETY-A7937A6 G12 for the other reusable name a teardown deletes: a classic load balancer
/// deleted and made again with the cluster's tag (the same `Service`'s name) since discovery is
/// another incarnation (its creation time): the resumed round pauses naming it, never deletes it.
#[test]
fn a_resumed_teardown_pauses_on_a_classic_load_balancer_made_again_since_it_was_found() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("rg", "rg-abcde", &["us-east-1a"]));
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input]));
    let subnet = out["zones"][0]["subnetID"].as_str().map(str::to_string);
    classic_load_balancer(&e, "rg-ingress", "rg-abcde", subnet.as_deref());
    let t = e.input("t.json", json!({"infraID": "rg-abcde", "region": "us-east-1"}));
    let args = ["run", "teardown", "--input", t.as_str(), "--id", "rg-down"];
    let mut child = e.spawn_cli_at(&e.proxy.endpoint(), &args);
    e.proxy.kill_at_action(
        "DeleteLoadBalancer",
        support::proxy::KillAt { call: 0, after_aws_acts: false, pid: child.id() },
    );
    let status = child.wait().unwrap();
    assert!(e.proxy.action_kill_fired() && !status.success(), "{status:?}");
    e.c.block_on(e.c.classic.delete_load_balancer().load_balancer_name("rg-ingress").send()).unwrap();
    // Made again a moment later: another creation time, the same name and tag.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    classic_load_balancer(&e, "rg-ingress", "rg-abcde", subnet.as_deref());
    let resumed = e.cli(&args);
    assert_eq!(resumed.status.code(), Some(1), "{}", stderr(&resumed));
    let st = e.s.status("rg-down");
    assert_eq!(st["state"], "paused", "{st}");
    assert!(st.to_string().contains("classic-load-balancer rg-ingress was deleted and made again"), "{st}");
    let left = e.c.block_on(e.c.classic.describe_load_balancers().load_balancer_names("rg-ingress").send());
    assert!(left.is_ok(), "the newcomer was deleted");
}
