//! One authority on what belongs to a cluster, black box on moto: the recipes of
//! SAFETY-A7937A6 where a feature decided on its own what a cluster is — the janitor's anchor
//! from a name (G3), bring-your-own admission from nothing (G4), a zone's region from anyone's
//! VPC (G8), IAM's region from a missing tag — each run as the reading ran it, each ending with
//! the live cluster untouched and what is not sure named, never deleted.

mod support;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::customer_vpc::{CustomerVpc, snapshot};
use support::hypershift::{self, Cut};
use support::inventory::Inventory;
use support::*;

const PAST: &str = "2020-01-01T00:00:00Z";

fn tag(e: &Env, id: &str, key: &str, value: &str) {
    let t = aws_sdk_ec2::types::Tag::builder().key(key).value(value).build();
    e.c.block_on(e.c.ec2.create_tags().resources(id).tags(t).send()).unwrap();
}

fn byo_input(name: &str, infra: &str, vpc: &str, cidr: &str, subnets: Value) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "baseDomain": "example.com",
           "vpcID": vpc, "vpcCIDR": cidr, "subnets": subnets})
}

fn provision(e: &Env, infra: &str) -> Value {
    let input = e.input(
        &format!("{infra}.json"),
        json!({"name": infra.split('-').next().unwrap(), "infraID": infra, "region": "us-east-1",
               "zones": ["us-east-1a"], "baseDomain": "example.com"}),
    );
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", infra]))
}

/// The sweep's class of each cluster, by infraID, read by `sweep --dry-run --json`.
fn sweep_classes(e: &Env) -> (Value, std::collections::BTreeMap<String, String>) {
    let dry = ok(&e.cli(&["sweep", "--region", "us-east-1", "--dry-run", "--json"]));
    let classes = dry
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["infraID"].as_str().unwrap().to_string(), s["class"].as_str().unwrap().to_string()))
        .collect();
    (dry, classes)
}

/// G3: HyperShift CI's `create infra aws --infra-id X --additional-tags expirationDate=<past>`
/// (a VPC named `X-vpc` holding X's subnets) beside a live cluster X that was provisioned into a
/// customer's VPC, and beside an IAM-only cluster whose provider is dated in the future: the
/// sweep expires neither, and names the VPC as no anchor of theirs.
#[test]
fn a_vpc_named_for_a_byo_or_iam_only_cluster_with_a_past_date_expires_neither() {
    let e = Env::new();
    let cv = CustomerVpc::make(&e.c, "10.1", &["us-east-1a"], false);
    let input = e.input("byo.json", byo_input("byo", "byo-abcde", &cv.vpc, "10.1.0.0/16", cv.subnets()));
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "byo"]));
    let iam = e.input(
        "iam.json",
        json!({"infraID": "iam-abcde", "region": "us-east-1", "issuerURL": "https://oidc.example.com/iam-abcde", "expiresIn": "30d"}),
    );
    ok(&e.cli(&["run", "create-iam", "--input", &iam, "--id", "iam"]));
    // An IAM-only cluster made without a date: it never expires.
    let undated = e.input(
        "iu.json",
        json!({"infraID": "iu-abcde", "region": "us-east-1", "issuerURL": "https://oidc.example.com/iu-abcde"}),
    );
    ok(&e.cli(&["run", "create-iam", "--input", &undated, "--id", "iu"]));
    let mut forged = Vec::new();
    for infra in ["byo-abcde", "iam-abcde", "iu-abcde"] {
        let made = hypershift::make(&e.c, infra, &["us-east-1a"], Cut::AfterFirstZoneSubnets);
        tag(&e, &made["vpc"], "expirationDate", PAST);
        forged.push(made["vpc"].clone());
    }
    let (dry, classes) = sweep_classes(&e);
    assert_eq!(classes.get("byo-abcde").map(String::as_str), Some("unexpired"), "{dry:#}");
    assert_eq!(classes.get("iam-abcde").map(String::as_str), Some("unexpired"), "{dry:#}");
    assert_eq!(classes.get("iu-abcde").map(String::as_str), Some("unexpired"), "{dry:#}");
    let byo = dry.as_array().unwrap().iter().find(|s| s["infraID"] == "byo-abcde").unwrap();
    assert!(byo["ignored"].to_string().contains(&forged[0]), "the forged VPC named as no anchor: {byo:#}");
    let iam = dry.as_array().unwrap().iter().find(|s| s["infraID"] == "iam-abcde").unwrap();
    assert!(iam["anchor"].as_str().unwrap_or_default().starts_with("oidc-provider"), "{iam:#}");
    // The sweep itself submits no teardown of either.
    ok(&e.cli(&["sweep", "--region", "us-east-1", "--json"]));
    let list = e.s.cli(&["status", "--json"]);
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.contains("sweep-byo-abcde") && !list.contains("sweep-iam-abcde") && !list.contains("sweep-iu-abcde"),
        "{list}"
    );
}

