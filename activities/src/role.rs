//! The role a workflow acts through: an IAM role of (usually) another account, assumed with the
//! process's own credentials, so that one daemon serves clusters in many accounts.

use serde::{Deserialize, Serialize};

/// A role to assume, as a workflow's input names it. Never a credential: the session's keys live
/// in the SDK's identity cache only, refreshed before they expire.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssumedRole {
    pub arn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    /// STS's `SourceIdentity`: who asked for the session, set once and carried into every
    /// CloudTrail record of it (the role's trust must allow `sts:SetSourceIdentity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_identity: Option<String>,
}

/// The roles a daemon may act through (`daemon --allow-role`): whoever can submit to its journal
/// can name any role ARN, and the daemon's principal is the one the role trusts — without this
/// list one team's submitter could act in every account that trusts the daemon (review F10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleAllowList {
    /// ARN patterns, `*` matching any run of characters (`arn:aws:iam::111111111111:role/*`).
    pub patterns: Vec<String>,
    /// What to say of a refused role: where the list came from.
    pub said: String,
    /// The ExternalId the daemon itself gives an AssumeRole of a role matching each pattern (a
    /// tenant's, from the tenants file), whatever the workflow's input says: the first match.
    pub external_ids: Vec<(String, String)>,
}

impl RoleAllowList {
    /// The ExternalId the daemon gives role `arn`, if its configuration sets one.
    pub fn external_id_for(&self, arn: &str) -> Option<&str> {
        self.external_ids.iter().find(|(p, _)| glob(p, arn)).map(|(_, id)| id.as_str())
    }

    /// Whether `arn` matches one of the patterns.
    pub fn allows(&self, arn: &str) -> bool {
        self.patterns.iter().any(|p| glob(p, arn))
    }

    /// The one line a refused role's workflow pauses with.
    pub fn refusal(&self, arn: &str) -> String {
        format!(
            "role {arn} is not one this daemon may act through ({}): start the daemon with --allow-role naming it, or submit under an allowed role",
            self.said
        )
    }
}

