//! Where the journal lives (by default, and making its folder private), and a PostgreSQL
//! journal's password from where libpq would find it.

use std::path::PathBuf;

use infraflow_journal::{Location, PgTarget};

use crate::failure::Failure;

/// `--db` (a path or a `postgres://` URL), else the default SQLite file.
pub fn journal_location(flag: Option<String>) -> Result<Location, Failure> {
    match flag {
        Some(s) if !s.is_empty() => Ok(Location::parse(&s, pg_password)?),
        _ => Ok(Location::Sqlite(journal_path()?)),
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
