//! Everything one VPC holds that a check of its cluster compares (`infraflow check`): one read per
//! kind, side by side, filtered by the VPC, and nothing changed. The judging is the caller's;
//! this file only reads and flattens what AWS says into plain facts.

use aws_sdk_ec2::types::{Filter, VpcAttributeName};

use crate::adopt::pairs;
use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::security::IngressRule;
use crate::tags::{IDENTITY_TAG, TagQuery, filter};

/// The IAM actions this file calls (all reads).
pub const IAM_READ: &[&str] = &[
    "ec2:DescribeVpcs",
    "ec2:DescribeVpcAttribute",
    "ec2:DescribeSubnets",
    "ec2:DescribeRouteTables",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeNatGateways",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeVpcEndpoints",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcPeeringConnections",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeAddresses",
    "ec2:DescribeVolumes",
];
pub const IAM_WRITE: &[&str] = &[];
pub const IAM_DELETE: &[&str] = &[];

pub type Tags = Vec<(String, String)>;

/// What one VPC holds, as a check reads it.
#[derive(Clone, Debug, Default)]
pub struct VpcState {
    /// None: the VPC is gone.
    pub vpc: Option<VpcFacts>,
    pub subnets: Vec<SubnetFacts>,
    pub route_tables: Vec<TableFacts>,
    /// The internet gateways attached to the VPC.
    pub internet_gateways: Vec<(String, Tags)>,
    pub nat_gateways: Vec<NatFacts>,
    pub security_groups: Vec<GroupFacts>,
    pub endpoints: Vec<EndpointFacts>,
    pub interfaces: Vec<InterfaceFacts>,
    /// Peering connections of the VPC, either side, not deleted or refused.
    pub peerings: Vec<String>,
    /// The DHCP options sets carrying the identity `dhcp_identity`, each with every VPC using it.
    pub dhcp_options: Vec<DhcpFacts>,
}

#[derive(Clone, Debug, Default)]
pub struct VpcFacts {
    pub id: String,
    pub cidrs: Vec<String>,
    pub dhcp_options_id: String,
    pub dns_support: bool,
    pub dns_hostnames: bool,
    pub tags: Tags,
}

#[derive(Clone, Debug, Default)]
pub struct SubnetFacts {
    pub id: String,
    pub cidr: String,
    pub zone: String,
    pub tags: Tags,
}

#[derive(Clone, Debug, Default)]
pub struct TableFacts {
    pub id: String,
    pub tags: Tags,
    /// Where 0.0.0.0/0 goes (a NAT gateway's, gateway's or interface's id), and whether AWS calls
    /// the route a blackhole (its target gone).
    pub default_route: Option<(String, bool)>,
    pub subnets: Vec<String>,
    pub main: bool,
}

#[derive(Clone, Debug, Default)]
pub struct NatFacts {
    pub id: String,
    pub subnet: String,
    pub state: String,
    pub tags: Tags,
    /// Its network interfaces (they go with it).
    pub interfaces: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct GroupFacts {
    pub id: String,
    pub tags: Tags,
    pub ingress: Vec<IngressRule>,
}

#[derive(Clone, Debug, Default)]
pub struct EndpointFacts {
    pub id: String,
    pub service: String,
    pub state: String,
    pub route_tables: Vec<String>,
    pub tags: Tags,
    /// Its network interfaces (they go with it).
    pub interfaces: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct InterfaceFacts {
    pub id: String,
    pub subnet: String,
    pub status: String,
    pub description: String,
    pub requester_managed: bool,
    pub tags: Tags,
}

#[derive(Clone, Debug, Default)]
pub struct DhcpFacts {
    pub id: String,
    pub used_by: Vec<String>,
}

impl VpcState {
    /// What carries `identity` (`<infraID>/<role>[/<zone>]`) among the subnets.
    pub fn subnet(&self, identity: &str) -> Option<&SubnetFacts> {
        self.subnets.iter().find(|s| has_identity(&s.tags, identity))
    }

    pub fn table(&self, identity: &str) -> Option<&TableFacts> {
        self.route_tables.iter().find(|t| has_identity(&t.tags, identity))
    }

    pub fn nat(&self, identity: &str) -> Option<&NatFacts> {
        // A deleted NAT gateway stays listed for an hour: it is not the cluster's any more.
        self.nat_gateways.iter().find(|n| has_identity(&n.tags, identity) && n.state != "deleted")
    }

