//! `create-iam` and the IAM half of `teardown` on moto: the OIDC provider, the seven operator
//! roles with HyperShift's current grants (and the KMS provider's, given a key), the worker role and its instance profile — exactly one of
//! each, again after a kill at any IAM call; a name held by something else refused and left as it
//! is; a rollback that removes exactly what the run made; a teardown that removes the cluster's
//! IAM and nothing of another cluster named alike.

mod support;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::iam_state::IamState;
use support::proxy::Proxy;
use support::sweep::Part;
use support::*;

use support::iam_state::ROLES;

fn iam_input(infra: &str) -> Value {
    json!({
        "infraID": infra,
        "region": "us-east-1",
        "oidcBucket": "oidc-store",
        "publicZoneID": "ZPUBLIC1",
        "privateZoneID": "ZPRIVATE1",
        "localZoneID": "ZLOCAL1",
        "kmsKeyARN": KMS_KEY,
        "additionalTags": {"team": "sre"}
    })
}

/// The key etcd is encrypted with: create-iam makes HyperShift's KMS provider role for it (a
/// role more, and the sweeps below kill at its calls too).
const KMS_KEY: &str = "arn:aws:kms:us-east-1:123456789012:key/0b1c2d3e-etcd";

fn expected_policy(file: &str) -> Value {
    support::iam_state::expected_policy(file, support::iam_state::Grants::Current)
}

/// One provider, the eight roles with their policies and trust (nine with the KMS provider's,
/// given a key), one profile holding the worker role, every one tagged as the cluster's; the
/// output names them all.
fn assert_cluster_iam(c: &support::moto::Clients, infra: &str, out: &Value) {
    let s = IamState::read(c, infra);
    let issuer_path = format!("oidc-store.s3.us-east-1.amazonaws.com/{infra}");
    assert_eq!(s.providers.len(), 1, "{}", s.summary());
    let (provider_arn, _) = s.providers.iter().next().unwrap();
    assert!(provider_arn.ends_with(&format!(":oidc-provider/{issuer_path}")), "{provider_arn}");
    let kms = out["kmsKeyARN"].as_str().unwrap();
    assert_eq!(s.roles.len(), if kms.is_empty() { 8 } else { 9 }, "{}", s.summary());
    if kms.is_empty() {
        assert_eq!(out["kmsProviderRoleARN"], "", "{out}");
    } else {
        let role = &s.roles[&format!("{infra}-kms-provider")];
        assert_eq!(out["kmsProviderRoleARN"], role.arn);
        let policy = &role.policies[&format!("{infra}-kms-provider")];
        assert_eq!(policy["Statement"][0]["Resource"], kms, "the policy names the one key");
        assert!(policy["Statement"][0]["Action"].to_string().contains("kms:Decrypt"), "{policy}");
        let subject = &role.trust["Statement"][0]["Condition"]["StringEquals"][format!("{issuer_path}:sub")];
        assert_eq!(subject, "system:serviceaccount:kube-system:kms-provider");
        assert_eq!(role.trust["Statement"][0]["Principal"]["Federated"], *provider_arn);
    }
    for (field, suffix, file) in ROLES {
        let name = format!("{infra}-{suffix}");
        let role = s.roles.get(&name).unwrap_or_else(|| panic!("no role {name}: {}", s.summary()));
        assert_eq!(out["roles"][field], role.arn, "{field}");
        assert_eq!(role.policies.len(), 1, "{name}: one inline policy, named as the role");
        assert_eq!(role.policies[&name], expected_policy(file), "{name}'s policy is HyperShift's");
        let st = &role.trust["Statement"][0];
        assert_eq!(st["Action"], "sts:AssumeRoleWithWebIdentity", "{name}");
        assert_eq!(st["Principal"]["Federated"], *provider_arn, "{name}");
        let subject = &st["Condition"]["StringEquals"][format!("{issuer_path}:sub")];
        assert!(subject.to_string().contains("system:serviceaccount:"), "{name}: {}", role.trust);
        assert_eq!(role.tags.get(&format!("kubernetes.io/cluster/{infra}")).map(String::as_str), Some("owned"));
        assert_eq!(role.tags.get("team").map(String::as_str), Some("sre"), "additional tags: {:?}", role.tags);
    }
    let worker = &s.roles[&format!("{infra}-worker-role")];
    assert_eq!(worker.policies[&format!("{infra}-worker-policy")], expected_policy("worker"));
    assert_eq!(worker.trust["Statement"][0]["Principal"]["Service"], "ec2.amazonaws.com");
    assert_eq!(s.profiles.len(), 1, "{}", s.summary());
    assert_eq!(s.profiles[&format!("{infra}-worker")].1, [format!("{infra}-worker-role")]);
    assert_eq!(out["profileName"], format!("{infra}-worker"));
    assert_eq!(out["issuerURL"], format!("https://{issuer_path}"));
    assert_eq!((out["infraID"].as_str(), out["region"].as_str()), (Some(infra), Some("us-east-1")));
    assert_eq!(out["roles"].as_object().unwrap().len(), 7, "{out}");
    support::hypershift::assert_output_keys(out, "create-iam-output.keys", &["oidcProviderARN"]);
    for (name, role) in &s.roles {
        let tag = |k: &str| role.tags.get(k).map(String::as_str);
        assert_eq!(tag("hypershift.openshift.io/infra-id"), Some(infra), "{name}: {:?}", role.tags);
        assert_eq!(tag("hypershift.openshift.io/source"), None, "{name}: infraflow is not HyperShift's CLI");
    }
}

