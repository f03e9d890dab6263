//! An AutoNode cluster (HyperShift runs Karpenter with `CLUSTER_NAME=<infraID>`): create-cluster
//! with `autoNode` makes Karpenter's role with HyperShift's policy (the fixture the suite pins);
//! Karpenter's launch templates and the instances it launched, written here as Karpenter writes
//! them, go with the cluster's teardown on Karpenter's own marks; look-alikes of each — the marks
//! copied onto a template that launches into another VPC, a template without them, Karpenter's
//! tags on an instance in another VPC — are left, named, and pause nothing. Killed at every AWS
//! call of that teardown, before and after AWS acted, it converges.

mod support;

use aws_sdk_ec2::types::{InstanceType, RequestLaunchTemplateData, ResourceType, Tag, TagSpecification};
use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::hypershift::{self, Cut};
use support::iam_state::{IamState, policy_json};
use support::proxy::Proxy;
use support::sweep::Part;
use support::*;

/// The tags Karpenter writes on what it makes for a node (aws/karpenter-provider-aws
/// `utils.GetTags`): the cluster's ownership, its NodePool, the cluster's name, its EC2NodeClass.
fn karpenter_tags(infra: &str) -> Vec<Tag> {
    [
        (format!("kubernetes.io/cluster/{infra}"), "owned".to_string()),
        ("karpenter.sh/nodepool".into(), "default".into()),
        ("eks:eks-cluster-name".into(), infra.to_string()),
        ("karpenter.k8s.aws/ec2nodeclass".into(), "default".into()),
    ]
    .into_iter()
    .map(|(k, v)| Tag::builder().key(k).value(v).build())
    .collect()
}

fn spec(kind: ResourceType, tags: Vec<Tag>) -> TagSpecification {
    TagSpecification::builder().resource_type(kind).set_tags(Some(tags)).build()
}

/// A launch template named `name`, launching into `group`, tagged `tags`.
fn template(e: &Env, name: &str, group: &str, tags: Vec<Tag>) -> String {
    let data = RequestLaunchTemplateData::builder().image_id("ami-12c6146b").security_group_ids(group).build();
    let out = e.c.block_on(
        e.c.ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(data)
            .tag_specifications(spec(ResourceType::LaunchTemplate, tags))
            .send(),
    );
    out.unwrap().launch_template().unwrap().launch_template_id().unwrap().to_string()
}

fn instance(e: &Env, subnet: &str, group: &str, tags: Vec<Tag>) -> String {
    let out = e.c.block_on(
        e.c.ec2
            .run_instances()
            .image_id("ami-12c6146b")
            .instance_type(InstanceType::M6iXlarge)
            .min_count(1)
            .max_count(1)
            .subnet_id(subnet)
            .security_group_ids(group)
            .tag_specifications(spec(ResourceType::Instance, tags))
            .send(),
    );
    out.unwrap().instances()[0].instance_id().unwrap().to_string()
}

fn group(e: &Env, vpc: &str, name: &str, tags: Vec<Tag>) -> String {
    let mut call = e.c.ec2.create_security_group().group_name(name).description(name).vpc_id(vpc);
    if !tags.is_empty() {
        call = call.tag_specifications(spec(ResourceType::SecurityGroup, tags));
    }
    e.c.block_on(call.send()).unwrap().group_id().unwrap().to_string()
}

fn vpc_with_subnet(e: &Env, cidr: &str, tags: Vec<Tag>) -> (String, String) {
    let mut call = e.c.ec2.create_vpc().cidr_block(cidr);
    if !tags.is_empty() {
        call = call.tag_specifications(spec(ResourceType::Vpc, tags.clone()));
    }
    let vpc = e.c.block_on(call.send()).unwrap().vpc().unwrap().vpc_id().unwrap().to_string();
    let mut call = e.c.ec2.create_subnet().vpc_id(&vpc).cidr_block(cidr).availability_zone("us-east-1a");
    if !tags.is_empty() {
        call = call.tag_specifications(spec(ResourceType::Subnet, tags));
    }
    let subnet = e.c.block_on(call.send()).unwrap().subnet().unwrap().subnet_id().unwrap().to_string();
    (vpc, subnet)
}

