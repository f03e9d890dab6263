//! The daemon's Prometheus metrics (exposition by `prometheus-client`): what the engine reports
//! (steps, retries, compensations, lease takeovers and renewals), what the journal measures (commit
//! latency and batch size), every AWS call, the pacing of AWS requests (time waited for the rate,
//! throttles received), and the workflows by state, read at each scrape.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use infraflow_engine::{Observer, Progress};
use infraflow_journal::Journal;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// `labels`, led by `account` when the calls went through a role (another account); the
/// process's own account is left unlabelled, as before roles.
fn with_account(account: &str, pairs: &[(&str, &str)]) -> Labels {
    let mut l = if account.is_empty() { Labels::new() } else { labels(&[("account", account)]) };
    l.extend(labels(pairs));
    l
}

fn step_histogram() -> Histogram {
    // 10 ms to ~20 min: a no-op step to a NAT gateway's wait.
    Histogram::new(exponential_buckets(0.01, 3.0, 12))
}

pub struct Metrics {
    registry: Registry,
    workflows: Family<Labels, Gauge>,
    steps: Family<Labels, Counter>,
    step_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    retries: Family<Labels, Counter>,
    compensations: Counter,
    lease_takeovers: Counter,
    renewals: Family<Labels, Counter>,
    commit_seconds: Histogram,
    commit_batch: Histogram,
    aws_calls: Family<Labels, Counter>,
    aws_errors: Family<Labels, Counter>,
    rate_wait_seconds: Family<Labels, Counter<f64, AtomicU64>>,
    throttles: Family<Labels, Counter>,
    rate_waiting: Family<Labels, Gauge>,
    cluster_leases: Family<Labels, Gauge>,
    trace_spans: Family<Labels, Gauge>,
    sweep_clusters: Family<Labels, Gauge>,
    sweep_teardowns: Counter,
    cluster_drift: Family<Labels, Gauge>,
    clusters_checked: Family<Labels, Gauge>,
    /// The drift kinds a check has reported (each set back to 0 when a round finds none).
    drift_kinds: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// The last heartbeat could not renew this process's leases.
    renewal_failing: AtomicBool,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("infraflow");
        let m = Metrics {
            workflows: Family::default(),
            steps: Family::default(),
            step_seconds: Family::new_with_constructor(step_histogram),
            retries: Family::default(),
            compensations: Counter::default(),
            lease_takeovers: Counter::default(),
            renewals: Family::default(),
            commit_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            commit_batch: Histogram::new(exponential_buckets(1.0, 2.0, 13)),
            aws_calls: Family::default(),
            aws_errors: Family::default(),
            rate_wait_seconds: Family::default(),
            throttles: Family::default(),
            rate_waiting: Family::default(),
            cluster_leases: Family::default(),
            trace_spans: Family::default(),
            sweep_clusters: Family::default(),
            sweep_teardowns: Counter::default(),
            cluster_drift: Family::default(),
            clusters_checked: Family::default(),
            drift_kinds: Default::default(),
            renewal_failing: AtomicBool::new(false),
            registry: Registry::default(),
        };
        // Registered under the `infraflow_` prefix; the families are shared handles.
        registry.register("workflows", "Workflows in the journal, by state", m.workflows.clone());
        registry.register(
            "steps",
            "Step attempts by activity and outcome (started, completed, failed)",
            m.steps.clone(),
        );
        registry.register("step_duration_seconds", "Time of completed steps, by activity", m.step_seconds.clone());
        registry.register(
            "step_retries",
            "Step attempts that failed and will be retried, by activity",
            m.retries.clone(),
        );
        registry.register("compensations", "Workflows that started compensating", m.compensations.clone());
        registry.register(
            "lease_takeovers",
            "Leases this process took over from another owner (expired or dead)",
            m.lease_takeovers.clone(),
        );
        registry.register("lease_renewals", "Heartbeats, by outcome (ok, failed)", m.renewals.clone());
        registry.register("journal_commit_seconds", "Time of one journal commit batch", m.commit_seconds.clone());
        registry.register(
            "journal_commit_batch_size",
            "Operations in one journal commit batch",
            m.commit_batch.clone(),
        );
        registry.register(
            "aws_calls",
            "AWS API calls by service, operation and HTTP status (none: no answer)",
            m.aws_calls.clone(),
        );
        registry.register("aws_errors", "AWS errors by operation and AWS error code", m.aws_errors.clone());
        registry.register(
            "aws_rate_wait_seconds",
            "Time AWS requests waited for their request class's rate (account-wide pacing), by class",
            m.rate_wait_seconds.clone(),
        );
        registry.register(
            "aws_rate_waiting",
            "AWS requests waiting for their request class's rate now, by class",
            m.rate_waiting.clone(),
        );
        registry.register(
            "cluster_leases",
            "Cluster leases (--lock-bucket) this process holds, and its workflows waiting for one another journal holds",
            m.cluster_leases.clone(),
        );
        registry.register(
            "trace_spans",
            "Spans this process sent to the OTLP collector, and dropped (a full queue, a collector that refused or never answered)",
            m.trace_spans.clone(),
        );
        registry.register(
            "aws_throttles",
            "AWS answers that were throttles, by request class (each one slows the class down)",
            m.throttles.clone(),
        );
        registry.register(
            "sweep_clusters",
            "Clusters the last sweep found, by class (protected, active, expired, unexpired)",
            m.sweep_clusters.clone(),
        );
        registry.register("sweep_teardowns_submitted", "Teardowns the sweeps submitted", m.sweep_teardowns.clone());
        registry.register(
            "cluster_drift",
            "Findings of the last drift check (--check-every) over every cluster, by kind (a drift's kind, hold-up, leak)",
            m.cluster_drift.clone(),
        );
        registry.register(
            "clusters_checked",
            "Clusters the last drift check covered, by result (in_sync, drifted, failed)",
            m.clusters_checked.clone(),
        );
        Arc::new(Metrics { registry, ..m })
    }

    /// What a sweep found (every class, zero included) and how many teardowns it submitted.
    pub fn record_sweep(&self, swept: &[infraflow_workflows::janitor::Swept], submitted: usize) {
        use infraflow_workflows::janitor::Class;
        for class in Class::ALL {
            let n = swept.iter().filter(|s| s.class == class).count();
            self.sweep_clusters.get_or_create(&labels(&[("class", class.as_str())])).set(n as i64);
        }
        self.sweep_teardowns.inc_by(submitted as u64);
    }

    /// What a round of drift checks found: findings by kind (kinds seen before and not now at 0),
    /// and clusters by result.
    pub fn record_checks<'a>(&self, checked: impl Iterator<Item = &'a crate::checked::Checked>) {
        let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
        let (mut in_sync, mut drifted, mut failed) = (0, 0, 0);
        for c in checked {
            match &c.result {
                Ok(r) if r.in_sync => in_sync += 1,
                Ok(r) => {
                    drifted += 1;
                    for (k, n) in r.counts() {
                        *kinds.entry(k).or_insert(0) += n;
                    }
                }
                Err(_) => failed += 1,
            }
        }
        let mut seen = self.drift_kinds.lock().unwrap();
        seen.extend(kinds.keys().cloned());
        for kind in seen.iter() {
            let n = kinds.get(kind).copied().unwrap_or(0);
            self.cluster_drift.get_or_create(&labels(&[("kind", kind)])).set(n as i64);
        }
        for (result, n) in [("in_sync", in_sync), ("drifted", drifted), ("failed", failed)] {
            self.clusters_checked.get_or_create(&labels(&[("result", result)])).set(n);
        }
    }

    /// Where the engine's progress goes: these counters, then `next` (the log lines).
    pub fn observer(self: &Arc<Self>, next: Observer) -> Observer {
        let m = self.clone();
        Arc::new(move |p: &Progress| {
            m.record(p);
            next(p);
        })
    }

    fn record(&self, p: &Progress) {
        let step = |activity: &str, outcome: &str| {
            self.steps.get_or_create(&labels(&[("activity", activity), ("outcome", outcome)])).inc();
        };
        match p {
            Progress::StepStarted { activity, .. } => step(activity, "started"),
            Progress::StepCompleted { activity, millis, .. } => {
                step(activity, "completed");
                let seconds = Duration::from_millis(*millis).as_secs_f64();
                self.step_seconds.get_or_create(&labels(&[("activity", activity)])).observe(seconds);
            }
            Progress::StepRetrying { activity, .. } => {
                self.retries.get_or_create(&labels(&[("activity", activity)])).inc();
            }
            Progress::StepFailed { activity, .. } => step(activity, "failed"),
            Progress::Compensating { .. } => {
                self.compensations.inc();
            }
            Progress::LeaseTaken { previous: Some(_), .. } => {
                self.lease_takeovers.inc();
            }
            Progress::LeasesRenewed { ok } => {
                self.renewal_failing.store(!ok, Ordering::SeqCst);
                self.renewals.get_or_create(&labels(&[("outcome", if *ok { "ok" } else { "failed" })])).inc();
            }
            Progress::LeaseTaken { previous: None, .. } | Progress::Waiting { .. } | Progress::Finished { .. } => {}
        }
    }

    /// Counts every journal commit of this process.
    pub fn watch(self: &Arc<Self>, journal: &Journal) {
        let m = self.clone();
        journal.observe_commits(Box::new(move |took, size| {
            m.commit_seconds.observe(took.as_secs_f64());
            m.commit_batch.observe(size as f64);
        }));
    }

    /// Counts every AWS call of this process from now on: installed before the daemon's first
    /// call (its own account, read at startup), so `/metrics` counts every call it makes.
    pub fn count_calls(self: &Arc<Self>) {
        let m = self.clone();
        infraflow_activities::observe::observe_calls(Arc::new(move |account, service, operation, status| {
            let status = status.map_or_else(|| "none".to_string(), |s| s.to_string());
            // "Route 53" -> "route53", "Elastic Load Balancing v2" -> "elasticloadbalancingv2".
            let service: String = service.chars().filter(|c| !c.is_whitespace()).flat_map(char::to_lowercase).collect();
            let service = service.as_str();
            m.aws_calls
                .get_or_create(&with_account(
                    account,
                    &[("service", service), ("operation", operation), ("status", &status)],
                ))
                .inc();
        }));
        let m = self.clone();
        infraflow_activities::observe::observe_errors(Arc::new(move |operation, code| {
            m.aws_errors.get_or_create(&labels(&[("operation", operation), ("code", code)])).inc();
        }));
        let (waits, throttles) = (self.clone(), self.clone());
        infraflow_activities::pacing::observe_pacing(
            Arc::new(move |account, class, waited| {
                waits
                    .rate_wait_seconds
                    .get_or_create(&with_account(account, &[("class", class.as_str())]))
                    .inc_by(waited.as_secs_f64());
            }),
            Arc::new(move |account, class| {
                throttles.throttles.get_or_create(&with_account(account, &[("class", class.as_str())])).inc();
            }),
        );
    }

    pub fn renewal_failing(&self) -> bool {
        self.renewal_failing.load(Ordering::SeqCst)
    }

    /// The text exposition, with the workflow counts read from the journal now.
    pub fn render(&self, journal: &Journal) -> Result<String, String> {
        let counts = journal.count_by_state().map_err(|e| e.to_string())?;
        for state in infraflow_journal::WorkflowState::ALL {
            let n = counts.iter().find(|(s, _)| s == state.as_str()).map_or(0, |(_, n)| *n);
            self.workflows.get_or_create(&labels(&[("state", state.as_str())])).set(n as i64);
        }
        for (class, n) in infraflow_activities::pacing::waiting_now() {
            self.rate_waiting.get_or_create(&labels(&[("class", class.as_str())])).set(n as i64);
        }
        let (held, waiting) = infraflow_workflows::hold::lease::leases_now();
        self.cluster_leases.get_or_create(&labels(&[("state", "held")])).set(held);
        self.cluster_leases.get_or_create(&labels(&[("state", "waiting")])).set(waiting);
        self.trace_spans.get_or_create(&labels(&[("outcome", "sent")])).set(crate::otlp::exported() as i64);
        self.trace_spans.get_or_create(&labels(&[("outcome", "dropped")])).set(infraflow_trace::dropped() as i64);
        let mut out = String::new();
        encode(&mut out, &self.registry).map_err(|e| e.to_string())?;
        Ok(out)
    }
}
