//! Account-wide pacing of AWS requests: one adaptive token bucket per request class (as AWS
//! throttles them) per region, shared by every workflow of the process, so that a fleet of
//! workflows stays inside the account's request rate instead of provoking throttles that the
//! clusters' own controllers and every other team on the account pay for.
//!
//! Requests wait in the HTTP client (`http`), which is the one async place every SDK call goes
//! through; the SDK's classifiers tell a throttle apart and the class's bucket slows down.
//!
//! Why requests are paced per process, in the HTTP client, by buckets of our own, counted as AWS
//! counts: one adaptive bucket per request class (`ec2-mutating`, `ec2-describe`, `run-instances`,
//! `route53`, ELB's describe and mutating classes in each API version, `iam`) and region (one for
//! all regions for the global services' `iam` and `route53`) — and for EC2's two request classes
//! one per API, as EC2 evaluates each API on its own bucket —, starting full, at the rate an idle
//! account allows, shared by every workflow of the process. An interceptor (`http`) names each
//! call's classes and hears the throttles, by the SDK's own retry classifiers; the wait happens in
//! a wrapper around the SDK's default HTTPS client, the one async place every call passes
//! (interceptors are synchronous; the retry strategy, where the SDK's own limiter waits, cannot be
//! replaced through a service config), so it counts against the attempt timeout (10 minutes; a hung
//! connection is cut by the 60 s read timeout: `client`).
//!
//! Why not the SDK's adaptive retry mode: its `ClientRateLimiter` stays off until the first
//! throttle (the switch is private in aws-smithy-runtime 1.16), so a fleet's first burst is
//! throttled whole, and it probes past the last rate on a cubic curve — throttles by design, which
//! every other client on the account pays for; and `RetryConfig::disabled()` stays (a create
//! retried blindly after a lost answer creates twice). Why not `governor`: its quota is fixed at
//! construction, and the adaptive part (`bucket`: slow to half of what AWS admitted over 3 s on a
//! throttle, or to a quarter of the rate before that share is measured; creep back, ten times
//! faster until a throttle has measured it) is the whole point. The constants are ranked by
//! `scripts/pacing-sim.py` and measured by `tests/aws_pacing.rs` and `scripts/bench-fleet.sh`. A
//! waiter never reserves a future token: it sleeps until one is due and asks again, so a cut slows
//! the requests already waiting. Durable retries stay as they were: a throttled step fails its
//! attempt and the engine retries it.
//!
//! Several daemons on one account each pace themselves at the account's rate and learn of each
//! other only by the throttles they cause: three started together on one journal stay under 5%
//! throttled (measured in `tests/aws_pacing.rs`), at the cost of each running well below its share
//! for a while after a throttle. Past that — many daemons, or an account where the controllers need
//! a guaranteed share — the next step is a budget shared through the journal: each daemon takes
//! `rate / live daemons` (the live owners are in the lease table already), or claims tokens in
//! PostgreSQL rows per class; and a configured share reserved for the clusters' controllers.

mod bucket;
mod http;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bucket::Bucket;
pub use bucket::Limit;
pub(crate) use http::{PaceTag, PacedHttpClient};

/// The request classes, as AWS documents its throttling: EC2 evaluates each API on its own
/// bucket, sized by the API's category (mutating, non-mutating), and RunInstances also draws from
/// a resource bucket of its own (instances launched); Route53 allows 5 requests a second per
/// account; ELB keeps a bucket for its non-mutating actions and one for the rest, in each of its
/// two API versions (v2: application and network load balancers; v1: classic ones); IAM is one
/// global API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RateClass {
    Ec2Mutating,
    Ec2Describe,
    RunInstances,
    Route53,
    ElbDescribe,
    ElbMutating,
    ClassicElbDescribe,
    ClassicElbMutating,
    Iam,
}

