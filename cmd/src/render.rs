//! How workflows look to people (tables) and to scripts (`--json`).

use infraflow_journal::{EventRecord, WorkflowRow, WorkflowState, WorkflowView};
use serde_json::{Value, json};

/// The filters `status` and the status page share: a row is shown when it is in one of
/// `states` (any when empty), of `workflow` and of `cluster` (when given).
pub fn row_matches(r: &WorkflowRow, states: &[WorkflowState], workflow: Option<&str>, cluster: Option<&str>) -> bool {
    (states.is_empty() || states.contains(&r.state))
        && workflow.is_none_or(|w| r.workflow == w)
        && cluster.is_none_or(|c| r.cluster == c)
}

/// What the unfinished workflows of a list wait for, by id (`waits_for`).
pub type Waits = std::collections::HashMap<String, String>;

/// `status --json` without an id: one object per workflow.
pub fn list_json(rows: &[WorkflowRow], waits: &Waits) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "id": r.id,
                    "workflow": r.workflow,
                    "state": r.state,
                    "cluster": r.cluster,
                    "createdAt": iso_time(r.created_at),
                    "updatedAt": iso_time(r.updated_at),
                    "currentStep": r.current_step,
                    "error": r.error,
                    "owner": r.lease_owner,
                    "waitsFor": waits.get(&r.id),
                })
            })
            .collect(),
    )
}

pub fn list_table(rows: &[WorkflowRow], now_ms: i64, waits: &Waits) -> String {
    if rows.is_empty() {
        return "no workflows in this journal\n".into();
    }
    let mut lines = vec![["ID".to_string(), "WORKFLOW".into(), "STATE".into(), "AGE".into(), "STEP / ERROR".into()]];
    for r in rows {
        let detail = match (&r.error, &r.current_step) {
            (Some(e), _) if !r.state.is_runnable() || r.state == infraflow_journal::WorkflowState::Paused => {
                one_line(e, 70)
            }
            (_, Some(s)) if !r.state.is_finished() && !waits.contains_key(&r.id) => s.clone(),
            _ => waits.get(&r.id).map(|w| format!("waits for: {}", one_line(w, 70))).unwrap_or_default(),
        };
        lines.push([r.id.clone(), r.workflow.clone(), r.state.to_string(), age(now_ms - r.created_at), detail]);
    }
    table(&lines)
}

/// The workflow a queued one waits for on its cluster: (id, workflow name, state).
pub type WaitingFor = Option<(String, String, WorkflowState)>;

pub fn waiting_text(w: &WaitingFor) -> Option<String> {
    w.as_ref().map(|(id, workflow, state)| format!("{workflow} workflow {id} ({state}) on the same cluster"))
}

/// What a workflow waits for before it can go on, in words: the workflow ahead of it in this
/// journal's queue, else what its hold waits for (another journal's lease on the cluster, the
/// account's quota), as its execution journaled it.
pub fn waits_for(w: &WaitingFor, view: &WorkflowView) -> Option<String> {
    waiting_text(w).or_else(|| view.summary.waiting.clone())
}

/// What a workflow's running execution holds beyond the journal (its cluster lease), as it
/// journaled it; nothing once no process holds the workflow.
pub fn holds(row: &WorkflowRow, view: &WorkflowView) -> Option<String> {
    row.lease_owner.as_ref().and(view.summary.holding.clone())
}

/// The AWS account a workflow acts in, as its environment probe journaled it (under its role,
/// if it names one), and that role.
fn acts_as(view: &WorkflowView) -> (Option<&str>, Option<&str>) {
    let account = view
        .step(infraflow_engine::ENVIRONMENT_STEP)
        .and_then(|s| s.output.as_ref())
        .and_then(|o| o.get("account"))
        .and_then(Value::as_str);
    (account, view.input.get("roleARN").and_then(Value::as_str))
}

/// `status ID --json`: the contract's fields, plus the lease, timestamps and what it waits for,
/// and the AWS account it acts in (and through which role).
pub fn view_json(row: &WorkflowRow, view: &WorkflowView, waiting: &WaitingFor) -> Value {
    let (account, role) = acts_as(view);
    let mut v = json!({
        "account": account,
        "role": role,
        "waitingFor": waiting.as_ref().map(|(id, workflow, state)| json!({"id": id, "workflow": workflow, "state": state})),
        "waitsFor": waits_for(waiting, view),
        "holds": holds(row, view),
        "id": view.id,
        "workflow": view.workflow,
        "state": row.state,
        "cluster": row.cluster,
        "createdAt": iso_time(view.created_at),
        "updatedAt": iso_time(view.updated_at),
        "input": crate::redact::redacted(&view.input),
        "noRollback": view.no_rollback,
        "owner": row.lease_owner,
        "steps": view.steps.iter().map(|s| json!({
            "key": s.key,
            "activity": s.activity,
            "state": s.state,
            "attempts": s.attempts,
            "error": s.error,
            "completions": s.completions,
        })).collect::<Vec<_>>(),
        "output": view.summary.output,
        "error": view.summary.error,
    });
    // Who asked through the API (`<tenant>/<subject>`); none from the journal path.
    if let Some(s) = &view.submitter {
        v["submitter"] = json!(s);
    }
    v["traceId"] = json!(trace_id(view));
    v
}

