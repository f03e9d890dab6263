//! Admission: a provision starts only when what it makes fits the account's quotas beside what
//! the workflows this process already admitted still claim (their input says what they make; the
//! account says what they made so far). One that does not fit waits — `waits for quota: needs 1
//! Elastic IP, …` — and starts when a teardown, a rollback or an admitted workflow's end frees
//! enough; after `wait_limit` it pauses naming the quotas. It is a hold (`engine::Hold`), taken
//! before the cluster lease, released when the execution ends. An execution that only undoes is
//! admitted at once: a rollback frees.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use infraflow_activities::AwsPool;
use infraflow_activities::quotas;
use infraflow_engine::{BoxFuture, Hold, HoldError, HoldRequest, TakeHold};
use serde_json::Value;

use crate::provision::quota::{Claim, shortfalls};
use crate::provision_infra::ProvisionInput;

/// Admission is on unless the operator skips the quota check (`--skip-quota-check`).
static ON: AtomicBool = AtomicBool::new(true);

/// How often a waiting workflow reads the account again, in milliseconds (sooner when an
/// admitted one ends): `--quota-recheck`, 5 s by default.
static RECHECK_MS: AtomicU64 = AtomicU64::new(5_000);

pub fn configure(on: bool, recheck: Duration) {
    ON.store(on, Ordering::Relaxed);
    RECHECK_MS.store(recheck.as_millis().clamp(1, u64::MAX as u128) as u64, Ordering::Relaxed);
}

fn recheck() -> Duration {
    Duration::from_millis(RECHECK_MS.load(Ordering::Relaxed))
}

/// Whether quotas are checked (before journaling) and admitted (before running).
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// How long the check `run` made before journaling stands for its admission.
const CHECKED_FOR: Duration = Duration::from_secs(60);

/// Clusters (infraID, region) this process checked against the quotas before journaling, when.
fn checked() -> &'static Mutex<BTreeMap<(String, String), std::time::Instant>> {
    static CHECKED: OnceLock<Mutex<BTreeMap<(String, String), std::time::Instant>>> = OnceLock::new();
    CHECKED.get_or_init(Default::default)
}

/// The quota check before journaling found cluster `infra`'s provision fitting the account: its
/// admission in this process, alone, need not read the account again (`run`).
pub fn checked_before_journal(infra: &str, region: &str) {
    checked().lock().unwrap().insert((infra.to_string(), region.to_string()), std::time::Instant::now());
}

/// The claims of the workflows admitted in this process, by (account, region), by workflow.
#[derive(Default)]
struct Admitted {
    claims: Mutex<BTreeMap<(String, String), BTreeMap<String, Claim>>>,
    freed: tokio::sync::Notify,
}

fn admitted() -> &'static Admitted {
    static ADMITTED: OnceLock<Admitted> = OnceLock::new();
    ADMITTED.get_or_init(Admitted::default)
}

