//! OIDC tokens the daemon trusts (`--oidc-issuer`, `--oidc-audience`, `--oidc-jwks FILE|URL`): a
//! JWT signed RS256 or ES256 by a key of the issuer's JWKS, for this audience, within its
//! validity. Anything else — `alg: none`, HMAC, an unknown key, a tampered payload, another
//! issuer or audience, expired or not yet valid — is refused, naming which. A key id the JWKS
//! does not hold reads it again (a rotation), a file at most once a second, a URL at most once
//! in five; a URL is also read again every fifteen minutes.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::Value;

/// How far apart the issuer's clock and ours may be for `exp` and `nbf`.
const LEEWAY_SECS: i64 = 60;
/// How often an unknown key id may make the JWKS file be read again.
const RELOAD_AT_MOST_EVERY: Duration = Duration::from_secs(1);
/// How often an unknown key id may make the JWKS URL be fetched again: a stream of made-up key
/// ids must not become a stream of requests to the issuer.
const FETCH_AT_MOST_EVERY: Duration = Duration::from_secs(5);
/// How often a JWKS URL is fetched again whatever the tokens say (`api::fetch_jwks_periodically`).
pub const FETCH_EVERY: Duration = Duration::from_secs(15 * 60);
/// The longest a JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

/// Where the issuer's keys are: a file the operator keeps fresh, or the issuer's `jwks_uri`.
#[derive(Clone, Debug)]
pub enum JwksSource {
    File(PathBuf),
    /// `https://` (or `http://` to loopback), trusting the system's roots (`SSL_CERT_FILE`).
    Url(String),
}

impl JwksSource {
    /// `--oidc-jwks`: an `https://` URL (or `http://` to loopback), else a file's path.
    pub fn parse(s: &str) -> Result<JwksSource, String> {
        if s.trim().is_empty() {
            return Err("--oidc-jwks is empty: give the JWKS file or the issuer's https:// jwks_uri".into());
        }
        if !s.contains("://") {
            return Ok(JwksSource::File(PathBuf::from(s)));
        }
        crate::http_client::Server::new("--oidc-jwks", s, None, None).map_err(|f| f.message)?;
        Ok(JwksSource::Url(s.to_string()))
    }

    fn reread_at_most_every(&self) -> Duration {
        match self {
            JwksSource::File(_) => RELOAD_AT_MOST_EVERY,
            JwksSource::Url(_) => FETCH_AT_MOST_EVERY,
        }
    }

    async fn read(&self) -> Result<Vec<Jwk>, String> {
        match self {
            JwksSource::File(path) => read_jwks(path),
            JwksSource::Url(url) => fetch_jwks(url).await,
        }
    }
}

pub struct Verifier {
    issuer: String,
    audience: String,
    jwks: JwksSource,
    /// The keys, and when they were last read (or last tried).
    keys: Mutex<(Vec<Jwk>, Instant)>,
}

impl Verifier {
    /// A verifier with the JWKS read now: a source that cannot be read is the operator's error.
    pub async fn new(issuer: String, audience: String, jwks: JwksSource) -> Result<Verifier, String> {
        let keys = jwks.read().await?;
        Ok(Verifier { issuer, audience, jwks, keys: Mutex::new((keys, Instant::now())) })
    }

    /// Whether the keys come from a URL (and so are fetched again every `FETCH_EVERY`).
    pub fn fetched(&self) -> bool {
        matches!(self.jwks, JwksSource::Url(_))
    }

    /// Reads the JWKS again (SIGHUP, the periodic fetch); on an error the keys before stay.
    pub async fn reload(&self) -> Result<usize, String> {
        let keys = self.jwks.read().await?;
        let n = keys.len();
        *self.keys.lock().unwrap() = (keys, Instant::now());
        Ok(n)
    }

