//! create-privatelink and create-cluster, black box against moto: exact inventories, adoption,
//! compensation, the zone-ID check, SIGKILL loops, and teardown of everything.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use support::aws::{AwsEnv, ok};
use support::inventory::Inventory;
use support::proxy::Proxy;
use support::strict::Strict;
use support::*;

struct Env {
    base: AwsEnv,
}

impl std::ops::Deref for Env {
    type Target = AwsEnv;
    fn deref(&self) -> &AwsEnv {
        &self.base
    }
}

impl Env {
    fn new() -> Env {
        Env { base: AwsEnv::new() }
    }

    fn provision(&self, infra: &str) -> Value {
        let input = self.input(
            "p.json",
            json!({"name": "pl", "infraID": infra, "region": "us-east-1", "zones": ["us-east-1a", "us-east-1b"],
                   "baseDomain": "example.com", "singleNATGateway": true}),
        );
        ok(&self.cli(&["run", "provision-infra", "--input", &input]))
    }

    /// ELBv2 resources, endpoint services, interface endpoints and records the cluster owns.
    fn link_inventory(&self, infra: &str) -> BTreeMap<&'static str, usize> {
        let key = format!("kubernetes.io/cluster/{infra}");
        let c = &self.c;
        c.block_on(async {
            let owned_elb = |arns: Vec<String>| async {
                if arns.is_empty() {
                    return 0;
                }
                let t = c.elb.describe_tags().set_resource_arns(Some(arns)).send().await.unwrap();
                t.tag_descriptions().iter().filter(|d| d.tags().iter().any(|t| t.key() == Some(key.as_str()))).count()
            };
            let lbs = c.elb.describe_load_balancers().send().await.unwrap();
            let lb_arns: Vec<String> =
                lbs.load_balancers().iter().filter_map(|l| l.load_balancer_arn().map(str::to_string)).collect();
            let tgs = c.elb.describe_target_groups().send().await.unwrap();
            let tg_arns: Vec<String> =
                tgs.target_groups().iter().filter_map(|t| t.target_group_arn().map(str::to_string)).collect();
            let services = c.ec2.describe_vpc_endpoint_service_configurations().send().await.unwrap();
            let owned_services = services
                .service_configurations()
                .iter()
                .filter(|s| s.tags().iter().any(|t| t.key() == Some(key.as_str())))
                .filter(|s| {
                    !matches!(s.service_state().map(|st| st.as_str().to_ascii_lowercase()).as_deref(), Some("deleted"))
                })
                .count();
            let eps = c.ec2.describe_vpc_endpoints().send().await.unwrap();
            let interface = eps
                .vpc_endpoints()
                .iter()
                .filter(|e| e.vpc_endpoint_type().map(|t| t.as_str()) == Some("Interface"))
                .filter(|e| e.tags().iter().any(|t| t.key() == Some(key.as_str())))
                .filter(|e| !matches!(e.state().map(|s| s.as_str().to_ascii_lowercase()).as_deref(), Some("deleted")))
                .count();
            BTreeMap::from([
                ("load-balancer", owned_elb(lb_arns).await),
                ("target-group", owned_elb(tg_arns).await),
                ("endpoint-service", owned_services),
                ("interface-endpoint", interface),
            ])
        })
    }

    fn cnames(&self, zone: &str) -> BTreeMap<String, String> {
        let out = self.c.block_on(self.c.r53.list_resource_record_sets().hosted_zone_id(zone).send()).unwrap();
        out.resource_record_sets()
            .iter()
            .filter(|r| r.r#type().as_str() == "CNAME")
            .map(|r| (r.name().replace("\\052", "*"), r.resource_records()[0].value().to_string()))
            .collect()
    }
}

fn link_input(infra: &str, out: &Value, expose: bool, management_subnets: Value) -> Value {
    json!({
        "name": "pl", "infraID": infra, "region": "us-east-1",
        "management": {"vpcID": out["vpcID"], "subnetIDs": management_subnets},
        "guest": {"vpcID": out["vpcID"], "subnetIDs": [out["zones"][0]["subnetID"], out["zones"][1]["subnetID"]], "machineCIDR": out["machineCIDR"]},
        "allowedPrincipals": ["arn:aws:iam::123456789012:role/cpo"],
        "exposeAPIServer": expose
    })
}

