//! Which steps of this process wait for the AWS request rate now: what the status page shows
//! beside a running step. Filled by the pacer's wait-start observer, which runs in the waiting
//! task and so can name its step (`engine::current_step`); a wait outside a step is not listed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use infraflow_activities::pacing::{RateClass, observe_wait_starts};
use infraflow_engine::{StepId, current_step};

struct Entry {
    step: StepId,
    class: RateClass,
    since: Instant,
}

fn waits() -> &'static Mutex<BTreeMap<u64, Entry>> {
    static WAITS: OnceLock<Mutex<BTreeMap<u64, Entry>>> = OnceLock::new();
    WAITS.get_or_init(Default::default)
}

/// Removes its entry when the wait ends (or the waiting call is dropped).
struct Listed(u64);

impl Drop for Listed {
    fn drop(&mut self) {
        waits().lock().unwrap_or_else(|p| p.into_inner()).remove(&self.0);
    }
}

/// Lists every wait that starts in a step from now on.
pub fn install() {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    observe_wait_starts(Arc::new(|class| -> Box<dyn Send> {
        let Some(step) = current_step() else { return Box::new(()) };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        waits().lock().unwrap_or_else(|p| p.into_inner()).insert(n, Entry { step, class, since: Instant::now() });
        Box::new(Listed(n))
    }));
}

/// The steps of `workflow` waiting for the AWS rate now: (step key, request class, seconds waited),
/// the longest wait of each step.
pub fn of_workflow(workflow: &str) -> Vec<(String, &'static str, u64)> {
    let mut by_step: BTreeMap<String, (&'static str, u64)> = BTreeMap::new();
    for e in waits().lock().unwrap_or_else(|p| p.into_inner()).values().filter(|e| e.step.workflow == workflow) {
        let secs = e.since.elapsed().as_secs();
        let slot = by_step.entry(e.step.step.clone()).or_insert((e.class.as_str(), secs));
        if secs >= slot.1 {
            *slot = (e.class.as_str(), secs);
        }
    }
    by_step.into_iter().map(|(step, (class, secs))| (step, class, secs)).collect()
}
