//! `infraflow policy --infra-id ID`: the same actions as the unscoped policy, each conditioned on
//! the ownership tag `kubernetes.io/cluster/<ID>=owned` wherever AWS has a condition key for it, so
//! the role that may delete this cluster's VPC cannot touch another cluster's.
//!
//! How AWS authorizes each kind of call (the Service Authorization Reference):
//! - a create carries its tags in the request (tag-on-create): `aws:RequestTag/<key>`; tagging a
//!   resource while creating it is a second authorization of the service's tag action, told apart
//!   by `ec2:CreateAction` / `elasticloadbalancing:CreateAction`;
//! - a call on existing resources is authorized once per resource it names: `ec2:ResourceTag/<key>`
//!   (EC2), `aws:ResourceTag/<key>` (ELB, IAM), so every resource named must be the cluster's;
//! - what has no such key is listed in `UNCONDITIONED` with why.

use std::collections::BTreeSet;

use infraflow_activities::tags::{OWNED, ownership_key};
use infraflow_engine::InputError;
use serde_json::{Value, json};

/// How one action is granted in the scoped policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Creates a resource: the request must carry the ownership tag.
    Create,
    /// Tags a resource: while creating one (the create's own tags), or an existing owned one.
    Tag,
    /// Acts on existing resources: each must carry the ownership tag.
    OnOwned,
    /// No tag condition is possible (`UNCONDITIONED` says why).
    Unconditioned,
    /// Scoped by the resource's name instead of its tag: the image registry's bucket (`BY_NAME`).
    ByName,
}

/// Why S3 is scoped by name: a general purpose bucket answers to `aws:ResourceTag` only once its
/// owner turned ABAC on for it (off by default), so a tag condition would deny the registry's
/// bucket on most accounts. Every bucket the registry operator makes for the cluster is named
/// `<infraID>-image-registry-…`, and teardown deletes one only when it also carries the tag.
pub const BY_NAME_WHY: &str = "S3 buckets answer to tag conditions only once ABAC is turned on for them (off by default):                                the grant names the registry's buckets and their objects, arn:aws:s3:::<infraID>-image-registry-*";

/// The actions that create a tagged resource (each sends the ownership tag in its request), and
/// the types of what they create, as their ARNs name them. A create is authorized once per
/// resource: on the new ones by the request's tags, on the existing ones it names (a subnet's
/// VPC) by theirs, so each create has a statement of its own, naming only what it creates.
const CREATES: &[(&str, &[&str])] = &[
    ("ec2:AllocateAddress", &["elastic-ip"]),
    ("ec2:CreateDhcpOptions", &["dhcp-options"]),
    ("ec2:CreateInternetGateway", &["internet-gateway"]),
    ("ec2:CreateNatGateway", &["natgateway"]),
    ("ec2:CreateRouteTable", &["route-table"]),
    ("ec2:CreateSecurityGroup", &["security-group"]),
    ("ec2:CreateSubnet", &["subnet"]),
    ("ec2:CreateVpc", &["vpc"]),
    ("ec2:CreateVpcEndpoint", &["vpc-endpoint"]),
    ("ec2:CreateVpcEndpointServiceConfiguration", &["vpc-endpoint-service"]),
    ("ec2:RunInstances", &["instance", "volume", "network-interface"]),
    ("elasticloadbalancing:CreateLoadBalancer", &["loadbalancer"]),
    ("elasticloadbalancing:CreateTargetGroup", &["targetgroup"]),
    ("iam:CreateInstanceProfile", &["instance-profile"]),
    ("iam:CreateOpenIDConnectProvider", &["oidc-provider"]),
    ("iam:CreateRole", &["role"]),
];

fn is_create(action: &str) -> bool {
    CREATES.iter().any(|(a, _)| *a == action)
}

const TAGS: &[&str] = &[
    "ec2:CreateTags",
    "elasticloadbalancing:AddTags",
    "iam:TagRole",
    "iam:TagInstanceProfile",
    "iam:TagOpenIDConnectProvider",
];

