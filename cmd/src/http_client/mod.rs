//! HTTP/1.1 out of this process — the CLI to the daemon's API (`--server URL`), the daemon to an
//! OIDC issuer's JWKS, spans to a collector — one request a connection, or a connection kept
//! for many (`Kept`: the exporter's batches) (hyper's client: any framing a server uses), over
//! HTTP/2 when asked (OTLP/gRPC: ALPN `h2` over TLS, prior knowledge on loopback), TLS (rustls)
//! for `https://`, trusting a given CA or the system's roots (`SSL_CERT_FILE` too); plain
//! `http://` only to loopback.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::failure::Failure;

mod kept;

pub use kept::Kept;

/// The longest answer read: a JWKS or an API document is far smaller.
const ANSWER_LIMIT: usize = 16 << 20;

/// Where a server is and how to reach it.
pub struct Server {
    /// As the URL names it (an IPv6 address without its brackets).
    host: String,
    port: u16,
    /// `Host:` as sent: the URL's authority.
    authority: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Sent as `Authorization: Bearer`; none for a public document (a JWKS).
    token: Option<String>,
    /// What the URL names after its authority (`/` when nothing; a `#fragment` dropped).
    pub path: String,
    /// The longest a call may take, connecting included; None: as long as the server takes (a
    /// `wait`'s long poll).
    timeout: Option<std::time::Duration>,
    /// Sent with every request (a collector's `OTEL_EXPORTER_OTLP_HEADERS`), marked sensitive.
    headers: Vec<(HeaderName, HeaderValue)>,
    /// HTTP/2 on kept connections (`post_bytes`), as gRPC needs.
    h2: bool,
}

/// An answer: its status and JSON body (a problem document on an error); a body that is not
/// JSON is kept as a string.
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Server {
    /// The server of `url` (`what`: the flag that named it, for errors).
    pub fn new(what: &str, url: &str, token: Option<String>, ca: Option<&std::path::Path>) -> Result<Server, Failure> {
        let bad = |why: &str| Failure::usage(format!("{what} {url}: {why}"));
        let (https, rest) = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (true, rest),
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (false, rest),
            _ => return Err(bad("give https://HOST[:PORT] (or http:// to a loopback address)")),
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        // `[::1]:8443`, `host:8443`, `host`: the port after the last colon outside brackets.
        let (host, port) = match authority.rfind(':').filter(|i| !authority[*i..].contains(']')) {
            Some(i) => (&authority[..i], authority[i + 1..].parse().map_err(|_| bad("the port is not a number"))?),
            None => (authority, if https { 443 } else { 80 }),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !https && !loopback {
            return Err(bad("plain http only to a loopback address: anything crossing a network must be https://"));
        }
        let tls = if https { Some(Arc::new(client_config(ca)?)) } else { None };
        Ok(Server {
            host,
            port,
            authority: authority.to_string(),
            tls,
            token,
            path,
            timeout: None,
            headers: Vec::new(),
            h2: false,
        })
    }

    /// This server, `headers` sent with every request; their values are kept out of logs.
    pub fn with_headers(self, headers: Vec<(HeaderName, HeaderValue)>) -> Server {
        let headers = headers
            .into_iter()
            .map(|(name, mut value)| {
                value.set_sensitive(true);
                (name, value)
            })
            .collect();
        Server { headers, ..self }
    }

    /// This server reached by HTTP/2 (`post_bytes`): TLS asks for `h2` by ALPN; plain loopback
    /// speaks it from the first byte (gRPC's h2c).
    pub fn speaking_h2(self) -> Server {
        let tls = self.tls.map(|config| {
            let mut config = (*config).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            Arc::new(config)
        });
        Server { tls, h2: true, ..self }
    }

    /// This server, each call given up after `limit`.
    pub fn within(self, limit: std::time::Duration) -> Server {
        Server { timeout: Some(limit), ..self }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Reply, Failure> {
        self.call_with(method, path, body, None).await
    }

    /// `call`, continuing the caller's trace (`traceparent`: a submission's, `TRACEPARENT`).
    pub async fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        traceparent: Option<&str>,
    ) -> Result<Reply, Failure> {
        let body = Bytes::from(body.map(|b| b.to_string()).unwrap_or_default());
        let request = self.request(method, path, "application/json", body, traceparent)?;
        let Answer { status, body: raw, .. } = self.limited(self.exchange(request)).await?;
        let body = serde_json::from_slice(&raw).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into()));
        Ok(Reply { status, body })
    }

    /// `work`, given up after the server's limit, if it has one.
    async fn limited<T>(&self, work: impl std::future::Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
        match self.timeout {
            Some(limit) => tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
                Err(Failure::other(format!("no answer from {}:{} within {limit:?}", self.host, self.port)))
            }),
            None => work.await,
        }
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Bytes,
        traceparent: Option<&str>,
    ) -> Result<Request, Failure> {
        let mut request = if self.h2 {
            // HTTP/2 names the server in the request's URI (`:authority`), not in `Host:`.
            let scheme = if self.tls.is_some() { "https" } else { "http" };
            hyper::Request::builder().uri(format!("{scheme}://{}{path}", self.authority))
        } else {
            hyper::Request::builder().uri(path).header(hyper::header::HOST, &self.authority)
        }
        .method(method)
        .header(hyper::header::CONTENT_TYPE, content_type);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        if let Some(token) = &self.token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(t) = traceparent {
            request = request.header("traceparent", t);
        }
        request.body(Full::new(body)).map_err(|e| self.unreachable(&e))
    }

    fn unreachable(&self, e: &dyn std::fmt::Display) -> Failure {
        Failure::other(format!("cannot reach {}:{}: {e}", self.host, self.port))
    }

    /// A new connection (TLS when https), its HTTP handshake done.
    async fn connect(&self) -> Result<Connection, Failure> {
        let tcp =
            tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await.map_err(|e| self.unreachable(&e))?;
        // HTTP/2 writes a request's HEADERS and DATA frames apart: with Nagle's algorithm the
        // second waits for the server's delayed ACK of the first, 40 ms an export (measured on
        // loopback), which gRPC clients avoid the same way.
        tcp.set_nodelay(true).map_err(|e| self.unreachable(&e))?;
        let socket = std::os::fd::AsFd::as_fd(&tcp).try_clone_to_owned().map_err(|e| self.unreachable(&e))?;
        let (sender, driving) = match &self.tls {
            Some(config) => {
                let name = ServerName::try_from(self.host.clone())
                    .map_err(|_| Failure::usage(format!("{} is not a host name", self.host)))?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| self.unreachable(&e))?;
                if self.h2 && tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                    return Err(self.unreachable(&"the server does not speak HTTP/2 (ALPN h2), as gRPC needs"));
                }
                handshake(tls, self.h2).await
            }
            None => handshake(tcp, self.h2).await,
        }
        .map_err(|e| self.unreachable(&e))?;
        Ok(Connection { sender, driving, socket })
    }

    /// `request` on a connection of its own.
    async fn exchange(&self, request: Request) -> Result<Answer, Failure> {
        let mut connection = self.connect().await?;
        let answer = match connection.sender.send(request).await {
            Ok(response) => read(response).await,
            Err(e) => Err(e.to_string()),
        };
        connection.driving.abort();
        answer.map_err(|e| self.unreachable(&e))
    }
}

