//! Opening a journal file: checks that it is ours, connection settings, numbered migrations.
//!
//! Why these settings: `synchronous=FULL` (a recorded step survives power loss, not just a process
//! crash), WAL, STRICT tables, numbered migrations, `application_id` to recognise our files.
//! `quick_check` reads the whole file, so it runs at daemon start only (`Sqlite::verify`), not per open.
//!
//! Why events are stored in the order they are written (a rowid table; the primary key
//! `(workflow_id, seq)` is an index beside it, since migration 4): stored by that key instead, a
//! batch of appends from 50 workflows touched 50 leaf pages, and WAL mode writes every touched page
//! whole at each commit — 65 pages for a batch of 50 workflows' appends against 24 now (a test in
//! `append` holds it under 40), the biggest cost of concurrent steps (BENCHMARKS.md). The migration
//! copies every event once, in one transaction at the first open by this version.

use std::io::Read;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use crate::error::{JournalError, Result};

/// `PRAGMA application_id` of an infraflow journal ("IFLW").
pub const APPLICATION_ID: i64 = 0x4946_4c57;

/// Numbered migrations; `PRAGMA user_version` records how many have been applied.
const MIGRATIONS: &[&str] = &[
    // 1: the event log and the summary projection.
    r#"
    CREATE TABLE workflows (
        id               TEXT PRIMARY KEY,
        workflow         TEXT NOT NULL,
        input            TEXT NOT NULL,
        cluster          TEXT NOT NULL,
        no_rollback      INTEGER NOT NULL,
        created_at       INTEGER NOT NULL,
        updated_at       INTEGER NOT NULL,
        seq              INTEGER NOT NULL,
        state            TEXT NOT NULL,
        current_step     TEXT,
        attempts         INTEGER NOT NULL,
        error            TEXT,
        output           TEXT,
        cancel_requested INTEGER NOT NULL,
        lease_owner      TEXT,
        lease_expires_at INTEGER
    ) STRICT;
    CREATE INDEX workflows_by_cluster ON workflows(cluster, state);
    CREATE INDEX workflows_by_state ON workflows(state);
    CREATE TABLE events (
        workflow_id TEXT NOT NULL REFERENCES workflows(id),
        seq         INTEGER NOT NULL,
        at          INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        step        TEXT,
        data        TEXT NOT NULL,
        PRIMARY KEY (workflow_id, seq)
    ) STRICT, WITHOUT ROWID;
    CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'journal events are append-only'); END;
    CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'journal events are append-only'); END;
    "#,
    // 2: the cluster queue's ticket (taken at submit, taken again when a finished workflow is
    // retried) and the saga phase, which a pause must not forget.
    r#"
    ALTER TABLE workflows ADD COLUMN ticket INTEGER NOT NULL DEFAULT 0;
    UPDATE workflows SET ticket = rowid;
    ALTER TABLE workflows ADD COLUMN compensating INTEGER NOT NULL DEFAULT 0;
    UPDATE workflows SET compensating = EXISTS (
        SELECT 1 FROM events e WHERE e.workflow_id = workflows.id AND e.kind = 'compensation_started');
    CREATE INDEX workflows_by_cluster_ticket ON workflows(cluster, ticket);
    "#,
    // 3: pruning. Events stay append-only, except those of a workflow that finished for good
    // and whose copy is in the archive (`archived`, set in prune's deleting transaction).
    r#"
    ALTER TABLE workflows ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;
    DROP TRIGGER events_are_append_only_delete;
    CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
        WHEN NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = OLD.workflow_id AND w.archived = 1
                           AND w.state IN ('completed', 'compensated'))
        BEGIN SELECT RAISE(ABORT, 'journal events are append-only'); END;
    "#,
    // 4: events in the order they were written. Keyed by (workflow, seq) alone, a batch of
    // appends from many workflows landed on as many leaf pages, each written whole to the WAL at
    // every commit (65 pages for 50 appends; in write order 24: BENCHMARKS.md). The rowid
    // keeps the rows in write order; the primary key's index still finds a workflow's events.
    r#"
    CREATE TABLE events_v4 (
        workflow_id TEXT NOT NULL REFERENCES workflows(id),
        seq         INTEGER NOT NULL,
        at          INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        step        TEXT,
        data        TEXT NOT NULL,
        PRIMARY KEY (workflow_id, seq)
    ) STRICT;
    INSERT INTO events_v4 SELECT * FROM events ORDER BY at, workflow_id, seq;
    DROP TABLE events;
    ALTER TABLE events_v4 RENAME TO events;
    CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'journal events are append-only'); END;
    CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
        WHEN NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = OLD.workflow_id AND w.archived = 1
                           AND w.state IN ('completed', 'compensated'))
        BEGIN SELECT RAISE(ABORT, 'journal events are append-only'); END;
    "#,
    // 5: the ids of pruned workflows, which `submit` refuses: a workflow id is never used twice
    // in one journal (its archive would drop the second one's history, and a reused id must not
    // look like its namesake). Filled from an existing archive at this migration (`backfill`).
    // Submitted events carry a creator from this version on, which older binaries would ignore.
    r#"
    CREATE TABLE pruned (id TEXT PRIMARY KEY) STRICT;
    "#,
    // 6: the epoch of the acquisition holding the lease (the sequence number of its
    // `LeaseTaken`), which fences appends together with the owner. A lease held at the upgrade
    // has none and is taken anew by whoever runs the workflow next.
    r#"
    ALTER TABLE workflows ADD COLUMN lease_epoch INTEGER;
    "#,
    // 7: `waiting` and `holding` events (what an execution waits for before it acts, and what
    // it then holds), which older binaries cannot decode: the version moves so that they refuse the journal rather than misread it.
    r#"
    -- no table changes
    "#,
];

