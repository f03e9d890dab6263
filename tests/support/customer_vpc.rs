//! A customer's network, made straight on moto as a customer's own tooling would (CloudFormation,
//! `rosa create network`): a VPC with DNS on, an internet gateway, per zone a public subnet routed
//! to it and a private subnet routed through a NAT gateway, an S3 gateway endpoint if asked; and
//! `snapshot`, everything in the VPC as text, to hold a teardown to "as it was".

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    AttributeBooleanValue, DomainType, Filter, ResourceType, Tag, TagSpecification, VpcEndpointType,
};
use serde_json::{Value, json};

use super::moto::Clients;

pub struct CustomerVpc {
    pub vpc: String,
    pub igw: String,
    /// Per zone: (zone, private subnet, public subnet).
    pub zones: Vec<(String, String, String)>,
    pub private_tables: Vec<String>,
    pub public_table: String,
}

fn named(kind: ResourceType, name: &str) -> TagSpecification {
    TagSpecification::builder().resource_type(kind).tags(Tag::builder().key("Name").value(name).build()).build()
}

fn vpc_filter(vpc: &str) -> Filter {
    Filter::builder().name("vpc-id").values(vpc).build()
}

impl CustomerVpc {
    /// The network of `prefix` (`10.1`) across `zones`; the first public subnet already carries
    /// `kubernetes.io/role/elb=1` (the customer's own, as ROSA's template writes it).
    pub fn make(c: &Clients, prefix: &str, zones: &[&str], s3_endpoint: bool) -> CustomerVpc {
        let ec2 = &c.ec2;
        let vpc = c
            .block_on(
                ec2.create_vpc()
                    .cidr_block(format!("{prefix}.0.0/16"))
                    .tag_specifications(named(ResourceType::Vpc, "customer"))
                    .send(),
            )
            .unwrap()
            .vpc()
            .unwrap()
            .vpc_id()
            .unwrap()
            .to_string();
        let on = AttributeBooleanValue::builder().value(true).build();
        c.block_on(ec2.modify_vpc_attribute().vpc_id(&vpc).enable_dns_support(on.clone()).send()).unwrap();
        c.block_on(ec2.modify_vpc_attribute().vpc_id(&vpc).enable_dns_hostnames(on).send()).unwrap();
        let igw = c
            .block_on(
                ec2.create_internet_gateway()
                    .tag_specifications(named(ResourceType::InternetGateway, "customer"))
                    .send(),
            )
            .unwrap()
            .internet_gateway()
            .unwrap()
            .internet_gateway_id()
            .unwrap()
            .to_string();
        c.block_on(ec2.attach_internet_gateway().internet_gateway_id(&igw).vpc_id(&vpc).send()).unwrap();
        let public_table = table(c, &vpc, "customer-public");
        c.block_on(
            ec2.create_route()
                .route_table_id(&public_table)
                .destination_cidr_block("0.0.0.0/0")
                .gateway_id(&igw)
                .send(),
        )
        .unwrap();
        let mut out =
            CustomerVpc { vpc: vpc.clone(), igw, zones: Vec::new(), private_tables: Vec::new(), public_table };
        for (i, zone) in zones.iter().enumerate() {
            let public =
                subnet(c, &vpc, &format!("{prefix}.{}.0/20", 16 * i), zone, &format!("customer-public-{zone}"));
            if i == 0 {
                let elb = Tag::builder().key("kubernetes.io/role/elb").value("1").build();
                c.block_on(ec2.create_tags().resources(&public).tags(elb).send()).unwrap();
            }
            let private =
                subnet(c, &vpc, &format!("{prefix}.{}.0/20", 128 + 16 * i), zone, &format!("customer-private-{zone}"));
            c.block_on(ec2.associate_route_table().route_table_id(&out.public_table).subnet_id(&public).send())
                .unwrap();
            let eip = c.block_on(ec2.allocate_address().domain(DomainType::Vpc).send()).unwrap();
            let nat = c
                .block_on(
                    ec2.create_nat_gateway().subnet_id(&public).allocation_id(eip.allocation_id().unwrap()).send(),
                )
                .unwrap()
                .nat_gateway()
                .unwrap()
                .nat_gateway_id()
                .unwrap()
                .to_string();
            let private_table = table(c, &vpc, &format!("customer-private-{zone}"));
            c.block_on(
                ec2.create_route()
                    .route_table_id(&private_table)
                    .destination_cidr_block("0.0.0.0/0")
                    .nat_gateway_id(&nat)
                    .send(),
            )
            .unwrap();
            c.block_on(ec2.associate_route_table().route_table_id(&private_table).subnet_id(&private).send()).unwrap();
            out.private_tables.push(private_table);
            out.zones.push((zone.to_string(), private, public));
        }
        if s3_endpoint {
            let mut call = ec2
                .create_vpc_endpoint()
                .vpc_id(&vpc)
                .vpc_endpoint_type(VpcEndpointType::Gateway)
                .service_name("com.amazonaws.us-east-1.s3");
            for t in &out.private_tables {
                call = call.route_table_ids(t);
            }
            c.block_on(call.send()).unwrap();
        }
        out
    }

