//! Where the journal lives by default, and making its folder private.

use std::path::{Path, PathBuf};

use crate::failure::Failure;

/// `--db`, else `$XDG_STATE_HOME/infraflow/journal.sqlite3`, else `~/.local/state/infraflow/...`.
pub fn journal_path(flag: Option<PathBuf>) -> Result<PathBuf, Failure> {
    if let Some(p) = flag {
        return Ok(p);
    }
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

/// Creates the journal's folder (mode 0700 when new) before a writer opens it.
pub fn prepare_dir(journal: &Path) -> Result<(), Failure> {
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
