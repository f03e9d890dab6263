//! One daemon, many AWS accounts: each workflow acts through the role its input names (moto puts
//! what an assumed role makes in the role's account), the journal records the role and account
//! and never a credential, and a role that cannot be assumed pauses naming it.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::inventory::Inventory;
use support::moto::Clients;
use support::*;

const ROLE_A: &str = "arn:aws:iam::111111111111:role/infraflow";
const ROLE_B: &str = "arn:aws:iam::222222222222:role/infraflow";

fn provision_input(name: &str, infra: &str, role: &str) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "zones": ["us-east-1a"],
           "baseDomain": "example.com", "roleARN": role, "externalID": "team-a-7f3c", "sessionName": "infraflow-ci"})
}

/// The role's account, read through the role, with the public zone a provision needs.
fn account(e: &Env, role: &str) -> Clients {
    let c = Clients::as_role(&e.moto.endpoint(), role);
    c.create_public_zone("example.com");
    c
}

#[test]
fn one_daemon_makes_each_cluster_in_its_roles_account_and_a_teardown_under_one_role_leaves_the_other() {
    let e = Env::new();
    let (a, b) = (account(&e, ROLE_A), account(&e, ROLE_B));
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut daemon =
        e.daemon_with(&e.proxy.endpoint(), &["--listen", &listen, "--allow-role", "arn:aws:iam::*:role/infraflow"]);
    // The same infraID in two accounts is two clusters: they run side by side.
    let infra = "twin-abcde";
    for (id, role) in [("in-a", ROLE_A), ("in-b", ROLE_B)] {
        let input = e.input(&format!("{id}.json"), provision_input("twin", infra, role));
        let out = e.cli(&["submit", "provision-infra", "--input", &input, "--id", id]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    for id in ["in-a", "in-b"] {
        let st = e.s.wait_for_state(id, &["completed", "paused", "failed", "compensated"], Duration::from_secs(240));
        assert_eq!(st["state"], "completed", "{st}");
    }
    Inventory::read(&a, infra).assert_provisioned(&a, 1, 1, "twin", "example.com");
    Inventory::read(&b, infra).assert_provisioned(&b, 1, 1, "twin", "example.com");
    assert!(Inventory::read(&e.c, infra).ids().is_empty(), "the process's own account got some of it");
    let (st_a, st_b) = (e.s.status("in-a"), e.s.status("in-b"));
    assert_eq!((st_a["account"].as_str(), st_a["role"].as_str()), (Some("111111111111"), Some(ROLE_A)), "{st_a}");
    assert_eq!(st_b["account"], "222222222222", "{st_b}");
    assert_ne!(st_a["cluster"], st_b["cluster"], "one cluster key for two accounts' clusters");
    let text = e.s.cli(&["status", "in-a"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("account:   111111111111 (role"), "{text:?}");
    let (code, page) = http_get(port, "/workflows/in-b");
    assert_eq!(code, 200, "{page}");
    // The page escapes the ARN's slash (`&#x2f;`).
    assert!(page.contains(r#"class="account">222222222222 (role arn:aws:iam::222222222222:role"#), "{page}");
    // F10: the external id is never shown — page, status --json, history.
    assert!(!page.contains("team-a-7f3c"), "the page shows the external id");
    assert_eq!(st_a["input"]["externalID"], "(redacted)", "{st_a}");
    for args in [["history", "in-a", "--json"].as_slice(), ["history", "in-a"].as_slice()] {
        let h = e.s.cli(args);
        assert!(h.status.success() && !String::from_utf8_lossy(&h.stdout).contains("team-a-7f3c"), "{args:?}: {h:?}");
    }

    // Nothing STS issued is written down: not in the journal, its WAL, nor the daemon's log.
    let issued = e.proxy.issued_credentials();
    assert!(issued.len() >= 6, "two roles' keys, secrets and tokens went through the proxy: {issued:?}");
    let db = e.s.db();
    let mut written = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        written.extend(std::fs::read(format!("{}{suffix}", db.display())).unwrap_or_default());
    }
    written.extend(e.s.daemon_log().into_bytes());
    let written = String::from_utf8_lossy(&written);
    for secret in &issued {
        assert!(!written.contains(secret.as_str()), "a credential was written down: {secret}");
    }
    assert!(written.contains(ROLE_A), "the journal records the role");

    let t = e.input("t.json", json!({"infraID": infra, "region": "us-east-1", "roleARN": ROLE_A}));
    // The dry run reads through the role too: account A's cluster, all of it.
    let plan = ok(&e.cli(&["run", "teardown", "--input", &t, "--dry-run", "--json"]));
    assert_eq!(plan["account"], "111111111111", "{plan}");
    let planned: std::collections::BTreeSet<String> =
        plan["delete"].as_array().unwrap().iter().filter_map(|p| p["id"].as_str().map(str::to_string)).collect();
    let in_a = Inventory::read(&a, infra).ids();
    assert!(in_a.iter().all(|id| planned.contains(id)), "the plan misses some of A's cluster: {plan}");
    let out = e.cli(&["submit", "teardown", "--input", &t, "--id", "down-a"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let st = e.s.wait_for_state("down-a", &["completed", "paused", "failed"], Duration::from_secs(240));
    assert_eq!(st["state"], "completed", "{st}");
    // F10: a role's session is named after the workflow (CloudTrail tells workflows apart).
    assert_eq!(st["input"]["sessionName"], "down-a", "{st}");
    terminate(&mut daemon, Duration::from_secs(30));
    assert_eq!(Inventory::read(&a, infra).total(), 0, "the teardown under role A left some of A's cluster");
    Inventory::read(&b, infra).assert_provisioned(&b, 1, 1, "twin", "example.com");
}

#[test]
fn a_malformed_role_arn_is_refused_at_submit_and_nothing_is_journaled() {
    let e = Env::new();
    for (role, says) in [
        (json!("arn:aws:iam::1111:role/x"), "roleARN"),
        (json!("arn:aws:iam::111111111111:user/x"), "roleARN"),
        (json!(17), "roleARN"),
    ] {
        let mut input = provision_input("bad", "bad-abcde", ROLE_A);
        input["roleARN"] = role;
        let file = e.input("bad.json", input);
        let out = e.s.cli(&["submit", "provision-infra", "--input", &file, "--id", "bad"]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = stderr(&out);
        assert!(err.contains(says) && err.trim().lines().count() == 1, "{err}");
    }
    let mut input = provision_input("bad", "bad-abcde", ROLE_A);
    input.as_object_mut().unwrap().remove("roleARN");
    let out = e.s.cli(&["submit", "provision-infra", "--input", &e.input("noarn.json", input), "--id", "bad"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("need a roleARN"), "{}", stderr(&out));
    let listed = e.s.cli(&["status", "bad"]);
    assert!(!listed.status.success(), "something was journaled: {listed:?}");
}

#[test]
fn a_role_that_cannot_be_assumed_pauses_naming_the_role_and_makes_nothing() {
    let e = Env::new();
    let a = account(&e, ROLE_A);
    e.proxy.fail_with("AssumeRole", "AccessDenied", 1000);
    let input = e.input("p.json", provision_input("denied", "denied-abcde", ROLE_A));
    let out = e.cli(&["run", "provision-infra", "--input", &input, "--id", "denied"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("denied");
    assert_eq!(st["state"], "paused", "{st}");
    let error = st["error"].as_str().unwrap_or_default();
    assert!(error.contains(&format!("cannot assume role {ROLE_A}")) && !error.contains('\n'), "{error}");
    assert!(Inventory::read(&a, "denied-abcde").ids().is_empty());
    assert!(Inventory::read(&e.c, "denied-abcde").ids().is_empty());
    // Once the role's trust is fixed, retry goes on in the role's account.
    e.proxy.clear_fail_with();
    ok(&e.cli(&["retry", "denied"]));
    Inventory::read(&a, "denied-abcde").assert_provisioned(&a, 1, 1, "denied", "example.com");
}

/// SIGKILL at every AWS call of a provision under a role — its AssumeRole and the probe under the
/// role among them —, before the call reaches AWS or after AWS acted, each kill's resume killed
/// at the next call (`sweep::chain`): the run that finishes leaves one of everything in the
/// role's account and nothing in the process's own.
fn provision_under_a_role_sweep(after_aws_acts: bool) {
    let world = || {
        let e = Env::new();
        let a = account(&e, ROLE_A);
        (e, a)
    };
    let tag = if after_aws_acts { "a" } else { "b" };
    let run = |(e, a): &(Env, Clients), name: &str, part: Option<&support::sweep::Part>| {
        let infra = format!("{name}-abcde");
        let input = e.input(&format!("{name}.json"), provision_input(name, &infra, ROLE_A));
        e.proxy.reset_counts();
        let args = ["run", "provision-infra", "--input", input.as_str(), "--id", name];
        let killed = part.map(|part| support::sweep::chain(e, &e.proxy, part, &args));
        ok(&e.cli(&args));
        let counted = e.proxy.counts();
        Inventory::read(a, &infra).assert_provisioned(a, 1, 1, name, "example.com");
        assert!(Inventory::read(&e.c, &infra).ids().is_empty(), "{part:?}: the process's own account got some");
        (killed.unwrap_or_default(), counted)
    };
    let first = world();
    let (_, clean) = run(&first, &format!("clean{tag}"), None);
    assert!(clean.contains_key("AssumeRole"), "the clean run assumed no role: {clean:?}");
    support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part)).0
    });
}

#[test]
fn every_aws_call_of_a_provision_under_a_role_killed_before_it_reaches_aws_resumes_exact_in_the_roles_account() {
    provision_under_a_role_sweep(false);
}

#[test]
fn every_aws_call_of_a_provision_under_a_role_killed_after_aws_acted_resumes_exact_in_the_roles_account() {
    provision_under_a_role_sweep(true);
}

#[test]
fn a_resume_whose_role_resolves_to_another_account_pauses_naming_both_and_changes_nothing_there() {
    let e = Env::new();
    let a = account(&e, ROLE_A);
    // An AWS where every credential acts in 333333333333: the role assumed there resolves to it.
    let elsewhere = support::moto::Moto::start_as("333333333333");
    Clients::new(&elsewhere.endpoint()).create_public_zone("example.com");
    let slow = support::proxy::Proxy::start(e.moto.port);
    slow.set_latency(Duration::from_millis(150));
    let input = e.input("p.json", provision_input("moved", "moved-abcde", ROLE_A));
    let args = ["run", "provision-infra", "--input", input.as_str(), "--id", "moved"];
    let mut first = e.spawn_cli_at(&slow.endpoint(), &args);
    e.wait_for_step("moved", "vpc", Duration::from_secs(60));
    kill9(&mut first);

    let there = support::proxy::Proxy::start(elsewhere.port);
    let out = e.cli_at(&there.endpoint(), &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("moved");
    assert_eq!(st["state"], "paused", "{st}");
    let err = st["error"].as_str().unwrap_or_default();
    assert!(err.contains("account 111111111111") && err.contains("account 333333333333"), "{err}");
    let writes: Vec<_> =
        there.counts().into_iter().filter(|(a, _)| support::chain::is_change(a) && a != "AssumeRole").collect();
    assert!(writes.is_empty(), "no mutating call in the other account: {writes:?}");
    assert_eq!(Inventory::read(&Clients::new(&elsewhere.endpoint()), "moved-abcde").total(), 0);

    // A retry there pauses again, naming both.
    let out = e.cli_at(&there.endpoint(), &["retry", "moved"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = e.s.status("moved")["error"].as_str().unwrap_or_default().to_string();
    assert!(err.contains("account 111111111111") && err.contains("account 333333333333"), "{err}");
    assert_eq!(Inventory::read(&Clients::new(&elsewhere.endpoint()), "moved-abcde").total(), 0);

    ok(&e.cli(&["retry", "moved"]));
    Inventory::read(&a, "moved-abcde").assert_provisioned(&a, 1, 1, "moved", "example.com");
}

/// F10 (SAFETY-F393541): whoever submits names the role, so a daemon acts only through the roles
/// it was told it may: without `--allow-role`, those of its own account. A workflow naming another
/// account's role pauses at its first step naming the role, and nothing is made there.
#[test]
fn a_daemon_refuses_a_role_it_was_not_allowed_and_makes_nothing_in_that_account() {
    let e = Env::new();
    let a = account(&e, ROLE_A);
    let mut daemon = e.daemon_with(&e.proxy.endpoint(), &[]);
    let input = e.input("a.json", provision_input("deputy", "deputy-abcde", ROLE_A));
    let out = e.cli(&["submit", "provision-infra", "--input", &input, "--id", "deputy"]);
    assert!(out.status.success(), "{}", stderr(&out));
    e.proxy.reset_counts();
    let st = e.s.wait_for_state("deputy", &["completed", "paused", "failed", "compensated"], Duration::from_secs(120));
    assert_eq!(st["state"], "paused", "{st}");
    assert!(st.to_string().contains("not one this daemon may act through"), "{st}");
    // No client of the refused role has credentials (SAFETY-A7937A6 G11): the hold and the
    // admission that run beside the environment check never reach STS either.
    assert_eq!(e.proxy.counts().get("AssumeRole"), None, "{:?}", e.proxy.counts());
    assert!(e.s.daemon_log().contains("roles of this daemon's own account 123456789012 only"), "said at startup");
    assert!(Inventory::read(&a, "deputy-abcde").ids().is_empty(), "nothing made in the role's account");
    terminate(&mut daemon, Duration::from_secs(30));
}

/// F11 (SAFETY-F393541): a teardown under a role is checked for protection where it will act, in
/// the role's account: a protected cluster there is refused at submit (exit 2, nothing journaled),
/// and a cluster protected only in the process's own account does not refuse it.
#[test]
fn a_teardown_under_a_role_is_refused_at_submit_when_the_cluster_is_protected_in_the_roles_account() {
    use aws_sdk_ec2::types::Tag;
    let e = Env::new();
    let a = account(&e, ROLE_A);
    let tag = |c: &Clients, vpc: &str, infra: &str| {
        let own = Tag::builder().key(format!("kubernetes.io/cluster/{infra}")).value("owned").build();
        let keep = Tag::builder().key("infraflow.io/do-not-delete").value("").build();
        c.block_on(c.ec2.create_tags().resources(vpc).tags(own).tags(keep).send()).unwrap();
    };
    let vpc = a.create_vpc("10.4.0.0/16");
    tag(&a, &vpc, "prot-abcde");
    let t = e.input("t.json", json!({"infraID": "prot-abcde", "region": "us-east-1", "roleARN": ROLE_A}));
    let out = e.cli(&["submit", "teardown", "--input", &t, "--id", "prot-a"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("protected") && stderr(&out).contains(&vpc), "{}", stderr(&out));
    assert!(e.s.cli(&["status", "prot-a"]).status.code() != Some(0), "nothing journaled");
    // Protected only in the process's own account: not where this teardown acts.
    let own = e.c.create_vpc("10.5.0.0/16");
    tag(&e.c, &own, "prot2-abcde");
    let t = e.input("t2.json", json!({"infraID": "prot2-abcde", "region": "us-east-1", "roleARN": ROLE_A}));
    let out = e.cli(&["submit", "teardown", "--input", &t, "--id", "prot-b"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A workflow pinned to a role holds its cluster's lease in the role's account: the key names
/// that account, and the record is written through the role (the bucket is the role account's;
/// the process's own account has none). Released when the run ends.
#[test]
fn a_cluster_lease_taken_under_a_role_lives_in_the_roles_account() {
    let e = Env::new();
    let a = account(&e, ROLE_A);
    a.block_on(a.s3.create_bucket().bucket("team-a-locks").send()).unwrap();
    let input = e.input("leased.json", provision_input("leased", "leased-abcde", ROLE_A));
    // Each call answered 200 ms late: the lease stands long enough to be seen.
    let slow = support::proxy::Proxy::start(e.moto.port);
    slow.set_latency(Duration::from_millis(200));
    let args = ["run", "provision-infra", "--input", input.as_str(), "--id", "leased", "--lock-bucket", "team-a-locks"];
    let mut child = e.spawn_cli_with(&slow.endpoint(), &args, &[]);
    let key = "infraflow/leases/111111111111/us-east-1/leased-abcde";
    let held = |c: &Clients| c.block_on(c.s3.head_object().bucket("team-a-locks").key(key).send()).is_ok();
    let seen = wait_until(Duration::from_secs(60), || held(&a));
    let status = child.wait().unwrap();
    assert!(seen, "the lease was never at s3://team-a-locks/{key}");
    assert!(status.success(), "{}", stderr(&e.cli(&["status", "leased"])));
    assert!(!held(&a), "released when the run ended");
    Inventory::read(&a, "leased-abcde").assert_provisioned(&a, 1, 1, "leased", "example.com");
    let own = e.c.block_on(e.c.s3.list_buckets().send()).unwrap();
    assert!(
        !own.buckets().iter().any(|b| b.name() == Some("team-a-locks")),
        "the bucket is the role account's, not the process's"
    );
}
