//! Bounded polling for asynchronous AWS states. A wait that runs out is a retryable error, so the
//! engine retries the step — after a restart too — and the poll resumes.
//!
//! Its waits — a NAT gateway available or deleted (`nat`), an endpoint deleted (`endpoints`), a
//! load balancer active, an instance running or terminated — poll inside one step with backoff,
//! bounded at `WAIT_BUDGET` (5 minutes) per attempt.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::{AwsError, AwsResult};

/// How long one attempt of a wait polls before handing back to the engine.
pub const WAIT_BUDGET: Duration = Duration::from_secs(300);

/// Polls `check` (Some = done) with backoff from 1 s to 10 s, for at most `budget`.
pub async fn poll_until<T, F, Fut>(operation: &'static str, what: &str, budget: Duration, mut check: F) -> AwsResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = AwsResult<Option<T>>>,
{
    let start = Instant::now();
    let mut delay = Duration::from_millis(250);
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if start.elapsed() >= budget {
            return Err(AwsError::not_yet(operation, format!("{what} after {}s; still waiting", budget.as_secs())));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}
