//! The internet gateway of a cluster's VPC: ensure (found, adopted from HyperShift or created,
//! then attached) and delete-if-exists (detached first).

use aws_sdk_ec2::types::ResourceType;

use crate::adopt::adopt_hypershift;
use crate::client::Aws;
use crate::consistency::once_consistent;
use crate::error::{AwsError, AwsResult, classify};
use crate::error::{gone_ok, missing};
use crate::inventory::Lookup;
use crate::tags::{Identity, TagQuery};

pub async fn find_internet_gateways(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    Ok(gateways_attached(aws, q).await?.into_iter().map(|(id, _)| id).collect())
}

/// The gateways matching `q`, each with the VPCs it is attached to.
async fn gateways_attached(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, Vec<String>)>> {
    let out = aws
        .ec2
        .describe_internet_gateways()
        .filters(q.filter())
        .send()
        .await
        .map_err(|e| classify("DescribeInternetGateways", e))?;
    Ok(out
        .internet_gateways()
        .iter()
        .filter(|g| q.matches(g.tags()))
        .filter_map(|g| {
            let vpcs = g.attachments().iter().filter_map(|a| a.vpc_id().map(str::to_string)).collect();
            Some((g.internet_gateway_id()?.to_string(), vpcs))
        })
        .collect())
}

/// An internet gateway attached to the VPC.
pub async fn ensure_internet_gateway(aws: &Aws, id: &Identity, vpc_id: &str, lookup: Lookup) -> AwsResult<String> {
    let q = id.query();
    let found = match lookup {
        Lookup::First => Some(
            aws.ec2
                .describe_internet_gateways()
                .filters(q.filter())
                .send()
                .await
                .map_err(|e| classify("DescribeInternetGateways", e))?,
        ),
        Lookup::Skip => None,
    };
    let mine = found.as_ref().and_then(|out| out.internet_gateways().iter().find(|g| q.matches(g.tags())));
    let adopted = match (lookup, mine) {
        (Lookup::First, None) => {
            // A gateway of theirs serving another VPC is not this VPC's: attaching it here would
            // fail, and could be mistaken for done.
            let find = |q: TagQuery| async move {
                let all = gateways_attached(aws, &q).await?;
                Ok(all
                    .into_iter()
                    .filter(|(_, vpcs)| vpcs.iter().all(|v| v == vpc_id))
                    .map(|(igw, vpcs)| (igw, !vpcs.is_empty()))
                    .collect())
            };
            adopt_hypershift(aws, id, "internet gateway", find, |g: &(String, bool)| &g.0).await?
        }
        _ => None,
    };
    let (igw, attached) = match (mine, adopted) {
        (Some(g), _) => {
            let igw =
                g.internet_gateway_id().ok_or_else(|| missing("DescribeInternetGateways", "gateway id"))?.to_string();
            crate::adopt::mark_adopted_given(aws, &igw, id, &crate::adopt::pairs(g.tags())).await?;
            (igw, g.attachments().iter().any(|a| a.vpc_id() == Some(vpc_id)))
        }
        (None, Some(g)) => g,
        (None, None) => {
            let out = aws
                .ec2
                .create_internet_gateway()
                .tag_specifications(id.tag_spec(ResourceType::InternetGateway))
                .send()
                .await
                .map_err(|e| classify("CreateInternetGateway", e))?;
            let igw = out
                .internet_gateway()
                .and_then(|g| g.internet_gateway_id())
                .ok_or_else(|| missing("CreateInternetGateway", "gateway id"))?
                .to_string();
            (igw, false)
        }
    };
    if !attached {
        let r = once_consistent(|| async {
            aws.ec2
                .attach_internet_gateway()
                .internet_gateway_id(&igw)
                .vpc_id(vpc_id)
                .send()
                .await
                .map_err(|e| classify("AttachInternetGateway", e))
        })
        .await;
        match r {
            Ok(_) => {}
            Err(e) if e.code_is("Resource.AlreadyAssociated") => {}
            Err(e) => return Err(e),
        }
    }
    Ok(igw)
}

/// Detaches the gateway from its cluster's VPC, then deletes it. Attached to a VPC that is not
/// its cluster's (someone attached the cluster's gateway to theirs), it pauses naming that VPC:
/// cutting another VPC off the internet is not the cluster's teardown's to do.
pub async fn delete_internet_gateway(aws: &Aws, igw_id: &str) -> AwsResult<bool> {
    let out = aws.ec2.describe_internet_gateways().internet_gateway_ids(igw_id).send().await;
    let out = match out.map_err(|e| classify("DescribeInternetGateways", e)) {
        Ok(o) => o,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e),
    };
    for g in out.internet_gateways() {
        let vpcs: Vec<&str> = g.attachments().iter().filter_map(|a| a.vpc_id()).collect();
        if vpcs.is_empty() {
            continue;
        }
        let tags = crate::adopt::pairs(g.tags());
        if let Some(owners) = crate::provenance::other_owners(&tags) {
            return Err(crate::provenance::two_owners("DetachInternetGateway", "internet gateway", igw_id, &owners));
        }
        let described = aws
            .ec2
            .describe_vpcs()
            .set_vpc_ids(Some(vpcs.iter().map(|v| v.to_string()).collect()))
            .send()
            .await
            .map_err(|e| classify("DescribeVpcs", e));
        let described = match described {
            Ok(o) => o.vpcs().to_vec(),
            // A VPC deleted meanwhile: the detach below answers for it.
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e),
        };
        for v in &described {
            if !crate::tags::same_owners(&crate::adopt::pairs(v.tags()), &tags) {
                return Err(AwsError {
                    operator: true,
                    ..AwsError::terminal(
                        "DetachInternetGateway",
                        format!(
                            "internet gateway {igw_id} is attached to VPC {}, which is not its cluster's: it is left attached; detach it from that VPC, then `infraflow retry`",
                            v.vpc_id().unwrap_or("?")
                        ),
                    )
                });
            }
        }
        for a in g.attachments() {
            if let Some(vpc) = a.vpc_id() {
                let r = aws.ec2.detach_internet_gateway().internet_gateway_id(igw_id).vpc_id(vpc).send().await;
                match r.map_err(|e| classify("DetachInternetGateway", e)) {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() || e.code_is("Gateway.NotAttached") => {}
                    Err(e) => return Err(e.retry_dependency()),
                }
            }
        }
    }
    gone_ok(
        aws.ec2
            .delete_internet_gateway()
            .internet_gateway_id(igw_id)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("DeleteInternetGateway", e)),
    )
}
