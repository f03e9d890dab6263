//! Kill-at-every-call sweeps spread over several worlds at once (a moto, a journal and a proxy
//! each). A create resumed mid-step settles before it looks for what the killed attempt made, as
//! AWS's eventual consistency asks: 5 s on AWS, here only as long as the proxy's world needs
//! (`Proxy::consistency_settle`: moto shows what it made at once), so a chain's time goes to
//! kills and resumes rather than to waits.
//!
//! `every_call_chained` kills every call of one run in turn, each kill's resume being the next
//! kill's victim (`chain.rs`), so a sweep costs a few runs, not a run a call.

use std::collections::BTreeMap;

use super::aws::AwsEnv;
use super::chain::Kills;
use super::proxy::Proxy;

/// A world's share of the kills: the calls of these actions (every call of each, wherever the
/// run makes it: branches run side by side, so where a call falls in a run is not fixed).
#[derive(Clone, Debug)]
pub struct Part {
    pub after_aws_acts: bool,
    pub index: usize,
    pub actions: Vec<String>,
}

/// Chains a sweep runs at once: a chain still waits on its processes' starts and the engine's
/// polls, so more parts than cores shorten it without adding work.
pub const PARTS: usize = 6;

/// Runs a workflow's command (`args`, a `run … --id ID`: the same command each time, so each run
/// resumes the last from the journal) through `proxy` under `part` of a chain of kills, until a
/// run is not killed. A step killed 20 times pauses its run (the engine's guard against a step
/// that crashes its process); the chain retries it as an operator would and goes on. Returns the
/// kills; the caller checks what the finished run left.
pub fn chain(e: &AwsEnv, proxy: &Proxy, part: &Part, args: &[&str]) -> Kills {
    chain_with(e, proxy, part, args, &[])
}

/// `chain`, each process given `env` besides the world's.
pub fn chain_with(e: &AwsEnv, proxy: &Proxy, part: &Part, args: &[&str], env: &[(&str, &str)]) -> Kills {
    let id = args.iter().position(|a| *a == "--id").and_then(|i| args.get(i + 1)).expect("a run with --id");
    let retry = ["retry", id];
    proxy.chain_start(part.after_aws_acts, &part.actions);
    let (mut retrying, mut retries) = (false, 0);
    for runs in 0.. {
        let endpoint = proxy.chain_expect();
        // A kill's resume waits only as long as the proxy's world needs to show what the killed
        // run made: the kills, not 5 s settles, are what a chain is for.
        let settle = format!("{}ms", proxy.consistency_settle().as_millis());
        let mut vars = vec![("INFRAFLOW_CONSISTENCY_SETTLE", settle.as_str())];
        vars.extend_from_slice(env);
        let mut child = e.spawn_cli_with(&endpoint, if retrying { &retry } else { args }, &vars);
        proxy.chain_process(child.id());
        let status = proxy.chain_wait(&mut child);
        retrying = false;
        if !proxy.chain_fired() {
            let st = e.s.status(id);
            if st["state"] == "paused"
                && st["error"].as_str().is_some_and(|w| w.contains("the process stopped during it"))
            {
                retries += 1;
                assert!(retries <= 20, "{id} paused again after {retries} retries: {st}");
                retrying = true;
                continue;
            }
            break;
        }
        assert!(!status.success(), "killed at run {runs}, yet it exited {status:?}");
        assert!(runs < 1000, "a chain of kills that does not end: {:?}", proxy.chain_finish());
    }
    proxy.chain_finish()
}

/// Every call of a run killed at (after AWS acted: every change), the actions of the clean run
/// (counted in `clean`) shared out to `PARTS` chains by their calls, a world each (`run(world, part)` makes the world's cluster,
/// runs `chain` with `part` and checks what it left; the first world is `first`, where the clean
/// run was made, the others made by `world()`). Checks the chains killed at every action of the
/// clean run and at two calls in three at least; returns the worlds, for checks across them.
pub fn every_call_chained<W: Send>(
    clean: &BTreeMap<String, u32>,
    after_aws_acts: bool,
    first: W,
    world: impl Fn() -> W + Sync,
    run: impl Fn(&W, &Part) -> Kills + Sync,
) -> Vec<W> {
    // Killed after AWS acted, a read is killed before it reaches AWS by another name: AWS did
    // nothing, and the process hears nothing either way. Only changes are killed after AWS
    // acted; the sweep before AWS acts kills every read.
    let clean: BTreeMap<String, u32> = clean
        .iter()
        .filter(|(action, _)| !after_aws_acts || super::chain::is_change(action))
        .map(|(action, n)| (action.clone(), *n))
        .collect();
    let clean = &clean;
    let calls: u32 = clean.values().sum();
    // The most-called actions first, each to the part with the fewest calls so far.
    let mut parts: Vec<(u32, Part)> =
        (0..PARTS).map(|index| (0, Part { after_aws_acts, index, actions: Vec::new() })).collect();
    let mut by_calls: Vec<(&String, &u32)> = clean.iter().collect();
    by_calls.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (action, n) in by_calls {
        let (load, part) = parts.iter_mut().min_by_key(|(load, p)| (*load, p.index)).unwrap();
        *load += n;
        part.actions.push(action.clone());
    }
    let mut first = Some(first);
    let results: Vec<std::thread::Result<(W, Kills)>> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|(_, part)| {
                let given = first.take();
                let (world, run) = (&world, &run);
                s.spawn(move || {
                    let w = given.unwrap_or_else(world);
                    let killed = run(&w, part);
                    (w, killed)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut worlds = Vec::new();
    let mut killed = BTreeMap::new();
    let mut missed = Vec::new();
    for (r, (_, part)) in results.into_iter().zip(&parts) {
        match r {
            Ok((w, k)) => {
                worlds.push(w);
                // A chain kills at the first call of each of its actions its world makes.
                missed.extend(
                    part.actions.iter().filter(|a| k.called.contains(*a) && !k.killed.contains_key(*a)).cloned(),
                );
                for (action, n) in k.killed {
                    *killed.entry(action).or_insert(0) += n;
                }
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    let kills: u32 = killed.values().sum();
    // An action of the clean run goes unkilled only where its chain's world never called it: a
    // world made by a failed run (`cross_journal`) may keep what another world's failure undid,
    // and adopt it rather than make it.
    assert!(missed.is_empty(), "no kill at {missed:?} (killed at {killed:?})");
    let unkilled: Vec<&String> = clean.keys().filter(|a| !killed.contains_key(*a)).collect();
    // Not one kill a clean call: a resumed run skips what its journal holds (a read or a poll
    // answered before the kill), and a clean run's polls vary in number (the teardown of a
    // cluster that ran: 91 and 92 kills for 114 calls).
    assert!(kills * 3 >= calls * 2, "{kills} kills for the clean run's {calls} calls: {killed:?}");
    eprintln!(
        "chains ({}): {kills} kills for the clean run's {calls} calls; not called where they were to be killed: {unkilled:?}",
        if after_aws_acts { "after AWS acted" } else { "before the call reaches AWS" }
    );
    worlds
}
