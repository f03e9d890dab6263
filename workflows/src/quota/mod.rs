//! Whether what a workflow makes fits the account's quotas: one file a quota family (`vcpu`,
//! `iam`, `zone`, `link`, and a provision's network, `provision`), read before a workflow is
//! journaled and again by its admission (`hold::admission`). Here: whether quotas are checked
//! at all, and the marks the check before journaling leaves for the admission.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

pub mod iam;
pub mod link;
pub mod provision;
pub mod vcpu;
pub mod zone;

/// Admission is on unless the operator skips the quota check (`--skip-quota-check`).
static ON: AtomicBool = AtomicBool::new(true);

/// How often a waiting workflow reads the account again, in milliseconds (sooner when an
/// admitted one ends): `--quota-recheck`, 5 s by default.
static RECHECK_MS: AtomicU64 = AtomicU64::new(5_000);

pub fn configure(on: bool, recheck: Duration) {
    ON.store(on, Ordering::Relaxed);
    RECHECK_MS.store(recheck.as_millis().clamp(1, u64::MAX as u128) as u64, Ordering::Relaxed);
}

pub(crate) fn recheck() -> Duration {
    Duration::from_millis(RECHECK_MS.load(Ordering::Relaxed))
}

/// Whether quotas are checked (before journaling) and admitted (before running).
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// How long the check `run` made before journaling stands for its admission.
const CHECKED_FOR: Duration = Duration::from_secs(60);

/// Claims (a cluster's network by its infraID, a node pool's vCPUs by `VcpuClaim::checked_key`)
/// this process checked against the quotas before journaling, by region, when.
fn checked() -> &'static Mutex<BTreeMap<(String, String), std::time::Instant>> {
    static CHECKED: OnceLock<Mutex<BTreeMap<(String, String), std::time::Instant>>> = OnceLock::new();
    CHECKED.get_or_init(Default::default)
}

/// The quota check before journaling found claim `what` fitting the account in `region`: its
/// admission in this process, alone, need not read the account again (`run`).
pub fn checked_before_journal(what: &str, region: &str) {
    checked().lock().unwrap().insert((what.to_string(), region.to_string()), std::time::Instant::now());
}

/// Whether claim `what` was checked before journaling a moment ago (the mark is used up).
pub(crate) fn just_checked(what: &str, region: &str) -> bool {
    checked()
        .lock()
        .unwrap()
        .remove(&(what.to_string(), region.to_string()))
        .is_some_and(|at| at.elapsed() < CHECKED_FOR)
}
