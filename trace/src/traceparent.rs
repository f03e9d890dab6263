//! W3C Trace Context's `traceparent`: the caller's span a submission continues.

use crate::ids::{SpanId, TraceId, parse_hex};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: bool,
}

impl TraceParent {
    /// `00-<32 hex>-<16 hex>-<2 hex>`; a later version's longer value is read by its first four
    /// fields, as the spec asks. None for anything else, or all-zero ids.
    pub fn parse(s: &str) -> Option<TraceParent> {
        let s = s.trim();
        let mut parts = s.split('-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let version = parse_hex::<1>(version)?[0];
        if version == 0xff || (version == 0 && parts.next().is_some()) {
            return None;
        }
        let (trace, span, flags) = (parse_hex::<16>(trace)?, parse_hex::<8>(span)?, parse_hex::<1>(flags)?[0]);
        if trace == [0; 16] || span == [0; 8] {
            return None;
        }
        Some(TraceParent { trace_id: TraceId(trace), span_id: SpanId(span), sampled: flags & 1 == 1 })
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "00-{}-{}-{:02x}", self.trace_id, self.span_id, u8::from(self.sampled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_reads_back_as_written_and_bad_ones_are_refused() {
        let t = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(TraceParent::parse(t).unwrap().to_string(), t);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        assert!(!TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap().sampled);
    }
}
