//! EC2 is eventually consistent: right after a create, calls that name the new id can answer
//! `*.NotFound` for seconds. A follow-up call is retried *in place* until the id is known, never
//! by going back to the create (which would look up, miss the new resource, and make another).

use std::future::Future;
use std::time::Duration;

use crate::error::AwsResult;

/// How long a call naming a new id is retried while AWS says it does not exist.
pub const CONSISTENCY_BUDGET: Duration = Duration::from_secs(60);

/// Runs `call` until it succeeds or fails with anything but a consistency error, waiting with
/// backoff (250 ms doubling to 4 s) for at most `CONSISTENCY_BUDGET`.
pub async fn once_consistent<T, F, Fut>(mut call: F) -> AwsResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = AwsResult<T>>,
{
    let start = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(250);
    loop {
        match call().await {
            Err(e) if e.is_not_yet_consistent() && start.elapsed() + pause < CONSISTENCY_BUDGET => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(4));
            }
            r => return r,
        }
    }
}