fn creates(proxy: &Proxy) -> BTreeMap<String, u32> {
    proxy.counts().into_iter().filter(|(a, _)| a.starts_with("Create") || a.starts_with("Add")).collect()
}

#[test]
fn create_iam_makes_one_provider_nine_roles_with_hypershifts_policies_and_one_profile_and_a_rerun_makes_none() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    let input = e.input("ci.json", iam_input("ci-abcde"));
    let out = ok(&e.cli_at(&proxy.endpoint(), &["run", "create-iam", "--input", &input, "--id", "ci"]));
    assert_cluster_iam(&e.c, "ci-abcde", &out);
    let made = creates(&proxy);
    assert_eq!(made.get("CreateRole"), Some(&9), "{made:?}");

    // The same cluster again, by another workflow: everything found, nothing made. (Under strict
    // AWS, once IAM shows what was just made: before that a create answers EntityAlreadyExists,
    // which makes nothing but is still a create call.)
    if let Some(lag) = support::strict::Strict::from_env().and_then(|s| s.iam_lag) {
        std::thread::sleep(lag);
    }
    proxy.reset_counts();
    let again = ok(&e.cli_at(&proxy.endpoint(), &["run", "create-iam", "--input", &input, "--id", "ci-again"]));
    assert_eq!(creates(&proxy), BTreeMap::new(), "a re-run creates nothing");
    assert_eq!(again["roles"], out["roles"]);
    assert_cluster_iam(&e.c, "ci-abcde", &again);
}

#[test]
fn a_foreign_role_named_like_a_cluster_role_is_refused_untouched_and_only_what_the_run_made_is_rolled_back() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    // Someone else's role with the name of the fifth role create-iam makes.
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    e.c.block_on(e.c.iam.create_role().role_name("cf-abcde-node-pool").assume_role_policy_document(trust).send())
        .unwrap();
    let input = e.input("cf.json", iam_input("cf-abcde"));
    let run = e.cli_at(&proxy.endpoint(), &["run", "create-iam", "--input", &input, "--id", "cf"]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let err = stderr(&run);
    assert!(err.contains("cf-abcde-node-pool") && err.contains("is not cluster cf-abcde's"), "{err}");
    assert_eq!(e.s.status("cf")["state"], "compensated");
    assert_eq!(creates(&proxy).get("CreateRole"), Some(&4), "four roles made before the refusal");
    let s = IamState::read(&e.c, "cf-abcde");
    assert_eq!(s.roles.keys().collect::<Vec<_>>(), ["cf-abcde-node-pool"], "the four made are gone: {}", s.summary());
    let foreign = &s.roles["cf-abcde-node-pool"];
    assert!(foreign.tags.is_empty() && foreign.policies.is_empty(), "untouched: {foreign:?}");
    assert_eq!(foreign.trust, support::iam_state::policy_json(trust));
    assert!(s.providers.is_empty(), "the provider the run made is gone: {}", s.summary());
}

