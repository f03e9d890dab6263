//! Reads made outside a step (the checks before journaling, a teardown's plan, a drift check, a
//! sweep's census) read again on a retryable error, as a step's would: every read is idempotent,
//! and AWS throttles in storms (Route53 allows five requests a second per account).

use std::future::Future;

/// `read`'s answer, asked again after the steps' backoff while `retryable` says a retry can help
/// and attempts remain; the last error otherwise.
pub async fn read_retrying<T, E, Fut>(retryable: impl Fn(&E) -> bool, mut read: impl FnMut() -> Fut) -> Result<T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let policy = crate::aws_steps::aws_retry();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match read().await {
            Err(e) if retryable(&e) && attempt < policy.max_attempts => {
                tokio::time::sleep(policy.delay_after(attempt)).await;
            }
            r => return r,
        }
    }
}
