//! Network interfaces a running cluster left behind (its controllers' and its nodes' secondary
//! interfaces): those tagged as the cluster's and those left `available` in its subnets, deleted
//! before its subnets and groups. One in use by an instance that is not the cluster's pauses.

use aws_sdk_ec2::types::NetworkInterfaceStatus;

use crate::adopt::pairs;
use crate::client::Aws;
use crate::error::{AwsError, AwsResult, classify};
use crate::network::{find_subnets, gone_ok};
use crate::tags::{TagQuery, filter, ownership_pairs};

/// The IAM actions this file's lookups call.
pub const IAM_READ: &[&str] = &["ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets", "ec2:DescribeInstances"];
/// It creates nothing.
pub const IAM_WRITE: &[&str] = &[];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["ec2:DeleteNetworkInterface"];

/// Interfaces carrying the tag `q`; with `subnets_of`, also those left `available` (attached to
/// nothing) in the subnets carrying that tag and carrying no cluster's ownership tag — what a
/// controller made and never tagged.
pub async fn find_interfaces(aws: &Aws, q: &TagQuery, subnets_of: Option<&TagQuery>) -> AwsResult<Vec<String>> {
    let mut ids = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = aws
            .ec2
            .describe_network_interfaces()
            .filters(q.filter())
            .set_next_token(token.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeNetworkInterfaces", e))?;
        ids.extend(
            out.network_interfaces()
                .iter()
                .filter(|n| q.matches(n.tag_set()))
                .filter_map(|n| n.network_interface_id().map(str::to_string)),
        );
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    let Some(owned) = subnets_of else { return Ok(ids) };
    let subnets: Vec<String> = find_subnets(aws, owned).await?.into_iter().map(|s| s.subnet_id).collect();
    for chunk in subnets.chunks(100) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let out = aws
            .ec2
            .describe_network_interfaces()
            .filters(filter("subnet-id", &chunk))
            .filters(filter("status", &["available"]))
            .send()
            .await
            .map_err(|e| classify("DescribeNetworkInterfaces", e))?;
        ids.extend(
            out.network_interfaces()
                .iter()
                // Only what nobody claims: one tagged as another cluster's is that cluster's to
                // delete (it then keeps the subnet, and the teardown pauses naming it).
                .filter(|n| {
                    matches!(n.status(), Some(NetworkInterfaceStatus::Available))
                        && n.subnet_id().is_some_and(|s| chunk.contains(&s))
                        && ownership_pairs(&pairs(n.tag_set())).is_empty()
                })
                .filter_map(|n| n.network_interface_id().map(str::to_string)),
        );
    }
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// Deletes interface `id`; false if it was gone. In use by one of its cluster's instances
/// (terminating) or by a service that releases it with its owner (a load balancer, an endpoint),
/// it is waited for; in use by any other instance, the delete pauses naming that instance.
pub async fn delete_interface(aws: &Aws, id: &str) -> AwsResult<bool> {
    let out = aws
        .ec2
        .describe_network_interfaces()
        .network_interface_ids(id)
        .send()
        .await
        .map_err(|e| classify("DescribeNetworkInterfaces", e));
    let eni = match out {
        Ok(o) => match o.network_interfaces().first() {
            Some(n) => n.clone(),
            None => return Ok(false),
        },
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e),
    };
    if let Some(instance) = eni.attachment().and_then(|a| a.instance_id()).filter(|_| !is_available(&eni)) {
        let ours = ownership_pairs(&pairs(eni.tag_set()));
        if crate::compute::instance_shares_owner(aws, instance, &ours).await? == Some(false) {
            return Err(AwsError {
                operator: true,
                ..AwsError::terminal(
                    "DeleteNetworkInterface",
                    format!(
                        "network interface {id} is in use by instance {instance}, which is not its cluster's: it is left; detach it from that instance, then `infraflow retry`"
                    ),
                )
            });
        }
        return Err(AwsError::not_yet(
            "DeleteNetworkInterface",
            format!("network interface {id} is still attached to instance {instance}, which is being terminated"),
        ));
    }
    if !is_available(&eni) {
        let by = eni.description().filter(|d| !d.is_empty()).unwrap_or("its owner");
        return Err(AwsError::not_yet(
            "DeleteNetworkInterface",
            format!("network interface {id} is still in use by {by}"),
        ));
    }
    let r = aws.ec2.delete_network_interface().network_interface_id(id).send().await;
    gone_ok(r.map(|_| ()).map_err(|e| classify("DeleteNetworkInterface", e)))
        .map_err(|e| if e.code_is("InvalidNetworkInterface.InUse") { AwsError { retryable: true, ..e } } else { e })
}

fn is_available(eni: &aws_sdk_ec2::types::NetworkInterface) -> bool {
    matches!(eni.status(), Some(NetworkInterfaceStatus::Available))
}
