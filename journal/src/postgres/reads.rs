//! The PostgreSQL journal's reads: status rows, event logs, views, and which workflows a daemon
//! may claim — leases judged by the database's clock.

use tokio_postgres::{Client, Row};

use super::pool::Conn;
use super::tx::cluster_blocker;
use crate::api::{WorkflowOutcome, WorkflowRow};
use crate::error::Result;
use crate::event::EventRecord;
use crate::projection::{WorkflowState, WorkflowView};
use crate::rules::{CLUSTER_BLOCKER_SQL, claimable_by};

const ROW_COLUMNS: &str = "id, workflow, state, cluster, created_at, updated_at, current_step, attempts, error, lease_owner, lease_expires_at";

fn workflow_row(r: &Row) -> WorkflowRow {
    WorkflowRow {
        id: r.get(0),
        workflow: r.get(1),
        state: WorkflowState::parse(r.get(2)).unwrap_or(WorkflowState::Failed),
        cluster: r.get(3),
        created_at: r.get(4),
        updated_at: r.get(5),
        current_step: r.get(6),
        attempts: r.get::<_, i32>(7) as u32,
        error: r.get(8),
        lease_owner: r.get(9),
        lease_expires_at: r.get(10),
    }
}

pub(crate) async fn list(c: &Client) -> Result<Vec<WorkflowRow>> {
    let rows = c.query(&format!("SELECT {ROW_COLUMNS} FROM workflows ORDER BY arrival"), &[]).await?;
    Ok(rows.iter().map(workflow_row).collect())
}

pub(crate) async fn row(c: &Client, id: String) -> Result<Option<WorkflowRow>> {
    let row = c.query_opt(&format!("SELECT {ROW_COLUMNS} FROM workflows WHERE id = $1"), &[&id]).await?;
    Ok(row.as_ref().map(workflow_row))
}

pub(crate) async fn count_by_state(c: &Client) -> Result<Vec<(String, u64)>> {
    let rows = c.query("SELECT state, COUNT(*) FROM workflows GROUP BY state", &[]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get::<_, i64>(1) as u64)).collect())
}

const OUTCOME_SQL: &str = "SELECT state, output, error FROM workflows WHERE id = $1";
const LEASE_SQL: &str = "SELECT lease_owner, lease_expires_at FROM workflows WHERE id = $1";
const EVENTS_SQL: &str = "SELECT seq, at, data FROM events WHERE workflow_id = $1 ORDER BY seq";

pub(crate) async fn outcome(c: &mut Conn, id: String) -> Result<Option<WorkflowOutcome>> {
    let outcome = c.prepared(OUTCOME_SQL).await?;
    let Some(r) = c.query_opt(&outcome, &[&id]).await? else {
        return Ok(None);
    };
    let output: Option<String> = r.get(1);
    let output = output.map(|o| serde_json::from_str(&o)).transpose()?;
    Ok(Some((WorkflowState::parse(r.get(0)).unwrap_or(WorkflowState::Failed), output, r.get(2))))
}

/// Heads of their clusters' queues (and workflows of no cluster) whose lease `me` could take.
pub(crate) async fn claimable(c: &Client, me: String, limit: usize) -> Result<Vec<String>> {
    let rows = c
        .query(
            "WITH heads AS (
                 SELECT cluster, MIN(ticket) AS ticket FROM workflows
                 WHERE cluster <> '' AND state NOT IN ('completed','failed','compensated','compensation_failed')
                 GROUP BY cluster)
             SELECT w.id, w.lease_owner, w.lease_expires_at, now_ms() FROM workflows w
             LEFT JOIN heads h ON h.cluster = w.cluster
             WHERE w.state IN ('pending','running','cancelling','compensating')
               AND (w.cluster = '' OR w.ticket = h.ticket)
             ORDER BY w.ticket",
            &[],
        )
        .await?;
    Ok(rows.iter().filter(|r| claimable_by(r.get(1), r.get(2), &me, r.get(3))).map(|r| r.get(0)).take(limit).collect())
}

pub(crate) async fn waiting_for(c: &mut Conn, id: String) -> Result<Option<(String, String, WorkflowState)>> {
    let blocker = c.prepared(CLUSTER_BLOCKER_SQL).await?;
    let row = c.query_opt("SELECT cluster, state, lease_owner, now_ms() FROM workflows WHERE id = $1", &[&id]).await?;
    match row {
        Some(r)
            if r.get::<_, Option<String>>(2).is_none()
                && WorkflowState::parse(r.get(1)).is_some_and(|s| s.is_runnable()) =>
        {
            cluster_blocker(&**c, &blocker, &id, r.get(0), r.get(3)).await
        }
        _ => Ok(None),
    }
}

pub(crate) async fn events(c: &impl tokio_postgres::GenericClient, id: &str) -> Result<Vec<EventRecord>> {
    let rows = c.query(EVENTS_SQL, &[&id]).await?;
    decode_events(id, rows)
}

fn decode_events(id: &str, rows: Vec<Row>) -> Result<Vec<EventRecord>> {
    rows.iter().map(|r| EventRecord::decode(id, r.get(0), r.get(1), r.get(2))).collect()
}

/// The lease and the events from one snapshot.
pub(crate) async fn load(c: &mut Conn, id: String) -> Result<Option<WorkflowView>> {
    let [lease, events] = c.prepared_all([LEASE_SQL, EVENTS_SQL]).await?;
    let tx = c
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let Some(lease) = tx.query_opt(&lease, &[&id]).await? else {
        return Ok(None);
    };
    let events = decode_events(&id, tx.query(&events, &[&id]).await?)?;
    tx.commit().await?;
    let mut view = WorkflowView::fold(&id, &events);
    view.lease_owner = lease.get(0);
    view.lease_expires_at = lease.get(1);
    Ok(Some(view))
}
