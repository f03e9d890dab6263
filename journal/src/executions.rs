//! The executions a workflow's log records — each began with a `LeaseTaken` — as far as a trace
//! needs them: the newest, and the one before it when that one ended without a record of how.
//! Folded with the view, so naming an execution's span costs no second read of the log.

use crate::event::{Event, EventRecord};

/// One execution's start: its `LeaseTaken`'s sequence number and time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecutionStart {
    pub seq: i64,
    pub at: i64,
}

/// An execution that left no record of how it ended (its process was killed or stopped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnendedExecution {
    pub start: ExecutionStart,
    /// The time of its last record.
    pub last_at: i64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Executions {
    pub latest: Option<ExecutionStart>,
    /// The execution before `latest`, when it ended without a record.
    pub unended_before_latest: Option<UnendedExecution>,
    latest_ended: bool,
    last_at: i64,
}

/// Whether `e` records how an execution ended: a pause, or the workflow's end.
fn ends_an_execution(e: &Event) -> bool {
    matches!(
        e,
        Event::Paused { .. }
            | Event::Completed { .. }
            | Event::Failed { .. }
            | Event::Compensated
            | Event::CompensationFailed { .. }
    )
}

impl Executions {
    pub(crate) fn apply(&mut self, rec: &EventRecord) {
        if let Event::LeaseTaken { .. } = rec.event {
            self.unended_before_latest = match self.latest {
                Some(start) if !self.latest_ended => Some(UnendedExecution { start, last_at: self.last_at }),
                _ => None,
            };
            self.latest = Some(ExecutionStart { seq: rec.seq, at: rec.at });
            self.latest_ended = false;
        } else if ends_an_execution(&rec.event) {
            self.latest_ended = true;
        }
        self.last_at = rec.at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: i64, event: Event) -> EventRecord {
        EventRecord { seq, at: seq * 10, event }
    }

    fn lease(seq: i64) -> EventRecord {
        rec(seq, Event::LeaseTaken { owner: "o".into(), previous: None })
    }

    #[test]
    fn an_execution_killed_mid_way_is_named_by_the_one_after_it_and_one_that_paused_is_not() {
        let mut x = Executions::default();
        for r in [lease(1), rec(2, Event::ResumeRequested), lease(3)] {
            x.apply(&r);
        }
        assert_eq!(x.latest, Some(ExecutionStart { seq: 3, at: 30 }));
        assert_eq!(
            x.unended_before_latest,
            Some(UnendedExecution { start: ExecutionStart { seq: 1, at: 10 }, last_at: 20 })
        );
        for r in [rec(4, Event::Paused { step: None, reason: "r".into() }), lease(5)] {
            x.apply(&r);
        }
        assert_eq!(x.latest, Some(ExecutionStart { seq: 5, at: 50 }));
        assert_eq!(x.unended_before_latest, None);
    }
}