#[test]
fn create_privatelink_makes_the_exact_inventory_and_a_second_run_adopts_it() {
    let e = Env::new();
    let out = e.provision("pl-abcde");
    let proxy = Proxy::start(e.moto.port);
    let input = e.input("l.json", link_input("pl-abcde", &out, true, out["publicSubnetIDs"].clone()));
    let first = ok(&e.cli_at(&proxy.endpoint(), &["run", "create-privatelink", "--input", &input, "--id", "l1"]));
    let inv = e.link_inventory("pl-abcde");
    assert_eq!(
        inv,
        BTreeMap::from([("load-balancer", 2), ("target-group", 2), ("endpoint-service", 2), ("interface-endpoint", 2)])
    );
    for side in ["router", "apiServer"] {
        let arn = first[side]["loadBalancerArn"].as_str().unwrap();
        let name = arn.split('/').nth(2).unwrap();
        assert!(name.len() <= 32, "{name}");
    }
    let zone = out["localZoneID"].as_str().unwrap();
    let records = e.cnames(zone);
    assert_eq!(records.get("api.pl.hypershift.local.").map(String::as_str), first["apiServer"]["dnsName"].as_str());
    assert_eq!(records.get("*.apps.pl.hypershift.local.").map(String::as_str), first["router"]["dnsName"].as_str());
    assert_eq!(first["zoneID"], zone);
    // The endpoint service accepts without approval, from the allowed principal.
    let svc = first["router"]["endpointServiceId"].as_str().unwrap();
    let perms = e.c.block_on(e.c.ec2.describe_vpc_endpoint_service_permissions().service_id(svc).send()).unwrap();
    assert!(perms.allowed_principals().iter().any(|p| p.principal() == Some("arn:aws:iam::123456789012:role/cpo")));

    proxy.reset_counts();
    let second = ok(&e.cli_at(&proxy.endpoint(), &["run", "create-privatelink", "--input", &input, "--id", "l2"]));
    // CreateTags writes the adoption mark on what the first run made: it creates nothing.
    let creates: Vec<_> = proxy.counts().into_keys().filter(|a| a.starts_with("Create") && a != "CreateTags").collect();
    assert!(creates.is_empty(), "adopted, not created: {creates:?}");
    assert_eq!(first, second);
    assert_eq!(e.link_inventory("pl-abcde"), inv);
}

#[test]
fn a_guest_zone_the_service_does_not_offer_fails_before_the_endpoint_and_compensates() {
    let e = Env::new();
    let out = e.provision("zone-abcde");
    // Load balancers only in zone a; the guest wants zones a and b.
    let input = e.input("l.json", link_input("zone-abcde", &out, false, json!([out["publicSubnetIDs"][0]])));
    let res = e.cli(&["run", "create-privatelink", "--input", &input, "--id", "z"]);
    assert_eq!(res.status.code(), Some(1));
    let st = e.s.status("z");
    assert_eq!(st["state"], "compensated");
    assert!(st["error"].as_str().unwrap().contains("does not offer"), "{st}");
    let inv = e.link_inventory("zone-abcde");
    assert!(inv.values().all(|n| *n == 0), "{inv:?}");
    Inventory::read(&e.c, "zone-abcde").assert_provisioned(&e.c, 2, 1, "pl", "example.com");
}

#[test]
fn a_terminal_error_mid_privatelink_compensates_to_nothing_of_its_own() {
    let e = Env::new();
    let out = e.provision("saga-abcde");
    let proxy = Proxy::start(e.moto.port);
    proxy.fail_action(Some("CreateVpcEndpoint"));
    let input = e.input("l.json", link_input("saga-abcde", &out, true, out["publicSubnetIDs"].clone()));
    let res = e.cli_at(&proxy.endpoint(), &["run", "create-privatelink", "--input", &input, "--id", "s"]);
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    assert_eq!(e.s.status("s")["state"], "compensated");
    let inv = e.link_inventory("saga-abcde");
    assert!(inv.values().all(|n| *n == 0), "{inv:?}");
    assert!(e.cnames(out["localZoneID"].as_str().unwrap()).is_empty());
    // What provision-infra made is not privatelink's to undo.
    Inventory::read(&e.c, "saga-abcde").assert_provisioned(&e.c, 2, 1, "pl", "example.com");
}

