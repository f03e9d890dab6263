//! How long a workflow waits for what another holds — its cluster's lease, the account's quota —
//! before it pauses naming it (`--wait-limit`, one hour by default): a holder that keeps renewing
//! that long is a provision that long, or a stuck one an operator must look at.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static LIMIT_MS: AtomicU64 = AtomicU64::new(60 * 60 * 1000);

/// Sets the process's limit, once, before any workflow runs.
pub fn configure(limit: Duration) {
    LIMIT_MS.store(limit.as_millis().clamp(1, u64::MAX as u128) as u64, Ordering::Relaxed);
}

pub fn limit() -> Duration {
    Duration::from_millis(LIMIT_MS.load(Ordering::Relaxed))
}

/// The limit as people write it: `60 min`, `90 s`, `500 ms`.
pub fn said() -> String {
    let ms = LIMIT_MS.load(Ordering::Relaxed);
    match ms {
        ms if ms % 60_000 == 0 => format!("{} min", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{} s", ms / 1_000),
        ms => format!("{ms} ms"),
    }
}
