//! Admission: a workflow starts only when what it makes fits the account's quotas beside what
//! the workflows this process already admitted still claim (their input says what they make; the
//! account says what they made so far). A provision claims its network (Elastic IPs, VPCs,
//! internet gateways, NAT gateways), a scale-nodepool its On-Demand vCPUs, a create-cluster both.
//! One that does not fit waits — `waits for quota: needs 1 Elastic IP, …` — and starts when a
//! teardown, a rollback, a scale-down or an admitted workflow's end frees enough; after
//! `wait_limit` it pauses naming the quotas. It is a hold (`engine::Hold`), taken before the
//! cluster lease, released when the execution ends. An execution that only undoes is admitted at
//! once: a rollback frees.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use infraflow_activities::compute::vcpu_census;
use infraflow_activities::quotas;
use infraflow_activities::{Aws, AwsError, AwsPool};
use infraflow_engine::{BoxFuture, Hold, HoldError, HoldRequest, TakeHold};
use serde_json::Value;

use crate::provision::input::ProvisionInput;
use crate::quota::provision::{Claim, shortfalls};
use crate::quota::vcpu::VcpuClaim;
use crate::quota::{just_checked, on, recheck};

/// What one admitted workflow claims: its network (a provision's), its vCPUs (a node pool's).
#[derive(Clone, Debug, Default)]
struct Claims {
    network: Option<(ProvisionInput, Claim)>,
    vcpus: Option<VcpuClaim>,
}

/// The claims of the workflows admitted in this process, by (account, region), by workflow.
#[derive(Default)]
struct Admitted {
    claims: Mutex<BTreeMap<(String, String), BTreeMap<String, Claims>>>,
    freed: tokio::sync::Notify,
}

fn admitted() -> &'static Admitted {
    static ADMITTED: OnceLock<Admitted> = OnceLock::new();
    ADMITTED.get_or_init(Admitted::default)
}

/// The network a `provision-infra` input (or `create-cluster`'s `infra`) makes, if any.
fn network_of(workflow: &str, input: &Value) -> Option<ProvisionInput> {
    let infra = crate::cluster::network_input(workflow, input)?;
    let p: ProvisionInput = serde_json::from_value(infra.clone()).ok()?;
    (!Claim::of(&p).wanted.is_empty() && p.infra_id.is_some()).then_some(p)
}

/// The admission of a workflow of `input` (provision-infra, create-cluster, scale-nodepool), if
/// admission is on and it makes anything a quota counts.
pub fn for_input(pool: &AwsPool, request: &HoldRequest, workflow_name: &str, input: &Value) -> Option<TakeHold> {
    if !on() || request.undoing {
        return None;
    }
    let network = network_of(workflow_name, input);
    let vcpus = VcpuClaim::of(workflow_name, input);
    let region = match (&network, &vcpus) {
        (Some(p), _) => p.region.clone(),
        (None, Some((_, region))) => region.clone(),
        (None, None) => return None,
    };
    let role = crate::aws_steps::role_of(input);
    let pool = pool.assuming(role.as_ref());
    let (workflow, waiting) = (request.workflow.clone(), request.waiting.clone());
    // Claims are kept by the account they draw on: a role's (from its ARN), or the process's
    // own — as the environment check journaled it, else asked (one call beside that check).
    // Never "" for the own account: a role into that same account would be admitted apart
    // (SAFETY-A7937A6 G13).
    let journaled = request.environment.as_ref().and_then(|e| e.get("account")).and_then(Value::as_str);
    let known = role.map(|r| r.account().to_string()).or_else(|| journaled.map(str::to_string));
    Some(Box::pin(async move {
        let aws = pool.region(&region).await;
        let account = match known {
            Some(a) => a,
            None => aws.environment().await.map(|e| e.account).unwrap_or_default(),
        };
        let key = (account, region.clone());
        // A provision that names no zone claims the NAT gateway of the zone it will get (unread,
        // that one quota goes unchecked rather than hold the workflow up).
        let network = match network {
            Some(p) => {
                let p = crate::quota::provision::with_its_zone(&aws, &p).await.unwrap_or(p);
                let claim = Claim::of(&p);
                Some((p, claim))
            }
            None => None,
        };
        let mine = Claims { network, vcpus: vcpus.map(|(c, _)| c) };
        let checked_now = [
            mine.network.as_ref().map(|(_, c)| just_checked(&c.infra, &region)),
            mine.vcpus.as_ref().map(|c| just_checked(&c.checked_key(), &region)),
        ];
        if checked_now.iter().all(|c| c.unwrap_or(true)) && others(&key, &workflow).is_empty() {
            return Ok(admit(key, workflow, mine));
        }
        let started = tokio::time::Instant::now();
        let mut said = String::new();
        loop {
            // Registered before reading: an admitted workflow that ends meanwhile wakes this one.
            let freed = admitted().freed.notified();
            let short = match shortfalls_beside_others(&aws, &key, &workflow, &mine).await {
                Ok(Some(short)) => short,
                Ok(None) => return Ok(Box::new(Admission { key, workflow }) as Box<dyn Hold>),
                Err(e) if e.retryable => {
                    tokio::time::sleep(recheck()).await;
                    continue;
                }
                Err(e) => {
                    return Err(HoldError::Operator(format!("cannot read the account's quotas to admit it: {e}")));
                }
            };
            let now = format!("quota: {}", short.join("; "));
            if now != said {
                waiting(now.clone());
                said = now;
            }
            if started.elapsed() >= crate::hold::wait_limit::limit() {
                return Err(HoldError::Operator(format!(
                    "waited {} for the account's {said}: free what holds it, ask AWS for more, then `infraflow retry`, or cancel",
                    crate::hold::wait_limit::said()
                )));
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep(recheck()) => {}
            }
        }
    }))
}

