//! HyperShift's CLI as it finds a cluster's resources (`cmd/infra/aws/ec2.go`: `ec2Filters`):
//! `tag:kubernetes.io/cluster/<infraID>=owned`, plus `tag:Name=<name>` where it names the role;
//! DHCP options and the S3 endpoint by the ownership tag alone; NAT gateways not deleted,
//! deleting or failed. Written from its code, not from infraflow's, so a test can ask whether
//! `hypershift create infra aws` would find (and reuse) what infraflow made.
#![allow(dead_code)]

use aws_sdk_ec2::types::Filter;

use super::moto::Clients;

/// The roles HyperShift looks up, each with the Name it gives (None: ownership tag only).
pub fn roles(infra: &str, zones: &[&str]) -> Vec<(&'static str, Option<String>)> {
    let mut r = vec![
        ("vpc", Some(format!("{infra}-vpc"))),
        ("dhcp-options", None),
        ("internet-gateway", Some(format!("{infra}-igw"))),
        ("public-route-table", Some(format!("{infra}-public"))),
        ("vpc-endpoint", None),
    ];
    for z in zones {
        r.push(("private-subnet", Some(format!("{infra}-private-{z}"))));
        r.push(("public-subnet", Some(format!("{infra}-public-{z}"))));
        r.push(("nat-gateway", Some(format!("{infra}-nat-{z}"))));
        r.push(("private-route-table", Some(format!("{infra}-private-{z}"))));
    }
    r
}

fn filters(infra: &str, name: Option<&str>) -> Vec<Filter> {
    let mut f = vec![Filter::builder().name(format!("tag:kubernetes.io/cluster/{infra}")).values("owned").build()];
    if let Some(n) = name {
        f.push(Filter::builder().name("tag:Name").values(n).build());
    }
    f
}

/// The ids HyperShift's lookup for `role` lists (it takes the first).
pub fn lookup(c: &Clients, infra: &str, role: &str, name: Option<&str>) -> Vec<String> {
    let f = Some(filters(infra, name));
    let ec2 = &c.ec2;
    let ids: Vec<String> = match role {
        "vpc" => c
            .block_on(ec2.describe_vpcs().set_filters(f).send())
            .unwrap()
            .vpcs()
            .iter()
            .filter_map(|v| v.vpc_id().map(str::to_string))
            .collect(),
        "dhcp-options" => c
            .block_on(ec2.describe_dhcp_options().set_filters(f).send())
            .unwrap()
            .dhcp_options()
            .iter()
            .filter_map(|d| d.dhcp_options_id().map(str::to_string))
            .collect(),
        "internet-gateway" => c
            .block_on(ec2.describe_internet_gateways().set_filters(f).send())
            .unwrap()
            .internet_gateways()
            .iter()
            .filter_map(|g| g.internet_gateway_id().map(str::to_string))
            .collect(),
        "private-subnet" | "public-subnet" => c
            .block_on(ec2.describe_subnets().set_filters(f).send())
            .unwrap()
            .subnets()
            .iter()
            .filter_map(|s| s.subnet_id().map(str::to_string))
            .collect(),
        // moto ignores DescribeNatGateways' tag filters (MOTO-NOTES); AWS applies them, as here.
        "nat-gateway" => c
            .block_on(ec2.describe_nat_gateways().set_filter(f).send())
            .unwrap()
            .nat_gateways()
            .iter()
            .filter(|n| {
                let has = |k: &str, v: &str| n.tags().iter().any(|t| t.key() == Some(k) && t.value() == Some(v));
                has(&format!("kubernetes.io/cluster/{infra}"), "owned") && name.is_none_or(|want| has("Name", want))
            })
            .filter(|n| !matches!(n.state().map(|s| s.as_str()), Some("deleted" | "deleting" | "failed")))
            .filter_map(|n| n.nat_gateway_id().map(str::to_string))
            .collect(),
        "private-route-table" | "public-route-table" => c
            .block_on(ec2.describe_route_tables().set_filters(f).send())
            .unwrap()
            .route_tables()
            .iter()
            .filter_map(|t| t.route_table_id().map(str::to_string))
            .collect(),
        "vpc-endpoint" => c
            .block_on(ec2.describe_vpc_endpoints().set_filters(f).send())
            .unwrap()
            .vpc_endpoints()
            .iter()
            .filter_map(|e| e.vpc_endpoint_id().map(str::to_string))
            .collect(),
        other => panic!("HyperShift looks up no {other}"),
    };
    ids
}