/// The least of a cluster Karpenter can launch into, made as HyperShift's CLI makes it: its VPC,
/// a subnet and a group of its own; the subnet's and the group's ids.
fn cluster_network(e: &Env, infra: &str) -> (String, String) {
    let made = hypershift::make(&e.c, infra, &["us-east-1a"], Cut::AfterVpc);
    let owned = || vec![Tag::builder().key(format!("kubernetes.io/cluster/{infra}")).value("owned").build()];
    let subnet = e.c.block_on(
        e.c.ec2
            .create_subnet()
            .vpc_id(&made["vpc"])
            .cidr_block("10.0.0.0/24")
            .availability_zone("us-east-1a")
            .tag_specifications(spec(ResourceType::Subnet, owned()))
            .send(),
    );
    let subnet = subnet.unwrap().subnet().unwrap().subnet_id().unwrap().to_string();
    (subnet, group(e, &made["vpc"], &format!("{infra}-nodes"), owned()))
}

fn live_templates(e: &Env) -> Vec<String> {
    let out = e.c.block_on(e.c.ec2.describe_launch_templates().send()).unwrap();
    out.launch_templates().iter().filter_map(|t| t.launch_template_id().map(str::to_string)).collect()
}

fn live_instances(e: &Env) -> Vec<String> {
    let out = e.c.block_on(e.c.ec2.describe_instances().send()).unwrap();
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.state().and_then(|s| s.name()).is_some_and(|n| n.as_str() != "terminated"))
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect()
}

/// What Karpenter made for cluster `infra` in its VPC (`subnet`, `group`), and the look-alikes.
struct Karpenters {
    templates: Vec<String>,
    instances: Vec<String>,
    /// Karpenter's marks on a template launching into another VPC.
    elsewhere_template: String,
    /// The cluster's tag on a template without Karpenter's marks.
    unmarked_template: String,
    /// Karpenter's tags on an instance in another VPC.
    elsewhere_instance: String,
    /// Karpenter's template, with a second version someone added that launches elsewhere.
    edited_template: String,
}

fn karpenter_made(e: &Env, infra: &str, subnet: &str, group: &str, n: usize) -> Karpenters {
    let templates =
        (0..n).map(|i| template(e, &format!("karpenter.k8s.aws/{i}{infra}"), group, karpenter_tags(infra))).collect();
    let instances = (0..n).map(|_| instance(e, subnet, group, karpenter_tags(infra))).collect();
    // Someone else's VPC, untagged: what is there is never the cluster's.
    let (other_vpc, other_subnet) = vpc_with_subnet(e, "10.99.0.0/24", Vec::new());
    let other_group = group_in(e, &other_vpc, &format!("{infra}-elsewhere"));
    let owned = vec![Tag::builder().key(format!("kubernetes.io/cluster/{infra}")).value("owned").build()];
    let edited_template = template(e, &format!("karpenter.k8s.aws/edited{infra}"), group, karpenter_tags(infra));
    let elsewhere =
        RequestLaunchTemplateData::builder().image_id("ami-12c6146b").security_group_ids(&other_group).build();
    e.c.block_on(
        e.c.ec2
            .create_launch_template_version()
            .launch_template_id(&edited_template)
            .launch_template_data(elsewhere)
            .send(),
    )
    .unwrap();
    Karpenters {
        templates,
        instances,
        edited_template,
        elsewhere_template: template(
            e,
            &format!("karpenter.k8s.aws/copied{infra}"),
            &other_group,
            karpenter_tags(infra),
        ),
        unmarked_template: template(e, &format!("{infra}-by-hand"), group, owned),
        elsewhere_instance: instance(e, &other_subnet, &other_group, karpenter_tags(infra)),
    }
}

fn group_in(e: &Env, vpc: &str, name: &str) -> String {
    group(e, vpc, name, Vec::new())
}

/// Karpenter's gone, every look-alike still there and named in the teardown's output.
fn assert_karpenters_gone_and_look_alikes_named(e: &Env, k: &Karpenters, out: &Value, context: &str) {
    let (templates, instances) = (live_templates(e), live_instances(e));
    for t in &k.templates {
        assert!(!templates.contains(t), "Karpenter's template {t} left ({context})");
    }
    for i in &k.instances {
        assert!(!instances.contains(i), "Karpenter's instance {i} left ({context})");
    }
    let left: Vec<&str> = out["left"].as_array().into_iter().flatten().filter_map(|l| l["id"].as_str()).collect();
    for (kept, live) in [
        (&k.elsewhere_template, &templates),
        (&k.edited_template, &templates),
        (&k.unmarked_template, &templates),
        (&k.elsewhere_instance, &instances),
    ] {
        assert!(live.contains(kept), "look-alike {kept} deleted ({context})");
        assert!(left.contains(&kept.as_str()), "look-alike {kept} not named: {} ({context})", out["left"]);
    }
}

