//! Network interfaces a running cluster left behind (its controllers' and its nodes' secondary
//! interfaces): those tagged as the cluster's and those left `available` in its subnets, kept
//! only on a controller's proof (`provenance::interface`) and deleted before its subnets and
//! groups. One in use by an instance that is not the cluster's, or tagged for two, pauses.

use aws_sdk_ec2::types::NetworkInterfaceStatus;

use crate::adopt::pairs;
use crate::client::Aws;
use crate::error::gone_ok;
use crate::error::{AwsError, AwsResult, classify};
use crate::network::find_subnets;
use crate::tags::{TagQuery, filter, ownership_pairs};

/// The IAM actions this file's lookups call.
pub const IAM_READ: &[&str] = &[
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DescribeInstances",
    "ec2:DescribeNatGateways",
    "ec2:DescribeVpcEndpoints",
];
/// It creates nothing.
pub const IAM_WRITE: &[&str] = &[];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["ec2:DeleteNetworkInterface"];

/// One interface as a teardown judges it (`provenance::interface`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub id: String,
    pub tags: Vec<(String, String)>,
    pub description: String,
    pub requester_managed: bool,
    /// The cluster's subnet it was found in, untagged and available (None: found by its tag).
    pub in_cluster_subnet: Option<String>,
    /// The cluster's NAT gateway or VPC endpoint that names it as its own interface: it goes with
    /// that owner, never deleted on its own. (On AWS such an interface is in use; moto leaves it
    /// `available` and behind once its owner is deleted.)
    pub named_by: Option<String>,
}

impl Found {
    fn of(n: &aws_sdk_ec2::types::NetworkInterface) -> Option<Found> {
        Some(Found {
            id: n.network_interface_id()?.to_string(),
            tags: pairs(n.tag_set()),
            description: n.description().unwrap_or_default().to_string(),
            requester_managed: n.requester_managed().unwrap_or(false),
            in_cluster_subnet: None,
            named_by: None,
        })
    }
}

/// Interfaces carrying the tag `q`; with `subnets_of`, also those left `available` (attached to
/// nothing) in the subnets carrying that tag and carrying no cluster's ownership tag. Whose they
/// are is not decided here: `provenance::interface` judges each.
pub async fn find_interfaces(aws: &Aws, q: &TagQuery, subnets_of: Option<&TagQuery>) -> AwsResult<Vec<Found>> {
    let mut found: Vec<Found> = Vec::new();
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
        found.extend(out.network_interfaces().iter().filter(|n| q.matches(n.tag_set())).filter_map(Found::of));
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    let Some(owned) = subnets_of else { return Ok(found) };
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
        found.extend(
            out.network_interfaces()
                .iter()
                // Only what nobody claims: one tagged as another cluster's is that cluster's to
                // delete (it then keeps the subnet, and the teardown pauses naming it).
                .filter(|n| {
                    matches!(n.status(), Some(NetworkInterfaceStatus::Available))
                        && n.subnet_id().is_some_and(|s| chunk.contains(&s))
                        && ownership_pairs(&pairs(n.tag_set())).is_empty()
                })
                .filter_map(|n| Some(Found { in_cluster_subnet: n.subnet_id().map(str::to_string), ..Found::of(n)? })),
        );
    }
    if found.iter().any(|f| f.in_cluster_subnet.is_some()) {
        let named = interfaces_named_by(aws, owned).await?;
        for f in found.iter_mut().filter(|f| f.in_cluster_subnet.is_some()) {
            f.named_by = named.iter().find(|(eni, _)| *eni == f.id).map(|(_, by)| by.clone());
        }
    }
    // One found both ways (tagged, and available in a subnet) counts once, as found by its tag.
    found.sort_by(|a, b| a.id.cmp(&b.id).then(a.in_cluster_subnet.is_some().cmp(&b.in_cluster_subnet.is_some())));
    found.dedup_by(|a, b| a.id == b.id);
    Ok(found)
}

/// The interfaces the cluster's own NAT gateways and VPC endpoints (found by its tag) name as
/// theirs: (interface, "NAT gateway nat-…").
async fn interfaces_named_by(aws: &Aws, owned: &TagQuery) -> AwsResult<Vec<(String, String)>> {
    let nats = aws.ec2.describe_nat_gateways().filter(owned.filter()).send();
    let endpoints = aws.ec2.describe_vpc_endpoints().filters(owned.filter()).send();
    let (nats, endpoints) = futures::join!(nats, endpoints);
    let nats = nats.map_err(|e| classify("DescribeNatGateways", e))?;
    let endpoints = endpoints.map_err(|e| classify("DescribeVpcEndpoints", e))?;
    let mut named = Vec::new();
    for n in nats.nat_gateways().iter().filter(|n| owned.matches(n.tags())) {
        let by = format!("NAT gateway {}", n.nat_gateway_id().unwrap_or_default());
        named.extend(
            n.nat_gateway_addresses().iter().filter_map(|a| Some((a.network_interface_id()?.to_string(), by.clone()))),
        );
    }
    for v in endpoints.vpc_endpoints().iter().filter(|v| owned.matches(v.tags())) {
        let by = format!("VPC endpoint {}", v.vpc_endpoint_id().unwrap_or_default());
        named.extend(v.network_interface_ids().iter().map(|i| (i.clone(), by.clone())));
    }
    Ok(named)
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
    let tags = pairs(eni.tag_set());
    if let Some(owners) = crate::provenance::other_owners(&tags) {
        return Err(crate::provenance::two_owners("DeleteNetworkInterface", "network interface", id, &owners));
    }
    if let Some(instance) = eni.attachment().and_then(|a| a.instance_id()).filter(|_| !is_available(&eni)) {
        let ours = ownership_pairs(&tags);
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
