//! Spans out by OTLP/HTTP (protobuf), configured by the standard `OTEL_*` variables and off when
//! no endpoint is set. The exporter is a thread of its own: a workflow only ever puts a span in
//! a bounded queue, so a slow, refusing or silent collector costs it nothing; what cannot be
//! sent is dropped and counted (`infraflow_trace_spans{outcome="dropped"}`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use infraflow_trace::{Attr, Batch, Sampler};

use crate::failure::Failure;
use crate::http_client::{Kept, Server};

static EXPORTED: AtomicU64 = AtomicU64::new(0);

/// Spans a collector accepted so far.
pub fn exported() -> u64 {
    EXPORTED.load(Ordering::Relaxed)
}

/// The exporter's settings, from the environment.
struct Config {
    server: Server,
    path: String,
    resource: Vec<(String, Attr)>,
    sampler: Sampler,
    queue: usize,
    batch: usize,
    delay: Duration,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
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

/// `k=v,k2=v2` (`OTEL_RESOURCE_ATTRIBUTES`), values percent-decoded as the spec asks.
fn pairs(name: &str) -> Result<Vec<(String, Attr)>, Failure> {
    let Some(v) = var(name) else { return Ok(Vec::new()) };
    v.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').ok_or_else(|| Failure::usage(format!("{name}: {p:?} is not key=value")))?;
            let v = percent_encoding::percent_decode_str(v.trim()).decode_utf8_lossy().into_owned();
            Ok((k.trim().to_string(), Attr::Str(v)))
        })
        .collect()
}

impl Config {
    /// None when tracing is off: no endpoint, `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
    fn from_env() -> Result<Option<Config>, Failure> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v == "none")
        {
            return Ok(None);
        }
        let (what, url, path) = match (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
            (Some(url), _) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url, None),
            (None, Some(base)) => ("OTEL_EXPORTER_OTLP_ENDPOINT", base, Some("v1/traces")),
            (None, None) => return Ok(None),
        };
        let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
        if rest.split(['/', '?', '#']).next().unwrap_or_default().contains('@') {
            // Never echoed: it carries a password.
            return Err(Failure::usage(format!(
                "{what} carries credentials (user:password@): give the collector's URL without them"
            )));
        }
        if url.contains('?') || url.contains('#') {
            return Err(Failure::usage(format!(
                "{what} {url:?}: give the collector's URL without a query or fragment"
            )));
        }
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(p) = protocol.filter(|p| p != "http/protobuf") {
            return Err(Failure::usage(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL {p:?}: infraflow sends http/protobuf only (a collector's port 4318)"
            )));
        }
        let timeout = millis("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)?;
        if timeout.is_zero() {
            return Err(Failure::usage("OTEL_EXPORTER_OTLP_TIMEOUT 0: give the milliseconds an export may take"));
        }
        let server = Server::new(what, &url, None, None)?.within(timeout);
        let path = match path {
            Some(tail) => format!("{}/{tail}", server.path.trim_end_matches('/')),
            None => server.path.clone(),
        };
        let sampler =
            Sampler::from_env(var("OTEL_TRACES_SAMPLER").as_deref(), var("OTEL_TRACES_SAMPLER_ARG").as_deref())
                .map_err(Failure::usage)?;
        let mut resource = pairs("OTEL_RESOURCE_ATTRIBUTES")?;
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
            resource,
            sampler,
            queue: count("OTEL_BSP_MAX_QUEUE_SIZE", 2048)?,
            batch: count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)?,
            delay: millis("OTEL_BSP_SCHEDULE_DELAY", 1000)?,
        }))
    }
}

/// The running exporter; dropping it sends what is queued, waiting at most 2 s for a collector
/// that has answered before, 200 ms for one never heard yet, not at all for one whose last
/// export failed (refused, unreachable or timed out).
pub struct Tracing {
    closing: Arc<AtomicBool>,
    healthy: Arc<AtomicBool>,
    answered: Arc<AtomicBool>,
    done: std::sync::mpsc::Receiver<()>,
}