#[test]
fn teardown_deletes_a_failed_endpoint_and_waits_out_interfaces_that_outlive_what_held_them() {
    let e = Env::new();
    let out = e.provision("failed-abcde");
    // The load balancer and endpoint come up slowly, and once deleted their network interfaces
    // outlive them (DependencyViolation on the subnets and groups they held); NAT gateways take
    // a while to go.
    let span = Duration::from_secs(2);
    let proxy = Proxy::start(e.moto.port);
    let slow = Strict { transitions: Some(span), ..Strict::from_env().unwrap_or_default() };
    proxy.set_strict(slow.clone());
    let input = e.input("l.json", link_input("failed-abcde", &out, false, out["publicSubnetIDs"].clone()));
    ok(&e.cli_at(&proxy.endpoint(), &["run", "create-privatelink", "--input", &input]));
    // From now on AWS reports the endpoint failed: it still sits in the VPC and must go.
    proxy.set_strict(Strict { failed_endpoints: true, ..slow });
    let t = e.input("t.json", json!({"infraID": "failed-abcde", "region": "us-east-1"}));
    let res = ok(&e.cli_at(&proxy.endpoint(), &["run", "teardown", "--input", &t, "--id", "down"]));
    let effects = proxy.strict_effects();
    assert!(effects.contains_key("endpoint-reported-failed"), "{effects:?}");
    for met in ["load-balancer-provisioning", "interfaces-linger", "dependency-still-held", "nat-gateway-in-transition"]
    {
        assert!(effects.contains_key(met), "{met}: {effects:?}");
    }
    assert!(e.link_inventory("failed-abcde").values().all(|n| *n == 0), "{res}");
    assert_eq!(Inventory::read(&e.c, "failed-abcde").total(), 0);
}

fn cluster_input(infra: &str) -> Value {
    json!({
        "infra": {"name": "cc", "infraID": infra, "region": "us-east-1", "zones": ["us-east-1a", "us-east-1b"],
                  "baseDomain": "example.com", "endpointAccess": "PublicAndPrivate"},
        "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"},
        "privateLink": {"allowedPrincipals": ["arn:aws:iam::123456789012:role/cpo"]}
    })
}

#[test]
fn create_cluster_over_an_existing_provision_failing_in_privatelink_leaves_the_provision_as_it_was() {
    let e = Env::new();
    let cluster = cluster_input("over-abcde");
    let infra = e.input("p.json", cluster["infra"].clone());
    ok(&e.cli(&["run", "provision-infra", "--input", &infra, "--id", "live"]));
    let before = Inventory::read(&e.c, "over-abcde");

    let proxy = Proxy::start(e.moto.port);
    proxy.fail_action(Some("CreateVpcEndpoint"));
    let input = e.input("c.json", cluster);
    let res = e.cli_at(&proxy.endpoint(), &["run", "create-cluster", "--input", &input, "--id", "over"]);
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    assert_eq!(e.s.status("over")["state"], "compensated");
    assert_eq!(Inventory::read(&e.c, "over-abcde").ids(), before.ids(), "the adopted provision is untouched");
    let inv = e.link_inventory("over-abcde");
    assert!(inv.values().all(|n| *n == 0), "what create-cluster made is gone: {inv:?}");
    assert_eq!(instances(&e, "over-abcde"), 0);
}

fn instances(e: &Env, infra: &str) -> usize {
    let key = format!("kubernetes.io/cluster/{infra}");
    let out = e.c.block_on(e.c.ec2.describe_instances().send()).unwrap();
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.tags().iter().any(|t| t.key() == Some(key.as_str())))
        .filter(|i| {
            !matches!(i.state().and_then(|s| s.name()).map(|n| n.as_str()), Some("terminated") | Some("shutting-down"))
        })
        .count()
}

