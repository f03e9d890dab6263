//! Where infraflow follows HyperShift's CLI as it is now rather than as seed 002 describes it:
//! the private zone's name from `baseDomainPrefix` (and its negative-caching TTL), HyperShift's
//! tags on what infraflow makes and Karpenter's on the nodes' subnets. (The operators' grants are
//! held in `workflows/src/cluster_roles.rs` and `tests/aws_iam.rs`; the output keys, the SOA
//! minimum and the tags of a default cluster in every provision test, kill sweeps included, by
//! `support::inventory`.)

mod support;

use serde_json::json;
use support::aws::{AwsEnv as Env, ok};
use support::inventory::{Inventory, soa_minimum};

/// The private zones of the account: (id, name).
fn private_zones(e: &Env) -> Vec<(String, String)> {
    let out = e.c.block_on(e.c.r53.list_hosted_zones().send()).unwrap();
    out.hosted_zones()
        .iter()
        .filter(|z| z.config().is_some_and(|c| c.private_zone()))
        .map(|z| (z.id().trim_start_matches("/hostedzone/").to_string(), z.name().to_string()))
        .collect()
}

fn public_zone_count(e: &Env) -> usize {
    let out = e.c.block_on(e.c.r53.list_hosted_zones().send()).unwrap();
    out.hosted_zones().iter().filter(|z| !z.config().is_some_and(|c| c.private_zone())).count()
}

/// `baseDomainPrefix` names the private zone as HyperShift's `ZoneName` does — `<prefix>.<base>`,
/// or the base domain itself with `none` — and the output carries it as given; teardown removes
/// that private zone and leaves the public zone of the same name.
#[test]
fn base_domain_prefix_names_the_private_zone_as_hypershift_does_and_teardown_leaves_the_public_zone() {
    let e = Env::new();
    let input = e.input(
        "p.json",
        json!({"name": "bp", "infraID": "bp-abcde", "region": "us-east-1", "baseDomain": "example.com",
               "baseDomainPrefix": "apps"}),
    );
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "bp"]));
    assert_eq!(out["baseDomainPrefix"], "apps");
    let zones = private_zones(&e);
    let (id, _) = zones.iter().find(|(_, n)| n == "apps.example.com.").expect("apps.example.com");
    assert_eq!(out["privateZoneID"], *id, "{zones:?}");
    assert_eq!(soa_minimum(&e.c, id), 60);

    let input = e.input(
        "n.json",
        json!({"name": "bn", "infraID": "bn-abcde", "region": "us-east-1", "baseDomain": "example.com",
               "baseDomainPrefix": "none"}),
    );
    let out = ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "bn"]));
    let zones = private_zones(&e);
    let (id, _) = zones.iter().find(|(_, n)| n == "example.com.").expect("a private example.com");
    assert_eq!(out["privateZoneID"], *id, "{zones:?}");
    assert_ne!(out["publicZoneID"], out["privateZoneID"]);

    let td = e.input("t.json", json!({"infraID": "bn-abcde", "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &td]));
    let left = private_zones(&e);
    assert!(!left.iter().any(|(_, n)| n == "example.com." || n == "bn.hypershift.local."), "{left:?}");
    assert!(left.iter().any(|(_, n)| n == "apps.example.com."), "the other cluster's zone stays: {left:?}");
    assert_eq!(public_zone_count(&e), 1, "the public zone of the base domain stays");
    assert_eq!(Inventory::read(&e.c, "bn-abcde").total(), 0);

    let bad = e.input(
        "b.json",
        json!({"name": "bb", "region": "us-east-1", "baseDomain": "example.com", "baseDomainPrefix": "Not A Label"}),
    );
    let res = e.cli(&["submit", "provision-infra", "--input", &bad]);
    assert_eq!(res.status.code(), Some(2));
    assert!(support::stderr(&res).contains("baseDomainPrefix"), "{}", support::stderr(&res));
}

/// A public-only cluster's nodes run in its public subnets: Karpenter's discovery tag is on those
/// (HyperShift's `--public-only`), with HyperShift's infra-id and cluster-name tags.
#[test]
fn a_public_only_clusters_public_subnets_carry_karpenters_discovery_tag() {
    let e = Env::new();
    let input = e.input(
        "p.json",
        json!({"name": "po", "infraID": "po-abcde", "region": "us-east-1", "zones": ["us-east-1a", "us-east-1b"],
               "baseDomain": "example.com", "publicOnly": true}),
    );
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "po"]));
    let inv = Inventory::read(&e.c, "po-abcde");
    assert_eq!(inv.subnets.len(), 2, "public subnets only");
    for s in &inv.subnets {
        let tag = |k: &str| s.tags().iter().find(|t| t.key() == Some(k)).and_then(|t| t.value());
        assert_eq!(tag("karpenter.sh/discovery"), Some("po-abcde"), "{:?}", s.tags());
        assert_eq!(tag("hypershift.openshift.io/infra-id"), Some("po-abcde"));
        assert_eq!(tag("hypershift.openshift.io/cluster-name"), Some("po"));
    }
}
