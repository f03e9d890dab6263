//! The bridge between AWS activities and the engine: error conversion, and the two generic
//! AWS activities every workflow shares (delete by identity for compensation, delete by id for
//! teardown).

use infraflow_activities::dns::WrittenCname;
use infraflow_activities::resources::Scope;
use infraflow_activities::{AssumedRole, AwsError, AwsPool, Environment, Identity, Kind, resources};
use infraflow_journal::Undo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use infraflow_activities::{Inventory, Lookup};

use infraflow_engine::ActivityError;
use infraflow_engine::RetryPolicy;
use infraflow_engine::{BoxFuture, Registry};
use infraflow_engine::{StepOptions, WfCtx};

/// An AWS error as the engine classifies it (retryable, outcome unknown, an operator's to fix).
/// A function, not a `From`: the orphan rule forbids converting between two other crates' types.
pub(crate) fn from_aws(e: AwsError) -> ActivityError {
    ActivityError {
        retryable: e.retryable,
        code: e.code.clone(),
        message: format!("{}: {}", e.operation, e.message),
        outcome_unknown: e.outcome_unknown,
        operator: e.operator,
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

/// Whether a create step looks up before creating: its first attempt may skip the lookup when an
/// inventory taken by this same execution, under the cluster's lease, says nothing is there
/// (`Inventory::lookup_for`); every later attempt (a retry in place, a resume after a crash, a
/// `retry` command) looks up, since an earlier attempt may have created it.
pub struct FirstAttempt {
    skip: bool,
    tried: AtomicBool,
}

impl FirstAttempt {
    /// `inventory` is None unless this execution took it.
    pub fn new(inventory: Option<&Inventory>, id: &Identity) -> FirstAttempt {
        let skip = inventory.is_some_and(|i| i.lookup_for(id) == Lookup::Skip);
        FirstAttempt { skip, tried: AtomicBool::new(false) }
    }

    /// What this attempt does; call once per attempt.
    pub fn lookup(&self) -> Lookup {
        if self.skip && !self.tried.swap(true, Ordering::SeqCst) { Lookup::Skip } else { Lookup::First }
    }
}

/// The environment probe of every AWS workflow: account (STS) and the region resolved by the
/// SDK's chain when the input names none.
pub fn probe_environment(pool: &AwsPool, region: &str) -> BoxFuture<Result<Value, ActivityError>> {
    let (pool, region) = (pool.clone(), region.to_string());
    Box::pin(async move {
        let aws = pool.region(&region).await;
        let env = aws.environment().await.map_err(from_aws)?;
        serde_json::to_value(env).map_err(|e| ActivityError::terminal(e.to_string()))
    })
}

/// The role a workflow's (validated, journaled) input names: what its calls go through.
pub fn role_of(input: &Value) -> Option<AssumedRole> {
    crate::validate::role(input).ok().flatten()
}

/// What every undo of a workflow is given (`WorkflowDef::undo_context`): the role it acts
/// through, under `role`, which every undo input of this module reads.
pub fn role_context(input: &Value) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    if let Some(role) = role_of(input) {
        m.insert("role".into(), serde_json::to_value(role).unwrap_or(Value::Null));
    }
    m
}

/// The region a workflow acts in: the one journaled with its environment (resolved once, so
/// that every undo names it explicitly), else `given`.
pub fn acting_region(ctx: &WfCtx, given: &str) -> String {
    ctx.environment()
        .and_then(|e| serde_json::from_value::<Environment>(e).ok())
        .map(|e| e.region)
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| given.to_string())
}

/// How long EC2 may take to show a new resource to lookups (eventual consistency): a create step
/// whose attempt failed in any way (a crash mid-step, a lost reply, a 5xx, a 4xx from a call after
/// the create) is retried only this long after the failure, so that its lookup finds what the
/// attempt may have made instead of making it twice.
pub const CONSISTENCY_SETTLE: Duration = Duration::from_secs(5);

/// The settle of this process (`--consistency-settle`): `CONSISTENCY_SETTLE` unless the operator
/// set it, once, before any workflow ran. Shorter is only safe against an endpoint that shows
/// what it made at once (an emulator); the tests' kill chains run so against moto.
static SETTLE_MS: AtomicU64 = AtomicU64::new(CONSISTENCY_SETTLE.as_millis() as u64);

pub fn set_consistency_settle(settle: Duration) {
    SETTLE_MS.store(settle.as_millis() as u64, Ordering::Relaxed);
}

pub fn consistency_settle() -> Duration {
    Duration::from_millis(SETTLE_MS.load(Ordering::Relaxed))
}

/// Options of a create step: AWS retries, the write-ahead undo, and the consistency settle.
pub fn create_opts(region: &str, kind: Kind, id: &Identity) -> StepOptions {
    StepOptions { retry: Some(aws_retry()), undo: Some(undo(region, kind, id)), settle: Some(consistency_settle()) }
}

/// Options of a read or wait step.
pub fn read_opts() -> StepOptions {
    StepOptions { retry: Some(aws_retry()), undo: None, settle: None }
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
    /// Only a resource this workflow created is deleted; absent only in undos journaled by
    /// versions before the created-by rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// The output of the completed step (given by the engine at compensation, never journaled
    /// here): the ids it made, deleted by id as well when they carry this identity and creator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_output: Option<Value>,
    /// The role the workflow acts through: given at compensation (`role_context`), never
    /// journaled here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<AssumedRole>,
}

