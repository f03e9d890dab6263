//! IAM's evaluation of an allow-only policy document, as far as infraflow's policies need it:
//! action and resource wildcards, `StringEquals` and `StringLike` on request and resource tags.

use serde_json::Value;

use super::{Authz, Resource};

/// IAM's wildcard match (`*` any run, `?` one character), case-sensitive as for ARNs.
fn glob(pattern: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The value of condition key `key` for `a` on `resource` (None: absent from the context).
fn key_value(a: &Authz, resource: Option<&Resource>, key: &str) -> Option<String> {
    let tag = ["ec2:ResourceTag/", "aws:ResourceTag/", "iam:ResourceTag/"].iter().find_map(|p| key.strip_prefix(p));
    match tag {
        Some(k) => resource?.tags.as_ref()?.iter().find(|(tk, _)| tk == k).map(|(_, v)| v.clone()),
        None => a.context.get(key).cloned(),
    }
}

fn conditions_hold(cond: &Value, a: &Authz, resource: Option<&Resource>) -> bool {
    let Some(ops) = cond.as_object() else { return true };
    ops.iter().all(|(op, keys)| {
        keys.as_object().unwrap().iter().all(|(key, want)| {
            let have = key_value(a, resource, key);
            match op.as_str() {
                "StringEquals" => have.is_some_and(|h| strings(want).contains(&h.as_str())),
                "StringLike" => have.is_some_and(|h| strings(want).iter().any(|w| glob(w, &h))),
                other => panic!("the evaluator does not know condition operator {other}"),
            }
        })
    })
}

fn statement_allows(s: &Value, a: &Authz, resource: Option<&Resource>) -> bool {
    s["Effect"] == "Allow"
        && strings(&s["Action"]).iter().any(|p| glob(&p.to_ascii_lowercase(), &a.action.to_ascii_lowercase()))
        && strings(&s["Resource"]).iter().any(|p| glob(p, resource.map_or("*", |r| r.arn.as_str())) || *p == "*")
        && conditions_hold(&s["Condition"], a, resource)
}

/// Whether `doc` allows `a`: every resource it names by some statement (IAM authorizes each), or,
/// naming none, the action on `*`. Ok(n): allowed, but for `n` resources that no longer existed
/// when the call was made (a retried delete of what an earlier attempt removed: AWS answers it
/// NotFound or UnauthorizedOperation, both "gone" to infraflow). Err names what was refused.
pub fn verdict(doc: &Value, a: &Authz) -> Result<usize, String> {
    let statements = doc["Statement"].as_array().unwrap();
    if a.resources.is_empty() {
        return if statements.iter().any(|s| statement_allows(s, a, None)) {
            Ok(0)
        } else {
            Err(format!("{} (no resource named; context {:?})", a.action, a.context))
        };
    }
    let mut gone = 0;
    for r in &a.resources {
        if statements.iter().any(|s| statement_allows(s, a, Some(r))) {
            continue;
        }
        if r.tags.is_none() && !r.new {
            gone += 1;
        } else {
            return Err(format!("{} on {} (tags {:?}; context {:?})", a.action, r.arn, r.tags, a.context));
        }
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_like_iam() {
        assert!(glob("arn:aws:ec2:*:*:subnet/*", "arn:aws:ec2:us-east-1:123456789012:subnet/*"));
        assert!(!glob("arn:aws:ec2:*:*:subnet/*", "arn:aws:ec2:us-east-1:123456789012:vpc/vpc-1"));
        assert!(glob("arn:aws:iam::*:role/abc-*", "arn:aws:iam::123456789012:role/abc-worker"));
        assert!(!glob("arn:aws:iam::*:role/abc-*", "arn:aws:iam::123456789012:role/abd-worker"));
    }
}
