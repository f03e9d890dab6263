//! Bring your own VPC, black box: a cluster provisioned into a network the customer made (straight
//! on moto, as their own tooling would), checked before anything is journaled, marked but never
//! changed otherwise, and left by its teardown exactly as it was.

mod support;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::customer_vpc::{CustomerVpc, snapshot};
use support::inventory::Inventory;
use support::proxy::Proxy;
use support::*;

/// The creates a customer's network makes unneeded: none of them may be called.
const NETWORK_CREATES: [&str; 7] = [
    "CreateVpc",
    "CreateSubnet",
    "CreateInternetGateway",
    "CreateNatGateway",
    "AllocateAddress",
    "CreateRouteTable",
    "CreateDhcpOptions",
];

fn byo_input(name: &str, infra: &str, cv: &CustomerVpc) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "baseDomain": "example.com",
           "vpcID": cv.vpc, "vpcCIDR": "10.1.0.0/16", "subnets": cv.subnets()})
}

/// What the cluster made in the customer's VPC: its worker group and two private zones, and an S3
/// endpoint unless the customer had one; nothing of the network's kinds.
fn assert_only_the_clusters_own(e: &Env, infra: &str, s3_endpoint: bool) {
    let counts = Inventory::read(&e.c, infra).counts();
    let want: BTreeMap<&str, usize> = counts
        .keys()
        .map(|k| {
            let n = match *k {
                "security-group" => 1,
                "hosted-zone" => 2,
                "vpc-endpoint" => usize::from(s3_endpoint),
                _ => 0,
            };
            (*k, n)
        })
        .collect();
    assert_eq!(counts, want, "only the cluster's own resources, once each");
}

/// The customer's subnets carry the cluster's marks, each with one record of what it added.
fn assert_marked(e: &Env, infra: &str, cv: &CustomerVpc) {
    for (zone, private, public) in &cv.zones {
        for (id, role) in [(private, "kubernetes.io/role/internal-elb"), (public, "kubernetes.io/role/elb")] {
            let s = snapshot(&e.c, &cv.vpc);
            let text = &s[id];
            assert!(text.contains(&format!("\"kubernetes.io/cluster/{infra}\": \"shared\"")), "{zone} {id}: {text}");
            assert!(text.contains(&format!("\"{role}\": \"1\"")), "{zone} {id}: {text}");
            assert!(text.contains(&format!("\"infraflow.io/marks/{infra}\"")), "{zone} {id}: {text}");
        }
        let s = snapshot(&e.c, &cv.vpc);
        assert!(s[private].contains(&format!("\"karpenter.sh/discovery\": \"{infra}\"")), "{}", s[private]);
    }
}

