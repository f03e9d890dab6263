//! Where the journal lives (by default, and making its folder private), and a PostgreSQL
//! journal's password from where libpq would find it.

use std::path::PathBuf;

use infraflow_journal::{Location, PgTarget};

use crate::failure::Failure;

/// `--db` (a path or a `postgres://` URL), else the default SQLite file.
pub fn journal_location(flag: Option<String>) -> Result<Location, Failure> {
    match flag {
        Some(s) if s.starts_with("postgres://") || s.starts_with("postgresql://") => {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let url = with_libpq_tls_defaults(&s, |k| std::env::var(k).ok(), home.as_deref());
            Ok(Location::parse(&url, pg_password)?)
        }
        Some(s) if !s.is_empty() => Ok(Location::parse(&s, pg_password)?),
        _ => Ok(Location::Sqlite(journal_path()?)),
    }
}

/// The URL with the TLS settings libpq would take from elsewhere when the URL has none:
/// `PGSSLMODE`, `PGSSLROOTCERT`, else `~/.postgresql/root.crt` when that file exists (libpq then
/// verifies the server against it, in every mode that uses TLS).
fn with_libpq_tls_defaults(url: &str, env: impl Fn(&str) -> Option<String>, home: Option<&std::path::Path>) -> String {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or_default();
    let has = |k: &str| query.split('&').any(|p| p.split_once('=').is_some_and(|(pk, _)| pk == k));
    let mut extra = Vec::new();
    if !has("sslmode")
        && let Some(m) = env("PGSSLMODE").filter(|m| !m.is_empty())
    {
        extra.push(format!("sslmode={m}"));
    }
    if !has("sslrootcert") {
        let default = home.map(|h| h.join(".postgresql/root.crt")).filter(|p| p.is_file());
        let root = env("PGSSLROOTCERT").filter(|r| !r.is_empty()).or(default.map(|p| p.display().to_string()));
        if let Some(r) = root {
            let encoded: String = r
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            extra.push(format!("sslrootcert={encoded}"));
        }
    }
    match (extra.is_empty(), url.contains('?')) {
        (true, _) => url.to_string(),
        (false, true) => format!("{url}&{}", extra.join("&")),
        (false, false) => format!("{url}?{}", extra.join("&")),
    }
}

/// When the URL has none: `PGPASSWORD`, else the matching line of `PGPASSFILE` or `~/.pgpass`.
fn pg_password(target: &PgTarget) -> Option<String> {
    if let Some(p) = std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()) {
        return Some(p);
    }
    let file = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pgpass")))?;
    target.password_from_pgpass(&std::fs::read_to_string(file).ok()?)
}

/// `$XDG_STATE_HOME/infraflow/journal.sqlite3`, else `~/.local/state/infraflow/...`.
fn journal_path() -> Result<PathBuf, Failure> {
    let state = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).ok_or_else(|| {
                Failure::usage("neither --db, INFRAFLOW_DB, XDG_STATE_HOME nor HOME is set; pass --db PATH")
            })?;
            PathBuf::from(home).join(".local/state")
        }
    };
    Ok(state.join("infraflow").join("journal.sqlite3"))
}

/// Creates a SQLite journal's folder (mode 0700 when new) before a writer opens it.
pub fn prepare_dir(journal: &Location) -> Result<(), Failure> {
    let Location::Sqlite(journal) = journal else { return Ok(()) };
    let Some(dir) = journal.parent().filter(|d| !d.as_os_str().is_empty()) else { return Ok(()) };
    if dir.exists() {
        return Ok(());
    }
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Failure::other(format!("cannot create {}: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgsslmode_and_pgsslrootcert_apply_when_the_url_has_none() {
        let env = |k: &str| match k {
            "PGSSLMODE" => Some("verify-full".to_string()),
            "PGSSLROOTCERT" => Some("/etc/ca dir/ca.pem".to_string()),
            _ => None,
        };
        assert_eq!(
            with_libpq_tls_defaults("postgres://u@h/d", env, None),
            "postgres://u@h/d?sslmode=verify-full&sslrootcert=/etc/ca%20dir/ca.pem"
        );
        let given = "postgres://u@h/d?sslmode=disable&sslrootcert=/x.pem";
        assert_eq!(with_libpq_tls_defaults(given, env, None), given, "the URL's own settings win, as in libpq");
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".postgresql")).unwrap();
        std::fs::write(home.path().join(".postgresql/root.crt"), "x").unwrap();
        let defaulted = with_libpq_tls_defaults("postgres://u@h/d?sslmode=verify-ca", |_| None, Some(home.path()));
        assert!(defaulted.ends_with("/.postgresql/root.crt"), "libpq's default CA file: {defaulted}");
        assert_eq!(with_libpq_tls_defaults("postgres://u@h/d", |_| None, None), "postgres://u@h/d");
    }
}
