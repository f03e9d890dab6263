//! Who a request is: its `Authorization: Bearer` token, either one of a tenant's tokens
//! (compared by SHA-256, in constant time) or an OIDC token the configured issuer signed
//! (`jwt`), whose subject a tenant names. A client that keeps failing is slowed: past
//! `FAILURES_ALLOWED` failures in a minute it gets 429 until the minute is over.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::jwt::Verifier;
use super::problem::Problem;
use super::tenants::{Tenant, Tenants};

const FAILURES_ALLOWED: u32 = 20;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// A request's authenticated caller.
#[derive(Clone, Debug)]
pub struct Authenticated {
    pub tenant: Tenant,
    /// The OIDC subject, or `token` for a tenant's bearer token.
    pub subject: String,
}

impl Authenticated {
    /// `<tenant>/<subject>`, as journaled with each submission.
    pub fn submitter(&self) -> String {
        format!("{}/{}", self.tenant.name, self.subject)
    }

    /// `<tenant>,<subject>` as STS takes a SourceIdentity: what CloudTrail shows of the caller.
    pub fn source_identity(&self) -> String {
        infraflow_activities::role::source_identity_of(&self.tenant.name, &self.subject)
    }
}

pub struct Authenticator {
    pub tenants: Tenants,
    pub oidc: Option<Verifier>,
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Authenticator {
    pub fn new(tenants: Tenants, oidc: Option<Verifier>) -> Authenticator {
        Authenticator { tenants, oidc, failures: Mutex::new(HashMap::new()) }
    }

    /// The caller of a request from `client` with `authorization` (the header's value; None for
    /// none, or for two: which would it be?).
    pub async fn authenticate(&self, client: IpAddr, authorization: Option<&str>) -> Result<Authenticated, Problem> {
        if let Some(wait) = self.slowed(client) {
            return Err(Problem {
                retry_after: Some(wait.as_secs().max(1)),
                ..Problem::new(
                    hyper::StatusCode::TOO_MANY_REQUESTS,
                    "too many failed authentications from this client; try again after Retry-After seconds",
                )
            });
        }
        let r = self.identify(authorization).await;
        if r.is_err() {
            self.failed(client);
        }
        r
    }

    pub(super) async fn identify(&self, authorization: Option<&str>) -> Result<Authenticated, Problem> {
        let Some(value) = authorization else {
            return Err(Problem::unauthorized("no Authorization header: send `Authorization: Bearer TOKEN`"));
        };
        // The scheme's name is case-insensitive (RFC 9110 §11.1).
        let token = match value.trim().split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
            _ => "",
        };
        if token.is_empty() || token.contains(char::is_whitespace) {
            return Err(Problem::unauthorized("the Authorization header is not `Bearer TOKEN`"));
        }
        if token.matches('.').count() == 2 {
            let Some(oidc) = &self.oidc else {
                return Err(Problem::unauthorized("an OIDC token, but this daemon trusts no issuer (--oidc-issuer)"));
            };
            let subject = oidc.verify(token).await.map_err(|e| Problem::unauthorized(format!("token refused: {e}")))?;
            let tenant = self
                .tenants
                .by_subject(&subject)
                .ok_or_else(|| Problem::unauthorized("token refused: its subject belongs to no tenant"))?;
            return Ok(Authenticated { tenant, subject });
        }
        match self.tenants.by_token(token) {
            Some(tenant) => Ok(Authenticated { tenant, subject: "token".into() }),
            None => Err(Problem::unauthorized("token refused: it is no tenant's")),
        }
    }

    fn slowed(&self, client: IpAddr) -> Option<Duration> {
        let failures = self.failures.lock().unwrap();
        let (since, n) = failures.get(&client)?;
        let left = FAILURE_WINDOW.checked_sub(since.elapsed())?;
        (*n >= FAILURES_ALLOWED).then_some(left)
    }

    fn failed(&self, client: IpAddr) {
        let mut failures = self.failures.lock().unwrap();
        if failures.len() > 10_000 {
            failures.retain(|_, (since, _)| since.elapsed() < FAILURE_WINDOW);
        }
        let entry = failures.entry(client).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= FAILURE_WINDOW {
            *entry = (Instant::now(), 0);
        }
        entry.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator() -> (tempfile::TempDir, Authenticator) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.json");
        let hash = super::super::tenants::sha256_hex("secret-1");
        let file = serde_json::json!({"tenants": [{"name": "a", "tokenSha256": [hash], "permission": "read"}]});
        std::fs::write(&p, file.to_string()).unwrap();
        let tenants = Tenants::load(&p).unwrap();
        (dir, Authenticator::new(tenants, None))
    }

    #[tokio::test]
    async fn the_scheme_is_case_insensitive_and_anything_else_around_the_token_is_refused() {
        let (_d, a) = authenticator();
        for good in ["Bearer secret-1", "bearer secret-1", "BEARER  secret-1 "] {
            assert_eq!(a.identify(Some(good)).await.map(|w| w.tenant.name).ok().as_deref(), Some("a"), "{good}");
        }
        for bad in ["Basic secret-1", "Bearer", "Bearer secret-1 extra", "secret-1", "Bearer secret-2"] {
            assert!(a.identify(Some(bad)).await.is_err(), "{bad}");
        }
        assert!(a.identify(None).await.is_err());
    }
}