impl RateClass {
    pub const ALL: [RateClass; 9] = [
        RateClass::Ec2Mutating,
        RateClass::Ec2Describe,
        RateClass::RunInstances,
        RateClass::Route53,
        RateClass::ElbDescribe,
        RateClass::ElbMutating,
        RateClass::ClassicElbDescribe,
        RateClass::ClassicElbMutating,
        RateClass::Iam,
    ];

    /// ELB's classes: what `--aws-rate elb=B/R` sets at once.
    const ELB: [RateClass; 4] =
        [RateClass::ElbDescribe, RateClass::ElbMutating, RateClass::ClassicElbDescribe, RateClass::ClassicElbMutating];

    pub fn as_str(self) -> &'static str {
        match self {
            RateClass::Ec2Mutating => "ec2-mutating",
            RateClass::Ec2Describe => "ec2-describe",
            RateClass::RunInstances => "run-instances",
            RateClass::Route53 => "route53",
            RateClass::ElbDescribe => "elb-describe",
            RateClass::ElbMutating => "elb-mutating",
            RateClass::ClassicElbDescribe => "classic-elb-describe",
            RateClass::ClassicElbMutating => "classic-elb-mutating",
            RateClass::Iam => "iam",
        }
    }

    /// Whether AWS counts the class per account rather than per account and region: IAM and
    /// Route53 are global services, one bucket whatever region a client names.
    pub fn is_global(self) -> bool {
        matches!(self, RateClass::Iam | RateClass::Route53)
    }

    /// Whether AWS keeps a bucket per API of the class (the class's limit is each API's): EC2's
    /// request rate limiting evaluates each API individually.
    pub fn is_per_api(self) -> bool {
        matches!(self, RateClass::Ec2Mutating | RateClass::Ec2Describe)
    }

    fn parse(s: &str) -> Option<RateClass> {
        RateClass::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The default limit: what AWS documents for an account (EC2's per API: a non-mutating
    /// API's bucket holds 100 tokens refilled at 20 a second — DescribeHosts is AWS's example —,
    /// a mutating one's 50 at 5, the size of AWS's table for its mutating category, which the
    /// copies of the page at hand cut off; `--aws-rate ec2-mutating=B/R` sets another; RunInstances' is AWS's instance-launch bucket, 1000 and 2
    /// a second). ELB's non-mutating actions, in each API version, are AWS's 40 tokens refilled at
    /// 10 a second (ELB's user guide, "Request throttling"); its other actions and IAM publish no
    /// number here: 20 at 10 a second and 10 at 10 are guesses on the safe side.
    fn default_limit(self) -> Limit {
        let (burst, per_second) = match self {
            RateClass::Ec2Mutating => (50.0, 5.0),
            RateClass::Ec2Describe => (100.0, 20.0),
            RateClass::RunInstances => (1000.0, 2.0),
            RateClass::Route53 => (5.0, 5.0),
            RateClass::ElbDescribe | RateClass::ClassicElbDescribe => (40.0, 10.0),
            RateClass::ElbMutating | RateClass::ClassicElbMutating => (20.0, 10.0),
            RateClass::Iam => (10.0, 10.0),
        };
        Limit { burst, per_second }
    }
}

/// The AWS services infraflow calls, as far as pacing cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Service {
    Ec2,
    /// ELB's API version 2 (application, network and gateway load balancers).
    Elb,
    /// ELB's API version 1 (classic load balancers): buckets of its own.
    ClassicElb,
    Route53,
    Iam,
    Sts,
    /// The Resource Groups Tagging API: one read at the end of a teardown.
    Tagging,
    /// The image registry's bucket: a teardown's few calls.
    S3,
    /// Service Quotas: four reads before a provision.
    Quotas,
}