/// Starts the exporter when the environment names a collector.
pub fn install_from_env() -> Result<Option<Tracing>, Failure> {
    let Some(config) = Config::from_env()? else { return Ok(None) };
    let Some(queue) = infraflow_trace::install(config.queue, config.batch, config.sampler) else { return Ok(None) };
    let closing = Arc::new(AtomicBool::new(false));
    let healthy = Arc::new(AtomicBool::new(true));
    let answered = Arc::new(AtomicBool::new(false));
    let (done_tx, done) = std::sync::mpsc::channel();
    let (c, h, a) = (closing.clone(), healthy.clone(), answered.clone());
    std::thread::Builder::new()
        .name("otlp-exporter".into())
        .spawn(move || {
            yield_to_the_workflows();
            export_loop(config, queue, &c, &h, &a);
            let _ = done_tx.send(());
        })
        .map_err(|e| Failure::other(format!("cannot start the trace exporter: {e}")))?;
    Ok(Some(Tracing { closing, healthy, answered, done }))
}

impl Drop for Tracing {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        // A collector whose last export failed (refused, unreachable, timed out) gets none of the command's
        // time; one never heard yet (a short command's only export is its last) a moment.
        let limit = match (self.healthy.load(Ordering::SeqCst), self.answered.load(Ordering::SeqCst)) {
            (false, _) => Duration::ZERO,
            (true, true) => Duration::from_secs(2),
            (true, false) => Duration::from_millis(200),
        };
        let _ = self.done.recv_timeout(limit);
    }
}

/// Gives the calling thread (the exporter's) the lowest CPU priority (nice 19; Linux's nice is
/// a thread's): a busy engine's steps go first, and its spare CPU sends the spans. Measured on
/// the engine benchmark: at the default priority the exporter's wake-ups (one a batch) and
/// sends cost the concurrent steps 7.5%; at 19, 3.5% (BENCHMARKS.md). If the CPU is never
/// spare, the queue fills and spans are dropped and counted: the workflows are not slowed.
fn yield_to_the_workflows() {
    // SAFETY: setpriority takes no pointers and changes only this thread's scheduling weight.
    #[allow(unsafe_code)]
    let failed = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) } != 0;
    if failed {
        tracing::debug!("the trace exporter keeps its CPU priority: setpriority refused");
    }
}

fn export_loop(
    config: Config,
    queue: infraflow_trace::Exported,
    closing: &AtomicBool,
    healthy: &AtomicBool,
    answered: &AtomicBool,
) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    let mut batch = Batch::default();
    let mut kept = Kept::default();
    let mut last = Instant::now();
    loop {
        let closing_now = closing.load(Ordering::SeqCst);
        let now = Instant::now();
        let due = if closing_now { now } else { last + config.delay };
        // Woken by a full batch or when due; every 50 ms at least, to see a close.
        let wait = due.saturating_duration_since(now).min(Duration::from_millis(50));
        queue.take(&mut batch, wait, due);
        if batch.is_empty() {
            if closing_now {
                break;
            }
            if Instant::now() >= due {
                last = Instant::now();
            }
            continue;
        }
        for (spans, entries) in batch.chunks(config.batch) {
            send(&config, &rt, &mut kept, spans, entries, healthy, answered);
        }
        batch.clear();
        last = Instant::now();
    }
}

/// Posts `spans` spans (`entries`, encoded) to the collector; counts them sent or dropped.
fn send(
    config: &Config,
    rt: &tokio::runtime::Runtime,
    kept: &mut Kept,
    spans: usize,
    entries: &[u8],
    healthy: &AtomicBool,
    answered: &AtomicBool,
) {
    let body = infraflow_trace::export_request(&config.resource, entries);
    match rt.block_on(config.server.post_bytes(kept, &config.path, "application/x-protobuf", body)) {
        Ok(status) if (200..300).contains(&status) => {
            EXPORTED.fetch_add(spans as u64, Ordering::Relaxed);
            healthy.store(true, Ordering::SeqCst);
            answered.store(true, Ordering::SeqCst);
        }
        Ok(status) => {
            healthy.store(false, Ordering::SeqCst);
            tracing::debug!(status, "the trace collector refused a batch");
            infraflow_trace::count_dropped(spans as u64);
        }
        Err(e) => {
            healthy.store(false, Ordering::SeqCst);
            tracing::debug!(error = %e.message, "the trace collector did not take a batch");
            infraflow_trace::count_dropped(spans as u64);
        }
    }
}
