//! PrivateLink: VPC endpoint services on load balancers (management side) and interface
//! endpoints to them (guest side), with the zone-ID check that cross-account PrivateLink needs.

use aws_sdk_ec2::types::{ResourceType, VpcEndpointType};
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::error::missing;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::{Identity, TagQuery, filter};
use crate::wait::{WAIT_BUDGET, poll_until};

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] =
    &["ec2:DescribeVpcEndpointServiceConfigurations", "ec2:DescribeVpcEndpointConnections", "ec2:DescribeVpcEndpoints"];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &[
    "ec2:CreateVpcEndpointServiceConfiguration",
    "ec2:ModifyVpcEndpointServicePermissions",
    "ec2:CreateVpcEndpoint",
    "ec2:ModifyVpcEndpoint",
    "ec2:CreateTags",
];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["ec2:DeleteVpcEndpointServiceConfigurations", "ec2:RejectVpcEndpointConnections"];

/// An endpoint service as the guest side needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointService {
    pub service_id: String,
    pub service_name: String,
    /// Availability-zone names where the service is offered (in the provider's account).
    pub zones: Vec<String>,
}

/// Endpoint services carrying the tag `q` that a create may adopt (deleted, deleting and
/// failed ones left out).
pub async fn find_endpoint_services(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<EndpointService>> {
    endpoint_services(aws, q, &["deleted", "deleting", "failed"]).await
}

/// Endpoint services carrying the tag `q` in any state but deleted: a failed service still
/// holds its load balancer and must be deleted too.
pub async fn find_endpoint_services_to_delete(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<EndpointService>> {
    endpoint_services(aws, q, &["deleted"]).await
}

async fn endpoint_services(aws: &Aws, q: &TagQuery, skip: &[&str]) -> AwsResult<Vec<EndpointService>> {
    let o = aws
        .ec2
        .describe_vpc_endpoint_service_configurations()
        .filters(q.filter())
        .send()
        .await
        .map_err(|e| classify("DescribeVpcEndpointServiceConfigurations", e))?;
    Ok(o.service_configurations()
        .iter()
        .filter(|s| q.matches(s.tags()))
        .filter(|s| {
            let state = s.service_state().map(|st| st.as_str().to_ascii_lowercase()).unwrap_or_default();
            !skip.contains(&state.as_str())
        })
        .filter_map(|s| {
            Some(EndpointService {
                service_id: s.service_id()?.to_string(),
                service_name: s.service_name().unwrap_or_default().to_string(),
                zones: s.availability_zones().to_vec(),
            })
        })
        .collect())
}

/// An endpoint service for the load balancer, accepting connections without approval from the
/// allowed principals.
pub async fn ensure_endpoint_service(
    aws: &Aws,
    id: &Identity,
    nlb_arn: &str,
    principals: &[String],
) -> AwsResult<EndpointService> {
    let service = match find_endpoint_services(aws, &id.query()).await?.into_iter().next() {
        Some(s) => {
            crate::adopt::mark_if_adopted(aws, &s.service_id, id).await?;
            s
        }
        None => {
            let o = aws
                .ec2
                .create_vpc_endpoint_service_configuration()
                .network_load_balancer_arns(nlb_arn)
                .acceptance_required(false)
                .client_token(id.token())
                .tag_specifications(id.tag_spec(ResourceType::VpcEndpointService))
                .send()
                .await
                .map_err(|e| classify("CreateVpcEndpointServiceConfiguration", e))?;
            let s =
                o.service_configuration().ok_or_else(|| missing("CreateVpcEndpointServiceConfiguration", "service"))?;
            EndpointService {
                service_id: s
                    .service_id()
                    .ok_or_else(|| missing("CreateVpcEndpointServiceConfiguration", "service id"))?
                    .to_string(),
                service_name: s.service_name().unwrap_or_default().to_string(),
                zones: s.availability_zones().to_vec(),
            }
        }
    };
    if !principals.is_empty() {
        aws.ec2
            .modify_vpc_endpoint_service_permissions()
            .service_id(&service.service_id)
            .set_add_allowed_principals(Some(principals.to_vec()))
            .send()
            .await
            .map_err(|e| classify("ModifyVpcEndpointServicePermissions", e))?;
    }
    Ok(service)
}

/// Deletes the service. If AWS refuses because endpoints are still connected (ones in another
/// account, say), rejects those connections and tries again.
pub async fn delete_endpoint_service(aws: &Aws, service_id: &str) -> AwsResult<bool> {
    match delete_service_once(aws, service_id).await {
        Err(e) if e.is_dependency_violation() || e.code.as_deref().is_some_and(|c| c.contains("Connection")) => {
            reject_connections(aws, service_id).await?;
            delete_service_once(aws, service_id).await
        }
        r => r,
    }
}

async fn delete_service_once(aws: &Aws, service_id: &str) -> AwsResult<bool> {
    let o = aws
        .ec2
        .delete_vpc_endpoint_service_configurations()
        .service_ids(service_id)
        .send()
        .await
        .map_err(|e| classify("DeleteVpcEndpointServiceConfigurations", e));
    match o {
        Ok(o) => match o.unsuccessful().first().and_then(|u| u.error()) {
            Some(err) if err.code().is_some_and(|c| c.contains("NotFound")) => Ok(false),
            Some(err) => Err(AwsError {
                operation: "DeleteVpcEndpointServiceConfigurations",
                code: err.code().map(str::to_string),
                message: err.message().unwrap_or_default().to_string(),
                retryable: true,
                ..Default::default()
            }),
            None => Ok(true),
        },
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e.retry_dependency()),
    }
}

async fn reject_connections(aws: &Aws, service_id: &str) -> AwsResult<()> {
    let o = aws
        .ec2
        .describe_vpc_endpoint_connections()
        .filters(filter("service-id", &[service_id]))
        .send()
        .await
        .map_err(|e| classify("DescribeVpcEndpointConnections", e))?;
    let ids: Vec<String> = o
        .vpc_endpoint_connections()
        .iter()
        .filter(|c| c.service_id() == Some(service_id))
        .filter(|c| {
            !matches!(
                c.vpc_endpoint_state().map(|s| s.as_str().to_ascii_lowercase()).as_deref(),
                Some("rejected") | Some("deleted")
            )
        })
        .filter_map(|c| c.vpc_endpoint_id().map(str::to_string))
        .collect();
    if !ids.is_empty() {
        aws.ec2
            .reject_vpc_endpoint_connections()
            .service_id(service_id)
            .set_vpc_endpoint_ids(Some(ids))
            .send()
            .await
            .map_err(|e| classify("RejectVpcEndpointConnections", e))?;
    }
    Ok(())
}

/// Zone names to zone IDs in this account (`us-east-1a` -> `use1-az6`).
pub async fn zone_ids(aws: &Aws, names: &[String]) -> AwsResult<Vec<(String, String)>> {
    let all = crate::network::availability_zones(aws).await?;
    Ok(names.iter().filter_map(|n| all.iter().find(|z| &z.name == n).map(|z| (n.clone(), z.id.clone()))).collect())
}

/// An interface endpoint to `service_name` in `subnets` with `security_groups`.
pub async fn ensure_interface_endpoint(
    aws: &Aws,
    id: &Identity,
    vpc_id: &str,
    service_name: &str,
    subnets: &[String],
    security_groups: &[String],
) -> AwsResult<String> {
    if let Some((vpce, _)) = crate::endpoints::find_vpc_endpoints(aws, &id.query()).await?.into_iter().next() {
        crate::adopt::mark_if_adopted(aws, &vpce, id).await?;
        return Ok(vpce);
    }
    let o = aws
        .ec2
        .create_vpc_endpoint()
        .vpc_endpoint_type(VpcEndpointType::Interface)
        .vpc_id(vpc_id)
        .service_name(service_name)
        .set_subnet_ids(Some(subnets.to_vec()))
        .set_security_group_ids(Some(security_groups.to_vec()))
        .client_token(id.token())
        .tag_specifications(id.tag_spec(ResourceType::VpcEndpoint))
        .send()
        .await
        .map_err(|e| classify("CreateVpcEndpoint", e))?;
    Ok(o.vpc_endpoint()
        .and_then(|e| e.vpc_endpoint_id())
        .ok_or_else(|| missing("CreateVpcEndpoint", "endpoint id"))?
        .to_string())
}

/// Waits until the endpoint is available; returns its first DNS name.
pub async fn wait_endpoint_available(aws: &Aws, vpce: &str) -> AwsResult<String> {
    poll_until("DescribeVpcEndpoints", &format!("VPC endpoint {vpce} not available"), WAIT_BUDGET, || async {
        let o = aws
            .ec2
            .describe_vpc_endpoints()
            .vpc_endpoint_ids(vpce)
            .send()
            .await
            .map_err(|e| classify("DescribeVpcEndpoints", e))?;
        let Some(ep) = o.vpc_endpoints().first() else { return Ok(None) };
        // Compare the raw string: the SDK parses AWS's lowercase states as Unknown.
        let state = ep.state().map(|s| s.as_str().to_ascii_lowercase()).unwrap_or_default();
        match state.as_str() {
            "available" => {
                let dns = ep.dns_entries().iter().find_map(|d| d.dns_name()).unwrap_or_default().to_string();
                if dns.is_empty() { Ok(None) } else { Ok(Some(dns)) }
            }
            "failed" | "rejected" | "deleted" | "deleting" | "expired" => Err(AwsError::terminal(
                "DescribeVpcEndpoints",
                format!("VPC endpoint {vpce} is {state}; check the endpoint service's allowed principals"),
            )),
            _ => Ok(None),
        }
    })
    .await
}

/// Adds a node pool's subnet to an interface endpoint unless the endpoint already has a subnet
/// in that availability zone (AWS refuses two per zone). Returns whether it added it.
pub async fn add_subnet_to_endpoint(aws: &Aws, vpce: &str, subnet_id: &str) -> AwsResult<bool> {
    let ep = aws
        .ec2
        .describe_vpc_endpoints()
        .vpc_endpoint_ids(vpce)
        .send()
        .await
        .map_err(|e| classify("DescribeVpcEndpoints", e))?;
    let have: Vec<String> = ep.vpc_endpoints().iter().flat_map(|e| e.subnet_ids().iter().cloned()).collect();
    if have.iter().any(|s| s == subnet_id) {
        return Ok(false);
    }
    let mut all = have.clone();
    all.push(subnet_id.to_string());
    let subnets = crate::network::describe_subnets(aws, &all).await?;
    let zone_of = |s: &str| subnets.iter().find(|i| i.subnet_id == s).map(|i| i.zone_id.clone()).unwrap_or_default();
    let mine = zone_of(subnet_id);
    if have.iter().any(|s| zone_of(s) == mine) {
        // AWS refuses two subnets of one zone on an endpoint: that zone is already covered.
        return Ok(false);
    }
    aws.ec2
        .modify_vpc_endpoint()
        .vpc_endpoint_id(vpce)
        .add_subnet_ids(subnet_id)
        .send()
        .await
        .map_err(|e| classify("ModifyVpcEndpoint", e))?;
    Ok(true)
}