#[test]
fn teardown_removes_the_clusters_iam_and_nothing_of_a_cluster_whose_infra_id_extends_it() {
    let e = Env::new();
    let mine = e.input("td.json", iam_input("td-abcde"));
    ok(&e.cli(&["run", "create-iam", "--input", &mine, "--id", "td"]));
    // Its roles are named td-abcde-x-…: they start with this cluster's prefix.
    let theirs = e.input("tdx.json", iam_input("td-abcde-x"));
    let other = ok(&e.cli(&["run", "create-iam", "--input", &theirs, "--id", "tdx"]));
    let td = e.input("teardown.json", json!({"infraID": "td-abcde", "region": "us-east-1"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &td, "--dry-run", "--json"]));
    let planned: Vec<&str> = plan["delete"].as_array().unwrap().iter().filter_map(|p| p["id"].as_str()).collect();
    assert_eq!(planned.len(), 11, "provider, nine roles, profile: {planned:?}");
    assert!(planned.iter().all(|id| !id.contains("td-abcde-x")), "{planned:?}");
    ok(&e.cli(&["run", "teardown", "--input", &td]));
    let left = IamState::read(&e.c, "td-abcde");
    let owned = |tags: &BTreeMap<String, String>| tags.contains_key("kubernetes.io/cluster/td-abcde");
    assert!(!left.roles.values().any(|r| owned(&r.tags)), "{}", left.summary());
    assert!(!left.providers.values().any(owned) && !left.profiles.values().any(|(t, _)| owned(t)));
    assert_cluster_iam(&e.c, "td-abcde-x", &other);
}

/// A world of its own for a kill-at-every-call sweep: moto, a journal, and the proxy that kills.
fn world() -> (Env, Proxy) {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    (e, proxy)
}

/// SIGKILL at every AWS call of create-iam — before the call reaches AWS, or after AWS acted but
/// before the answer arrives — each kill's resume killed at the next call (`sweep::chain`): the
/// run that finishes leaves exactly one of everything.
fn iam_sweep(after_aws_acts: bool) {
    let tag = if after_aws_acts { "a" } else { "b" };
    let run = |(e, proxy): &(Env, Proxy), name: &str, part: Option<&Part>| {
        let infra = format!("{name}-abcde");
        let input = e.input(&format!("{name}.json"), iam_input(&infra));
        let args = ["run", "create-iam", "--input", input.as_str(), "--id", name];
        let killed = part.map(|part| support::sweep::chain(e, proxy, part, &args));
        let out = ok(&e.cli_at(&proxy.endpoint(), &args));
        assert_cluster_iam(&e.c, &infra, &out);
        killed.unwrap_or_default()
    };
    let first = world();
    first.1.reset_counts();
    run(&first, &format!("clean{tag}"), None);
    let clean = first.1.counts();
    let calls: u32 = clean.values().sum();
    assert!(calls > 20, "create-iam makes dozens of calls, counted {calls}");
    support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part))
    });
    eprintln!("create-iam: killed at each of {calls} calls ({tag}): every run resumed to exactly one of everything");
}

#[test]
fn create_iam_killed_at_every_aws_call_before_it_reaches_aws_resumes_exactly() {
    iam_sweep(false);
}

#[test]
fn create_iam_killed_at_every_aws_call_after_aws_acted_resumes_exactly() {
    iam_sweep(true);
}

