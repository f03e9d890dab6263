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
    let mut forged = Vec::new();
    for infra in ["byo-abcde", "iam-abcde"] {
        let made = hypershift::make(&e.c, infra, &["us-east-1a"], Cut::AfterFirstZoneSubnets);
        tag(&e, &made["vpc"], "expirationDate", PAST);
        forged.push(made["vpc"].clone());
    }
    let (dry, classes) = sweep_classes(&e);
    assert_eq!(classes.get("byo-abcde").map(String::as_str), Some("unexpired"), "{dry:#}");
    assert_eq!(classes.get("iam-abcde").map(String::as_str), Some("unexpired"), "{dry:#}");
    let byo = dry.as_array().unwrap().iter().find(|s| s["infraID"] == "byo-abcde").unwrap();
    assert!(byo["ignored"].to_string().contains(&forged[0]), "the forged VPC named as no anchor: {byo:#}");
    let iam = dry.as_array().unwrap().iter().find(|s| s["infraID"] == "iam-abcde").unwrap();
    assert!(iam["anchor"].as_str().unwrap_or_default().starts_with("oidc-provider"), "{iam:#}");
    // The sweep itself submits no teardown of either.
    ok(&e.cli(&["sweep", "--region", "us-east-1", "--json"]));
    let list = e.s.cli(&["status", "--json"]);
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(!list.contains("sweep-byo-abcde") && !list.contains("sweep-iam-abcde"), "{list}");
}
