//! The management side made in one command (`create-management`) and gone only by its own teardown: the OIDC bucket with
//! public read of its objects, the public zone when missing, the HyperShift operator's three
//! roles trusting the management cluster's provider; made twice, nothing is made twice.

mod support;

use serde_json::json;
use support::aws::{AwsEnv as Env, ok};
use support::chain::Kills;
use support::proxy::{KillAt, Proxy};
use support::sweep::Part;

#[test]
fn the_management_side_made_twice_makes_nothing_twice() {
    let e = Env::new();
    let issuer = "https://oidc.mgmt.example.com/cluster";
    e.c.block_on(
        e.c.iam
            .create_open_id_connect_provider()
            .url(issuer)
            .client_id_list("sts.amazonaws.com")
            .thumbprint_list("a9d53002e97e00e043244f3d170d6f4c414104fd")
            .send(),
    )
    .unwrap();
    let input = e.input(
        "m.json",
        json!({"region": "us-east-1", "oidcBucket": "mgmt-oidc", "baseDomain": "mgmt.example.com", "oidcIssuerURL": issuer}),
    );
    e.proxy.reset_counts();
    let first = ok(&e.cli(&["run", "create-management", "--input", &input, "--id", "m1"]));
    let second = ok(&e.cli(&["run", "create-management", "--input", &input, "--id", "m2"]));
    assert_eq!(first, second, "the same management side");
    let counts = e.proxy.counts();
    // Made once each (a role just made is not readable yet on AWS: the second run's CreateRole
    // is answered EntityAlreadyExists, and counts no role).
    for (action, n) in [("CreateBucket", 1), ("route53 POST /hostedzone", 1)] {
        assert_eq!(counts.get(action), Some(&n), "{action}: {counts:?}");
    }
    assert_eq!(management_left(&e, "hypershift", "mgmt-oidc", "mgmt.example.com"), (3, true, 1));
    assert!(first["operatorEC2RoleARN"].as_str().unwrap().ends_with(":role/hypershift-operator-ec2"), "{first}");
    let policy = e.c.block_on(e.c.s3.get_bucket_policy().bucket("mgmt-oidc").send()).unwrap();
    assert!(policy.policy().unwrap_or_default().contains("s3:GetObject"));
}

/// The management side goes only by its own teardown, and only once no cluster uses it: a
/// bucket holding a cluster's documents pauses it; emptied, the bucket, the zone it made and the
/// roles go.
#[test]
fn the_management_side_goes_by_its_own_teardown_once_no_cluster_uses_it() {
    let e = Env::new();
    let input = e.input(
        "m.json",
        json!({"region": "us-east-1", "oidcBucket": "mgmt-oidc2", "baseDomain": "mgmt2.example.com",
               "instanceRoleARN": "arn:aws:iam::123456789012:role/mgmt-nodes"}),
    );
    ok(&e.cli(&["run", "create-management", "--input", &input, "--id", "m1"]));
    let doc = aws_sdk_s3::primitives::ByteStream::from(b"{}".to_vec());
    e.c.block_on(e.c.s3.put_object().bucket("mgmt-oidc2").key("c1-abcde/openid/v1/jwks").body(doc).send()).unwrap();
    let out = e.cli(&["run", "teardown-management", "--input", &input, "--id", "md"]);
    assert_ne!(out.status.code(), Some(0));
    let st = e.s.status("md");
    assert!(st["error"].as_str().is_some_and(|w| w.contains("mgmt-oidc2") && w.contains("c1-abcde")), "{st}");
    // Nothing of it goes while a cluster uses it: the operator's roles are what would clean up.
    assert_eq!(
        management_left(&e, "hypershift", "mgmt-oidc2", "mgmt2.example.com"),
        (3, true, 1),
        "deleted while used"
    );
    e.c.block_on(e.c.s3.delete_object().bucket("mgmt-oidc2").key("c1-abcde/openid/v1/jwks").send()).unwrap();
    ok(&e.cli(&["retry", "md"]));
    let done = e.s.status("md");
    assert_eq!(done["state"], "completed", "{done}");
    let roles = e.c.block_on(e.c.iam.list_roles().send()).unwrap();
    assert!(!roles.roles().iter().any(|r| r.role_name().starts_with("hypershift-")), "a role left");
    assert!(e.c.block_on(e.c.s3.head_bucket().bucket("mgmt-oidc2").send()).is_err(), "the bucket left");
}

