//! scale-nodepool, black box against moto: absolute scaling both ways, crash safety, endpoint
//! subnets, and teardown of instances.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::aws::{AwsEnv, ok as ok_output};
use support::proxy::Proxy;
use support::*;

struct Env {
    base: AwsEnv,
    infra: Value,
}

impl std::ops::Deref for Env {
    type Target = AwsEnv;
    fn deref(&self) -> &AwsEnv {
        &self.base
    }
}

impl Env {
    /// moto with a provisioned 2-zone cluster `np-abcde` to put node pools in.
    fn new() -> Env {
        let mut e = Env { base: AwsEnv::new(), infra: Value::Null };
        let input = e.input(
            "p.json",
            json!({"name": "np", "infraID": "np-abcde", "region": "us-east-1", "zones": ["us-east-1a", "us-east-1b"],
                   "baseDomain": "example.com", "singleNATGateway": true}),
        );
        e.infra = ok_output(&e.cli(&["run", "provision-infra", "--input", &input]));
        e
    }

    fn scale_input(&self, replicas: i64, zone: usize) -> Value {
        json!({
            "infraID": "np-abcde", "nodePool": "workers", "replicas": replicas,
            "subnetID": self.infra["zones"][zone]["subnetID"], "instanceType": "m6i.xlarge",
            "imageID": "ami-12c6146b", "securityGroupIDs": [self.infra["securityGroupID"]], "region": "us-east-1"
        })
    }

    /// Live instances of the pool, read through the SDK: (id, launch time).
    fn instances(&self) -> Vec<String> {
        let out = self
            .c
            .block_on(
                self.c
                    .ec2
                    .describe_instances()
                    .filters(
                        aws_sdk_ec2::types::Filter::builder()
                            .name("tag:infraflow.io/nodepool")
                            .values("np-abcde/workers")
                            .build(),
                    )
                    .send(),
            )
            .unwrap();
        let mut ids: Vec<String> = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter(|i| {
                i.tags()
                    .iter()
                    .any(|t| t.key() == Some("infraflow.io/nodepool") && t.value() == Some("np-abcde/workers"))
            })
            .filter(|i| {
                !matches!(
                    i.state().and_then(|s| s.name()).map(|n| n.as_str()),
                    Some("terminated") | Some("shutting-down")
                )
            })
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect();
        ids.sort();
        ids
    }
}

#[test]
fn scaling_zero_three_one_zero_keeps_exactly_the_asked_count_and_terminates_the_newest() {
    let e = Env::new();
    let mut seen = Vec::new();
    for (i, replicas) in [0, 3, 1, 0].into_iter().enumerate() {
        let input = e.input(&format!("s{i}.json"), e.scale_input(replicas, 0));
        let out = ok_output(&e.cli(&["run", "scale-nodepool", "--input", &input]));
        let live = e.instances();
        assert_eq!(live.len(), replicas as usize, "after scaling to {replicas}");
        let mut reported: Vec<String> =
            out["instanceIDs"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        reported.sort();
        assert_eq!(reported, live, "the output lists the live instances");
        assert_eq!(out["replicas"], replicas);
        seen.push(live);
    }
    assert!(seen[2].iter().all(|i| seen[1].contains(i)), "scaling down keeps existing instances");
}

#[test]
fn a_daemon_killed_while_scaling_up_launches_no_duplicate() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    proxy.set_latency(Duration::from_millis(60));
    let input = e.input("s.json", e.scale_input(5, 1));
    assert!(e.cli(&["submit", "scale-nodepool", "--input", &input, "--id", "up"]).status.success());
    let mut rng = Rng::from_env_or_time();
    let (landed, st) = e.kill_daemons_until_done(&proxy.endpoint(), "up", 6, &mut rng);
    eprintln!("kills that landed mid-run: {landed}");
    assert!(landed >= 1, "no kill landed while the workflow ran");
    assert_eq!(st["state"], "completed", "{st}");
    assert_eq!(e.instances().len(), 5, "exactly five, whatever the kills");
}

