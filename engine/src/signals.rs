//! Signals: the requests that reach a running workflow from outside (cancel, stop, lease lost),
//! and the waits on them that never miss one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// A daemon's worker slot, held by a running workflow: given back while it waits for its hold,
/// taken again before it acts.
#[derive(Debug, Default)]
struct Slot {
    workers: Option<Arc<Semaphore>>,
    permit: Option<OwnedSemaphorePermit>,
}

/// Requests that reach a running workflow from outside: cancel, stop (shutdown), lease lost.
#[derive(Debug, Default)]
pub struct Signals {
    cancel: AtomicBool,
    stop: AtomicBool,
    lost: AtomicBool,
    /// The workflow reached a finished state and only gives up what it holds beyond the journal
    /// now: its journal lease went with its last record, which is no loss.
    finishing: AtomicBool,
    /// The daemon's worker slot it runs under: given back while it waits for its hold (another's
    /// lease, the account's quota), so that what would end the wait can still be claimed.
    slot: std::sync::Mutex<Slot>,
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

    /// It waits for its hold: it leaves its worker slot (`occupy_again` takes one back).
    pub(crate) fn leave_slot_while_waiting(&self) {
        self.slot.lock().unwrap().permit = None;
    }

    /// Runs under one of `workers`' slots (a daemon's), held by `permit`.
    pub(crate) fn occupy(&self, workers: Arc<Semaphore>, permit: OwnedSemaphorePermit) {
        *self.slot.lock().unwrap() = Slot { workers: Some(workers), permit: Some(permit) };
    }

    /// Takes a worker slot again after a wait gave it back (none outside a daemon), so that no
    /// more workflows act at once than the daemon has workers; a stop ends the wait for it.
    pub(crate) async fn occupy_again(&self) {
        let workers = {
            let slot = self.slot.lock().unwrap();
            if slot.permit.is_some() {
                return;
            }
            slot.workers.clone()
        };
        let Some(workers) = workers else { return };
        tokio::select! {
            permit = workers.acquire_owned() => {
                if let Ok(permit) = permit {
                    self.slot.lock().unwrap().permit = Some(permit);
                }
            }
            _ = self.interrupted(true) => {}
        }
    }

    /// Gives the worker slot back: the workflow's execution ended.
    pub(crate) fn vacate(&self) {
        *self.slot.lock().unwrap() = Slot::default();
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