/// The roles, bucket and zone a management side named `prefix` has in a world.
fn management_left(e: &Env, prefix: &str, bucket: &str, domain: &str) -> (usize, bool, usize) {
    let roles = e.c.block_on(e.c.iam.list_roles().send()).unwrap();
    let roles = roles.roles().iter().filter(|r| r.role_name().starts_with(&format!("{prefix}-"))).count();
    let bucket = e.c.block_on(e.c.s3.head_bucket().bucket(bucket).send()).is_ok();
    let zones = e.c.block_on(e.c.r53.list_hosted_zones().send()).unwrap();
    let zones = zones.hosted_zones().iter().filter(|z| z.name().trim_end_matches('.') == domain).count();
    (roles, bucket, zones)
}

/// SIGKILL at every AWS call of `create-management` and then of `teardown-management` (before the
/// call reaches AWS, or after AWS acted), each kill's resume killed at the next call: the
/// create converges to three roles, one bucket and one zone, the teardown to none of them.
fn management_killed_at_every_call(after_aws_acts: bool) {
    let tag = if after_aws_acts { "a" } else { "b" };
    let world = || {
        let e = Env::new();
        let proxy = Proxy::start(e.moto.port);
        (e, proxy)
    };
    let run = |(e, proxy): &(Env, Proxy), name: &str, part: Option<&Part>| {
        let (bucket, domain) = (format!("{name}-oidc"), format!("{name}.mgmt.example.com"));
        let input = e.input(
            &format!("{name}.json"),
            json!({"region": "us-east-1", "oidcBucket": bucket, "baseDomain": domain, "namePrefix": name,
                   "instanceRoleARN": "arn:aws:iam::123456789012:role/mgmt-nodes"}),
        );
        let (create, down) = (format!("{name}-c"), format!("{name}-d"));
        let create = ["run", "create-management", "--input", input.as_str(), "--id", create.as_str()];
        let down = ["run", "teardown-management", "--input", input.as_str(), "--id", down.as_str()];
        let mut kills = Kills::default();
        let mut chained = |args: &[&str]| {
            if let Some(part) = part {
                let k = support::sweep::chain(e, proxy, part, args);
                kills.called.extend(k.called);
                for (action, n) in k.killed {
                    *kills.killed.entry(action).or_insert(0) += n;
                }
            }
            ok(&e.cli_at(&proxy.endpoint(), args))
        };
        let made = chained(&create);
        assert!(
            made["externalDNSRoleARN"].as_str().is_some_and(|a| a.ends_with(&format!("{name}-external-dns"))),
            "{made}"
        );
        assert_eq!(management_left(e, name, &bucket, &domain), (3, true, 1), "made once each: {part:?}");
        chained(&down);
        assert_eq!(management_left(e, name, &bucket, &domain), (0, false, 0), "all gone: {part:?}");
        kills
    };
    let first = world();
    first.1.reset_counts();
    run(&first, &format!("clean{tag}"), None);
    let clean = first.1.counts();
    assert!(clean.contains_key("CreateRole") && clean.contains_key("DeleteBucket"), "{clean:?}");
    support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part))
    });
}

#[test]
fn the_management_side_killed_at_every_aws_call_before_it_reaches_aws_converges() {
    management_killed_at_every_call(false);
}

#[test]
fn the_management_side_killed_at_every_aws_call_after_aws_acted_converges() {
    management_killed_at_every_call(true);
}

