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

/// Where a `hypershift create infra aws` run stopped (it has no rollback: a failure leaves what
/// it made so far).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Right after CreateVpc: no DNS attributes, nothing else.
    AfterVpc,
    /// After the first zone's two subnets: no address, NAT, route tables or endpoint.
    AfterFirstZoneSubnets,
    /// After the first zone's NAT gateway: its private route table never made.
    NatWithoutRouteTable,
    /// Every EC2 resource, before the private hosted zones.
    BeforeZones,
}

/// What a HyperShift run made, by role (`role` or `role/zone`): the ids it would put in its output.
pub type Made = std::collections::BTreeMap<String, String>;

/// Makes cluster `infra` the way HyperShift's CLI does (§1.5 of the HyperShift notes: its calls
/// in its order, its names, its tags; no infraflow code) in region us-east-1 with the default
/// 10.0.0.0/16, stopping at `cut`.
pub fn make(c: &Clients, infra: &str, zones: &[&str], cut: Cut) -> Made {
    use aws_sdk_ec2::types::{
        AttributeBooleanValue, DomainType, NewDhcpConfiguration, ResourceType, Tag, TagSpecification,
    };
    let tags = |name: Option<&str>, extra: &[(&str, &str)]| {
        let mut t = vec![Tag::builder().key(format!("kubernetes.io/cluster/{infra}")).value("owned").build()];
        if let Some(n) = name {
            t.push(Tag::builder().key("Name").value(n).build());
        }
        for (k, v) in extra {
            t.push(Tag::builder().key(*k).value(*v).build());
        }
        t
    };
    let spec = |kind: ResourceType, name: Option<&str>, extra: &[(&str, &str)]| {
        TagSpecification::builder().resource_type(kind).set_tags(Some(tags(name, extra))).build()
    };
    let mut made = Made::new();
    let ec2 = &c.ec2;
    c.block_on(async {
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .tag_specifications(spec(ResourceType::Vpc, Some(&format!("{infra}-vpc")), &[]))
            .send()
            .await
            .unwrap();
        let vpc = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        made.insert("vpc".into(), vpc.clone());
        if cut == Cut::AfterVpc {
            return;
        }
        let on = || AttributeBooleanValue::builder().value(true).build();
        ec2.modify_vpc_attribute().vpc_id(&vpc).enable_dns_support(on()).send().await.unwrap();
        ec2.modify_vpc_attribute().vpc_id(&vpc).enable_dns_hostnames(on()).send().await.unwrap();
        let conf = |k: &str, v: &str| NewDhcpConfiguration::builder().key(k).values(v).build();
        let dhcp = ec2
            .create_dhcp_options()
            .dhcp_configurations(conf("domain-name", "ec2.internal"))
            .dhcp_configurations(conf("domain-name-servers", "AmazonProvidedDNS"))
            .tag_specifications(spec(ResourceType::DhcpOptions, None, &[]))
            .send()
            .await
            .unwrap();
        let dhcp = dhcp.dhcp_options().unwrap().dhcp_options_id().unwrap().to_string();
        // moto drops the tags CreateDhcpOptions is given (AWS keeps them): written again, so the
        // set is what HyperShift leaves on AWS.
        ec2.create_tags().resources(&dhcp).set_tags(Some(tags(None, &[]))).send().await.unwrap();
        ec2.associate_dhcp_options().dhcp_options_id(&dhcp).vpc_id(&vpc).send().await.unwrap();
        made.insert("dhcp-options".into(), dhcp);
        let igw = ec2
            .create_internet_gateway()
            .tag_specifications(spec(ResourceType::InternetGateway, Some(&format!("{infra}-igw")), &[]))
            .send()
            .await
            .unwrap();
        let igw = igw.internet_gateway().unwrap().internet_gateway_id().unwrap().to_string();
        ec2.attach_internet_gateway().internet_gateway_id(&igw).vpc_id(&vpc).send().await.unwrap();
        made.insert("internet-gateway".into(), igw.clone());
        let mut tables = Vec::new();
        let mut publics = Vec::new();
        for (i, z) in zones.iter().enumerate() {
            let subnet = |kind: &'static str, cidr: String, role: (&'static str, &'static str)| {
                let name = format!("{infra}-{kind}-{z}");
                let vpc = vpc.clone();
                async move {
                    let s = ec2
                        .create_subnet()
                        .vpc_id(&vpc)
                        .cidr_block(cidr)
                        .availability_zone(*z)
                        .tag_specifications(spec(ResourceType::Subnet, Some(&name), &[role]))
                        .send()
                        .await
                        .unwrap();
                    s.subnet().unwrap().subnet_id().unwrap().to_string()
                }
            };
            let private =
                subnet("private", format!("10.0.{}.0/20", 128 + 16 * i), ("kubernetes.io/role/internal-elb", "1"))
                    .await;
            let public = subnet("public", format!("10.0.{}.0/20", 16 * i), ("kubernetes.io/role/elb", "1")).await;
            made.insert(format!("private-subnet/{z}"), private.clone());
            made.insert(format!("public-subnet/{z}"), public.clone());
            publics.push(public.clone());
            if cut == Cut::AfterFirstZoneSubnets {
                return;
            }
            // HyperShift allocates the address untagged, then tags it.
            let eip = ec2.allocate_address().domain(DomainType::Vpc).send().await.unwrap();
            let eip = eip.allocation_id().unwrap().to_string();
            ec2.create_tags()
                .resources(&eip)
                .set_tags(Some(tags(Some(&format!("{infra}-eip-{z}")), &[])))
                .send()
                .await
                .unwrap();
            made.insert(format!("eip/{z}"), eip.clone());
            let nat = ec2
                .create_nat_gateway()
                .allocation_id(&eip)
                .subnet_id(&public)
                .tag_specifications(spec(ResourceType::Natgateway, Some(&format!("{infra}-nat-{z}")), &[]))
                .send()
                .await
                .unwrap();
            let nat = nat.nat_gateway().unwrap().nat_gateway_id().unwrap().to_string();
            made.insert(format!("nat/{z}"), nat.clone());
            if cut == Cut::NatWithoutRouteTable {
                return;
            }
            let rt = ec2
                .create_route_table()
                .vpc_id(&vpc)
                .tag_specifications(spec(ResourceType::RouteTable, Some(&format!("{infra}-private-{z}")), &[]))
                .send()
                .await
                .unwrap();
            let rt = rt.route_table().unwrap().route_table_id().unwrap().to_string();
            ec2.create_route()
                .route_table_id(&rt)
                .destination_cidr_block("0.0.0.0/0")
                .nat_gateway_id(&nat)
                .send()
                .await
                .unwrap();
            ec2.associate_route_table().route_table_id(&rt).subnet_id(&private).send().await.unwrap();
            made.insert(format!("private-route-table/{z}"), rt.clone());
            tables.push(rt);
        }
        let public_rt = ec2
            .create_route_table()
            .vpc_id(&vpc)
            .tag_specifications(spec(ResourceType::RouteTable, Some(&format!("{infra}-public")), &[]))
            .send()
            .await
            .unwrap();
        let public_rt = public_rt.route_table().unwrap().route_table_id().unwrap().to_string();
        let main = ec2
            .describe_route_tables()
            .filters(Filter::builder().name("vpc-id").values(&vpc).build())
            .filters(Filter::builder().name("association.main").values("true").build())
            .send()
            .await
            .unwrap();
        let main_assoc = main.route_tables()[0]
            .associations()
            .iter()
            .find(|a| a.main() == Some(true))
            .and_then(|a| a.route_table_association_id())
            .unwrap()
            .to_string();
        ec2.replace_route_table_association()
            .association_id(main_assoc)
            .route_table_id(&public_rt)
            .send()
            .await
            .unwrap();
        ec2.create_route()
            .route_table_id(&public_rt)
            .destination_cidr_block("0.0.0.0/0")
            .gateway_id(&igw)
            .send()
            .await
            .unwrap();
        for s in &publics {
            ec2.associate_route_table().route_table_id(&public_rt).subnet_id(s).send().await.unwrap();
        }
        made.insert("public-route-table".into(), public_rt.clone());
        tables.push(public_rt);
        let vpce = ec2
            .create_vpc_endpoint()
            .vpc_id(&vpc)
            .service_name("com.amazonaws.us-east-1.s3")
            // HyperShift leaves the type unset, which AWS stores as Gateway (moto stores nothing).
            .vpc_endpoint_type(aws_sdk_ec2::types::VpcEndpointType::Gateway)
            .set_route_table_ids(Some(tables))
            .tag_specifications(spec(ResourceType::VpcEndpoint, None, &[]))
            .send()
            .await
            .unwrap();
        made.insert("s3-endpoint".into(), vpce.vpc_endpoint().unwrap().vpc_endpoint_id().unwrap().to_string());
    });
    made
}