/// The classes whose buckets one call draws from (none for STS, whose one call is made once
/// per workflow and whose limit is far above anything infraflow does).
pub(crate) fn classes_of(service: Service, operation: &str) -> &'static [RateClass] {
    match service {
        Service::Ec2 if operation == "RunInstances" => &[RateClass::RunInstances, RateClass::Ec2Mutating],
        Service::Ec2 if operation.starts_with("Describe") || operation.starts_with("Get") => &[RateClass::Ec2Describe],
        Service::Ec2 => &[RateClass::Ec2Mutating],
        Service::Elb if operation.starts_with("Describe") => &[RateClass::ElbDescribe],
        Service::Elb => &[RateClass::ElbMutating],
        Service::ClassicElb if operation.starts_with("Describe") => &[RateClass::ClassicElbDescribe],
        Service::ClassicElb => &[RateClass::ClassicElbMutating],
        Service::Route53 => &[RateClass::Route53],
        Service::Iam => &[RateClass::Iam],
        // S3's request rates are per prefix (thousands a second): a teardown's few calls need no pacing.
        Service::Sts | Service::Tagging | Service::S3 | Service::Quotas => &[],
    }
}

/// The least rate `--aws-rate` takes, per second.
pub const MIN_PER_SECOND: f64 = 0.01;

/// What `--aws-rate` configures: a limit per class, or no pacing at all.
#[derive(Clone, Debug, PartialEq)]
pub struct PacingConfig {
    limits: Option<BTreeMap<RateClass, Limit>>,
}

impl Default for PacingConfig {
    fn default() -> Self {
        PacingConfig { limits: Some(RateClass::ALL.into_iter().map(|c| (c, c.default_limit())).collect()) }
    }
}

impl PacingConfig {
    /// `off`, or comma-separated `CLASS=BURST/PER_SECOND` entries over AWS's defaults
    /// (`ec2-mutating=40/10,route53=5/5`).
    pub fn parse(spec: &str) -> Result<PacingConfig, String> {
        let spec = spec.trim();
        if spec == "off" {
            return Ok(PacingConfig { limits: None });
        }
        let mut config = PacingConfig::default();
        let limits = config.limits.as_mut().expect("the default paces");
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let classes = || RateClass::ALL.map(|c| c.as_str()).join(", ");
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| format!("`{entry}` is not CLASS=BURST/PER_SECOND (classes: {})", classes()))?;
            // `elb` (before ELB's classes were told apart) sets all four.
            let named: Vec<RateClass> = match name.trim() {
                "elb" => RateClass::ELB.to_vec(),
                name => vec![
                    RateClass::parse(name)
                        .ok_or_else(|| format!("unknown request class `{name}` (classes: {})", classes()))?,
                ],
            };
            let (burst, rate) =
                value.split_once('/').ok_or_else(|| format!("`{entry}`: the limit is BURST/PER_SECOND, e.g. 20/5"))?;
            let number = |s: &str| s.trim().parse::<f64>().ok().filter(|n| n.is_finite() && *n > 0.0);
            let (Some(burst), Some(per_second)) = (number(burst), number(rate)) else {
                return Err(format!("`{entry}`: the burst and the rate must be positive numbers"));
            };
            // Below this a request waits longer than an attempt may (10 minutes): every call of
            // the class would time out instead of being paced (and a rate of 1e-300 overflowed
            // the wait's Duration).
            if per_second < MIN_PER_SECOND {
                return Err(format!(
                    "`{entry}`: {per_second} requests a second is below the least pace, {MIN_PER_SECOND}/s (one request every 100 s); use `off` to stop pacing instead"
                ));
            }
            for class in named {
                limits.insert(class, Limit { burst: burst.max(1.0), per_second });
            }
        }
        Ok(PacingConfig { limits: Some(limits.clone()) })
    }

    pub fn limit(&self, class: RateClass) -> Option<Limit> {
        self.limits.as_ref().and_then(|l| l.get(&class).copied())
    }
}

