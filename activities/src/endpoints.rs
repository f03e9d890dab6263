//! VPC endpoints: the S3 gateway endpoint of provision-infra, and deleting endpoints with a wait.

use aws_sdk_ec2::types::{ResourceType, VpcEndpointType};

use crate::adopt::{adopt_hypershift, itself};
use crate::client::Aws;
use crate::consistency::once_consistent;
use crate::error::missing;
use crate::error::{AwsResult, classify};
use crate::inventory::Lookup;
use crate::tags::{Identity, TagQuery, filter};
use crate::wait::{WAIT_BUDGET, poll_until};

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &["ec2:DescribeVpcEndpoints"];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &["ec2:CreateVpcEndpoint", "ec2:ModifyVpcEndpoint", "ec2:CreateTags"];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["ec2:DeleteVpcEndpoints"];

/// Endpoints matching `q` that are live, with their state: what a create may adopt (not a
/// `failed`, `rejected` or `expired` one).
pub async fn find_vpc_endpoints(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, String)>> {
    Ok(find_vpc_endpoints_to_delete(aws, q).await?.into_iter().filter(|(_, state)| adoptable(state)).collect())
}

/// Whether an endpoint in `state` (lowercase) may be adopted or relied on: not a `failed`,
/// `rejected` or `expired` one.
pub(crate) fn adoptable(state: &str) -> bool {
    !matches!(state, "failed" | "rejected" | "expired")
}

/// Endpoints matching `q` in any state but `deleted`: a failed, rejected or expired endpoint
/// still sits in its VPC, holds its subnets and security groups, and must be deleted too.
pub async fn find_vpc_endpoints_to_delete(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, String)>> {
    let out = aws
        .ec2
        .describe_vpc_endpoints()
        .filters(q.filter())
        .send()
        .await
        .map_err(|e| classify("DescribeVpcEndpoints", e))?;
    Ok(out
        .vpc_endpoints()
        .iter()
        .filter(|e| q.matches(e.tags()))
        .filter_map(|e| {
            // Compare the raw string: the SDK does not model every state AWS returns.
            let state = e.state().map(|s| s.as_str().to_ascii_lowercase()).unwrap_or_default();
            (state != "deleted").then(|| Some((e.vpc_endpoint_id()?.to_string(), state))).flatten()
        })
        .collect())
}

/// The S3 gateway endpoint of the VPC, on the given route tables.
pub async fn ensure_s3_endpoint(
    aws: &Aws,
    id: &Identity,
    vpc_id: &str,
    route_tables: &[String],
    lookup: Lookup,
) -> AwsResult<String> {
    let found = match lookup.first() {
        true => match find_vpc_endpoints(aws, &id.query()).await?.into_iter().next() {
            Some((vpce, _)) => {
                crate::adopt::mark_if_adopted(aws, &vpce, id).await?;
                Some(vpce)
            }
            None => {
                adopt_hypershift(aws, id, "S3 gateway endpoint", |q| hypershift_s3_endpoints(aws, q, vpc_id), itself)
                    .await?
            }
        },
        false => None,
    };
    if let Some(vpce) = found {
        let out = aws
            .ec2
            .describe_vpc_endpoints()
            .vpc_endpoint_ids(&vpce)
            .send()
            .await
            .map_err(|e| classify("DescribeVpcEndpoints", e))?;
        let have: Vec<String> = out.vpc_endpoints().iter().flat_map(|e| e.route_table_ids().iter().cloned()).collect();
        let add: Vec<String> = route_tables.iter().filter(|r| !have.contains(r)).cloned().collect();
        if !add.is_empty() {
            aws.ec2
                .modify_vpc_endpoint()
                .vpc_endpoint_id(&vpce)
                .set_add_route_table_ids(Some(add))
                .send()
                .await
                .map_err(|e| classify("ModifyVpcEndpoint", e))?;
        }
        return Ok(vpce);
    }
    let out = once_consistent(|| async {
        aws.ec2
            .create_vpc_endpoint()
            // Always explicit: without it some implementations create an endpoint they cannot delete.
            .vpc_endpoint_type(VpcEndpointType::Gateway)
            .vpc_id(vpc_id)
            .service_name(format!("com.amazonaws.{}.s3", aws.region))
            .set_route_table_ids(Some(route_tables.to_vec()))
            .client_token(id.token())
            .tag_specifications(id.tag_spec(ResourceType::VpcEndpoint))
            .send()
            .await
            .map_err(|e| classify("CreateVpcEndpoint", e))
    })
    .await?;
    Ok(out
        .vpc_endpoint()
        .and_then(|e| e.vpc_endpoint_id())
        .ok_or_else(|| missing("CreateVpcEndpoint", "endpoint id"))?
        .to_string())
}

