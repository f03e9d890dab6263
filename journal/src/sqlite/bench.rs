//! The raw ceiling for benchmarks: single-row INSERT transactions in the journal's own durability
//! mode (WAL, synchronous=FULL), so engine figures can be read as a fraction of what SQLite allows.

use std::path::Path;
use std::time::Instant;

use rusqlite::{Connection, params};

use crate::error::Result;

/// Commits `n` single-row INSERT transactions into a scratch database at `path` and returns the
/// rate in transactions per second. The file is removed afterwards.
pub fn raw_insert_ceiling(path: &Path, n: u32) -> Result<f64> {
    let rate = {
        let conn = Connection::open(path)?;
        conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
        conn.execute_batch(
            "PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, data TEXT NOT NULL) STRICT;",
        )?;
        let start = Instant::now();
        for i in 0..n {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            conn.prepare_cached("INSERT INTO t (at, data) VALUES (?1, ?2)")?
                .execute(params![i, "{\"type\":\"step_completed\"}"])?;
            conn.execute_batch("COMMIT")?;
        }
        f64::from(n) / start.elapsed().as_secs_f64()
    };
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
    Ok(rate)
}