/// The actions granted without a tag condition, as IAM action patterns, and why: the list the
/// README repeats.
pub const UNCONDITIONED: &[(&str, &str)] = &[
    ("sts:GetCallerIdentity", "needs no permission at all; it tells which account the credentials are for"),
    ("route53:*", "Route53 has no tag condition keys, and a hosted zone's id is unknown before it exists"),
    ("s3:ListAllMyBuckets", "lists the account's bucket names, and S3 authorizes it on no resource"),
    ("*:Describe*", READ_WHY),
    ("*:List*", READ_WHY),
    ("*:Get*", READ_WHY),
    (
        "ec2:ReplaceRouteTableAssociation",
        "HyperShift makes the cluster's route table the VPC's main one, and teardown hands that role back to the \
         table AWS made with the VPC, untagged, which no tag condition can name (and the VPC cannot be deleted \
         while that table is not main); it moves an association, it deletes nothing",
    ),
];

const READ_WHY: &str = "a read changes nothing; EC2 and ELB authorize Describe* on no resource, and the IAM lists \
                        that find a cluster's roles read the whole account";

/// Whether `action` (`ec2:DeleteVpc`) is one `pattern` (`*:Describe*`, `route53:*`) names.
fn names(pattern: &str, action: &str) -> bool {
    let (Some((ps, pn)), Some((service, name))) = (pattern.split_once(':'), action.split_once(':')) else {
        return false;
    };
    (ps == "*" || ps == service) && pn.strip_suffix('*').map_or(pn == name, |prefix| name.starts_with(prefix))
}

/// The grant of `action` (`ec2:DeleteVpc`).
pub fn grant_of(action: &str) -> Grant {
    // Before the read patterns: listing a bucket's objects or reading its tags is scoped too.
    if action.starts_with("s3:") && action != "s3:ListAllMyBuckets" {
        Grant::ByName
    } else if UNCONDITIONED.iter().any(|(pattern, _)| names(pattern, action)) {
        Grant::Unconditioned
    } else if is_create(action) {
        Grant::Create
    } else if TAGS.contains(&action) {
        Grant::Tag
    } else {
        Grant::OnOwned
    }
}