    /// The token's subject, if the issuer signed it for this audience and it is valid now.
    pub async fn verify(&self, token: &str) -> Result<String, String> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
        self.verify_at(token, now).await
    }

    async fn verify_at(&self, token: &str, now: i64) -> Result<String, String> {
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err("not a JWT (three base64url parts)".into());
        };
        let header: Value = decode_json(h).map_err(|e| format!("its header {e}"))?;
        // A critical extension this verifier does not know must be refused (RFC 7515 §4.1.11).
        if header.get("crit").is_some() {
            return Err("its header names critical extensions (crit), which are not supported".into());
        }
        let alg = header["alg"].as_str().unwrap_or_default();
        if alg != "RS256" && alg != "ES256" {
            return Err(format!("alg {alg:?} is not accepted (RS256 or ES256 only)"));
        }
        let signature = URL_SAFE_NO_PAD.decode(s).map_err(|_| "its signature is not base64url".to_string())?;
        let kid = header["kid"].as_str();
        let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
        if !self.signed_by_a_key(alg, kid, signed, &signature, false).await
            && !self.signed_by_a_key(alg, kid, signed, &signature, true).await
        {
            return Err(match kid {
                Some(k) => format!("no key {k:?} of the issuer's JWKS signed it"),
                None => "no key of the issuer's JWKS signed it".into(),
            });
        }
        let claims: Value = decode_json(p).map_err(|e| format!("its payload {e}"))?;
        if claims["iss"].as_str() != Some(self.issuer.as_str()) {
            return Err(format!("issuer {} is not {:?}", claims["iss"], self.issuer));
        }
        let audience_ok = match &claims["aud"] {
            Value::String(a) => a == &self.audience,
            Value::Array(list) => list.iter().any(|a| a.as_str() == Some(self.audience.as_str())),
            _ => false,
        };
        if !audience_ok {
            return Err(format!("audience {} does not include {:?}", claims["aud"], self.audience));
        }
        let Some(exp) = claims["exp"].as_i64() else { return Err("it has no expiry (exp)".into()) };
        if now > exp + LEEWAY_SECS {
            return Err(format!("it expired {}s ago", now - exp));
        }
        match &claims["nbf"] {
            Value::Null => {}
            v => match v.as_i64() {
                Some(nbf) if now + LEEWAY_SECS < nbf => {
                    return Err(format!("it is not valid for another {}s (nbf)", nbf - now));
                }
                Some(_) => {}
                None => return Err("its nbf is not a number of seconds".into()),
            },
        }
        match claims["sub"].as_str() {
            Some(sub) if !sub.is_empty() => Ok(sub.to_string()),
            _ => Err("it names no subject (sub)".into()),
        }
    }

    /// Whether a key of the JWKS (`fresh`: read again first, unless read too recently) of
    /// `alg`, and of `kid` when the token names one, verifies `signature` over `signed`.
    async fn signed_by_a_key(
        &self,
        alg: &str,
        kid: Option<&str>,
        signed: &[u8],
        signature: &[u8],
        fresh: bool,
    ) -> bool {
        if fresh {
            // Claimed before the read, so that the requests of one rotation read it once.
            {
                let mut keys = self.keys.lock().unwrap();
                if keys.1.elapsed() < self.jwks.reread_at_most_every() {
                    return false;
                }
                keys.1 = Instant::now();
            }
            match self.jwks.read().await {
                Ok(k) => *self.keys.lock().unwrap() = (k, Instant::now()),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the JWKS again; keeping the keys read before");
                    return false;
                }
            }
        }
        let keys = self.keys.lock().unwrap().0.clone();
        keys.iter()
            .filter(|k| kid.is_none_or(|kid| k.kid.as_deref() == Some(kid)))
            .filter(|k| k.alg.as_deref().is_none_or(|a| a == alg))
            .any(|k| verifies(k, alg, signed, signature))
    }
}

fn verifies(k: &Jwk, alg: &str, signed: &[u8], sig: &[u8]) -> bool {
    let b64 = |v: &Option<String>| v.as_deref().and_then(|s| URL_SAFE_NO_PAD.decode(s).ok());
    match (alg, k.kty.as_str()) {
        ("RS256", "RSA") => {
            let (Some(n), Some(e)) = (b64(&k.n), b64(&k.e)) else { return false };
            RsaPublicKeyComponents { n: &n, e: &e }.verify(&signature::RSA_PKCS1_2048_8192_SHA256, signed, sig).is_ok()
        }
        ("ES256", "EC") if k.crv.as_deref() == Some("P-256") => {
            let (Some(x), Some(y)) = (b64(&k.x), b64(&k.y)) else { return false };
            if x.len() != 32 || y.len() != 32 {
                return false;
            }
            let point: Vec<u8> = [&[4u8][..], &x, &y].concat();
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point).verify(signed, sig).is_ok()
        }
        _ => false,
    }
}

fn decode_json(part: &str) -> Result<Value, String> {
    let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|_| "is not base64url".to_string())?;
    serde_json::from_slice(&bytes).map_err(|_| "is not JSON".to_string())
}

async fn fetch_jwks(url: &str) -> Result<Vec<Jwk>, String> {
    let server =
        crate::http_client::Server::new("--oidc-jwks", url, None, None).map_err(|f| f.message)?.within(FETCH_TIMEOUT);
    let reply = server.call("GET", &server.path, None).await.map_err(|f| format!("JWKS {url}: {}", f.message))?;
    if reply.status != 200 {
        return Err(format!("JWKS {url} answered {}", reply.status));
    }
    // Whatever the issuer answered is never copied whole into a message (it may be megabytes).
    let answered = || {
        let text = reply.body.to_string();
        let cut: String = text.chars().take(80).collect();
        if cut.len() < text.len() { format!("{cut}…") } else { cut }
    };
    let jwks: Jwks = serde_json::from_value(reply.body.clone())
        .map_err(|_| format!("JWKS {url} answered what is not a JWKS ({{\"keys\": […]}}): {}", answered()))?;
    Ok(jwks.keys)
}

