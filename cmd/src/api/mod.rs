//! `daemon --api-listen ADDR`: the authenticated HTTP API for tenants, under `/v1` (JSON; its
//! OpenAPI document at `/v1/openapi.json`). Who a request is (`auth`: a tenant's bearer token,
//! or an OIDC token whose subject a tenant names), what a tenant may do and see (`tenants`,
//! `fences`), each route (`routes`), errors as problem documents (`problem`), one audit line a
//! request (`audit`). TLS is required off loopback (`tls`). The tenants file and the JWKS are
//! read again on SIGHUP.

mod audit;
mod auth;
mod fences;
mod jwt;
mod problem;
mod routes;
mod session;
mod signin;
mod tenants;
mod tls;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use infraflow_engine::Engine;

use crate::failure::Failure;
use audit::Caller;
use auth::Authenticator;
use problem::{Problem, json_response};

/// The largest request body the API reads (a submission's input is a few kilobytes).
const BODY_LIMIT: usize = 1 << 20;

const OPENAPI: &str = include_str!("openapi.json");

/// How the API is served, from the daemon's flags.
pub struct ApiConfig {
    pub listen: SocketAddr,
    pub tenants: PathBuf,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub oidc_issuer: Option<String>,
    pub oidc_audience: Option<String>,
    pub oidc_jwks: Option<String>,
}

impl ApiConfig {
    /// The daemon's `--api-listen` and the flags that go with it; None without `--api-listen`
    /// (clap requires `--tenants` with it).
    pub fn from_args(a: crate::cli::ApiArgs) -> Option<ApiConfig> {
        Some(ApiConfig {
            listen: a.api_listen?,
            tenants: a.tenants?,
            tls_cert: a.tls_cert,
            tls_key: a.tls_key,
            oidc_issuer: a.oidc_issuer,
            oidc_audience: a.oidc_audience,
            oidc_jwks: a.oidc_jwks,
        })
    }
}

struct Api {
    auth: Authenticator,
    routes: routes::Routes,
    /// The status page as a signed-in tenant sees it (`signin`).
    page: crate::page::Page,
    sessions: session::Sessions,
}

/// The API checked and ready to bind: its TLS, tenants and OIDC issuer read.
pub struct Prepared {
    listen: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    auth: Authenticator,
}

/// Checks the configuration before the daemon does anything else (so a wrong flag changes and
/// calls nothing); refusals are usage errors (exit 2) naming the flag.
pub async fn prepare(config: ApiConfig) -> Result<Prepared, Failure> {
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(tls::acceptor(cert, key).map_err(Failure::usage)?),
        (None, None) if config.listen.ip().is_loopback() => None,
        (None, None) => {
            return Err(Failure::usage(format!(
                "--api-listen {} is not a loopback address: give --tls-cert and --tls-key (tokens must not cross a network in clear)",
                config.listen
            )));
        }
        _ => return Err(Failure::usage("give both --tls-cert and --tls-key, or neither")),
    };
    let tenants = tenants::Tenants::load(&config.tenants).map_err(Failure::usage)?;
    let oidc = match (config.oidc_issuer, config.oidc_audience, config.oidc_jwks) {
        (Some(issuer), Some(audience), Some(jwks)) => {
            let source = jwt::JwksSource::parse(&jwks).map_err(Failure::usage)?;
            Some(jwt::Verifier::new(issuer, audience, source).await.map_err(Failure::usage)?)
        }
        (None, None, None) => None,
        _ => return Err(Failure::usage("--oidc-issuer, --oidc-audience and --oidc-jwks go together")),
    };
    Ok(Prepared { listen: config.listen, tls, auth: Authenticator::new(tenants, oidc) })
}

/// The roles the tenants file lets tenants name, and the ExternalId each tenant's get.
#[derive(Default)]
pub struct TenantRoles {
    pub patterns: Vec<String>,
    pub external_ids: Vec<(String, String)>,
}

impl Prepared {
    pub fn tenant_roles(&self) -> TenantRoles {
        let mut roles = TenantRoles::default();
        for t in self.auth.tenants.all().iter() {
            roles.patterns.extend(t.roles.iter().cloned());
            if let Some(id) = &t.external_id {
                roles.external_ids.extend(t.roles.iter().map(|r| (r.clone(), id.clone())));
            }
        }
        roles
    }

    /// Binds and serves in the background.
    pub async fn start(self, engine: Arc<Engine>, trace_link: Option<String>) -> Result<SocketAddr, Failure> {
        let listener = tokio::net::TcpListener::bind(self.listen).await.map_err(|e| {
            Failure::usage(format!("cannot listen on {} for the API: {e}; pick a free port", self.listen))
        })?;
        let bound = listener.local_addr().unwrap_or(self.listen);
        let tls = self.tls.is_some();
        let tenants = self.auth.tenants.clone();
        let page = crate::page::Page::new(engine.journal().clone(), true, crate::page::Guard::signed_in())
            .with_trace_link(trace_link);
        let api = Arc::new(Api {
            page,
            sessions: session::Sessions::default(),
            auth: self.auth,
            routes: routes::Routes {
                engine,
                tenants,
                ownership: fences::Ownership::default(),
                submitting: tokio::sync::Mutex::new(()),
            },
        });
        tokio::spawn(reload_on_hangup(api.clone()));
        tokio::spawn(fetch_jwks_periodically(api.clone()));
        tokio::spawn(accept(listener, self.tls, api));
        tracing::info!(address = %bound, tls, "serving the API at /v1");
        Ok(bound)
    }
}

