//! `run teardown --dry-run`: what a teardown would delete and what it would leave, and why, read
//! from AWS with the same rules as `teardown` and nothing changed (no journal, no write call).

use std::collections::BTreeMap;

use infraflow_activities::{AwsPool, Kind, Scope, network, resources};
use serde::Serialize;
use serde_json::Value;

use super::planned::Planned;
use crate::aws_steps::from_aws;
use crate::teardown::workflow::{Target, Teardown, TeardownInput, public_record_decision};
use infraflow_engine::WorkflowDef;
use infraflow_engine::{ActivityError, InputError};

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TeardownPlan {
    #[serde(rename = "infraID")]
    pub infra_id: String,
    pub account: String,
    pub region: String,
    /// What teardown would delete, in the order it deletes (dependents first).
    pub delete: Vec<Planned>,
    /// What it would not delete although it is the cluster's name or sits in its VPC.
    pub leave: Vec<Planned>,
    /// Foreign resources that would keep a delete waiting (then the teardown pauses naming them).
    pub blocked: Vec<Planned>,
    /// A customer's resources (bring your own VPC) the cluster marked: only the tags it added
    /// come off (`reason` names them); the resources themselves are never deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmark: Vec<Planned>,
}

/// Reads the plan of a teardown of `input` (validated as `teardown` validates it). Every read is
/// idempotent: the whole plan is read again on a retryable error (throttling above all: Route53
/// allows five requests a second per account), as the workflow's steps would be.
pub async fn plan(pool: &AwsPool, input: &Value) -> Result<TeardownPlan, PlanError> {
    let def = Teardown { pool: pool.clone() };
    let validated = def.validate("dry-run", input)?;
    let t: TeardownInput = serde_json::from_value(validated.input).map_err(|e| InputError(e.to_string()))?;
    // Read where the teardown would act: through its role, in the role's account.
    let pool = &pool.assuming(crate::aws_steps::role_of(input).as_ref());
    let retryable = |e: &PlanError| matches!(e, PlanError::Aws(e) if e.retryable);
    crate::read_again::read_retrying(retryable, || read_plan(pool, &t)).await
}

