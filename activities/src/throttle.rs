//! Route53 allows 5 requests per second per account, and every API throttles under load: a scan
//! retries a throttled call in place, with backoff, instead of failing and starting over (which,
//! on an account with hundreds of zones, would never finish).

use std::future::Future;
use std::time::Duration;

use crate::error::AwsResult;

/// How long one call is retried while AWS throttles it.
pub const THROTTLE_BUDGET: Duration = Duration::from_secs(120);

fn throttled(code: Option<&str>) -> bool {
    matches!(
        code,
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
pub async fn within_rate<T, F, Fut>(mut call: F) -> AwsResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = AwsResult<T>>,
{
    let start = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(200);
    loop {
        match call().await {
            Err(e) if throttled(e.code.as_deref()) && start.elapsed() + pause < THROTTLE_BUDGET => {
                tokio::time::sleep(pause + Duration::from_millis(fastrand_ms())).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            r => return r,
        }
    }
}

/// A little jitter, so concurrent scans do not throttle each other in lockstep.
fn fastrand_ms() -> u64 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    u64::from(nanos % 100)
}