/// What a management side makes is no cluster's: a cluster whose issuer is the management
/// bucket torn down, and a sweep after an expiration date was copied onto the operator's roles,
/// leave the bucket, the zone and the roles as they were.
#[test]
fn a_clusters_teardown_and_a_sweep_leave_the_management_side() {
    let e = Env::new();
    let input = e.input(
        "m.json",
        json!({"region": "us-east-1", "oidcBucket": "mgmt-oidc3", "baseDomain": "mgmt3.example.com",
               "instanceRoleARN": "arn:aws:iam::123456789012:role/mgmt-nodes"}),
    );
    ok(&e.cli(&["run", "create-management", "--input", &input, "--id", "m1"]));
    let iam = e.input(
        "iam.json",
        json!({"infraID": "c3-abcde", "region": "us-east-1", "oidcBucket": "mgmt-oidc3", "expiresIn": "1h"}),
    );
    ok(&e.cli(&["run", "create-iam", "--input", &iam, "--id", "c3"]));
    let td = e.input("td.json", json!({"infraID": "c3-abcde", "region": "us-east-1"}));
    ok(&e.cli(&["run", "teardown", "--input", &td, "--id", "c3-down"]));
    assert_eq!(management_left(&e, "hypershift", "mgmt-oidc3", "mgmt3.example.com"), (3, true, 1));
    for role in ["hypershift-operator-ec2", "hypershift-operator-oidc-s3", "hypershift-external-dns"] {
        let past =
            aws_sdk_iam::types::Tag::builder().key("expirationDate").value("2020-01-01T00:00:00Z").build().unwrap();
        e.c.block_on(e.c.iam.tag_role().role_name(role).tags(past).send()).unwrap();
    }
    let sweep = e.cli(&["sweep", "--region", "us-east-1"]);
    assert_eq!(sweep.status.code(), Some(0), "{}", support::stderr(&sweep));
    assert_eq!(support::stdout(&sweep), "", "nothing to tear down: {}", support::stderr(&sweep));
    assert_eq!(management_left(&e, "hypershift", "mgmt-oidc3", "mgmt3.example.com"), (3, true, 1));
}

/// Look-alikes of the management side survive it: a bucket of the name made by someone else
/// (untagged, or with the identity tag copied and no creator) is refused, never made public;
/// a role of an operator's name with the identity tag copied is left by the teardown, named.
#[test]
fn look_alikes_of_the_management_side_are_refused_and_left() {
    let e = Env::new();
    e.c.block_on(e.c.s3.create_bucket().bucket("someones-bucket").send()).unwrap();
    let input = e.input(
        "m.json",
        json!({"region": "us-east-1", "oidcBucket": "someones-bucket", "namePrefix": "la",
               "instanceRoleARN": "arn:aws:iam::123456789012:role/mgmt-nodes"}),
    );
    let out = e.cli(&["run", "create-management", "--input", &input, "--id", "m1"]);
    assert_ne!(out.status.code(), Some(0));
    let why = e.s.status("m1")["error"].as_str().unwrap_or_default().to_string();
    assert!(why.contains("someones-bucket") && why.contains("not this management side's"), "{why}");
    assert!(e.c.block_on(e.c.s3.get_bucket_policy().bucket("someones-bucket").send()).is_err(), "made public");
    assert_eq!(e.cli(&["cancel", "m1"]).status.code(), Some(0), "the operator gives up on it");

    let copied = |k: &str, v: &str| aws_sdk_iam::types::Tag::builder().key(k).value(v).build().unwrap();
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    e.c.block_on(
        e.c.iam
            .create_role()
            .role_name("la-operator-ec2")
            .assume_role_policy_document(trust)
            .tags(copied("infraflow.io/identity", "management.la/role/operator-ec2"))
            .send(),
    )
    .unwrap();
    let down = ok(&e.cli(&["run", "teardown-management", "--input", &input, "--id", "md"]));
    let left = down["left"].to_string();
    assert!(left.contains("la-operator-ec2"), "{down}");
    assert!(e.c.block_on(e.c.iam.get_role().role_name("la-operator-ec2").send()).is_ok(), "a look-alike role deleted");
    assert!(e.c.block_on(e.c.s3.head_bucket().bucket("someones-bucket").send()).is_ok(), "someone's bucket deleted");

    // The role with the copied identity and no creator: a create-management pauses on it and
    // leaves it as it was; cancelled, it undoes only the bucket it made itself.
    let own = e.input(
        "own.json",
        json!({"region": "us-east-1", "oidcBucket": "la-own-bucket", "namePrefix": "la",
               "instanceRoleARN": "arn:aws:iam::123456789012:role/mgmt-nodes"}),
    );
    let out = e.cli(&["run", "create-management", "--input", &own, "--id", "m2"]);
    assert_ne!(out.status.code(), Some(0));
    let why = e.s.status("m2")["error"].as_str().unwrap_or_default().to_string();
    assert!(why.contains("la-operator-ec2") && why.contains("not this management side's"), "{why}");
    let role = e.c.block_on(e.c.iam.get_role().role_name("la-operator-ec2").send()).unwrap();
    let trust_now = role.role().unwrap().assume_role_policy_document().unwrap_or_default().to_string();
    assert!(percent_decoded(&trust_now).contains("ec2.amazonaws.com"), "its trust rewritten: {trust_now}");
    assert_eq!(e.cli(&["cancel", "m2"]).status.code(), Some(0));
    assert!(e.c.block_on(e.c.s3.head_bucket().bucket("la-own-bucket").send()).is_err(), "its own bucket left");
    assert!(e.c.block_on(e.c.iam.get_role().role_name("la-operator-ec2").send()).is_ok(), "the look-alike deleted");
}