/// The migration after which pruned ids are recorded in `pruned`.
const PRUNED_IDS: usize = 5;

/// `journal.sqlite3` -> `journal.archive.sqlite3`: itself a journal, readable by `status --db`.
pub fn archive_path(journal: &Path) -> PathBuf {
    let stem = journal.file_stem().and_then(|s| s.to_str()).unwrap_or("journal");
    let ext = journal.extension().and_then(|s| s.to_str()).unwrap_or("sqlite3");
    journal.with_file_name(format!("{stem}.archive.{ext}"))
}

/// The ids an older version pruned to the archive beside `path`, recorded as pruned.
fn backfill_pruned(conn: &Connection, path: &Path) -> Result<()> {
    let archive = archive_path(path);
    if !archive.exists() {
        return Ok(());
    }
    let old = open_reader(&archive)?;
    let ids: Vec<String> =
        old.prepare("SELECT id FROM workflows")?.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    let mut ins = conn.prepare("INSERT OR IGNORE INTO pruned (id) VALUES (?1)")?;
    for id in ids {
        ins.execute([id])?;
    }
    Ok(())
}

pub fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// Checks the first bytes of an existing file: SQLite's header, or empty.
fn check_header(path: &Path) -> Result<()> {
    let mut f = std::fs::File::open(path)
        .map_err(|e| JournalError::NotAJournal { path: path.to_path_buf(), reason: format!("cannot read it: {e}") })?;
    let mut header = [0u8; 16];
    let n = f.read(&mut header).unwrap_or(0);
    if n == 0 {
        return Ok(());
    }
    if n < 16 || &header != b"SQLite format 3\0" {
        return Err(JournalError::NotAJournal { path: path.to_path_buf(), reason: "not a SQLite database".into() });
    }
    Ok(())
}

/// Creates the file with mode 0600 if absent, so no other user ever reads the journal.
fn create_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(JournalError::Create { path: path.to_path_buf(), source: e }),
    }
}

fn classify(path: &Path, e: rusqlite::Error) -> JournalError {
    match &e {
        rusqlite::Error::SqliteFailure(f, msg) => match f.code {
            rusqlite::ErrorCode::NotADatabase => {
                JournalError::NotAJournal { path: path.to_path_buf(), reason: "not a SQLite database".into() }
            }
            rusqlite::ErrorCode::DatabaseCorrupt => JournalError::Corrupt {
                path: path.to_path_buf(),
                detail: msg.clone().unwrap_or_else(|| "database disk image is malformed".into()),
            },
            _ => e.into(),
        },
        _ => e.into(),
    }
}

/// Opens a connection for writing, creating and migrating the journal as needed.
pub fn open_writer(path: &Path) -> Result<Connection> {
    create_private(path)?;
    check_header(path)?;
    let conn = Connection::open(path).map_err(|e| classify(path, e))?;
    configure(&conn, path)?;
    migrate(&conn, path)?;
    // From here the writer waits for the lock itself (`writer::exec_waiting`, saying so in the
    // log); opening and migrating wait the whole budget in SQLite's busy handler, so a submit
    // beside a daemon whose fsyncs crawl (a loaded machine) waits rather than fails.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

/// Opens a connection that never writes (status, history).
pub fn open_reader(path: &Path) -> Result<Connection> {
    if !path.exists() {
        return Err(JournalError::Missing { path: path.to_path_buf() });
    }
    check_header(path)?;
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(|e| classify(path, e))?;
    conn.busy_timeout(super::writer::busy_budget())?;
    check_identity(&conn, path)?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| classify(path, e))?;
    if version == 0 {
        return Err(JournalError::Missing { path: path.to_path_buf() });
    }
    if version > latest_version() {
        return Err(JournalError::TooNew { path: path.to_path_buf(), found: version, supported: latest_version() });
    }
    Ok(conn)
}