/// `*` matches any run of characters; everything else itself.
fn glob(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || !s[first.len()..].ends_with(last) || s.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// The session name when the input gives none: what CloudTrail shows as the role's user.
pub const DEFAULT_SESSION_NAME: &str = "infraflow";

impl AssumedRole {
    /// The role of an input's `roleARN`, `externalID`, `sessionName` and `sourceIdentity`: None
    /// without a role; an error (one line, naming the field) for a value AWS would refuse.
    pub fn from_input(
        arn: Option<&str>,
        external_id: Option<&str>,
        session_name: Option<&str>,
        source_identity: Option<&str>,
    ) -> Result<Option<AssumedRole>, String> {
        let Some(arn) = arn else {
            if external_id.is_some() || session_name.is_some() || source_identity.is_some() {
                return Err("externalID, sessionName and sourceIdentity need a roleARN: the role they are for".into());
            }
            return Ok(None);
        };
        account_of(arn).ok_or_else(|| {
            format!("roleARN {arn:?} is not a role's ARN: expected arn:<partition>:iam::<12-digit account>:role/<name>")
        })?;
        if let Some(id) = external_id {
            let ok = |c: char| c.is_ascii_alphanumeric() || "+=,.@:/-_".contains(c);
            if !(2..=1224).contains(&id.len()) || !id.chars().all(ok) {
                return Err("externalID must be 2 to 1224 characters of letters, digits and +=,.@:/-_".into());
            }
        }
        if let Some(name) = session_name {
            let ok = |c: char| c.is_ascii_alphanumeric() || "+=,.@-_".contains(c);
            if !(2..=64).contains(&name.len()) || !name.chars().all(ok) {
                return Err(format!("sessionName {name:?} must be 2 to 64 characters of letters, digits and +=,.@-_"));
            }
        }
        if let Some(who) = source_identity
            && !is_source_identity(who)
        {
            return Err(format!(
                "sourceIdentity {who:?} must be 2 to 64 characters of letters, digits and +=,.@-_, not starting with aws:"
            ));
        }
        Ok(Some(AssumedRole {
            arn: arn.to_string(),
            external_id: external_id.map(str::to_string),
            session_name: session_name.map(str::to_string),
            source_identity: source_identity.map(str::to_string),
        }))
    }

    /// The account the role belongs to: where what the workflow makes lives.
    pub fn account(&self) -> &str {
        account_of(&self.arn).unwrap_or_default()
    }

    pub fn session_name(&self) -> &str {
        self.session_name.as_deref().unwrap_or(DEFAULT_SESSION_NAME)
    }
}

/// Whether STS takes `s` as a `SourceIdentity`: 2–64 of letters, digits and `+=,.@-_`, and not
/// the `aws:` prefix AWS keeps for itself.
pub fn is_source_identity(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || "+=,.@-_".contains(c);
    (2..=64).contains(&s.len()) && s.chars().all(ok) && !s.to_ascii_lowercase().starts_with("aws:")
}

/// The `SourceIdentity` naming `subject` of `tenant` (`<tenant>,<subject>`), made to fit STS's
/// rule: any other character becomes `-`, and it is cut to 64.
pub fn source_identity_of(tenant: &str, subject: &str) -> String {
    let ok = |c: char| c.is_ascii_alphanumeric() || "+=,.@-_".contains(c);
    let mut s: String = format!("{tenant},{subject}").chars().map(|c| if ok(c) { c } else { '-' }).take(64).collect();
    while s.len() < 2 {
        s.push('-');
    }
    s
}

/// The account of a role's ARN (`arn:aws:iam::111111111111:role/path/name`), if it is one.
fn account_of(arn: &str) -> Option<&str> {
    let mut parts = arn.splitn(6, ':');
    let (arn_, partition, service, region, account, resource) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let name = resource.strip_prefix("role/")?.rsplit('/').next()?;
    let name_ok =
        (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "+=,.@-_".contains(c));
    let fits = arn_ == "arn"
        && partition.starts_with("aws")
        && service == "iam"
        && region.is_empty()
        && account.len() == 12
        && account.chars().all(|c| c.is_ascii_digit())
        && name_ok;
    fits.then_some(account)
}

#[cfg(test)]
mod allow_tests {
    use super::*;

    #[test]
    fn an_allow_list_matches_arn_patterns() {
        let l = RoleAllowList {
            patterns: vec!["arn:aws:iam::111111111111:role/*".into()],
            said: String::new(),
            external_ids: Vec::new(),
        };
        assert!(l.allows("arn:aws:iam::111111111111:role/infraflow"));
        assert!(!l.allows("arn:aws:iam::222222222222:role/infraflow"));
        let any = RoleAllowList {
            patterns: vec!["arn:aws:iam::*:role/infraflow".into()],
            said: String::new(),
            external_ids: Vec::new(),
        };
        assert!(any.allows("arn:aws:iam::222222222222:role/infraflow"));
        assert!(!any.allows("arn:aws:iam::222222222222:role/admin"));
        assert!(
            !RoleAllowList { patterns: vec![], said: String::new(), external_ids: Vec::new() }
                .allows("arn:aws:iam::1:role/x")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_arn_names_its_account() {
        let r = AssumedRole::from_input(Some("arn:aws:iam::111111111111:role/ops/infraflow"), None, None, None);
        let r = r.unwrap().unwrap();
        assert_eq!(r.account(), "111111111111");
        assert_eq!(r.session_name(), DEFAULT_SESSION_NAME);
    }

    #[test]
    fn what_is_not_a_role_arn_is_refused_naming_the_field() {
        for bad in [
            "arn:aws:iam::11111111111:role/x",
            "arn:aws:iam::111111111111:user/x",
            "arn:aws:sts::111111111111:role/x",
            "111111111111",
            "arn:aws:iam::111111111111:role/",
            "arn:aws:iam:us-east-1:111111111111:role/x",
        ] {
            let e = AssumedRole::from_input(Some(bad), None, None, None).unwrap_err();
            assert!(e.starts_with("roleARN"), "{bad}: {e}");
        }
        let e = AssumedRole::from_input(None, Some("abc"), None, None).unwrap_err();
        assert!(e.contains("need a roleARN"), "{e}");
        let e = AssumedRole::from_input(Some("arn:aws:iam::111111111111:role/x"), None, Some("has space"), None);
        assert!(e.unwrap_err().starts_with("sessionName"));
    }
}

#[cfg(test)]
mod source_identity_tests {
    use super::*;

    #[test]
    fn a_tenant_and_subject_become_a_source_identity_sts_takes() {
        assert_eq!(source_identity_of("acme", "alice@example.com"), "acme,alice@example.com");
        let odd = source_identity_of("acme", "auth0|5f7c/ü ok");
        assert!(is_source_identity(&odd), "{odd}");
        assert_eq!(odd, "acme,auth0-5f7c---ok");
        assert_eq!(source_identity_of("t", &"x".repeat(100)).len(), 64);
        assert!(is_source_identity(&source_identity_of("", "")));
    }

    #[test]
    fn a_source_identity_sts_would_refuse_is_refused_naming_the_field() {
        let arn = Some("arn:aws:iam::111111111111:role/x");
        for bad in ["a", "has space", "aws:me", &"x".repeat(65)] {
            let e = AssumedRole::from_input(arn, None, None, Some(bad)).unwrap_err();
            assert!(e.starts_with("sourceIdentity"), "{bad}: {e}");
        }
        let r = AssumedRole::from_input(arn, None, None, Some("acme,alice")).unwrap().unwrap();
        assert_eq!(r.source_identity.as_deref(), Some("acme,alice"));
        let e = AssumedRole::from_input(None, None, None, Some("acme,alice")).unwrap_err();
        assert!(e.contains("need a roleARN"), "{e}");
    }
}