/// The scoped policy of `actions` (the union of the named workflows') for cluster `infra_id`.
pub fn document(infra_id: &str, actions: &BTreeSet<&'static str>) -> Result<Value, InputError> {
    crate::validate::dns_label("--infra-id", infra_id, 60)?;
    let key = ownership_key(infra_id);
    let of = |service: &str, grant: fn(Grant) -> bool| -> Vec<&'static str> {
        actions.iter().copied().filter(|a| a.starts_with(&format!("{service}:")) && grant(grant_of(a))).collect()
    };
    let request_tag = json!({"StringEquals": {format!("aws:RequestTag/{key}"): OWNED}});
    let mut statements = Vec::new();
    let mut push = |sid: String, actions: Vec<&'static str>, resource: Value, condition: Option<Value>| {
        if actions.is_empty() {
            return;
        }
        let mut s = json!({"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resource});
        if let Some(c) = condition {
            s["Condition"] = c;
        }
        statements.push(s);
    };
    push("Unconditioned".into(), unconditioned_reads(actions), json!("*"), None);

    // Each create on what it creates, by the request's tags.
    for (action, types) in CREATES.iter().filter(|(a, _)| actions.contains(a)) {
        let (service, name) = action.split_once(':').unwrap_or_default();
        let resources: Vec<String> = types.iter().map(|t| arn_pattern(service, t, infra_id)).collect();
        push(format!("{name}Tagged"), vec![*action], json!(resources), Some(request_tag.clone()));
    }
    if actions.contains("ec2:RunInstances") {
        // The machine image is AWS's or the account's, never a cluster's.
        push("RunInstancesFromAnyImage".into(), vec!["ec2:RunInstances"], json!("arn:aws:ec2:*::image/*"), None);
    }
    // The tagging that is part of a create, told apart by the create action; then everything
    // else (creates too: for the existing resources they name) on the resources' own tags.
    for (service, sid, create_action, resource_tag) in [
        ("ec2", "Ec2", "ec2:CreateAction", format!("ec2:ResourceTag/{key}")),
        ("elasticloadbalancing", "Elb", "elasticloadbalancing:CreateAction", format!("aws:ResourceTag/{key}")),
    ] {
        let mut create_names: Vec<&str> =
            of(service, |g| g == Grant::Create).iter().map(|a| a.split_once(':').map_or(*a, |(_, n)| n)).collect();
        // A listener is tagged as it is made, but IAM authorizes CreateListener on its load
        // balancer (below), not on the listener by the request's tags: no statement of its own.
        if service == "elasticloadbalancing" && actions.contains("elasticloadbalancing:CreateListener") {
            create_names.push("CreateListener");
        }
        if !create_names.is_empty() {
            push(
                format!("{sid}TagOnCreate"),
                of(service, |g| g == Grant::Tag),
                json!("*"),
                Some(json!({"StringEquals": {
                    create_action: create_names,
                    format!("aws:RequestTag/{key}"): OWNED,
                }})),
            );
        }
        push(
            format!("{sid}ChangeOwned"),
            of(service, |g| g != Grant::Unconditioned),
            json!("*"),
            Some(json!({"StringEquals": {resource_tag: OWNED}})),
        );
    }
    customer_network_statements(infra_id, actions, &mut push);
    // IAM: names are ids, and every name infraflow gives starts with the infraID; an OIDC
    // provider's is its issuer's URL, so only its tag tells. Tagging happens at creation, and on
    // what the cluster owns already (the adoption mark).
    let iam_resources: Vec<String> =
        ["role", "instance-profile", "oidc-provider"].iter().map(|t| arn_pattern("iam", t, infra_id)).collect();
    push("IamTagOnCreate".into(), of("iam", |g| g == Grant::Tag), json!(iam_resources), Some(request_tag));
    push(
        "IamChangeOwned".into(),
        of("iam", |g| g == Grant::OnOwned || g == Grant::Tag),
        json!(iam_resources),
        Some(json!({"StringEquals": {format!("aws:ResourceTag/{key}"): OWNED}})),
    );
    let bucket = format!("arn:aws:s3:::{}", infraflow_activities::s3::registry_prefix(infra_id));
    // One pattern for the buckets and their objects (`*` spans the `/` of an object's ARN).
    push("RegistryBucketByName".into(), of("s3", |g| g == Grant::ByName), json!([format!("{bucket}*")]), None);
    // The issuer's documents a check reads (`<infraID>/…` in the OIDC bucket, whichever that is):
    // read only, and only under the cluster's own prefix.
    let reads_documents: Vec<&'static str> = actions.iter().copied().filter(|a| *a == "s3:GetObject").collect();
    push("IssuerDocumentsRead".into(), reads_documents, json!([format!("arn:aws:s3:::*/{infra_id}/*")]), None);
    Ok(json!({"Version": "2012-10-17", "Statement": statements}))
}