/// The cluster's live instances (not terminated), each with its instance profile's ARN.
fn instance_profiles(e: &Env, infra: &str) -> Vec<String> {
    let key = format!("kubernetes.io/cluster/{infra}");
    let out = e.c.block_on(e.c.ec2.describe_instances().send()).unwrap();
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.tags().iter().any(|t| t.key() == Some(key.as_str())))
        .filter(|i| {
            !matches!(i.state().and_then(|s| s.name()).map(|n| n.as_str()), Some("terminated" | "shutting-down"))
        })
        .map(|i| i.iam_instance_profile().and_then(|p| p.arn()).unwrap_or("none").to_string())
        .collect()
}

/// create-cluster with `iam`: its nodes launch with the worker profile made moments before —
/// which AWS refuses for a few seconds (strict: IAM's propagation delay), so the launch is
/// retried in place, one instance per node — and teardown leaves no IAM of the cluster.
#[test]
fn create_cluster_with_iam_launches_nodes_with_the_new_worker_profile_and_teardown_removes_its_iam() {
    let e = Env::new();
    let proxy = Proxy::start(e.moto.port);
    let strict = support::strict::Strict::from_env().unwrap_or_default();
    proxy.set_strict(support::strict::Strict { iam_lag: Some(std::time::Duration::from_secs(3)), ..strict });
    let input = e.input(
        "ic.json",
        json!({
            "infra": {"name": "ic", "infraID": "ic-abcde", "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"},
            "nodePool": {"replicas": 2, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"},
            "iam": {"oidcBucket": "oidc-store"}
        }),
    );
    let out = ok(&e.cli_at(&proxy.endpoint(), &["run", "create-cluster", "--input", &input, "--id", "ic"]));
    let effects = proxy.strict_effects();
    assert!(effects.get("iam-not-yet-propagated").is_some_and(|n| *n >= 1), "the delay was met: {effects:?}");
    assert_eq!(proxy.counts().get("CreateInstanceProfile"), Some(&1));
    let profiles = instance_profiles(&e, "ic-abcde");
    assert_eq!(profiles.len(), 2, "one instance per node: {profiles:?}");
    assert!(profiles.iter().all(|p| p.ends_with(":instance-profile/ic-abcde-worker")), "{profiles:?}");
    assert_eq!(out["iam"]["profileName"], "ic-abcde-worker");
    let s = IamState::read(&e.c, "ic-abcde");
    assert_eq!((s.providers.len(), s.roles.len(), s.profiles.len()), (1, 8, 1), "{}", s.summary());

    let td = e.input("td.json", json!({"infraID": "ic-abcde", "region": "us-east-1"}));
    ok(&e.cli_at(&proxy.endpoint(), &["run", "teardown", "--input", &td]));
    let left = IamState::read(&e.c, "ic-abcde");
    assert_eq!(left.total(), 0, "{}", left.summary());
    assert!(instance_profiles(&e, "ic-abcde").is_empty());
    assert_eq!(support::inventory::Inventory::read(&e.c, "ic-abcde").total(), 0);
}

/// SIGKILL at every AWS call of a teardown of a cluster's IAM — before the call reaches AWS, or
/// after AWS acted (a role deleted) but before the answer arrives — each kill's resume killed at
/// the next call (`sweep::chain`): nothing of the cluster's IAM left, and nothing of a bystander
/// cluster touched.
fn iam_teardown_sweep(after_aws_acts: bool) {
    let tag = if after_aws_acts { "a" } else { "b" };
    // Each world has a bystander cluster, checked whole once the sweep is done.
    let world = || {
        let (e, proxy) = world();
        let bystander = e.input("by.json", iam_input("by-abcde"));
        let kept = ok(&e.cli(&["run", "create-iam", "--input", &bystander, "--id", "by"]));
        // moto builds its EC2 state on the first EC2 request (seconds of CPU, AWS has no such
        // cost): made here, once, not by a teardown's two dozen side-by-side first reads, which
        // on a loaded two-core machine waited past the proxy's 60 s read timeout.
        e.c.block_on(e.c.ec2.describe_availability_zones().send()).unwrap();
        e.c.block_on(e.c.ec2.describe_vpcs().send()).unwrap();
        (e, proxy, kept)
    };
    let run = |(e, proxy, _): &(Env, Proxy, Value), name: &str, part: Option<&Part>| {
        let infra = format!("{name}-abcde");
        let input = e.input(&format!("{name}.json"), iam_input(&infra));
        // What the teardown finds, made straight on moto: the sweep checks the teardown, and
        // create-iam's calls are checked against its policies by its own sweep's clean run.
        ok(&e.cli_at(&e.moto.endpoint(), &["run", "create-iam", "--input", &input, "--id", &format!("{name}-iam")]));
        let td = e.input(&format!("{name}-td.json"), json!({"infraID": infra, "region": "us-east-1"}));
        let args = ["run", "teardown", "--input", td.as_str(), "--id", name];
        let killed = part.map(|part| support::sweep::chain(e, proxy, part, &args));
        ok(&e.cli_at(&proxy.endpoint(), &args));
        let left = IamState::read(&e.c, &infra);
        assert_eq!(left.total(), 0, "{part:?}: {}", left.summary());
        killed.unwrap_or_default()
    };
    let first = world();
    first.1.reset_counts();
    run(&first, &format!("clean{tag}"), None);
    let clean = first.1.counts();
    let calls: u32 = clean.values().sum();
    assert!(calls > 30, "a teardown of IAM makes dozens of calls, counted {calls}");
    let worlds = support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part))
    });
    for (e, _, kept) in &worlds {
        assert_cluster_iam(&e.c, "by-abcde", kept);
    }
    eprintln!("teardown of IAM: killed at each of {calls} calls ({tag}): nothing left, the bystander whole");
}

