//! SIGKILL at every AWS call of a provision, not at a few random moments: the proxy counts the
//! calls of `infraflow run` and kills it at the n-th, either before the call reaches AWS or after
//! AWS acted but before the answer arrives (the case where only AWS knows what happened). After
//! each kill, running the same workflow again must finish with the exact inventory: nothing
//! created twice, nothing leaked.

mod support;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::inventory::Inventory;
use support::proxy::{KillAt, Proxy};

fn provision_input(name: &str, infra: &str) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"})
}

/// The calls a clean one-zone provision makes, counted on a throwaway cluster.
fn calls_of_a_clean_run(e: &Env, proxy: &Proxy) -> u32 {
    proxy.reset_counts();
    let input = e.input("clean.json", provision_input("clean", "clean-abcde"));
    ok(&e.cli_at(&proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "clean"]));
    let n = proxy.total();
    assert!(n > 20, "a provision makes dozens of calls, counted {n}");
    n
}

fn sweep(after_aws_acts: bool) {
    let world = || {
        let e = Env::new();
        let proxy = Proxy::start(e.moto.port);
        (e, proxy)
    };
    let (e, proxy) = world();
    let calls = calls_of_a_clean_run(&e, &proxy);
    let tag = if after_aws_acts { "a" } else { "b" };
    let (fired, _) = support::sweep::every_call(calls, (e, proxy), world, |(e, proxy), call| {
        let (name, infra, id) = (format!("k{call}{tag}"), format!("k{call}{tag}-abcde"), format!("w{call}{tag}"));
        let input = e.input(&format!("{id}.json"), provision_input(&name, &infra));
        let args = ["run", "provision-infra", "--input", input.as_str(), "--id", id.as_str()];
        let mut child = e.spawn_cli_at(&proxy.endpoint(), &args);
        proxy.kill_at(KillAt { call, after_aws_acts, pid: child.id() });
        let status = child.wait().unwrap();
        let fired = proxy.kill_fired();
        assert!(!fired || !status.success(), "killed at call {call}, yet it exited {status:?}");
        // The interrupted workflow, run again: it resumes from its journal.
        ok(&e.cli_at(&proxy.endpoint(), &args));
        let inv = Inventory::read(&e.c, &infra);
        inv.assert_provisioned(&e.c, 1, 1, &name, "example.com");
        let st = e.s.status(&id);
        assert_eq!(st["state"], "completed", "killed at call {call}: {st}");
        fired
    });
    // A kill at a call number a resumed run no longer reaches does not fire; nearly all must.
    assert!(fired + 2 >= calls, "{fired} of {calls} kills fired");
    eprintln!("killed at each of {calls} calls ({tag}): {fired} kills, every run resumed to the exact inventory");
}

#[test]
fn a_provision_killed_at_every_aws_call_before_it_reaches_aws_resumes_to_the_exact_inventory() {
    sweep(false);
}

#[test]
fn a_provision_killed_at_every_aws_call_after_aws_acted_resumes_to_the_exact_inventory() {
    sweep(true);
}
