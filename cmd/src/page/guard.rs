//! The guards every route of the page passes before it reads or acts: the `Host` it is reached
//! under (a DNS-rebound name is refused), the `Origin` of an action's POST, and the action's
//! token. On the API's listener the page is behind a sign-in instead: its session cookie, which
//! a browser sends only to the name it signed in under and never cross-site, is the guard the
//! Host allow-list is on the operator's loopback page.

use hyper::Request;

/// What the page checks of a request.
pub struct Guard {
    /// The `Host` values the page answers for (`allowed_hosts`): a page reached under any other
    /// name (a DNS-rebound attacker's) answers 421, reads included. Empty behind a sign-in.
    hosts: Vec<String>,
    /// Drawn once per daemon: every action form carries it, every action must.
    pub csrf: String,
    /// The page is the API's, each request signed in (`api::signin`).
    signed_in: bool,
}

impl Guard {
    /// The guard of the operator's page (`daemon --listen`), answering for `hosts`.
    pub fn for_hosts(hosts: Vec<String>) -> Guard {
        Guard { hosts, csrf: random_token(), signed_in: false }
    }

    /// The guard of the page on the API's listener, whose every request is signed in.
    pub fn signed_in() -> Guard {
        Guard { hosts: Vec::new(), csrf: random_token(), signed_in: true }
    }

    pub fn host_allowed<B>(&self, req: &Request<B>) -> bool {
        if self.signed_in {
            return true;
        }
        host(req).is_some_and(|h| self.hosts.contains(&h))
    }

    /// A POST from this page: its `Origin` is one of the page's own names (never merely the
    /// request's own `Host`, which a rebound name sets too — except behind a sign-in, where a
    /// rebound name has no session), or, without an `Origin` (old browsers, curl),
    /// `Sec-Fetch-Site: same-origin`.
    pub fn same_origin<B>(&self, req: &Request<B>) -> bool {
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        match header("origin") {
            Some(origin) => {
                let origin = origin.to_ascii_lowercase();
                let own = if self.signed_in { host(req).into_iter().collect() } else { self.hosts.clone() };
                own.iter().any(|h| origin == format!("http://{h}") || origin == format!("https://{h}"))
            }
            None => header("sec-fetch-site") == Some("same-origin"),
        }
    }

    /// Whether an action's form carries `token` (the page's, or a signed-in viewer's own), in its
    /// body, never the URL: a URL reaches the browser's history and proxies' logs (SAFETY-F393541
    /// F15).
    pub fn token_in(&self, form: &[u8], token: &str) -> bool {
        let form = String::from_utf8_lossy(form);
        form.split('&').find_map(|p| p.strip_prefix("csrf=")) == Some(token)
    }
}

fn host<B>(req: &Request<B>) -> Option<String> {
    req.headers().get("host").and_then(|v| v.to_str().ok()).map(str::to_ascii_lowercase)
}

/// The `Host` header values a page listening on `addr` answers for: the address itself, the
/// loopback names when it is a loopback address, and `names` (`--page-host`), each with the port
/// (and without it on port 80).
pub fn allowed_hosts(addr: std::net::SocketAddr, names: &[String]) -> Vec<String> {
    let literal = match addr.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    let mut bare = vec![literal];
    if addr.ip().is_loopback() {
        bare.extend(["127.0.0.1", "localhost", "[::1]"].map(String::from));
    }
    bare.extend(names.iter().map(|n| n.to_ascii_lowercase()));
    let mut hosts = Vec::new();
    for name in bare {
        hosts.push(format!("{name}:{}", addr.port()));
        if addr.port() == 80 {
            hosts.push(name);
        }
    }
    hosts.dedup();
    hosts
}

/// 128 random bits from the kernel, hex: the page's CSRF token.
fn random_token() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        // No /dev/urandom (a sandbox without /dev): std's hasher keys, drawn from the OS.
        use std::hash::{BuildHasher, Hasher};
        for half in bytes.chunks_mut(8) {
            let h = std::collections::hash_map::RandomState::new().build_hasher().finish();
            half.copy_from_slice(&h.to_le_bytes());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(host: &str, origin: Option<&str>, site: Option<&str>) -> Request<()> {
        let mut b = Request::builder().method("POST").uri("/workflows/x/cancel").header("host", host);
        if let Some(o) = origin {
            b = b.header("origin", o);
        }
        if let Some(s) = site {
            b = b.header("sec-fetch-site", s);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn a_post_from_another_origin_is_refused() {
        let p = Guard::for_hosts(allowed_hosts("127.0.0.1:9".parse().unwrap(), &[]));
        assert!(p.same_origin(&req("127.0.0.1:9", Some("http://127.0.0.1:9"), None)));
        assert!(p.same_origin(&req("127.0.0.1:9", Some("http://localhost:9"), None)));
        assert!(!p.same_origin(&req("127.0.0.1:9", Some("http://evil.example"), Some("same-origin"))));
        assert!(p.same_origin(&req("127.0.0.1:9", None, Some("same-origin"))));
        assert!(!p.same_origin(&req("127.0.0.1:9", None, Some("cross-site"))));
        assert!(!p.same_origin(&req("127.0.0.1:9", None, None)));
    }

    #[test]
    fn a_rebound_name_is_neither_a_host_nor_an_origin_of_the_page() {
        let p = Guard::for_hosts(allowed_hosts("127.0.0.1:9464".parse().unwrap(), &["Ops.Example".into()]));
        let rebound = req("evil.example:9464", Some("http://evil.example:9464"), None);
        assert!(!p.host_allowed(&rebound), "the Host a rebound page sends");
        assert!(!p.same_origin(&rebound), "its Origin matches its Host, and is refused all the same");
        assert!(p.host_allowed(&req("localhost:9464", None, None)));
        assert!(p.host_allowed(&req("ops.example:9464", None, None)), "a --page-host name, any case");
        assert!(!p.host_allowed(&req("127.0.0.1:9465", None, None)), "another port is another origin");
        let wide = allowed_hosts("0.0.0.0:80".parse().unwrap(), &[]);
        assert_eq!(wide, vec!["0.0.0.0:80".to_string(), "0.0.0.0".to_string()], "no loopback names beyond loopback");
    }

    #[test]
    fn behind_a_sign_in_an_action_comes_from_the_name_the_page_is_reached_under() {
        let g = Guard::signed_in();
        assert!(g.host_allowed(&req("infraflow.example:8443", None, None)));
        assert!(g.same_origin(&req("infraflow.example:8443", Some("https://infraflow.example:8443"), None)));
        assert!(!g.same_origin(&req("infraflow.example:8443", Some("https://evil.example"), None)));
        assert!(!g.same_origin(&req("infraflow.example:8443", None, Some("cross-site"))));
    }

    #[test]
    fn every_daemon_draws_its_own_token() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