fn percent_decoded(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// Killed after it found no bucket of the name and before its CreateBucket reached S3, then
/// someone else makes that bucket and puts an object in it: the resumed create refuses it, never
/// tags it or makes it public.
#[test]
fn a_bucket_someone_made_while_the_create_was_down_is_refused() {
    let e = Env::new();
    let input = e.input(
        "m.json",
        json!({"region": "us-east-1", "oidcBucket": "race-bucket", "namePrefix": "rc",
               "instanceRoleARN": "arn:aws:iam::123456789012:role/mgmt-nodes"}),
    );
    let args = ["run", "create-management", "--input", input.as_str(), "--id", "rc"];
    let mut child = e.spawn_cli_at(&e.proxy.endpoint(), &args);
    e.proxy.kill_at_action("CreateBucket", KillAt { call: 0, after_aws_acts: false, pid: child.id() });
    child.wait().unwrap();
    assert!(e.proxy.action_kill_fired(), "killed at its CreateBucket");
    e.c.block_on(e.c.s3.create_bucket().bucket("race-bucket").send()).unwrap();
    let secret = aws_sdk_s3::primitives::ByteStream::from(b"theirs".to_vec());
    e.c.block_on(e.c.s3.put_object().bucket("race-bucket").key("private/secret.txt").body(secret).send()).unwrap();
    let out = e.cli(&args);
    assert_ne!(out.status.code(), Some(0), "{}", support::stderr(&out));
    let why = e.s.status("rc")["error"].as_str().unwrap_or_default().to_string();
    assert!(why.contains("race-bucket") && why.contains("not this management side's"), "{why}");
    assert!(e.c.block_on(e.c.s3.get_bucket_policy().bucket("race-bucket").send()).is_err(), "made public");
    assert!(e.c.block_on(e.c.s3.get_bucket_tagging().bucket("race-bucket").send()).is_err(), "tagged as ours");
}

/// Bad input: one line naming the field, exit 2, nothing journaled.
#[test]
fn bad_management_input_is_refused_in_one_line_naming_the_field() {
    let e = Env::new();
    let base =
        json!({"region": "us-east-1", "oidcBucket": "mgmt-ok", "instanceRoleARN": "arn:aws:iam::123456789012:role/n"});
    let cases = [
        ("oidcBucket", json!("-abc")),
        ("oidcBucket", json!("192.168.5.4")),
        ("oidcBucket", json!("a..b")),
        ("roleARN", json!("junk")),
        ("instanceRoleARN", json!("not-an-arn")),
        ("operatorNamespace", json!("Bad NS*")),
    ];
    for (i, (field, value)) in cases.iter().enumerate() {
        let mut input = base.clone();
        input[*field] = value.clone();
        let path = e.input(&format!("bad{i}.json"), input);
        let out = e.cli(&["run", "create-management", "--input", &path, "--id", &format!("bad{i}")]);
        let err = support::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{field}={value}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(field), "{field}: {err}");
    }
    let mut http = base.clone();
    http.as_object_mut().unwrap().remove("instanceRoleARN");
    http["oidcIssuerURL"] = json!("http://oidc.example.com");
    let path = e.input("http.json", http);
    let out = e.cli(&["run", "create-management", "--input", &path, "--id", "badh"]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
    assert!(support::stderr(&out).contains("oidcIssuerURL"));
    for id in ["bad0", "bad3", "badh"] {
        assert!(!e.s.cli(&["status", id]).status.success(), "{id} journaled");
    }
}
