//! The PostgreSQL journal's tables, in their own schema (`infraflow`) of any database: numbered
//! migrations applied under an advisory lock, so daemons starting together migrate once.

use tokio_postgres::Client;

use crate::error::{JournalError, Result};

/// Every connection uses the journal's schema, whatever else the database holds.
pub(crate) const SEARCH_PATH: &str = "infraflow";

/// Numbered migrations; `infraflow.meta.version` records how many have been applied.
const MIGRATIONS: &[&str] = &[
    // 1: the event log, the summary projection, the cluster queue's tickets, the archive.
    r#"
    CREATE SEQUENCE tickets;
    CREATE SEQUENCE arrivals;
    CREATE TABLE workflows (
        id               TEXT PRIMARY KEY,
        workflow         TEXT NOT NULL,
        input            TEXT NOT NULL,
        cluster          TEXT NOT NULL,
        no_rollback      BOOLEAN NOT NULL,
        created_at       BIGINT NOT NULL,
        updated_at       BIGINT NOT NULL,
        seq              BIGINT NOT NULL,
        state            TEXT NOT NULL,
        current_step     TEXT,
        attempts         INTEGER NOT NULL,
        error            TEXT,
        output           TEXT,
        cancel_requested BOOLEAN NOT NULL,
        lease_owner      TEXT,
        lease_expires_at BIGINT,
        ticket           BIGINT NOT NULL,
        compensating     BOOLEAN NOT NULL DEFAULT false,
        archived         BOOLEAN NOT NULL DEFAULT false,
        arrival          BIGINT NOT NULL DEFAULT nextval('arrivals')
    );
    CREATE INDEX workflows_by_cluster_ticket ON workflows (cluster, ticket);
    CREATE INDEX workflows_by_state ON workflows (state);
    CREATE INDEX workflows_by_arrival ON workflows (arrival);
    CREATE TABLE events (
        workflow_id TEXT NOT NULL REFERENCES workflows (id),
        seq         BIGINT NOT NULL,
        at          BIGINT NOT NULL,
        kind        TEXT NOT NULL,
        step        TEXT,
        data        TEXT NOT NULL,
        PRIMARY KEY (workflow_id, seq)
    );
    -- Events are append-only, except those of a workflow that finished for good and that a prune
    -- copied to the archive in the same transaction.
    CREATE FUNCTION events_are_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM infraflow.workflows w WHERE w.id = OLD.workflow_id
                AND w.archived AND w.state IN ('completed', 'compensated')) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'journal events are append-only';
    END $$;
    CREATE TRIGGER events_are_append_only BEFORE UPDATE OR DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION events_are_append_only();
    -- Leases are kept by the database's clock, the one clock every host shares.
    CREATE FUNCTION now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS
        $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$;
    CREATE TABLE archived_workflows (LIKE workflows INCLUDING CONSTRAINTS INCLUDING INDEXES);
    CREATE TABLE archived_events (LIKE events INCLUDING CONSTRAINTS INCLUDING INDEXES);
    "#,
    // 2: the guard of the writer's one-round-trip appends (`append::GUARDED_UPDATE_SQL`).
    r#"
    CREATE FUNCTION summaries_unchanged(wanted BIGINT, changed BIGINT) RETURNS BIGINT LANGUAGE plpgsql AS $$
    BEGIN
        IF changed <> wanted THEN
            RAISE EXCEPTION 'a workflow summary changed since the writer last wrote it' USING ERRCODE = 'IF001';
        END IF;
        RETURN changed;
    END $$;
    "#,
    // 3: room on each page for the summary row's next version, so the update every step makes
    // stays on its page without new index entries (a HOT update) when no indexed column changes.
    r#"
    ALTER TABLE workflows SET (fillfactor = 50);
    "#,
    // 4: no table changes: submitted events carry a creator from this version on (which an older
    // binary would ignore and act as the workflow id), and `submit` refuses the ids of
    // `archived_workflows`. The version moves so that older binaries refuse the journal.
    r#"
    COMMENT ON TABLE archived_workflows IS 'pruned workflows; their ids are never submitted again';
    "#,
    // 5: the epoch of the acquisition holding the lease (the sequence number of its
    // `LeaseTaken`), which fences appends together with the owner: an append an earlier
    // acquisition by the same daemon left in its writer is refused (finding 10 of the safety
    // review). A lease held at the upgrade has none and is taken anew. The archive keeps the
    // same columns (prune copies rows whole).
    r#"
    ALTER TABLE workflows ADD COLUMN lease_epoch BIGINT;
    ALTER TABLE archived_workflows ADD COLUMN lease_epoch BIGINT;
    "#,
    // 6: `waiting` and `holding` events (what an execution waits for before it acts, and what
    // it then holds), which older binaries cannot decode: the version moves so that they refuse the journal rather than misread it.
    r#"
    COMMENT ON TABLE events IS 'append-only; kinds include waiting and holding (from schema 6)';
    "#,
];

pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// A constant key for the advisory lock that serializes migrations ("IFLW" as in SQLite's
/// application id).
const MIGRATION_LOCK: i64 = 0x4946_4c57;

/// The schema version the database holds, if the journal's schema exists.
pub(crate) async fn version(c: &Client) -> Result<Option<i64>> {
    let exists: bool = c
        .query_one("SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = 'infraflow' AND tablename = 'meta')", &[])
        .await?
        .get(0);
    if !exists {
        return Ok(None);
    }
    Ok(Some(c.query_one("SELECT version FROM infraflow.meta", &[]).await?.get(0)))
}

/// Creates or migrates the journal's schema; refuses one newer than this binary.
pub(crate) async fn migrate(c: &mut Client, shown: &str) -> Result<()> {
    // The common case, without taking the lock every daemon and command would queue on.
    if let Some(v) = version(c).await?
        && v >= latest_version()
    {
        return too_new(v, shown);
    }
    let tx = c.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS infraflow;
         CREATE TABLE IF NOT EXISTS infraflow.meta (version BIGINT NOT NULL);
         INSERT INTO infraflow.meta (version) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM infraflow.meta);",
    )
    .await?;
    let found: i64 = tx.query_one("SELECT version FROM infraflow.meta", &[]).await?.get(0);
    too_new(found, shown)?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(sql).await?;
        tx.execute("UPDATE infraflow.meta SET version = $1", &[&(i as i64 + 1)]).await?;
    }
    tx.commit().await?;
    Ok(())
}

pub(crate) fn too_new(found: i64, shown: &str) -> Result<()> {
    if found > latest_version() {
        return Err(JournalError::TooNew { path: shown.into(), found, supported: latest_version() });
    }
    Ok(())
}
