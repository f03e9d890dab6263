//! What the daemon's schedules last found, as the list's template shows it under the workflows:
//! the janitor's sweep (`--sweep-every`) and the drift checks (`--check-every`).

use infraflow_engine::SystemClock;
use serde_json::{Value, json};

use crate::render;

/// The last sweep: when, its error, its clusters (null before the first).
pub(super) fn last_sweep(sweep: &crate::sweep::SharedSweep) -> Value {
    let Some(last) = sweep.lock().unwrap().clone() else { return Value::Null };
    json!({
        "age": render::age(SystemClock.now() - last.at_ms),
        "error": last.error,
        "clusters": last.clusters.iter().map(|s| json!({
            "infra_id": s.infra_id,
            "region": s.region,
            "class": s.class.as_str(),
            "expiration": s.expiration_date.clone().unwrap_or_default(),
            "resources": s.resources.values().sum::<usize>(),
            "reason": s.reason,
            "teardown": s.teardown.clone().unwrap_or_default(),
        })).collect::<Vec<_>>(),
    })
}

/// The last check of each cluster, a row each (null before the first).
pub(super) fn last_checks(checks: &crate::checked::SharedChecks) -> Value {
    let checks = checks.lock().unwrap();
    if checks.is_empty() {
        return Value::Null;
    }
    let now = SystemClock.now();
    Value::Array(
        checks
            .values()
            .map(|c| {
                let (result, findings) = match &c.result {
                    Ok(r) if r.in_sync => ("in sync".to_string(), String::new()),
                    Ok(r) => (
                        "drifted".to_string(),
                        r.counts().iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", "),
                    ),
                    Err(e) => ("failed".to_string(), e.clone()),
                };
                json!({
                    "infra_id": c.infra_id,
                    "region": c.region,
                    "age": render::age(now - c.at_ms),
                    "result": result,
                    "findings": findings,
                })
            })
            .collect(),
    )
}