    /// The provision input's `subnets`.
    pub fn subnets(&self) -> Value {
        json!(self
            .zones
            .iter()
            .map(|(zone, private, public)| json!({"zone": zone, "privateSubnetID": private, "publicSubnetID": public}))
            .collect::<Vec<_>>())
    }

    pub fn private_subnets(&self) -> Vec<String> {
        self.zones.iter().map(|(_, private, _)| private.clone()).collect()
    }
}

fn table(c: &Clients, vpc: &str, name: &str) -> String {
    let out = c.block_on(
        c.ec2.create_route_table().vpc_id(vpc).tag_specifications(named(ResourceType::RouteTable, name)).send(),
    );
    out.unwrap().route_table().unwrap().route_table_id().unwrap().to_string()
}

fn subnet(c: &Clients, vpc: &str, cidr: &str, zone: &str, name: &str) -> String {
    let out = c.block_on(
        c.ec2
            .create_subnet()
            .vpc_id(vpc)
            .cidr_block(cidr)
            .availability_zone(zone)
            .tag_specifications(named(ResourceType::Subnet, name))
            .send(),
    );
    out.unwrap().subnet().unwrap().subnet_id().unwrap().to_string()
}

fn tags(t: &[Tag]) -> BTreeMap<String, String> {
    t.iter().map(|t| (t.key().unwrap_or_default().to_string(), t.value().unwrap_or_default().to_string())).collect()
}

/// Everything in VPC `vpc` as text, one entry per resource: the VPC with its DNS attributes, its
/// subnets, route tables (routes and associations), gateways, NAT gateways, endpoints, security
/// groups, each with its tags.
pub fn snapshot(c: &Clients, vpc: &str) -> BTreeMap<String, String> {
    let ec2 = &c.ec2;
    let mut out = BTreeMap::new();
    let v = c.block_on(ec2.describe_vpcs().vpc_ids(vpc).send()).unwrap();
    let v = &v.vpcs()[0];
    let dns = |a| {
        let o = c.block_on(ec2.describe_vpc_attribute().vpc_id(vpc).attribute(a).send()).unwrap();
        format!(
            "{:?}/{:?}",
            o.enable_dns_support().and_then(|b| b.value()),
            o.enable_dns_hostnames().and_then(|b| b.value())
        )
    };
    out.insert(
        vpc.to_string(),
        format!(
            "{:?} {:?} dhcp={:?} dns={} {}",
            v.cidr_block(),
            tags(v.tags()),
            v.dhcp_options_id(),
            dns(aws_sdk_ec2::types::VpcAttributeName::EnableDnsSupport),
            dns(aws_sdk_ec2::types::VpcAttributeName::EnableDnsHostnames)
        ),
    );
    for s in c.block_on(ec2.describe_subnets().filters(vpc_filter(vpc)).send()).unwrap().subnets() {
        out.insert(
            s.subnet_id().unwrap().to_string(),
            format!("{:?} {:?} {:?}", s.cidr_block(), s.availability_zone(), tags(s.tags())),
        );
    }
    for t in c.block_on(ec2.describe_route_tables().filters(vpc_filter(vpc)).send()).unwrap().route_tables() {
        let mut routes: Vec<String> = t
            .routes()
            .iter()
            .map(|r| {
                format!(
                    "{:?}/{:?}->{:?}{:?}{:?}",
                    r.destination_cidr_block(),
                    r.destination_prefix_list_id(),
                    r.gateway_id(),
                    r.nat_gateway_id(),
                    r.state()
                )
            })
            .collect();
        routes.sort();
        let mut assoc: Vec<String> =
            t.associations().iter().map(|a| format!("{:?}{:?}", a.subnet_id(), a.main())).collect();
        assoc.sort();
        out.insert(t.route_table_id().unwrap().to_string(), format!("{routes:?} {assoc:?} {:?}", tags(t.tags())));
    }
    let attached = Filter::builder().name("attachment.vpc-id").values(vpc).build();
    for g in c.block_on(ec2.describe_internet_gateways().filters(attached).send()).unwrap().internet_gateways() {
        out.insert(g.internet_gateway_id().unwrap().to_string(), format!("{:?}", tags(g.tags())));
    }
    for n in c.block_on(ec2.describe_nat_gateways().filter(vpc_filter(vpc)).send()).unwrap().nat_gateways() {
        if n.vpc_id() == Some(vpc) {
            out.insert(n.nat_gateway_id().unwrap().to_string(), format!("{:?} {:?}", n.state(), tags(n.tags())));
        }
    }
    for e in c.block_on(ec2.describe_vpc_endpoints().filters(vpc_filter(vpc)).send()).unwrap().vpc_endpoints() {
        let state = e.state().map(|s| s.as_str().to_ascii_lowercase());
        if e.vpc_id() == Some(vpc) && state.as_deref() != Some("deleted") {
            let mut tables = e.route_table_ids().to_vec();
            tables.sort();
            out.insert(
                e.vpc_endpoint_id().unwrap().to_string(),
                format!("{:?} {tables:?} {:?}", e.service_name(), tags(e.tags())),
            );
        }
    }
    for g in c.block_on(ec2.describe_security_groups().filters(vpc_filter(vpc)).send()).unwrap().security_groups() {
        out.insert(g.group_id().unwrap().to_string(), format!("{:?} {:?}", g.group_name(), tags(g.tags())));
    }
    out
}
