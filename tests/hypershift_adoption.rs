//! provision-infra over what `hypershift create infra aws` made, whole or cut off half-way (it
//! has no rollback): every EC2 resource HyperShift made is adopted (its id kept, tagged with
//! infraflow's identity, never with created-by), the run completes what is missing, and the
//! cluster ends with exactly one of everything. A later failure compensates only what infraflow
//! made; two of a kind pause the workflow naming both.

mod support;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::hypershift::{Cut, make, make_zones};
use support::inventory::Inventory;
use support::proxy::Proxy;
use support::sweep::Part;
use support::*;

fn provision_input(name: &str, infra: &str, zones: &[&str]) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "zones": zones, "baseDomain": "example.com"})
}

/// The ids HyperShift made that the cluster still has, by role.
fn still_there(inv: &Inventory, made: &support::hypershift::Made) -> Vec<String> {
    let have = inv.ids();
    made.iter().filter(|(_, id)| !have.contains(*id)).map(|(role, id)| format!("{role} {id} is gone")).collect()
}

#[test]
fn provision_over_a_hypershift_run_cut_anywhere_adopts_what_it_made_and_completes_the_rest() {
    let e = Env::new();
    let zones = ["us-east-1a", "us-east-1b"];
    // `None`: the whole cluster, private zones included.
    for (i, cut) in [Some(Cut::AfterVpc), Some(Cut::AfterFirstZoneSubnets), Some(Cut::NatWithoutRouteTable), None]
        .into_iter()
        .enumerate()
    {
        let (name, infra) = (format!("hs{i}"), format!("hs{i}-abcde"));
        let mut made = make(&e.c, &infra, &zones, cut.unwrap_or(Cut::BeforeZones));
        if cut.is_none() {
            make_zones(&e.c, &name, "example.com", &mut made);
        }
        let input = e.input(&format!("{name}.json"), provision_input(&name, &infra, &zones));
        let out = ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", &name]));
        let inv = Inventory::read(&e.c, &infra);
        inv.assert_provisioned(&e.c, 2, 2, &name, "example.com");
        assert_eq!(still_there(&inv, &made), Vec::<String>::new(), "{cut:?}: every HyperShift id kept");
        if let Some(zone) = made.get("private-zone") {
            assert_eq!(out["privateZoneID"], *zone, "the output names HyperShift's zones");
            assert_eq!(out["localZoneID"], made["local-zone"]);
        }
        assert_eq!(out["vpcID"], made["vpc"], "{cut:?}");
        if let Some(private) = made.get("private-subnet/us-east-1a") {
            assert_eq!(out["zones"][0]["subnetID"], *private, "{cut:?}: the output names HyperShift's subnet");
        }
        // Adopted, never made: no created-by on anything HyperShift made.
        for id in made.iter().filter(|(role, _)| !role.ends_with("-zone")).map(|(_, id)| id) {
            let tags = inv.tags_of(id);
            assert!(tags.iter().any(|(k, _)| k == "infraflow.io/identity"), "{cut:?}: {id} adopted: {tags:?}");
            assert!(!tags.iter().any(|(k, _)| k == "infraflow.io/created-by"), "{cut:?}: {id}: {tags:?}");
        }
        if cut.is_none() {
            // The whole HyperShift cluster, adopted: teardown removes all of it.
            let td = e.input(
                "td.json",
                json!({"infraID": infra, "region": "us-east-1", "baseDomain": "example.com", "name": name}),
            );
            ok(&e.cli(&["run", "teardown", "--input", &td]));
            let left = Inventory::read(&e.c, &infra);
            assert_eq!(left.total(), 0, "teardown left {:?}", left.counts());
        }
    }
}