fn configure(conn: &Connection, path: &Path) -> Result<()> {
    conn.busy_timeout(super::writer::busy_budget())?;
    // A new file's switch to WAL takes the exclusive lock: another process creating the journal
    // at the same moment makes SQLite answer one of them busy at once.
    let mode: String = super::writer::retry_while_busy("PRAGMA journal_mode=WAL", || {
        conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
    })
    .map_err(|e| classify(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(JournalError::NotAJournal {
            path: path.to_path_buf(),
            reason: format!("cannot switch it to WAL mode (it stays in {mode} mode)"),
        });
    }
    // FULL: a recorded step survives power loss, not just a process crash.
    conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;").map_err(|e| classify(path, e))?;
    Ok(())
}

fn check_identity(conn: &Connection, path: &Path) -> Result<()> {
    let app: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0)).map_err(|e| classify(path, e))?;
    if app == APPLICATION_ID {
        return Ok(());
    }
    let tables: i64 =
        conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0)).map_err(|e| classify(path, e))?;
    if app == 0 && tables == 0 {
        return Ok(());
    }
    Err(JournalError::NotAJournal { path: path.to_path_buf(), reason: "a SQLite database of another program".into() })
}

fn migrate(conn: &Connection, path: &Path) -> Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| classify(path, e))?;
    let result = (|| -> Result<()> {
        check_identity(conn, path)?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > latest_version() {
            return Err(JournalError::TooNew { path: path.to_path_buf(), found: version, supported: latest_version() });
        }
        if version == 0 {
            conn.execute_batch(&format!("PRAGMA application_id={APPLICATION_ID}"))?;
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            conn.execute_batch(sql)?;
            if i + 1 == PRUNED_IDS {
                backfill_pruned(conn, path)?;
            }
            conn.execute_batch(&format!("PRAGMA user_version={}", i + 1))?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT").map_err(|e| classify(path, e)),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// Reads every page once: catches a damaged file at open instead of half-way through a run.
pub fn quick_check(conn: &Connection, path: &Path) -> Result<()> {
    let verdict: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0)).map_err(|e| classify(path, e))?;
    if verdict != "ok" {
        return Err(JournalError::Corrupt { path: path.to_path_buf(), detail: verdict });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal written by a binary of schema version 3 (events keyed by workflow alone).
    fn journal_of_version_3(path: &Path) {
        let c = Connection::open(path).unwrap();
        c.execute_batch(&format!("PRAGMA journal_mode=WAL; PRAGMA application_id={APPLICATION_ID};")).unwrap();
        for sql in &MIGRATIONS[..3] {
            c.execute_batch(sql).unwrap();
        }
        c.execute_batch(
            "PRAGMA user_version=3;
             INSERT INTO workflows (id, workflow, input, cluster, no_rollback, created_at, updated_at, seq, state,
                 attempts, cancel_requested) VALUES ('w1', 'canary', '{}', '', 0, 1, 3, 2, 'running', 0, 0);
             INSERT INTO workflows (id, workflow, input, cluster, no_rollback, created_at, updated_at, seq, state,
                 attempts, cancel_requested) VALUES ('w2', 'canary', '{}', '', 0, 1, 2, 1, 'completed', 0, 0);
             INSERT INTO events VALUES ('w1', 1, 1, 'submitted', NULL, '{\"type\":\"submitted\"}');
             INSERT INTO events VALUES ('w2', 1, 2, 'submitted', NULL, '{\"type\":\"submitted\"}');
             INSERT INTO events VALUES ('w1', 2, 3, 'lease_taken', NULL, '{\"type\":\"lease_taken\"}');",
        )
        .unwrap();
    }

    #[test]
    fn a_version_3_journal_keeps_every_event_in_write_order_and_stays_append_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.sqlite3");
        journal_of_version_3(&path);
        let c = open_writer(&path).unwrap();
        let version: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, latest_version());
        let rows: Vec<(String, i64)> = c
            .prepare("SELECT workflow_id, seq FROM events ORDER BY rowid")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(rows, [("w1".to_string(), 1), ("w2".to_string(), 1), ("w1".to_string(), 2)]);
        let sql: String = c.query_row("SELECT sql FROM sqlite_schema WHERE name = 'events'", [], |r| r.get(0)).unwrap();
        assert!(!sql.contains("WITHOUT ROWID"), "events are still stored by key: {sql}");
        // The primary key still refuses a second record at the same position.
        let dup = c.execute("INSERT INTO events VALUES ('w1', 2, 4, 'x', NULL, '{}')", []);
        assert!(dup.is_err(), "a duplicate (workflow, seq) was accepted");
        let upd = c.execute("UPDATE events SET data = '{}' WHERE workflow_id = 'w1'", []).unwrap_err();
        assert!(upd.to_string().contains("append-only"), "{upd}");
        let del = c.execute("DELETE FROM events WHERE workflow_id = 'w1'", []).unwrap_err();
        assert!(del.to_string().contains("append-only"), "{del}");
        // ... except those of an archived, finished workflow (prune's second transaction).
        c.execute("UPDATE workflows SET archived = 1 WHERE id = 'w2'", []).unwrap();
        assert_eq!(c.execute("DELETE FROM events WHERE workflow_id = 'w2'", []).unwrap(), 1);
    }
}
