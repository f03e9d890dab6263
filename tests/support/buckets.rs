//! AWS's account-wide request token buckets, for the proxy: each request class has a bucket of
//! tokens refilled at a fixed rate; a request finding it empty is answered with the service's
//! throttle (EC2 `RequestLimitExceeded` on HTTP 503, the others `Throttling` on HTTP 400), as
//! AWS answers it. Also the floor those buckets put under any run: the time the admitted
//! requests need at the buckets' rates, whatever the client does.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One bucket: `burst` tokens, `per_second` refill.
#[derive(Clone, Copy, Debug)]
pub struct Rate {
    pub burst: f64,
    pub per_second: f64,
}

/// The buckets the issue measured a CI account with (EC2's per-class, ELB's, Route53's).
pub fn aws_account() -> BTreeMap<&'static str, Rate> {
    BTreeMap::from([
        ("ec2-mutating", Rate { burst: 20.0, per_second: 5.0 }),
        ("ec2-describe", Rate { burst: 40.0, per_second: 10.0 }),
        ("route53", Rate { burst: 5.0, per_second: 5.0 }),
        ("elb", Rate { burst: 20.0, per_second: 10.0 }),
    ])
}

/// The class of one request, from its protocol's action and API version.
pub fn class_of(action: &str, body: &str) -> Option<&'static str> {
    if action.starts_with("route53 ") {
        return Some("route53");
    }
    if body.contains("Version=2016-11-15") {
        let describe = action.starts_with("Describe") || action.starts_with("Get");
        return Some(if describe { "ec2-describe" } else { "ec2-mutating" });
    }
    if body.contains("Version=2015-12-01") || body.contains("Version=2012-06-01") {
        return Some("elb");
    }
    None
}

struct Bucket {
    rate: Rate,
    tokens: f64,
    at: Instant,
    admitted: u64,
    throttled: u64,
    /// When the first and the last request were admitted.
    span: Option<(Instant, Instant)>,
}

/// The buckets of one proxy, and what they admitted and refused.
#[derive(Default)]
pub struct Buckets {
    buckets: BTreeMap<&'static str, Bucket>,
}

/// What the buckets saw, per class: (admitted, throttled), and the floor of the run.
#[derive(Clone, Debug, Default)]
pub struct BucketReport {
    pub by_class: BTreeMap<&'static str, (u64, u64)>,
    pub floor: Duration,
    /// From the first to the last request each class admitted.
    pub spans: BTreeMap<&'static str, Duration>,
}

impl BucketReport {
    pub fn admitted(&self) -> u64 {
        self.by_class.values().map(|(a, _)| a).sum()
    }

    pub fn throttled(&self) -> u64 {
        self.by_class.values().map(|(_, t)| t).sum()
    }
}

impl Buckets {
    pub fn new(rates: BTreeMap<&'static str, Rate>) -> Buckets {
        let now = Instant::now();
        Buckets {
            buckets: rates
                .into_iter()
                .map(|(c, rate)| {
                    (c, Bucket { rate, tokens: rate.burst, at: now, admitted: 0, throttled: 0, span: None })
                })
                .collect(),
        }
    }

    /// Takes a token for a request of `class`: false when the bucket is empty (throttle it).
    pub fn admit(&mut self, class: &str) -> bool {
        let Some(b) = self.buckets.get_mut(class) else { return true };
        let now = Instant::now();
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * b.rate.per_second).min(b.rate.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            b.admitted += 1;
            b.span = Some((b.span.map_or(now, |(first, _)| first), now));
            true
        } else {
            b.throttled += 1;
            false
        }
    }

    /// The floor: for each class, the admitted requests beyond the first burst at the class's
    /// rate; the run can be no shorter than the slowest class's.
    pub fn report(&self) -> BucketReport {
        let by_class = self.buckets.iter().map(|(c, b)| (*c, (b.admitted, b.throttled))).collect();
        let floor = self
            .buckets
            .values()
            .map(|b| ((b.admitted as f64 - b.rate.burst).max(0.0)) / b.rate.per_second)
            .fold(0.0, f64::max);
        let spans = self.buckets.iter().filter_map(|(c, b)| b.span.map(|(f, l)| (*c, l - f))).collect();
        BucketReport { by_class, floor: Duration::from_secs_f64(floor), spans }
    }
}
