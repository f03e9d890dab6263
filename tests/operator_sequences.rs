//! What operators do, against moto: an id used again after `prune` or in another journal, a
//! rollback that meets expired credentials while another provision of the cluster is queued, a
//! `retry` of an old compensation. After each, the AWS inventory is read back and compared.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::inventory::Inventory;
use support::moto::aws_env;
use support::*;

fn provision_input(name: &str, infra: &str, zones: &[&str]) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "zones": zones, "baseDomain": "example.com"})
}

/// `infraflow ARGS` through the env's proxy, on another journal (a new file, a restored backup,
/// another `--db`).
fn cli_in(e: &Env, journal: &Scratch, args: &[&str]) -> std::process::Output {
    let env = aws_env(&e.proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    journal.cli_env(args, &env)
}

/// The first scenario of SAFETY-A5DD907 finding 1: `--id X` completes, `prune` archives it, and
/// the same command with one more zone is run again. The id is refused (it names the archived
/// workflow), so nothing acts; before, the second X was the creator of the live cluster and its
/// rollback deleted it.
#[test]
fn a_pruned_id_used_again_is_refused_and_the_live_cluster_is_untouched() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("prod", "prod-abcde", &["us-east-1a"]));
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "X"]));
    let before = Inventory::read(&e.c, "prod-abcde");
    before.assert_provisioned(&e.c, 1, 1, "prod", "example.com");
    let pruned = e.cli(&["prune", "--before", "0s", "--json"]);
    assert_eq!(pruned.status.code(), Some(0), "{}", stderr(&pruned));

    let grown = e.input("p2.json", provision_input("prod", "prod-abcde", &["us-east-1a", "us-east-1b"]));
    e.proxy.fail_action(Some("CreateNatGateway"));
    let calls = e.proxy.total();
    let again = e.cli(&["run", "provision-infra", "--input", &grown, "--id", "X"]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    let err = stderr(&again);
    assert!(err.contains("X") && err.contains("pruned") && err.contains("choose another --id"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(e.proxy.total(), calls, "nothing reached AWS");
    assert_eq!(Inventory::read(&e.c, "prod-abcde").ids(), before.ids());
    // The same for `submit`: a daemon never sees it.
    let submitted = e.cli(&["submit", "provision-infra", "--input", &grown, "--id", "X"]);
    assert_eq!(submitted.status.code(), Some(2), "{}", stderr(&submitted));
}

/// The same `--id` in a fresh journal is a new submission with its own creator: it adopts the
/// live cluster (the infraID is the same), and its rollback (a NAT gateway that AWS refuses for
/// good, or a `cancel`) deletes only what it created itself.
#[test]
fn the_same_id_in_a_fresh_journal_rolls_back_only_what_it_created() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("prod", "prod-abcde", &["us-east-1a"]));
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "X"]));
    let before = Inventory::read(&e.c, "prod-abcde");
    before.assert_provisioned(&e.c, 1, 1, "prod", "example.com");

    // A failure for good in the zone the second X adds.
    let grown = e.input("p2.json", provision_input("prod", "prod-abcde", &["us-east-1a", "us-east-1b"]));
    let fresh = Scratch::new();
    e.proxy.fail_action(Some("CreateNatGateway"));
    let out = cli_in(&e, &fresh, &["run", "provision-infra", "--input", &grown, "--id", "X"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(fresh.status("X")["state"], "compensated");
    assert_eq!(
        Inventory::read(&e.c, "prod-abcde").ids(),
        before.ids(),
        "the live cluster is whole, and the new zone's subnets and address are gone"
    );
    e.proxy.fail_action(None);

    // A cancel of a third X, in yet another journal, once it has adopted the VPC and made the new
    // zone's subnets.
    let third = Scratch::new();
    let submitted = cli_in(&e, &third, &["submit", "provision-infra", "--input", &grown, "--id", "X"]);
    assert_eq!(submitted.status.code(), Some(0), "{}", stderr(&submitted));
    e.proxy.set_latency(Duration::from_millis(150));
    let env = aws_env(&e.proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut d = third.spawn_daemon(&[], &env);
    let made_a_subnet = wait_until(Duration::from_secs(120), || {
        third.status("X")["steps"].as_array().is_some_and(|steps| {
            steps.iter().any(|s| s["key"] == "zone/us-east-1b/private-subnet" && s["state"] == "completed")
        })
    });
    assert!(made_a_subnet, "{}", third.daemon_log());
    let cancel = third.cli(&["cancel", "X", "--detach"]);
    assert_eq!(cancel.status.code(), Some(0), "{}", stderr(&cancel));
    let st = third.wait_for_state("X", &["compensated", "compensation_failed", "paused"], Duration::from_secs(240));
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    assert_eq!(st["state"], "compensated", "{st}");
    e.proxy.set_latency(Duration::ZERO);
    assert_eq!(Inventory::read(&e.c, "prod-abcde").ids(), before.ids(), "a cancel deletes only its own");
}

/// SAFETY-A5DD907 finding 2: credentials expire half-way through a rollback. The workflow pauses
/// (keeping its cluster) instead of ending `compensation_failed` and giving the cluster to the
/// next provision, which would adopt the leftovers that a later `retry` of the rollback deletes.
#[test]
fn expired_credentials_during_a_rollback_pause_it_and_keep_the_next_provision_waiting() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("blue", "blue-abcde", &["us-east-1a", "us-east-1b"]));
    e.proxy.fail_action(Some("CreateNatGateway"));
    e.proxy.fail_with("route53 DELETE /hostedzone/{id}", "ExpiredToken", 100);
    let out = e.cli(&["run", "provision-infra", "--input", &input, "--id", "w1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("w1");
    assert_eq!(st["state"], "paused", "{st}");
    assert!(st["error"].as_str().unwrap().contains("ExpiredToken"), "{st}");
    e.proxy.fail_action(None);

    // A CI retry of the same cluster, with fresh credentials, waits for the paused rollback.
    let submitted = e.cli(&["submit", "provision-infra", "--input", &input, "--id", "w2"]);
    assert_eq!(submitted.status.code(), Some(0), "{}", stderr(&submitted));
    let w2 = e.s.status("w2");
    assert_eq!(w2["waitingFor"]["id"], "w1", "{w2}");

    // The operator logs in again and retries: the rollback finishes, then w2 provisions anew.
    e.proxy.clear_fail_with();
    let retried = e.cli(&["retry", "w1"]);
    assert_eq!(retried.status.code(), Some(1), "a rollback, not a completion: {}", stderr(&retried));
    assert_eq!(e.s.status("w1")["state"], "compensated");
    assert_eq!(Inventory::read(&e.c, "blue-abcde").total(), 0, "the rollback removed all it made");
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "w2"]));
    let live = Inventory::read(&e.c, "blue-abcde");
    live.assert_provisioned(&e.c, 2, 2, "blue", "example.com");

    // And `retry` of w1 now changes nothing: it finished for good.
    let again = e.cli(&["retry", "w1"]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert_eq!(Inventory::read(&e.c, "blue-abcde").ids(), live.ids());
}