/// The unconditioned grants of `actions`, a service's several `Describe` actions as one
/// `service:Describe*` (each is a read, granted on no resource: READ_WHY): a role's inline
/// policy holds 10,240 characters, and every workflow's together for a 40-character infra id
/// comes near that.
fn unconditioned_reads(actions: &BTreeSet<&'static str>) -> Vec<&'static str> {
    const DESCRIBE_ALL: &[&str] = &["ec2:Describe*", "elasticloadbalancing:Describe*"];
    let unconditioned: Vec<&'static str> =
        actions.iter().copied().filter(|a| grant_of(a) == Grant::Unconditioned).collect();
    let mut out: Vec<&'static str> = Vec::new();
    for a in unconditioned {
        let all = DESCRIBE_ALL.iter().find(|p| names(p, a));
        match all {
            Some(p) if actions.iter().filter(|b| names(p, b)).count() > 1 => {
                if !out.contains(p) {
                    out.push(p);
                }
            }
            _ => out.push(a),
        }
    }
    out
}

/// A customer's network (bring your own VPC): the cluster tags the customer's subnets, VPC and
/// route tables only in a request that carries its record of what it adds
/// (`infraflow.io/marks/<ID>`), and takes tags off only where that record is; its creates may
/// name what it marked `kubernetes.io/cluster/<ID>=shared` (a group in the VPC, an endpoint on
/// the route tables, instances in the subnets), and nothing else of the customer's.
fn customer_network_statements(
    infra_id: &str,
    actions: &BTreeSet<&'static str>,
    push: &mut impl FnMut(String, Vec<&'static str>, Value, Option<Value>),
) {
    if !actions.contains("ec2:DeleteTags") {
        return;
    }
    // `Resource: *`, the conditions doing the scoping: a role's inline policy holds 10,240
    // characters, and the every-workflow policy of a 60-character infra id is near that.
    let shared_key = ownership_key(infra_id);
    if actions.contains("ec2:CreateTags") {
        let condition = json!({"StringEquals": {format!("aws:RequestTag/{shared_key}"): "shared"}});
        push("Ec2MarkCustomer".into(), vec!["ec2:CreateTags"], json!("*"), Some(condition));
    }
    // On what is marked: more marks, their removal, and the creates that name a customer's VPC,
    // route tables or subnets.
    let on_marked: Vec<&'static str> =
        ["ec2:CreateTags", "ec2:DeleteTags", "ec2:CreateSecurityGroup", "ec2:CreateVpcEndpoint", "ec2:RunInstances"]
            .into_iter()
            .filter(|a| actions.contains(a))
            .collect();
    let shared = json!({"StringEquals": {format!("ec2:ResourceTag/{shared_key}"): "shared"}});
    push("Ec2OnCustomer".into(), on_marked, json!("*"), Some(shared));
}

/// The ARNs of resources of `kind` the cluster may have: IAM names start with the infraID.
fn arn_pattern(service: &str, kind: &str, infra_id: &str) -> String {
    match (service, kind) {
        ("iam", "oidc-provider") => "arn:aws:iam::*:oidc-provider/*".to_string(),
        ("iam", _) => format!("arn:aws:iam::*:{kind}/{infra_id}-*"),
        _ => format!("arn:aws:{service}:*:*:{kind}/*"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ALL_AREAS, Use, actions};

    fn all_actions() -> BTreeSet<&'static str> {
        actions(&ALL_AREAS.map(|a| (a, Use::Manage)))
    }

    #[test]
    fn no_write_is_granted_without_a_condition_except_route53_and_the_main_table_hand_back() {
        let writes: Vec<&str> = all_actions()
            .into_iter()
            .filter(|a| grant_of(a) == Grant::Unconditioned)
            .filter(|a| !["Describe", "List", "Get"].iter().any(|p| a.split_once(':').unwrap().1.starts_with(p)))
            .collect();
        assert!(writes.iter().any(|a| a.starts_with("route53:")), "{writes:?}");
        for a in writes {
            assert!(
                a.starts_with("route53:")
                    || ["ec2:ReplaceRouteTableAssociation", "ec2:DeleteNetworkInterface"].contains(&a),
                "{a} is unconditioned"
            );
        }
        assert_eq!(grant_of("ec2:DeleteVpc"), Grant::OnOwned);
        assert_eq!(grant_of("ec2:DescribeVpcs"), Grant::Unconditioned);
    }

    #[test]
    fn every_create_and_tag_action_is_one_infraflow_calls() {
        let all = all_actions();
        for a in CREATES.iter().map(|(a, _)| a).chain(TAGS) {
            assert!(all.contains(a), "{a} is classified but no activities file declares it");
        }
    }

    #[test]
    fn every_action_is_granted_and_a_create_only_on_what_it_creates() {
        let all = all_actions();
        let doc = document("abc-12345", &all).unwrap();
        let statements = doc["Statement"].as_array().unwrap();
        let granted: BTreeSet<&str> = statements
            .iter()
            .flat_map(|s| s["Action"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()))
            .collect();
        // A service's reads may be granted as one `Describe*`: every action named by a grant,
        // every grant naming an action.
        let named = |a: &str| granted.iter().any(|g| names(g, a));
        let unnamed: Vec<&&str> = all.iter().filter(|a| !named(a)).collect();
        assert!(unnamed.is_empty(), "not granted: {unnamed:?}");
        let idle: Vec<&&str> = granted.iter().filter(|g| !all.iter().any(|a| names(g, a))).collect();
        assert!(idle.is_empty(), "granted, never called: {idle:?}");
        assert!(granted.contains("elasticloadbalancing:Describe*"), "{granted:?}");
        let create_subnet = statements.iter().find(|s| s["Sid"] == "CreateSubnetTagged").unwrap();
        assert_eq!(create_subnet["Resource"], json!(["arn:aws:ec2:*:*:subnet/*"]));
        assert_eq!(create_subnet["Action"], json!(["ec2:CreateSubnet"]));
    }

    #[test]
    fn conditions_name_the_clusters_ownership_tag() {
        let doc = document("abc-12345", &all_actions()).unwrap();
        let text = doc.to_string();
        assert!(text.contains("\"ec2:ResourceTag/kubernetes.io/cluster/abc-12345\":\"owned\""), "{text}");
        assert!(text.contains("\"aws:RequestTag/kubernetes.io/cluster/abc-12345\":\"owned\""));
        assert!(text.contains("arn:aws:iam::*:role/abc-12345-*"));
        let delete_vpc = doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Action"].as_array().unwrap().iter().any(|a| a == "ec2:DeleteVpc"))
            .unwrap();
        assert_eq!(delete_vpc["Sid"], "Ec2ChangeOwned");
    }

    #[test]
    fn s3_is_granted_on_the_clusters_registry_buckets_only_but_for_listing_bucket_names() {
        let doc = document("abc-12345", &all_actions()).unwrap();
        let statements = doc["Statement"].as_array().unwrap();
        let by_name = statements.iter().find(|s| s["Sid"] == "RegistryBucketByName").unwrap();
        assert_eq!(by_name["Resource"], json!(["arn:aws:s3:::abc-12345-image-registry-*"]));
        assert!(by_name["Action"].as_array().unwrap().contains(&json!("s3:DeleteBucket")));
        assert!(by_name["Action"].as_array().unwrap().contains(&json!("s3:ListBucketVersions")));
        assert_eq!(grant_of("s3:ListAllMyBuckets"), Grant::Unconditioned);
        assert_eq!(grant_of("s3:GetBucketTagging"), Grant::ByName);
    }

    /// IAM counts a policy's characters without whitespace: 10,240 for a role's inline policy,
    /// 6,144 for a managed one (README says which to use). Since the customer network's grants,
    /// every workflow's at once fits for an infra id of up to 40 characters; for longer ones each
    /// workflow's policy fits alone (a role per workflow, or several inline policies).
    #[test]
    fn the_scoped_policy_of_every_workflow_fits_a_roles_inline_policy_for_a_40_character_infra_id() {
        let size_of = |doc: Value| doc.to_string().chars().filter(|c| !c.is_whitespace()).count();
        let forty = format!("{}-abcde", "c".repeat(34));
        let size = size_of(document(&forty, &all_actions()).unwrap());
        assert!(size <= 10_240, "{size} characters: over a role's inline policy");
        let longest = format!("{}-abcde", "c".repeat(54));
        for area in ALL_AREAS {
            let size = size_of(document(&longest, &actions(&[(area, Use::Manage)])).unwrap());
            assert!(size <= 10_240, "{size} characters: one area's policy over a role's inline policy");
        }
    }

    #[test]
    fn an_infra_id_that_is_no_dns_label_is_refused() {
        let e = document("a/b", &all_actions()).unwrap_err();
        assert!(e.to_string().contains("--infra-id"), "{e}");
    }
}
