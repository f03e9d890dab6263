//! Where a run's time went, drawn as SVG on the server: one lane per step, a bar per attempt
//! from its start to its end as the journal recorded them, the backoff before each retry as a
//! dashed line, on a time axis — steps that ran side by side overlap.

use std::collections::HashMap;
use std::fmt::Write;

use infraflow_journal::{Event, EventRecord};

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    Failed,
    /// Still running when the page was drawn.
    Running,
    /// Cut off: the next record of its step is a new attempt (a crash or a lost lease).
    Interrupted,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Running => "running",
            Outcome::Interrupted => "interrupted",
        }
    }

    fn fill(self) -> &'static str {
        match self {
            Outcome::Completed => "#66bb6a",
            Outcome::Failed => "#e57373",
            Outcome::Running => "#ffb74d",
            Outcome::Interrupted => "#b0bec5",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Attempt {
    pub(crate) number: u32,
    /// Milliseconds since the Unix epoch. A start the journal elided (a step done within 2 ms)
    /// is its end.
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) outcome: Outcome,
    pub(crate) error: Option<String>,
}

/// One step's attempts and the backoffs between them, in journal order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Lane {
    pub(crate) key: String,
    pub(crate) attempts: Vec<Attempt>,
    /// (from, until): after a failed attempt, until the retry was due (or began).
    pub(crate) backoffs: Vec<(i64, i64)>,
}

impl Lane {
    /// The first attempt's start and, once the step is done, its last attempt's end.
    pub(crate) fn span(&self) -> (Option<i64>, Option<i64>) {
        let first = self.attempts.first().map(|a| a.start);
        let last = self.attempts.last().filter(|a| a.outcome != Outcome::Running).map(|a| a.end);
        (first, last)
    }
}

/// The lanes of a run from its events, ordered by first start; `now` ends what still runs
/// (`finished`: the run is over, so an attempt without an end was cut off at the last record).
pub(crate) fn lanes(events: &[EventRecord], now: i64, finished: bool) -> Vec<Lane> {
    let mut lanes: Vec<Lane> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut open: HashMap<String, (u32, i64)> = HashMap::new();
    let mut lane = |key: &str, lanes: &mut Vec<Lane>| -> usize {
        *index.entry(key.to_string()).or_insert_with(|| {
            lanes.push(Lane { key: key.to_string(), attempts: Vec::new(), backoffs: Vec::new() });
            lanes.len() - 1
        })
    };
    for e in events {
        match &e.event {
            Event::StepStarted { step, attempt, .. } => {
                let i = lane(step, &mut lanes);
                if let Some((number, start)) = open.insert(step.clone(), (*attempt, e.at)) {
                    lanes[i].attempts.push(Attempt {
                        number,
                        start,
                        end: e.at,
                        outcome: Outcome::Interrupted,
                        error: None,
                    });
                }
                // A backoff ends when the retry begins, if that is before it was due.
                if let Some(b) = lanes[i].backoffs.last_mut()
                    && b.1 > e.at
                    && b.0 <= e.at
                {
                    b.1 = e.at;
                }
            }
            Event::StepCompleted { step, attempt, .. } => {
                let i = lane(step, &mut lanes);
                let (number, start) = open.remove(step).unwrap_or((*attempt, e.at));
                lanes[i].attempts.push(Attempt { number, start, end: e.at, outcome: Outcome::Completed, error: None });
            }
            Event::StepFailed { step, attempt, error, next_attempt_at, .. } => {
                let i = lane(step, &mut lanes);
                let (number, start) = open.remove(step).unwrap_or((*attempt, e.at));
                lanes[i].attempts.push(Attempt {
                    number,
                    start,
                    end: e.at,
                    outcome: Outcome::Failed,
                    error: Some(error.clone()),
                });
                if let Some(due) = next_attempt_at.filter(|due| *due > e.at) {
                    lanes[i].backoffs.push((e.at, due));
                }
            }
            _ => {}
        }
    }
    let last = events.last().map_or(now, |e| e.at);
    for (step, (number, start)) in open {
        let i = lane(&step, &mut lanes);
        let (end, outcome) = if finished { (last, Outcome::Interrupted) } else { (now.max(start), Outcome::Running) };
        lanes[i].attempts.push(Attempt { number, start, end, outcome, error: None });
        lanes[i].attempts.sort_by_key(|a| a.start);
    }
    lanes.retain(|l| !l.attempts.is_empty());
    lanes.sort_by_key(|l| l.attempts.first().map(|a| a.start));
    lanes
}

