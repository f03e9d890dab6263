//! Elastic IPs and NAT gateways, with explicit waits for their asynchronous states.
//!
//! Why the waits (a NAT gateway available, or deleted) poll inside one step: with backoff, bounded
//! at 5 minutes per attempt (`wait::WAIT_BUDGET`); running out is a retryable error, so the engine
//! (and a restart) resumes the wait. An endpoint's deletion is waited for the same way
//! (`endpoints`).

use aws_sdk_ec2::types::{DomainType, NatGatewayState, ResourceType};

use crate::adopt::{adopt_hypershift, itself, mark_if_adopted};
use crate::client::Aws;
use crate::consistency::once_consistent;
use crate::error::{AwsError, AwsResult, classify};
use crate::error::{gone_ok, missing};
use crate::inventory::Lookup;
use crate::tags::{Identity, TagQuery, filter};
use crate::wait::{WAIT_BUDGET, poll_until};

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &["ec2:DescribeAddresses", "ec2:DescribeNatGateways"];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &["ec2:AllocateAddress", "ec2:CreateNatGateway", "ec2:CreateTags"];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["ec2:DeleteNatGateway", "ec2:ReleaseAddress"];

pub async fn find_addresses(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    let out =
        aws.ec2.describe_addresses().filters(q.filter()).send().await.map_err(|e| classify("DescribeAddresses", e))?;
    Ok(out
        .addresses()
        .iter()
        .filter(|a| q.matches(a.tags()))
        .filter_map(|a| a.allocation_id().map(str::to_string))
        .collect())
}

/// HyperShift's addresses matching `q` that can be VPC `vpc_id`'s: the ones its NAT gateways in
/// that VPC hold if any (after two runs, each VPC's NAT holds its own), else the free ones.
async fn hypershift_addresses(aws: &Aws, q: TagQuery, vpc_id: &str) -> AwsResult<Vec<String>> {
    let out =
        aws.ec2.describe_addresses().filters(q.filter()).send().await.map_err(|e| classify("DescribeAddresses", e))?;
    let theirs: Vec<_> = out.addresses().iter().filter(|a| q.matches(a.tags())).collect();
    if theirs.len() < 2 {
        return Ok(theirs.iter().filter_map(|a| a.allocation_id().map(str::to_string)).collect());
    }
    let nats = aws
        .ec2
        .describe_nat_gateways()
        .filter(filter("vpc-id", &[vpc_id]))
        .send()
        .await
        .map_err(|e| classify("DescribeNatGateways", e))?;
    let held_here: Vec<&str> = nats
        .nat_gateways()
        .iter()
        .filter(|n| n.vpc_id() == Some(vpc_id))
        .flat_map(|n| n.nat_gateway_addresses().iter().filter_map(|a| a.allocation_id()))
        .collect();
    let here: Vec<String> =
        theirs.iter().filter_map(|a| a.allocation_id()).filter(|id| held_here.contains(id)).map(String::from).collect();
    if !here.is_empty() {
        return Ok(here);
    }
    Ok(theirs
        .iter()
        .filter(|a| a.association_id().is_none() && a.network_interface_id().is_none())
        .filter_map(|a| a.allocation_id().map(str::to_string))
        .collect())
}

/// An Elastic IP for a NAT gateway in VPC `vpc_id`, tagged at allocation.
pub async fn ensure_eip(aws: &Aws, id: &Identity, vpc_id: &str, lookup: Lookup) -> AwsResult<String> {
    if lookup.first() {
        if let Some(a) = find_addresses(aws, &id.query()).await?.into_iter().next() {
            mark_if_adopted(aws, &a, id).await?;
            return Ok(a);
        }
        let find = |q: TagQuery| hypershift_addresses(aws, q, vpc_id);
        if let Some(a) = adopt_hypershift(aws, id, "Elastic IP", find, itself).await? {
            return Ok(a);
        }
    }
    let out = aws
        .ec2
        .allocate_address()
        .domain(DomainType::Vpc)
        .tag_specifications(id.tag_spec(ResourceType::ElasticIp))
        .send()
        .await
        .map_err(|e| classify("AllocateAddress", e))?;
    Ok(out.allocation_id().ok_or_else(|| missing("AllocateAddress", "allocation id"))?.to_string())
}

pub async fn release_eip(aws: &Aws, allocation_id: &str) -> AwsResult<bool> {
    let r = aws.ec2.release_address().allocation_id(allocation_id).send().await;
    match r.map(|_| ()).map_err(|e| classify("ReleaseAddress", e)) {
        // Still held by a NAT gateway that is going away.
        Err(e) if e.code_is("InvalidIPAddress.InUse") || e.code_is("AuthFailure") => {
            Err(AwsError { retryable: true, operator: false, ..e })
        }
        r => gone_ok(r),
    }
}

/// NAT gateways matching `f` that are not deleted (AWS lists deleted ones for a while).
pub async fn find_nat_gateways(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, NatGatewayState)>> {
    find_nat_gateways_in(aws, q, None).await
}

