//! A workflow's hold on its cluster across journals: the cluster lease in S3
//! (`activities::cluster_lease`), taken before the workflow's first AWS change, renewed by a task
//! of its own well inside its time to live, and lapsing — the engine then drops the running work
//! — before any other journal could take it over. Off unless the operator names a bucket
//! (`--lock-bucket`): each journal then serializes its own workflows only, as before.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use infraflow_activities::cluster_lease::{self, Holder, LeaseStore, Record, Seen, Written};
use infraflow_activities::{AssumedRole, Aws, AwsError, AwsPool};
use infraflow_engine::{BoxFuture, Hold, HoldError, HoldRequest, TakeHold};

use crate::cluster::ClusterRef;
use infraflow_engine::BootInstant;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

/// Where and how this process holds cluster leases (`--lock-bucket` and its companions).
#[derive(Clone, Debug)]
pub struct LockConfig {
    pub store: LeaseStore,
    /// The bucket's region: the S3 client's.
    pub region: String,
    pub ttl: Duration,
    /// The journal this process writes, as leases name it to those who wait.
    pub journal: String,
    pub host: String,
}

static LOCK: OnceLock<LockConfig> = OnceLock::new();

/// Cluster leases this process holds, and workflows of it waiting for one: what `/metrics`
/// shows (`infraflow_cluster_leases{state}`).
static HELD: AtomicI64 = AtomicI64::new(0);
static WAITING: AtomicI64 = AtomicI64::new(0);

/// (held, waiting) now.
pub fn leases_now() -> (i64, i64) {
    (HELD.load(Ordering::Relaxed), WAITING.load(Ordering::Relaxed))
}

