//! Pruning in PostgreSQL: workflows that finished for good before a horizon move, with their
//! events, to the `archived_*` tables of the same database, in one transaction.
//!
//! As SQLite's pruning (`sqlite::prune`), only workflows that finished for good (`completed`,
//! `compensated`) move, and the trigger on `events` allows deleting only the events of an archived
//! workflow; one transaction, where SQLite's archive file takes two.

use tokio_postgres::Client;

use super::pool::commit;
use crate::error::Result;
use crate::rules::PRUNE_KEEPS_SQL;

/// Returns how many workflows and events moved.
pub(crate) async fn prune(c: &mut Client, before_ms: i64) -> Result<(u64, u64)> {
    let tx = c.transaction().await?;
    // Finished for good: `retry` refuses these states, so nothing will append to them again.
    tx.execute(
        &format!(
            "UPDATE workflows w SET archived = true
             WHERE state IN ('completed', 'compensated') AND updated_at < $1 AND NOT archived AND NOT {PRUNE_KEEPS_SQL}"
        ),
        &[&before_ms],
    )
    .await?;
    let workflows = tx
        .execute("INSERT INTO archived_workflows SELECT * FROM workflows WHERE archived ON CONFLICT DO NOTHING", &[])
        .await?;
    let events = tx
        .execute(
            "INSERT INTO archived_events SELECT e.* FROM events e JOIN workflows w ON w.id = e.workflow_id
             WHERE w.archived ON CONFLICT DO NOTHING",
            &[],
        )
        .await?;
    // The append-only trigger lets these go only because they are archived and finished.
    tx.execute("DELETE FROM events WHERE workflow_id IN (SELECT id FROM workflows WHERE archived)", &[]).await?;
    tx.execute("DELETE FROM workflows WHERE archived", &[]).await?;
    commit(tx).await?;
    Ok((workflows, events))
}
