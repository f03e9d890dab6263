//! The API's test side: a test CA and the daemon's certificate (openssl), a tenants file, a
//! JWKS and tokens its key signs, and an HTTPS client (rustls over a loopback socket) that
//! trusts only the test CA.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

/// A CA and a certificate it signed for `localhost` and 127.0.0.1, in `dir`.
pub struct TestCa {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    pub fn make(dir: &Path) -> TestCa {
        let p = |n: &str| dir.join(n);
        let run = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir).output().unwrap();
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=infraflow test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ]);
        run(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "api.key",
            "-out",
            "api.csr",
        ]);
        std::fs::write(p("ext.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "api.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
            "-out",
            "api.crt",
        ]);
        TestCa { ca: p("ca.crt"), cert: p("api.crt"), key: p("api.key") }
    }
}

/// The SHA-256 of a token, hex, as the tenants file holds it.
pub fn token_hash(token: &str) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// An OIDC issuer of the tests: its key, its JWKS file, and the tokens it signs.
pub struct Issuer {
    pub key: EcdsaKeyPair,
    pub kid: String,
    pub jwks: PathBuf,
}

pub const ISSUER: &str = "https://idp.test";
pub const AUDIENCE: &str = "infraflow";

impl Issuer {
    pub fn new(jwks: PathBuf) -> Issuer {
        let i =
            Issuer { key: EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap(), kid: "k1".into(), jwks };
        i.publish();
        i
    }

    /// A new key under a new id, published in the same file (a rotation).
    pub fn rotate(&mut self) {
        self.key = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        self.kid = format!("{}x", self.kid);
        self.publish();
    }

    fn publish(&self) {
        let point = self.key.public_key().as_ref();
        let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": self.kid, "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..65])}]});
        std::fs::write(&self.jwks, jwks.to_string()).unwrap();
    }

    pub fn sign(&self, header: Value, claims: Value) -> String {
        let h = URL_SAFE_NO_PAD.encode(header.to_string());
        let c = URL_SAFE_NO_PAD.encode(claims.to_string());
        let sig = self.key.sign(&SystemRandom::new(), format!("{h}.{c}").as_bytes()).unwrap();
        format!("{h}.{c}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    /// A valid token for `sub`, good for ten minutes.
    pub fn token(&self, sub: &str) -> String {
        self.sign(json!({"alg": "ES256", "kid": self.kid}), claims(sub, now() - 10, now() + 600))
    }
}

pub fn claims(sub: &str, nbf: i64, exp: i64) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "nbf": nbf, "exp": exp, "iat": nbf})
}

pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// An answer of the API.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: String,
    pub body: Value,
}

/// HTTPS to the daemon's API on 127.0.0.1, trusting only the test CA.
pub struct Client {
    port: u16,
    config: Arc<rustls::ClientConfig>,
}

impl Client {
    pub fn new(port: u16, ca: &Path) -> Client {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Client { port, config: Arc::new(config) }
    }

    /// `method path` with `token` (if any) and `body` (raw bytes).
    pub fn raw(&self, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> Reply {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        self.request(method, path, &headers, "application/json", body)
    }

    /// A request with these `headers` besides Host, Content-Type and Content-Length.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        content_type: &str,
        body: &[u8],
    ) -> Reply {
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(90))).unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = rustls::ClientConnection::new(self.config.clone(), name).unwrap();
        let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
        let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost:{}\r\n{extra}Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        );
        tls.write_all(head.as_bytes()).unwrap();
        // A body over the API's limit is refused on its Content-Length, before it is read: it is
        // not sent (the server's answer would race the client's writes).
        if body.len() <= 1 << 20 {
            tls.write_all(body).unwrap();
        }
        let mut raw = Vec::new();
        let _ = tls.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw).to_string();
        let (headers, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = headers.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = serde_json::from_str(rest).unwrap_or(Value::String(rest.to_string()));
        Reply { status, headers: headers.to_string(), body }
    }

    pub fn get(&self, path: &str, token: &str) -> Reply {
        self.raw("GET", path, Some(token), b"")
    }

    pub fn post(&self, path: &str, token: &str, body: &Value) -> Reply {
        self.raw("POST", path, Some(token), body.to_string().as_bytes())
    }
}

/// An issuer's `jwks_uri` on loopback: serves the JWKS file as it is at each request (so a
/// rotation there is seen), counting the requests; chunked, as many web servers send a
/// document, and keeping the connection open after it (HTTP/1.1's default).
pub struct JwksServer {
    pub url: String,
    pub fetches: Arc<std::sync::atomic::AtomicUsize>,
}

impl JwksServer {
    pub fn serve(jwks: PathBuf) -> JwksServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}/.well-known/jwks.json", listener.local_addr().unwrap().port());
        let fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = fetches.clone();
        std::thread::spawn(move || {
            let mut kept_open = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let mut head = [0u8; 4096];
                let n = s.read(&mut head).unwrap_or(0);
                let asked = String::from_utf8_lossy(&head[..n]);
                let (status, body) = if asked.starts_with("GET /.well-known/jwks.json ") {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    ("200 OK", std::fs::read_to_string(&jwks).unwrap_or_default())
                } else {
                    ("404 Not Found", String::new())
                };
                let (a, b) = body.split_at(body.len() / 2);
                let chunk = |c: &str| if c.is_empty() { String::new() } else { format!("{:x}\r\n{c}\r\n", c.len()) };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{}{}0\r\n\r\n",
                    chunk(a),
                    chunk(b)
                );
                kept_open.push(s);
            }
        });
        JwksServer { url, fetches }
    }

    pub fn fetched(&self) -> usize {
        self.fetches.load(std::sync::atomic::Ordering::SeqCst)
    }
}