    pub fn endpoint(&self, identity: &str) -> Option<&EndpointFacts> {
        self.endpoints.iter().find(|e| has_identity(&e.tags, identity) && e.state != "deleted")
    }
}

pub fn has_identity(tags: &Tags, identity: &str) -> bool {
    tags.iter().any(|(k, v)| k == IDENTITY_TAG && v == identity)
}

/// Reads everything of `vpc_id` a check compares; `dhcp` is the DHCP options identity of the
/// cluster's (made network only). 12 reads side by side (13 with a DHCP set).
pub async fn read(aws: &Aws, vpc_id: &str, dhcp: Option<&TagQuery>) -> AwsResult<VpcState> {
    let by_vpc = || filter("vpc-id", &[vpc_id]);
    // Every VPC of the region (a handful): the cluster's, and those using its DHCP options.
    let vpcs = async {
        let out = aws.ec2.describe_vpcs().send().await.map_err(|e| classify("DescribeVpcs", e))?;
        Ok(out.vpcs().to_vec())
    };
    let attribute = |which: VpcAttributeName| async move {
        match crate::network::vpc_attribute_on(aws, vpc_id, which).await {
            Err(e) if e.is_not_found() => Ok(false),
            r => r,
        }
    };
    let subnets = async {
        let out =
            aws.ec2.describe_subnets().filters(by_vpc()).send().await.map_err(|e| classify("DescribeSubnets", e))?;
        Ok(out
            .subnets()
            .iter()
            .filter(|s| s.vpc_id() == Some(vpc_id))
            .map(|s| SubnetFacts {
                id: s.subnet_id().unwrap_or_default().into(),
                cidr: s.cidr_block().unwrap_or_default().into(),
                zone: s.availability_zone().unwrap_or_default().into(),
                tags: pairs(s.tags()),
            })
            .collect::<Vec<_>>())
    };
    let tables = async {
        let out = aws
            .ec2
            .describe_route_tables()
            .filters(by_vpc())
            .send()
            .await
            .map_err(|e| classify("DescribeRouteTables", e))?;
        Ok(out.route_tables().iter().filter(|t| t.vpc_id() == Some(vpc_id)).map(table_facts).collect::<Vec<_>>())
    };
    let igws = async {
        let out = aws
            .ec2
            .describe_internet_gateways()
            .filters(filter("attachment.vpc-id", &[vpc_id]))
            .send()
            .await
            .map_err(|e| classify("DescribeInternetGateways", e))?;
        Ok(out
            .internet_gateways()
            .iter()
            .filter(|g| g.attachments().iter().any(|a| a.vpc_id() == Some(vpc_id)))
            .map(|g| (g.internet_gateway_id().unwrap_or_default().to_string(), pairs(g.tags())))
            .collect::<Vec<_>>())
    };
    let nats = async {
        let out = aws
            .ec2
            .describe_nat_gateways()
            .filter(by_vpc())
            .send()
            .await
            .map_err(|e| classify("DescribeNatGateways", e))?;
        Ok(out
            .nat_gateways()
            .iter()
            .filter(|n| n.vpc_id() == Some(vpc_id))
            .map(|n| NatFacts {
                id: n.nat_gateway_id().unwrap_or_default().into(),
                subnet: n.subnet_id().unwrap_or_default().into(),
                state: n.state().map(|s| s.as_str().to_string()).unwrap_or_default(),
                tags: pairs(n.tags()),
                interfaces: n
                    .nat_gateway_addresses()
                    .iter()
                    .filter_map(|a| a.network_interface_id().map(str::to_string))
                    .collect(),
            })
            .collect::<Vec<_>>())
    };
    let groups = async {
        let out = aws
            .ec2
            .describe_security_groups()
            .filters(by_vpc())
            .send()
            .await
            .map_err(|e| classify("DescribeSecurityGroups", e))?;
        Ok(out
            .security_groups()
            .iter()
            .filter(|g| g.vpc_id() == Some(vpc_id))
            .map(|g| GroupFacts {
                id: g.group_id().unwrap_or_default().into(),
                tags: pairs(g.tags()),
                ingress: IngressRule::of(g.ip_permissions()),
            })
            .collect::<Vec<_>>())
    };
    let endpoints = async {
        let out = aws
            .ec2
            .describe_vpc_endpoints()
            .filters(by_vpc())
            .send()
            .await
            .map_err(|e| classify("DescribeVpcEndpoints", e))?;
        Ok(out
            .vpc_endpoints()
            .iter()
            .filter(|e| e.vpc_id() == Some(vpc_id))
            .map(|e| EndpointFacts {
                id: e.vpc_endpoint_id().unwrap_or_default().into(),
                service: e.service_name().unwrap_or_default().into(),
                state: e.state().map(|s| s.as_str().to_ascii_lowercase()).unwrap_or_default(),
                route_tables: e.route_table_ids().to_vec(),
                tags: pairs(e.tags()),
                interfaces: e.network_interface_ids().to_vec(),
            })
            .collect::<Vec<_>>())
    };
    let interfaces = async {
        let out = aws
            .ec2
            .describe_network_interfaces()
            .filters(by_vpc())
            .send()
            .await
            .map_err(|e| classify("DescribeNetworkInterfaces", e))?;
        Ok(out
            .network_interfaces()
            .iter()
            .filter(|n| n.vpc_id() == Some(vpc_id))
            .map(|n| InterfaceFacts {
                id: n.network_interface_id().unwrap_or_default().into(),
                subnet: n.subnet_id().unwrap_or_default().into(),
                status: n.status().map(|s| s.as_str().to_string()).unwrap_or_default(),
                description: n.description().unwrap_or_default().into(),
                requester_managed: n.requester_managed().unwrap_or(false),
                tags: pairs(n.tag_set()),
            })
            .collect::<Vec<_>>())
    };
    // Every peering of the region, judged here: EC2 cannot filter for either side at once.
    let peerings = async {
        let out = aws
            .ec2
            .describe_vpc_peering_connections()
            .send()
            .await
            .map_err(|e| classify("DescribeVpcPeeringConnections", e))?;
        Ok(out
            .vpc_peering_connections()
            .iter()
            .filter(|p| {
                let side = |i: Option<&aws_sdk_ec2::types::VpcPeeringConnectionVpcInfo>| {
                    i.and_then(|i| i.vpc_id()) == Some(vpc_id)
                };
                side(p.requester_vpc_info()) || side(p.accepter_vpc_info())
            })
            .filter(|p| {
                let code = p.status().and_then(|s| s.code()).map(|c| c.as_str().to_string()).unwrap_or_default();
                !matches!(code.as_str(), "deleted" | "rejected" | "failed" | "expired" | "deleting")
            })
            .filter_map(|p| p.vpc_peering_connection_id().map(str::to_string))
            .collect::<Vec<_>>())
    };
    let dhcp_sets = async {
        match dhcp {
            Some(q) => crate::network::find_dhcp_options(aws, q).await,
            None => Ok(Vec::new()),
        }
    };
    let (vpcs, (dns_support, dns_hostnames), (subnets, route_tables, internet_gateways, nat_gateways)) = futures::try_join!(
        vpcs,
        async {
            futures::try_join!(
                attribute(VpcAttributeName::EnableDnsSupport),
                attribute(VpcAttributeName::EnableDnsHostnames)
            )
        },
        async { futures::try_join!(subnets, tables, igws, nats) },
    )?;
    let (security_groups, endpoints, interfaces, peerings, dhcp_sets) =
        futures::try_join!(groups, endpoints, interfaces, peerings, dhcp_sets)?;
    let dhcp_options = dhcp_sets
        .into_iter()
        .map(|id| {
            let used_by = vpcs
                .iter()
                .filter(|v| v.dhcp_options_id() == Some(id.as_str()))
                .filter_map(|v| v.vpc_id().map(str::to_string))
                .collect();
            DhcpFacts { id, used_by }
        })
        .collect();
    let vpc = vpcs.iter().find(|v| v.vpc_id() == Some(vpc_id)).map(|v| VpcFacts {
        id: vpc_id.to_string(),
        cidrs: v.cidr_block_association_set().iter().filter_map(|a| a.cidr_block().map(str::to_string)).collect(),
        dhcp_options_id: v.dhcp_options_id().unwrap_or_default().into(),
        dns_support,
        dns_hostnames,
        tags: pairs(v.tags()),
    });
    Ok(VpcState {
        vpc,
        subnets,
        route_tables,
        internet_gateways,
        nat_gateways,
        security_groups,
        endpoints,
        interfaces,
        peerings,
        dhcp_options,
    })
}

fn table_facts(t: &aws_sdk_ec2::types::RouteTable) -> TableFacts {
    let default_route = t.routes().iter().find(|r| r.destination_cidr_block() == Some("0.0.0.0/0")).map(|r| {
        let target = r
            .nat_gateway_id()
            .or(r.gateway_id())
            .or(r.transit_gateway_id())
            .or(r.network_interface_id())
            .or(r.instance_id())
            .or(r.vpc_peering_connection_id())
            .unwrap_or_default()
            .to_string();
        let blackhole = r.state().is_some_and(|s| s.as_str() == "blackhole");
        (target, blackhole)
    });
    TableFacts {
        id: t.route_table_id().unwrap_or_default().into(),
        tags: pairs(t.tags()),
        default_route,
        subnets: t.associations().iter().filter_map(|a| a.subnet_id().map(str::to_string)).collect(),
        main: t.associations().iter().any(|a| a.main() == Some(true)),
    }
}

/// The cluster's addresses (its ownership tag) associated with nothing: (id, tags).
pub async fn unassociated_addresses(aws: &Aws, owned: &TagQuery) -> AwsResult<Vec<(String, Tags)>> {
    let out = aws
        .ec2
        .describe_addresses()
        .filters(owned.filter())
        .send()
        .await
        .map_err(|e| classify("DescribeAddresses", e))?;
    Ok(out
        .addresses()
        .iter()
        .filter(|a| owned.matches(a.tags()) && a.association_id().is_none())
        .map(|a| (a.allocation_id().unwrap_or_default().to_string(), pairs(a.tags())))
        .collect())
}

/// The cluster's volumes (its ownership tag) attached to nothing: (id, tags).
pub async fn available_volumes(aws: &Aws, owned: &TagQuery) -> AwsResult<Vec<(String, Tags)>> {
    let available: Filter = filter("status", &["available"]);
    let out = aws
        .ec2
        .describe_volumes()
        .filters(owned.filter())
        .filters(available)
        .send()
        .await
        .map_err(|e| classify("DescribeVolumes", e))?;
    Ok(out
        .volumes()
        .iter()
        .filter(|v| owned.matches(v.tags()) && v.state().is_some_and(|s| s.as_str() == "available"))
        .map(|v| (v.volume_id().unwrap_or_default().to_string(), pairs(v.tags())))
        .collect())
}
