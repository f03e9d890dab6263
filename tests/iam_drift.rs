//! A cluster's IAM in `infraflow check`: the roles create-iam made with the trust and policies it
//! gave them, the OIDC provider, and the issuer's documents in its S3 bucket. A role's policy
//! deleted, a trust changed and the provider deleted are three drifts, read without a write;
//! create-iam with the repair the report gives puts them back, and the next check is in sync. The
//! issuer's documents, which create-iam never writes, are drift to repair by hand.

mod support;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::*;

const INFRA: &str = "dr-abcde";
const BUCKET: &str = "oidc-store";

fn issuer() -> String {
    format!("https://{BUCKET}.s3.us-east-1.amazonaws.com/{INFRA}")
}

/// The issuer's documents, as HyperShift publishes them for the cluster.
fn publish_documents(e: &Env) {
    let put = |key: String, body: Value| {
        let body = aws_sdk_s3::primitives::ByteStream::from(body.to_string().into_bytes());
        e.c.block_on(e.c.s3.put_object().bucket(BUCKET).key(key).body(body).send()).unwrap();
    };
    e.c.block_on(e.c.s3.create_bucket().bucket(BUCKET).send()).unwrap();
    put(
        format!("{INFRA}/.well-known/openid-configuration"),
        json!({"issuer": issuer(), "jwks_uri": format!("{}/openid/v1/jwks", issuer()),
               "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
               "id_token_signing_alg_values_supported": ["RS256"]}),
    );
    put(format!("{INFRA}/openid/v1/jwks"), json!({"keys": [{"kty": "RSA", "kid": "k1", "n": "AQAB", "e": "AQAB"}]}));
}

fn check(e: &Env) -> (i32, Value) {
    let out = e.cli(&["check", "--infra-id", INFRA, "--region", "us-east-1", "--json"]);
    let code = out.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "{}", stderr(&out));
    (code, serde_json::from_slice(&out.stdout).unwrap())
}

fn drift_kinds(report: &Value) -> Vec<String> {
    let mut kinds: Vec<String> = report["drift"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| format!("{} {}", d["kind"].as_str().unwrap(), d["id"].as_str().unwrap()))
        .collect();
    kinds.sort();
    kinds
}

#[test]
fn check_names_iam_drift_without_writing_and_create_iam_with_its_repair_puts_it_back() {
    let e = Env::new();
    publish_documents(&e);
    let input = e.input(
        "dr.json",
        json!({
            "infra": {"name": "dr", "infraID": INFRA, "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"},
            "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"},
            "iam": {"oidcBucket": BUCKET}
        }),
    );
    let made = ok(&e.cli(&["run", "create-cluster", "--input", &input, "--id", "dr"]));
    let (code, report) = check(&e);
    assert_eq!((code, drift_kinds(&report)), (0, vec![]), "{report}");

    // Three drifts, by hand in the account: a policy deleted, a trust changed, the provider gone.
    let iam = &e.c.iam;
    let storage = format!("{INFRA}-aws-ebs-csi-driver-controller");
    e.c.block_on(iam.delete_role_policy().role_name(&storage).policy_name(&storage).send()).unwrap();
    let ingress = format!("{INFRA}-openshift-ingress");
    let anyone = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"AWS": "arn:aws:iam::999999999999:root"}, "Action": "sts:AssumeRole"}]});
    e.c.block_on(iam.update_assume_role_policy().role_name(&ingress).policy_document(anyone.to_string()).send())
        .unwrap();
    let provider = made["iam"]["oidcProviderARN"].as_str().unwrap().to_string();
    e.c.block_on(iam.delete_open_id_connect_provider().open_id_connect_provider_arn(&provider).send()).unwrap();

    e.proxy.reset_counts();
    let (code, report) = check(&e);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        drift_kinds(&report),
        vec![format!("oidc-provider {provider}"), format!("role-policy {storage}"), format!("trust {ingress}")],
        "{report}"
    );
    let writes: Vec<String> = e.proxy.counts().into_keys().filter(|a| support::chain::is_change(a)).collect();
    assert!(writes.is_empty(), "a check wrote: {writes:?}");

    // The report's repair: create-iam with the cluster's IAM input and repairDrift.
    let repair = report["drift"][0]["repair"].as_str().unwrap();
    let given: Value = serde_json::from_str(repair.split("<<< '").nth(1).unwrap().trim_end_matches('\'')).unwrap();
    assert_eq!(given["repairDrift"], true, "{repair}");
    let repair_input = e.input("repair.json", given);
    ok(&e.cli(&["run", "create-iam", "--input", &repair_input, "--id", "dr-repair"]));
    let (code, report) = check(&e);
    assert_eq!((code, drift_kinds(&report)), (0, vec![]), "repaired: {report}");

    // Without repairDrift, a changed trust of a role another submission made is left, and the
    // run pauses naming it.
    e.c.block_on(iam.update_assume_role_policy().role_name(&ingress).policy_document(anyone.to_string()).send())
        .unwrap();
    let mut plain: Value = serde_json::from_str(&std::fs::read_to_string(&repair_input).unwrap()).unwrap();
    plain.as_object_mut().unwrap().remove("repairDrift");
    let plain = e.input("plain.json", plain);
    let out = e.cli(&["run", "create-iam", "--input", &plain, "--id", "dr-plain"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        e.s.status("dr-plain")["error"].as_str().is_some_and(|w| w.contains("repairDrift")),
        "{}",
        e.s.status("dr-plain")
    );

    // The issuer's keys gone: drift create-iam does not repair, said so.
    e.c.block_on(e.c.s3.delete_object().bucket(BUCKET).key(format!("{INFRA}/openid/v1/jwks")).send()).unwrap();
    let (code, report) = check(&e);
    assert_eq!(code, 1);
    let keys =
        report["drift"].as_array().unwrap().iter().find(|d| d["kind"] == "oidc-document").expect("the keys' drift");
    assert!(keys["repair"].as_str().unwrap().contains("dr-oidc-iam"), "{keys}");
}
