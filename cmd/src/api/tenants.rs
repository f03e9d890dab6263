//! The tenants file (`daemon --tenants FILE`): who may call the API, with which token or OIDC
//! subject, and what each may do and name — permission, roles, accounts, regions, infraID
//! prefixes, how many unfinished workflows. Read at start and again on SIGHUP; a file that no
//! longer parses keeps the tenants read before (said in the log), never none.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::Deserialize;

/// What a tenant may do, each level including the one below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// List, status, history, wait, check, the teardown plan.
    Read,
    /// Read, and submit.
    Submit,
    /// Submit, and cancel and retry.
    Operate,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tenant {
    pub name: String,
    /// SHA-256 of each bearer token, hex (`printf %s TOKEN | sha256sum`): the file holds no token.
    #[serde(default)]
    pub token_sha256: Vec<String>,
    /// OIDC subjects (`sub`) of tokens the configured issuer signs.
    #[serde(default)]
    pub subjects: Vec<String>,
    pub permission: Permission,
    /// Role ARN patterns (`*` matches any run) a submission may name as its `roleARN`.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Whether a submission may name no role: the daemon's own identity then acts for it.
    #[serde(default)]
    pub daemon_identity: bool,
    /// Accounts its roles may be in (every account its roles allow, if empty).
    #[serde(default)]
    pub accounts: Vec<String>,
    /// Regions it may act in (any, if empty).
    #[serde(default)]
    pub regions: Vec<String>,
    /// How its clusters' infraIDs start (any, if empty).
    #[serde(default, rename = "infraIDPrefixes")]
    pub infra_id_prefixes: Vec<String>,
    /// The ExternalId the daemon gives an AssumeRole of one of its `roles`, whatever an input
    /// says (an input naming one is refused). Read at start: a change needs a restart.
    #[serde(default)]
    pub external_id: Option<String>,
    /// How many of its workflows may be unfinished at once (no limit, if absent).
    #[serde(default)]
    pub max_unfinished: Option<usize>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantsFile {
    tenants: Vec<Tenant>,
}

/// The tenants as last read, shared by every request.
#[derive(Clone)]
pub struct Tenants {
    path: PathBuf,
    now: Arc<RwLock<Arc<Vec<Tenant>>>>,
}

impl Tenants {
    /// Reads `path`: an error names the file and what is wrong with it.
    pub fn load(path: &Path) -> Result<Tenants, String> {
        let tenants = read(path)?;
        Ok(Tenants { path: path.to_path_buf(), now: Arc::new(RwLock::new(Arc::new(tenants))) })
    }

    /// Reads the file again; on an error the tenants before stay, and the error is returned.
    pub fn reload(&self) -> Result<usize, String> {
        let tenants = read(&self.path)?;
        let n = tenants.len();
        *self.now.write().unwrap() = Arc::new(tenants);
        Ok(n)
    }

    pub fn all(&self) -> Arc<Vec<Tenant>> {
        self.now.read().unwrap().clone()
    }

    /// The tenant a bearer token's SHA-256 belongs to. Every hash of every tenant is compared,
    /// in constant time each, so the time taken says nothing of which one (nearly) matched.
    pub fn by_token(&self, token: &str) -> Option<Tenant> {
        let digest = sha256_hex(token);
        let mut found = None;
        for t in self.all().iter() {
            for h in &t.token_sha256 {
                if constant_time_eq(h.to_ascii_lowercase().as_bytes(), digest.as_bytes()) {
                    found = Some(t.clone());
                }
            }
        }
        found
    }

    /// The tenant an OIDC subject belongs to.
    pub fn by_subject(&self, subject: &str) -> Option<Tenant> {
        self.all().iter().find(|t| t.subjects.iter().any(|s| s == subject)).cloned()
    }
}

fn read(path: &Path) -> Result<Vec<Tenant>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read tenants file {}: {e}", path.display()))?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    let file: TenantsFile = serde_path_to_error::deserialize(de)
        .map_err(|e| format!("tenants file {}: {} at {}", path.display(), e.inner(), e.path()))?;
    check(&file.tenants).map_err(|e| format!("tenants file {}: {e}", path.display()))?;
    Ok(file.tenants)
}

/// What the file must hold beyond its shape: names unique and plain, hashes that are hashes,
/// and no token or subject given to two tenants (which of them would it be?).
fn check(tenants: &[Tenant]) -> Result<(), String> {
    let mut seen_names = std::collections::BTreeSet::new();
    let mut seen_keys = std::collections::BTreeMap::new();
    for (i, t) in tenants.iter().enumerate() {
        if t.name.is_empty() || !t.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(format!("tenants[{i}].name {:?}: use letters, digits, - and _", t.name));
        }
        if !seen_names.insert(t.name.clone()) {
            return Err(format!("tenants[{i}].name {:?} is given twice", t.name));
        }
        for h in &t.token_sha256 {
            if h.len() != 64 || !h.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!(
                    "tenants[{i}].tokenSha256: {:?} is not a SHA-256 in hex (printf %s TOKEN | sha256sum)",
                    h.chars().take(12).collect::<String>()
                ));
            }
        }
        let keys =
            t.token_sha256.iter().map(|h| h.to_ascii_lowercase()).chain(t.subjects.iter().map(|s| format!("sub:{s}")));
        for k in keys {
            if let Some(other) = seen_keys.insert(k, t.name.clone())
                && other != t.name
            {
                return Err(format!("tenants {other} and {} share a token or subject", t.name));
            }
        }
        for r in &t.roles {
            if let Some(other) = seen_keys.insert(format!("role:{r}"), t.name.clone())
                && other != t.name
            {
                return Err(format!("tenants {other} and {} both name role {r}: a role is one tenant's", t.name));
            }
            if !r.starts_with("arn:") {
                return Err(format!(
                    "tenants[{i}].roles: {r:?} is not a role ARN pattern (arn:aws:iam::ACCOUNT:role/NAME)"
                ));
            }
        }
    }
    Ok(())
}

pub fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(s.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal bytes, compared without an early exit on the first difference.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: serde_json::Value) -> Result<Vec<Tenant>, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.json");
        std::fs::write(&p, json.to_string()).unwrap();
        read(&p)
    }

    #[test]
    fn a_token_given_to_two_tenants_is_refused_naming_both() {
        let h = sha256_hex("secret");
        let e = file(serde_json::json!({"tenants": [
            {"name": "a", "tokenSha256": [h], "permission": "read"},
            {"name": "b", "tokenSha256": [h], "permission": "read"}]}))
        .unwrap_err();
        assert!(e.contains("tenants a and b share a token"), "{e}");
    }

    #[test]
    fn an_unknown_field_or_permission_names_where_it_is() {
        let e = file(serde_json::json!({"tenants": [{"name": "a", "permission": "admin"}]})).unwrap_err();
        assert!(e.contains("tenants[0].permission"), "{e}");
        let e = file(serde_json::json!({"tenants": [{"name": "a", "permission": "read", "role": []}]})).unwrap_err();
        assert!(e.contains("unknown field `role`"), "{e}");
    }

    #[test]
    fn permissions_are_ordered_read_submit_operate() {
        assert!(Permission::Read < Permission::Submit && Permission::Submit < Permission::Operate);
    }
}
