//! One account, many journals, regions and clusters (SAFETY-7243D60 N1, N2, N4, N5): what one
//! workflow adopted is proven by AWS's tags, not by the journal it was recorded in. Two operators'
//! journals on one moto take turns on one cluster; a teardown names the wrong region; two
//! clusters are given one issuer. After each, what AWS holds is read back straight from moto.

mod support;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::iam_state::IamState;
use support::inventory::Inventory;
use support::moto::aws_env;
use support::proxy::Proxy;
use support::sweep::Part;
use support::*;

const ADOPTED_BY: &str = "infraflow.io/adopted-by";

fn provision_input(infra: &str) -> Value {
    json!({"name": "prod", "infraID": infra, "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"})
}

/// `infraflow ARGS` through the env's proxy, on another operator's journal.
fn cli_in(e: &Env, journal: &Scratch, args: &[&str]) -> std::process::Output {
    in_journal(journal, &e.proxy.endpoint(), args)
}

/// `infraflow ARGS` against `endpoint`, on `journal`.
fn in_journal(journal: &Scratch, endpoint: &str, args: &[&str]) -> std::process::Output {
    let env = aws_env(endpoint);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    journal.cli_env(args, &env)
}

/// Journal A: a provision fails at the S3 endpoint and its rollback pauses on expired
/// credentials at the NAT gateway, keeping its leftovers (the zones, subnets, VPC among them).
fn a_rollback_paused_in_journal_a(e: &Env, infra: &str) -> String {
    let input = e.input("p.json", provision_input(infra));
    e.proxy.fail_action(Some("CreateVpcEndpoint"));
    e.proxy.fail_with("DeleteNatGateway", "ExpiredToken", 1000);
    let out = e.cli(&["run", "provision-infra", "--input", &input, "--id", "w1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("w1");
    assert_eq!(st["state"], "paused", "{st}");
    e.proxy.fail_action(None);
    e.proxy.clear_fail_with();
    input
}

/// N1: journal B provisions the same cluster, adopting A's leftovers, and completes; B prunes
/// its record; A's operator logs in again and retries the rollback. Nothing in A's journal shows
/// B's workflow: the adoption marks on what B took over are what keep the live cluster whole.
#[test]
fn a_rollback_retried_in_one_journal_leaves_what_another_journals_provision_adopted() {
    let e = Env::new();
    let input = a_rollback_paused_in_journal_a(&e, "xj-abcde");
    let leftovers = Inventory::read(&e.c, "xj-abcde");
    assert!(
        !leftovers.vpcs.is_empty() && !leftovers.subnets.is_empty(),
        "the rollback paused before its subnets and VPC: {:?} {}",
        leftovers.counts(),
        e.s.status("w1")
    );

    let b = Scratch::new();
    ok(&cli_in(&e, &b, &["run", "provision-infra", "--input", &input, "--id", "w2"]));
    let live = Inventory::read(&e.c, "xj-abcde");
    live.assert_provisioned(&e.c, 1, 1, "prod", "example.com");
    let vpc = live.vpcs[0].vpc_id().unwrap().to_string();
    assert!(
        live.tags_of(&vpc).iter().any(|(k, v)| k.starts_with(ADOPTED_BY) && !v.is_empty()),
        "the VPC w1 made carries w2's mark: {:?}",
        live.tags_of(&vpc)
    );
    let pruned = cli_in(&e, &b, &["prune", "--before", "0s"]);
    assert_eq!(pruned.status.code(), Some(0), "{}", stderr(&pruned));

    let retried = e.cli(&["retry", "w1"]);
    assert_eq!(retried.status.code(), Some(1), "{}", stderr(&retried));
    // Never a silent `compensated` over what it leaves: the rollback waits, naming the adopter.
    let st = e.s.status("w1");
    assert_eq!(st["state"], "paused", "{st}");
    assert!(st.to_string().contains("adopted by w2@"), "the pause names the adopter: {st}");
    let after = Inventory::read(&e.c, "xj-abcde");
    assert_eq!(after.ids(), live.ids(), "w1's undo deleted nothing w2's cluster runs on");
    after.assert_provisioned(&e.c, 1, 1, "prod", "example.com");
}

/// SAFETY-A7937A6 G1: three journals, as the reading ran it. W1 (A) made the whole network and
/// paused at its S3 endpoint (expired credentials); W2 (B) adopted all of it and paused at the
/// same step; W3 (C) adopted it too and completed: the live cluster. W2 is cancelled (its
/// rollback takes its own marks off, and no other), then W1 is cancelled: its rollback deletes
/// nothing W3 runs on, and pauses naming W3.
#[test]
fn the_first_adopters_rollback_leaves_a_later_adopters_mark_and_the_creators_rollback_deletes_nothing_it_uses() {
    let e = Env::new();
    let input = e.input("p.json", provision_input("x3-abcde"));
    let (b, c) = (Scratch::new(), Scratch::new());
    e.proxy.fail_with("CreateVpcEndpoint", "ExpiredToken", 1000);
    let w1 = e.cli(&["run", "provision-infra", "--input", &input, "--id", "w1"]);
    let w2 = cli_in(&e, &b, &["run", "provision-infra", "--input", &input, "--id", "w2"]);
    e.proxy.clear_fail_with();
    for (w, out) in [("w1", &w1), ("w2", &w2)] {
        assert!(!out.status.success(), "{w}: {}", stderr(out));
    }
    assert_eq!(e.s.status("w1")["state"], "paused");
    ok(&cli_in(&e, &c, &["run", "provision-infra", "--input", &input, "--id", "w3"]));
    let live = Inventory::read(&e.c, "x3-abcde");
    live.assert_provisioned(&e.c, 1, 1, "prod", "example.com");
    let cancelled = cli_in(&e, &b, &["cancel", "w2"]);
    let w2 = in_journal(&b, &e.proxy.endpoint(), &["status", "w2", "--json"]);
    let w2: Value = serde_json::from_slice(&w2.stdout).unwrap();
    assert_eq!(w2["state"], "compensated", "{w2}\n{}", stderr(&cancelled));
    let now = Inventory::read(&e.c, "x3-abcde");
    assert_eq!(now.ids(), live.ids(), "w2's rollback deleted nothing");
    for id in now.ids().iter().filter(|id| id.starts_with("nat-") || id.starts_with("subnet-")) {
        let marks: Vec<String> = now
            .tags_of(id)
            .into_iter()
            .filter(|(k, v)| k.starts_with(ADOPTED_BY) && !v.is_empty())
            .map(|(_, v)| v)
            .collect();
        assert!(marks.iter().any(|m| m.starts_with("w3@")), "{id}: w3's own mark stays: {marks:?}");
        assert!(!marks.iter().any(|m| m.starts_with("w2@")), "{id}: w2's own mark is off: {marks:?}");
    }

    let rolled = e.cli(&["cancel", "w1"]);
    let st = e.s.status("w1");
    assert_eq!(st["state"], "paused", "{st}\n{}", stderr(&rolled));
    assert!(st.to_string().contains("w3@"), "the pause names the live adopter: {st}");
    let after = Inventory::read(&e.c, "x3-abcde");
    assert_eq!(after.ids(), live.ids(), "w1's undo deleted nothing w3's cluster runs on");
    after.assert_provisioned(&e.c, 1, 1, "prod", "example.com");
    let check = in_journal(&c, &e.proxy.endpoint(), &["check", "--infra-id", "x3-abcde", "--region", "us-east-1"]);
    assert_eq!(check.status.code(), Some(0), "w3's cluster in sync: {}{}", stdout(&check), stderr(&check));
}

/// F9 (SAFETY-F393541): journal B's provision adopts what A's paused rollback left, then fails
/// and rolls back itself: its rollback removes the marks it wrote, and A's retried rollback then
/// deletes everything A made, ending `compensated` with nothing left.
#[test]
fn an_adopter_that_rolls_back_removes_its_marks_and_the_creators_rollback_leaves_nothing() {
    let e = Env::new();
    let input = a_rollback_paused_in_journal_a(&e, "xm-abcde");
    let b = Scratch::new();
    e.proxy.fail_action(Some("CreateVpcEndpoint"));
    let out = cli_in(&e, &b, &["run", "provision-infra", "--input", &input, "--id", "w2"]);
    e.proxy.fail_action(None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let w2 = in_journal(&b, &e.proxy.endpoint(), &["status", "w2", "--json"]);
    let w2: Value = serde_json::from_slice(&w2.stdout).unwrap();
    assert_eq!(w2["state"], "compensated", "{w2}");
    let marked = Inventory::read(&e.c, "xm-abcde");
    for id in marked.ids() {
        assert!(
            !marked.tags_of(&id).iter().any(|(k, v)| k.starts_with(ADOPTED_BY) && !v.is_empty()),
            "{id} keeps w2's mark: {:?}",
            marked.tags_of(&id)
        );
    }
    let retried = e.cli(&["retry", "w1"]);
    assert_eq!(retried.status.code(), Some(1), "{}", stderr(&retried));
    assert_eq!(e.s.status("w1")["state"], "compensated", "{}", e.s.status("w1"));
    let left = Inventory::read(&e.c, "xm-abcde");
    assert_eq!(left.total(), 0, "nothing left behind a rolled-back adopter: {:?}", left.counts());
}

/// The other order: while journal A's rollback is paused, journal B tears the cluster down (the
/// operator's remedy); A's retry then finds nothing of its own and ends compensated, and a new
/// provision from A makes the cluster whole again, once.
#[test]
fn a_teardown_from_another_journal_while_a_rollback_is_paused_leaves_the_retry_nothing_to_do() {
    let e = Env::new();
    let input = a_rollback_paused_in_journal_a(&e, "xt-abcde");
    let b = Scratch::new();
    let t = e.input("t.json", json!({"infraID": "xt-abcde", "region": "us-east-1"}));
    ok(&cli_in(&e, &b, &["run", "teardown", "--input", &t, "--id", "down"]));
    assert_eq!(Inventory::read(&e.c, "xt-abcde").total(), 0);

    let retried = e.cli(&["retry", "w1"]);
    assert_eq!(retried.status.code(), Some(1), "{}", stderr(&retried));
    assert_eq!(e.s.status("w1")["state"], "compensated", "{}", e.s.status("w1"));
    ok(&e.cli(&["run", "provision-infra", "--input", &input, "--id", "w3"]));
    Inventory::read(&e.c, "xt-abcde").assert_provisioned(&e.c, 1, 1, "prod", "example.com");
}

fn iam_input(infra: &str, region: &str) -> Value {
    json!({"infraID": infra, "region": region, "oidcBucket": "oidc-store", "oidcBucketRegion": "us-east-1"})
}

/// N2 and N5: IAM is global, a teardown regional. A teardown naming another region (a typo, or
/// a second cluster of the same infraID there) leaves the cluster's IAM; a create-iam for that
/// region pauses naming the region the IAM serves, rewriting nothing; the right region's
/// teardown removes it all.
#[test]
fn iam_made_for_one_region_is_left_by_a_teardown_and_refused_by_a_create_iam_of_another() {
    let e = Env::new();
    let made = ok(&e.cli(&["run", "create-iam", "--input", &e.input("i.json", iam_input("rg-abcde", "us-east-1"))]));
    let before = IamState::read(&e.c, "rg-abcde");
    assert_eq!((before.providers.len(), before.roles.len(), before.profiles.len()), (1, 8, 1), "{}", before.summary());
    assert!(before.roles.values().all(|r| r.tags.get("infraflow.io/region").map(String::as_str) == Some("us-east-1")));

    let wrong = e.input("t.json", json!({"infraID": "rg-abcde", "region": "us-west-2"}));
    let plan = e.cli(&["run", "teardown", "--input", &wrong, "--dry-run", "--json"]);
    assert_eq!(plan.status.code(), Some(0), "{}", stderr(&plan));
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let named = |list: &str| plan[list].as_array().unwrap().iter().any(|p| p["id"] == "rg-abcde-openshift-ingress");
    assert!(!named("delete") && named("leave"), "the plan leaves it, naming it: {plan}");
    ok(&e.cli(&["run", "teardown", "--input", &wrong]));
    let kept = IamState::read(&e.c, "rg-abcde");
    assert_eq!(kept.summary(), before.summary(), "the us-east-1 cluster's IAM is whole");

    let west_input = e.input("w.json", iam_input("rg-abcde", "us-west-2"));
    let west = e.cli(&["run", "create-iam", "--input", &west_input, "--id", "west"]);
    assert_eq!(west.status.code(), Some(1), "{}", stderr(&west));
    let err = stderr(&west);
    assert!(err.contains("us-east-1") && err.contains("us-west-2") && err.contains("paused"), "{err}");
    let unchanged = IamState::read(&e.c, "rg-abcde");
    for (name, role) in &before.roles {
        assert_eq!(unchanged.roles[name].policies, role.policies, "{name}'s policy is not rewritten");
        assert_eq!(unchanged.roles[name].trust, role.trust, "{name}'s trust is not rewritten");
    }
    // The paused one keeps the cluster's queue: the operator cancels it (it made nothing).
    let cancelled = e.cli(&["cancel", "west"]);
    assert_eq!(cancelled.status.code(), Some(0), "{}", stderr(&cancelled));
    assert_eq!(IamState::read(&e.c, "rg-abcde").summary(), before.summary(), "its rollback deleted nothing");

    let right = e.input("r.json", json!({"infraID": "rg-abcde", "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &right]));
    assert_eq!(IamState::read(&e.c, "rg-abcde").total(), 0, "the right region's teardown removes it");
    assert_eq!(made["region"], "us-east-1");
}

/// N5: a second create-iam submission for the same cluster with other zones does not rewrite
/// the first's role policies (a running cluster's operators would lose or gain rights); it
/// pauses naming the workflow that made the role.
#[test]
fn a_second_create_iam_with_other_zones_pauses_instead_of_rewriting_the_roles() {
    let e = Env::new();
    let first = json!({"infraID": "rz-abcde", "region": "us-east-1", "oidcBucket": "oidc-store",
                       "publicZoneID": "ZPUB1", "privateZoneID": "ZPRIV1"});
    ok(&e.cli(&["run", "create-iam", "--input", &e.input("a.json", first.clone()), "--id", "iam-1"]));
    let before = IamState::read(&e.c, "rz-abcde");
    // The same input again, from another submission: nothing differs, so it completes.
    ok(&e.cli(&["run", "create-iam", "--input", &e.input("a2.json", first), "--id", "iam-2"]));
    let other = json!({"infraID": "rz-abcde", "region": "us-east-1", "oidcBucket": "oidc-store",
                       "publicZoneID": "ZPUB2", "privateZoneID": "ZPRIV2"});
    let out = e.cli(&["run", "create-iam", "--input", &e.input("b.json", other), "--id", "iam-3"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(e.s.status("iam-3")["state"], "paused");
    assert!(stderr(&out).contains("iam-1"), "names the workflow that made the role: {}", stderr(&out));
    let after = IamState::read(&e.c, "rz-abcde");
    for (name, role) in &before.roles {
        assert_eq!(after.roles[name].policies, role.policies, "{name}'s policy is not rewritten");
    }
    // Its rollback (cancel) deletes nothing of the first's.
    let cancelled = e.cli(&["cancel", "iam-3"]);
    assert_eq!(cancelled.status.code(), Some(0), "{}", stderr(&cancelled));
    assert_eq!(IamState::read(&e.c, "rz-abcde").summary(), before.summary());
}

/// N4: two clusters given one issuer. The second refuses to share the first's provider (a
/// pause naming it), so the first's teardown can never delete what the second's roles trust.
#[test]
fn a_second_cluster_with_the_same_issuer_pauses_instead_of_sharing_the_provider() {
    let e = Env::new();
    let issuer = "https://oidc.example/shared";
    let a = json!({"infraID": "aa-abcde", "region": "us-east-1", "issuerURL": issuer});
    let b = json!({"infraID": "bb-abcde", "region": "us-east-1", "issuerURL": issuer});
    ok(&e.cli(&["run", "create-iam", "--input", &e.input("a.json", a), "--id", "iam-a"]));
    let out = e.cli(&["run", "create-iam", "--input", &e.input("b.json", b), "--id", "iam-b"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("iam-b");
    assert_eq!(st["state"], "paused", "{st}");
    let err = st["error"].as_str().unwrap_or_default();
    assert!(err.contains("aa-abcde/oidc-provider") && err.contains("own issuer"), "{err}");
    assert_eq!(IamState::read(&e.c, "bb-abcde").total(), 0, "no role of bb trusts aa's provider");
    let providers = IamState::read(&e.c, "aa-abcde").providers;
    assert_eq!(providers.len(), 1);
    assert!(providers.values().next().unwrap().get("kubernetes.io/cluster/bb-abcde").is_none(), "not tagged bb's");
}

/// SIGKILL at every AWS call of journal B's provision over journal A's paused leftovers (the
/// adoption marks' reads and writes among them): before the call reaches AWS, or after AWS acted
/// but before the answer arrives, each kill's resume killed at the next call (`sweep::chain`).
/// The run that finishes leaves one of everything, every leftover of A's carries B's mark, and
/// A's retried rollback deletes none of it.
fn adoption_across_journals_sweep(after_aws_acts: bool) {
    let world = || {
        let e = Env::new();
        let proxy = Proxy::start(e.moto.port);
        (e, proxy)
    };
    let tag = if after_aws_acts { "a" } else { "b" };
    let run = |(e, proxy): &(Env, Proxy), name: &str, part: Option<&Part>| {
        let infra = format!("{name}-abcde");
        let a = Scratch::new();
        let input = e.input(&format!("{name}.json"), provision_input(&infra));
        proxy.fail_action(Some("CreateVpcEndpoint"));
        proxy.fail_with("DeleteNatGateway", "ExpiredToken", 1000);
        let failed = in_journal(&a, &proxy.endpoint(), &["run", "provision-infra", "--input", &input, "--id", "w1"]);
        assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
        proxy.fail_action(None);
        proxy.clear_fail_with();
        let leftovers = Inventory::read(&e.c, &infra).ids();
        assert!(!leftovers.is_empty());
        proxy.reset_counts();
        let w2 = format!("{name}-w2");
        let args = ["run", "provision-infra", "--input", input.as_str(), "--id", w2.as_str()];
        let killed = part.map(|part| support::sweep::chain(e, proxy, part, &args));
        ok(&e.cli_at(&proxy.endpoint(), &args));
        let counted = proxy.counts();
        let live = Inventory::read(&e.c, &infra);
        live.assert_provisioned(&e.c, 1, 1, "prod", "example.com");
        for id in leftovers.iter().filter(|id| id.starts_with("vpc-") || id.starts_with("subnet-")) {
            assert!(
                live.tags_of(id).iter().any(|(k, v)| k.starts_with(ADOPTED_BY) && !v.is_empty()),
                "{id} unmarked, {part:?}"
            );
        }
        let retried = in_journal(&a, &proxy.endpoint(), &["retry", "w1"]);
        assert_eq!(retried.status.code(), Some(1), "{}", stderr(&retried));
        assert_eq!(Inventory::read(&e.c, &infra).ids(), live.ids(), "{part:?}: A's rollback left B's cluster");
        (killed.unwrap_or_default(), counted)
    };
    let first = world();
    let (_, clean) = run(&first, &format!("clean{tag}"), None);
    let calls: u32 = clean.values().sum();
    assert!(calls > 20, "a provision makes dozens of calls, counted {calls}");
    support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part)).0
    });
}

#[test]
fn every_aws_call_of_an_adoption_across_journals_killed_before_it_reaches_aws_resumes_exact() {
    adoption_across_journals_sweep(false);
}

#[test]
fn every_aws_call_of_an_adoption_across_journals_killed_after_aws_acted_resumes_exact() {
    adoption_across_journals_sweep(true);
}

/// SAFETY-7243D60 N14: a team put the cluster's worker role in an instance profile of theirs.
/// The cluster's teardown does not take it out of their profile: it pauses naming the profile,
/// and finishes once they have.
#[test]
fn teardown_never_takes_the_clusters_role_out_of_someone_elses_instance_profile() {
    let e = Env::new();
    ok(&e.cli(&["run", "create-iam", "--input", &e.input("i.json", iam_input("rp-abcde", "us-east-1"))]));
    let iam = &e.c.iam;
    e.c.block_on(iam.create_instance_profile().instance_profile_name("team-x-profile").send()).unwrap();
    let add =
        iam.add_role_to_instance_profile().instance_profile_name("team-x-profile").role_name("rp-abcde-worker-role");
    e.c.block_on(add.send()).unwrap();
    let held = || {
        let p = e.c.block_on(iam.get_instance_profile().instance_profile_name("team-x-profile").send()).unwrap();
        p.instance_profile().unwrap().roles().iter().map(|r| r.role_name().to_string()).collect::<Vec<_>>()
    };
    let t = e.input("t.json", json!({"infraID": "rp-abcde", "region": "us-east-1"}));
    let res = e.cli(&["run", "teardown", "--input", &t, "--id", "rp"]);
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    let st = e.s.status("rp");
    assert_eq!(st["state"], "paused", "{st}");
    assert!(st["error"].as_str().unwrap().contains("team-x-profile"), "{st}");
    assert_eq!(held(), vec!["rp-abcde-worker-role".to_string()], "their profile keeps it");
    let remove = iam.remove_role_from_instance_profile().instance_profile_name("team-x-profile");
    e.c.block_on(remove.role_name("rp-abcde-worker-role").send()).unwrap();
    let res = e.cli(&["retry", "rp"]);
    assert_eq!(res.status.code(), Some(0), "{}", stderr(&res));
    assert_eq!(IamState::read(&e.c, "rp-abcde").total(), 0);
}