async fn read_plan(pool: &AwsPool, t: &TeardownInput) -> Result<TeardownPlan, PlanError> {
    let aws = pool.region(&t.region).await;
    let env = aws.environment().await.map_err(from_aws)?;
    let scope = Scope::Owned(t.infra_id.clone());
    let reads = Kind::TEARDOWN_ORDER.map(|kind| {
        let (aws, scope) = (&aws, &scope);
        async move { resources::find_retrying_in_place(aws, kind, scope).await.map(|ids| (kind, ids)) }
    });
    let found: BTreeMap<Kind, Vec<String>> =
        futures::future::try_join_all(reads).await.map_err(from_aws)?.into_iter().collect();
    let mut plan = TeardownPlan {
        infra_id: t.infra_id.clone(),
        account: env.account,
        region: env.region,
        delete: Vec::new(),
        leave: Vec::new(),
        blocked: Vec::new(),
        unmark: Vec::new(),
    };
    for (id, keys) in
        infraflow_activities::customer_network::marks_to_remove(&aws, &t.infra_id).await.map_err(from_aws)?
    {
        let kind = match id.split('-').next() {
            Some("vpc") => "vpc",
            Some("rtb") => "route-table",
            Some("vpce") => "vpc-endpoint",
            _ => "subnet",
        };
        let reason = format!("the customer's, never deleted; takes off {}", keys.join(", "));
        plan.unmark.push(Planned { kind: kind.into(), id, reason: Some(reason) });
    }
    for (kind, id) in resources::find_iam_of_other_regions(&aws, &t.infra_id).await.map_err(from_aws)? {
        plan.leave.push(Planned {
            kind: kind.as_str().to_string(),
            id,
            reason: Some(format!(
                "IAM (global) made for the cluster's region elsewhere ({}), not {}: a teardown there removes it",
                infraflow_activities::tags::REGION_TAG,
                plan.region
            )),
        });
    }
    for arn in
        infraflow_activities::tagging::left_unknown(&aws, &t.infra_id, &Kind::TEARDOWN_ORDER).await.map_err(from_aws)?
    {
        plan.leave.push(Planned {
            kind: "tagged".into(),
            id: arn,
            reason: Some(
                "carries the cluster's ownership tag, of a kind teardown does not delete: the teardown pauses naming it; \
                 delete or untag it first"
                    .into(),
            ),
        });
    }
    let elsewhere = crate::teardown::left::iam_of_another_region(pool, &aws, &t.infra_id).await.map_err(from_aws)?;
    let mut found = found;
    for p in &elsewhere {
        for ids in found.values_mut() {
            ids.retain(|i| *i != p.id);
        }
    }
    plan.leave.extend(elsewhere);
    plan.leave.extend(crate::teardown::left::unowned_registry_buckets(&aws, &t.infra_id).await.map_err(from_aws)?);
    plan.leave.extend(crate::teardown::left::look_alikes(&aws, &t.infra_id, true).await.map_err(from_aws)?);
    if let (Some(base), Some(name)) = (&t.base_domain, &t.name) {
        let record = format!("*.apps.{name}.{base}");
        let decision = public_record_decision(&aws, &t.infra_id, name, base).await.map_err(from_aws)?;
        let reason = match decision {
            Ok(Target { zone, targets }) => {
                let pointing = infraflow_activities::dns::records_named_pointing_to(&aws, &zone, &record, &targets)
                    .await
                    .map_err(from_aws)?;
                if pointing.is_empty() {
                    Some("no such record points at one of the cluster's load balancers".to_string())
                } else {
                    plan.delete.push(Planned { kind: "public-record".into(), id: record.clone(), reason: None });
                    None
                }
            }
            Err(why) => Some(why),
        };
        if let Some(reason) = reason {
            plan.leave.push(Planned { kind: "public-record".into(), id: record, reason: Some(reason) });
        }
    }
    let vpcs = found.get(&Kind::Vpc).cloned().unwrap_or_default();
    let endpoints = found.get(&Kind::VpcEndpoint).cloned().unwrap_or_default();
    use infraflow_activities::customer_network::riders;
    let (on_vpcs, on_endpoints) = futures::try_join!(
        riders::riders(&aws, &t.infra_id, &vpcs),
        riders::riders_on_endpoints(&aws, &t.infra_id, &endpoints),
    )
    .map_err(from_aws)?;
    let riding = on_vpcs.into_iter().map(|r| ("vpc", r)).chain(on_endpoints.into_iter().map(|r| ("vpc-endpoint", r)));
    for (kind, (id, others)) in riding {
        let reason = format!(
            "cluster {} uses it (its marks): the teardown pauses before its first delete",
            others.join(", cluster ")
        );
        plan.blocked.push(Planned { kind: kind.into(), id, reason: Some(reason) });
    }
    for kind in Kind::TEARDOWN_ORDER {
        for id in found.get(&kind).into_iter().flatten() {
            // What a run with `preserveIAM` keeps, the plan says it keeps (the run names it under
            // `preserved`).
            if t.preserve_iam && matches!(kind, Kind::InstanceProfile | Kind::IamRole | Kind::OidcProvider) {
                plan.leave.push(Planned {
                    kind: kind.as_str().into(),
                    id: id.clone(),
                    reason: Some("preserveIAM: the cluster's IAM is kept".into()),
                });
                continue;
            }
            plan.delete.push(Planned { kind: kind.as_str().into(), id: id.clone(), reason: None });
            match kind {
                Kind::DhcpOptions => {
                    let users = network::dhcp_options_users(&aws, id).await.map_err(from_aws)?;
                    for (vpc, _) in users.unwrap_or_default().into_iter().filter(|(_, owned)| !owned) {
                        let reason = format!("uses the cluster's DHCP options {id}, and is never re-pointed");
                        plan.blocked.push(Planned { kind: "vpc".into(), id: vpc, reason: Some(reason) });
                    }
                }
                Kind::Vpc => {
                    let foreign = network::subnets_not_owned_in(&aws, id, &t.infra_id).await.map_err(from_aws)?;
                    for subnet in foreign {
                        let reason = format!("not the cluster's, in its VPC {id}: never deleted, it keeps the VPC");
                        plan.blocked.push(Planned { kind: "subnet".into(), id: subnet, reason: Some(reason) });
                    }
                }
                _ => {}
            }
        }
    }
    Ok(plan)
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("cannot read what the teardown would delete: {0}")]
    Aws(#[from] ActivityError),
}

impl TeardownPlan {
    /// The plan for people: one line per resource, then the counts.
    pub fn render(&self) -> String {
        let mut out = format!(
            "teardown of {} in account {}, region {} (nothing changed):\n",
            self.infra_id, self.account, self.region
        );
        for p in &self.delete {
            out.push_str(&format!("  delete  {:<22} {}\n", p.kind, p.id));
        }
        for p in &self.leave {
            out.push_str(&format!("  leave   {:<22} {} ({})\n", p.kind, p.id, p.reason.as_deref().unwrap_or("")));
        }
        for p in &self.blocked {
            out.push_str(&format!("  blocks  {:<22} {} ({})\n", p.kind, p.id, p.reason.as_deref().unwrap_or("")));
        }
        for p in &self.unmark {
            out.push_str(&format!("  unmark  {:<22} {} ({})\n", p.kind, p.id, p.reason.as_deref().unwrap_or("")));
        }
        out.push_str(&format!(
            "{} to delete, {} left, {} blocking\n",
            self.delete.len(),
            self.leave.len(),
            self.blocked.len()
        ));
        out
    }
}