#[test]
fn a_cluster_in_a_customers_vpc_makes_no_network_and_its_teardown_leaves_the_vpc_as_it_was() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    let cv = CustomerVpc::make(&e.c, "10.1", &["us-east-1a", "us-east-1b"], false);
    let before = snapshot(&e.c, &cv.vpc);
    let input = e.input("p.json", byo_input("byo", "byo-abcde", &cv));
    let out = ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "byo"]));
    let counts = proxy.counts();
    // 43 on moto: the customer's network read twice (before submit, and by the preflight: six
    // reads each), no inventory (two creates look up for less than its nine reads).
    // Under strict AWS, retries of what lags or is throttled add calls: the bound is moto's.
    let calls: u32 = counts.values().sum();
    assert!(calls <= 43 || support::strict::Strict::from_env().is_some(), "{calls} calls: {counts:?}");
    assert_eq!(counts.get("DescribeNatGateways"), None, "no inventory of kinds never made here: {counts:?}");
    for create in NETWORK_CREATES {
        assert_eq!(counts.get(create), None, "{create} in a customer's VPC: {counts:?}");
    }
    assert_only_the_clusters_own(&e, "byo-abcde", true);
    assert_marked(&e, "byo-abcde", &cv);
    // In sync, the customer's network as well (nothing of it is drift or a hold-up); then a
    // mark taken off a subnet is drift the provision leaves to the operator (its record stays).
    let check = e.cli(&["check", "--infra-id", "byo-abcde", "--region", "us-east-1", "--json"]);
    assert_eq!(check.status.code(), Some(0), "{}{}", stdout(&check), stderr(&check));
    let (zone0, private0, _) = &cv.zones[0];
    e.c.block_on(
        e.c.ec2
            .delete_tags()
            .resources(private0)
            .tags(aws_sdk_ec2::types::Tag::builder().key("kubernetes.io/cluster/byo-abcde").build())
            .send(),
    )
    .unwrap();
    let check = e.cli(&["check", "--infra-id", "byo-abcde", "--region", "us-east-1", "--json"]);
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(check.status.code(), Some(1), "{zone0}: {report:#}");
    let drift = report["drift"].as_array().unwrap();
    assert_eq!(drift.len(), 1, "{report:#}");
    assert_eq!((drift[0]["kind"].as_str(), drift[0]["id"].as_str()), (Some("tag"), Some(private0.as_str())));
    assert!(drift[0]["repair"].as_str().unwrap().contains("aws ec2 create-tags"), "{report:#}");
    e.c.block_on(
        e.c.ec2
            .create_tags()
            .resources(private0)
            .tags(aws_sdk_ec2::types::Tag::builder().key("kubernetes.io/cluster/byo-abcde").value("shared").build())
            .send(),
    )
    .unwrap();
    for (zone, name, vpcs) in &Inventory::read(&e.c, "byo-abcde").zones {
        assert_eq!(vpcs, &vec![cv.vpc.clone()], "{name} serves the customer's VPC");
        assert_eq!(support::inventory::soa_minimum(&e.c, zone), 60, "{name}: HyperShift's negative-caching TTL");
    }
    // HyperShift's CreateInfraOutput, naming the customer's ids.
    support::hypershift::assert_output_keys(&out, "create-infra-output.keys", &["securityGroupID", "publicSubnetIDs"]);
    assert_eq!(out["vpcID"], cv.vpc.as_str());
    assert_eq!(out["machineCIDR"], "10.1.0.0/16");
    let zones: Vec<(String, String)> = cv.zones.iter().map(|(z, private, _)| (z.clone(), private.clone())).collect();
    let listed: Vec<(String, String)> = out["zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| (z["name"].as_str().unwrap().to_string(), z["subnetID"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(listed, zones, "zones name the customer's private subnets");
    let publics: Vec<&str> = cv.zones.iter().map(|(_, _, public)| public.as_str()).collect();
    assert_eq!(out["publicSubnetIDs"], json!(publics));
    // The cluster's S3 endpoint serves the customer's route tables (none had one).
    let s = snapshot(&e.c, &cv.vpc);
    let endpoint = s.iter().find(|(id, _)| id.starts_with("vpce-")).map(|(_, v)| v.clone()).expect("an S3 endpoint");
    for table in cv.private_tables.iter().chain([&cv.public_table]) {
        assert!(endpoint.contains(table.as_str()), "{table}: {endpoint}");
    }

    // Look-alikes: another VPC whose subnet and VPC carry the cluster's `shared` tag and a role
    // tag (copied, without the maker's record), with a load balancer tagged as the cluster's.
    let other = CustomerVpc::make(&e.c, "10.2", &["us-east-1a"], false);
    let copied = [
        aws_sdk_ec2::types::Tag::builder().key("kubernetes.io/cluster/byo-abcde").value("shared").build(),
        aws_sdk_ec2::types::Tag::builder().key("kubernetes.io/role/internal-elb").value("1").build(),
    ];
    e.c.block_on(
        e.c.ec2.create_tags().resources(&other.vpc).resources(&other.zones[0].1).set_tags(Some(copied.to_vec())).send(),
    )
    .unwrap();
    let foreign_lb = support::look_alikes::nlb(
        &e.c,
        "byo-copied",
        &other.zones[0].2,
        &[("kubernetes.io/cluster/byo-abcde", "owned")],
    );
    let other_before = snapshot(&e.c, &other.vpc);

    // The dry run says what comes off the customer's resources, and deletes none of them.
    let td = e.input("t.json", json!({"infraID": "byo-abcde", "region": "us-east-1"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &td, "--dry-run", "--json"]));
    let deleted: Vec<&str> = plan["delete"].as_array().unwrap().iter().map(|p| p["id"].as_str().unwrap()).collect();
    for id in before.keys() {
        assert!(!deleted.contains(&id.as_str()), "the customer's {id} planned for deletion: {plan:#}");
    }
    let unmark: Vec<&str> = plan["unmark"].as_array().unwrap().iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(unmark.len(), 8, "four subnets, the VPC, the S3 endpoint's three route tables: {plan:#}");

    let down = ok(&e.cli_at(&proxy.endpoint(), &["run", "teardown", "--input", &td, "--id", "down"]));
    assert_eq!(down["unmarked"].as_object().unwrap().len(), 8, "{down:#}");
    assert_eq!(snapshot(&e.c, &cv.vpc), before, "the customer's VPC as it was");
    assert_eq!(Inventory::read(&e.c, "byo-abcde").total(), 0);
    assert_eq!(snapshot(&e.c, &other.vpc), other_before, "copied tags are no record: nothing taken off");
    let left: Vec<&str> = down["left"].as_array().unwrap().iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert!(
        left.contains(&foreign_lb.as_str()),
        "the load balancer in a VPC without the record is left, named: {down:#}"
    );
    let lbs = e.c.block_on(e.c.elb.describe_load_balancers().send()).unwrap();
    assert!(lbs.load_balancers().iter().any(|l| l.load_balancer_arn() == Some(foreign_lb.as_str())), "not deleted");
}

