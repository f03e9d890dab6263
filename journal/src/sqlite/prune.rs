//! Pruning: workflows that finished for good (`completed`, `compensated`) before a horizon move
//! to an archive journal beside the live one, so the live journal stays small over years of use.
//!
//! How, and why so: `infraflow prune --before 30d` moves workflows that finished for good
//! (`completed`, `compensated`; `retry` refuses them) to `<journal>.archive.sqlite3`, itself a
//! journal that `status --db` reads. Copy, then delete, in two idempotent transactions; the delete
//! trigger allows deleting only the events of an archived workflow (migration 3, `schema`).
//! PostgreSQL moves them to `archived_workflows`/`archived_events` in one transaction, under the
//! same trigger rule (`postgres::prune`).

use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use super::schema::{self, archive_path};
use crate::api::Pruned;
use crate::error::{JournalError, Result};
use crate::rules::PRUNE_KEEPS_SQL;

/// Finished-for-good states: `retry` refuses them, so nothing will append to them again.
const PRUNABLE: &str = "('completed', 'compensated')";

impl super::Sqlite {
    /// Moves every workflow that finished for good before `before_ms` to the archive journal. Two transactions, copy then delete, each idempotent: a crash
    /// between them leaves the copy, and the next prune completes the move.
    pub fn prune(&self, before_ms: i64) -> Result<Pruned> {
        let archive = archive_path(self.path());
        // Created (0600) and migrated like any journal, then closed: it is attached below.
        drop(schema::open_writer(&archive)?);
        let conn = Connection::open(self.path())?;
        conn.busy_timeout(super::writer::busy_budget())?;
        conn.execute_batch("PRAGMA foreign_keys=ON")?;
        let archive_str = archive.to_str().ok_or_else(|| JournalError::Create {
            path: archive.clone(),
            source: std::io::Error::other("the archive path is not UTF-8"),
        })?;
        conn.execute("ATTACH DATABASE ?1 AS archive", [archive_str])?;
        let doomed = format!(
            "SELECT id FROM main.workflows w WHERE state IN {PRUNABLE} AND updated_at < ?1 AND NOT {PRUNE_KEEPS_SQL}"
        );
        let (workflows, events) = in_transaction(&conn, |c| {
            let w = c.execute(
                &format!("INSERT OR IGNORE INTO archive.workflows SELECT * FROM main.workflows WHERE id IN ({doomed})"),
                [before_ms],
            )?;
            let e = c.execute(
                &format!(
                    "INSERT OR IGNORE INTO archive.events SELECT * FROM main.events WHERE workflow_id IN ({doomed})"
                ),
                [before_ms],
            )?;
            Ok((w as u64, e as u64))
        })?;
        in_transaction(&conn, |c| {
            // Only what the archive holds is deleted.
            c.execute(
                &format!(
                    "UPDATE main.workflows SET archived = 1 WHERE id IN ({doomed})
                       AND id IN (SELECT id FROM archive.workflows)"
                ),
                params![before_ms],
            )?;
            // The ids stay known here: `submit` refuses them (a workflow id is never used twice).
            c.execute("INSERT OR IGNORE INTO main.pruned (id) SELECT id FROM main.workflows WHERE archived = 1", [])?;
            c.execute(
                "DELETE FROM main.events WHERE workflow_id IN (SELECT id FROM main.workflows WHERE archived = 1)",
                [],
            )?;
            c.execute("DELETE FROM main.workflows WHERE archived = 1", [])?;
            Ok(())
        })?;
        conn.execute("DETACH DATABASE archive", [])?;
        Ok(Pruned { workflows, events, archive: archive.display().to_string() })
    }
}

/// Runs `f` in a write transaction, waiting (bounded) while another connection holds the lock.
fn in_transaction<R>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
    let start = Instant::now();
    loop {
        match conn.execute_batch("BEGIN IMMEDIATE") {
            Err(e) if super::writer::is_busy(&e) && start.elapsed() < super::writer::busy_budget() => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
            Ok(()) => break,
        }
    }
    match f(conn) {
        Ok(r) => {
            conn.execute_batch("COMMIT")?;
            Ok(r)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
