//! Workflow ids: unique, sortable by time (UUIDv7, from the engine's clock), and safe in shell
//! and file names.
//!
//! Why this shape: a generated id is `<workflow>-<UUIDv7>` (`new_id`), from the engine's clock:
//! unique and time-sortable.

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

/// A fresh id: `<workflow>-<UUIDv7>`, time-ordered by `now_ms`.
pub fn new_id(workflow: &str, now_ms: i64) -> String {
    let ms = now_ms.max(0) as u64;
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, ms / 1000, ((ms % 1000) * 1_000_000) as u32);
    format!("{workflow}-{}", uuid::Uuid::new_v7(ts))
}

/// The creator identity of one submission (`Event::Submitted::creator`): the id, for people
/// reading tags, and a UUIDv7, so that no two submissions ever share one, even with the same id.
/// At most 101 characters of `[A-Za-z0-9-_.@]`, all allowed in AWS tag values.
pub fn new_creator(id: &str, now_ms: i64) -> String {
    let ms = now_ms.max(0) as u64;
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, ms / 1000, ((ms % 1000) * 1_000_000) as u32);
    format!("{id}@{}", uuid::Uuid::new_v7(ts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_pass_the_id_check() {
        let id = new_id("provision-infra", 1_790_000_000_000);
        assert!(check_id(&id).is_ok(), "{id}");
        assert!(check_id("has space").is_err());
        let (a, b) = (new_creator("x", 1_790_000_000_000), new_creator("x", 1_790_000_000_000));
        assert_ne!(a, b, "a reused id is another creator");
        assert!(a.starts_with("x@") && a.len() <= 101, "{a}");
        assert!(check_id("").is_err());
    }

    #[test]
    fn new_ids_sort_by_time_and_never_repeat() {
        let a = new_id("canary", 1_790_000_000_000);
        let b = new_id("canary", 1_790_000_000_001);
        let c = new_id("canary", 1_790_000_000_001);
        assert!(a < b && b != c, "{a} {b} {c}");
    }
}