impl DeleteByIdentity {
    fn scope(&self) -> Scope {
        match &self.created_by {
            Some(w) => Scope::CreatedBy { identity: self.identity.clone(), created_by: w.clone() },
            None => Scope::Identity(self.identity.clone()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOne {
    pub region: String,
    pub kind: Kind,
    pub id: String,
    /// Which incarnation of a reusable name discovery found (`Discovered::incarnation`); absent
    /// for ids never reused and in deletes journaled before it existed, whose hash it keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<String>,
}

/// The undo of a step that creates `kind` with identity `id`: known before the step runs, so it
/// is journaled write-ahead. It deletes the resource only if this workflow created it (the
/// created-by tag is set at creation, so a crash between create and journal is still undone).
pub fn undo(region: &str, kind: Kind, id: &Identity) -> Undo {
    debug_assert!(!id.workflow.is_empty(), "a create step's identity names its workflow");
    let created_by = Some(id.workflow.clone()).filter(|w| !w.is_empty());
    let input = DeleteByIdentity {
        region: region.to_string(),
        kind,
        identity: id.key(),
        created_by,
        step_output: None,
        role: None,
    };
    Undo { activity: DELETE_BY_IDENTITY.to_string(), input: serde_json::to_value(input).unwrap_or(Value::Null) }
}

/// The compensation of CNAME records written into a zone infraflow may not own: each name gets
/// back what it held before the write, if it still holds what was written.
pub const RESTORE_RECORDS: &str = "route53.restore-records";
/// The records undo of versions before RESTORE_RECORDS (deletes by name): kept so that their
/// journals still compensate.
const DELETE_RECORDS: &str = "route53.delete-records";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreRecords {
    pub region: String,
    pub zone_id: String,
    pub written: Vec<WrittenCname>,
    /// The role the workflow acts through: given at compensation (`role_context`), never
    /// journaled here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<AssumedRole>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteRecords {
    region: String,
    zone_id: String,
    names: Vec<String>,
    #[serde(default)]
    role: Option<AssumedRole>,
}

fn decode<T: serde::de::DeserializeOwned>(input: Value) -> Result<T, ActivityError> {
    serde_json::from_value(input).map_err(|e| ActivityError::terminal(format!("bad undo input: {e}")))
}

/// Registers the undos every AWS workflow's create steps journal (the phases' own undos are
/// registered beside, by `full_registry`).
pub fn register(r: &mut Registry, pool: AwsPool) {
    let p = pool.clone();
    r.add_undo(RESTORE_RECORDS, move |input: Value| {
        let pool = p.clone();
        async move {
            let d: RestoreRecords = decode(input)?;
            let aws = pool.assuming(d.role.as_ref()).region(&d.region).await;
            let n = infraflow_activities::dns::restore_cnames(&aws, &d.zone_id, &d.written).await.map_err(from_aws)?;
            Ok(serde_json::json!({ "restored": n }))
        }
    });
    let p = pool.clone();
    r.add_undo(DELETE_RECORDS, move |input: Value| {
        let pool = p.clone();
        async move {
            let d: DeleteRecords = decode(input)?;
            let aws = pool.assuming(d.role.as_ref()).region(&d.region).await;
            let n =
                infraflow_activities::dns::delete_records_named(&aws, &d.zone_id, &d.names).await.map_err(from_aws)?;
            Ok(serde_json::json!({ "deleted": n }))
        }
    });
    r.add_undo(DELETE_BY_IDENTITY, move |input: Value| {
        let pool = pool.clone();
        async move {
            let d: DeleteByIdentity = decode(input)?;
            let aws = pool.assuming(d.role.as_ref()).region(&d.region).await;
            let mut deleted = resources::delete_in_scope(&aws, d.kind, &d.scope()).await.map_err(from_aws)?;
            // What the tag query did not list (AWS lists new resources by tag late): the ids the
            // completed step returned, each only if its own tags name this identity and creator.
            if let (Some(out), Some(creator)) = (&d.step_output, &d.created_by) {
                for id in resources::ids_of_kind(d.kind, out) {
                    if !deleted.contains(&id)
                        && resources::delete_by_id_if_created_by(&aws, d.kind, &id, &d.identity, creator)
                            .await
                            .map_err(from_aws)?
                    {
                        deleted.push(id);
                    }
                }
            }
            // Nothing of its own was there: what it adopted loses its mark, and what it made
            // that another workflow adopted is named and waited for, never passed over in silence.
            if let (true, Some(creator)) = (deleted.is_empty(), &d.created_by) {
                let in_use = infraflow_activities::marks::settle_at_rollback(&aws, d.kind, &d.identity, creator)
                    .await
                    .map_err(from_aws)?;
                if !in_use.is_empty() {
                    return Err(from_aws(infraflow_activities::marks::in_use_error(d.kind, &in_use)));
                }
            }
            Ok(serde_json::json!({ "deleted": deleted }))
        }
    });
}

#[cfg(test)]
mod first_attempt_tests {
    use super::*;

    #[test]
    fn only_the_first_attempt_of_this_execution_skips_the_lookup() {
        let id = Identity::new("c-abcde", "vpc", None, String::new());
        let empty = Inventory { looked: [id.key()].into(), present: Default::default(), unclaimed: false };
        let f = FirstAttempt::new(Some(&empty), &id);
        assert_eq!(f.lookup(), Lookup::Skip);
        assert_eq!(f.lookup(), Lookup::First, "a retry looks up: the first attempt may have created it");
        let replayed = FirstAttempt::new(None, &id);
        assert_eq!(replayed.lookup(), Lookup::First, "an inventory from the journal is history");
    }
}
