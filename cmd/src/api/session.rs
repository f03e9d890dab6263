//! The page's sessions on the API's listener: a random cookie for each sign-in, kept in memory
//! (by its SHA-256) with the `Authorization` it was made from, which is authenticated again at
//! every request — a token taken out of the tenants file, or an OIDC token past its expiry, ends
//! its session at once. Never journaled or logged; a restart signs everyone out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::tenants::sha256_hex;

/// The cookie's name.
pub const COOKIE: &str = "infraflow_session";
/// How long a session lasts, however active (a signed-in browser left open is signed out).
const LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at most; past it the oldest is dropped (a flood of sign-ins holds no more).
const MAX_SESSIONS: usize = 10_000;

#[derive(Default)]
pub struct Sessions {
    by_hash: Mutex<HashMap<String, (String, Instant)>>,
}

impl Sessions {
    /// A new session for `authorization`: the cookie's value.
    pub fn open(&self, authorization: String) -> String {
        let mut bytes = [0u8; 32];
        aws_lc_rs::rand::fill(&mut bytes).expect("the system's random numbers");
        let cookie = URL_SAFE_NO_PAD.encode(bytes);
        let mut map = self.by_hash.lock().unwrap();
        map.retain(|_, (_, made)| made.elapsed() < LIFETIME);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map.iter().min_by_key(|(_, (_, made))| *made).map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(sha256_hex(&cookie), (authorization, Instant::now()));
        cookie
    }

    /// The `Authorization` of the session `cookie` names, while it lasts.
    pub fn authorization(&self, cookie: &str) -> Option<String> {
        let map = self.by_hash.lock().unwrap();
        let (authorization, made) = map.get(&sha256_hex(cookie))?;
        (made.elapsed() < LIFETIME).then(|| authorization.clone())
    }

    pub fn close(&self, cookie: &str) {
        self.by_hash.lock().unwrap().remove(&sha256_hex(cookie));
    }
}

/// The session cookie a request carries, if any.
pub fn cookie_of(headers: &hyper::HeaderMap) -> Option<String> {
    headers
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('=').map(str::to_string))
}

/// The token the page's action forms carry in session `cookie`: the daemon's secret and the
/// session, hashed — its own in each session, and nothing a page of another session holds.
pub fn form_token(secret: &str, cookie: &str) -> String {
    sha256_hex(&format!("{secret}:{cookie}"))[..32].to_string()
}

/// `Set-Cookie` for session `cookie`: never read by a script, sent only over TLS and only by
/// this site's own pages.
pub fn set_cookie(cookie: &str) -> String {
    format!("{COOKIE}={cookie}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={}", LIFETIME.as_secs())
}

/// `Set-Cookie` that removes the session cookie.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_holds_its_authorization_until_it_is_closed() {
        let s = Sessions::default();
        let (a, b) = (s.open("Bearer one".into()), s.open("Bearer two".into()));
        assert_ne!(a, b);
        assert_eq!(s.authorization(&a).as_deref(), Some("Bearer one"));
        assert_eq!(s.authorization("made-up"), None);
        s.close(&a);
        assert_eq!(s.authorization(&a), None);
        assert_eq!(s.authorization(&b).as_deref(), Some("Bearer two"));
    }

    #[test]
    fn the_cookie_is_found_among_others_and_set_for_this_site_only() {
        let mut h = hyper::HeaderMap::new();
        h.insert(hyper::header::COOKIE, "theme=dark; infraflow_session=abc; x=y".parse().unwrap());
        assert_eq!(cookie_of(&h).as_deref(), Some("abc"));
        let set = set_cookie("abc");
        for attr in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
            assert!(set.contains(attr), "{set}");
        }
    }
}
