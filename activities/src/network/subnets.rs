//! Subnets: ensure (found, adopted from HyperShift in the cluster's VPC, or created), lookups by
//! tag and by id, and delete-if-exists.

use aws_sdk_ec2::types::ResourceType;
use serde::{Deserialize, Serialize};

use crate::adopt::adopt_hypershift;
use crate::client::Aws;
use crate::consistency::once_consistent;
use crate::error::{AwsError, AwsResult, classify};
use crate::error::{gone_ok, missing};
use crate::inventory::Lookup;
use crate::tags::{Identity, TagQuery, filter};

/// A subnet as provisioned: its id and zone (name and account-independent id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubnetInfo {
    pub subnet_id: String,
    pub zone: String,
    pub zone_id: String,
}

pub async fn find_subnets(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<SubnetInfo>> {
    find_subnets_in(aws, q, None).await
}

/// `find_subnets`, in VPC `vpc_id` only when given.
async fn find_subnets_in(aws: &Aws, q: &TagQuery, vpc_id: Option<&str>) -> AwsResult<Vec<SubnetInfo>> {
    let mut call = aws.ec2.describe_subnets().filters(q.filter());
    if let Some(vpc) = vpc_id {
        call = call.filters(filter("vpc-id", &[vpc]));
    }
    let out = call.send().await.map_err(|e| classify("DescribeSubnets", e))?;
    Ok(out
        .subnets()
        .iter()
        .filter(|s| q.matches(s.tags()) && vpc_id.is_none_or(|v| s.vpc_id() == Some(v)))
        .filter_map(subnet_info)
        .collect())
}

fn subnet_info(s: &aws_sdk_ec2::types::Subnet) -> Option<SubnetInfo> {
    Some(SubnetInfo {
        subnet_id: s.subnet_id()?.to_string(),
        zone: s.availability_zone().unwrap_or_default().to_string(),
        zone_id: s.availability_zone_id().unwrap_or_default().to_string(),
    })
}

/// Looks subnets up by id (any owner).
pub async fn describe_subnets(aws: &Aws, ids: &[String]) -> AwsResult<Vec<SubnetInfo>> {
    let out = aws
        .ec2
        .describe_subnets()
        .set_subnet_ids(Some(ids.to_vec()))
        .send()
        .await
        .map_err(|e| classify("DescribeSubnets", e))?;
    Ok(out.subnets().iter().filter_map(subnet_info).collect())
}

pub async fn ensure_subnet(
    aws: &Aws,
    id: &Identity,
    vpc_id: &str,
    cidr: &str,
    zone: &str,
    lookup: Lookup,
) -> AwsResult<SubnetInfo> {
    if lookup.first() {
        if let Some(s) = find_subnets(aws, &id.query()).await?.into_iter().next() {
            crate::adopt::mark_if_adopted(aws, &s.subnet_id, id).await?;
            return Ok(s);
        }
        // Theirs only in the cluster's VPC: after two VPCs, the one the operator kept.
        let find = |q: TagQuery| async move { find_subnets_in(aws, &q, Some(vpc_id)).await };
        if let Some(s) = adopt_hypershift(aws, id, "subnet", find, |s: &SubnetInfo| &s.subnet_id).await? {
            return Ok(s);
        }
    }
    // NotFound on a VPC made moments ago means nothing was created: retried in place.
    let created = once_consistent(|| async {
        aws.ec2
            .create_subnet()
            .vpc_id(vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone)
            .tag_specifications(id.tag_spec(ResourceType::Subnet))
            .send()
            .await
            .map_err(|e| classify("CreateSubnet", e))
    })
    .await;
    let out = match created {
        Err(e) if e.code_is("InvalidSubnet.Conflict") => return subnet_holding(aws, id, vpc_id, cidr).await,
        r => r?,
    };
    let s = out.subnet().ok_or_else(|| missing("CreateSubnet", "subnet"))?;
    Ok(SubnetInfo {
        subnet_id: s.subnet_id().ok_or_else(|| missing("CreateSubnet", "subnet id"))?.to_string(),
        zone: s.availability_zone().unwrap_or(zone).to_string(),
        zone_id: s.availability_zone_id().unwrap_or_default().to_string(),
    })
}

/// The subnet that holds `cidr` in `vpc_id`, after CreateSubnet answered that one does. Ours when
/// it has our identity: an earlier attempt made it (a crash after the create), and the lookup by
/// tag missed it because AWS did not list it yet. Someone else's: a terminal error naming it.
/// Not listed at all yet: retryable, and the engine's next attempt (after the consistency
/// settle) looks it up by tag again.
async fn subnet_holding(aws: &Aws, id: &Identity, vpc_id: &str, cidr: &str) -> AwsResult<SubnetInfo> {
    let out = aws
        .ec2
        .describe_subnets()
        .filters(filter("vpc-id", &[vpc_id]))
        .filters(filter("cidr-block", &[cidr]))
        .send()
        .await
        .map_err(|e| classify("DescribeSubnets", e))?;
    let holder = out.subnets().iter().find(|s| s.vpc_id() == Some(vpc_id) && s.cidr_block() == Some(cidr));
    match holder {
        Some(s) if id.query().matches(s.tags()) => Ok(SubnetInfo {
            subnet_id: s.subnet_id().ok_or_else(|| missing("DescribeSubnets", "subnet id"))?.to_string(),
            zone: s.availability_zone().unwrap_or_default().to_string(),
            zone_id: s.availability_zone_id().unwrap_or_default().to_string(),
        }),
        Some(s) => Err(AwsError::terminal(
            "CreateSubnet",
            format!(
                "{cidr} in VPC {vpc_id} is taken by subnet {}, which is not {}; free that range or choose another vpcCIDR",
                s.subnet_id().unwrap_or("?"),
                id.key()
            ),
        )),
        None => Err(AwsError {
            operation: "CreateSubnet",
            code: Some("InvalidSubnet.Conflict".into()),
            message: format!("{cidr} in VPC {vpc_id} is taken by a subnet AWS does not list yet; looking again"),
            retryable: true,
            outcome_unknown: true,
            ..AwsError::default()
        }),
    }
}

pub async fn delete_subnet(aws: &Aws, subnet_id: &str) -> AwsResult<bool> {
    gone_ok(
        aws.ec2.delete_subnet().subnet_id(subnet_id).send().await.map(|_| ()).map_err(|e| classify("DeleteSubnet", e)),
    )
}
