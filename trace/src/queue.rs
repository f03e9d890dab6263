//! The bounded queue finished spans leave by: filled without waiting (a full queue drops the
//! span and counts it), emptied a batch at a time by the exporter the binary installs. Nothing
//! installed: tracing is off, and a span costs nothing past its making.
//!
//! A span's end only takes an uncontended lock and pushes: the exporter is woken once a batch
//! is full, not per span (a channel's send wakes its receiver every time — a syscall and a
//! context switch a span, a fifth of the engine's concurrent throughput when measured).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::sampler::Sampler;
use crate::span::Span;

struct Queue {
    spans: Mutex<Vec<Span>>,
    full: Condvar,
    capacity: usize,
    batch: usize,
    sampler: Sampler,
}

static QUEUE: OnceLock<Queue> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The exporter's end of the queue.
pub struct Exported(&'static Queue);

impl Exported {
    /// The spans queued so far, in the order they ended, at most `max`: at once when a batch is
    /// waiting, else after up to `wait` (possibly none).
    pub fn next_batch(&self, max: usize, wait: Duration) -> Vec<Span> {
        let q = self.0;
        let mut spans = q.spans.lock().unwrap_or_else(|p| p.into_inner());
        if spans.len() < q.batch && !wait.is_zero() {
            spans = q.full.wait_timeout(spans, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
        if spans.len() <= max {
            std::mem::take(&mut *spans)
        } else {
            let rest = spans.split_off(max);
            std::mem::replace(&mut *spans, rest)
        }
    }
}

/// Turns tracing on with a queue of `capacity` spans and `sampler`, waking the exporter when
/// `batch` spans wait; returns the exporter's end, or None if tracing was on already.
pub fn install(capacity: usize, batch: usize, sampler: Sampler) -> Option<Exported> {
    let queue = Queue {
        spans: Mutex::new(Vec::with_capacity(batch.min(capacity))),
        full: Condvar::new(),
        capacity: capacity.max(1),
        batch: batch.clamp(1, capacity.max(1)),
        sampler,
    };
    QUEUE.set(queue).ok()?;
    QUEUE.get().map(Exported)
}

/// The sampler, when tracing is on.
pub fn enabled() -> Option<Sampler> {
    QUEUE.get().map(|q| q.sampler)
}

/// Queues `span`; never waits on the exporter. A full queue (a collector that does not keep up
/// or answer) drops it and counts it (`dropped`).
pub fn export(span: Span) {
    let Some(q) = QUEUE.get() else { return };
    let mut spans = q.spans.lock().unwrap_or_else(|p| p.into_inner());
    if spans.len() >= q.capacity {
        drop(spans);
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    spans.push(span);
    let wake = spans.len() == q.batch;
    drop(spans);
    if wake {
        q.full.notify_one();
    }
}

/// Spans dropped so far: the queue was full, or the exporter gave them up.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Counts spans the exporter gave up (a collector that refused or never answered).
pub fn count_dropped(n: u64) {
    DROPPED.fetch_add(n, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TraceId;

    fn queue(capacity: usize, batch: usize) -> &'static Queue {
        Box::leak(Box::new(Queue {
            spans: Mutex::new(Vec::new()),
            full: Condvar::new(),
            capacity,
            batch,
            sampler: Sampler::AlwaysOn,
        }))
    }

    #[test]
    fn a_batch_is_taken_in_the_order_its_spans_ended_and_no_larger_than_asked() {
        let q = queue(10, 3);
        let mut spans = q.spans.lock().unwrap();
        for name in ["a", "b", "c", "d"] {
            spans.push(Span::start(TraceId([1; 16]), None, name));
        }
        drop(spans);
        let out = Exported(q);
        let first: Vec<String> = out.next_batch(3, Duration::ZERO).into_iter().map(|s| s.name).collect();
        assert_eq!(first, ["a", "b", "c"]);
        let rest: Vec<String> = out.next_batch(3, Duration::ZERO).into_iter().map(|s| s.name).collect();
        assert_eq!(rest, ["d"]);
    }
}