/// Called when a request of a class has waited for its turn: (account, class, how long). The
/// account is the role's, "" for the process's own credentials.
pub type WaitObserver = Arc<dyn Fn(&str, RateClass, Duration) + Send + Sync>;
/// Called for every throttle AWS answers: (account, class).
pub type ThrottleObserver = Arc<dyn Fn(&str, RateClass) + Send + Sync>;

/// Called in the waiting task when a request starts to wait for its class's rate; what it returns
/// is dropped when the wait ends (the daemon names the step that waits: `engine::current_step`).
pub type WaitStartObserver = Arc<dyn Fn(RateClass) -> Box<dyn Send> + Send + Sync>;

static WAITS: OnceLock<WaitObserver> = OnceLock::new();
static WAIT_STARTS: OnceLock<WaitStartObserver> = OnceLock::new();
static THROTTLES: OnceLock<ThrottleObserver> = OnceLock::new();

/// Installs the process's observers of pacing (the daemon's metrics); false if installed already.
pub fn observe_pacing(waits: WaitObserver, throttles: ThrottleObserver) -> bool {
    WAITS.set(waits).is_ok() && THROTTLES.set(throttles).is_ok()
}

/// Installs the process's observer of waits as they start; false if installed already.
pub fn observe_wait_starts(starts: WaitStartObserver) -> bool {
    WAIT_STARTS.set(starts).is_ok()
}

/// Requests waiting for their class's rate now, by class (`RateClass::ALL` order), all regions.
static WAITING: [AtomicU64; RateClass::ALL.len()] = [const { AtomicU64::new(0) }; RateClass::ALL.len()];

/// How many requests wait for their class's rate now: what the daemon's metrics show.
pub fn waiting_now() -> Vec<(RateClass, u64)> {
    RateClass::ALL.into_iter().zip(&WAITING).map(|(c, n)| (c, n.load(Ordering::Relaxed))).collect()
}

/// Counts a waiter for as long as it lives (a cancelled call stops waiting too).
struct Waiting(usize);

