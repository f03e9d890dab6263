//! A network the customer made (bring your own VPC): read as it is — the VPC's CIDRs and DNS
//! attributes, each named subnet's VPC, zone and the default route of its route table, the VPC's
//! S3 gateway endpoints — for the rules a cluster's preflight checks (`workflows`), and the marks
//! a cluster puts on it and takes off again (`marks`). Nothing here creates or deletes a resource.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{RouteTable, VpcAttributeName};
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::{IDENTITY_TAG, filter};

pub mod marks;
pub mod riders;

pub use marks::{MARKS_PREFIX, Marked, mark, marks_of, marks_to_remove, record_key, unmark};

/// The IAM actions of the reads (what `infraflow policy` grants; proven complete by the AWS suites
/// through the counting proxy).
pub const IAM_READ: &[&str] = &[
    "ec2:DescribeVpcs",
    "ec2:DescribeVpcAttribute",
    "ec2:DescribeSubnets",
    "ec2:DescribeRouteTables",
    "ec2:DescribeVpcEndpoints",
    "ec2:DescribeTags",
];
/// The marks: tags added to the customer's subnets and VPC.
pub const IAM_WRITE: &[&str] = &["ec2:CreateTags", "ec2:DeleteTags"];
/// Taking the marks off again (teardown): nothing of the customer's is ever deleted.
pub const IAM_DELETE: &[&str] = &["ec2:DeleteTags"];

/// Where a route table's default route (`0.0.0.0/0`) goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "id")]
pub enum DefaultRoute {
    InternetGateway(String),
    NatGateway(String),
    TransitGateway(String),
    /// A proxy or NAT instance (by instance or network interface id).
    Instance(String),
    /// Anything else (a peering, a VPC endpoint, a carrier or egress-only gateway), or a route
    /// whose target is gone (`blackhole`).
    Other(String),
    None,
}

/// A subnet as the customer made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomerSubnet {
    pub subnet_id: String,
    pub vpc_id: String,
    pub zone: String,
    pub zone_id: String,
    pub cidr: String,
    /// The route table it uses: its explicit association, else the VPC's main table.
    pub route_table: Option<String>,
    pub default_route: DefaultRoute,
    pub tags: BTreeMap<String, String>,
    /// The account that owns it: another's is a subnet shared to this one (RAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
}

/// A gateway endpoint in the customer's VPC, with the infraflow identity it carries, if any.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayEndpoint {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

/// The customer's VPC and the subnets named for the cluster, as read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomerNetwork {
    pub vpc_id: String,
    /// False: no such VPC in the region (nothing else is read then).
    pub exists: bool,
    pub cidrs: Vec<String>,
    pub dns_support: bool,
    pub dns_hostnames: bool,
    /// The subnets found, by id; a named subnet missing here does not exist in the region.
    pub subnets: BTreeMap<String, CustomerSubnet>,
    /// S3 gateway endpoints already in the VPC, any maker's: when one is not the cluster's own,
    /// the cluster makes none.
    pub s3_gateway_endpoints: Vec<GatewayEndpoint>,
    pub tags: BTreeMap<String, String>,
    /// The region's default VPC.
    #[serde(default)]
    pub is_default: bool,
    /// The account that owns the VPC: another's is a VPC shared to this one (RAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
}