/// `find_nat_gateways`, in subnet `subnet_id` only when given.
async fn find_nat_gateways_in(
    aws: &Aws,
    q: &TagQuery,
    subnet_id: Option<&str>,
) -> AwsResult<Vec<(String, NatGatewayState)>> {
    let out = aws
        .ec2
        .describe_nat_gateways()
        .filter(q.filter())
        .filter(filter("state", &["pending", "available", "deleting", "failed"]))
        .send()
        .await
        .map_err(|e| classify("DescribeNatGateways", e))?;
    Ok(out
        .nat_gateways()
        .iter()
        .filter(|n| q.matches(n.tags()) && subnet_id.is_none_or(|want| n.subnet_id() == Some(want)))
        .filter(|n| !matches!(n.state(), Some(NatGatewayState::Deleted)))
        .filter_map(|n| Some((n.nat_gateway_id()?.to_string(), n.state()?.clone())))
        .collect())
}

/// A NAT gateway in the public subnet with the given Elastic IP.
pub async fn ensure_nat_gateway(
    aws: &Aws,
    id: &Identity,
    subnet_id: &str,
    allocation_id: &str,
    lookup: Lookup,
) -> AwsResult<String> {
    let live = if lookup.first() { find_nat_gateways(aws, &id.query()).await? } else { Vec::new() };
    if let Some((nat, _)) =
        live.iter().find(|(_, s)| matches!(s, NatGatewayState::Pending | NatGatewayState::Available))
    {
        mark_if_adopted(aws, nat, id).await?;
        return Ok(nat.clone());
    }
    if lookup.first() {
        // HyperShift's, if it is usable and in the subnet this zone uses: a failed or deleting one
        // of theirs is left to them.
        let find = |q: TagQuery| async move {
            let all = find_nat_gateways_in(aws, &q, Some(subnet_id)).await?;
            Ok(all
                .into_iter()
                .filter(|(_, s)| matches!(s, NatGatewayState::Pending | NatGatewayState::Available))
                .collect())
        };
        if let Some((nat, _)) =
            adopt_hypershift(aws, id, "NAT gateway", find, |n: &(String, NatGatewayState)| &n.0).await?
        {
            return Ok(nat);
        }
    }
    // A failed NAT gateway of ours: AWS would answer its token with that same failed gateway,
    // so the new one needs a token of its own.
    let token = match live.iter().find(|(_, s)| matches!(s, NatGatewayState::Failed)) {
        Some((failed, _)) => id.token_with(&format!("@{}/after/{failed}", id.workflow)),
        None => id.token(),
    };
    // A subnet or address made moments ago may be unknown (InvalidSubnet, *.NotFound): nothing
    // was created, and the token keeps a repeat from making two.
    let out = once_consistent(|| async {
        aws.ec2
            .create_nat_gateway()
            .subnet_id(subnet_id)
            .allocation_id(allocation_id)
            .client_token(&token)
            .tag_specifications(id.tag_spec(ResourceType::Natgateway))
            .send()
            .await
            .map_err(|e| classify("CreateNatGateway", e))
    })
    .await?;
    Ok(out
        .nat_gateway()
        .and_then(|n| n.nat_gateway_id())
        .ok_or_else(|| missing("CreateNatGateway", "NAT gateway id"))?
        .to_string())
}

async fn nat_state(aws: &Aws, nat_id: &str) -> AwsResult<Option<NatGatewayState>> {
    let out = aws.ec2.describe_nat_gateways().nat_gateway_ids(nat_id).send().await;
    match out.map_err(|e| classify("DescribeNatGateways", e)) {
        Ok(o) => Ok(o.nat_gateways().first().and_then(|n| n.state().cloned())),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Waits until the NAT gateway is available; a failed gateway is a terminal error.
pub async fn wait_nat_available(aws: &Aws, nat_id: &str) -> AwsResult<()> {
    poll_until("DescribeNatGateways", &format!("NAT gateway {nat_id} not available"), WAIT_BUDGET, || async {
        match nat_state(aws, nat_id).await? {
            Some(NatGatewayState::Available) => Ok(Some(())),
            Some(NatGatewayState::Failed) | Some(NatGatewayState::Deleted) | Some(NatGatewayState::Deleting) => Err(
                AwsError::terminal("DescribeNatGateways", format!("NAT gateway {nat_id} failed or is being deleted")),
            ),
            // Not visible yet right after creation: eventual consistency.
            _ => Ok(None),
        }
    })
    .await
}

/// Deletes the NAT gateway and waits until it is gone (its Elastic IP is free only then).
pub async fn delete_nat_gateway(aws: &Aws, nat_id: &str) -> AwsResult<bool> {
    // Look up first: deleting an unknown id is an error without a code on some implementations.
    let deleted = match nat_state(aws, nat_id).await? {
        None | Some(NatGatewayState::Deleted) => return Ok(false),
        Some(NatGatewayState::Deleting) => true,
        Some(_) => {
            let r = aws.ec2.delete_nat_gateway().nat_gateway_id(nat_id).send().await;
            gone_ok(r.map(|_| ()).map_err(|e| classify("DeleteNatGateway", e)))?
        }
    };
    poll_until("DescribeNatGateways", &format!("NAT gateway {nat_id} not deleted"), WAIT_BUDGET, || async {
        Ok(matches!(nat_state(aws, nat_id).await?, None | Some(NatGatewayState::Deleted)).then_some(()))
    })
    .await?;
    Ok(deleted)
}
