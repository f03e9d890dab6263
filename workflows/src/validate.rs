//! Input checks shared by the AWS workflows: strict JSON decoding that names the failing field,
//! and the semantic checks (names, regions, CIDRs) that run before anything is journaled.

use std::net::Ipv4Addr;

use serde::de::DeserializeOwned;
use serde_json::Value;

use infraflow_activities::AssumedRole;
use infraflow_engine::InputError;

/// Decodes `input`, rejecting unknown fields; errors name the field path (`zones[2]`).
pub fn decode<T: DeserializeOwned>(input: &Value) -> Result<T, InputError> {
    serde_path_to_error::deserialize(input.clone()).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            InputError(format!("invalid input: {inner}"))
        } else {
            InputError::field(&path, inner)
        }
    })
}

/// A DNS label as HyperShift uses for cluster names and infra ids.
pub fn dns_label(field: &str, v: &str, max: usize) -> Result<(), InputError> {
    if v.is_empty() {
        return Err(InputError::field(field, "must not be empty"));
    }
    if v.len() > max {
        return Err(InputError::field(field, format!("{v:?} is longer than {max} characters")));
    }
    let ok = v.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !v.starts_with('-')
        && !v.ends_with('-');
    if !ok {
        return Err(InputError::field(
            field,
            format!("{v:?} must be lowercase letters, digits and '-', not starting or ending with '-'"),
        ));
    }
    Ok(())
}

pub fn domain(field: &str, v: &str) -> Result<(), InputError> {
    let v = v.strip_suffix('.').unwrap_or(v);
    if v.is_empty() || v.len() > 253 {
        return Err(InputError::field(field, "must be a DNS domain like example.com"));
    }
    for label in v.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(InputError::field(field, format!("{v:?} is not a valid DNS domain")));
        }
    }
    Ok(())
}

/// `us-east-1`, `eu-central-2`, `us-gov-west-1`.
pub fn region(field: &str, v: &str) -> Result<(), InputError> {
    let parts: Vec<&str> = v.split('-').collect();
    let ok = parts.len() >= 3
        && parts[..parts.len() - 1].iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()))
        && parts[parts.len() - 1].parse::<u32>().is_ok();
    if !ok {
        return Err(InputError::field(field, format!("{v:?} is not an AWS region name (like us-east-1)")));
    }
    Ok(())
}

