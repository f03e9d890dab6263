//! EC2 is eventually consistent: right after a create, calls that name the new id can answer
//! `*.NotFound` for seconds. A follow-up call is retried *in place* until the id is known, never
//! by going back to the create (which would look up, miss the new resource, and make another).

use std::future::Future;
use std::time::Duration;

use crate::error::{AwsError, AwsResult};

/// How long a call naming a new id is retried while AWS says it does not exist.
pub const CONSISTENCY_BUDGET: Duration = Duration::from_secs(60);

/// Runs `call` until it succeeds or fails with anything but a consistency error, waiting with
/// backoff (250 ms doubling to 4 s) for at most `CONSISTENCY_BUDGET`.
pub async fn once_consistent<T, F, Fut>(call: F) -> AwsResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = AwsResult<T>>,
{
    retry_in_place(
        call,
        AwsError::is_not_yet_consistent,
        CONSISTENCY_BUDGET,
        Duration::from_millis(250),
        Duration::from_secs(4),
    )
    .await
}

/// The one loop behind every in-place retry: `call` again while its error `is_transient`, with
/// jittered backoff from `first` doubling to `max_pause`, for at most `budget`.
pub(crate) async fn retry_in_place<T, F, Fut>(
    mut call: F,
    is_transient: fn(&AwsError) -> bool,
    budget: Duration,
    first: Duration,
    max_pause: Duration,
) -> AwsResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = AwsResult<T>>,
{
    let start = tokio::time::Instant::now();
    let mut pause = first;
    loop {
        match call().await {
            Err(e) if is_transient(&e) && start.elapsed() + pause < budget => {
                // Jitter, so concurrent callers do not retry in lockstep.
                tokio::time::sleep(pause.mul_f64(0.8 + 0.4 * fastrand::f64())).await;
                pause = (pause * 2).min(max_pause);
            }
            r => return r,
        }
    }
}
