//! The bounded queue finished spans leave by: filled without waiting (a full queue drops the
//! span and counts it), emptied by the exporter the binary installs. Nothing installed: tracing
//! is off, and a span costs nothing past its making.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use crate::sampler::Sampler;
use crate::span::Span;

struct Queue {
    tx: SyncSender<Span>,
    sampler: Sampler,
}

static QUEUE: OnceLock<Queue> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// What the exporter reads: the spans, in the order they ended.
pub type Exported = Receiver<Span>;

/// Turns tracing on with a queue of `capacity` spans and `sampler`; returns the exporter's end,
/// or None if tracing was on already.
pub fn install(capacity: usize, sampler: Sampler) -> Option<Exported> {
    let (tx, rx) = sync_channel(capacity.max(1));
    QUEUE.set(Queue { tx, sampler }).ok().map(|_| rx)
}

/// The sampler, when tracing is on.
pub fn enabled() -> Option<Sampler> {
    QUEUE.get().map(|q| q.sampler)
}

/// Queues `span`; never waits. A full queue (a collector that does not keep up or answer)
/// drops it and counts it (`dropped`).
pub fn export(span: Span) {
    let Some(q) = QUEUE.get() else { return };
    match q.tx.try_send(span) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
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