/// A KMS key's ARN, `arn:<partition>:kms:<region>:<account>:key/<id>`: the policy names that
/// one key (an alias ARN would grant nothing: KMS authorizes by the key).
pub fn kms_key_arn(field: &str, v: &str) -> Result<(), InputError> {
    let parts: Vec<&str> = v.splitn(6, ':').collect();
    let ok = parts.len() == 6
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && parts[2] == "kms"
        && region("", parts[3]).is_ok()
        && parts[4].len() == 12
        && parts[4].chars().all(|c| c.is_ascii_digit())
        && parts[5].strip_prefix("key/").is_some_and(|id| {
            !id.is_empty() && id.len() <= 128 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if !ok {
        return Err(InputError::field(
            field,
            format!(
                "{v:?} is not a KMS key ARN like arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
            ),
        ));
    }
    Ok(())
}

/// Any IPv4 CIDR block (`10.0.0.0/16`).
pub fn cidr(field: &str, v: &str) -> Result<(), InputError> {
    let bad = || InputError::field(field, format!("{v:?} is not a CIDR block like 10.0.0.0/16"));
    let (addr, prefix) = v.split_once('/').ok_or_else(bad)?;
    addr.parse::<Ipv4Addr>().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    if prefix > 32 {
        return Err(bad());
    }
    Ok(())
}

/// A /16 IPv4 network with no host bits: returns its first two octets.
pub fn cidr16(field: &str, v: &str) -> Result<(u8, u8), InputError> {
    let (addr, prefix) = v
        .split_once('/')
        .ok_or_else(|| InputError::field(field, format!("{v:?} is not a CIDR block like 10.0.0.0/16")))?;
    let ip: Ipv4Addr =
        addr.parse().map_err(|_| InputError::field(field, format!("{v:?} is not a CIDR block like 10.0.0.0/16")))?;
    let prefix: u8 =
        prefix.parse().map_err(|_| InputError::field(field, format!("{v:?} is not a CIDR block like 10.0.0.0/16")))?;
    if prefix != 16 {
        return Err(InputError::field(field, format!("{v:?} must be a /16 (HyperShift's subnet layout needs one)")));
    }
    let o = ip.octets();
    if o[2] != 0 || o[3] != 0 {
        return Err(InputError::field(field, format!("{v:?} has host bits set; use {}.{}.0.0/16", o[0], o[1])));
    }
    Ok((o[0], o[1]))
}

/// How many additional tags a user may give: AWS allows 50 per resource, and infraflow writes up
/// to ten of its own.
pub const MAX_ADDITIONAL_TAGS: usize = 40;

/// Tags a user adds to every resource: AWS's limits, and none of the keys that say who owns a
/// resource or what it is.
pub fn additional_tags(field: &str, tags: &std::collections::BTreeMap<String, String>) -> Result<(), InputError> {
    if tags.len() > MAX_ADDITIONAL_TAGS {
        return Err(InputError::field(
            field,
            format!(
                "{} tags, at most {MAX_ADDITIONAL_TAGS}: AWS allows 50 per resource and infraflow writes up to {} of its own",
                tags.len(),
                50 - MAX_ADDITIONAL_TAGS
            ),
        ));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > 128 || k.to_ascii_lowercase().starts_with("aws:") {
            return Err(InputError::field(
                field,
                format!("key {k:?} must be 1 to 128 characters and not start with aws:"),
            ));
        }
        if v.chars().count() > 256 {
            return Err(InputError::field(field, format!("value of {k:?} is longer than 256 characters")));
        }
        // AWS's tag rule (EC2, ELB, IAM, Route53 alike): letters, digits, spaces and _ . : / = + - @.
        let allowed = |c: char| c.is_alphanumeric() || c == ' ' || "_.:/=+-@".contains(c);
        if let Some(c) = k.chars().chain(v.chars()).find(|c| !allowed(*c)) {
            return Err(InputError::field(
                field,
                format!("{k:?}={v:?} has {c:?}: AWS tags take letters, digits, spaces and _ . : / = + - @ only"),
            ));
        }
        if let Some(why) = reserved_tag(k) {
            return Err(InputError::field(field, format!("key {k:?} is reserved: {why}")));
        }
    }
    Ok(())
}

/// Why an additional tag key may not be set, if it may not: the tags that say who owns a resource
/// and what it is. `kubernetes.io/cluster/<other>=owned` would hand this cluster's resources to
/// another cluster's teardown; `infraflow.io/*` would forge an identity or a creator.
fn reserved_tag(key: &str) -> Option<&'static str> {
    let k = key.to_ascii_lowercase();
    if k.starts_with("kubernetes.io/cluster/") || k.starts_with("sigs.k8s.io/") {
        Some("it names the cluster that owns the resource, which infraflow sets")
    } else if k == infraflow_activities::tags::PROTECTION_TAG {
        // The one infraflow tag a creator may write: protection only ever stops deletes.
        None
    } else if k.starts_with("infraflow.io/") {
        Some("infraflow's own tags say what a resource is and who created it")
    } else if k == "name" {
        Some("infraflow names resources as HyperShift does")
    } else {
        None
    }
}

/// The role an input names: `roleARN`, `externalID`, `sessionName` and `sourceIdentity`, alike at
/// the top of every AWS workflow's input. Each input struct declares the four fields itself: serde cannot
/// flatten a shared struct into one that refuses unknown fields, as every input does.
pub fn role(input: &Value) -> Result<Option<AssumedRole>, InputError> {
    let s = |k: &str| input.get(k).and_then(Value::as_str);
    AssumedRole::from_input(s("roleARN"), s("externalID"), s("sessionName"), s("sourceIdentity"))
        .map_err(|e| InputError(format!("invalid input: {e}")))
}

/// The key under which a cluster's workflows never interleave: its infraID in its account (the
/// same infraID in two accounts is two clusters). Without a role the account is the process's
/// own, which only AWS can name: the infraID alone.
pub fn cluster_key(infra_id: &str, role: Option<&AssumedRole>) -> String {
    match role {
        Some(r) => format!("{infra_id}@{}", r.account()),
        None => infra_id.to_string(),
    }
}

/// The validated input, journaled, with the role's session named after workflow `id` when the
/// input names a role but no `sessionName`: CloudTrail then tells one workflow's calls from
/// another's (SAFETY-F393541 F10), where every session was `infraflow`. The id is made to fit
/// STS's rule (2–64 of letters, digits and `+=,.@-_`).
pub fn session_named(id: &str, mut input: Value) -> Value {
    if let Some(m) = input.as_object_mut()
        && m.get("roleARN").is_some_and(Value::is_string)
        && !m.contains_key("sessionName")
    {
        let ok = |c: char| c.is_ascii_alphanumeric() || "+=,.@-_".contains(c);
        let mut name: String = id.chars().map(|c| if ok(c) { c } else { '-' }).take(64).collect();
        if name.len() < 2 {
            name = format!("infraflow-{name}");
        }
        m.insert("sessionName".into(), Value::String(name));
    }
    input
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_roles_session_is_named_after_the_workflow_unless_the_input_names_it() {
        use serde_json::json;
        let arn = "arn:aws:iam::111111111111:role/infraflow";
        let named = super::session_named("prov-ü/1", json!({"roleARN": arn}));
        assert_eq!(named["sessionName"], "prov---1");
        assert!(super::role(&named).is_ok(), "{named}");
        let long = "x".repeat(80);
        assert_eq!(super::session_named(&long, json!({"roleARN": arn}))["sessionName"].as_str().unwrap().len(), 64);
        let given = json!({"roleARN": arn, "sessionName": "ci"});
        assert_eq!(super::session_named("p", given.clone()), given);
        let no_role = json!({"infraID": "a-b"});
        assert_eq!(super::session_named("p", no_role.clone()), no_role);
    }

    use super::*;

    #[test]
    fn a_kms_key_arn_is_a_key_of_one_account_and_region() {
        assert!(kms_key_arn("kmsKeyARN", "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab").is_ok());
        for bad in [
            "arn:aws:kms:us-east-1:111122223333:alias/etcd",
            "arn:aws:kms:us-east-1:1111:key/abc",
            "arn:aws:s3:::bucket",
            "1234abcd-12ab",
        ] {
            let e = kms_key_arn("kmsKeyARN", bad).unwrap_err().to_string();
            assert!(e.contains("kmsKeyARN") && e.contains("is not a KMS key ARN"), "{e}");
        }
    }

    #[test]
    fn cidr_checks_name_the_problem() {
        assert_eq!(cidr16("vpcCIDR", "10.1.0.0/16").unwrap(), (10, 1));
        assert!(cidr16("vpcCIDR", "10.1.0.0/20").unwrap_err().0.contains("/16"));
        assert!(cidr16("vpcCIDR", "10.1.2.0/16").unwrap_err().0.contains("host bits"));
        assert!(cidr16("vpcCIDR", "10.300.0.0/16").unwrap_err().0.contains("vpcCIDR"));
        assert!(cidr16("vpcCIDR", "banana").is_err());
    }

    #[test]
    fn regions_and_labels() {
        assert!(region("region", "us-east-1").is_ok());
        assert!(region("region", "us-gov-west-1").is_ok());
        assert!(region("region", "useast1").is_err());
        assert!(dns_label("name", "my-cluster", 40).is_ok());
        assert!(dns_label("name", "My_Cluster", 40).is_err());
        assert!(dns_label("name", "", 40).unwrap_err().0.contains("empty"));
        assert!(domain("baseDomain", "example.com").is_ok());
        assert!(domain("baseDomain", "exa mple.com").is_err());
    }

    #[test]
    fn additional_tags_follow_awss_rules() {
        let one = |k: &str, v: &str| additional_tags("additionalTags", &[(k.to_string(), v.to_string())].into());
        assert!(one("team", "sre: platform/ops @eu+1").is_ok());
        assert!(one("équipe", "ünïcode").is_ok(), "Unicode letters are letters");
        let err = one("team", "a<b>").unwrap_err().0;
        assert!(err.contains("additionalTags") && err.contains("'<'"), "{err}");
        assert!(one("aws:x", "v").unwrap_err().0.contains("aws:"));
        assert!(one(&"k".repeat(129), "v").is_err());
        assert!(one("k", &"é".repeat(256)).is_ok(), "256 characters, not bytes");
        assert!(one("infraflow.io/adopted-by", "me").unwrap_err().0.contains("reserved"));
        assert!(one("infraflow.io/do-not-delete", "").is_ok(), "protection at creation, as README says");
    }
}
