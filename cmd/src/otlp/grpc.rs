//! OTLP/gRPC on the wire: the request message framed as gRPC frames it, and the call's outcome
//! read from `grpc-status` (in the trailers, or the headers of a trailers-only answer).

use crate::http_client::Answer;

/// `message` as one uncompressed gRPC message: a zero flag, its length (big-endian), itself.
pub(super) fn frame(message: Vec<u8>) -> Vec<u8> {
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    framed
}

/// Ok when the collector took the export; else why not, for the exporter's debug log.
pub(super) fn outcome(answer: &Answer) -> Result<(), String> {
    if answer.status != 200 {
        return Err(format!("HTTP status {} (not a gRPC server?)", answer.status));
    }
    let field = |name: &str| answer.fields.get(name).and_then(|v| v.to_str().ok());
    match field("grpc-status") {
        Some("0") => Ok(()),
        Some(code) => {
            let message = field("grpc-message").unwrap_or_default();
            let message = percent_encoding::percent_decode_str(message).decode_utf8_lossy();
            Err(format!("grpc-status {code} ({}): {message}", code_name(code)))
        }
        None => Err("no grpc-status in the answer".into()),
    }
}

/// gRPC's name of a status code.
fn code_name(code: &str) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    code.parse::<usize>().ok().and_then(|i| NAMES.get(i)).copied().unwrap_or("unknown code")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_framed_behind_a_zero_flag_and_its_big_endian_length() {
        assert_eq!(frame(vec![7; 300])[..5], [0, 0, 0, 1, 44]);
        assert_eq!(frame(vec![7; 300]).len(), 305);
    }

    #[test]
    fn an_export_is_taken_only_on_grpc_status_zero() {
        let answer = |status, fields: &[(&'static str, &'static str)]| Answer {
            status,
            body: Default::default(),
            fields: fields.iter().map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap())).collect(),
        };
        assert!(outcome(&answer(200, &[("grpc-status", "0")])).is_ok());
        let refused = outcome(&answer(200, &[("grpc-status", "16"), ("grpc-message", "bad%20key")])).unwrap_err();
        assert_eq!(refused, "grpc-status 16 (UNAUTHENTICATED): bad key");
        assert!(outcome(&answer(200, &[])).unwrap_err().contains("no grpc-status"));
        assert!(outcome(&answer(404, &[("grpc-status", "0")])).unwrap_err().contains("404"));
    }
}