/// G4: a provision into another cluster's network (infraflow made it for cluster Y) is refused
/// naming Y, and journals nothing; and where a cluster did get into Y's VPC (a release before
/// this one accepted it, its record and shared tag on the VPC), Y's teardown pauses before its
/// first delete naming it, deletes nothing, and goes on once it is gone.
#[test]
fn a_provision_into_another_clusters_vpc_is_refused_and_that_clusters_teardown_pauses_while_one_rides_on_it() {
    let e = Env::new();
    let y = provision(&e, "y-abcde");
    let vpc = y["vpcID"].as_str().unwrap().to_string();
    let subnets = json!([{"zone": "us-east-1a", "privateSubnetID": y["zones"][0]["subnetID"],
                          "publicSubnetID": y["publicSubnetIDs"][0]}]);
    let x = e.input("x.json", byo_input("x", "x-abcde", &vpc, "10.0.0.0/16", subnets));
    let before = snapshot(&e.c, &vpc);
    let refused = e.cli(&["run", "provision-infra", "--input", &x, "--id", "x"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(err.lines().any(|l| l.contains(&vpc) && l.contains("cluster y-abcde")), "names Y's VPC: {err}");
    assert!(err.lines().any(|l| l.contains("(private): cluster y-abcde's")), "names Y's subnets: {err}");
    assert_eq!(e.s.cli(&["status", "x"]).status.code(), Some(2), "nothing journaled");
    assert_eq!(snapshot(&e.c, &vpc), before, "Y's network untouched");

    // A rider a former release let in: its marks on Y's VPC, as a provision into it wrote them.
    tag(&e, &vpc, "kubernetes.io/cluster/x-abcde", "shared");
    tag(&e, &vpc, "infraflow.io/marks/x-abcde", "x@0 kubernetes.io/cluster/x-abcde");
    let t = e.input("t.json", json!({"infraID": "y-abcde", "region": "us-east-1"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &t, "--dry-run", "--json"]));
    assert!(plan["blocked"].to_string().contains("cluster x-abcde"), "{plan:#}");
    let whole = Inventory::read(&e.c, "y-abcde").total();
    let paused = e.cli(&["run", "teardown", "--input", &t, "--id", "td-y"]);
    assert!(!paused.status.success(), "{}", stdout(&paused));
    assert!(stderr(&paused).contains("x-abcde"), "names the rider: {}", stderr(&paused));
    assert_eq!(e.s.status("td-y")["state"], "paused");
    assert_eq!(Inventory::read(&e.c, "y-abcde").total(), whole, "nothing of Y deleted while X rides on it");
    // X gone (its marks off), the retry tears Y down.
    for key in ["kubernetes.io/cluster/x-abcde", "infraflow.io/marks/x-abcde"] {
        let t = aws_sdk_ec2::types::Tag::builder().key(key).build();
        e.c.block_on(e.c.ec2.delete_tags().resources(&vpc).tags(t).send()).unwrap();
    }
    ok(&e.cli(&["retry", "td-y"]));
    let done = e.s.status("td-y");
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(Inventory::read(&e.c, "y-abcde").total(), 0);
}

fn zone_exists(e: &Env, id: &str) -> bool {
    e.c.block_on(e.c.r53.get_hosted_zone().id(id).send()).is_ok()
}

/// G8: the cluster's zones also serve a hub VPC in us-west-2 (hub-and-spoke DNS): a teardown
/// naming us-west-2 leaves them and names them; the teardown in the cluster's own region
/// deletes them.
#[test]
fn a_zone_serves_a_region_only_through_the_clusters_own_vpc_there() {
    use aws_sdk_route53::types::{Vpc, VpcRegion};
    let e = Env::new();
    let out = provision(&e, "rg-abcde");
    let zones = [out["privateZoneID"].as_str().unwrap().to_string(), out["localZoneID"].as_str().unwrap().to_string()];
    let west = aws_sdk_ec2::Client::from_conf(
        e.c.ec2.config().to_builder().region(aws_sdk_ec2::config::Region::new("us-west-2")).build(),
    );
    let hub = e.c.block_on(west.create_vpc().cidr_block("10.50.0.0/16").send()).unwrap();
    let hub = hub.vpc().unwrap().vpc_id().unwrap().to_string();
    for z in &zones {
        let vpc = Vpc::builder().vpc_id(&hub).vpc_region(VpcRegion::UsWest2).build();
        e.c.block_on(e.c.r53.associate_vpc_with_hosted_zone().hosted_zone_id(z).vpc(vpc).send()).unwrap();
    }
    let t = e.input("west.json", json!({"infraID": "rg-abcde", "region": "us-west-2"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &t, "--dry-run", "--json"]));
    for z in &zones {
        assert!(!plan["delete"].to_string().contains(z.as_str()), "{plan:#}");
    }
    let done = ok(&e.cli(&["run", "teardown", "--input", &t, "--id", "west"]));
    for z in &zones {
        assert!(zone_exists(&e, z), "zone {z} deleted by a teardown of us-west-2: {done:#}");
        assert!(done["left"].to_string().contains(z.as_str()), "named: {done:#}");
    }
    let east = e.input("east.json", json!({"infraID": "rg-abcde", "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &east, "--id", "east"]));
    for z in &zones {
        assert!(!zone_exists(&e, z), "zone {z} left by its own region's teardown");
    }
}

/// IAM as HyperShift's CLI makes it (the cluster's ownership tag, no infraflow region tag) of a
/// cluster whose VPC is in us-east-1: a teardown naming us-west-2 leaves both roles and the
/// profile, and names them; the teardown in us-east-1 deletes them.
#[test]
fn iam_without_a_region_of_a_cluster_in_another_region_is_left_and_named() {
    let e = Env::new();
    let infra = "hs-abcde";
    hypershift::make(&e.c, infra, &["us-east-1a"], Cut::AfterFirstZoneSubnets);
    let owned = aws_sdk_iam::types::Tag::builder()
        .key(format!("kubernetes.io/cluster/{infra}"))
        .value("owned")
        .build()
        .unwrap();
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    for role in [format!("{infra}-worker-role"), format!("{infra}-ingress")] {
        e.c.block_on(
            e.c.iam.create_role().role_name(&role).assume_role_policy_document(trust).tags(owned.clone()).send(),
        )
        .unwrap();
    }
    let profile = format!("{infra}-worker");
    e.c.block_on(e.c.iam.create_instance_profile().instance_profile_name(&profile).tags(owned.clone()).send()).unwrap();
    let names = [format!("{infra}-worker-role"), format!("{infra}-ingress"), profile.clone()];

    let west = e.input("west.json", json!({"infraID": infra, "region": "us-west-2"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &west, "--dry-run", "--json"]));
    for n in &names {
        assert!(!plan["delete"].to_string().contains(n.as_str()), "{n}: {plan:#}");
        assert!(plan["leave"].to_string().contains(n.as_str()), "{n} named: {plan:#}");
    }
    let done = ok(&e.cli(&["run", "teardown", "--input", &west, "--id", "west"]));
    let role_exists = |r: &str| e.c.block_on(e.c.iam.get_role().role_name(r).send()).is_ok();
    let profile_exists = || e.c.block_on(e.c.iam.get_instance_profile().instance_profile_name(&profile).send()).is_ok();
    assert!(role_exists(&names[0]) && role_exists(&names[1]) && profile_exists(), "deleted from us-west-2: {done:#}");
    for n in &names {
        assert!(done["left"].to_string().contains(n.as_str()), "{n} named: {done:#}");
    }
    // A cluster in a customer's VPC (its record there, no VPC of its own): the same.
    let cv = CustomerVpc::make(&e.c, "10.4", &["us-east-1a"], false);
    let byo = e.input("hb.json", byo_input("hb", "hb-abcde", &cv.vpc, "10.4.0.0/16", cv.subnets()));
    ok(&e.cli(&["run", "provision-infra", "--input", &byo, "--id", "hb"]));
    let hb_owned =
        aws_sdk_iam::types::Tag::builder().key("kubernetes.io/cluster/hb-abcde").value("owned").build().unwrap();
    e.c.block_on(
        e.c.iam
            .create_role()
            .role_name("hb-abcde-worker-role")
            .assume_role_policy_document(trust)
            .tags(hb_owned)
            .send(),
    )
    .unwrap();
    let hb_west = e.input("hbw.json", json!({"infraID": "hb-abcde", "region": "us-west-2"}));
    let done = ok(&e.cli(&["run", "teardown", "--input", &hb_west, "--id", "hb-west"]));
    assert!(role_exists("hb-abcde-worker-role"), "a BYO cluster's IAM deleted from us-west-2: {done:#}");
    let east = e.input("east.json", json!({"infraID": infra, "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &east, "--id", "east"]));
    assert!(
        !role_exists(&names[0]) && !role_exists(&names[1]) && !profile_exists(),
        "its own region's teardown removes them"
    );
}

/// G9: a customer's value changed since the cluster marked it stays at teardown, and a record
/// of the cluster's marks copied onto an instance makes none of its tags the cluster's.
#[test]
fn a_byo_teardown_takes_off_only_the_values_it_wrote_and_only_where_it_marked() {
    let e = Env::new();
    let cv = CustomerVpc::make(&e.c, "10.2", &["us-east-1a"], false);
    let input = e.input("um.json", byo_input("um", "um-abcde", &cv.vpc, "10.2.0.0/16", cv.subnets()));
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "um"]));
    let private = cv.zones[0].1.clone();
    tag(&e, &private, "kubernetes.io/role/internal-elb", "true");
    let spec = aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
        .tags(aws_sdk_ec2::types::Tag::builder().key("infraflow.io/marks/um-abcde").value("x@0 CostCenter").build())
        .tags(aws_sdk_ec2::types::Tag::builder().key("CostCenter").value("4711").build())
        .build();
    let run =
        e.c.ec2
            .run_instances()
            .image_id("ami-12c6146b")
            .min_count(1)
            .max_count(1)
            .subnet_id(&private)
            .tag_specifications(spec);
    let instance = e.c.block_on(run.send()).unwrap().instances()[0].instance_id().unwrap().to_string();
    let t = e.input("t.json", json!({"infraID": "um-abcde", "region": "us-east-1"}));
    let done = ok(&e.cli(&["run", "teardown", "--input", &t, "--id", "td"]));
    let s = snapshot(&e.c, &cv.vpc);
    assert!(
        s[&private].contains("\"kubernetes.io/role/internal-elb\": \"true\""),
        "the customer's value stays: {}",
        s[&private]
    );
    assert!(!s[&private].contains("kubernetes.io/cluster/um-abcde"), "the cluster's own mark is off: {}", s[&private]);
    let tags = e.c.block_on(
        e.c.ec2
            .describe_tags()
            .filters(aws_sdk_ec2::types::Filter::builder().name("resource-id").values(&instance).build())
            .send(),
    );
    let keys: Vec<String> = tags.unwrap().tags().iter().filter_map(|t| t.key().map(str::to_string)).collect();
    assert!(keys.contains(&"CostCenter".to_string()), "{keys:?}: {done:#}");
    assert!(!done["unmarked"].to_string().contains(&instance), "{done:#}");
}

/// Ingress rules of group `group` as (protocol, from port, source, description).
fn ingress(e: &Env, group: &str) -> Vec<(String, i32, String, String)> {
    let out = e.c.block_on(e.c.ec2.describe_security_groups().group_ids(group).send()).unwrap();
    let mut rules = Vec::new();
    for p in out.security_groups()[0].ip_permissions() {
        let (proto, from) = (p.ip_protocol().unwrap_or_default().to_string(), p.from_port().unwrap_or(-1));
        for r in p.ip_ranges() {
            let d = r.description().unwrap_or_default().to_string();
            rules.push((proto.clone(), from, r.cidr_ip().unwrap_or_default().to_string(), d));
        }
        for r in p.ipv6_ranges() {
            let d = r.description().unwrap_or_default().to_string();
            rules.push((proto.clone(), from, r.cidr_ipv6().unwrap_or_default().to_string(), d));
        }
    }
    rules
}

/// G7: a provision run again revokes the worker group's rules nobody owns as journaled steps —
/// each rule named in its history — and its rollback gives them back as they were: killed after
/// AWS revoked the first, then cancelled, both rules stand again with their descriptions.
#[test]
fn a_provisions_revoke_of_a_persons_rules_is_journaled_and_undone_at_rollback() {
    use aws_sdk_ec2::types::{IpPermission, IpRange, Ipv6Range};
    use support::proxy::KillAt;
    let e = Env::new();
    let out = provision(&e, "rv-abcde");
    let group = out["securityGroupID"].as_str().unwrap().to_string();
    let person = IpPermission::builder()
        .ip_protocol("udp")
        .from_port(6081)
        .to_port(6081)
        .ip_ranges(IpRange::builder().cidr_ip("100.64.0.0/16").description("nodes on the secondary block").build())
        .build();
    let v6 = IpPermission::builder()
        .ip_protocol("tcp")
        .from_port(22)
        .to_port(22)
        .ipv6_ranges(Ipv6Range::builder().cidr_ipv6("2001:db8::/32").build())
        .build();
    for p in [person, v6] {
        e.c.block_on(e.c.ec2.authorize_security_group_ingress().group_id(&group).ip_permissions(p).send()).unwrap();
    }
    let theirs = |rules: &[(String, i32, String, String)]| {
        rules.iter().filter(|r| r.2 == "100.64.0.0/16" || r.2 == "2001:db8::/32").cloned().collect::<Vec<_>>()
    };
    let before = theirs(&ingress(&e, &group));
    assert_eq!(before.len(), 2, "{before:?}");

    let input = e.input(
        "again.json",
        json!({"name": "rv", "infraID": "rv-abcde", "region": "us-east-1",
                                             "zones": ["us-east-1a"], "baseDomain": "example.com"}),
    );
    let args = ["run", "provision-infra", "--input", input.as_str(), "--id", "again"];
    let mut child = e.spawn_cli_at(&e.proxy.endpoint(), &args);
    e.proxy.kill_at_action("RevokeSecurityGroupIngress", KillAt { call: 0, after_aws_acts: true, pid: child.id() });
    let status = child.wait().unwrap();
    assert!(e.proxy.action_kill_fired() && !status.success(), "{status:?}");
    assert_eq!(theirs(&ingress(&e, &group)).len(), 1, "AWS revoked the first before the kill");
    let cancelled = e.cli(&["cancel", "again"]);
    assert_eq!(e.s.status("again")["state"], "compensated", "{}", stderr(&cancelled));
    let mut back = theirs(&ingress(&e, &group));
    back.sort();
    let mut want = before.clone();
    want.sort();
    assert_eq!(back, want, "the rollback gave both rules back, descriptions and all");
    let history = serde_json::to_string(&e.s.history("again")).unwrap();
    assert!(history.contains("100.64.0.0/16") && history.contains("2001:db8::/32"), "named in its history");

    // A run that completes revokes them, and says which.
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "third"]));
    assert!(theirs(&ingress(&e, &group)).is_empty(), "{:?}", ingress(&e, &group));
    let history = serde_json::to_string(&e.s.history("third")).unwrap();
    assert!(history.contains("nodes on the secondary block"), "named with its description");
}

/// G4's S3 variant: a second bring-your-own cluster in the same customer's VPC rides on the
/// first's S3 endpoint. It records itself on it, so the first's teardown pauses before its first
/// delete naming it; once the second is torn down, the first's retry removes the endpoint.
#[test]
fn a_second_byo_cluster_on_the_firsts_s3_endpoint_holds_the_firsts_teardown_until_it_is_gone() {
    let e = Env::new();
    let cv = CustomerVpc::make(&e.c, "10.3", &["us-east-1a"], false);
    for (name, infra) in [("x", "x-abcde"), ("z", "z-abcde")] {
        let input = e.input(&format!("{name}.json"), byo_input(name, infra, &cv.vpc, "10.3.0.0/16", cv.subnets()));
        ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", name]));
    }
    let endpoints = |e: &Env| {
        let f = aws_sdk_ec2::types::Filter::builder().name("vpc-id").values(&cv.vpc).build();
        let out = e.c.block_on(e.c.ec2.describe_vpc_endpoints().filters(f).send()).unwrap();
        out.vpc_endpoints()
            .iter()
            .filter(|v| {
                !matches!(v.state().map(|s| s.as_str().to_ascii_lowercase()).as_deref(), Some("deleted" | "deleting"))
            })
            .filter_map(|v| v.vpc_endpoint_id().map(str::to_string))
            .collect::<Vec<_>>()
    };
    let only = endpoints(&e);
    assert_eq!(only.len(), 1, "z made none: it uses x's");
    let tx = e.input("tx.json", json!({"infraID": "x-abcde", "region": "us-east-1"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &tx, "--dry-run", "--json"]));
    assert!(plan["blocked"].to_string().contains("z-abcde"), "{plan:#}");
    let paused = e.cli(&["run", "teardown", "--input", &tx, "--id", "tx"]);
    assert!(!paused.status.success() && stderr(&paused).contains("z-abcde"), "{}", stderr(&paused));
    assert_eq!(endpoints(&e), only, "x's endpoint stays while z uses it");
    let tz = e.input("tz.json", json!({"infraID": "z-abcde", "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &tz, "--id", "tz"]));
    assert_eq!(endpoints(&e), only, "z's teardown leaves x's endpoint");
    ok(&e.cli(&["retry", "tx"]));
    assert_eq!(e.s.status("tx")["state"], "completed");
    assert!(endpoints(&e).is_empty(), "x's teardown removed its endpoint once z was gone");
}
