//! How many AWS API calls a 3-zone provision-infra makes, and that re-running a completed
//! workflow makes none. `scripts/count-api-calls.sh` prints the table BENCHMARKS.md records.

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
    // HyperShift's CLI makes 71. A first provisioning reads what the cluster has once per kind
    // instead of looking up before every create (79 calls when it did).
    assert!(total <= 71, "{total} calls");

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
    assert!(!adopt.keys().any(|a| a.starts_with("Create") || a.starts_with("Allocate")), "{adopt:?}");
}
