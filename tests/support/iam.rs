//! The IAM action of an API call the proxy saw, and the check that every call a workflow made is in
//! the policy `infraflow policy WORKFLOW` prints: the proof that the declared policies are complete.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};

/// The IAM action of a request: from the SDK's `api/<service>/<version>` user-agent metadata and
/// the query `Action`, or, for Route53's REST API, from the method and path shape.
pub fn iam_action(head: &str, action: &str) -> String {
    if let Some(rest) = action.strip_prefix("route53 ") {
        return format!("route53:{}", route53_action(rest));
    }
    let service = head
        .lines()
        .filter(|l| {
            l.to_ascii_lowercase().starts_with("x-amz-user-agent:") || l.to_ascii_lowercase().starts_with("user-agent:")
        })
        .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("api/")).and_then(|a| a.split('/').next()))
        .unwrap_or("unknown");
    if service == "s3" {
        // S3's IAM actions are not its operations' names everywhere.
        let iam = match action {
            "ListBuckets" => "ListAllMyBuckets",
            "ListObjectVersions" => "ListBucketVersions",
            "PutPublicAccessBlock" => "PutBucketPublicAccessBlock",
            "ListObjects" | "HeadBucket" => "ListBucket",
            // Authorized per object named (and `s3:DeleteObjectVersion` for a version: `authz`).
            "DeleteObjects" => "DeleteObject",
            "GetBucketVersioning" => "GetBucketVersioning",
            "PutBucketVersioning" => "PutBucketVersioning",
            other => other,
        };
        return format!("s3:{iam}");
    }
    let prefix = match service {
        "elasticloadbalancingv2" | "elasticloadbalancing" => "elasticloadbalancing",
        "resourcegroupstaggingapi" => "tag",
        other => other,
    };
    format!("{prefix}:{action}")
}

fn route53_action(method_and_shape: &str) -> String {
    // Any path segment that is not one of Route53's words is an id, whatever its length.
    const WORDS: [&str; 9] = [
        "accountlimit",
        "hostedzone",
        "rrset",
        "associatevpc",
        "disassociatevpc",
        "hostedzonesbyname",
        "hostedzonesbyvpc",
        "tags",
        "change",
    ];
    let (method, path) = method_and_shape.split_once(' ').unwrap_or((method_and_shape, ""));
    let shape: Vec<&str> =
        path.split('/').filter(|s| !s.is_empty()).map(|s| if WORDS.contains(&s) { s } else { "{id}" }).collect();
    let normalized = format!("{method} /{}", shape.join("/"));
    let known = match normalized.as_str() {
        "GET /hostedzone" => "ListHostedZones",
        "POST /hostedzone" => "CreateHostedZone",
        "GET /hostedzone/{id}" => "GetHostedZone",
        "DELETE /hostedzone/{id}" => "DeleteHostedZone",
        "POST /hostedzone/{id}" => "UpdateHostedZoneComment",
        "GET /hostedzone/{id}/rrset" => "ListResourceRecordSets",
        "POST /hostedzone/{id}/rrset" => "ChangeResourceRecordSets",
        "POST /hostedzone/{id}/associatevpc" => "AssociateVPCWithHostedZone",
        "POST /hostedzone/{id}/disassociatevpc" => "DisassociateVPCFromHostedZone",
        "GET /hostedzonesbyname" => "ListHostedZonesByName",
        "GET /hostedzonesbyvpc" => "ListHostedZonesByVPC",
        "GET /tags/hostedzone/{id}" => "ListTagsForResource",
        "POST /tags/hostedzone/{id}" => "ChangeTagsForResource",
        "POST /tags/hostedzone" => "ListTagsForResources",
        "GET /change/{id}" => "GetChange",
        "GET /accountlimit/{id}" => "GetAccountLimit",
        _ => "",
    };
    if known.is_empty() { format!("Unknown({normalized})") } else { known.to_string() }
}

/// `infraflow policy ARGS`, asked once per arguments per test binary.
pub fn policy_document(args: &[&str]) -> serde_json::Value {
    static CACHE: OnceLock<Mutex<HashMap<Vec<String>, serde_json::Value>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    if let Some(p) = cache.lock().unwrap().get(&key) {
        return p.clone();
    }
    let out = std::process::Command::new(super::infraflow()).arg("policy").args(args).output().unwrap();
    assert!(out.status.success(), "infraflow policy {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["Version"], "2012-10-17");
    cache.lock().unwrap().insert(key, doc.clone());
    doc
}

/// Panics naming every call of `workflow` on cluster `infra_id` that
/// `infraflow policy --infra-id INFRA_ID WORKFLOW` would not allow, as IAM evaluates it.
pub fn assert_scoped_policy_allows(
    workflow: &str,
    infra_id: &str,
    lock_bucket: Option<&str>,
    calls: &[super::authz::Authz],
) {
    let doc = match lock_bucket {
        Some(bucket) => policy_document(&["--lock-bucket", bucket, "--infra-id", infra_id, workflow]),
        None => policy_document(&["--infra-id", infra_id, workflow]),
    };
    // sts:AssumeRole is the process's own call, granted to its principal, not the role's.
    let refused: Vec<String> = calls
        .iter()
        .filter(|a| a.action != "sts:AssumeRole")
        .filter_map(|a| super::authz::verdict(&doc, a).err())
        .collect();
    assert!(
        refused.is_empty(),
        "`infraflow policy --infra-id {infra_id} {workflow}` would refuse {} of {} calls: {refused:#?}",
        refused.len(),
        calls.len()
    );
}

/// The actions of `infraflow policy WORKFLOW`.
fn policy_of(workflow: &str, lock_bucket: Option<&str>) -> BTreeSet<String> {
    let doc = match lock_bucket {
        Some(bucket) => policy_document(&["--lock-bucket", bucket, workflow]),
        None => policy_document(&[workflow]),
    };
    let actions: BTreeSet<String> = doc["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["Action"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()))
        .collect();
    actions
}

/// Panics naming every call `workflow` made (between two snapshots of a proxy's IAM counts) that
/// its policy does not grant.
pub fn assert_policy_covers(workflow: &str, before: &BTreeMap<String, u32>, after: &BTreeMap<String, u32>) {
    assert_policy_with_lock_covers(workflow, None, before, after)
}

/// `assert_policy_covers` for a run holding cluster leases in `lock_bucket`.
pub fn assert_policy_with_lock_covers(
    workflow: &str,
    lock_bucket: Option<&str>,
    before: &BTreeMap<String, u32>,
    after: &BTreeMap<String, u32>,
) {
    let policy = policy_of(workflow, lock_bucket);
    let missing: Vec<&String> = after
        .iter()
        .filter(|(a, n)| before.get(*a).copied().unwrap_or(0) < **n)
        .map(|(a, _)| a)
        .filter(|a| !policy.contains(*a))
        // The process's own call to act through a workflow's role: granted to the daemon's
        // principal (README, serving several accounts), not by the role's policy.
        .filter(|a| *a != "sts:AssumeRole")
        .collect();
    assert!(missing.is_empty(), "`infraflow policy {workflow}` lacks {missing:?}, which the workflow called");
}
