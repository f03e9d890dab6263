//! The bounded queue finished spans leave by: filled without waiting (a full queue drops the
//! span and counts it), emptied a batch at a time by the exporter the binary installs. Nothing
//! installed: tracing is off, and a span costs nothing past its making.
//!
//! Measured on the engine benchmark, two costs of a span's end mattered more than its making: a
//! channel's send wakes its receiver every time (a syscall and a context switch a span), and
//! memory allocated by a workflow's thread but freed by the exporter's contends for the
//! allocator's lock. So a span is encoded where it ends, into bytes the queue lays end to end,
//! and the exporter is woken once a batch is full.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::sampler::Sampler;
use crate::span::Span;
use crate::wire;

/// Encoded spans (`wire::span_entry`), and where each ends.
#[derive(Default)]
pub struct Batch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The batch in runs of at most `max` spans: (how many, their bytes).
    pub fn chunks(&self, max: usize) -> impl Iterator<Item = (usize, &[u8])> {
        let max = max.max(1);
        (0..self.ends.len()).step_by(max).map(move |first| {
            let last = (first + max).min(self.ends.len()) - 1;
            let from = if first == 0 { 0 } else { self.ends[first - 1] };
            (last + 1 - first, &self.bytes[from..self.ends[last]])
        })
    }

    /// Empties it, keeping its memory for the next batch.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

struct Queue {
    pending: Mutex<Batch>,
    full: Condvar,
    capacity: usize,
    batch: usize,
    sampler: Sampler,
}

static QUEUE: OnceLock<Queue> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Where this thread encodes a span before queueing it: reused, never freed elsewhere.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(1024));
}

/// The exporter's end of the queue.
pub struct Exported(&'static Queue);

impl Exported {
    /// Swaps the queued spans into `into` (which must be empty) when a batch is full or it is
    /// `due`; waits up to `wait` for a full batch first.
    pub fn take(&self, into: &mut Batch, wait: Duration, due: Instant) {
        let q = self.0;
        let mut pending = q.pending.lock().unwrap_or_else(|p| p.into_inner());
        // An empty queue is waited on even when due (a delay of 0 must not spin), at most 50 ms.
        let wait = if pending.is_empty() { wait.max(Duration::from_millis(50)) } else { wait };
        if pending.len() < q.batch && !wait.is_zero() {
            pending = q.full.wait_timeout(pending, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
        if pending.len() >= q.batch || Instant::now() >= due {
            std::mem::swap(&mut *pending, into);
        }
    }
}

/// Turns tracing on with a queue of `capacity` spans and `sampler`, waking the exporter when
/// `batch` spans wait; returns the exporter's end, or None if tracing was on already.
pub fn install(capacity: usize, batch: usize, sampler: Sampler) -> Option<Exported> {
    let capacity = capacity.max(1);
    let queue = Queue {
        pending: Mutex::new(Batch::default()),
        full: Condvar::new(),
        capacity,
        batch: batch.clamp(1, capacity),
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
pub fn export(span: &Span) {
    let Some(q) = QUEUE.get() else { return };
    SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        wire::span_entry(scratch, span);
        let mut pending = q.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.len() >= q.capacity {
            drop(pending);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.bytes.extend_from_slice(scratch);
        let end = pending.bytes.len();
        pending.ends.push(end);
        let wake = pending.len() == q.batch;
        drop(pending);
        if wake {
            q.full.notify_one();
        }
    });
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

    #[test]
    fn a_batch_is_cut_at_its_spans_ends_no_run_larger_than_asked() {
        let batch = Batch { bytes: b"aabbbcd".to_vec(), ends: vec![2, 5, 6, 7] };
        let runs: Vec<(usize, &[u8])> = batch.chunks(3).collect();
        assert_eq!(runs, [(3, &b"aabbbc"[..]), (1, &b"d"[..])]);
        assert_eq!(batch.chunks(10).count(), 1);
    }
}