#[test]
fn create_cluster_in_a_customers_vpc_links_and_runs_nodes_there_and_uses_their_s3_endpoint() {
    let e = Env::new();
    let cv = CustomerVpc::make(&e.c, "10.1", &["us-east-1a", "us-east-1b"], true);
    let before = snapshot(&e.c, &cv.vpc);
    let mut infra = byo_input("cc", "cc-abcde", &cv);
    infra["endpointAccess"] = json!("PublicAndPrivate");
    let input = e.input(
        "c.json",
        json!({
            "infra": infra,
            "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"},
            "privateLink": {"allowedPrincipals": ["arn:aws:iam::123456789012:role/cpo"]}
        }),
    );
    let out = ok(&e.cli_at(&e.proxy.endpoint(), &["run", "create-cluster", "--input", &input, "--id", "cc"]));
    let counts = e.proxy.counts();
    assert_eq!(counts.get("CreateVpcEndpoint"), Some(&1), "the PrivateLink endpoint only, no S3 one: {counts:?}");
    for create in NETWORK_CREATES {
        assert_eq!(counts.get(create), None, "{create} in a customer's VPC: {counts:?}");
    }
    assert_eq!(out["infra"]["vpcID"], cv.vpc.as_str());
    // The nodes run in the customer's private subnets.
    let instances = e.c.block_on(e.c.ec2.describe_instances().send()).unwrap();
    let subnets: Vec<String> = instances
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.tags().iter().any(|t| t.key() == Some("kubernetes.io/cluster/cc-abcde")))
        .filter_map(|i| i.subnet_id().map(str::to_string))
        .collect();
    assert_eq!(subnets.len(), 2, "one a zone: {subnets:?}");
    assert!(subnets.iter().all(|s| cv.private_subnets().contains(s)), "{subnets:?}");
    // The teardown deletes the nodes, the link and the cluster's own: the customer's VPC as it was.
    let td = e.input("t.json", json!({"infraID": "cc-abcde", "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &td, "--id", "down"]));
    assert_eq!(snapshot(&e.c, &cv.vpc), before, "the customer's VPC as it was");
    assert_eq!(Inventory::read(&e.c, "cc-abcde").total(), 0);
}

#[test]
fn every_broken_rule_of_a_customers_network_is_named_at_once_and_nothing_is_journaled_or_changed() {
    let e = Env::new();
    let cv = CustomerVpc::make(&e.c, "10.1", &["us-east-1a", "us-east-1b"], false);
    let other = CustomerVpc::make(&e.c, "10.2", &["us-east-1a"], false);
    let ec2 = &e.c.ec2;
    // DNS hostnames off; zone b's private subnet without a default route; zone a's public subnet
    // routed through the NAT gateway rather than the internet gateway.
    let off = aws_sdk_ec2::types::AttributeBooleanValue::builder().value(false).build();
    e.c.block_on(ec2.modify_vpc_attribute().vpc_id(&cv.vpc).enable_dns_hostnames(off).send()).unwrap();
    e.c.block_on(ec2.delete_route().route_table_id(&cv.private_tables[1]).destination_cidr_block("0.0.0.0/0").send())
        .unwrap();
    let assoc = |subnet: &str| {
        let f = aws_sdk_ec2::types::Filter::builder().name("association.subnet-id").values(subnet).build();
        let t = e.c.block_on(ec2.describe_route_tables().filters(f).send()).unwrap();
        t.route_tables()[0]
            .associations()
            .iter()
            .find(|a| a.subnet_id() == Some(subnet))
            .unwrap()
            .route_table_association_id()
            .unwrap()
            .to_string()
    };
    let (zone_a, private_a, public_a) = cv.zones[0].clone();
    e.c.block_on(
        ec2.replace_route_table_association()
            .association_id(assoc(&public_a))
            .route_table_id(&cv.private_tables[0])
            .send(),
    )
    .unwrap();
    let mut subnets = cv.subnets();
    // Zone b's public subnet is another VPC's; zone a's private one is said to be in zone c.
    subnets[1]["publicSubnetID"] = json!(other.zones[0].2);
    subnets[0]["zone"] = json!("us-east-1c");
    let input = e.input(
        "p.json",
        json!({"name": "bad", "infraID": "bad-abcde", "region": "us-east-1", "baseDomain": "example.com",
               "vpcID": cv.vpc, "vpcCIDR": "10.1.0.0/16", "subnets": subnets}),
    );
    e.proxy.reset_counts();
    let res = e.cli_at(&e.proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "bad"]);
    assert_eq!(res.status.code(), Some(2), "{}", stderr(&res));
    let err = stderr(&res);
    for (rule, line) in [
        ("DNS hostnames", "enableDnsHostnames".to_string()),
        ("the zone", format!("{private_a} (private): in zone {zone_a}, not us-east-1c")),
        ("a public subnet's gateway", format!("{public_a} (public): its route table {}", cv.private_tables[0])),
        ("a private subnet's default route", format!("{} (private): its route table", cv.zones[1].1)),
        ("another VPC's subnet", format!("{} (public): in {}, not in vpcID {}", other.zones[0].2, other.vpc, cv.vpc)),
    ] {
        assert_eq!(err.lines().filter(|l| l.contains(&line)).count(), 1, "{rule}: one line naming it\n{err}");
    }
    let changes: Vec<(String, u32)> =
        e.proxy.counts().into_iter().filter(|(a, _)| support::chain::is_change(a)).collect();
    assert!(changes.is_empty(), "a preflight only reads: {changes:?}");
    assert!(!e.s.db().exists() || e.s.cli(&["status", "bad"]).status.code() == Some(2), "nothing journaled");
}

/// Journal A's provision dies as AWS writes its first mark on the customer's network (one
/// subnet marked, the step unrecorded); journal B's provision of the same cluster completes,
/// marking the rest and adopting A's mark. Then A is cancelled: its rollback hands its mark over
/// to B instead of taking it off, and B's cluster keeps every mark. B's teardown then takes all
/// of them off.
#[test]
fn a_makers_rollback_after_another_journal_adopted_its_marks_hands_them_over() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    let cv = CustomerVpc::make(&e.c, "10.1", &["us-east-1a", "us-east-1b"], false);
    let before = snapshot(&e.c, &cv.vpc);
    let input = e.input("p.json", byo_input("two", "two-abcde", &cv));
    let args = ["run", "provision-infra", "--input", input.as_str(), "--id", "a"];
    let mut child = e.spawn_cli_at(&proxy.endpoint(), &args);
    proxy.kill_at_action("CreateTags", support::proxy::KillAt { call: 0, after_aws_acts: true, pid: child.id() });
    let status = child.wait().unwrap();
    assert!(proxy.action_kill_fired() && !status.success(), "{status:?}");
    let by_a: Vec<String> = snapshot(&e.c, &cv.vpc)
        .into_iter()
        .filter(|(_, text)| text.contains("\"infraflow.io/marks/two-abcde\": \"a@"))
        .map(|(id, _)| id)
        .collect();
    assert_eq!(by_a.len(), 1, "A marked one resource before it died: {by_a:?}");

    let b = Scratch::new();
    let env = support::moto::aws_env(&e.proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let theirs = b.cli_env(&["run", "provision-infra", "--input", &input, "--id", "b"], &env);
    assert!(theirs.status.success(), "{}", stderr(&theirs));
    assert!(snapshot(&e.c, &cv.vpc)[&by_a[0]].contains("marks-adopted-by/two-abcde/"), "B adopted A's mark");

    let cancel = e.cli(&["cancel", "a"]);
    assert_eq!(e.s.status("a")["state"], "compensated", "{}", stderr(&cancel));
    assert_marked(&e, "two-abcde", &cv);
    for (id, text) in snapshot(&e.c, &cv.vpc).iter().filter(|(_, t)| t.contains("infraflow.io/marks/two-abcde")) {
        assert!(text.contains("\"infraflow.io/marks/two-abcde\": \"b@"), "{id}: B's now: {text}");
        assert!(!text.contains("marks-adopted-by"), "{id}: {text}");
    }

    let td = e.input("t.json", json!({"infraID": "two-abcde", "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &td, "--id", "down"]));
    assert_eq!(snapshot(&e.c, &cv.vpc), before, "the customer's VPC as it was");
}

/// SIGKILL at every AWS call of a provision into a customer's VPC — or of its teardown — before
/// the call reaches AWS, or after AWS acted but before the answer arrives, each kill's resume
/// killed at its next call: the cluster's own made once, the marks put on once, and after the
/// teardown the customer's VPC as it was.
fn byo_chain(teardown: bool, after_aws_acts: bool) {
    let world = || {
        let e = Env::new();
        let proxy = Proxy::start(e.moto.port);
        (e, proxy)
    };
    let run = |(e, proxy): &(Env, Proxy), name: &str, part: Option<&support::sweep::Part>| {
        let infra = format!("{name}-abcde");
        let cv = CustomerVpc::make(&e.c, "10.1", &["us-east-1a", "us-east-1b"], false);
        let before = snapshot(&e.c, &cv.vpc);
        let p = e.input(&format!("{name}.json"), byo_input(name, &infra, &cv));
        let provision = ["run", "provision-infra", "--input", p.as_str(), "--id", name];
        let td = e.input(&format!("{name}-t.json"), json!({"infraID": infra, "region": "us-east-1"}));
        let down_id = format!("{name}-down");
        let down = ["run", "teardown", "--input", td.as_str(), "--id", down_id.as_str()];
        if teardown {
            ok(&e.cli(&provision));
        }
        let args = if teardown { down } else { provision };
        let killed = part.map(|part| support::sweep::chain(e, proxy, part, &args));
        let out = e.cli_at(&proxy.endpoint(), &args);
        assert!(out.status.success(), "{part:?}: {}", stderr(&out));
        if teardown {
            assert_eq!(snapshot(&e.c, &cv.vpc), before, "{part:?}: the customer's VPC as it was");
            assert_eq!(Inventory::read(&e.c, &infra).total(), 0, "{part:?}");
        } else {
            assert_only_the_clusters_own(e, &infra, true);
            assert_marked(e, &infra, &cv);
        }
        killed.unwrap_or_default()
    };
    let first = world();
    first.1.reset_counts();
    run(&first, "clean", None);
    let clean = first.1.counts();
    let tag = if after_aws_acts { "a" } else { "b" };
    support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part))
    });
}

#[test]
fn a_provision_into_a_customers_vpc_killed_at_every_aws_call_before_it_reaches_aws_marks_and_makes_once() {
    byo_chain(false, false);
}

#[test]
fn a_provision_into_a_customers_vpc_killed_at_every_aws_call_after_aws_acted_marks_and_makes_once() {
    byo_chain(false, true);
}

#[test]
fn a_teardown_in_a_customers_vpc_killed_at_every_aws_call_before_it_reaches_aws_leaves_the_vpc_as_it_was() {
    byo_chain(true, false);
}

#[test]
fn a_teardown_in_a_customers_vpc_killed_at_every_aws_call_after_aws_acted_leaves_the_vpc_as_it_was() {
    byo_chain(true, true);
}