/// A teardown submitted while a provision of the cluster is running waits for it, runs after
/// it, and leaves nothing: the two never interleave.
#[test]
fn a_teardown_submitted_during_a_provision_waits_for_it_and_removes_everything() {
    let e = Env::new();
    // Slow enough that the provision is still running once the teardown's submit has read the
    // cluster (it checks that no resource is protected before it journals anything).
    e.proxy.set_latency(Duration::from_millis(100));
    // And held: its NAT gateways' creates fail three times (retried with backoff, seconds), so a
    // submit slowed by a loaded machine still meets it running (CI once saw it finish first).
    e.proxy.fail_with("CreateNatGateway", "InternalError", 3);
    let input = e.input("p.json", provision_input("seq", "seq-abcde", &["us-east-1a", "us-east-1b", "us-east-1c"]));
    assert!(e.cli(&["submit", "provision-infra", "--input", &input, "--id", "up"]).status.success());
    let env = aws_env(&e.proxy.endpoint());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut d = e.s.spawn_daemon(&[], &env);
    e.wait_for_step("up", "vpc", Duration::from_secs(60));
    let t = e.input("t.json", json!({"infraID": "seq-abcde", "region": "us-east-1"}));
    assert!(e.cli(&["submit", "teardown", "--input", &t, "--id", "down"]).status.success());
    let waiting = e.s.status("down");
    assert_eq!(waiting["waitingFor"]["id"], "up", "{waiting}");
    e.s.wait_for_state("down", &["completed", "paused", "failed", "compensated"], Duration::from_secs(240));
    assert_eq!(terminate(&mut d, Duration::from_secs(30)).code(), Some(0));
    assert_eq!(e.s.status("up")["state"], "completed");
    assert_eq!(e.s.status("down")["state"], "completed");
    let up_done = e.s.history("up").iter().find(|ev| ev["type"] == "completed").unwrap()["at"].as_i64().unwrap();
    let down_first = e.s.history("down").iter().find(|ev| ev["type"] == "lease_taken").unwrap()["at"].as_i64().unwrap();
    assert!(down_first >= up_done, "the teardown started after the provision finished");
    e.proxy.set_latency(Duration::ZERO);
    assert_eq!(Inventory::read(&e.c, "seq-abcde").total(), 0);
}

/// `cancel` of a workflow paused on expired credentials: once the operator has logged in again,
/// the rollback removes what it made, and nothing of it is left.
#[test]
fn cancel_of_a_paused_provision_rolls_back_everything_it_made() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("halt", "halt-abcde", &["us-east-1a"]));
    e.proxy.fail_with("CreateRouteTable", "ExpiredToken", 1);
    let out = e.cli(&["run", "provision-infra", "--input", &input, "--id", "halted"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(e.s.status("halted")["state"], "paused");
    assert!(Inventory::read(&e.c, "halt-abcde").total() > 3, "it had made things before the pause");
    let cancel = e.cli(&["cancel", "halted"]);
    assert_eq!(cancel.status.code(), Some(0), "{}", stderr(&cancel));
    assert_eq!(e.s.status("halted")["state"], "compensated");
    assert_eq!(Inventory::read(&e.c, "halt-abcde").total(), 0);
}
