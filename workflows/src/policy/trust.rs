//! The trust policy of a role the daemon assumes (`infraflow policy --trust-for`): its principal
//! may call `sts:AssumeRole`, with the external id when one is named; both checked as AWS spells
//! them.

use serde_json::{Value, json};

/// Bad input (exit 2).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error(
        "an external id must be 2 to 1224 characters of letters, digits and _+=,.@:/- (got {0} characters or another one)"
    )]
    ExternalId(usize),
    #[error(
        "the principal {0:?} is not an account id or an IAM role or user ARN: name the identity the daemon runs as (`aws sts get-caller-identity` names its role)"
    )]
    Principal(String),
}

fn check_external_id(id: &str) -> Result<(), TrustError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_+=,.@:/-".contains(c);
    if !(2..=1224).contains(&id.chars().count()) || !id.chars().all(allowed) {
        return Err(TrustError::ExternalId(id.chars().count()));
    }
    Ok(())
}

/// Whether `arn` is an IAM ARN whose resource is one of `kinds` (`role/`, `user/`, `root`):
/// `arn:<partition>:iam::<12 digits>:<kind><path/><name>`.
fn is_iam_arn(arn: &str, kinds: &[&str]) -> bool {
    let check = || -> Option<bool> {
        let mut parts = arn.splitn(6, ':');
        let (prefix, partition, service, region, account, resource) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let partition_ok = matches!(partition, "aws" | "aws-cn" | "aws-us-gov");
        let account_ok = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
        let resource_ok = if resource == "root" {
            kinds.contains(&"root")
        } else {
            let path_and_name = kinds.iter().find_map(|k| resource.strip_prefix(*k))?;
            let name = path_and_name.rsplit('/').next().unwrap_or_default();
            (1..=64).contains(&name.len())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c))
                && path_and_name.chars().all(|c| c.is_ascii_graphic())
        };
        Some(prefix == "arn" && partition_ok && service == "iam" && region.is_empty() && account_ok && resource_ok)
    };
    arn.len() <= 2048 && check().unwrap_or(false)
}

/// The trust policy a role needs so that `principal` (the identity the daemon runs as: a role or
/// user ARN, or an account id) may assume it, with the external id condition when one is given.
pub fn document(principal: &str, external_id: Option<&str>) -> Result<Value, TrustError> {
    let account_id = principal.len() == 12 && principal.bytes().all(|b| b.is_ascii_digit());
    if !account_id && !is_iam_arn(principal, &["role/", "user/", "root"]) {
        return Err(TrustError::Principal(principal.to_string()));
    }
    let mut statement = json!({
        "Effect": "Allow",
        "Principal": {"AWS": principal},
        // SetSourceIdentity: the daemon's API names the tenant and subject who asked in each
        // session (`sourceIdentity`), which STS refuses unless the trust allows it.
        "Action": ["sts:AssumeRole", "sts:SetSourceIdentity"],
    });
    if let Some(id) = external_id {
        check_external_id(id)?;
        statement["Condition"] = json!({"StringEquals": {"sts:ExternalId": id}});
    }
    Ok(json!({"Version": "2012-10-17", "Statement": [statement]}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trust_policy_lets_the_principal_assume_the_role_with_its_external_id_only() {
        let p = document("arn:aws:iam::999999999999:role/daemon", Some("team-a")).unwrap();
        let s = &p["Statement"][0];
        assert_eq!(s["Action"], json!(["sts:AssumeRole", "sts:SetSourceIdentity"]));
        assert_eq!(s["Principal"]["AWS"], "arn:aws:iam::999999999999:role/daemon");
        assert_eq!(s["Condition"]["StringEquals"]["sts:ExternalId"], "team-a");
        let plain = document("arn:aws:iam::999999999999:root", None).unwrap();
        assert!(plain["Statement"][0].get("Condition").is_none());
        assert!(document("999999999999", None).is_ok());
        for bad in ["arn:aws:sts::999999999999:assumed-role/daemon/s", "daemon", "arn:aws:iam::999999999999:group/g"] {
            assert_eq!(document(bad, None).unwrap_err(), TrustError::Principal(bad.to_string()));
        }
        assert_eq!(document("999999999999", Some("x")).unwrap_err(), TrustError::ExternalId(1));
    }
}