/// The admission of a provision of `input` (`provision-infra`'s, or `create-cluster`'s `infra`),
/// if admission is on and it makes anything a quota counts.
pub fn for_input(pool: &AwsPool, request: &HoldRequest, input: &Value) -> Option<TakeHold> {
    if !on() || request.undoing {
        return None;
    }
    let infra = if input.get("infra").is_some() { &input["infra"] } else { input };
    let p: ProvisionInput = serde_json::from_value(infra.clone()).ok()?;
    let claim = Claim::of(&p);
    if claim.wanted.is_empty() || p.infra_id.is_none() {
        return None;
    }
    let role = crate::aws_steps::role_of(input);
    let pool = pool.assuming(role.as_ref());
    let (workflow, waiting) = (request.workflow.clone(), request.waiting.clone());
    // Claims are kept by the account they draw on: a role's, or "" for the process's own
    // credentials (one account for every workflow of the process that names no role). Known
    // without a call, so admission runs beside a first execution's environment check.
    let account = role.map(|r| r.account().to_string()).unwrap_or_default();
    Some(Box::pin(async move {
        let key = (account, p.region.clone());
        let aws = pool.region(&p.region).await;
        // A provision that names no zone claims the NAT gateway of the zone it will get (unread,
        // that one quota goes unchecked rather than hold the workflow up).
        let p = crate::provision::quota::with_its_zone(&aws, &p).await.unwrap_or(p);
        let claim = Claim::of(&p);
        let started = tokio::time::Instant::now();
        let mut said = String::new();
        let just_checked = checked()
            .lock()
            .unwrap()
            .remove(&(claim.infra.clone(), p.region.clone()))
            .is_some_and(|at| at.elapsed() < CHECKED_FOR);
        if just_checked && others(&key, &workflow).is_empty() {
            admitted().claims.lock().unwrap().entry(key.clone()).or_default().insert(workflow.clone(), claim.clone());
            return Ok(Box::new(Admission { key, workflow }) as Box<dyn Hold>);
        }
        loop {
            // Registered before reading: an admitted workflow that ends meanwhile wakes this one.
            let freed = admitted().freed.notified();
            let mut clusters: Vec<String> = vec![claim.infra.clone()];
            clusters.extend(others(&key, &workflow).into_iter().map(|c| c.infra));
            let usage = match quotas::read(&aws, &clusters).await {
                Ok(u) => u,
                Err(e) if e.retryable => {
                    tokio::time::sleep(recheck()).await;
                    continue;
                }
                Err(e) => {
                    return Err(HoldError::Operator(format!("cannot read the account's quotas to admit it: {e}")));
                }
            };
            {
                let mut all = admitted().claims.lock().unwrap();
                let others: Vec<Claim> = all
                    .get(&key)
                    .into_iter()
                    .flatten()
                    .filter(|(w, _)| **w != workflow)
                    .map(|(_, c)| c.clone())
                    .collect();
                let short = shortfalls(&p, &usage, &others);
                if short.is_empty() {
                    all.entry(key.clone()).or_default().insert(workflow.clone(), claim.clone());
                    return Ok(Box::new(Admission { key, workflow }) as Box<dyn Hold>);
                }
                let now = format!("quota: {}", short.join("; "));
                if now != said {
                    waiting(now.clone());
                    said = now;
                }
            }
            if started.elapsed() >= crate::wait_limit::limit() {
                return Err(HoldError::Operator(format!(
                    "waited {} for the account's {said}: free what holds it, ask AWS for more, then `infraflow retry`, or cancel",
                    crate::wait_limit::said()
                )));
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep(recheck()) => {}
            }
        }
    }))
}

fn others(key: &(String, String), workflow: &str) -> Vec<Claim> {
    let all = admitted().claims.lock().unwrap();
    all.get(key).into_iter().flatten().filter(|(w, _)| *w != workflow).map(|(_, c)| c.clone()).collect()
}

/// A workflow's admission: its claim stands until the execution ends.
struct Admission {
    key: (String, String),
    workflow: String,
}

impl Hold for Admission {
    fn lapsed(&self) -> BoxFuture<String> {
        Box::pin(std::future::pending())
    }

    fn release(self: Box<Self>) -> BoxFuture<()> {
        if let Some(claims) = admitted().claims.lock().unwrap().get_mut(&self.key) {
            claims.remove(&self.workflow);
        }
        admitted().freed.notify_waiters();
        Box::pin(async {})
    }
}

/// Both holds of a workflow, taken in order (the admission first: it makes nothing) and given up
/// together; lapsed when either lapses.
pub fn both(first: Option<TakeHold>, second: Option<TakeHold>) -> Option<TakeHold> {
    match (first, second) {
        (None, h) | (h, None) => h,
        (Some(first), Some(second)) => Some(Box::pin(async move {
            let a = first.await?;
            match second.await {
                Ok(b) => Ok(Box::new(Both(Arc::new(Mutex::new(Some((a, b)))))) as Box<dyn Hold>),
                Err(e) => {
                    a.release().await;
                    Err(e)
                }
            }
        })),
    }
}

type Pair = (Box<dyn Hold>, Box<dyn Hold>);

struct Both(Arc<Mutex<Option<Pair>>>);

impl Hold for Both {
    fn lapsed(&self) -> BoxFuture<String> {
        let (a, b) = {
            let held = self.0.lock().unwrap();
            let (a, b) = held.as_ref().expect("lapsed is asked before release");
            (a.lapsed(), b.lapsed())
        };
        Box::pin(async move {
            tokio::select! {
                why = a => why,
                why = b => why,
            }
        })
    }

    fn what(&self) -> Option<String> {
        let held = self.0.lock().unwrap();
        let (a, b) = held.as_ref()?;
        let both: Vec<String> = [a.what(), b.what()].into_iter().flatten().collect();
        (!both.is_empty()).then(|| both.join("; "))
    }

    fn release(self: Box<Self>) -> BoxFuture<()> {
        let held = self.0.lock().unwrap().take();
        Box::pin(async move {
            if let Some((a, b)) = held {
                // The lease last taken goes first.
                b.release().await;
                a.release().await;
            }
        })
    }
}
