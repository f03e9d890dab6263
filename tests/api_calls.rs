//! How many AWS API calls a 3-zone provision-infra makes, and that re-running a completed
//! workflow makes none; how many IAM calls create-iam and the teardown of its IAM make.
//! `scripts/count-api-calls.sh` prints the tables BENCHMARKS.md records.
//!
//! Why every read of a fresh provision stays: a fresh 3-zone `provision-infra` makes 56 calls (this
//! test holds it to 60), 13 of them reads. Beyond the census, each read earns its place:
//!
//! | read | why it stays |
//! |---|---|
//! | `DescribeTags` ×2 (the census) | the cluster's ownership tag and its identities from EC2's tag index: which creates may skip their lookup (none, if anything of the cluster exists) |
//! | `GetCallerIdentity` | the account the run acts in, journaled: the cluster lease's key, a sweep's evidence, a role's check |
//! | `DescribeAvailabilityZones` | the zones named exist and are available here (a Local Zone or a typo is refused before anything is made); the first zone when none is named |
//! | `ListHostedZonesByName` ×3 | the public zone's id (the output's `publicZoneID`); each private zone looked up once (a resumed run finds its own, a HyperShift zone is adopted from the same read) |
//! | `ListResourceRecordSets` ×2 | each private zone's SOA as AWS made it: the UPSERT that sets HyperShift's negative-caching TTL must carry AWS's name server and serial |
//! | `DescribeRouteTables` ×1 | the VPC's main association, which making the public table main replaces (its id is known only by reading) |
//! | `DescribeNatGateways` ×3 | each NAT gateway available before a route points at it (on AWS a minute or two: these are polls) |
//!
//! The quota check `run` and `submit` make before journaling (9 reads: `tests/quotas.rs`,
//! BENCHMARKS.md) is counted apart; `--skip-quota-check` leaves it out.

mod support;

use serde_json::json;
use support::moto::{Clients, Moto, aws_env};
use support::proxy::Proxy;
use support::*;

#[test]
fn a_three_zone_provision_makes_a_bounded_number_of_calls_and_a_rerun_makes_none() {
    let moto = Moto::start();
    let c = Clients::new(&moto.endpoint());
    c.create_public_zone("example.com");
    let proxy = Proxy::start(moto.port);
    let s = Scratch::new();
    let env = aws_env(&proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let input = s.write_json(
        "p.json",
        &json!({"name": "count", "infraID": "count-abcde", "region": "us-east-1",
                "zones": ["us-east-1a", "us-east-1b", "us-east-1c"], "baseDomain": "example.com"}),
    );
    let input = input.to_str().unwrap();

    let out = s.cli_env(&["run", "provision-infra", "--input", input, "--id", "count"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = proxy.counts();
    let total: u32 = first.values().sum();
    println!("API calls of a 3-zone provision-infra: {total}");
    for (action, n) in &first {
        println!("  {n:>3}  {action}");
    }
    // HyperShift's CLI makes 71. A first provisioning takes one census of the cluster (two reads
    // of EC2's tag index) instead of looking up before every create (79 calls when it did, 70
    // with a read per kind); the quota check before it is counted apart (tests/quotas.rs).
    assert!(total <= 60, "{total} calls");

    proxy.reset_counts();
    let out = s.cli_env(&["run", "provision-infra", "--input", input, "--id", "count"], &env);
    assert!(out.status.success());
    println!("API calls of re-running the completed workflow: {}", proxy.total());
    assert_eq!(proxy.total(), 0, "a completed workflow replays from the journal: {:?}", proxy.counts());

    proxy.reset_counts();
    let out = s.cli_env(&["run", "provision-infra", "--input", input, "--id", "count-again"], &env);
    assert!(out.status.success());
    let adopt = proxy.counts();
    println!("API calls of a new workflow for the same infraID (adopts everything): {}", proxy.total());
    // CreateTags only writes the adoption mark on what another workflow made: it creates nothing.
    let creates = |a: &String| (a.starts_with("Create") && a != "CreateTags") || a.starts_with("Allocate");
    assert!(!adopt.keys().any(creates), "{adopt:?}");
}

/// The IAM calls (by IAM action) of a counted run of `args` through `proxy`.
fn iam_calls_of(
    s: &Scratch,
    proxy: &Proxy,
    env: &[(&str, &str)],
    args: &[&str],
) -> std::collections::BTreeMap<String, u32> {
    let before = support::proxy::iam_counts_at(&proxy.endpoint()).unwrap();
    let out = s.cli_env(args, env);
    assert!(out.status.success(), "{}", stderr(&out));
    let after = support::proxy::iam_counts_at(&proxy.endpoint()).unwrap();
    after
        .into_iter()
        .filter(|(a, _)| a.starts_with("iam:"))
        .map(|(a, n)| {
            let was = before.get(&a).copied().unwrap_or(0);
            (a, n - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[test]
fn create_iam_and_the_teardown_of_its_iam_make_a_bounded_number_of_iam_calls() {
    let moto = Moto::start();
    let proxy = Proxy::start(moto.port);
    let s = Scratch::new();
    let env = aws_env(&proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let input =
        s.write_json("iam.json", &json!({"infraID": "count-abcde", "region": "us-east-1", "oidcBucket": "oidc"}));
    let input = input.to_str().unwrap();
    let show = |what: &str, calls: &std::collections::BTreeMap<String, u32>| {
        let total: u32 = calls.values().sum();
        println!("API calls of {what}: {total} IAM");
        for (action, n) in calls {
            println!("  {n:>3}  {action}");
        }
        total
    };
    let made = iam_calls_of(&s, &proxy, &env, &["run", "create-iam", "--input", input, "--id", "iam"]);
    // HyperShift's `create iam aws`: 30 (a provider list, delete and create; per role a
    // GetRole, CreateRole, PutRolePolicy; the worker's three Gets before its creates).
    assert!(show("create-iam", &made) <= 30, "{made:?}");
    let again = iam_calls_of(&s, &proxy, &env, &["run", "create-iam", "--input", input, "--id", "iam-again"]);
    show("create-iam over the same cluster (finds everything)", &again);
    assert!(!again.keys().any(|a| a.starts_with("iam:Create") || a.starts_with("iam:Add")), "{again:?}");
    let td = s.write_json("td.json", &json!({"infraID": "count-abcde", "region": "us-east-1"}));
    let gone = iam_calls_of(&s, &proxy, &env, &["run", "teardown", "--input", td.to_str().unwrap(), "--id", "td"]);
    show("teardown of that IAM", &gone);
    assert_eq!(gone.get("iam:DeleteRole"), Some(&8), "{gone:?}");
    assert_eq!(gone.get("iam:DeleteInstanceProfile"), Some(&1));
    assert_eq!(gone.get("iam:DeleteOpenIDConnectProvider"), Some(&1));
}
