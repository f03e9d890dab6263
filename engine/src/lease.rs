//! The lease on one workflow as this process holds it, with the self-fence that drops the
//! workflow before the lease can expire when renewals stop succeeding.
//!
//! Why these numbers: a lease lasts 15 s (`EngineConfig::lease_ttl`) and is renewed every second
//! (`heartbeat`); without a successful renewal this process drops the workflow at 10 s (a third of
//! the lease kept in reserve, `FENCE_MARGIN`). Another owner's lease, live or on another host, is
//! respected until it expires; one of a dead process of this host is taken over at once (the
//! journal's `owner`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use infraflow_journal::Fence;

/// A moment on the boot clock (CLOCK_BOOTTIME): monotonic like `Instant` (CLOCK_MONOTONIC), but
/// it keeps counting while the machine is suspended or hibernated. A lease's expiry is wall or
/// database time, which moves on during a suspend; a fence on CLOCK_MONOTONIC would resume as if
/// no time had passed while another host already held the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(Duration);

impl BootInstant {
    pub fn now() -> BootInstant {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        BootInstant(Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32))
    }
}

impl std::ops::Add<Duration> for BootInstant {
    type Output = BootInstant;
    fn add(self, d: Duration) -> BootInstant {
        BootInstant(self.0 + d)
    }
}

/// The lease on one workflow as this process believes it to be.
///
/// Self-fencing: the journal's expiry is wall-clock time that *other* processes compare with
/// their clocks; this process keeps its own account, on the boot clock (`BootInstant`), of when its last renewal was
/// asked for and succeeded. Once `fence_at` passes without a newer success, the workflow is
/// dropped here — `FENCE_MARGIN` of the lease before anyone else may take it over — so a stalled
/// journal writer (a slow disk, a lock held elsewhere) never lets two processes run its steps.
/// The assumption: the clocks of the processes sharing a journal differ by less than the margin.
#[derive(Debug)]
pub struct LeaseCell {
    /// The acquisition this is: every append of the execution is fenced on it.
    pub(crate) fence: Fence,
    pub(crate) expires_at: AtomicI64,
    pub(crate) ttl_ms: i64,
    /// When the request of the last successful acquire or renewal was sent.
    renewed_at: Mutex<BootInstant>,
}

/// The share of the lease kept in reserve: a workflow is dropped when only this much is left.
pub const FENCE_MARGIN: f64 = 1.0 / 3.0;

impl LeaseCell {
    /// A lease acquired as `fence` with a request sent at `sent`.
    pub(crate) fn new(fence: Fence, expires_at: i64, ttl_ms: i64, sent: BootInstant) -> LeaseCell {
        LeaseCell { fence, expires_at: AtomicI64::new(expires_at), ttl_ms, renewed_at: Mutex::new(sent) }
    }

    /// A renewal whose request was sent at `sent` succeeded.
    pub(crate) fn renewed(&self, sent: BootInstant, expires_at: i64) {
        self.expires_at.fetch_max(expires_at, Ordering::SeqCst);
        let mut at = self.renewed_at.lock().unwrap();
        *at = (*at).max(sent);
    }

    /// When this process must have stopped running the workflow unless a renewal succeeds.
    pub(crate) fn fence_at(&self) -> BootInstant {
        let keep = Duration::from_millis((self.ttl_ms as f64 * (1.0 - FENCE_MARGIN)) as u64);
        *self.renewed_at.lock().unwrap() + keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_moves_forward_with_time_slept() {
        let a = BootInstant::now();
        std::thread::sleep(Duration::from_millis(20));
        assert!(BootInstant::now() >= a + Duration::from_millis(20));
    }
}