#[test]
fn the_node_pool_subnet_joins_an_endpoint_unless_its_zone_is_covered() {
    let e = Env::new();
    let vpc = e.infra["vpcID"].as_str().unwrap().to_string();
    let zone_a_public = e.infra["publicSubnetIDs"][0].as_str().unwrap().to_string();
    let ep =
        e.c.block_on(
            e.c.ec2
                .create_vpc_endpoint()
                .vpc_endpoint_type(aws_sdk_ec2::types::VpcEndpointType::Interface)
                .vpc_id(&vpc)
                .service_name("com.amazonaws.vpce.us-east-1.vpce-svc-0123456789abcdef0")
                .subnet_ids(&zone_a_public)
                // HyperShift's PrivateLink endpoints carry the cluster's ownership tag
                // (HYPERSHIFT-NOTES), which is what lets `policy --infra-id` modify them.
                .tag_specifications(
                    aws_sdk_ec2::types::TagSpecification::builder()
                        .resource_type(aws_sdk_ec2::types::ResourceType::VpcEndpoint)
                        .tags(
                            aws_sdk_ec2::types::Tag::builder()
                                .key("kubernetes.io/cluster/np-abcde")
                                .value("owned")
                                .build(),
                        )
                        .build(),
                )
                .send(),
        )
        .unwrap()
        .vpc_endpoint()
        .unwrap()
        .vpc_endpoint_id()
        .unwrap()
        .to_string();
    let subnets_of = |e: &Env| -> Vec<String> {
        let out = e.c.block_on(e.c.ec2.describe_vpc_endpoints().vpc_endpoint_ids(&ep).send()).unwrap();
        let mut s: Vec<String> = out.vpc_endpoints()[0].subnet_ids().to_vec();
        s.sort();
        s
    };
    // Zone a is covered by the public subnet: the private one of zone a is not added.
    let mut v = e.scale_input(1, 0);
    v["vpcEndpointIDs"] = json!([ep]);
    let input = e.input("a.json", v);
    ok_output(&e.cli(&["run", "scale-nodepool", "--input", &input]));
    assert_eq!(subnets_of(&e), [zone_a_public.clone()]);
    // Zone b is not: its subnet joins.
    let mut v = e.scale_input(1, 1);
    v["vpcEndpointIDs"] = json!([ep]);
    let input = e.input("b.json", v);
    ok_output(&e.cli(&["run", "scale-nodepool", "--input", &input]));
    let mut want = vec![zone_a_public, e.infra["zones"][1]["subnetID"].as_str().unwrap().to_string()];
    want.sort();
    assert_eq!(subnets_of(&e), want);
}

#[test]
fn teardown_terminates_the_node_pool_and_bad_inputs_are_refused() {
    let e = Env::new();
    let input = e.input("s.json", e.scale_input(2, 0));
    ok_output(&e.cli(&["run", "scale-nodepool", "--input", &input]));
    assert_eq!(e.instances().len(), 2);
    let t = e.input("t.json", json!({"infraID": "np-abcde", "region": "us-east-1"}));
    let out = ok_output(&e.cli(&["run", "teardown", "--input", &t]));
    assert_eq!(out["deleted"]["instance"].as_array().unwrap().len(), 2);
    assert!(e.instances().is_empty());

    for (field, value, expect) in [
        ("replicas", json!(-1), "replicas"),
        ("subnetID", json!("sub-1"), "subnetID"),
        ("securityGroupIDs", json!([]), "securityGroupIDs"),
        ("instanceType", json!("huge"), "instanceType"),
    ] {
        let mut v = e.scale_input(1, 0);
        v[field] = value;
        let input = e.input("bad.json", v);
        let out = e.cli(&["submit", "scale-nodepool", "--input", &input]);
        assert_eq!(out.status.code(), Some(2), "{field}");
        assert!(stderr(&out).contains(expect) && stderr(&out).lines().count() == 1, "{}", stderr(&out));
    }
}

