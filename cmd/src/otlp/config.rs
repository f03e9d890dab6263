//! The exporter's settings, read from the standard `OTEL_*` variables: where the collector is,
//! by which protocol (OTLP/HTTP protobuf or OTLP/gRPC), with which headers, and the batching.

use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use infraflow_trace::{Attr, Sampler};

use crate::failure::Failure;
use crate::http_client::Server;

/// How spans reach the collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Protocol {
    /// `http/protobuf`: POST `/v1/traces` (a collector's port 4318), the default.
    HttpProtobuf,
    /// `grpc`: the `TraceService/Export` call over HTTP/2 (port 4317).
    Grpc,
}

/// The gRPC method OTLP exports traces by.
pub(super) const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

pub(super) struct Config {
    pub server: Server,
    pub path: String,
    pub protocol: Protocol,
    pub resource: Vec<(String, Attr)>,
    pub sampler: Sampler,
    pub queue: usize,
    pub batch: usize,
    pub delay: Duration,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// The traces' own variable, else the one for every signal.
fn traces_or_all(traces: &'static str, all: &'static str) -> Option<(&'static str, String)> {
    var(traces).map(|v| (traces, v)).or_else(|| var(all).map(|v| (all, v)))
}

fn millis(name: &str, default: u64) -> Result<Duration, Failure> {
    match var(name) {
        None => Ok(Duration::from_millis(default)),
        Some(v) => v
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| Failure::usage(format!("{name} {v:?} is not a number of milliseconds"))),
    }
}

fn count(name: &str, default: usize) -> Result<usize, Failure> {
    match var(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| Failure::usage(format!("{name} {v:?} is not a positive number"))),
    }
}

/// `k=v,k2=v2`, values percent-decoded as the spec asks. An entry is named by its place, never
/// echoed: a header's value may be a key.
fn key_values(name: &str, value: &str) -> Result<Vec<(String, String)>, Failure> {
    value
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .enumerate()
        .map(|(i, p)| {
            let (k, v) = p
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| Failure::usage(format!("{name}: entry {} is not key=value", i + 1)))?;
            let v = percent_encoding::percent_decode_str(v.trim()).decode_utf8_lossy().into_owned();
            Ok((k.trim().to_string(), v))
        })
        .collect()
}

/// `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS`: sent with every export (a collector's key), never
/// logged; the fields infraflow sets itself are refused.
fn headers() -> Result<Vec<(HeaderName, HeaderValue)>, Failure> {
    let Some((name, value)) = traces_or_all("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS") else {
        return Ok(Vec::new());
    };
    key_values(name, &value)?
        .into_iter()
        .enumerate()
        .map(|(i, (k, v))| {
            // Not echoed: a name that is not one may hold a key (`authorization:Basic …=`).
            let key = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| Failure::usage(format!("{name}: entry {} does not start with a header name", i + 1)))?;
            if ["host", "content-type", "content-length", "transfer-encoding", "connection", "te"]
                .contains(&key.as_str())
            {
                return Err(Failure::usage(format!("{name}: {key} is set by infraflow; leave it out")));
            }
            let value = HeaderValue::from_str(&v)
                .map_err(|_| Failure::usage(format!("{name}: the value of {key} is not a header value")))?;
            Ok((key, value))
        })
        .collect()
}

impl Config {
    /// None when tracing is off: no endpoint, `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
    pub(super) fn from_env() -> Result<Option<Config>, Failure> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v == "none")
        {
            return Ok(None);
        }
        let (what, url, signal_path) =
            match (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
                (Some(url), _) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url, None),
                (None, Some(base)) => ("OTEL_EXPORTER_OTLP_ENDPOINT", base, Some("v1/traces")),
                (None, None) => return Ok(None),
            };
        let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
        if rest.split(['/', '?', '#']).next().unwrap_or_default().contains('@') {
            // Never echoed: it carries a password.
            return Err(Failure::usage(format!(
                "{what} carries credentials (user:password@): give the collector's URL without them \
                 (a key goes in OTEL_EXPORTER_OTLP_HEADERS)"
            )));
        }
        if url.contains('?') || url.contains('#') {
            return Err(Failure::usage(format!(
                "{what} {url:?}: give the collector's URL without a query or fragment"
            )));
        }
        let protocol = match traces_or_all("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL") {
            None => Protocol::HttpProtobuf,
            Some((_, p)) if p == "http/protobuf" => Protocol::HttpProtobuf,
            Some((_, p)) if p == "grpc" => Protocol::Grpc,
            Some((name, p)) => {
                return Err(Failure::usage(format!(
                    "{name} {p:?}: infraflow sends http/protobuf (a collector's port 4318) or grpc (port 4317)"
                )));
            }
        };
        let timeout = millis("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)?;
        if timeout.is_zero() {
            return Err(Failure::usage("OTEL_EXPORTER_OTLP_TIMEOUT 0: give the milliseconds an export may take"));
        }
        let mut sent = headers()?;
        if protocol == Protocol::Grpc {
            // gRPC's answer is in trailers, which HTTP/2 sends only to a client that says it takes them.
            sent.push((hyper::header::TE, HeaderValue::from_static("trailers")));
        }
        let mut server = Server::new(what, &url, None, None)?.within(timeout).with_headers(sent);
        let path = match (protocol, signal_path) {
            (Protocol::Grpc, _) if server.path != "/" => {
                return Err(Failure::usage(format!(
                    "{what} {url:?}: a gRPC collector is named by scheme, host and port only (no path)"
                )));
            }
            (Protocol::Grpc, _) => GRPC_EXPORT.to_string(),
            (Protocol::HttpProtobuf, Some(tail)) => format!("{}/{tail}", server.path.trim_end_matches('/')),
            (Protocol::HttpProtobuf, None) => server.path.clone(),
        };
        if protocol == Protocol::Grpc {
            server = server.speaking_h2();
        }
        let sampler =
            Sampler::from_env(var("OTEL_TRACES_SAMPLER").as_deref(), var("OTEL_TRACES_SAMPLER_ARG").as_deref())
                .map_err(Failure::usage)?;
        let mut resource: Vec<(String, Attr)> = match var("OTEL_RESOURCE_ATTRIBUTES") {
            Some(v) => {
                key_values("OTEL_RESOURCE_ATTRIBUTES", &v)?.into_iter().map(|(k, v)| (k, Attr::Str(v))).collect()
            }
            None => Vec::new(),
        };
        let service = var("OTEL_SERVICE_NAME")
            .or_else(|| {
                resource.iter().find(|(k, _)| k == "service.name").and_then(|(_, v)| match v {
                    Attr::Str(s) => Some(s.clone()),
                    _ => None,
                })
            })
            .unwrap_or_else(|| "infraflow".into());
        resource.retain(|(k, _)| k != "service.name");
        resource.insert(0, ("service.name".into(), Attr::Str(service)));
        resource.push(("service.version".into(), Attr::Str(env!("CARGO_PKG_VERSION").into())));
        Ok(Some(Config {
            server,
            path,
            protocol,
            resource,
            sampler,
            queue: count("OTEL_BSP_MAX_QUEUE_SIZE", 2048)?,
            batch: count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)?,
            delay: millis("OTEL_BSP_SCHEDULE_DELAY", 1000)?,
        }))
    }
}
