//! Spans out by OTLP (HTTP/protobuf or gRPC), configured by the standard `OTEL_*` variables
//! (`config`) and off when no endpoint is set. The exporter is a thread of its own: a workflow
//! only ever puts a span in a bounded queue, so a slow, refusing or silent collector costs it
//! nothing; what cannot be sent is dropped and counted (`infraflow_trace_spans{outcome="dropped"}`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod config;
mod grpc;

use infraflow_trace::Batch;

use crate::failure::Failure;
use crate::http_client::Kept;
use config::{Config, Protocol};

static EXPORTED: AtomicU64 = AtomicU64::new(0);

/// Spans a collector accepted so far.
pub fn exported() -> u64 {
    EXPORTED.load(Ordering::Relaxed)
}

/// The running exporter; dropping it sends what is queued, waiting at most 2 s for a collector
/// that has answered, 200 ms for one not heard yet (2 s from when it answers), not at all for
/// one whose last export failed (refused, unreachable or timed out).
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
        // A collector whose last export failed (refused, unreachable, timed out) gets none of the
        // command's time; one never heard yet (a short command's only export is its last) a
        // moment, and the full wait as soon as it answers (the first export may be under way).
        let started = Instant::now();
        loop {
            let limit = match (self.healthy.load(Ordering::SeqCst), self.answered.load(Ordering::SeqCst)) {
                (false, _) => Duration::ZERO,
                (true, true) => Duration::from_secs(2),
                (true, false) => Duration::from_millis(200),
            };
            let left = limit.saturating_sub(started.elapsed());
            let waited = self.done.recv_timeout(left.min(Duration::from_millis(20)));
            // Done, or the exporter's thread is gone (the channel disconnected).
            if left.is_zero() || !matches!(waited, Err(std::sync::mpsc::RecvTimeoutError::Timeout)) {
                return;
            }
        }
    }
}

/// Gives the calling thread (the exporter's) the lowest CPU priority (nice 19; Linux's nice is
/// a thread's): a busy engine's steps go first, and its spare CPU sends the spans. Measured on
/// the engine benchmark: at the default priority the exporter's wake-ups (one a batch) and
/// sends cost the concurrent steps 7.5%; at 19, 3.5% (a build with a switch, 15 alternations of
/// `bench`; BENCHMARKS.md has the figures since). If the CPU is never
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
    // One thread for the batches and their connection: the connection is driven while a batch
    // is sent, and looked at before each reuse (`http_client`), without a second thread's
    // wake-ups competing with the workflows for the CPU.
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return;
    };
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
    let (content_type, body) = match config.protocol {
        Protocol::HttpProtobuf => ("application/x-protobuf", body),
        Protocol::Grpc => ("application/grpc", grpc::frame(body)),
    };
    let taken = match rt.block_on(config.server.post_bytes(kept, &config.path, content_type, body)) {
        Ok(answer) => match config.protocol {
            Protocol::HttpProtobuf if (200..300).contains(&answer.status) => Ok(()),
            Protocol::HttpProtobuf => Err(format!("HTTP status {}", answer.status)),
            Protocol::Grpc => grpc::outcome(&answer),
        },
        Err(e) => Err(e.message),
    };
    match taken {
        Ok(()) => {
            EXPORTED.fetch_add(spans as u64, Ordering::Relaxed);
            healthy.store(true, Ordering::SeqCst);
            answered.store(true, Ordering::SeqCst);
        }
        Err(why) => {
            healthy.store(false, Ordering::SeqCst);
            tracing::debug!(why, "the trace collector did not take a batch");
            infraflow_trace::count_dropped(spans as u64);
        }
    }
}
