//! The management side made in one command (`create-management`, WIP): the OIDC bucket with
//! public read of its objects, the public zone when missing, the HyperShift operator's three
//! roles trusting the management cluster's provider; made twice, nothing is made twice.

mod support;

use serde_json::json;
use support::aws::{AwsEnv as Env, ok};

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
    for (action, n) in [("CreateBucket", 1), ("CreateRole", 3), ("route53 POST /hostedzone", 1)] {
        assert_eq!(counts.get(action), Some(&n), "{action}: {counts:?}");
    }
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
    assert!(st["error"].as_str().is_some_and(|w| w.contains("mgmt-oidc2") && w.contains("OIDC documents")), "{st}");
    e.c.block_on(e.c.s3.delete_object().bucket("mgmt-oidc2").key("c1-abcde/openid/v1/jwks").send()).unwrap();
    ok(&e.cli(&["retry", "md"]));
    let done = e.s.status("md");
    assert_eq!(done["state"], "completed", "{done}");
    let roles = e.c.block_on(e.c.iam.list_roles().send()).unwrap();
    assert!(!roles.roles().iter().any(|r| r.role_name().starts_with("hypershift-")), "a role left");
    assert!(e.c.block_on(e.c.s3.head_bucket().bucket("mgmt-oidc2").send()).is_err(), "the bucket left");
}