fn read_jwks(path: &std::path::Path) -> Result<Vec<Jwk>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read JWKS {}: {e}", path.display()))?;
    let jwks: Jwks = serde_json::from_str(&text).map_err(|e| format!("JWKS {}: {e}", path.display()))?;
    Ok(jwks.keys)
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    use serde_json::json;

    use super::*;

    struct Issuer {
        key: EcdsaKeyPair,
        dir: tempfile::TempDir,
    }

    impl Issuer {
        fn new() -> Issuer {
            let key = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let i = Issuer { key, dir };
            i.publish("k1");
            i
        }

        fn publish(&self, kid: &str) {
            let point = self.key.public_key().as_ref();
            let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..65])}]});
            std::fs::write(self.dir.path().join("jwks.json"), jwks.to_string()).unwrap();
        }

        async fn verifier(&self) -> Verifier {
            let file = JwksSource::File(self.dir.path().join("jwks.json"));
            Verifier::new("https://idp".into(), "infraflow".into(), file).await.unwrap()
        }

        fn token(&self, header: Value, claims: Value) -> String {
            let h = URL_SAFE_NO_PAD.encode(header.to_string());
            let p = URL_SAFE_NO_PAD.encode(claims.to_string());
            let sig = self.key.sign(&SystemRandom::new(), format!("{h}.{p}").as_bytes()).unwrap();
            format!("{h}.{p}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
        }
    }

    fn claims() -> Value {
        json!({"iss": "https://idp", "aud": "infraflow", "sub": "alice", "exp": 2_000, "nbf": 900})
    }

    #[tokio::test]
    async fn a_token_of_the_issuer_for_this_audience_names_its_subject() {
        let i = Issuer::new();
        let t = i.token(json!({"alg": "ES256", "kid": "k1"}), claims());
        assert_eq!(i.verifier().await.verify_at(&t, 1_000).await, Ok("alice".to_string()));
    }

    #[tokio::test]
    async fn each_wrong_token_is_refused_naming_why() {
        let i = Issuer::new();
        let v = i.verifier().await;
        let h = json!({"alg": "ES256", "kid": "k1"});
        let refused = async |t: &str, now: i64, why: &str| {
            let e = v.verify_at(t, now).await.unwrap_err();
            assert!(e.contains(why), "{e} (expected {why})");
        };
        refused(&i.token(h.clone(), claims()), 2_100, "expired").await;
        refused(&i.token(h.clone(), claims()), 800, "not valid for another").await;
        refused(
            &i.token(h.clone(), json!({"iss": "https://other", "aud": "infraflow", "sub": "a", "exp": 2_000})),
            1_000,
            "issuer",
        )
        .await;
        refused(
            &i.token(h.clone(), json!({"iss": "https://idp", "aud": "else", "sub": "a", "exp": 2_000})),
            1_000,
            "audience",
        )
        .await;
        refused(&i.token(json!({"alg": "ES256", "kid": "k9"}), claims()), 1_000, "no key \"k9\"").await;
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(json!({"alg": "none"}).to_string()),
            URL_SAFE_NO_PAD.encode(claims().to_string())
        );
        refused(&none, 1_000, "alg \"none\"").await;
        refused(&i.token(json!({"alg": "ES256", "kid": "k1", "crit": ["exp"]}), claims()), 1_000, "crit").await;
        let mut late = claims();
        late["nbf"] = json!("soon");
        refused(&i.token(h.clone(), late), 1_000, "nbf is not a number").await;
        let good = i.token(h, claims());
        let mut parts: Vec<&str> = good.split('.').collect();
        let forged = URL_SAFE_NO_PAD
            .encode(json!({"iss": "https://idp", "aud": "infraflow", "sub": "root", "exp": 2_000}).to_string());
        parts[1] = &forged;
        refused(&parts.join("."), 1_000, "signed it").await;
    }

    #[tokio::test]
    async fn a_rotated_key_is_read_from_the_jwks_file_again() {
        let i = Issuer::new();
        let v = i.verifier().await;
        let old = Issuer {
            key: EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap(),
            dir: tempfile::tempdir().unwrap(),
        };
        // The issuer rotates: a new key under a new id, published in the same file.
        let rotated = Issuer { key: old.key, dir: i.dir };
        rotated.publish("k2");
        tokio::time::sleep(RELOAD_AT_MOST_EVERY).await;
        let t = rotated.token(json!({"alg": "ES256", "kid": "k2"}), claims());
        assert_eq!(v.verify_at(&t, 1_000).await, Ok("alice".to_string()));
    }
}