/// HyperShift's last step: the private zones `<name>.<baseDomain>` and `<name>.hypershift.local`
/// on the cluster's VPC (its CreateHostedZone: no comment, a caller reference of its own), as a
/// HyperShift from before `setSOAMinimum` left them: Route53's default negative-caching day.
pub fn make_zones(c: &Clients, name: &str, base: &str, made: &mut Made) {
    use aws_sdk_route53::types::{HostedZoneConfig, Vpc, VpcRegion};
    let vpc = made["vpc"].clone();
    for (role, zone) in [("private-zone", format!("{name}.{base}")), ("local-zone", format!("{name}.hypershift.local"))]
    {
        let out = c
            .block_on(
                c.r53
                    .create_hosted_zone()
                    .name(&zone)
                    .caller_reference(format!("hypershift-{zone}"))
                    .vpc(Vpc::builder().vpc_id(&vpc).vpc_region(VpcRegion::UsEast1).build())
                    .hosted_zone_config(HostedZoneConfig::builder().private_zone(true).build())
                    .send(),
            )
            .unwrap();
        let id = out.hosted_zone().unwrap().id().trim_start_matches("/hostedzone/").to_string();
        made.insert(role.to_string(), id);
    }
}

/// HyperShift's keys of an output (`tests/fixtures/hypershift/<fixture>`, one key a line, in
/// its struct's field order, after a comment naming the source): each is in `out`, and `out`
/// has nothing else but `ours`.
pub fn assert_output_keys(out: &serde_json::Value, fixture: &str, ours: &[&str]) {
    let path = format!("{}/../tests/fixtures/hypershift/{fixture}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# HyperShift's") && text.contains("openshift/hypershift"), "{path}: its source first");
    let theirs: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    let keys: Vec<&str> = out.as_object().unwrap().keys().map(String::as_str).collect();
    for key in &theirs {
        assert!(keys.contains(key), "the output lacks HyperShift's {key}: {out}");
    }
    let extra: Vec<&&str> = keys.iter().filter(|k| !theirs.contains(k) && !ours.contains(k)).collect();
    assert!(extra.is_empty(), "keys neither HyperShift's nor infraflow's listed ones: {extra:?}");
}