/// Reads the account for `mine` and the claims admitted beside it, then either admits it (None:
/// its claim is registered under the lock the reading of the others' claims took) or says each
/// quota it would overrun.
async fn shortfalls_beside_others(
    aws: &Aws,
    key: &(String, String),
    workflow: &str,
    mine: &Claims,
) -> Result<Option<Vec<String>>, AwsError> {
    loop {
        let before = others(key, workflow);
        // The instance types whose vCPUs are read: this claim's and those admitted beside it.
        let asked: Vec<&str> = mine
            .vcpus
            .iter()
            .chain(before.iter().filter_map(|c| c.vcpus.as_ref()))
            .map(|c| c.instance_type.as_str())
            .collect();
        let network = async {
            let Some((_, claim)) = &mine.network else { return Ok(None) };
            let mut clusters: Vec<String> = vec![claim.infra.clone()];
            clusters.extend(before.iter().filter_map(|c| c.network.as_ref()).map(|(_, c)| c.infra.clone()));
            quotas::read(aws, &clusters).await.map(Some)
        };
        let vcpus = async {
            if mine.vcpus.is_none() {
                return Ok(None);
            }
            vcpu_census(aws, &asked).await.map(Some)
        };
        let (usage, census) = futures::try_join!(network, vcpus)?;
        // Judged against the claims as they are now. One that ended while the account was read
        // leaves a reading stale the safe way (what it made is counted, it claims no more); one
        // admitted meanwhile counts in full for a network (its cluster's own were not read), and
        // for vCPUs only if its instance type was asked about: else read again, asking.
        let mut all = admitted().claims.lock().unwrap();
        let others: Vec<&Claims> =
            all.get(key).into_iter().flatten().filter(|(w, _)| *w != workflow).map(|(_, c)| c).collect();
        let theirs_vcpus: Vec<VcpuClaim> = others.iter().filter_map(|c| c.vcpus.clone()).collect();
        if census.is_some() && theirs_vcpus.iter().any(|c| !asked.contains(&c.instance_type.as_str())) {
            continue;
        }
        let mut short = Vec::new();
        if let (Some((p, _)), Some(usage)) = (&mine.network, &usage) {
            let theirs: Vec<Claim> = others.iter().filter_map(|c| c.network.as_ref()).map(|(_, c)| c.clone()).collect();
            short.extend(shortfalls(p, usage, &theirs));
        }
        if let (Some(claim), Some(census)) = (&mine.vcpus, &census) {
            // A quota that cannot be read was said at submit; admission does not hold on it.
            if let Ok(Some(s)) = crate::quota::vcpu::shortfall(claim, census, &theirs_vcpus) {
                short.push(s);
            }
        }
        if short.is_empty() {
            all.entry(key.clone()).or_default().insert(workflow.to_string(), mine.clone());
            return Ok(None);
        }
        return Ok(Some(short));
    }
}

fn admit(key: (String, String), workflow: String, mine: Claims) -> Box<dyn Hold> {
    admitted().claims.lock().unwrap().entry(key.clone()).or_default().insert(workflow.clone(), mine);
    Box::new(Admission { key, workflow })
}

fn others(key: &(String, String), workflow: &str) -> Vec<Claims> {
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

/// A workflow's two holds: its admission to the account's quotas and its cluster's lease. The
/// admission is taken first (it makes nothing, so a provision waiting for quota holds no lease);
/// given back as soon as the lease must be waited for, and taken again once the lease is held —
/// a provision waiting an hour for another journal's holder keeps no claim against every other
/// provision meanwhile (SAFETY-A7937A6 G6). Given up together; lapsed when either lapses.
pub fn admission_and_lease(pool: &AwsPool, request: HoldRequest, workflow: &str, input: &Value) -> Option<TakeHold> {
    let admission = {
        let (pool, workflow, input) = (pool.clone(), workflow.to_string(), input.clone());
        move |r: &HoldRequest| for_input(&pool, r, &workflow, &input)
    };
    let lease_waits = Arc::new(tokio::sync::Notify::new());
    let lease_request = {
        let (told, say) = (lease_waits.clone(), request.waiting.clone());
        HoldRequest {
            waiting: Arc::new(move |what: String| {
                told.notify_one();
                say(what)
            }),
            ..request.clone()
        }
    };
    let lease = crate::hold::lease::for_input(pool, lease_request, workflow, input);
    match (admission(&request), lease) {
        (None, h) | (h, None) => h,
        (Some(first), Some(lease)) => Some(Box::pin(async move {
            let a = first.await?;
            let mut lease = lease;
            tokio::select! {
                b = &mut lease => return match b {
                    Ok(b) => Ok(pair(a, b)),
                    Err(e) => {
                        a.release().await;
                        Err(e)
                    }
                },
                _ = lease_waits.notified() => a.release().await,
            }
            let b = lease.await?;
            match admission(&request) {
                None => Ok(b),
                Some(again) => match again.await {
                    Ok(a) => Ok(pair(a, b)),
                    Err(e) => {
                        b.release().await;
                        Err(e)
                    }
                },
            }
        })),
    }
}

fn pair(a: Box<dyn Hold>, b: Box<dyn Hold>) -> Box<dyn Hold> {
    Box::new(Both(Arc::new(Mutex::new(Some((a, b))))))
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