#[test]
fn one_infra_id_created_torn_down_and_created_again_under_aws_token_memory() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    // AWS remembers ClientTokens with their first answer and CallerReferences forever.
    proxy.set_strict(Strict { tokens: true, local_zone: true, ..Strict::default() });
    let input = e.input("c.json", cluster_input("again-abcde"));
    let down = e.input("t.json", json!({"infraID": "again-abcde", "region": "us-east-1"}));
    for round in 1..=2 {
        let id = format!("create-{round}");
        ok(&e.cli_at(&proxy.endpoint(), &["run", "create-cluster", "--input", &input, "--id", &id]));
        Inventory::read(&e.c, "again-abcde").assert_provisioned_with_extras(&e.c, 2, 2, "cc", "example.com");
        let inv = e.link_inventory("again-abcde");
        assert_eq!(
            inv,
            BTreeMap::from([
                ("load-balancer", 1),
                ("target-group", 1),
                ("endpoint-service", 1),
                ("interface-endpoint", 1)
            ]),
            "round {round}"
        );
        assert_eq!(instances(&e, "again-abcde"), 2, "round {round}");
        ok(&e.cli_at(&proxy.endpoint(), &["run", "teardown", "--input", &down, "--id", &format!("down-{round}")]));
        assert_eq!(Inventory::read(&e.c, "again-abcde").total(), 0, "round {round}");
        assert!(e.link_inventory("again-abcde").values().all(|n| *n == 0), "round {round}");
        assert_eq!(instances(&e, "again-abcde"), 0, "round {round}");
    }
    let effects = proxy.strict_effects();
    assert!(effects.get("token-remembered").is_some_and(|n| *n >= 10), "tokens were remembered: {effects:?}");
    assert!(effects.get("caller-reference-seen").is_some_and(|n| *n >= 4), "{effects:?}");
    assert!(!effects.contains_key("token-mismatch") && !effects.contains_key("caller-reference-reused"), "{effects:?}");
}

#[test]
fn create_cluster_killed_at_random_moments_makes_no_duplicates_and_teardown_leaves_nothing() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    proxy.set_latency(Duration::from_millis(40));
    let input = e.input("c.json", cluster_input("cc-abcde"));
    assert!(e.cli(&["submit", "create-cluster", "--input", &input, "--id", "cc"]).status.success());
    let mut rng = Rng::from_env_or_time();
    let (landed, st) = e.kill_daemons_until_done(&proxy.endpoint(), "cc", 10, &mut rng);
    eprintln!("kills that landed mid-run: {landed}");
    assert!(landed >= 1, "no kill landed while the workflow ran");
    assert_eq!(st["state"], "completed", "{st}");
    assert!(st["steps"].as_array().unwrap().iter().all(|s| s["completions"] == 1));
    Inventory::read(&e.c, "cc-abcde").assert_provisioned_with_extras(&e.c, 2, 2, "cc", "example.com");
    assert_eq!(
        e.link_inventory("cc-abcde"),
        BTreeMap::from([("load-balancer", 1), ("target-group", 1), ("endpoint-service", 1), ("interface-endpoint", 1)])
    );
    assert_eq!(instances(&e, "cc-abcde"), 2, "one per zone, no duplicate");
    let zone = st["output"]["infra"]["localZoneID"].as_str().unwrap();
    assert_eq!(e.cnames(zone).len(), 2);

    let t = e.input("t.json", json!({"infraID": "cc-abcde", "region": "us-east-1"}));
    let out = ok(&e.cli(&["run", "teardown", "--input", &t]));
    assert_eq!(out["deleted"]["instance"].as_array().unwrap().len(), 2);
    assert_eq!(Inventory::read(&e.c, "cc-abcde").total(), 0);
    assert!(e.link_inventory("cc-abcde").values().all(|n| *n == 0));
    assert_eq!(instances(&e, "cc-abcde"), 0);
}