/// The trace every execution of the workflow joins: the caller's (`traceparent`), else the one
/// derived from its submission.
pub fn trace_id(view: &WorkflowView) -> String {
    match view.traceparent.as_deref().and_then(infraflow_trace::TraceParent::parse) {
        Some(caller) => caller.trace_id.to_string(),
        None => infraflow_trace::derived_trace_id(&view.creator).to_string(),
    }
}

pub fn view_text(row: &WorkflowRow, view: &WorkflowView, waiting: &WaitingFor, now_ms: i64) -> String {
    let mut out = String::new();
    out.push_str(&format!("id:        {}\n", view.id));
    out.push_str(&format!("workflow:  {}\n", view.workflow));
    if let Some(s) = &view.submitter {
        out.push_str(&format!("submitter: {s}\n"));
    }
    out.push_str(&format!("state:     {}\n", row.state));
    out.push_str(&format!("trace:     {}\n", trace_id(view)));
    out.push_str(&format!("created:   {} ({} ago)\n", iso_time(view.created_at), age(now_ms - view.created_at)));
    match acts_as(view) {
        (Some(account), Some(role)) => out.push_str(&format!("account:   {account} (role {role})\n")),
        (Some(account), None) => out.push_str(&format!("account:   {account}\n")),
        (None, Some(role)) => out.push_str(&format!("role:      {role}\n")),
        (None, None) => {}
    }
    if let Some(owner) = &row.lease_owner {
        out.push_str(&format!("owner:     {owner}\n"));
    }
    if let Some(w) = waits_for(waiting, view) {
        out.push_str(&format!("waits for: {w}\n"));
    }
    if let Some(h) = holds(row, view) {
        out.push_str(&format!("holds:     {h}\n"));
    }
    if let Some(e) = &view.summary.error {
        out.push_str(&format!("error:     {e}\n"));
    }
    if !view.steps.is_empty() {
        out.push('\n');
        let mut lines = vec![["STEP".to_string(), "STATE".into(), "ATTEMPTS".into(), "ERROR".into()]];
        for s in &view.steps {
            let state =
                serde_json::to_value(s.state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            lines.push([
                s.key.clone(),
                state,
                s.attempts.to_string(),
                s.error.as_deref().map(|e| one_line(e, 80)).unwrap_or_default(),
            ]);
        }
        out.push_str(&table(&lines));
    }
    if let Some(o) = &view.summary.output {
        out.push_str("\noutput:\n");
        out.push_str(&serde_json::to_string_pretty(o).unwrap_or_default());
        out.push('\n');
    }
    out
}

pub fn history_json(events: &[EventRecord]) -> Value {
    Value::Array(
        events
            .iter()
            .map(|e| {
                let mut v = crate::redact::redacted(&serde_json::to_value(e).unwrap_or(Value::Null));
                if let Some(o) = v.as_object_mut() {
                    o.insert("time".into(), json!(iso_time(e.at)));
                }
                v
            })
            .collect(),
    )
}

pub fn history_text(events: &[EventRecord]) -> String {
    let mut lines = vec![["SEQ".to_string(), "TIME".into(), "EVENT".into(), "STEP".into(), "DETAIL".into()]];
    for e in events {
        let mut detail = crate::redact::redacted(&serde_json::to_value(&e.event).unwrap_or(Value::Null));
        if let Some(o) = detail.as_object_mut() {
            o.remove("type");
            o.remove("step");
        }
        let detail = match detail {
            Value::Object(o) if o.is_empty() => String::new(),
            Value::Null => String::new(),
            d => one_line(&d.to_string(), 100),
        };
        lines.push([
            e.seq.to_string(),
            iso_time(e.at),
            e.event.kind().to_string(),
            e.event.step().unwrap_or("").to_string(),
            detail,
        ]);
    }
    table(&lines)
}

fn table<const N: usize>(lines: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for l in lines {
        for (i, c) in l.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for l in lines {
        let mut line = String::new();
        for (i, c) in l.iter().enumerate() {
            if i + 1 == N {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn one_line(s: &str, max: usize) -> String {
    let s = s.replace('\n', " ");
    if s.chars().count() <= max { s } else { format!("{}…", s.chars().take(max - 1).collect::<String>()) }
}

/// A duration as people read it: `42s`, `3m12s`, `5h02m`, `2d04h`.
pub fn age(ms: i64) -> String {
    let s = (ms / 1000).max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86400, (s % 86400) / 3600),
    }
}

/// Milliseconds since the epoch as RFC 3339 UTC (`2026-11-21T20:57:22.123Z`).
pub fn iso_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = infraflow_workflows::expiry::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, (rem % 3600) / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_time_formats_known_instants() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_time(1_795_294_642_123), "2026-11-21T20:57:22.123Z");
        assert_eq!(iso_time(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn ages_read_naturally() {
        assert_eq!(age(42_000), "42s");
        assert_eq!(age(192_000), "3m12s");
        assert_eq!(age(2 * 86_400_000 + 4 * 3_600_000), "2d04h");
    }
}
