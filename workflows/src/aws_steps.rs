//! The bridge between AWS activities and the engine: error conversion, and the two generic
//! AWS activities every workflow shares (delete by identity for compensation, delete by id for
//! teardown).

use infraflow_activities::{AwsError, AwsPool, Identity, Kind, resources};
use infraflow_journal::Undo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::time::Duration;

use crate::context::StepOptions;
use crate::error::ActivityError;
use crate::registry::Registry;
use crate::retry::RetryPolicy;

impl From<AwsError> for ActivityError {
    fn from(e: AwsError) -> ActivityError {
        ActivityError {
            retryable: e.retryable,
            code: e.code.clone(),
            message: format!("{}: {}", e.operation, e.message),
        }
    }
}

/// Retries of AWS steps: generous, since throttling comes in storms and every AWS step is
/// idempotent (creates look up before creating).
pub fn aws_retry() -> RetryPolicy {
    RetryPolicy {
        initial: Duration::from_millis(500),
        coefficient: 1.5,
        max_interval: Duration::from_secs(15),
        max_attempts: 20,
        jitter: 0.2,
    }
}

/// Options of a create step: AWS retries and the write-ahead undo.
pub fn create_opts(region: &str, kind: Kind, id: &Identity) -> StepOptions {
    StepOptions { retry: Some(aws_retry()), undo: Some(undo(region, kind, id)) }
}

/// Options of a read or wait step.
pub fn read_opts() -> StepOptions {
    StepOptions { retry: Some(aws_retry()), undo: None }
}

/// The compensating activity of every create step.
pub const DELETE_BY_IDENTITY: &str = "aws.delete-by-identity";
/// Teardown's delete of one discovered resource.
pub const DELETE: &str = "aws.delete";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteByIdentity {
    pub region: String,
    pub kind: Kind,
    pub identity: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOne {
    pub region: String,
    pub kind: Kind,
    pub id: String,
}

/// The undo of a step that creates `kind` with identity `id`: known before the step runs, so it
/// is journaled write-ahead.
pub fn undo(region: &str, kind: Kind, id: &Identity) -> Undo {
    let input = DeleteByIdentity { region: region.to_string(), kind, identity: id.key() };
    Undo { activity: DELETE_BY_IDENTITY.to_string(), input: serde_json::to_value(input).unwrap_or(Value::Null) }
}

/// The compensation of CNAME records written into a zone infraflow may not own.
pub const DELETE_RECORDS: &str = "route53.delete-records";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteRecords {
    pub region: String,
    pub zone_id: String,
    pub names: Vec<String>,
}

pub fn register(r: &mut Registry, pool: AwsPool) {
    let records_pool = pool.clone();
    r.add_undo(DELETE_RECORDS, move |input: Value| {
        let pool = records_pool.clone();
        async move {
            let d: DeleteRecords =
                serde_json::from_value(input).map_err(|e| ActivityError::terminal(format!("bad undo input: {e}")))?;
            let aws = pool.region(&d.region).await;
            let n = infraflow_activities::dns::delete_records_named(&aws, &d.zone_id, &d.names).await?;
            Ok(serde_json::json!({ "deleted": n }))
        }
    });
    r.add_undo(DELETE_BY_IDENTITY, move |input: Value| {
        let pool = pool.clone();
        async move {
            let d: DeleteByIdentity =
                serde_json::from_value(input).map_err(|e| ActivityError::terminal(format!("bad undo input: {e}")))?;
            let aws = pool.region(&d.region).await;
            let deleted = resources::delete_by_identity(&aws, d.kind, &d.identity).await?;
            Ok(serde_json::json!({ "deleted": deleted }))
        }
    });
}