/// Reads VPC `vpc_id` and subnets `subnet_ids` (found by filter, so that an unknown id is
/// reported, not an error), with everything the preflight's rules judge. Reads only.
pub async fn read(aws: &Aws, vpc_id: &str, subnet_ids: &[String]) -> AwsResult<CustomerNetwork> {
    let mut net = CustomerNetwork { vpc_id: vpc_id.to_string(), ..Default::default() };
    let vpcs = aws
        .ec2
        .describe_vpcs()
        .filters(filter("vpc-id", &[vpc_id]))
        .send()
        .await
        .map_err(|e| classify("DescribeVpcs", e))?;
    let Some(vpc) = vpcs.vpcs().iter().find(|v| v.vpc_id() == Some(vpc_id)) else {
        return Ok(net);
    };
    net.exists = true;
    net.cidrs = vpc
        .cidr_block_association_set()
        .iter()
        .filter(|a| a.cidr_block_state().and_then(|s| s.state()).is_none_or(|s| s.as_str() == "associated"))
        .filter_map(|a| a.cidr_block().map(str::to_string))
        .collect();
    if net.cidrs.is_empty() {
        net.cidrs.extend(vpc.cidr_block().map(str::to_string));
    }
    net.tags = crate::adopt::pairs(vpc.tags()).into_iter().collect();
    net.is_default = vpc.is_default() == Some(true);
    net.owner_id = vpc.owner_id().map(str::to_string);
    let ids: Vec<&str> = subnet_ids.iter().map(String::as_str).collect();
    let (support, hostnames, subnets, tables, endpoints) = futures::try_join!(
        crate::network::vpc_attribute_on(aws, vpc_id, VpcAttributeName::EnableDnsSupport),
        crate::network::vpc_attribute_on(aws, vpc_id, VpcAttributeName::EnableDnsHostnames),
        async {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let out = aws
                .ec2
                .describe_subnets()
                .filters(filter("subnet-id", &ids))
                .send()
                .await
                .map_err(|e| classify("DescribeSubnets", e))?;
            Ok(out.subnets().to_vec())
        },
        async {
            let out = aws
                .ec2
                .describe_route_tables()
                .filters(filter("vpc-id", &[vpc_id]))
                .send()
                .await
                .map_err(|e| classify("DescribeRouteTables", e))?;
            Ok(out.route_tables().to_vec())
        },
        async {
            let service = format!("com.amazonaws.{}.s3", aws.region);
            let out = aws
                .ec2
                .describe_vpc_endpoints()
                .filters(filter("vpc-id", &[vpc_id]))
                .filters(filter("service-name", &[&service]))
                .send()
                .await
                .map_err(|e| classify("DescribeVpcEndpoints", e))?;
            Ok(out
                .vpc_endpoints()
                .iter()
                // Some implementations ignore a filter: each is checked on what came back.
                .filter(|e| e.vpc_id() == Some(vpc_id) && e.service_name() == Some(service.as_str()))
                .filter(|e| e.vpc_endpoint_type().is_some_and(|t| t.as_str() == "Gateway"))
                .filter(|e| {
                    let state = e.state().map(|s| s.as_str().to_ascii_lowercase()).unwrap_or_default();
                    !matches!(state.as_str(), "deleted" | "deleting") && crate::endpoints::adoptable(&state)
                })
                .filter_map(|e| {
                    let identity = e.tags().iter().find(|t| t.key() == Some(IDENTITY_TAG)).and_then(|t| t.value());
                    Some(GatewayEndpoint {
                        id: e.vpc_endpoint_id()?.to_string(),
                        identity: identity.map(str::to_string),
                    })
                })
                .collect::<Vec<_>>())
        },
    )?;
    net.dns_support = support;
    net.dns_hostnames = hostnames;
    net.s3_gateway_endpoints = endpoints;
    for s in subnets.iter().filter(|s| s.subnet_id().is_some_and(|id| subnet_ids.iter().any(|n| n == id))) {
        let subnet_id = s.subnet_id().unwrap_or_default().to_string();
        let table = table_of(&tables, &subnet_id, s.vpc_id().unwrap_or_default());
        net.subnets.insert(
            subnet_id.clone(),
            CustomerSubnet {
                subnet_id,
                vpc_id: s.vpc_id().unwrap_or_default().to_string(),
                zone: s.availability_zone().unwrap_or_default().to_string(),
                zone_id: s.availability_zone_id().unwrap_or_default().to_string(),
                cidr: s.cidr_block().unwrap_or_default().to_string(),
                route_table: table.and_then(|t| t.route_table_id()).map(str::to_string),
                default_route: table.map(default_route).unwrap_or(DefaultRoute::None),
                tags: crate::adopt::pairs(s.tags()).into_iter().collect(),
                owner_id: s.owner_id().map(str::to_string),
            },
        );
    }
    Ok(net)
}

/// The table subnet `subnet` uses: the one explicitly associated with it, else its VPC's main one.
fn table_of<'a>(tables: &'a [RouteTable], subnet: &str, vpc: &str) -> Option<&'a RouteTable> {
    let explicit = tables.iter().find(|t| t.associations().iter().any(|a| a.subnet_id() == Some(subnet)));
    explicit.or_else(|| {
        tables.iter().find(|t| t.vpc_id() == Some(vpc) && t.associations().iter().any(|a| a.main() == Some(true)))
    })
}

fn default_route(table: &RouteTable) -> DefaultRoute {
    let Some(r) = table.routes().iter().find(|r| r.destination_cidr_block() == Some("0.0.0.0/0")) else {
        return DefaultRoute::None;
    };
    if r.state().is_some_and(|s| s.as_str() == "blackhole") {
        return DefaultRoute::Other("blackhole".into());
    }
    if let Some(nat) = r.nat_gateway_id() {
        return DefaultRoute::NatGateway(nat.to_string());
    }
    if let Some(tgw) = r.transit_gateway_id() {
        return DefaultRoute::TransitGateway(tgw.to_string());
    }
    if let Some(instance) = r.instance_id().or(r.network_interface_id()) {
        return DefaultRoute::Instance(instance.to_string());
    }
    match r.gateway_id() {
        Some(igw) if igw.starts_with("igw-") => DefaultRoute::InternetGateway(igw.to_string()),
        Some(other) => DefaultRoute::Other(other.to_string()),
        None => DefaultRoute::Other(
            r.vpc_peering_connection_id()
                .or(r.egress_only_internet_gateway_id())
                .or(r.carrier_gateway_id())
                .unwrap_or("an unknown target")
                .to_string(),
        ),
    }
}
