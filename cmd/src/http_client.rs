//! HTTP/1.1 out of this process — the CLI to the daemon's API (`--server URL`), the daemon to an
//! OIDC issuer's JWKS — one request a connection, TLS (rustls) for `https://`, trusting a given CA
//! or the system's roots (`SSL_CERT_FILE` too); plain `http://` only to loopback.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::failure::Failure;

/// The longest answer read: a JWKS or an API document is far smaller.
const ANSWER_LIMIT: u64 = 16 << 20;

/// Where a server is and how to reach it.
pub struct Server {
    host: String,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Sent as `Authorization: Bearer`; none for a public document (a JWKS).
    token: Option<String>,
    /// What the URL names after its authority (`/` when nothing).
    pub path: String,
    /// The longest a call may take, connecting included; None: as long as the server takes (a
    /// `wait`'s long poll).
    timeout: Option<std::time::Duration>,
}

/// An answer: its status and JSON body (a problem document on an error).
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Server {
    /// The server of `url` (`what`: the flag that named it, for errors).
    pub fn new(what: &str, url: &str, token: Option<String>, ca: Option<&std::path::Path>) -> Result<Server, Failure> {
        let bad = |why: &str| Failure::usage(format!("{what} {url}: {why}"));
        let (https, rest) = match url.split_once("://") {
            Some(("https", rest)) => (true, rest),
            Some(("http", rest)) => (false, rest),
            _ => return Err(bad("give https://HOST:PORT (or http:// to a loopback address)")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad("the port is not a number"))?),
            None => (authority.to_string(), if https { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !https && !loopback {
            return Err(bad("plain http only to a loopback address: a token must not cross a network in clear"));
        }
        let tls = if https { Some(Arc::new(client_config(ca)?)) } else { None };
        Ok(Server { host, port, tls, token, path, timeout: None })
    }

    /// This server, each call given up after `limit`.
    pub fn within(self, limit: std::time::Duration) -> Server {
        Server { timeout: Some(limit), ..self }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Reply, Failure> {
        match self.timeout {
            Some(limit) => tokio::time::timeout(limit, self.exchange(method, path, body)).await.unwrap_or_else(|_| {
                Err(Failure::other(format!(
                    "no answer from {}:{} within {}s",
                    self.host,
                    self.port,
                    limit.as_secs()
                )))
            }),
            None => self.exchange(method, path, body).await,
        }
    }

    async fn exchange(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Reply, Failure> {
        let unreachable =
            |e: std::io::Error| Failure::other(format!("cannot reach the API at {}:{}: {e}", self.host, self.port));
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await.map_err(unreachable)?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let authorization = self.token.as_ref().map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{authorization}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.host,
            body.len()
        );
        let raw = match &self.tls {
            Some(config) => {
                let name = ServerName::try_from(self.host.clone())
                    .map_err(|_| Failure::usage(format!("--server: {} is not a host name", self.host)))?;
                let tls =
                    tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp).await.map_err(unreachable)?;
                exchange(tls, request).await.map_err(unreachable)?
            }
            None => exchange(tcp, request).await.map_err(unreachable)?,
        };
        let text = String::from_utf8_lossy(&raw);
        let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = serde_json::from_str(rest).unwrap_or(Value::String(rest.to_string()));
        Ok(Reply { status, body })
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, request: String) -> std::io::Result<Vec<u8>> {
    s.write_all(request.as_bytes()).await?;
    s.flush().await?;
    let mut raw = Vec::new();
    match (&mut s).take(ANSWER_LIMIT).read_to_end(&mut raw).await {
        Ok(_) => Ok(raw),
        // A server that closes without TLS's close_notify has still said all it had to.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(raw),
        Err(e) => Err(e),
    }
}

fn client_config(ca: Option<&std::path::Path>) -> Result<rustls::ClientConfig, Failure> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| Failure::usage(format!("--server-ca {}: {e}", path.display())))?;
            for c in certs {
                let c = c.map_err(|e| Failure::usage(format!("--server-ca {}: {e}", path.display())))?;
                roots.add(c).map_err(|e| Failure::usage(format!("--server-ca {}: {e}", path.display())))?;
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Failure::other(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
