//! `--lock-bucket`: the process's cluster lease store, configured once at startup and proved to
//! honour S3's conditional writes before any workflow relies on it.

use infraflow_activities::cluster_lease::LeaseStore;
use infraflow_journal::Location;
use infraflow_workflows::hold::lease::{self, LockConfig};

use crate::cli::LockArgs;
use crate::failure::Failure;

/// Configures the lease store if a bucket is named; whether one is.
pub fn configure(args: &LockArgs, db: &Location) -> Result<bool, Failure> {
    let Some(bucket) = args.lock_bucket.clone().filter(|b| !b.is_empty()) else { return Ok(false) };
    if args.lock_ttl < std::time::Duration::from_secs(3) {
        return Err(Failure::usage(format!(
            "--lock-ttl {}ms is too short to renew a lease in: give 3s or more (60s by default)",
            args.lock_ttl.as_millis()
        )));
    }
    let region = args
        .lock_region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "us-east-1".to_string());
    lease::configure_lock(LockConfig {
        store: LeaseStore { bucket, prefix: args.lock_prefix.clone() },
        region,
        ttl: args.lock_ttl,
        journal: db.to_string(),
        host: std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default(),
    });
    Ok(true)
}

/// Refuses a store that ignores `If-None-Match` (or cannot be written) before anything runs.
pub async fn self_test() -> Result<(), Failure> {
    lease::self_test(&crate::registry::pool()).await.map_err(Failure::usage)
}

/// The proof `start_proof` started, until `proved` waits for it (one run or submit a process).
static PROOF: std::sync::Mutex<Option<tokio::task::JoinHandle<Result<(), String>>>> = std::sync::Mutex::new(None);

/// Starts the store's proof beside what a `run` or `submit` reads before it journals (the quota
/// check, a customer's network): `proved` waits for it before anything is journaled, so a store
/// that ignores its conditions is still refused before the workflow exists.
/// The proof goes through `role`, the workflow's, when it names one: its lease lives in the role's
/// account, and the process's own identity may have no access to that bucket. Without
/// `--lock-bucket` it proves nothing and calls nothing.
pub fn start_proof(role: Option<&infraflow_activities::AssumedRole>) {
    let pool = crate::registry::pool().assuming(role);
    let task = tokio::spawn(async move { lease::self_test(&pool).await });
    *PROOF.lock().unwrap() = Some(task);
}

/// Waits for the proof `start_proof` started, if it did; the store's refusal, one line.
pub async fn proved() -> Result<(), Failure> {
    let Some(task) = PROOF.lock().unwrap().take() else { return Ok(()) };
    task.await.unwrap_or_else(|e| Err(format!("the lease store's proof did not finish: {e}"))).map_err(Failure::usage)
}

/// Where this process keeps cluster leases, or that it takes none.
pub fn leases_said() -> String {
    match infraflow_workflows::hold::lease::lock_config() {
        Some(c) => format!("cluster lease under s3://{}/{}", c.store.bucket, c.store.prefix.trim_end_matches('/')),
        None => "no cluster lease (no --lock-bucket): other journals are not kept off this cluster".to_string(),
    }
}