type Request = hyper::Request<Full<Bytes>>;
type Response = hyper::Response<hyper::body::Incoming>;

/// One connection's sending half, HTTP/1.1 or HTTP/2.
enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    async fn ready(&mut self) -> hyper::Result<()> {
        match self {
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        }
    }

    async fn send(&mut self, request: Request) -> hyper::Result<Response> {
        match self {
            Sender::H1(s) => s.send_request(request).await,
            Sender::H2(s) => s.send_request(request).await,
        }
    }

    /// `send`, giving `request` back in the error when none of it was written.
    async fn try_send(&mut self, request: Request) -> Result<Response, hyper::client::conn::TrySendError<Request>> {
        match self {
            Sender::H1(s) => s.try_send_request(request).await,
            Sender::H2(s) => s.try_send_request(request).await,
        }
    }
}

/// One connection: its sending half, the task that drives it, and its socket, to look at.
struct Connection {
    sender: Sender,
    driving: tokio::task::JoinHandle<()>,
    /// The connection's TCP socket (a second descriptor of it, closed with the connection).
    socket: std::os::fd::OwnedFd,
}

/// An answer as read: its status, body, and header fields and trailers in one map (gRPC puts
/// `grpc-status` in either).
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
    pub fields: HeaderMap,
}

async fn handshake<S>(stream: S, h2: bool) -> Result<(Sender, tokio::task::JoinHandle<()>), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    if h2 {
        let executor = hyper_util::rt::TokioExecutor::new();
        let (sender, connection) =
            hyper::client::conn::http2::handshake(executor, io).await.map_err(|e| e.to_string())?;
        let driving = tokio::spawn(async move {
            let _ = connection.await;
        });
        return Ok((Sender::H2(sender), driving));
    }
    let (sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    let driving = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((Sender::H1(sender), driving))
}

/// A response's status, header fields, body (at most `ANSWER_LIMIT`) and trailers.
async fn read(response: Response) -> Result<Answer, String> {
    let (parts, body) = response.into_parts();
    let collected = Limited::new(body, ANSWER_LIMIT).collect().await.map_err(|e| format!("reading the answer: {e}"))?;
    let mut fields = parts.headers;
    if let Some(trailers) = collected.trailers() {
        fields.extend(trailers.clone());
    }
    Ok(Answer { status: parts.status.as_u16(), body: collected.to_bytes(), fields })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_its_host_port_and_path_as_sent() {
        let s = Server::new("--x", "http://[::1]:8080/keys#frag", None, None).unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.authority.as_str(), s.path.as_str()),
            ("::1", 8080, "[::1]:8080", "/keys")
        );
        let s = Server::new("--x", "HTTP://127.0.0.1:9?x=1", None, None).unwrap();
        assert_eq!((s.port, s.path.as_str()), (9, "/?x=1"));
        for (bad, why) in [
            ("ftp://127.0.0.1/x", "give https://"),
            ("http://10.1.2.3/x", "plain http only to a loopback address"),
            ("http://127.0.0.1:port/", "the port is not a number"),
            ("https:///x", "no host"),
        ] {
            let e = Server::new("--x", bad, None, None).err().unwrap();
            assert!(e.message.contains(why), "{bad}: {}", e.message);
        }
    }
}