/// Connections served at once; one more is closed at once (a client that opens thousands and
/// sends nothing holds no more than this many of the daemon's files).
const MAX_CONNECTIONS: usize = 512;
/// How long a connection may take to send a request's headers (TLS handshake apart).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

async fn accept(listener: tokio::net::TcpListener, tls: Option<tokio_rustls::TlsAcceptor>, api: Arc<Api>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "API listener: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(client = %peer.ip(), "API: {MAX_CONNECTIONS} connections open; closing a new one");
            continue;
        };
        let (api, tls) = (api.clone(), tls.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req| {
                let api = api.clone();
                async move { Ok::<_, Infallible>(api.respond(peer.ip(), req).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
            match tls {
                Some(acceptor) => {
                    // A handshake that never finishes holds nothing for long.
                    let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                }
                None => {
                    let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                }
            }
        });
    }
}

impl Api {
    async fn respond(&self, client: IpAddr, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        if path != "/v1" && !path.starts_with("/v1/") {
            return self.page_door(client, req).await;
        }
        let (parts, body) = req.into_parts();
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or_default().to_string();
        if path == "/v1/openapi.json" {
            let mut r = Response::new(Full::new(Bytes::from_static(OPENAPI.as_bytes())));
            r.headers_mut()
                .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
            return r;
        }
        // One Authorization header, or none counts: a second would make the caller ambiguous.
        let mut given = parts.headers.get_all(hyper::header::AUTHORIZATION).iter();
        let authorization = match (given.next(), given.next()) {
            (Some(v), None) => v.to_str().ok(),
            _ => None,
        };
        let who = match self.auth.authenticate(client, authorization).await {
            Ok(who) => who,
            Err(p) => {
                audit::record(client, &Caller::default(), "authenticate", None, p.status.as_u16(), &p.detail);
                return p.response();
            }
        };
        let caller = Caller { tenant: Some(who.tenant.name.clone()), subject: Some(who.subject.clone()) };
        let announced =
            parts.headers.get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let body = match announced {
            Some(n) if n > BODY_LIMIT as u64 => Err(()),
            _ => Limited::new(body, BODY_LIMIT).collect().await.map_err(|_| ()),
        };
        let body = match body {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                let p = Problem::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is over {} bytes, or was cut off", BODY_LIMIT),
                );
                audit::record(client, &caller, "read-body", None, p.status.as_u16(), &p.detail);
                return p.response();
            }
        };
        let (action, answer) =
            self.routes.dispatch(&who, &parts.method, &path, &query, &body, traceparent(&parts.headers)).await;
        match answer {
            Ok(a) => {
                audit::record(client, &caller, action, a.workflow.as_deref(), a.status.as_u16(), "");
                json_response(a.status, &a.body)
            }
            Err(p) => {
                let workflow = path.strip_prefix("/v1/workflows/").and_then(|r| r.split('/').next());
                audit::record(client, &caller, action, workflow, p.status.as_u16(), &p.detail);
                p.response()
            }
        }
    }
}

/// SIGHUP reads the tenants file and the JWKS again; a file that does not parse keeps what was
/// read before, said in the log.
async fn reload_on_hangup(api: Arc<Api>) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
    while hup.recv().await.is_some() {
        match api.auth.tenants.reload() {
            Ok(n) => tracing::info!(tenants = n, "tenants file read again"),
            Err(e) => tracing::error!(error = %e, "tenants file not read again; keeping the tenants before"),
        }
        if let Some(oidc) = &api.auth.oidc {
            match oidc.reload().await {
                Ok(n) => tracing::info!(keys = n, "JWKS read again"),
                Err(e) => tracing::error!(error = %e, "JWKS not read again; keeping the keys before"),
            }
        }
    }
}

/// A JWKS URL is fetched again every `jwt::FETCH_EVERY`: a key the issuer retired stops being
/// honoured without a token naming another (a key id it lacks fetches it at once).
async fn fetch_jwks_periodically(api: Arc<Api>) {
    let Some(oidc) = api.auth.oidc.as_ref().filter(|o| o.fetched()) else { return };
    loop {
        tokio::time::sleep(jwt::FETCH_EVERY).await;
        if let Err(e) = oidc.reload().await {
            tracing::warn!(error = %e, "JWKS not fetched again; keeping the keys before");
        }
    }
}

/// The request's W3C `traceparent`, when it is one: a submission's trace continues it. One that
/// does not parse is ignored, as the W3C asks of a receiver (a new trace starts).
fn traceparent(headers: &hyper::HeaderMap) -> Option<String> {
    let value = headers.get("traceparent")?.to_str().ok()?;
    infraflow_trace::TraceParent::parse(value).map(|t| t.to_string())
}
