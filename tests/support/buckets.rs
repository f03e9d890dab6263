//! AWS's account-wide request token buckets, for the proxy: each request class has a bucket of
//! tokens refilled at a fixed rate — EC2's classes one per API, as AWS counts them —; a request
//! finding it empty is answered with the service's throttle (EC2 `RequestLimitExceeded` on HTTP
//! 503, the others `Throttling` on HTTP 400), as AWS answers it. Also the floor those buckets put
//! under any run: the time the admitted requests need at the buckets' rates, whatever the client
//! does.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One bucket: `burst` tokens, `per_second` refill.
#[derive(Clone, Copy, Debug)]
pub struct Rate {
    pub burst: f64,
    pub per_second: f64,
}

/// An account's buckets as AWS documents them: EC2's for each API (a mutating API's 50 tokens at
/// 5 a second, a non-mutating one's 100 at 20), Route53's 5 a second, ELB's in each API version
/// (its non-mutating actions' 40 at 10 a second; the rest publish no number: 20 at 10).
pub fn aws_account() -> BTreeMap<&'static str, Rate> {
    BTreeMap::from([
        ("ec2-mutating", Rate { burst: 50.0, per_second: 5.0 }),
        ("ec2-describe", Rate { burst: 100.0, per_second: 20.0 }),
        ("route53", Rate { burst: 5.0, per_second: 5.0 }),
        ("elb-describe", Rate { burst: 40.0, per_second: 10.0 }),
        ("elb-mutating", Rate { burst: 20.0, per_second: 10.0 }),
        ("classic-elb-describe", Rate { burst: 40.0, per_second: 10.0 }),
        ("classic-elb-mutating", Rate { burst: 20.0, per_second: 10.0 }),
    ])
}

/// Whether AWS keeps a bucket per API of `class` (EC2 evaluates each API individually).
fn per_api(class: &str) -> bool {
    class.starts_with("ec2-")
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
    let describe = action.starts_with("Describe");
    if body.contains("Version=2015-12-01") {
        return Some(if describe { "elb-describe" } else { "elb-mutating" });
    }
    if body.contains("Version=2012-06-01") {
        return Some(if describe { "classic-elb-describe" } else { "classic-elb-mutating" });
    }
    None
}

struct Bucket {
    class: &'static str,
    rate: Rate,
    tokens: f64,
    at: Instant,
    admitted: u64,
    throttled: u64,
    /// When the first and the last request were admitted.
    span: Option<(Instant, Instant)>,
}

/// The buckets of one proxy, and what they admitted and refused: one per class, or per API of a
/// per-API class (`ec2-mutating CreateSubnet`), made as the first request of it comes.
#[derive(Default)]
pub struct Buckets {
    rates: BTreeMap<&'static str, Rate>,
    buckets: BTreeMap<String, Bucket>,
    /// When the first request came, and each class's admitted requests per second since.
    started: Option<Instant>,
    seconds: BTreeMap<&'static str, Vec<u32>>,
    per_api_seconds: BTreeMap<String, Vec<u32>>,
}

/// What the buckets saw, per class: (admitted, throttled), and the floor of the run.
#[derive(Clone, Debug, Default)]
pub struct BucketReport {
    pub by_class: BTreeMap<&'static str, (u64, u64)>,
    pub floor: Duration,
    /// From the first to the last request each class admitted.
    pub spans: BTreeMap<&'static str, Duration>,
    /// Each class's admitted requests in each second from the first request: where a class idled.
    pub seconds: BTreeMap<&'static str, Vec<u32>>,
    /// The same per API (`INFRAFLOW_BENCH_PER_API` set): which bucket a class waited on.
    pub per_api: BTreeMap<String, Vec<u32>>,
}

impl BucketReport {
    pub fn admitted(&self) -> u64 {
        self.by_class.values().map(|(a, _)| a).sum()
    }

    pub fn throttled(&self) -> u64 {
        self.by_class.values().map(|(_, t)| t).sum()
    }
}

/// Counts one request in `second` of `counts` (one entry a second from the first request).
fn tally(counts: &mut Vec<u32>, second: usize) {
    if counts.len() <= second {
        counts.resize(second + 1, 0);
    }
    counts[second] += 1;
}

impl Buckets {
    pub fn new(rates: BTreeMap<&'static str, Rate>) -> Buckets {
        Buckets { rates, ..Default::default() }
    }

    /// Takes a token for a request `action` of `class` in `account` ("" for the process's own;
    /// each account has buckets of its own, as on AWS): false when its bucket is empty (throttle
    /// it).
    pub fn admit(&mut self, account: &str, class: &str, action: &str) -> bool {
        let Some((&class, &rate)) = self.rates.get_key_value(class) else { return true };
        let key = if per_api(class) { format!("{account} {class} {action}") } else { format!("{account} {class}") };
        let now = Instant::now();
        let b = self.buckets.entry(key).or_insert_with(|| Bucket {
            class,
            rate,
            tokens: rate.burst,
            at: now,
            admitted: 0,
            throttled: 0,
            span: None,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * b.rate.per_second).min(b.rate.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            b.admitted += 1;
            b.span = Some((b.span.map_or(now, |(first, _)| first), now));
            let second = now.duration_since(*self.started.get_or_insert(now)).as_secs() as usize;
            tally(self.seconds.entry(class).or_default(), second);
            if std::env::var_os("INFRAFLOW_BENCH_PER_API").is_some() {
                tally(self.per_api_seconds.entry(format!("{class} {action}")).or_default(), second);
            }
            true
        } else {
            b.throttled += 1;
            false
        }
    }

    /// Per class: what its buckets admitted and throttled, and from the first to the last request
    /// admitted. The floor: for each bucket, the admitted requests beyond its first burst at its
    /// rate; the run can be no shorter than the slowest bucket's.
    pub fn report(&self) -> BucketReport {
        let mut by_class: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
        let mut spans: BTreeMap<&'static str, (Instant, Instant)> = BTreeMap::new();
        for b in self.buckets.values() {
            let e = by_class.entry(b.class).or_default();
            e.0 += b.admitted;
            e.1 += b.throttled;
            if let Some((first, last)) = b.span {
                let s = spans.entry(b.class).or_insert((first, last));
                *s = (s.0.min(first), s.1.max(last));
            }
        }
        let floor = self
            .buckets
            .values()
            .map(|b| ((b.admitted as f64 - b.rate.burst).max(0.0)) / b.rate.per_second)
            .fold(0.0, f64::max);
        let spans = spans.into_iter().map(|(c, (f, l))| (c, l - f)).collect();
        BucketReport {
            by_class,
            floor: Duration::from_secs_f64(floor),
            spans,
            seconds: self.seconds.clone(),
            per_api: self.per_api_seconds.clone(),
        }
    }
}