/// One count of `HELD` or `WAITING`, given back when dropped.
struct Counted(&'static AtomicI64);

impl Counted {
    fn new(count: &'static AtomicI64) -> Counted {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sets the process's lease store, once, before any workflow runs.
pub fn configure_lock(config: LockConfig) {
    let _ = LOCK.set(config);
}

pub fn lock_config() -> Option<&'static LockConfig> {
    LOCK.get()
}

/// The hold of workflow `workflow` on the cluster its input names (`cluster::of`), if a lease
/// store is configured.
pub fn for_input(pool: &AwsPool, request: HoldRequest, workflow: &str, input: &Value) -> Option<TakeHold> {
    let config = LOCK.get()?.clone();
    let ClusterRef { infra_id: infra, region, role } = crate::cluster::of(workflow, input)?;
    let pool = pool.assuming(role.as_ref());
    Some(Box::pin(async move {
        let held = take(&pool, &config, &request, &infra, &region, role.as_ref()).await?;
        Ok(Box::new(held) as Box<dyn Hold>)
    }))
}

/// Asks the renewal task to end when dropped.
struct StopOnDrop(Arc<tokio::sync::Notify>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// A lease this process holds: its renewal task, and the word it lapses with.
struct ClusterHold {
    lapsed: watch::Receiver<Option<String>>,
    renewal: tokio::task::JoinHandle<()>,
    /// Asks the renewal task to end after its call in flight (never aborted mid-call: a renewal
    /// AWS took while its answer was dropped would leave the release naming a stale ETag).
    stop: Arc<tokio::sync::Notify>,
    request: HoldRequest,
    _held: Counted,
    /// Ends the renewal task when the hold is dropped without `release` (the engine dropping a
    /// run whose journal lease was lost): a detached renewal would hold the cluster for a run
    /// that no longer runs.
    _stop_on_drop: StopOnDrop,
    /// The last ETag written and its record's serial, for the conditional release.
    written: Arc<std::sync::Mutex<(String, u64)>>,
    aws: Aws,
    store: LeaseStore,
    key: String,
}

impl Hold for ClusterHold {
    fn lapsed(&self) -> BoxFuture<String> {
        let mut rx = self.lapsed.clone();
        Box::pin(async move {
            loop {
                if let Some(why) = rx.borrow_and_update().clone() {
                    return why;
                }
                if rx.changed().await.is_err() {
                    // The renewal task ended without a word: only at release.
                    std::future::pending::<()>().await;
                }
            }
        })
    }

    fn what(&self) -> Option<String> {
        Some(format!("cluster lease s3://{}/{}", self.store.bucket, self.key))
    }

    fn release(self: Box<Self>) -> BoxFuture<()> {
        self.stop.notify_one();
        Box::pin(async move {
            let lapsed = self.lapsed.borrow().is_some();
            let ClusterHold { renewal, written, aws, store, key, request, .. } = *self;
            let _ = renewal.await;
            let (mut etag, serial) = written.lock().unwrap().clone();
            // A lapsed holder's record may be a successor's by now: released only when the record
            // is still the one this holder last wrote, never on the ETag alone (a store that
            // ignored If-Match would delete the successor's; SAFETY-A7937A6 G5).
            if lapsed {
                match cluster_lease::read(&aws, &store, &key).await {
                    Ok(Some(seen)) if seen.record.holder.creator == request.creator && seen.record.serial == serial => {
                        etag = seen.etag
                    }
                    _ => {
                        return tracing::info!(key = %key, "a lapsed cluster lease is left: no longer this holder's record");
                    }
                }
            }
            // Twice at most: a renewal whose answer was lost leaves this process an older ETag
            // than S3's; the record read back tells whether it is still this submission's.
            for _ in 0..2 {
                match cluster_lease::release(&aws, &store, &key, &etag).await {
                    Ok(Written::Took(_)) => return tracing::debug!(key = %key, "released the cluster lease"),
                    Ok(Written::Lost) => match cluster_lease::read(&aws, &store, &key).await {
                        Ok(Some(seen)) if seen.record.holder.creator == request.creator => etag = seen.etag,
                        _ => return tracing::info!(key = %key, "the cluster lease was no longer this workflow's"),
                    },
                    // Left to expire: the next holder waits out its time to live.
                    Err(e) => return tracing::warn!(key = %key, error = %e, "could not release the cluster lease"),
                }
            }
        })
    }
}

fn operator(store: &LeaseStore, e: AwsError) -> HoldError {
    HoldError::Operator(format!(
        "cannot hold the cluster lease in s3://{}/{}: {e}; check --lock-bucket and the S3 permissions of `infraflow policy`, then `infraflow retry`",
        store.bucket, store.prefix
    ))
}

fn record(config: &LockConfig, request: &HoldRequest, serial: u64) -> Record {
    Record {
        holder: Holder {
            journal: config.journal.clone(),
            workflow: request.workflow.clone(),
            creator: request.creator.clone(),
            host: config.host.clone(),
        },
        ttl_ms: config.ttl.as_millis() as u64,
        written_at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
        serial,
    }
}

/// How often a waiter looks again, and a holder's renewal's retry after an error.
fn poll(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(200), Duration::from_secs(5))
}

/// Takes the lease of (account, region, infra): at once when free or this submission's own
/// (a resumed run after a crash), by compare-and-swap once another's record has stood
/// unrenewed for its whole time to live, else waits.
async fn take(
    pool: &AwsPool,
    config: &LockConfig,
    request: &HoldRequest,
    infra: &str,
    region: &str,
    role: Option<&AssumedRole>,
) -> Result<ClusterHold, HoldError> {
    let store = &config.store;
    let aws = pool.region(&config.region).await;
    // Where the workflow acts: as its environment check journaled it (its role's account, under
    // a role); at a first execution, which takes the hold beside that check, asked here the
    // same way (the workflow's region and role, one call side by side with the check's).
    let field = |env: &Value, f: &str| env.get(f).and_then(Value::as_str).map(str::to_string);
    let (account, region) = match (&request.environment, role, region) {
        (Some(env), _, _) => {
            let given = if region.is_empty() { field(env, "region").unwrap_or_default() } else { region.to_string() };
            (field(env, "account").unwrap_or_default(), given)
        }
        (None, Some(r), given) if !given.is_empty() => (r.account().to_string(), given.to_string()),
        (None, _, given) => {
            let env = pool.region(given).await.environment().await.map_err(|e| operator(store, e))?;
            (env.account, env.region)
        }
    };
    let region = region.as_str();
    let key = store.key(&account, region, infra);
    let started = Instant::now();
    // The record being waited on, and when this process first saw it.
    let mut watched: Option<(String, Instant)> = None;
    let mut said = String::new();
    let mut waiting: Option<Counted> = None;
    let mut say = |what: String| {
        waiting.get_or_insert_with(|| Counted::new(&WAITING));
        if what != said {
            (request.waiting)(what.clone());
            said = what;
        }
    };
    loop {
        // A lease taken: its ETag, when the write that took it was sent (the holder's time to live
        // counts from then), and its serial.
        let attempt: Result<Option<(String, Instant, u64)>, AwsError> = async {
            let sent = Instant::now();
            if let Written::Took(etag) = cluster_lease::create(&aws, store, &key, &record(config, request, 1)).await? {
                return Ok(Some((etag, sent, 1)));
            }
            let Some(Seen { record: theirs, etag }) = cluster_lease::read(&aws, store, &key).await? else {
                return Ok(None);
            };
            let now = Instant::now();
            let first_seen = match &watched {
                Some((e, at)) if *e == etag => *at,
                _ => {
                    watched = Some((etag.clone(), now));
                    now
                }
            };
            let expired = now.duration_since(first_seen) >= Duration::from_millis(theirs.ttl_ms);
            let ours = theirs.holder.creator == request.creator;
            if ours || expired {
                let serial = theirs.serial + 1;
                let sent = Instant::now();
                if let Written::Took(etag) = cluster_lease::replace(&aws, store, &key, &etag, &record(config, request, serial)).await? {
                    if !ours {
                        tracing::warn!(key = %key, holder = %theirs.holder, "took over a cluster lease its holder stopped renewing");
                    }
                    return Ok(Some((etag, sent, serial)));
                }
                return Ok(None);
            }
            if started.elapsed() >= crate::hold::wait_limit::limit() {
                return Err(AwsError::operator(
                    "PutObject",
                    format!(
                        "the cluster has been held by {} for over {} (s3://{}/{key}); let it finish, or cancel it there, then `infraflow retry`",
                        theirs.holder,
                        crate::hold::wait_limit::said(),
                        store.bucket
                    ),
                ));
            }
            say(format!("{} (cluster lease s3://{}/{key})", theirs.holder, store.bucket));
            Ok(None)
        }
        .await;
        match attempt {
            Ok(Some(taken)) => return Ok(hold(aws, config.clone(), request.clone(), key, taken)),
            Ok(None) => {}
            Err(e) if e.retryable && !e.operator => {
                say(format!("the cluster lease store s3://{} to answer ({e})", store.bucket));
            }
            Err(e) => return Err(operator(store, e)),
        }
        tokio::time::sleep(poll(config.ttl)).await;
    }
}

/// A taken lease, renewed every third of its time to live; it lapses when a renewal finds it
/// taken over, or when none has succeeded by a sixth of its time to live before another could
/// take it (counted from when the last good renewal was sent).
fn hold(aws: Aws, config: LockConfig, request: HoldRequest, key: String, taken: (String, Instant, u64)) -> ClusterHold {
    let (etag, sent, serial) = taken;
    let (tx, rx) = watch::channel(None);
    let written = Arc::new(std::sync::Mutex::new((etag, serial)));
    let store = config.store.clone();
    let stop = Arc::new(tokio::sync::Notify::new());
    let renewal = {
        let (aws, key, written, stop, request) =
            (aws.clone(), key.clone(), written.clone(), stop.clone(), request.clone());
        let ttl = config.ttl;
        tokio::spawn(async move {
            let mut serial = serial + 1;
            let mut deadline = sent + ttl - ttl / 6;
            // The same deadline on the boot clock, which counts a suspend that tokio's
            // monotonic timers skip (as the journal lease's fence does: `BootInstant`): a
            // machine resumed past it lapses the hold at its next tick, not a suspend later.
            let on_boot_clock = |at: Instant| BootInstant::now() + at.saturating_duration_since(Instant::now());
            let mut boot_deadline = on_boot_clock(deadline);
            let mut next = sent + ttl / 3;
            let lapse = |tx: &watch::Sender<Option<String>>| {
                let _ = tx.send(Some(format!(
                    "no renewal of the cluster lease s3://{}/{key} succeeded in time; stopped before another holder could start",
                    config.store.bucket
                )));
            };
            loop {
                let tick = next.min(Instant::now() + poll(ttl));
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return lapse(&tx),
                    _ = tokio::time::sleep_until(tick) => {}
                    _ = stop.notified() => return,
                }
                if BootInstant::now() >= boot_deadline {
                    return lapse(&tx);
                }
                if Instant::now() < next {
                    continue;
                }
                let sent = Instant::now();
                let current = written.lock().unwrap().0.clone();
                // A renewal S3 does not answer by the deadline (a hung connection waits out the
                // SDK's read timeout, a minute) lapses the hold at the deadline all the same.
                let body = record(&config, &request, serial);
                let renewal = cluster_lease::replace(&aws, &config.store, &key, &current, &body);
                let Ok(renewed) = tokio::time::timeout_at(deadline, renewal).await else { return lapse(&tx) };
                match renewed {
                    Ok(Written::Took(new)) => {
                        *written.lock().unwrap() = (new, serial);
                        serial += 1;
                        deadline = sent + ttl - ttl / 6;
                        boot_deadline = on_boot_clock(deadline);
                        next = sent + ttl / 3;
                    }
                    Ok(Written::Lost) => {
                        let _ = tx.send(Some(format!(
                            "the cluster lease s3://{}/{key} was taken over by another holder",
                            config.store.bucket
                        )));
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(key = %key, error = %e, "could not renew the cluster lease; trying again");
                        next = Instant::now() + poll(ttl);
                    }
                }
            }
        })
    };
    let _stop_on_drop = StopOnDrop(stop.clone());
    ClusterHold {
        lapsed: rx,
        renewal,
        stop,
        request,
        _held: Counted::new(&HELD),
        _stop_on_drop,
        written,
        aws,
        store,
        key,
    }
}

/// How far a lease's writer's clock may run from the reader's, for `live_holder`'s one look.
const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// Who holds cluster `infra`'s lease in `region` (in the process's own account), if a store is
/// configured and a holder wrote it recently enough to be alive (its time to live and five
/// minutes of clock skew): what the janitor reads, in one look, to class the cluster active.
pub async fn live_holder(pool: &AwsPool, region: &str, infra: &str) -> Result<Option<Holder>, AwsError> {
    let Some(config) = LOCK.get() else { return Ok(None) };
    let aws = pool.region(&config.region).await;
    let account = aws.environment().await?.account;
    let key = config.store.key(&account, region, infra);
    let Some(seen) = cluster_lease::read(&aws, &config.store, &key).await? else { return Ok(None) };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let stale_after = seen.record.written_at_ms + seen.record.ttl_ms as i64 + CLOCK_SKEW.as_millis() as i64;
    Ok((now < stale_after).then_some(seen.record.holder))
}

/// Proves the configured store honours conditional writes (`cluster_lease::self_test`): a
/// store that does not is refused before any workflow runs.
pub async fn self_test(pool: &AwsPool) -> Result<(), String> {
    let Some(config) = LOCK.get() else { return Ok(()) };
    let aws = pool.region(&config.region).await;
    // Idempotent: a probe written by an attempt whose reply was lost is found by the next.
    let proof =
        crate::read_again::read_retrying(|e: &AwsError| e.retryable, || cluster_lease::self_test(&aws, &config.store));
    match proof.await {
        Ok(verdict) => verdict,
        Err(e) => Err(format!("cannot use s3://{} for cluster leases: {e}", config.store.bucket)),
    }
}