#[test]
fn an_autonode_clusters_karpenter_role_is_hypershifts_and_its_teardown_takes_karpenters_nodes_only() {
    let e = Env::new();
    let input = e.input(
        "an.json",
        json!({
            "infra": {"name": "an", "infraID": "an-abcde", "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"},
            "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"},
            "iam": {"oidcBucket": "oidc-store"},
            "autoNode": true
        }),
    );
    let out = ok(&e.cli(&["run", "create-cluster", "--input", &input, "--id", "an"]));
    let karpenter_arn = out["iam"]["roles"]["karpenterARN"].as_str().expect("the Karpenter role's ARN").to_string();
    assert!(karpenter_arn.ends_with(":role/an-abcde-karpenter"), "{karpenter_arn}");
    let s = IamState::read(&e.c, "an-abcde");
    let role = &s.roles["an-abcde-karpenter"];
    let fixture = include_str!("fixtures/hypershift/karpenter-policy.json");
    assert_eq!(role.policies.values().next(), Some(&policy_json(fixture)), "HyperShift's Karpenter policy");
    assert_eq!(
        role.trust["Statement"][0]["Condition"]["StringEquals"].as_object().and_then(|c| c.values().next()),
        Some(&json!("system:serviceaccount:kube-system:karpenter")),
        "{}",
        role.trust
    );
    // Without iam, autoNode is refused in a line naming it, and nothing is journaled.
    let bad = e.input(
        "bad.json",
        json!({
        "infra": {"name": "bn", "infraID": "bn-abcde", "region": "us-east-1", "baseDomain": "example.com"},
        "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"}, "autoNode": true}),
    );
    let refused = e.s.cli(&["submit", "create-cluster", "--input", &bad]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("autoNode") && stderr(&refused).trim().lines().count() == 1,
        "{}",
        stderr(&refused)
    );

    let infra = &out["infra"];
    let (subnet, group) = (infra["zones"][0]["subnetID"].as_str().unwrap(), infra["securityGroupID"].as_str().unwrap());
    let k = karpenter_made(&e, "an-abcde", subnet, group, 2);
    let td = e.input("td.json", json!({"infraID": "an-abcde", "region": "us-east-1"}));
    let down = ok(&e.cli(&["run", "teardown", "--input", &td, "--id", "an-down"]));
    assert_eq!(e.s.status("an-down")["state"], "completed", "no pause on a look-alike");
    assert_eq!(down["deleted"]["launch-template"].as_array().map(Vec::len), Some(2), "{down}");
    assert_karpenters_gone_and_look_alikes_named(&e, &k, &down, "clean");
    assert_eq!(IamState::read(&e.c, "an-abcde").total(), 0, "the Karpenter role goes with the cluster's IAM");
}

