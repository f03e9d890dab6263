//! Time as an injected dependency, so engine tests never sleep and lease/backoff logic is testable.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};

pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Milliseconds since the Unix epoch, and a way to wait for one.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
    fn sleep_until(&self, at_ms: i64) -> Sleep;
}

/// The wall clock and tokio's timer.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl SystemClock {
    pub fn now(&self) -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        self.now()
    }

    fn sleep_until(&self, at_ms: i64) -> Sleep {
        let wait = (at_ms - self.now_ms()).max(0) as u64;
        Box::pin(tokio::time::sleep(std::time::Duration::from_millis(wait)))
    }
}

/// A clock for tests: sleeping jumps time forward at once instead of waiting.
#[derive(Debug)]
pub struct TestClock {
    now: AtomicI64,
}

impl TestClock {
    pub fn new(start_ms: i64) -> TestClock {
        TestClock { now: AtomicI64::new(start_ms) }
    }

    pub fn now(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }

    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, at_ms: i64) -> Sleep {
        self.now.fetch_max(at_ms, Ordering::SeqCst);
        Box::pin(tokio::task::yield_now())
    }
}