#[test]
fn a_mistyped_image_fails_at_once_instead_of_retrying_for_minutes() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    proxy.fail_with("RunInstances", "InvalidAMIID.NotFound", 100);
    let input = e.input("s.json", e.scale_input(1, 0));
    let started = std::time::Instant::now();
    let out = e.cli_at(&proxy.endpoint(), &["run", "scale-nodepool", "--input", &input, "--id", "ami"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("ami");
    assert_eq!(st["state"], "compensated", "{st}");
    assert!(st["error"].as_str().unwrap().contains("InvalidAMIID.NotFound"), "{st}");
    assert_eq!(proxy.counts().get("RunInstances"), Some(&1), "one attempt, no retries");
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// HyperShift's `--public-only`: no NAT gateway, the zones' subnets are public, and a node has no
/// way out without a public address. provision-infra says `publicOnly` in its output (what
/// `--infra-json` reads); a node pool with `publicIPs` launches its nodes with one.
#[test]
fn a_public_only_cluster_says_so_and_its_nodes_get_public_addresses() {
    let e = AwsEnv::new();
    let input = e.input(
        "p.json",
        json!({"name": "po", "infraID": "po-abcde", "region": "us-east-1", "zones": ["us-east-1a"],
               "baseDomain": "example.com", "publicOnly": true}),
    );
    let infra = ok_output(&e.cli(&["run", "provision-infra", "--input", &input]));
    assert_eq!(infra["publicOnly"], true, "{infra}");
    assert_eq!(infra["zones"][0]["subnetID"], infra["publicSubnetIDs"][0], "its zone is the public subnet: {infra}");
    let subnet = infra["zones"][0]["subnetID"].as_str().unwrap().to_string();
    let scale = e.input(
        "s.json",
        json!({"infraID": "po-abcde", "nodePool": "workers", "replicas": 1, "subnetID": subnet,
               "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b", "securityGroupIDs": [infra["securityGroupID"]],
               "region": "us-east-1", "publicIPs": true}),
    );
    let out = ok_output(&e.cli(&["run", "scale-nodepool", "--input", &scale]));
    let id = out["instanceIDs"][0].as_str().unwrap().to_string();
    let described = e.c.block_on(e.c.ec2.describe_instances().instance_ids(&id).send()).unwrap();
    let node = described.reservations()[0].instances()[0].clone();
    assert_eq!(node.subnet_id(), Some(subnet.as_str()));
    assert!(node.public_ip_address().is_some_and(|a| !a.is_empty()), "a public address: {node:?}");
    let groups: Vec<&str> = node.network_interfaces()[0].groups().iter().filter_map(|g| g.group_id()).collect();
    assert_eq!(groups, [infra["securityGroupID"].as_str().unwrap()], "the groups went with the interface");
}

/// The ignition pointer a HyperShift NodePool hands its machines carries a token: the nodes get
/// it as their user data, and neither the journal nor the output or logs ever hold it — only
/// the file's path and SHA-256.
#[test]
fn nodes_get_their_user_data_from_a_file_that_never_reaches_the_journal() {
    let e = Env::new();
    let secret = "ignition-token-7f3c1d9e";
    let file = e.s.file("user-data.json");
    std::fs::write(&file, format!(r#"{{"ignition":{{"config":{{"merge":[{{"source":"https://x/{secret}"}}]}}}}}}"#))
        .unwrap();
    let mut input = e.scale_input(1, 0);
    input["userDataFile"] = json!(file.to_str().unwrap());
    let input = e.input("s.json", input);
    let run = e.cli(&["run", "scale-nodepool", "--input", &input, "--id", "ud1"]);
    assert!(run.status.success(), "{}", stderr(&run));
    let out: Value = serde_json::from_slice(&run.stdout).unwrap();
    let id = out["instanceIDs"][0].as_str().unwrap().to_string();
    let attr =
        e.c.block_on(
            e.c.ec2
                .describe_instance_attribute()
                .instance_id(&id)
                .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
                .send(),
        )
        .unwrap();
    let sent = attr.user_data().and_then(|v| v.value()).expect("the node has user data");
    let decoded = aws_smithy_types::base64::decode(sent).unwrap();
    assert_eq!(decoded, std::fs::read(&file).unwrap(), "the file's bytes, as they were");
    let journal = std::fs::read(e.s.db()).unwrap();
    let wal = std::fs::read(e.s.db().with_extension("sqlite3-wal")).unwrap_or_default();
    for (what, bytes) in [("journal", &journal), ("its WAL", &wal), ("stdout", &run.stdout), ("stderr", &run.stderr)] {
        assert!(!String::from_utf8_lossy(bytes).contains(secret), "the token reached {what}");
    }
    let history = serde_json::to_string(&e.s.history("ud1")).unwrap();
    assert!(history.contains("userDataSHA256"), "the digest is journaled instead");
    // A file changed since submit is refused: the pool would get two kinds of node.
    std::fs::write(&file, "something else").unwrap();
    let mut more = e.scale_input(2, 0);
    more["userDataFile"] = json!(file.to_str().unwrap());
    more["userDataSHA256"] = json!("0".repeat(64));
    let more = e.input("s2.json", more);
    let refused = e.cli(&["run", "scale-nodepool", "--input", &more]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("is not the SHA-256"), "{}", stderr(&refused));
}
