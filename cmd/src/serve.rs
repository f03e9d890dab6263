//! `daemon --listen ADDR`: the status page (`/`, `/workflows/ID`: `page`), `GET /metrics`
//! (Prometheus text format), `/healthz` (the process answers) and `/readyz` (the journal takes a
//! write now, and the last lease renewal succeeded), served by hyper. Off by default; bind it to
//! loopback unless a scraper elsewhere needs it (the page's actions are then off, unless
//! `--allow-remote-actions`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use infraflow_journal::Journal;

use crate::metrics::Metrics;
use crate::page::Page;

/// How long `/readyz` waits for the journal's writer before answering "not ready".
const READY_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>, journal: Journal, page: Arc<Page>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (metrics, journal, page) = (metrics.clone(), journal.clone(), page.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (metrics, journal, page) = (metrics.clone(), journal.clone(), page.clone());
                async move {
                    let (parts, body) = req.into_parts();
                    // Only the page's action forms have a body worth reading (their token).
                    let form = if parts.method == Method::POST { read_form(body).await } else { Bytes::new() };
                    let req = Request::from_parts(parts, ());
                    if let Some(answer) = page.respond(&req, &form, &crate::page::Viewer::Operator).await {
                        return Ok::<_, Infallible>(answer);
                    }
                    Ok::<_, Infallible>(respond(&req, &metrics, &journal).await)
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        });
    }
}

fn text(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// A POST's form, at most `FORM_LIMIT` bytes (an action's form is one token); empty if longer or
/// unreadable, which the page refuses as a request without its token.
async fn read_form(body: Incoming) -> Bytes {
    use http_body_util::BodyExt;
    const FORM_LIMIT: usize = 4096;
    match http_body_util::Limited::new(body, FORM_LIMIT).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    }
}

async fn respond(req: &Request<()>, metrics: &Metrics, journal: &Journal) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "only GET\n".into());
    }
    match req.uri().path() {
        "/metrics" => match metrics.render(journal) {
            Ok(body) => text(StatusCode::OK, "application/openmetrics-text; version=1.0.0; charset=utf-8", body),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, PLAIN, format!("cannot read the journal: {e}\n")),
        },
        "/healthz" => text(StatusCode::OK, PLAIN, "ok\n".into()),
        "/readyz" => match readiness(metrics, journal).await {
            Ok(()) => text(StatusCode::OK, PLAIN, "ready\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, format!("not ready: {why}\n")),
        },
        _ => text(StatusCode::NOT_FOUND, PLAIN, "not found; try /, /metrics, /healthz or /readyz\n".into()),
    }
}

async fn readiness(metrics: &Metrics, journal: &Journal) -> Result<(), String> {
    match tokio::time::timeout(READY_TIMEOUT, journal.ping_writer()).await {
        Err(_) => {
            return Err(format!(
                "the journal took no write within {}s (locked by another process, or a stalled disk)",
                READY_TIMEOUT.as_secs()
            ));
        }
        Ok(Err(e)) => return Err(format!("the journal cannot be written: {e}")),
        Ok(Ok(())) => {}
    }
    if metrics.renewal_failing() {
        return Err("the last lease renewal failed".into());
    }
    Ok(())
}
