//! Workflow ids: short, unique enough, sortable by time, and safe in shell and file names.

/// Checks a user-chosen id.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 64 {
        return Err("invalid --id: must be 1 to 64 characters".into());
    }
    if !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(format!("invalid --id {id:?}: use letters, digits, '-', '_' and '.'"));
    }
    Ok(())
}

/// A fresh id: `<workflow>-<base36 millis>-<4 random base36 digits>`.
pub fn new_id(workflow: &str, now_ms: i64) -> String {
    format!("{workflow}-{}-{}", base36(now_ms.max(0) as u64), base36(fastrand::u64(36u64.pow(3)..36u64.pow(4))))
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_pass_the_id_check() {
        let id = new_id("provision-infra", 1_790_000_000_000);
        assert!(check_id(&id).is_ok(), "{id}");
        assert!(check_id("has space").is_err());
        assert!(check_id("").is_err());
    }
}
