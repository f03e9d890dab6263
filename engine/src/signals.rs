//! Signals: the requests that reach a running workflow from outside (cancel, stop, lease lost),
//! and the waits on them that never miss one.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Requests that reach a running workflow from outside: cancel, stop (shutdown), lease lost.
#[derive(Debug, Default)]
pub struct Signals {
    cancel: AtomicBool,
    stop: AtomicBool,
    lost: AtomicBool,
    /// The workflow reached a finished state and only gives up what it holds beyond the journal
    /// now: its journal lease went with its last record, which is no loss.
    finishing: AtomicBool,
    /// It waits for its hold (another's lease, the account's quota): a daemon does not count it
    /// against its workers meanwhile, so what would end the wait can still be claimed.
    waiting: AtomicBool,
    notify: Notify,
    lost_notify: Notify,
}

impl Signals {
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// The lease is gone: whatever runs must be dropped at once, not at the next boundary.
    pub fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
        self.stop();
        self.lost_notify.notify_waiters();
    }

    pub fn finishing(&self) {
        self.finishing.store(true, Ordering::SeqCst);
    }

    pub(crate) fn set_waiting(&self, waiting: bool) {
        self.waiting.store(waiting, Ordering::SeqCst);
    }

    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::SeqCst)
    }

    pub fn is_finishing(&self) -> bool {
        self.finishing.load(Ordering::SeqCst)
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    pub(crate) async fn lost(&self) {
        loop {
            let notified = self.lost_notify.notified();
            if self.is_lost() {
                return;
            }
            notified.await;
        }
    }

    pub fn cancel_requested(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Resolves once stop (or, unless `compensating`, cancel) is signalled. The waiter is
    /// registered before the flags are read, so a signal in between is never lost.
    pub(crate) async fn interrupted(&self, compensating: bool) {
        loop {
            let notified = self.notify.notified();
            if self.stop_requested() || (self.cancel_requested() && !compensating) {
                return;
            }
            notified.await;
        }
    }

    /// Resolves once stop or lost is signalled.
    pub async fn stopped(&self) {
        loop {
            let notified = self.notify.notified();
            if self.stop_requested() {
                return;
            }
            notified.await;
        }
    }
}