/// `preserveIAM` (HyperShift's `--preserve-iam`): everything else goes, the cluster's roles,
/// profile and provider stay, named under `preserved`.
#[test]
fn a_teardown_that_preserves_iam_leaves_the_clusters_roles_and_provider_and_names_them() {
    let e = Env::new();
    let input = e.input(
        "iam.json",
        json!({"infraID": "pi-abcde", "region": "us-east-1", "oidcBucket": "oidc", "autoNode": true}),
    );
    ok(&e.cli(&["run", "create-iam", "--input", &input, "--id", "pi"]));
    let made = IamState::read(&e.c, "pi-abcde");
    assert_eq!((made.providers.len(), made.roles.len(), made.profiles.len()), (1, 9, 1), "{}", made.summary());
    let td = e.input("td.json", json!({"infraID": "pi-abcde", "region": "us-east-1", "preserveIAM": true}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &td, "--dry-run", "--json"]));
    let planned =
        |list: &str, kind: &str| plan[list].as_array().into_iter().flatten().filter(|p| p["kind"] == kind).count();
    assert_eq!(
        (planned("delete", "iam-role"), planned("leave", "iam-role")),
        (0, 9),
        "the plan says what the run keeps: {plan}"
    );
    let out = ok(&e.cli(&["run", "teardown", "--input", &td, "--id", "pi-down"]));
    let kept = IamState::read(&e.c, "pi-abcde");
    assert_eq!(kept.total(), made.total(), "IAM preserved: {}", kept.summary());
    assert_eq!(out["preserved"]["iam-role"].as_array().map(Vec::len), Some(9), "{out}");
    assert_eq!(out["preserved"]["oidc-provider"].as_array().map(Vec::len), Some(1), "{out}");
    assert!(out["deleted"].as_object().is_none_or(|d| d.is_empty()), "{out}");
    // Without it, the same cluster's IAM goes.
    let td = e.input("td2.json", json!({"infraID": "pi-abcde", "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &td, "--id", "pi-down2"]));
    assert_eq!(IamState::read(&e.c, "pi-abcde").total(), 0);
}

/// A Karpenter template, and an instance, tagged as owned by this cluster and another: neither
/// cluster's teardown deletes them; the teardown pauses naming both clusters.
#[test]
fn a_template_or_instance_tagged_for_two_clusters_pauses_the_teardown_naming_both() {
    let e = Env::new();
    let infra = "tw-abcde";
    let (subnet, group) = cluster_network(&e, infra);
    let mut both = karpenter_tags(infra);
    both.push(Tag::builder().key("kubernetes.io/cluster/other-abcde").value("owned").build());
    let shared_template = template(&e, "karpenter.k8s.aws/shared", &group, both.clone());
    let shared_instance = instance(&e, &subnet, &group, both);
    let td = e.input("td.json", json!({"infraID": infra, "region": "us-east-1"}));
    let out = e.cli(&["run", "teardown", "--input", &td, "--id", "tw-down"]);
    assert_ne!(out.status.code(), Some(0));
    let st = e.s.status("tw-down");
    let why = st["error"].as_str().unwrap_or_default();
    assert_eq!(st["state"], "paused", "{st}");
    assert!(why.contains(infra) && why.contains("other-abcde"), "{why}");
    assert!(why.contains(&shared_template) || why.contains(&shared_instance), "{why}");
    assert!(live_templates(&e).contains(&shared_template), "a template of two clusters deleted");
    assert!(live_instances(&e).contains(&shared_instance), "an instance of two clusters terminated");
}

/// SIGKILL at every AWS call of an AutoNode cluster's teardown (before the call reaches AWS, or
/// after AWS acted), each kill's resume killed at the next call (`sweep::chain`), until a run
/// finishes: Karpenter's templates and instances gone, the look-alikes left and named.
fn autonode_teardown_sweep(after_aws_acts: bool) {
    let tag = if after_aws_acts { "a" } else { "b" };
    let world = || {
        let e = Env::new();
        let proxy = Proxy::start(e.moto.port);
        e.c.block_on(e.c.ec2.describe_availability_zones().send()).unwrap();
        (e, proxy)
    };
    let run = |(e, proxy): &(Env, Proxy), name: &str, part: Option<&Part>| {
        let infra = format!("{name}-abcde");
        let (subnet, group) = cluster_network(e, &infra);
        let k = karpenter_made(e, &infra, &subnet, &group, 1);
        let td = e.input(&format!("{name}-td.json"), json!({"infraID": infra, "region": "us-east-1"}));
        let args = ["run", "teardown", "--input", td.as_str(), "--id", name];
        let killed = part.map(|part| support::sweep::chain(e, proxy, part, &args));
        let out = ok(&e.cli_at(&proxy.endpoint(), &args));
        assert_eq!(e.s.status(name)["state"], "completed", "{part:?}");
        assert_karpenters_gone_and_look_alikes_named(e, &k, &out, &format!("{part:?}"));
        killed.unwrap_or_default()
    };
    let first = world();
    first.1.reset_counts();
    run(&first, &format!("clean{tag}"), None);
    let clean = first.1.counts();
    assert!(clean.contains_key("DeleteLaunchTemplate"), "{clean:?}");
    support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part))
    });
}

#[test]
fn an_autonode_teardown_killed_at_every_aws_call_before_it_reaches_aws_converges() {
    autonode_teardown_sweep(false);
}

#[test]
fn an_autonode_teardown_killed_at_every_aws_call_after_aws_acted_converges() {
    autonode_teardown_sweep(true);
}
