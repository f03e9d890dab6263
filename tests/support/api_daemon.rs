//! The daemon serving the API to the tests' tenants: a tenants file of four (two with regions and
//! infraID prefixes, a reader, one without fences), over loopback TLS with an OIDC issuer, on moto
//! behind the counting proxy; and the waits the API tests share.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::api::{AUDIENCE, Client, ISSUER, Issuer, TestCa, token_hash};
use super::aws::AwsEnv as Env;
use super::{free_port, infraflow};

pub const TOKEN_A: &str = "tenant-a-secret-token-0001";
pub const TOKEN_B: &str = "tenant-b-secret-token-0002";
pub const TOKEN_READER: &str = "reader-secret-token-0003";
/// A tenant with no prefix or region of its own: only cluster ownership keeps it off others'.
pub const TOKEN_D: &str = "tenant-d-secret-token-0004";
pub const ROLE_B: &str = "arn:aws:iam::222222222222:role/b-operator";
pub const EXTERNAL_ID_B: &str = "b-external-7f3c";

pub struct Api {
    pub e: Env,
    pub daemon: std::process::Child,
    pub client: Client,
    pub issuer: Issuer,
    pub port: u16,
    pub ca: std::path::PathBuf,
}

impl Api {
    /// `infraflow --server … ARGS` with `token` (no journal: `--db` points nowhere).
    pub fn remote(&self, token: &str, args: &[&str]) -> std::process::Output {
        let url = format!("https://localhost:{}", self.port);
        let token_file = self.e.s.file(&format!("token-{}", token_hash(token)));
        std::fs::write(&token_file, token).unwrap();
        let mut all = vec![
            "--server",
            url.as_str(),
            "--server-ca",
            self.ca.to_str().unwrap(),
            "--token-file",
            token_file.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        std::process::Command::new(infraflow())
            .args(&all)
            .env("INFRAFLOW_DB", "/nonexistent/journal.sqlite3")
            .output()
            .unwrap()
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

pub fn tenants() -> Value {
    json!({"tenants": [
        {"name": "a", "tokenSha256": [token_hash(TOKEN_A)], "subjects": ["alice"], "permission": "operate",
         "daemonIdentity": true, "regions": ["us-east-1"], "infraIDPrefixes": ["a-"]},
        {"name": "b", "tokenSha256": [token_hash(TOKEN_B)], "subjects": ["bob"], "permission": "operate",
         "daemonIdentity": true, "regions": ["us-east-1"], "infraIDPrefixes": ["b-"], "maxUnfinished": 2,
         "roles": [ROLE_B], "accounts": ["222222222222"], "externalId": EXTERNAL_ID_B},
        {"name": "ro", "tokenSha256": [token_hash(TOKEN_READER)], "permission": "read", "daemonIdentity": true},
        {"name": "d", "tokenSha256": [token_hash(TOKEN_D)], "permission": "operate", "daemonIdentity": true}
    ]})
}

/// A daemon on moto serving the API over TLS on a free loopback port.
pub fn api() -> Api {
    api_with_jwks(|issuer| issuer.jwks.to_str().unwrap().to_string())
}

/// The same, the daemon's `--oidc-jwks` being what `jwks` makes of the issuer.
pub fn api_with_jwks(jwks: impl FnOnce(&Issuer) -> String) -> Api {
    let e = Env::new();
    let ca = TestCa::make(e.s.dir.path());
    let tenants = e.s.write_json("tenants.json", &tenants());
    let issuer = Issuer::new(e.s.file("jwks.json"));
    let jwks = jwks(&issuer);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "--api-listen",
        listen.as_str(),
        "--tenants",
        tenants.to_str().unwrap(),
        "--tls-cert",
        ca.cert.to_str().unwrap(),
        "--tls-key",
        ca.key.to_str().unwrap(),
        "--oidc-issuer",
        ISSUER,
        "--oidc-audience",
        AUDIENCE,
        "--oidc-jwks",
        jwks.as_str(),
    ];
    let daemon = e.daemon_with(&e.proxy.endpoint(), &args);
    let start = Instant::now();
    while !e.s.daemon_log().contains("serving the API") {
        assert!(start.elapsed() < Duration::from_secs(30), "no API: {}", e.s.daemon_log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = Client::new(port, &ca.ca);
    Api { e, daemon, client, issuer, port, ca: ca.ca }
}

pub fn provision(infra: &str) -> Value {
    json!({"name": infra.trim_end_matches("-abcde"), "infraID": infra, "region": "us-east-1",
           "zones": ["us-east-1a"], "baseDomain": "example.com"})
}

/// Waits (by the API's long poll) until `id` rests; its status.
pub fn rested(a: &Api, token: &str, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let r = a.client.get(&format!("/v1/workflows/{id}/wait?timeout=20s"), token);
        assert_eq!(r.status, 200, "{r:?}");
        if r.body["rests"] == true {
            return r.body;
        }
        assert!(start.elapsed() < Duration::from_secs(180), "{id} never rested: {}", r.body);
    }
}
