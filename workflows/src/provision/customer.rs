//! The network phase in a customer's VPC (bring your own VPC): nothing is made; the checked
//! subnets, the VPC and the route tables the cluster's S3 endpoint serves get the cluster's marks — the tags HyperShift, the cloud provider and
//! Karpenter find them by — in one journaled step whose write-ahead undo takes off only what this
//! workflow added (`customer_network::marks`).

use infraflow_activities::customer_network::{self, CustomerNetwork, Marked};
use infraflow_activities::tags::{KARPENTER_DISCOVERY_TAG, ownership_key};
use infraflow_activities::{AssumedRole, AwsPool};
use infraflow_engine::{Registry, StepError, StepOptions};
use infraflow_journal::Undo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::plan::{Network, Plan, ZoneNet};
use crate::aws_steps::{aws_retry, from_aws};

/// The compensation of the marks step: the marks this workflow added come off again.
pub(crate) const REMOVE_CUSTOMER_MARKS: &str = "ec2.remove-customer-marks";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RemoveMarks {
    region: String,
    #[serde(rename = "infraID")]
    infra_id: String,
    created_by: String,
    /// Given at compensation (`role_context`), never journaled here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    role: Option<AssumedRole>,
}

pub(crate) fn register_undo(r: &mut Registry, pool: AwsPool) {
    r.add_undo(REMOVE_CUSTOMER_MARKS, move |input: Value| {
        let pool = pool.clone();
        async move {
            let d: RemoveMarks = serde_json::from_value(input)
                .map_err(|e| infraflow_engine::ActivityError::terminal(format!("bad undo input: {e}")))?;
            let aws = pool.assuming(d.role.as_ref()).region(&d.region).await;
            let done = customer_network::unmark(&aws, &d.infra_id, Some(&d.created_by)).await.map_err(from_aws)?;
            Ok(serde_json::json!({ "unmarked": done.into_iter().map(|(id, _)| id).collect::<Vec<_>>() }))
        }
    });
}

/// What the cluster puts on the customer's network: each subnet's role tags and the cluster's
/// shared ownership, Karpenter's discovery tag on the nodes' subnets, and the shared ownership of
/// the VPC and of the route tables the cluster's S3 endpoint will serve (`tables`).
fn wants(plan: &Plan<'_>, vpc: &str, tables: &[String]) -> Vec<Marked> {
    let (infra, p) = (plan.infra, plan.p);
    let shared = (ownership_key(infra), "shared".to_string());
    let karpenter = (KARPENTER_DISCOVERY_TAG.to_string(), infra.to_string());
    let mut out = Vec::new();
    for z in p.subnets.as_deref().unwrap_or_default() {
        if let Some(id) = &z.private_subnet_id {
            let role = ("kubernetes.io/role/internal-elb".to_string(), "1".to_string());
            out.push(Marked { resource: id.clone(), tags: vec![shared.clone(), role, karpenter.clone()] });
        }
        if let Some(id) = &z.public_subnet_id {
            let mut tags = vec![shared.clone(), ("kubernetes.io/role/elb".to_string(), "1".to_string())];
            if p.public_only {
                tags.push(karpenter.clone());
            }
            out.push(Marked { resource: id.clone(), tags });
        }
    }
    for table in tables {
        out.push(Marked { resource: table.clone(), tags: vec![shared.clone()] });
    }
    out.push(Marked { resource: vpc.to_string(), tags: vec![shared] });
    out
}

/// The network phase in a customer's VPC: the marks, and the customer's subnets and route tables
/// as the preflight checked them.
pub(super) async fn mark(plan: &Plan<'_>, customer: &CustomerNetwork) -> Result<Network, StepError> {
    let vpc = customer.vpc_id.as_str();
    // The tables the S3 endpoint serves: the private subnets', then the public ones', each once.
    let mut route_tables: Vec<String> = Vec::new();
    let ids = super::customer_rules::subnet_ids(plan.p);
    for table in ids.iter().filter_map(|id| customer.subnets.get(id)?.route_table.clone()) {
        if !route_tables.contains(&table) {
            route_tables.push(table);
        }
    }
    let endpoint_made = super::endpoints::customers_s3_endpoint(plan.infra, customer).is_none();
    let mut wants = wants(plan, vpc, if endpoint_made { &route_tables } else { &[] });
    // Another bring-your-own cluster's S3 endpoint serves this one too: the dependency is recorded
    // on it (this cluster's shared mark and record), so that cluster's teardown stops before it
    // deletes the endpoint from under this one (flow version 4; SAFETY-A7937A6 G4).
    if plan.ctx.code_version() >= 4
        && let Some(theirs) = super::endpoints::another_clusters_s3_endpoint(plan.infra, customer)
    {
        wants.push(Marked { resource: theirs, tags: vec![(ownership_key(plan.infra), "shared".to_string())] });
    }
    let undo = RemoveMarks {
        region: plan.region.to_string(),
        infra_id: plan.infra.to_string(),
        created_by: plan.ctx.creator().to_string(),
        role: None,
    };
    let options = StepOptions {
        retry: Some(aws_retry()),
        undo: Some(Undo {
            activity: REMOVE_CUSTOMER_MARKS.to_string(),
            input: serde_json::to_value(&undo).unwrap_or(Value::Null),
        }),
        settle: None,
    };
    let _: Vec<String> = plan
        .ctx
        .step_with("customer-marks", "ec2.mark-customer-network", &wants, options, || async {
            let aws = plan.pool.region(plan.region).await;
            customer_network::mark(&aws, plan.infra, plan.ctx.creator(), &wants).await.map_err(from_aws)
        })
        .await?;
    let subnets = plan.p.subnets.as_deref().unwrap_or_default();
    let zones = subnets
        .iter()
        .map(|z| ZoneNet {
            zone: z.zone.clone(),
            public: z.public_subnet_id.clone(),
            private: z.private_subnet_id.clone(),
        })
        .collect();
    Ok(Network { zones, route_tables })
}