#[test]
fn a_teardown_of_iam_killed_at_every_aws_call_before_it_reaches_aws_resumes_to_nothing_left() {
    iam_teardown_sweep(false);
}

#[test]
fn a_teardown_of_iam_killed_at_every_aws_call_after_aws_acted_resumes_to_nothing_left() {
    iam_teardown_sweep(true);
}

#[test]
fn bad_create_iam_inputs_exit_2_with_one_line_naming_the_field_and_change_nothing() {
    let s = Scratch::new();
    let good = iam_input("bad-abcde");
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut v = good.clone();
    v.as_object_mut().unwrap().remove("oidcBucket");
    cases.push((v, "oidcBucket"));
    let mut v = good.clone();
    v["issuerURL"] = json!("https://issuer.example.com/x");
    cases.push((v, "issuerURL"));
    let mut v = good.clone();
    v["infraID"] = json!("a".repeat(33));
    cases.push((v, "infraID"));
    let mut v = good.clone();
    v["thumbprint"] = json!("abc");
    cases.push((v, "thumbprint"));
    let mut v = good.clone();
    v.as_object_mut().unwrap().remove("privateZoneID");
    cases.push((v, "privateZoneID"));
    let mut v = good.clone();
    v["additionalTags"] = json!({"kubernetes.io/cluster/other": "owned"});
    cases.push((v, "additionalTags"));
    let mut v = good.clone();
    v["oidcBucket"] = json!("Not_A_Bucket");
    cases.push((v, "oidcBucket"));
    let mut v = good.clone();
    v["kmsKeyARN"] = json!("arn:aws:kms:us-east-1:123456789012:alias/etcd");
    cases.push((v, "kmsKeyARN"));
    let mut v = json!({"infra": {"name": "c", "region": "us-east-1", "baseDomain": "example.com"},
                       "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"},
                       "iam": {}});
    cases.push((v.clone(), "iam.oidcBucket"));
    v["iam"] = json!({"oidcBucket": "b", "thumbprint": "x"});
    cases.push((v, "iam."));
    for (v, expect) in cases {
        let workflow = if v.get("infra").is_some() { "create-cluster" } else { "create-iam" };
        let path = s.write_json("bad.json", &v);
        let out = s.cli(&["submit", workflow, "--input", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{v}: {}", stderr(&out));
        assert!(stderr(&out).contains(expect) && stderr(&out).lines().count() == 1, "{expect}: {}", stderr(&out));
    }
    assert!(!s.db().exists(), "nothing submitted");
}

/// Someone put their role into the cluster's worker profile: the next create-iam pauses naming it
/// (taking it out is theirs to do), deletes nothing, and `retry` finishes once it is out.
#[test]
fn a_worker_profile_holding_another_role_pauses_and_retry_finishes_once_it_is_out() {
    let e = Env::new();
    let input = e.input("wp.json", iam_input("wp-abcde"));
    ok(&e.cli(&["run", "create-iam", "--input", &input, "--id", "wp"]));
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    let iam = &e.c.iam;
    e.c.block_on(iam.create_role().role_name("someone-else").assume_role_policy_document(trust).send()).unwrap();
    let profile = || iam.remove_role_from_instance_profile().instance_profile_name("wp-abcde-worker");
    e.c.block_on(profile().role_name("wp-abcde-worker-role").send()).unwrap();
    let add = iam.add_role_to_instance_profile().instance_profile_name("wp-abcde-worker").role_name("someone-else");
    e.c.block_on(add.send()).unwrap();
    let run = e.cli(&["run", "create-iam", "--input", &input, "--id", "wp-again"]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    let st = e.s.status("wp-again");
    assert_eq!(st["state"], "paused", "{st}");
    assert!(st.to_string().contains("holds role someone-else"), "{st}");
    assert!(!st.to_string().contains("credentials"), "not blamed on credentials: {st}");
    assert_eq!(IamState::read(&e.c, "wp-abcde").roles.len(), 9, "nothing of the cluster deleted");
    e.c.block_on(profile().role_name("someone-else").send()).unwrap();
    ok(&e.cli(&["retry", "wp-again"]));
    let s = IamState::read(&e.c, "wp-abcde");
    assert_eq!(s.profiles["wp-abcde-worker"].1, ["wp-abcde-worker-role"]);
}

/// SAFETY-A7937A6 G12: the same resumed teardown, but the role is made again *with the
/// cluster's tags* (a cluster of that infraID made anew meanwhile): tags cannot tell it from the
/// one discovery found, IAM's RoleId can. The resumed round leaves it and pauses naming it,
/// never deleting silently; `retry` (the operator's word that it goes too) deletes it.
#[test]
fn a_resumed_teardown_pauses_on_a_role_made_again_with_the_clusters_tags_since_it_was_found() {
    use aws_sdk_iam::types::Tag;
    let e = Env::new();
    let (before, reused, args) = teardown_killed_after_discovery_with_a_role_deleted(&e, "ra");
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    let tags: Vec<Tag> =
        before.roles[&reused].tags.iter().map(|(k, v)| Tag::builder().key(k).value(v).build().unwrap()).collect();
    let iam = &e.c.iam;
    let remade = iam.create_role().role_name(&reused).assume_role_policy_document(trust).set_tags(Some(tags));
    let remade = e.c.block_on(remade.send()).unwrap().role.unwrap().role_id;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let resumed = e.cli(&args);
    assert_eq!(resumed.status.code(), Some(1), "{}", stderr(&resumed));
    let st = e.s.status("ra-down");
    assert_eq!(st["state"], "paused", "{st}");
    assert!(st.to_string().contains(&format!("{reused} was deleted and made again")), "{st}");
    let left = IamState::read(&e.c, "ra-abcde");
    assert!(left.roles.contains_key(&reused), "the re-made {reused} was deleted: {}", left.summary());
    let now = e.c.block_on(iam.get_role().role_name(&reused).send()).unwrap().role.unwrap().role_id;
    assert_eq!(now, remade, "the role there is the one made anew");
    ok(&e.cli(&["retry", "ra-down"]));
    assert_eq!(IamState::read(&e.c, "ra-abcde").total(), 0, "retried: the cluster's IAM is gone");
}

/// `infraflow policy --infra-id mine-abcde create-cluster teardown` against calls sent through
/// the proxy, as IAM would evaluate them: on the cluster's own resources, allowed; on another
/// cluster's (a delete, a subnet in its VPC, a create carrying its tag, its role), refused.
#[test]
fn the_scoped_policy_allows_the_clusters_own_calls_and_refuses_each_on_another_clusters_resources() {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    let e = Env::new();
    let owned = |infra: &str| Tag::builder().key(format!("kubernetes.io/cluster/{infra}")).value("owned").build();
    let spec =
        |kind: ResourceType, infra: &str| TagSpecification::builder().resource_type(kind).tags(owned(infra)).build();
    let vpc_of = |infra: &str| {
        let out = e.c.block_on(
            e.c.ec2.create_vpc().cidr_block("10.9.0.0/16").tag_specifications(spec(ResourceType::Vpc, infra)).send(),
        );
        out.unwrap().vpc().unwrap().vpc_id().unwrap().to_string()
    };
    let (mine, theirs, theirs_too) = (vpc_of("mine-abcde"), vpc_of("theirs-abcde"), vpc_of("theirs-abcde"));
    let role = |name: &str, infra: &str| {
        let tag = aws_sdk_iam::types::Tag::builder()
            .key(format!("kubernetes.io/cluster/{infra}"))
            .value("owned")
            .build()
            .unwrap();
        e.c.block_on(e.c.iam.create_role().role_name(name).assume_role_policy_document("{}").tags(tag).send()).unwrap();
    };
    role("mine-abcde-worker-role", "mine-abcde");
    role("theirs-abcde-worker-role", "theirs-abcde");
    role("mine-abcde-impostor", "theirs-abcde");

    let via = support::moto::Clients::new(&e.proxy.endpoint());
    let calls = |send: &dyn Fn()| {
        assert!(support::proxy::start_authz_at(&e.proxy.endpoint()));
        send();
        support::proxy::finish_authz_at(&e.proxy.endpoint()).unwrap()
    };
    let policy = support::iam::policy_document(&["--infra-id", "mine-abcde", "create-cluster", "teardown"]);
    let verdict = |what: &str, send: &dyn Fn()| -> Result<(), String> {
        let recorded = calls(send);
        assert!(!recorded.is_empty(), "{what}: no call recorded");
        for a in &recorded {
            support::authz::verdict(&policy, a).map_err(|why| format!("{what}: {why}"))?;
        }
        Ok(())
    };
    let allowed = |what: &str, send: &dyn Fn()| verdict(what, send).unwrap();
    let refused = |what: &str, send: &dyn Fn()| {
        verdict(what, send).expect_err(what);
    };

    use aws_sdk_ec2::types::AttributeBooleanValue as B;
    allowed("a modification of the cluster's VPC", &|| {
        via.block_on(
            via.ec2.modify_vpc_attribute().vpc_id(&mine).enable_dns_support(B::builder().value(true).build()).send(),
        )
        .unwrap();
    });
    allowed("a subnet created in the cluster's VPC, tagged as the cluster's", &|| {
        via.block_on(
            via.ec2
                .create_subnet()
                .vpc_id(&mine)
                .cidr_block("10.9.1.0/24")
                .tag_specifications(spec(ResourceType::Subnet, "mine-abcde"))
                .send(),
        )
        .unwrap();
    });
    refused("a subnet created in another cluster's VPC", &|| {
        let _ = via.block_on(
            via.ec2
                .create_subnet()
                .vpc_id(&theirs)
                .cidr_block("10.9.2.0/24")
                .tag_specifications(spec(ResourceType::Subnet, "mine-abcde"))
                .send(),
        );
    });
    refused("a VPC created with another cluster's tag", &|| {
        let _ = via.block_on(
            via.ec2
                .create_vpc()
                .cidr_block("10.8.0.0/16")
                .tag_specifications(spec(ResourceType::Vpc, "theirs-abcde"))
                .send(),
        );
    });
    refused("a VPC created without the tag", &|| {
        let _ = via.block_on(via.ec2.create_vpc().cidr_block("10.7.0.0/16").send());
    });
    refused("a tag added to another cluster's VPC", &|| {
        let _ = via.block_on(via.ec2.create_tags().resources(&theirs_too).tags(owned("mine-abcde")).send());
    });
    refused("another cluster's role deleted", &|| {
        let _ = via.block_on(via.iam.delete_role().role_name("theirs-abcde-worker-role").send());
    });
    refused("a role named like the cluster's but tagged as another's, deleted", &|| {
        let _ = via.block_on(via.iam.delete_role().role_name("mine-abcde-impostor").send());
    });
    allowed("the cluster's own role deleted", &|| {
        via.block_on(via.iam.delete_role().role_name("mine-abcde-worker-role").send()).unwrap();
    });
    refused("another cluster's VPC deleted", &|| {
        let _ = via.block_on(via.ec2.delete_vpc().vpc_id(&theirs).send());
    });
}

/// SAFETY-F393541 F13: a teardown resumed after its discovery deletes the inventory it journaled,
/// by name — and IAM names are reused. A role of that inventory deleted and made again meanwhile
/// by someone else (untagged: theirs now) is read again before its delete and left; the rest of
/// the cluster's IAM goes.
#[test]
fn a_resumed_teardown_leaves_a_role_of_its_inventory_that_someone_else_made_anew_since() {
    let e = Env::new();
    let (_, reused, args) = teardown_killed_after_discovery_with_a_role_deleted(&e, "rn");
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    e.c.block_on(e.c.iam.create_role().role_name(&reused).assume_role_policy_document(trust).send()).unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ok(&e.cli(&args));
    let left = IamState::read(&e.c, "rn-abcde");
    let theirs = left.roles.get(&reused).unwrap_or_else(|| panic!("the re-made {reused} was deleted: {out}"));
    assert!(theirs.tags.is_empty(), "{}", left.summary());
    assert_eq!(left.total(), 1, "the cluster's other IAM is gone: {}", left.summary());
}

/// The cluster `<short>-abcde`'s IAM made by create-iam, and its teardown (`<short>-down`) killed
/// at the instance profile's first delete call: discovery is journaled, the roles (deleted after
/// the profile) not yet touched. Then a role outside the profile is deleted, as whoever makes it
/// again would first. The IAM before, that role's name, and the teardown's arguments.
fn teardown_killed_after_discovery_with_a_role_deleted(e: &Env, short: &str) -> (IamState, String, Vec<String>) {
    let infra = format!("{short}-abcde");
    let input = e.input(&format!("{short}.json"), iam_input(&infra));
    ok(&e.cli(&["run", "create-iam", "--input", &input, "--id", short]));
    let before = IamState::read(&e.c, &infra);
    let in_profiles: Vec<&String> = before.profiles.values().flat_map(|(_, roles)| roles).collect();
    let reused = before.roles.keys().find(|r| !in_profiles.contains(r)).expect("a role outside the profile").clone();
    let td = e.input(&format!("{short}-down.json"), json!({"infraID": infra, "region": "us-east-1"}));
    let id = format!("{short}-down");
    let args: Vec<String> =
        ["run", "teardown", "--input", td.as_str(), "--id", id.as_str()].map(str::to_string).to_vec();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = e.spawn_cli_at(&e.proxy.endpoint(), &refs);
    e.proxy.kill_at_action(
        "RemoveRoleFromInstanceProfile",
        support::proxy::KillAt { call: 0, after_aws_acts: false, pid: child.id() },
    );
    let status = child.wait().unwrap();
    assert!(e.proxy.action_kill_fired() && !status.success(), "{status:?}");
    let iam = &e.c.iam;
    let policies = e.c.block_on(iam.list_role_policies().role_name(&reused).send()).unwrap();
    for p in policies.policy_names() {
        e.c.block_on(iam.delete_role_policy().role_name(&reused).policy_name(p).send()).unwrap();
    }
    e.c.block_on(iam.delete_role().role_name(&reused).send()).unwrap();
    (before, reused, args)
}
