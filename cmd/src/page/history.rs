//! A workflow's journal events as the page lists them: one row each, a page at a time, with
//! what each says in a line (errors and reasons clipped; the input is shown whole elsewhere).

use infraflow_journal::{Event, EventRecord};
use serde_json::{Value, json};

use crate::render::iso_time;

/// Events per page of the history.
pub(crate) const PER_PAGE: usize = 100;

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// The step, attempt and one-line detail of an event.
fn describe(e: &Event) -> (Option<&str>, Option<u32>, String) {
    match e {
        Event::Submitted { workflow, code_version, no_rollback, .. } => (
            None,
            None,
            format!(
                "{workflow}, code version {}{}",
                code_version.unwrap_or(1),
                if *no_rollback { ", no rollback" } else { "" }
            ),
        ),
        Event::LeaseTaken { owner, previous } => (
            None,
            None,
            match previous {
                Some(p) => format!("by {owner}, from {p}"),
                None => format!("by {owner}"),
            },
        ),
        Event::StepStarted { step, attempt, activity, undo, .. } => (
            Some(step),
            Some(*attempt),
            format!("{activity}{}", if undo.is_some() { ", its undo journaled first" } else { "" }),
        ),
        Event::StepCompleted { step, attempt, activity, .. } => (Some(step), Some(*attempt), activity.clone()),
        Event::StepFailed { step, attempt, error, retryable, next_attempt_at, .. } => (
            Some(step),
            Some(*attempt),
            format!(
                "{}{}",
                clip(error, 300),
                match (retryable, next_attempt_at) {
                    (true, Some(at)) => format!(" (retry due {})", iso_time(*at)),
                    (true, None) => " (retryable)".to_string(),
                    (false, _) => " (terminal)".to_string(),
                }
            ),
        ),
        Event::Paused { step, reason } => (step.as_deref(), None, clip(reason, 300)),
        Event::Waiting { reason } => (None, None, format!("waits for {}", clip(reason, 300))),
        Event::Holding { what } => (None, None, format!("holds the {}", clip(what, 300))),
        Event::CompensationStarted { reason } => (None, None, clip(reason, 300)),
        Event::Failed { error } => (None, None, clip(error, 300)),
        Event::CompensationFailed { error, remaining } => {
            (None, None, format!("{} ({} undos left)", clip(error, 300), remaining.len()))
        }
        Event::CancelRequested | Event::ResumeRequested | Event::Completed { .. } | Event::Compensated => {
            (None, None, String::new())
        }
    }
}

/// Page `page` (0 first) of `events`, oldest first, as rows for the template, and the number of
/// pages.
/// With `daemon_hidden` (a tenant's view), who holds the run's lease is not named: the daemon's
/// host and process are not a tenant's to see.
pub(crate) fn page(events: &[EventRecord], page: usize, daemon_hidden: bool) -> (Vec<Value>, usize) {
    let pages = events.len().div_ceil(PER_PAGE).max(1);
    let rows = events
        .iter()
        .skip(page.min(pages - 1) * PER_PAGE)
        .take(PER_PAGE)
        .map(|r| {
            let (step, attempt, mut detail) = describe(&r.event);
            if daemon_hidden && matches!(r.event, Event::LeaseTaken { .. }) {
                detail = "by the daemon".into();
            }
            json!({"seq": r.seq, "at": iso_time(r.at), "kind": r.event.kind(), "step": step, "attempt": attempt, "detail": detail})
        })
        .collect();
    (rows, pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_pages_its_events_and_says_each_in_a_line() {
        let failed = Event::StepFailed {
            step: "vpc".into(),
            attempt: 2,
            activity: "ec2.ensure-vpc".into(),
            error: "x".repeat(400),
            retryable: true,
            next_attempt_at: Some(61_000),
        };
        let events: Vec<EventRecord> = (0..250)
            .map(|i| EventRecord {
                seq: i + 1,
                at: 1_000 * i,
                event: if i == 120 { failed.clone() } else { Event::CancelRequested },
            })
            .collect();
        let (rows, pages) = page(&events, 1, false);
        assert_eq!(pages, 3);
        assert_eq!((rows.len(), rows[0]["seq"].as_i64()), (100, Some(101)));
        let row = &rows[20];
        assert_eq!(
            (row["kind"].as_str(), row["step"].as_str(), row["attempt"].as_u64()),
            (Some("step_failed"), Some("vpc"), Some(2))
        );
        let detail = row["detail"].as_str().unwrap();
        assert!(detail.chars().count() < 360 && detail.ends_with("(retry due 1970-01-01T00:01:01.000Z)"), "{detail}");
        assert_eq!(page(&events, 9, false).0[0]["seq"], 201, "past the last page: the last page");
        assert_eq!(page(&[], 0, false), (vec![], 1));
    }
}