impl Waiting {
    fn start(class: RateClass) -> Waiting {
        let i = RateClass::ALL.iter().position(|c| *c == class).expect("every class is in ALL");
        WAITING[i].fetch_add(1, Ordering::Relaxed);
        Waiting(i)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING[self.0].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A wait longer than this is worth a log line: the step is held by the account's rate.
const WORTH_SAYING: Duration = Duration::from_secs(2);

/// The buckets of the global classes (`RateClass::is_global`), shared by every region's pacer.
pub(crate) type GlobalBuckets = BTreeMap<RateClass, Arc<Bucket>>;

pub(crate) fn global_buckets(config: &PacingConfig) -> GlobalBuckets {
    RateClass::ALL
        .into_iter()
        .filter(|c| c.is_global())
        .filter_map(|c| config.limit(c).map(|l| (c, Arc::new(Bucket::new(l)))))
        .collect()
}

/// The buckets of one region (each region has its own throttles), the global ones shared; the
/// per-API classes' buckets made for each API on its first call.
#[derive(Debug)]
pub(crate) struct Pacer {
    /// The account whose buckets these are ("" for the process's own): the metrics' label.
    account: String,
    buckets: BTreeMap<RateClass, Arc<Bucket>>,
    /// The limit of each per-API class, and the bucket of each API of it met so far.
    per_api_limits: BTreeMap<RateClass, Limit>,
    per_api: Mutex<HashMap<(RateClass, String), Arc<Bucket>>>,
}

impl Pacer {
    pub(crate) fn new(config: &PacingConfig, global: &GlobalBuckets) -> Arc<Pacer> {
        Pacer::of_account("", config, global)
    }

    /// The buckets of `account` in one region, `global` being that account's.
    pub(crate) fn of_account(account: &str, config: &PacingConfig, global: &GlobalBuckets) -> Arc<Pacer> {
        let buckets = RateClass::ALL
            .into_iter()
            .filter(|c| !c.is_per_api())
            .filter_map(|c| match global.get(&c) {
                Some(shared) => Some((c, shared.clone())),
                None if c.is_global() => None,
                None => config.limit(c).map(|l| (c, Arc::new(Bucket::new(l)))),
            })
            .collect();
        let per_api_limits = RateClass::ALL
            .into_iter()
            .filter(|c| c.is_per_api())
            .filter_map(|c| config.limit(c).map(|l| (c, l)))
            .collect();
        Arc::new(Pacer { account: account.to_string(), buckets, per_api_limits, per_api: Mutex::new(HashMap::new()) })
    }

    /// The bucket a call of `operation` draws from for `class` (None: the class is not paced).
    fn bucket(&self, class: RateClass, operation: &str) -> Option<Arc<Bucket>> {
        if !class.is_per_api() {
            return self.buckets.get(&class).cloned();
        }
        let limit = *self.per_api_limits.get(&class)?;
        let mut per_api = self.per_api.lock().unwrap_or_else(|e| e.into_inner());
        Some(per_api.entry((class, operation.to_string())).or_insert_with(|| Arc::new(Bucket::new(limit))).clone())
    }

    /// Waits until every class of the call has a token for it.
    pub(crate) async fn admit(&self, operation: &str, classes: &[RateClass]) {
        for &class in classes {
            let Some(bucket) = self.bucket(class, operation) else { continue };
            let started = Instant::now();
            let (mut said, mut waiting) = (false, None);
            while let Err(wait) = bucket.take(Instant::now()) {
                waiting.get_or_insert_with(|| (Waiting::start(class), WAIT_STARTS.get().map(|o| o(class))));
                if !said && started.elapsed() + wait >= WORTH_SAYING {
                    said = true;
                    tracing::info!(class = class.as_str(), operation, "waiting for the AWS request rate");
                }
                // Every waiter wakes when the next token is due and one gets it; the jitter
                // spreads the others' next look.
                tokio::time::sleep(wait + wait.mul_f64(fastrand::f64() * 0.25)).await;
            }
            let waited = waiting.is_some();
            if let (Some(_), Some(observe)) = (waiting, WAITS.get()) {
                observe(&self.account, class, started.elapsed());
            }
            if waited {
                crate::observe::traced_wait("wait: AWS request rate", class.as_str(), started.elapsed());
            }
        }
    }

    pub(crate) fn admitted(&self, operation: &str, classes: &[RateClass]) {
        let now = Instant::now();
        for &class in classes {
            if let Some(bucket) = self.bucket(class, operation) {
                bucket.admitted(now);
            }
        }
    }

    pub(crate) fn throttled(&self, operation: &str, classes: &[RateClass]) {
        let now = Instant::now();
        for &class in classes {
            if let Some(bucket) = self.bucket(class, operation) {
                bucket.throttled(now);
            }
            if let Some(observe) = THROTTLES.get() {
                observe(&self.account, class);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_rate_overrides_the_named_classes_and_keeps_the_rest() {
        let c = PacingConfig::parse("ec2-mutating=40/10, route53=1/0.5").unwrap();
        assert_eq!(c.limit(RateClass::Ec2Mutating), Some(Limit { burst: 40.0, per_second: 10.0 }));
        assert_eq!(c.limit(RateClass::Route53), Some(Limit { burst: 1.0, per_second: 0.5 }));
        assert_eq!(c.limit(RateClass::ElbDescribe), PacingConfig::default().limit(RateClass::ElbDescribe));
        assert_eq!(PacingConfig::parse("off").unwrap().limit(RateClass::ElbDescribe), None);
    }

    #[test]
    fn elb_is_paced_as_aws_counts_it_two_buckets_in_each_api_version() {
        let d = PacingConfig::default();
        assert_eq!(d.limit(RateClass::ElbDescribe), Some(Limit { burst: 40.0, per_second: 10.0 }), "AWS's published");
        assert_eq!(d.limit(RateClass::ClassicElbDescribe), d.limit(RateClass::ElbDescribe));
        assert_eq!(classes_of(Service::Elb, "DescribeTags"), &[RateClass::ElbDescribe]);
        assert_eq!(classes_of(Service::Elb, "DeleteLoadBalancer"), &[RateClass::ElbMutating]);
        assert_eq!(classes_of(Service::ClassicElb, "DescribeTags"), &[RateClass::ClassicElbDescribe]);
        assert_eq!(classes_of(Service::ClassicElb, "DeleteLoadBalancer"), &[RateClass::ClassicElbMutating]);
        let all = PacingConfig::parse("elb=8/2").unwrap();
        for class in RateClass::ELB {
            assert_eq!(all.limit(class), Some(Limit { burst: 8.0, per_second: 2.0 }), "{class:?}");
        }
        let one = PacingConfig::parse("elb-describe=80/20").unwrap();
        assert_eq!(one.limit(RateClass::ElbDescribe), Some(Limit { burst: 80.0, per_second: 20.0 }));
        assert_eq!(one.limit(RateClass::ElbMutating), d.limit(RateClass::ElbMutating));
    }

    #[test]
    fn a_bad_aws_rate_names_the_problem() {
        assert!(PacingConfig::parse("ec2=20/5").unwrap_err().contains("unknown request class `ec2`"));
        assert!(PacingConfig::parse("elb=20").unwrap_err().contains("BURST/PER_SECOND"));
        assert!(PacingConfig::parse("elb=20/0").unwrap_err().contains("positive"));
        assert!(PacingConfig::parse("elb").unwrap_err().contains("CLASS=BURST/PER_SECOND"));
        assert!(PacingConfig::parse("elb=1/1e-300").unwrap_err().contains("below the least pace"), "never a panic");
        assert!(PacingConfig::parse("elb=1/0.01").is_ok());
    }

    #[test]
    fn run_instances_draws_from_its_own_bucket_and_the_mutating_one() {
        assert_eq!(classes_of(Service::Ec2, "RunInstances"), &[RateClass::RunInstances, RateClass::Ec2Mutating]);
        assert_eq!(classes_of(Service::Ec2, "DescribeVpcs"), &[RateClass::Ec2Describe]);
        assert_eq!(classes_of(Service::Ec2, "CreateTags"), &[RateClass::Ec2Mutating]);
        assert!(classes_of(Service::Sts, "GetCallerIdentity").is_empty());
    }

    #[test]
    fn iam_and_route53_are_paced_once_for_every_region() {
        let config = PacingConfig::default();
        let global = global_buckets(&config);
        let (east, west) = (Pacer::new(&config, &global), Pacer::new(&config, &global));
        for class in RateClass::ALL {
            let (e, w) = (east.bucket(class, "CreateVpc").unwrap(), west.bucket(class, "CreateVpc").unwrap());
            assert_eq!(Arc::ptr_eq(&e, &w), class.is_global(), "{}", class.as_str());
        }
    }

    #[test]
    fn each_ec2_api_has_a_bucket_of_its_own_and_the_other_classes_one_each() {
        let config = PacingConfig::default();
        let pacer = Pacer::new(&config, &global_buckets(&config));
        for class in RateClass::ALL {
            let (a, again, b) = (
                pacer.bucket(class, "CreateSubnet").unwrap(),
                pacer.bucket(class, "CreateSubnet").unwrap(),
                pacer.bucket(class, "CreateRoute").unwrap(),
            );
            assert!(Arc::ptr_eq(&a, &again), "{}: one API, one bucket", class.as_str());
            assert_eq!(!Arc::ptr_eq(&a, &b), class.is_per_api(), "{}", class.as_str());
        }
        assert!(
            Pacer::new(&PacingConfig::parse("off").unwrap(), &GlobalBuckets::new())
                .bucket(RateClass::Ec2Mutating, "CreateVpc")
                .is_none()
        );
    }
}
