//! Route53 allows 5 requests per second per account, and every API throttles under load: a scan
//! retries a throttled call in place, with backoff, instead of failing and starting over (which,
//! on an account with hundreds of zones, would never finish).

use std::future::Future;
use std::time::Duration;

use crate::consistency::retry_in_place;
use crate::error::{AwsError, AwsResult};

/// How long one call is retried while AWS throttles it.
pub const THROTTLE_BUDGET: Duration = Duration::from_secs(120);

fn throttled(e: &AwsError) -> bool {
    matches!(
        e.code.as_deref(),
        Some(
            "Throttling"
                | "ThrottlingException"
                | "RequestLimitExceeded"
                | "PriorRequestNotComplete"
                | "TooManyRequestsException"
                | "RequestThrottled"
        )
    )
}

/// Runs `call` until it is not throttled (200 ms doubling to 2 s, for at most `THROTTLE_BUDGET`).
pub async fn within_rate<T, F, Fut>(call: F) -> AwsResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = AwsResult<T>>,
{
    retry_in_place(call, throttled, THROTTLE_BUDGET, Duration::from_millis(200), Duration::from_secs(2)).await
}

/// How long one read is retried in place.
pub const READ_BUDGET: Duration = Duration::from_secs(30);

fn retryable(e: &AwsError) -> bool {
    e.retryable
}

/// Runs a read (it changes nothing in AWS) until it fails with anything but a retryable error —
/// throttling, a 5xx, a dropped connection — for at most `READ_BUDGET`: a step that makes many
/// reads side by side would otherwise seldom see all of them succeed in one attempt.
pub async fn read_retrying<T, F, Fut>(call: F) -> AwsResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = AwsResult<T>>,
{
    retry_in_place(call, retryable, READ_BUDGET, Duration::from_millis(200), Duration::from_secs(2)).await
}