/// The endpoint's state, None once it is gone.
async fn endpoint_state(aws: &Aws, vpce: &str) -> AwsResult<Option<String>> {
    let out = aws.ec2.describe_vpc_endpoints().vpc_endpoint_ids(vpce).send().await;
    match out.map_err(|e| classify("DescribeVpcEndpoints", e)) {
        Ok(o) => Ok(o
            .vpc_endpoints()
            .first()
            .map(|e| e.state().map(|s| s.as_str().to_ascii_lowercase()).unwrap_or_default())
            .filter(|s| s != "deleted")),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The endpoint's DNS names and its VPC.
async fn endpoint_dns_names(aws: &Aws, vpce: &str) -> AwsResult<(Vec<String>, String)> {
    let out = aws.ec2.describe_vpc_endpoints().vpc_endpoint_ids(vpce).send().await;
    match out.map_err(|e| classify("DescribeVpcEndpoints", e)) {
        Ok(o) => Ok((
            o.vpc_endpoints()
                .iter()
                .flat_map(|e| e.dns_entries())
                .filter_map(|d| d.dns_name().map(str::to_string))
                .collect(),
            o.vpc_endpoints().first().and_then(|e| e.vpc_id()).unwrap_or_default().to_string(),
        )),
        Err(e) if e.is_not_found() => Ok((Vec::new(), String::new())),
        Err(e) => Err(e),
    }
}

/// Deletes a VPC endpoint (any type) and waits until it is gone.
pub async fn delete_vpc_endpoint(aws: &Aws, vpce: &str) -> AwsResult<bool> {
    let live: Vec<(String, String)> =
        endpoint_state(aws, vpce).await?.map(|s| (vpce.to_string(), s)).into_iter().collect();
    let Some((_, state)) = live.first() else { return Ok(false) };
    // Records pointing at the endpoint go first: after it, they would resolve to nothing.
    let (names, vpc) = endpoint_dns_names(aws, vpce).await?;
    crate::dns::delete_records_pointing_to(aws, &names, &vpc).await?;
    if state != "deleting" {
        let out = aws
            .ec2
            .delete_vpc_endpoints()
            .vpc_endpoint_ids(vpce)
            .send()
            .await
            .map_err(|e| classify("DeleteVpcEndpoints", e))?;
        if let Some(err) = out.unsuccessful().first().and_then(|u| u.error()) {
            let code = err.code().unwrap_or_default();
            if !code.contains("NotFound") {
                return Err(crate::error::AwsError {
                    operation: "DeleteVpcEndpoints",
                    code: Some(code.to_string()),
                    message: err.message().unwrap_or_default().to_string(),
                    retryable: true,
                    ..Default::default()
                });
            }
        }
    }
    poll_until("DescribeVpcEndpoints", &format!("VPC endpoint {vpce} not deleted"), WAIT_BUDGET, || async {
        Ok(endpoint_state(aws, vpce).await?.is_none().then_some(()))
    })
    .await?;
    Ok(true)
}

/// The S3 gateway endpoints of `vpc_id` that `q` (HyperShift's query: the ownership tag alone)
/// matches, not deleted. HyperShift's own lookup takes any endpoint with the tag (its PrivateLink
/// endpoints carry it too); the service and type decide here.
async fn hypershift_s3_endpoints(aws: &Aws, q: TagQuery, vpc_id: &str) -> AwsResult<Vec<String>> {
    let out = aws
        .ec2
        .describe_vpc_endpoints()
        .filters(q.filter())
        .filters(filter("vpc-id", &[vpc_id]))
        .send()
        .await
        .map_err(|e| classify("DescribeVpcEndpoints", e))?;
    Ok(out
        .vpc_endpoints()
        .iter()
        .filter(|e| q.matches(e.tags()) && e.vpc_id() == Some(vpc_id))
        .filter(|e| e.service_name().is_some_and(|s| s.ends_with(".s3")))
        // Unset at creation means Gateway, which AWS then reports (moto reports nothing).
        .filter(|e| e.vpc_endpoint_type().is_none_or(|t| t.as_str() == "Gateway"))
        .filter(|e| {
            e.state().is_none_or(|s| !matches!(s.as_str().to_ascii_lowercase().as_str(), "deleted" | "deleting"))
        })
        .filter_map(|e| e.vpc_endpoint_id().map(str::to_string))
        .collect())
}
