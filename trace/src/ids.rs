//! Trace and span ids: random for what happens once, derived for what every execution of one
//! submission must agree on (its trace, its root span, an execution's span).

use std::fmt;

/// 16 bytes, never all zero (W3C).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// 8 bytes, never all zero (W3C).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

/// FNV-1a, 64-bit, from `seed`: stable across processes, hosts and releases (the std hasher is
/// not), which is all a derived id needs; the ids name, they do not protect.
fn fnv(seed: u64, parts: &[&str]) -> u64 {
    let mut h = seed;
    for part in parts {
        for b in part.as_bytes().iter().chain(std::iter::once(&0u8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn non_zero(h: u64) -> u64 {
    if h == 0 { 1 } else { h }
}

/// The trace of submission `creator` (its journal-unique identity): the same in every
/// execution, on every host.
pub fn derived_trace_id(creator: &str) -> TraceId {
    let a = fnv(0xcbf2_9ce4_8422_2325, &["trace", creator]);
    let b = non_zero(fnv(0x6c62_272e_07bb_0142, &["trace", creator]));
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&a.to_be_bytes());
    id[8..].copy_from_slice(&b.to_be_bytes());
    TraceId(id)
}

/// A span every execution of `creator` names alike (`["submission"]`, `["execution", seq]`).
pub fn derived_span_id(creator: &str, what: &[&str]) -> SpanId {
    let mut parts = vec!["span", creator];
    parts.extend_from_slice(what);
    SpanId(non_zero(fnv(0xcbf2_9ce4_8422_2325, &parts)).to_be_bytes())
}

impl SpanId {
    pub fn random() -> SpanId {
        SpanId(non_zero(fastrand::u64(..)).to_be_bytes())
    }
}

impl TraceId {
    /// The id's low 8 bytes as a number: what `traceidratio` sampling compares (W3C's
    /// randomness is in the right-most bytes).
    pub fn low(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
}

fn hex(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        hex(&self.0, f)
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        hex(&self.0, f)
    }
}

pub(crate) fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != N * 2 || !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_submissions_ids_are_the_same_every_time_and_differ_from_anothers() {
        assert_eq!(derived_trace_id("a@1"), derived_trace_id("a@1"));
        assert_ne!(derived_trace_id("a@1"), derived_trace_id("a@2"));
        assert_eq!(derived_span_id("a@1", &["execution", "7"]), derived_span_id("a@1", &["execution", "7"]));
        assert_ne!(derived_span_id("a@1", &["execution", "7"]), derived_span_id("a@1", &["execution", "8"]));
        assert_eq!(derived_trace_id("a@1").to_string().len(), 32);
    }
}
