//! What is never shown of a journaled input: the external id of a role (`externalID`). It is the
//! one value a role's trust policy checks besides the daemon's principal, and a submitter who
//! reads another team's off the page, `status` or `history` could name that team's role with it
//! (review F10). It stays in the journal, where the daemon needs it.

use serde_json::Value;

/// The key whose value is hidden, wherever in a value it appears.
const SECRET_KEYS: &[&str] = &["externalID"];
pub const REDACTED: &str = "(redacted)";

/// `v` with every `externalID` value replaced by `(redacted)`.
pub fn redacted(v: &Value) -> Value {
    let mut v = v.clone();
    redact(&mut v);
    v
}

fn redact(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if SECRET_KEYS.contains(&k.as_str()) && !x.is_null() {
                    *x = Value::String(REDACTED.into());
                } else {
                    redact(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_external_id_is_hidden_at_any_depth_and_nothing_else_is() {
        let v = serde_json::json!({"roleARN": "arn:aws:iam::1:role/r", "externalID": "team-a-7f3c",
                                   "event": {"input": {"externalID": "x", "infraID": "c1"}}});
        let r = redacted(&v);
        assert!(!r.to_string().contains("team-a-7f3c") && !r.to_string().contains("\"x\""), "{r}");
        assert_eq!(r["roleARN"], "arn:aws:iam::1:role/r");
        assert_eq!(r["event"]["input"]["infraID"], "c1");
    }
}