/// A failure after the adoption rolls back what infraflow made and nothing HyperShift made, at
/// every cut point: the first create HyperShift's run did not reach fails for good (a route
/// table; over the whole cluster, the worker security group, the one thing infraflow makes).
#[test]
fn a_failure_after_adopting_compensates_only_what_infraflow_made() {
    let e = Env::new();
    let cuts = [
        (Cut::AfterVpc, "CreateRouteTable", "RouteTableLimitExceeded"),
        (Cut::AfterFirstZoneSubnets, "CreateNatGateway", "NatGatewayLimitExceeded"),
        (Cut::NatWithoutRouteTable, "CreateRouteTable", "RouteTableLimitExceeded"),
        (Cut::BeforeZones, "CreateSecurityGroup", "SecurityGroupLimitExceeded"),
    ];
    for (i, (cut, action, code)) in cuts.into_iter().enumerate() {
        let (name, infra) = (format!("hf{i}"), format!("hf{i}-abcde"));
        let proxy = Proxy::start(e.moto.port);
        let made = make(&e.c, &infra, &["us-east-1a"], cut);
        let before = Inventory::read(&e.c, &infra).counts();
        proxy.fail_with(action, code, 1000);
        let input = e.input(&format!("{name}.json"), provision_input(&name, &infra, &["us-east-1a"]));
        let run = e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", &name]);
        assert_eq!(run.status.code(), Some(1), "{cut:?}: {}", stderr(&run));
        assert_eq!(e.s.status(&name)["state"], "compensated", "{cut:?}");
        let inv = Inventory::read(&e.c, &infra);
        assert_eq!(still_there(&inv, &made), Vec::<String>::new(), "{cut:?}: HyperShift's resources survive");
        // Exactly what HyperShift made is left: every kind counted as before the run (the
        // private zones, which the run made for a cut cluster, are gone again).
        let after = inv.counts();
        let kinds: Vec<&&str> = before.keys().chain(after.keys()).collect();
        for kind in kinds {
            let (b, a) = (before.get(*kind).copied().unwrap_or(0), after.get(*kind).copied().unwrap_or(0));
            assert_eq!(a, b, "{cut:?}: {kind}: {b} before the run, {a} after its rollback");
        }
    }
}

/// HyperShift's re-runs can leave two of a kind; which is the cluster's is the operator's call.
#[test]
fn two_hypershift_vpcs_for_one_cluster_pause_the_workflow_naming_both_and_create_nothing() {
    let e = Env::new();
    let a = make(&e.c, "hd-abcde", &["us-east-1a"], Cut::AfterVpc);
    let b = make(&e.c, "hd-abcde", &["us-east-1a"], Cut::AfterVpc);
    let input = e.input("hd.json", provision_input("hd", "hd-abcde", &["us-east-1a"]));
    let run = e.cli(&["run", "provision-infra", "--input", &input, "--id", "hd"]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let st = e.s.status("hd");
    assert_eq!(st["state"], "paused", "{st}");
    let why = st.to_string();
    assert!(why.contains(&a["vpc"]) && why.contains(&b["vpc"]), "names both: {why}");
    let counts = Inventory::read(&e.c, "hd-abcde").counts();
    let made: usize = counts.iter().filter(|(k, _)| **k != "vpc").map(|(_, n)| *n).sum();
    assert_eq!((counts.get("vpc").copied(), made), (Some(2), 0), "nothing created: {counts:?}");
}

/// SIGKILL at every AWS call of a provision over a half-made HyperShift cluster (the first
/// zone's subnets made): before the call reaches AWS, or after AWS acted (an adoption's tags
/// written, say) but before the answer arrives, each kill's resume killed at the next call
/// (`sweep::chain`). The run that finishes leaves one of everything and every HyperShift id kept.
fn adoption_sweep(after_aws_acts: bool) {
    let world = || {
        let e = Env::new();
        let proxy = Proxy::start(e.moto.port);
        (e, proxy)
    };
    let zones = ["us-east-1a"];
    let tag = if after_aws_acts { "a" } else { "b" };
    let run = |(e, proxy): &(Env, Proxy), name: &str, part: Option<&Part>| {
        let infra = format!("{name}-abcde");
        let made = make(&e.c, &infra, &zones, Cut::AfterFirstZoneSubnets);
        let input = e.input(&format!("{name}.json"), provision_input(name, &infra, &zones));
        let args = ["run", "provision-infra", "--input", input.as_str(), "--id", name];
        let killed = part.map(|part| support::sweep::chain(e, proxy, part, &args));
        ok(&e.cli_at(&proxy.endpoint(), &args));
        let inv = Inventory::read(&e.c, &infra);
        inv.assert_provisioned(&e.c, 1, 1, name, "example.com");
        assert_eq!(still_there(&inv, &made), Vec::<String>::new(), "{part:?}");
        killed.unwrap_or_default()
    };
    let first = world();
    first.1.reset_counts();
    run(&first, &format!("clean{tag}"), None);
    let clean = first.1.counts();
    let calls: u32 = clean.values().sum();
    assert!(calls > 20, "a provision makes dozens of calls, counted {calls}");
    support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part))
    });
    eprintln!(
        "adoption: killed at each of {calls} calls ({tag}): every run resumed to one of everything, HyperShift's ids kept"
    );
}

#[test]
fn a_provision_adopting_hypershifts_resources_killed_at_every_aws_call_before_it_reaches_aws_resumes_exactly() {
    adoption_sweep(false);
}

