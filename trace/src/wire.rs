//! OTLP's `ExportTraceServiceRequest` in protobuf's wire format, written by hand: the few
//! messages a span needs (opentelemetry-proto's `trace/v1/trace.proto`, `common/v1`,
//! `resource/v1`), without a protobuf compiler or crate in the build. A span is encoded where
//! it ends, as one entry of `ScopeSpans.spans`; a request wraps such entries, so a batch is
//! bytes laid end to end and never a list of spans to free on the exporter's thread.

use crate::span::{Attr, Kind, Span, Status};

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes(out, field, s.as_bytes());
}

fn fixed64(out: &mut Vec<u8>, field: u32, n: u64) {
    key(out, field, 1);
    out.extend_from_slice(&n.to_le_bytes());
}

fn uint(out: &mut Vec<u8>, field: u32, n: u64) {
    key(out, field, 0);
    varint(out, n);
}

/// A nested message, written in place: its body first, then its length put before it (a
/// varint's width is known only then), so nesting allocates nothing.
fn message(out: &mut Vec<u8>, field: u32, build: impl FnOnce(&mut Vec<u8>)) {
    key(out, field, 2);
    let start = out.len();
    build(out);
    let (mut len, mut n, mut width) = ([0u8; 10], (out.len() - start) as u64, 0);
    loop {
        len[width] = (n as u8 & 0x7f) | if n >= 0x80 { 0x80 } else { 0 };
        width += 1;
        n >>= 7;
        if n == 0 {
            break;
        }
    }
    // Moves the body (a few hundred bytes) up by the length's width.
    out.splice(start..start, len[..width].iter().copied());
}

/// `KeyValue { key = 1; AnyValue value = 2 }`, `AnyValue { string_value = 1; bool_value = 2;
/// int_value = 3 }`.
fn key_value(out: &mut Vec<u8>, field: u32, k: &str, v: &Attr) {
    message(out, field, |kv| {
        string(kv, 1, k);
        message(kv, 2, |any| match v {
            Attr::Str(s) => string(any, 1, s),
            Attr::Bool(b) => uint(any, 2, u64::from(*b)),
            Attr::Int(n) => uint(any, 3, *n as u64),
        });
    });
}

/// Appends `s` as an entry of `ScopeSpans.spans` (field 2). `Span`: trace_id 1, span_id 2,
/// parent_span_id 4, name 5, kind 6, start 7, end 8, attributes 9, events 11
/// (`time_unix_nano` 1, `name` 2, `attributes` 3), status 15 (`message` 2, `code` 3).
pub(crate) fn span_entry(out: &mut Vec<u8>, s: &Span) {
    message(out, 2, |m| {
        bytes(m, 1, &s.trace_id.0);
        bytes(m, 2, &s.span_id.0);
        if let Some(p) = s.parent {
            bytes(m, 4, &p.0);
        }
        string(m, 5, &s.name);
        uint(
            m,
            6,
            match s.kind {
                Kind::Internal => 1,
                Kind::Client => 3,
            },
        );
        fixed64(m, 7, s.start_ns);
        fixed64(m, 8, s.end_ns);
        for (k, v) in &s.attrs {
            key_value(m, 9, k, v);
        }
        for e in &s.events {
            message(m, 11, |ev| {
                fixed64(ev, 1, e.at_ns);
                string(ev, 2, e.name);
                for (k, v) in &e.attrs {
                    key_value(ev, 3, k, v);
                }
            });
        }
        match &s.status {
            Status::Unset => {}
            Status::Ok => message(m, 15, |st| uint(st, 3, 1)),
            Status::Error(why) => message(m, 15, |st| {
                string(st, 2, why);
                uint(st, 3, 2);
            }),
        }
    });
}

/// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }`: one resource
/// (`attributes` = 1 of `Resource`) and one scope (`name` 1, `version` 2) holding `entries`,
/// spans as `span_entry` wrote them.
pub fn export_request(resource: &[(String, Attr)], entries: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() + 256);
    message(&mut out, 1, |rs| {
        message(rs, 1, |r| {
            for (k, v) in resource {
                key_value(r, 1, k, v);
            }
        });
        message(rs, 2, |ss| {
            message(ss, 1, |scope| {
                string(scope, 1, "infraflow");
                string(scope, 2, env!("CARGO_PKG_VERSION"));
            });
            ss.extend_from_slice(entries);
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_nested_lengths_are_written_as_protobuf_writes_them() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let mut out = Vec::new();
        string(&mut out, 5, "ab");
        assert_eq!(out, [0x2a, 2, b'a', b'b']);
        // A body of 200 bytes: its length takes two bytes, put before it.
        let mut out = Vec::new();
        message(&mut out, 1, |m| m.extend_from_slice(&[7u8; 200]));
        assert_eq!(&out[..3], &[0x0a, 0xc8, 0x01]);
        assert_eq!(out.len(), 203);
    }
}
