//! A span while it runs: ids, name, times, attributes, events, status. Its end encodes it on
//! the thread that made it (`wire`), so what it allocated is freed where it was allocated.

use std::borrow::Cow;

use crate::ids::{SpanId, TraceId};

/// OpenTelemetry's span kinds infraflow uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Internal,
    Client,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl From<&str> for Attr {
    fn from(s: &str) -> Attr {
        Attr::Str(s.to_string())
    }
}
impl From<String> for Attr {
    fn from(s: String) -> Attr {
        Attr::Str(s)
    }
}
impl From<i64> for Attr {
    fn from(n: i64) -> Attr {
        Attr::Int(n)
    }
}
impl From<bool> for Attr {
    fn from(b: bool) -> Attr {
        Attr::Bool(b)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    Unset,
    Ok,
    Error(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct SpanEvent {
    pub at_ns: u64,
    pub name: &'static str,
    pub attrs: Vec<(&'static str, Attr)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent: Option<SpanId>,
    pub name: Cow<'static, str>,
    pub kind: Kind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attrs: Vec<(&'static str, Attr)>,
    pub events: Vec<SpanEvent>,
    pub status: Status,
}

impl Span {
    /// A span of `ctx`'s trace, a child of `parent`, started now; `end` it to send it.
    pub fn start(trace_id: TraceId, parent: Option<SpanId>, name: impl Into<Cow<'static, str>>) -> Span {
        Span {
            trace_id,
            span_id: SpanId::random(),
            parent,
            name: name.into(),
            kind: Kind::Internal,
            start_ns: now_ns(),
            end_ns: 0,
            attrs: Vec::with_capacity(4),
            events: Vec::new(),
            status: Status::Unset,
        }
    }

    pub fn attr(mut self, key: &'static str, value: impl Into<Attr>) -> Span {
        self.attrs.push((key, value.into()));
        self
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Attr>) {
        self.attrs.push((key, value.into()));
    }

    pub fn event(&mut self, name: &'static str, attrs: Vec<(&'static str, Attr)>) {
        self.events.push(SpanEvent { at_ns: now_ns(), name, attrs });
    }

    /// Ends the span now with `status` and queues it for export (when tracing is on).
    pub fn end(mut self, status: Status) {
        if self.end_ns == 0 {
            self.end_ns = now_ns().max(self.start_ns);
        }
        self.status = status;
        crate::queue::export(&self);
    }
}

/// Nanoseconds since the Unix epoch (wall clock: what a collector lines spans up by).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}