const LABEL_W: f64 = 300.0;
const PLOT_W: f64 = 860.0;
const ROW_H: f64 = 18.0;
const AXIS_H: f64 = 26.0;
const MIN_BAR: f64 = 2.0;

/// Milliseconds between ticks: the smallest of a 1-2-5 scale (then minutes) giving at most ten.
fn tick_step(span_ms: i64) -> i64 {
    const STEPS: [i64; 21] = [
        1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
        600_000, 1_800_000, 3_600_000,
    ];
    STEPS.into_iter().find(|s| span_ms / s <= 10).unwrap_or(3_600_000 * (span_ms / 36_000_000 + 1))
}

/// `850 ms`, `1.5 s`, `2 min`, `1 min 30 s`.
pub(crate) fn duration_text(ms: i64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        let s = format!("{:.1}", ms as f64 / 1000.0);
        format!("{} s", s.trim_end_matches(".0"))
    } else if ms % 60_000 == 0 {
        format!("{} min", ms / 60_000)
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// The SVG of `lanes`; times on the axis count from the first attempt's start.
pub(crate) fn draw(lanes: &[Lane]) -> String {
    if lanes.is_empty() {
        return "<p class=\"empty\">no step has started yet</p>".to_string();
    }
    let t0 = lanes.iter().flat_map(|l| l.attempts.iter().map(|a| a.start)).min().unwrap_or(0);
    let t1 = lanes
        .iter()
        .flat_map(|l| l.attempts.iter().map(|a| a.end).chain(l.backoffs.iter().map(|b| b.1)))
        .max()
        .unwrap_or(t0);
    let span = (t1 - t0).max(1);
    let x = |t: i64| LABEL_W + (t - t0) as f64 * PLOT_W / span as f64;
    let width = LABEL_W + PLOT_W + 20.0;
    let height = AXIS_H + ROW_H * lanes.len() as f64 + 8.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" height="{height}" font-family="system-ui, sans-serif" font-size="11" data-span-ms="{span}">"#
    );
    let step = tick_step(span);
    let mut t = 0;
    while t <= span {
        let tx = x(t0 + t);
        let _ = write!(
            svg,
            r##"<line x1="{tx:.1}" y1="{AXIS_H}" x2="{tx:.1}" y2="{height}" stroke="#eceff1"/><text x="{tx:.1}" y="16" text-anchor="middle" fill="#607d8b">{}</text>"##,
            duration_text(t)
        );
        t += step;
    }
    for (i, lane) in lanes.iter().enumerate() {
        let y = AXIS_H + ROW_H * i as f64;
        let (first, last) = lane.span();
        let _ = write!(
            svg,
            r#"<g class="lane" data-key="{}" data-first-start="{}" data-last-end="{}">"#,
            escape(&lane.key),
            first.map(|s| s - t0).unwrap_or_default(),
            last.map(|e| (e - t0).to_string()).unwrap_or_default()
        );
        if i % 2 == 1 {
            let _ = write!(svg, r##"<rect x="0" y="{y}" width="{width}" height="{ROW_H}" fill="#fafafa"/>"##);
        }
        let _ = write!(
            svg,
            r##"<text x="6" y="{:.1}" fill="#263238"><title>{}</title>{}</text>"##,
            y + 13.0,
            escape(&lane.key),
            escape(&clip(&lane.key, 46))
        );
        for &(from, until) in &lane.backoffs {
            let _ = write!(
                svg,
                r##"<line class="backoff" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#90a4ae" stroke-width="2" stroke-dasharray="3 2"><title>backoff {}</title></line>"##,
                x(from),
                y + ROW_H / 2.0,
                x(until),
                y + ROW_H / 2.0,
                duration_text(until - from)
            );
        }
        for a in &lane.attempts {
            let (ax, aw) = (x(a.start), (x(a.end) - x(a.start)).max(MIN_BAR));
            let mut title = format!(
                "{} attempt {}: {} from {}, {}",
                lane.key,
                a.number,
                duration_text(a.end - a.start),
                duration_text(a.start - t0),
                a.outcome.as_str()
            );
            if let Some(e) = &a.error {
                title.push_str(": ");
                title.push_str(&clip(e, 300));
            }
            let _ = write!(
                svg,
                r#"<rect class="attempt" data-attempt="{}" data-outcome="{}" data-start="{}" data-end="{}" x="{ax:.1}" y="{:.1}" width="{aw:.1}" height="{:.1}" rx="2" fill="{}"><title>{}</title></rect>"#,
                a.number,
                a.outcome.as_str(),
                a.start - t0,
                a.end - t0,
                y + 3.0,
                ROW_H - 6.0,
                a.outcome.fill(),
                escape(&title)
            );
        }
        svg.push_str("</g>");
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: i64, at: i64, event: Event) -> EventRecord {
        EventRecord { seq, at, event }
    }

    fn started(step: &str, attempt: u32) -> Event {
        Event::StepStarted {
            step: step.into(),
            attempt,
            activity: "a".into(),
            input_hash: "h".into(),
            undo: None,
            position: None,
        }
    }

    fn completed(step: &str, attempt: u32) -> Event {
        Event::StepCompleted {
            step: step.into(),
            attempt,
            activity: "a".into(),
            input_hash: "h".into(),
            output: serde_json::Value::Null,
            position: None,
        }
    }

    fn failed(step: &str, attempt: u32, next: Option<i64>) -> Event {
        Event::StepFailed {
            step: step.into(),
            attempt,
            activity: "a".into(),
            error: "Throttling <slow down>".into(),
            retryable: true,
            next_attempt_at: next,
        }
    }

    #[test]
    fn side_by_side_steps_overlap_and_a_retry_shows_its_failed_attempt_and_backoff() {
        let events = vec![
            at(1, 1_000, started("zone/a/nat-gateway", 1)),
            at(2, 1_100, started("zone/b/nat-gateway", 1)),
            at(3, 1_500, failed("zone/b/nat-gateway", 1, Some(2_500))),
            at(4, 2_000, completed("zone/a/nat-gateway", 1)),
            at(5, 2_400, started("zone/b/nat-gateway", 2)),
            at(6, 3_000, completed("zone/b/nat-gateway", 2)),
            // Elided start: a fast step records only its completion.
            at(7, 3_100, completed("done", 1)),
        ];
        let lanes = lanes(&events, 10_000, true);
        assert_eq!(
            lanes.iter().map(|l| l.key.as_str()).collect::<Vec<_>>(),
            ["zone/a/nat-gateway", "zone/b/nat-gateway", "done"]
        );
        let b = &lanes[1];
        assert_eq!(
            b.attempts.iter().map(|a| (a.number, a.outcome)).collect::<Vec<_>>(),
            [(1, Outcome::Failed), (2, Outcome::Completed)]
        );
        assert_eq!(b.backoffs, [(1_500, 2_400)], "the backoff ends when the retry began");
        assert_eq!(b.span(), (Some(1_100), Some(3_000)));
        assert!(lanes[0].attempts[0].end > b.attempts[0].start, "the two zones overlap");
        assert_eq!(lanes[2].attempts[0].start, 3_100);

        let svg = draw(&lanes);
        assert_eq!(svg.matches(r#"class="attempt""#).count(), 4);
        assert_eq!(svg.matches(r#"class="backoff""#).count(), 1);
        assert!(svg.contains(r#"data-key="zone/b/nat-gateway" data-first-start="100" data-last-end="2000""#), "{svg}");
        assert!(svg.contains("Throttling &lt;slow down&gt;") && !svg.contains("<slow"), "escaped: {svg}");
        assert!(svg.contains(">1 s<") && svg.contains(">2 s<"), "the axis: {svg}");
    }

    #[test]
    fn an_attempt_cut_off_by_a_crash_and_one_still_running_are_drawn_as_such() {
        let events =
            vec![at(1, 0, started("vpc", 1)), at(2, 5_000, started("vpc", 2)), at(3, 6_000, started("subnet", 1))];
        let running = lanes(&events, 9_000, false);
        let vpc: Vec<_> = running[0].attempts.iter().map(|a| (a.outcome, a.end)).collect();
        assert_eq!(vpc, [(Outcome::Interrupted, 5_000), (Outcome::Running, 9_000)]);
        assert_eq!(running[0].span(), (Some(0), None), "no end while it runs");
        let over = lanes(&events, 9_000, true);
        assert_eq!(over[1].attempts[0].outcome, Outcome::Interrupted);
        assert_eq!(draw(&[]), "<p class=\"empty\">no step has started yet</p>");
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration_text(850), "850 ms");
        assert_eq!(duration_text(1_500), "1.5 s");
        assert_eq!(duration_text(2_000), "2 s");
        assert_eq!(duration_text(120_000), "2 min");
        assert_eq!(duration_text(90_000), "1 min 30 s");
        assert_eq!(tick_step(9_000), 1_000);
        assert_eq!(tick_step(45 * 60_000), 300_000);
    }
}
