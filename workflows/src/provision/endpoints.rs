//! The provision's last phase: the S3 gateway endpoint on the cluster's route tables, so that
//! image pulls from S3 do not cross the NAT gateways. In a customer's VPC that already has an S3
//! gateway endpoint (one not the cluster's own), none is made: two would split the route tables'
//! S3 prefix list between them, and the customer's is theirs to keep.

use infraflow_activities::customer_network::CustomerNetwork;
use infraflow_activities::{Identity, Kind, endpoints};
use infraflow_engine::StepError;

use super::plan::Plan;
use crate::aws_steps::from_aws;

/// The customer's S3 gateway endpoint that makes the cluster's unneeded, if any (the preflight's
/// reading, journaled with it: a resume decides as the first run did).
pub(crate) fn customers_s3_endpoint(infra: &str, customer: &CustomerNetwork) -> Option<String> {
    let own = Identity::new(infra, "s3-endpoint", None, String::new()).key();
    customer.s3_gateway_endpoints.iter().find(|e| e.identity.as_deref() != Some(own.as_str())).map(|e| e.id.clone())
}

/// The S3 gateway endpoint in the customer's VPC that another cluster made (an infraflow identity
/// not this cluster's), if the cluster uses one: that cluster's teardown would delete it.
pub(crate) fn another_clusters_s3_endpoint(infra: &str, customer: &CustomerNetwork) -> Option<String> {
    let own = Identity::new(infra, "s3-endpoint", None, String::new()).key();
    let theirs = customers_s3_endpoint(infra, customer)?;
    customer
        .s3_gateway_endpoints
        .iter()
        .find(|e| e.id == theirs && e.identity.as_deref().is_some_and(|i| i != own))
        .map(|e| e.id.clone())
}

pub(super) async fn ensure_s3_endpoint(
    plan: &Plan<'_>,
    vpc: &str,
    tables: &[String],
    customer: Option<&CustomerNetwork>,
) -> Result<(), StepError> {
    if customer.and_then(|c| customers_s3_endpoint(plan.infra, c)).is_some() || tables.is_empty() {
        return Ok(());
    }
    let s3_ident = plan.ident("s3-endpoint", None, format!("{}-private-s3", plan.infra));
    let look = plan.first(&s3_ident);
    let tables = tables.to_vec();
    plan.ctx
        .step_with(
            "s3-endpoint",
            "ec2.ensure-s3-endpoint",
            &(&s3_ident, vpc, &tables),
            plan.with_undo(Kind::VpcEndpoint, &s3_ident),
            || async {
                let aws = plan.pool.region(plan.region).await;
                endpoints::ensure_s3_endpoint(&aws, &s3_ident, vpc, &tables, look.lookup()).await.map_err(from_aws)
            },
        )
        .await
        .map(|_: String| ())
}