#[test]
fn a_provision_adopting_hypershifts_resources_killed_at_every_aws_call_after_aws_acted_resumes_exactly() {
    adoption_sweep(true);
}

/// A cluster HyperShift made whole is taken over by its identity marks alone: one CreateTags per
/// EC2 resource, the comment and tags of each private zone (and its SOA minimum where it is not
/// 60 yet), and nothing else HyperShift made is
/// written to (no attribute, association, attachment or route set again). The one thing made is
/// the worker security group, which `hypershift create infra aws` never makes (its control-plane
/// operator does, later). The output names HyperShift's ids.
#[test]
fn provision_over_a_whole_hypershift_cluster_writes_only_identity_marks_and_soa_minimums_and_makes_only_the_worker_group()
 {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    let zones = ["us-east-1a", "us-east-1b"];
    let mut made = make(&e.c, "hw-abcde", &zones, Cut::BeforeZones);
    make_zones(&e.c, "hw", "example.com", &mut made);
    let input = e.input("hw.json", provision_input("hw", "hw-abcde", &zones));
    proxy.reset_counts();
    let out = ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "hw"]));
    let mutations: std::collections::BTreeMap<String, u32> =
        proxy.counts().into_iter().filter(|(a, _)| support::chain::is_change(a)).collect();
    let ec2_made = made.keys().filter(|role| !role.ends_with("-zone")).count() as u32;
    let expected: std::collections::BTreeMap<String, u32> = [
        ("CreateTags", ec2_made),
        ("route53 POST /hostedzone/{id}", 2),
        ("route53 POST /tags/hostedzone/{id}", 2),
        // The zones' SOA minimum, 86400 as these zones were made (by a HyperShift from before
        // its setSOAMinimum) and 60 after.
        ("route53 POST /hostedzone/{id}/rrset", 2),
        ("CreateSecurityGroup", 1),
        ("AuthorizeSecurityGroupIngress", 1),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    if support::strict::Strict::from_env().is_none() {
        assert_eq!(mutations, expected, "the only writes over a whole HyperShift cluster");
    } else {
        // Strict AWS refuses some writes for a moment (Route53's rate, a new group not yet
        // visible): their retries are counted too, and made nothing. The kinds and the two
        // counts that matter stay exact.
        assert_eq!(mutations.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>());
        assert_eq!((mutations["CreateTags"], mutations["CreateSecurityGroup"]), (ec2_made, 1), "{mutations:?}");
    }
    assert_eq!(out["vpcID"], made["vpc"]);
    assert_eq!(out["privateZoneID"], made["private-zone"]);
    let subnets: Vec<&Value> = out["zones"].as_array().unwrap().iter().map(|z| &z["subnetID"]).collect();
    assert_eq!(subnets, [&json!(made["private-subnet/us-east-1a"]), &json!(made["private-subnet/us-east-1b"])]);
    let public: Vec<&str> = out["publicSubnetIDs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(public, [made["public-subnet/us-east-1a"].as_str(), made["public-subnet/us-east-1b"].as_str()]);
}

/// Two HyperShift VPCs: the operator keeps one by tagging it with the identity the pause names;
/// the retry adopts that VPC's subnets and gateway, never the other VPC's namesakes.
#[test]
fn after_the_operator_picks_one_of_two_hypershift_vpcs_only_that_vpcs_resources_are_adopted() {
    let e = Env::new();
    let zones = ["us-east-1a"];
    let other = make(&e.c, "hp-abcde", &zones, Cut::NatWithoutRouteTable);
    let kept = make(&e.c, "hp-abcde", &zones, Cut::NatWithoutRouteTable);
    let input = e.input("hp.json", provision_input("hp", "hp-abcde", &zones));
    let run = e.cli(&["run", "provision-infra", "--input", &input, "--id", "hp"]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let why = e.s.status("hp").to_string();
    let tag = why.split("infraflow.io/identity=").nth(1).expect("the pause names the tag to set");
    let key: String = tag.chars().take_while(|c| !c.is_whitespace() && *c != ',').collect();
    let t = aws_sdk_ec2::types::Tag::builder().key("infraflow.io/identity").value(&key).build();
    e.c.block_on(e.c.ec2.create_tags().resources(&kept["vpc"]).tags(t).send()).unwrap();
    ok(&e.cli(&["retry", "hp"]));
    assert_eq!(e.s.status("hp")["state"], "completed");
    let out = e.s.status("hp")["output"].clone();
    assert_eq!(out["vpcID"], kept["vpc"]);
    assert_eq!(out["zones"][0]["subnetID"], kept["private-subnet/us-east-1a"], "{out}");
    assert_eq!(out["publicSubnetIDs"][0], kept["public-subnet/us-east-1a"], "{out}");
    let inv = Inventory::read(&e.c, "hp-abcde");
    for role in ["dhcp-options", "internet-gateway", "private-subnet/us-east-1a", "eip/us-east-1a", "nat/us-east-1a"] {
        let tags = inv.tags_of(&other[role]);
        assert!(!tags.iter().any(|(k, _)| k == "infraflow.io/identity"), "the other VPC's {role} left alone: {tags:?}");
        assert!(inv.tags_of(&kept[role]).iter().any(|(k, _)| k == "infraflow.io/identity"), "{role} adopted");
    }
}

/// SAFETY-7243D60 N9: over HyperShift's VPC, a group someone made under the name infraflow gives
/// the worker group (untagged: not the cluster's) is neither taken nor widened: the provision
/// pauses naming it, and its rules are what they were.
#[test]
fn a_persons_group_named_like_the_worker_group_is_left_as_it_is_and_named() {
    let e = Env::new();
    let infra = "hg-abcde";
    let made = make(&e.c, infra, &["us-east-1a"], Cut::BeforeZones);
    let theirs = e.c.block_on(
        e.c.ec2
            .create_security_group()
            .group_name(format!("{infra}-worker-sg"))
            .description("a person's")
            .vpc_id(&made["vpc"])
            .send(),
    );
    let theirs = theirs.unwrap().group_id().unwrap().to_string();
    let rules = |g: &str| {
        let out = e.c.block_on(e.c.ec2.describe_security_groups().group_ids(g).send()).unwrap();
        format!("{:?} {:?}", out.security_groups()[0].ip_permissions(), out.security_groups()[0].tags())
    };
    let before = rules(&theirs);
    let input = e.input("hg.json", provision_input("hg", infra, &["us-east-1a"]));
    let run = e.cli(&["run", "provision-infra", "--input", &input, "--id", "hg"]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let st = e.s.status("hg");
    assert_eq!(st["state"], "paused", "{st}");
    // The group's step names it (the workflow's last error may be a sibling branch's throttle,
    // recorded as it stopped, under the strict layer's Route53 rate).
    let group_step = st["steps"].as_array().unwrap().iter().find(|s| s["key"] == "security-group").unwrap();
    assert!(group_step["error"].as_str().unwrap_or_default().contains(&theirs), "names the group: {st}");
    assert_eq!(rules(&theirs), before, "no rule added, no tag written");
}

/// SAFETY-7243D60 N8: a private zone of the cluster's name on HyperShift's VPC that a person
/// made (their comment, shared with another VPC) is not adopted, so the cluster's teardown
/// leaves it with its records.
#[test]
fn a_persons_private_zone_of_the_clusters_name_is_never_adopted_nor_torn_down() {
    use aws_sdk_route53::types::{HostedZoneConfig, Vpc, VpcRegion};
    let e = Env::new();
    let infra = "hz-abcde";
    let made = make(&e.c, infra, &["us-east-1a"], Cut::BeforeZones);
    let other = e.c.create_vpc("10.9.0.0/16");
    let vpc = |id: &str| Vpc::builder().vpc_id(id).vpc_region(VpcRegion::UsEast1).build();
    let zone = e.c.block_on(
        e.c.r53
            .create_hosted_zone()
            .name("hz.example.com")
            .caller_reference("corp-zone")
            .vpc(vpc(&made["vpc"]))
            .hosted_zone_config(HostedZoneConfig::builder().comment("corp").private_zone(true).build())
            .send(),
    );
    let zone = zone.unwrap().hosted_zone().unwrap().id().trim_start_matches("/hostedzone/").to_string();
    e.c.block_on(e.c.r53.associate_vpc_with_hosted_zone().hosted_zone_id(&zone).vpc(vpc(&other)).send()).unwrap();
    let input = e.input("hz.json", provision_input("hz", infra, &["us-east-1a"]));
    // Whether AWS lets a second zone of the name onto the VPC (moto does; AWS answers
    // ConflictingDomainExists, and the provision fails naming it), theirs is never taken.
    let run = e.cli(&["run", "provision-infra", "--input", &input, "--id", "hz"]);
    assert!(matches!(run.status.code(), Some(0 | 1)), "{}", stderr(&run));
    let td = e.input("td.json", json!({"infraID": infra, "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &td]));
    let kept = e.c.block_on(e.c.r53.get_hosted_zone().id(&zone).send()).expect("the person's zone is still there");
    let comment = kept.hosted_zone().and_then(|z| z.config()).and_then(|c| c.comment()).unwrap_or_default();
    assert_eq!(comment, "corp", "and still theirs");
}