#[test]
fn bad_privatelink_and_cluster_inputs_exit_2_naming_the_field() {
    let s = Scratch::new();
    let good = json!({
        "name": "pl", "infraID": "pl-abcde", "region": "us-east-1",
        "management": {"vpcID": "vpc-1", "subnetIDs": ["subnet-1"]},
        "guest": {"vpcID": "vpc-2", "subnetIDs": ["subnet-2"], "machineCIDR": "10.0.0.0/16"},
        "allowedPrincipals": ["arn:aws:iam::123456789012:role/cpo"]
    });
    let mut cases: Vec<(String, Value, &str)> = Vec::new();
    let mut v = good.clone();
    v["guest"]["machineCIDR"] = json!("10.0.0.0/99");
    cases.push(("create-privatelink".into(), v, "guest.machineCIDR"));
    let mut v = good.clone();
    v["guest"]["subnetIDs"] = json!([]);
    cases.push(("create-privatelink".into(), v, "guest.subnetIDs"));
    let mut v = good.clone();
    v["allowedPrincipals"] = json!(["bob"]);
    cases.push(("create-privatelink".into(), v, "allowedPrincipals[0]"));
    let mut v = good.clone();
    v["exposeApiServer"] = json!(true);
    cases.push(("create-privatelink".into(), v, "unknown field"));
    let mut v = cluster_input("x-abcde");
    v["nodePool"]["replicas"] = json!(-2);
    cases.push(("create-cluster".into(), v, "nodePool.replicas"));
    let mut v = cluster_input("x-abcde");
    v["infra"]["vpcCIDR"] = json!("10.0.0.0/8");
    cases.push(("create-cluster".into(), v, "infra.vpcCIDR"));
    for (workflow, v, expect) in cases {
        let path = s.write_json("bad.json", &v);
        let out = s.cli(&["submit", &workflow, "--input", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{v}: {}", stderr(&out));
        assert!(stderr(&out).contains(expect) && stderr(&out).lines().count() == 1, "{expect}: {}", stderr(&out));
    }
    assert!(!s.db().exists());
}

#[test]
fn teardown_removes_privatelink_records_from_a_zone_it_does_not_own_and_keeps_the_zone() {
    let e = Env::new();
    let out = e.provision("rec-abcde");
    let vpc = out["vpcID"].as_str().unwrap().to_string();
    let foreign =
        e.c.block_on(
            e.c.r53
                .create_hosted_zone()
                .name("other.hypershift.local")
                .caller_reference("someone-else")
                .vpc(
                    aws_sdk_route53::types::Vpc::builder()
                        .vpc_id(&vpc)
                        .vpc_region(aws_sdk_route53::types::VpcRegion::UsEast1)
                        .build(),
                )
                .hosted_zone_config(aws_sdk_route53::types::HostedZoneConfig::builder().private_zone(true).build())
                .send(),
        )
        .unwrap()
        .hosted_zone()
        .unwrap()
        .id()
        .trim_start_matches("/hostedzone/")
        .to_string();
    let mut v = link_input("rec-abcde", &out, false, out["publicSubnetIDs"].clone());
    v["name"] = json!("other");
    v["localZoneID"] = json!(foreign);
    let input = e.input("l.json", v);
    ok(&e.cli(&["run", "create-privatelink", "--input", &input]));
    assert_eq!(e.cnames(&foreign).len(), 2, "records written into the given zone");

    let t = e.input("t.json", json!({"infraID": "rec-abcde", "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &t]));
    assert!(e.cnames(&foreign).is_empty(), "records pointing at the deleted endpoint are gone");
    let zone = e.c.block_on(e.c.r53.get_hosted_zone().id(&foreign).send());
    assert!(zone.is_ok(), "a zone infraflow does not own stays");
}

#[test]
fn create_privatelink_killed_at_random_moments_makes_no_duplicates() {
    let e = Env::new();
    let out = e.provision("kpl-abcde");
    let proxy = Proxy::start(e.moto.port);
    proxy.set_latency(Duration::from_millis(50));
    let input = e.input("l.json", link_input("kpl-abcde", &out, true, out["publicSubnetIDs"].clone()));
    assert!(e.cli(&["submit", "create-privatelink", "--input", &input, "--id", "kpl"]).status.success());
    let mut rng = Rng::from_env_or_time();
    let (landed, st) = e.kill_daemons_until_done(&proxy.endpoint(), "kpl", 8, &mut rng);
    eprintln!("kills that landed mid-run: {landed}");
    assert!(landed >= 1, "no kill landed while the workflow ran");
    assert_eq!(st["state"], "completed", "{st}");
    assert_eq!(
        e.link_inventory("kpl-abcde"),
        BTreeMap::from([("load-balancer", 2), ("target-group", 2), ("endpoint-service", 2), ("interface-endpoint", 2)])
    );
    assert_eq!(e.cnames(out["localZoneID"].as_str().unwrap()).len(), 2);
}
