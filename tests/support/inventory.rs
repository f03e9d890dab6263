//! What a cluster owns in the emulator, read through the SDK by ownership tag, and the exact
//! inventory provision-infra must leave.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::Filter;

use super::moto::Clients;

#[derive(Debug, Default)]
pub struct Inventory {
    pub vpcs: Vec<aws_sdk_ec2::types::Vpc>,
    pub dhcp: Vec<aws_sdk_ec2::types::DhcpOptions>,
    pub igws: Vec<aws_sdk_ec2::types::InternetGateway>,
    pub subnets: Vec<aws_sdk_ec2::types::Subnet>,
    pub eips: Vec<aws_sdk_ec2::types::Address>,
    pub nats: Vec<aws_sdk_ec2::types::NatGateway>,
    pub route_tables: Vec<aws_sdk_ec2::types::RouteTable>,
    pub security_groups: Vec<aws_sdk_ec2::types::SecurityGroup>,
    pub endpoints: Vec<aws_sdk_ec2::types::VpcEndpoint>,
    /// (zone id, name, associated VPC ids)
    pub zones: Vec<(String, String, Vec<String>)>,
}

fn has_owned(tags: &[aws_sdk_ec2::types::Tag], infra: &str) -> bool {
    let key = format!("kubernetes.io/cluster/{infra}");
    tags.iter().any(|t| t.key() == Some(key.as_str()) && t.value() == Some("owned"))
}

fn owned(infra: &str) -> Filter {
    Filter::builder().name(format!("tag:kubernetes.io/cluster/{infra}")).values("owned").build()
}

impl Inventory {
    pub fn read(c: &Clients, infra: &str) -> Inventory {
        c.block_on(async {
            let ec2 = &c.ec2;
            let mut inv = Inventory {
                vpcs: ec2.describe_vpcs().filters(owned(infra)).send().await.unwrap().vpcs().to_vec(),
                dhcp: ec2.describe_dhcp_options().filters(owned(infra)).send().await.unwrap().dhcp_options().to_vec(),
                igws: ec2
                    .describe_internet_gateways()
                    .filters(owned(infra))
                    .send()
                    .await
                    .unwrap()
                    .internet_gateways()
                    .to_vec(),
                subnets: ec2.describe_subnets().filters(owned(infra)).send().await.unwrap().subnets().to_vec(),
                eips: ec2.describe_addresses().filters(owned(infra)).send().await.unwrap().addresses().to_vec(),
                nats: ec2
                    .describe_nat_gateways()
                    .filter(owned(infra))
                    .send()
                    .await
                    .unwrap()
                    .nat_gateways()
                    .iter()
                    // moto ignores tag filters on DescribeNatGateways: check the tags here.
                    .filter(|n| has_owned(n.tags(), infra))
                    .filter(|n| !matches!(n.state().map(|s| s.as_str()), Some("deleted") | Some("deleting")))
                    .cloned()
                    .collect(),
                route_tables: ec2
                    .describe_route_tables()
                    .filters(owned(infra))
                    .send()
                    .await
                    .unwrap()
                    .route_tables()
                    .to_vec(),
                security_groups: ec2
                    .describe_security_groups()
                    .filters(owned(infra))
                    .send()
                    .await
                    .unwrap()
                    .security_groups()
                    .to_vec(),
                endpoints: ec2
                    .describe_vpc_endpoints()
                    .filters(owned(infra))
                    .send()
                    .await
                    .unwrap()
                    .vpc_endpoints()
                    .iter()
                    .filter(|e| {
                        !matches!(
                            e.state().map(|s| s.as_str().to_ascii_lowercase()).as_deref(),
                            Some("deleted") | Some("deleting")
                        )
                    })
                    .cloned()
                    .collect(),
                zones: Vec::new(),
            };
            // Every page: a sweep leaves more than the hundred zones of one.
            let mut all = Vec::new();
            let mut marker: Option<String> = None;
            loop {
                let page = c.r53.list_hosted_zones().set_marker(marker.clone()).send().await.unwrap();
                all.extend(page.hosted_zones().iter().cloned());
                match page.next_marker() {
                    Some(m) if page.is_truncated() => marker = Some(m.to_string()),
                    _ => break,
                }
            }
            for z in &all {
                let id = z.id().trim_start_matches("/hostedzone/").to_string();
                let tags = c
                    .r53
                    .list_tags_for_resource()
                    .resource_type(aws_sdk_route53::types::TagResourceType::Hostedzone)
                    .resource_id(&id)
                    .send()
                    .await
                    .unwrap();
                let key = format!("kubernetes.io/cluster/{infra}");
                let is_owned = tags
                    .resource_tag_set()
                    .map(|s| s.tags().iter().any(|t| t.key() == Some(key.as_str()) && t.value() == Some("owned")))
                    .unwrap_or(false);
                if is_owned {
                    let full = c.r53.get_hosted_zone().id(&id).send().await.unwrap();
                    let vpcs = full.vpcs().iter().filter_map(|v| v.vpc_id().map(str::to_string)).collect();
                    inv.zones.push((id, z.name().to_string(), vpcs));
                }
            }
            inv
        })
    }

    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        BTreeMap::from([
            ("vpc", self.vpcs.len()),
            ("dhcp-options", self.dhcp.len()),
            ("internet-gateway", self.igws.len()),
            ("subnet", self.subnets.len()),
            ("elastic-ip", self.eips.len()),
            ("nat-gateway", self.nats.len()),
            ("route-table", self.route_tables.len()),
            ("security-group", self.security_groups.len()),
            ("vpc-endpoint", self.endpoints.len()),
            ("hosted-zone", self.zones.len()),
        ])
    }

    pub fn total(&self) -> usize {
        self.counts().values().sum()
    }

    /// Every id, for comparing two reads.
    pub fn ids(&self) -> BTreeSet<String> {
        let mut s = BTreeSet::new();
        s.extend(self.vpcs.iter().filter_map(|v| v.vpc_id().map(str::to_string)));
        s.extend(self.dhcp.iter().filter_map(|v| v.dhcp_options_id().map(str::to_string)));
        s.extend(self.igws.iter().filter_map(|v| v.internet_gateway_id().map(str::to_string)));
        s.extend(self.subnets.iter().filter_map(|v| v.subnet_id().map(str::to_string)));
        s.extend(self.eips.iter().filter_map(|v| v.allocation_id().map(str::to_string)));
        s.extend(self.nats.iter().filter_map(|v| v.nat_gateway_id().map(str::to_string)));
        s.extend(self.route_tables.iter().filter_map(|v| v.route_table_id().map(str::to_string)));
        s.extend(self.security_groups.iter().filter_map(|v| v.group_id().map(str::to_string)));
        s.extend(self.endpoints.iter().filter_map(|v| v.vpc_endpoint_id().map(str::to_string)));
        s.extend(self.zones.iter().map(|z| z.0.clone()));
        s
    }

    /// The tags of the EC2 resource `id` (empty if it is not in this read).
    pub fn tags_of(&self, id: &str) -> Vec<(String, String)> {
        use aws_sdk_ec2::types::Tag;
        let pick = |tags: &[Tag]| -> Vec<(String, String)> {
            tags.iter()
                .map(|t| (t.key().unwrap_or_default().to_string(), t.value().unwrap_or_default().to_string()))
                .collect()
        };
        let found: Option<&[Tag]> = None
            .or(self.vpcs.iter().find(|v| v.vpc_id() == Some(id)).map(|v| v.tags()))
            .or(self.dhcp.iter().find(|v| v.dhcp_options_id() == Some(id)).map(|v| v.tags()))
            .or(self.igws.iter().find(|v| v.internet_gateway_id() == Some(id)).map(|v| v.tags()))
            .or(self.subnets.iter().find(|v| v.subnet_id() == Some(id)).map(|v| v.tags()))
            .or(self.eips.iter().find(|v| v.allocation_id() == Some(id)).map(|v| v.tags()))
            .or(self.nats.iter().find(|v| v.nat_gateway_id() == Some(id)).map(|v| v.tags()))
            .or(self.route_tables.iter().find(|v| v.route_table_id() == Some(id)).map(|v| v.tags()))
            .or(self.security_groups.iter().find(|v| v.group_id() == Some(id)).map(|v| v.tags()))
            .or(self.endpoints.iter().find(|v| v.vpc_endpoint_id() == Some(id)).map(|v| v.tags()));
        found.map(pick).unwrap_or_default()
    }

    /// `assert_provisioned` for a cluster that also has PrivateLink: one more security group (the
    /// endpoint's) and one more VPC endpoint (the interface one).
    pub fn assert_provisioned_with_extras(&self, c: &Clients, zones: usize, nats: usize, name: &str, base: &str) {
        let counts = self.counts();
        assert_eq!(counts["security-group"], 2, "worker and endpoint security groups");
        assert_eq!(counts["vpc-endpoint"], 2, "S3 gateway and PrivateLink interface endpoints");
        let mut core = Inventory { ..self.clone_core() };
        core.security_groups.retain(|g| g.group_name().is_some_and(|n| n.ends_with("-worker-sg")));
        core.endpoints.retain(|e| e.vpc_endpoint_type().map(|t| t.as_str()) == Some("Gateway"));
        core.assert_provisioned(c, zones, nats, name, base);
    }

    fn clone_core(&self) -> Inventory {
        Inventory {
            vpcs: self.vpcs.clone(),
            dhcp: self.dhcp.clone(),
            igws: self.igws.clone(),
            subnets: self.subnets.clone(),
            eips: self.eips.clone(),
            nats: self.nats.clone(),
            route_tables: self.route_tables.clone(),
            security_groups: self.security_groups.clone(),
            endpoints: self.endpoints.clone(),
            zones: self.zones.clone(),
        }
    }

    /// Asserts exactly what provision-infra makes for `zones` zones with `nats` NAT gateways
    /// (region us-east-1, 10.0.0.0/16, cluster name `name`, base domain `base`).
    pub fn assert_provisioned(&self, c: &Clients, zones: usize, nats: usize, name: &str, base: &str) {
        let counts = self.counts();
        let expected = BTreeMap::from([
            ("vpc", 1),
            ("dhcp-options", 1),
            ("internet-gateway", 1),
            ("subnet", 2 * zones),
            ("elastic-ip", nats),
            ("nat-gateway", nats),
            ("route-table", zones + 1),
            ("security-group", 1),
            ("vpc-endpoint", 1),
            ("hosted-zone", 2),
        ]);
        assert_eq!(counts, expected, "inventory by kind");

        let vpc = &self.vpcs[0];
        let vpc_id = vpc.vpc_id().unwrap();
        assert_eq!(vpc.cidr_block(), Some("10.0.0.0/16"));
        c.block_on(async {
            use aws_sdk_ec2::types::VpcAttributeName;
            for attr in [VpcAttributeName::EnableDnsSupport, VpcAttributeName::EnableDnsHostnames] {
                let a = c.ec2.describe_vpc_attribute().vpc_id(vpc_id).attribute(attr.clone()).send().await.unwrap();
                let on = a.enable_dns_support().or(a.enable_dns_hostnames()).and_then(|v| v.value());
                assert_eq!(on, Some(true), "{attr:?}");
            }
        });
        assert_eq!(vpc.dhcp_options_id(), self.dhcp[0].dhcp_options_id(), "DHCP options associated");
        let domain: Vec<_> = self.dhcp[0]
            .dhcp_configurations()
            .iter()
            .filter(|d| d.key() == Some("domain-name"))
            .flat_map(|d| d.values().iter().filter_map(|v| v.value()))
            .collect();
        assert_eq!(domain, ["ec2.internal"]);
        assert!(self.igws[0].attachments().iter().any(|a| a.vpc_id() == Some(vpc_id)), "IGW attached");

        let cidrs: BTreeSet<&str> = self.subnets.iter().filter_map(|s| s.cidr_block()).collect();
        let want: BTreeSet<String> =
            (0..zones).flat_map(|i| [format!("10.0.{}.0/20", 16 * i), format!("10.0.{}.0/20", 128 + 16 * i)]).collect();
        assert_eq!(cidrs, want.iter().map(String::as_str).collect(), "HyperShift's subnet layout");
        assert!(self.subnets.iter().all(|s| s.vpc_id() == Some(vpc_id)));
        assert!(self.nats.iter().all(|n| n.state().map(|s| s.as_str()) == Some("available")));

        let public_subnets: BTreeSet<&str> = self
            .subnets
            .iter()
            .filter(|s| s.cidr_block().is_some_and(|c| c.split('.').nth(2).unwrap().parse::<u32>().unwrap() < 128))
            .filter_map(|s| s.subnet_id())
            .collect();
        let igw = self.igws[0].internet_gateway_id().unwrap();
        let nat_ids: BTreeSet<&str> = self.nats.iter().filter_map(|n| n.nat_gateway_id()).collect();
        // AWS drops a deleted subnet's associations; moto keeps them (a compensated subnet's,
        // say): only associations of subnets that exist count.
        let existing = c.block_on(c.ec2.describe_subnets().send()).unwrap();
        let existing: BTreeSet<&str> = existing.subnets().iter().filter_map(|s| s.subnet_id()).collect();
        let mut private_tables = 0;
        for t in &self.route_tables {
            let default =
                t.routes().iter().find(|r| r.destination_cidr_block() == Some("0.0.0.0/0")).expect("default route");
            let assoc: BTreeSet<&str> =
                t.associations().iter().filter_map(|a| a.subnet_id()).filter(|s| existing.contains(s)).collect();
            if default.gateway_id() == Some(igw) {
                assert!(
                    t.associations().iter().any(|a| a.main() == Some(true)),
                    "public table is the VPC's main table"
                );
                assert_eq!(assoc, public_subnets, "public table associated with every public subnet");
            } else {
                assert!(nat_ids.contains(default.nat_gateway_id().unwrap_or("")), "private table routes via our NAT");
                assert_eq!(assoc.len(), 1, "private table associated with its private subnet");
                assert!(!public_subnets.contains(assoc.iter().next().unwrap()));
                private_tables += 1;
            }
        }
        assert_eq!(private_tables, zones);
        assert!(self.security_groups[0].ip_permissions().len() >= 10, "worker ingress rules");
        let ep = &self.endpoints[0];
        assert_eq!(ep.vpc_endpoint_type().map(|t| t.as_str()), Some("Gateway"));
        assert_eq!(ep.service_name(), Some("com.amazonaws.us-east-1.s3"));
        assert_eq!(ep.route_table_ids().len(), zones + 1, "S3 endpoint on every route table");
        let names: BTreeSet<&str> = self.zones.iter().map(|z| z.1.as_str()).collect();
        let want_names = BTreeSet::from([format!("{name}.{base}."), format!("{name}.hypershift.local.")]);
        assert_eq!(names, want_names.iter().map(String::as_str).collect());
        assert!(self.zones.iter().all(|z| z.2 == [vpc_id.to_string()]), "private zones associated with the VPC");
        for (zone, zone_name, _) in &self.zones {
            assert_eq!(soa_minimum(c, zone), 60, "zone {zone_name}: HyperShift's negative-caching TTL");
        }
        self.assert_hypershift_tags(name);
    }

    /// What infraflow made (a created-by tag) carries HyperShift's infra-id and cluster-name tags,
    /// never its `source=cli`, and the private subnets Karpenter's discovery tag.
    pub fn assert_hypershift_tags(&self, name: &str) {
        let vpc_tags = self.vpcs[0].tags();
        let infra = vpc_tags
            .iter()
            .find_map(|t| t.key()?.strip_prefix("kubernetes.io/cluster/"))
            .expect("the VPC's ownership tag");
        let tagged: Vec<(&str, &[aws_sdk_ec2::types::Tag])> = self
            .vpcs
            .iter()
            .map(|v| (v.vpc_id().unwrap_or_default(), v.tags()))
            .chain(self.subnets.iter().map(|s| (s.subnet_id().unwrap_or_default(), s.tags())))
            .chain(self.igws.iter().map(|g| (g.internet_gateway_id().unwrap_or_default(), g.tags())))
            .chain(self.nats.iter().map(|n| (n.nat_gateway_id().unwrap_or_default(), n.tags())))
            .chain(self.route_tables.iter().map(|t| (t.route_table_id().unwrap_or_default(), t.tags())))
            .chain(self.security_groups.iter().map(|g| (g.group_id().unwrap_or_default(), g.tags())))
            .chain(self.endpoints.iter().map(|e| (e.vpc_endpoint_id().unwrap_or_default(), e.tags())))
            .collect();
        let tag = |tags: &[aws_sdk_ec2::types::Tag], k: &str| {
            tags.iter().find(|t| t.key() == Some(k)).and_then(|t| t.value()).map(str::to_string)
        };
        for (id, tags) in tagged {
            assert_eq!(tag(tags, "hypershift.openshift.io/source"), None, "{id}: infraflow is not HyperShift's CLI");
            if tag(tags, "infraflow.io/created-by").is_none() {
                continue;
            }
            assert_eq!(tag(tags, "hypershift.openshift.io/infra-id").as_deref(), Some(infra), "{id}: {tags:?}");
            assert_eq!(tag(tags, "hypershift.openshift.io/cluster-name").as_deref(), Some(name), "{id}: {tags:?}");
            let private = tag(tags, "kubernetes.io/role/internal-elb").is_some();
            assert_eq!(tag(tags, "karpenter.sh/discovery").as_deref(), private.then_some(infra), "{id}: {tags:?}");
        }
    }
}

/// The negative-caching TTL (the SOA's last field) of a hosted zone, unwrapping moto's text of
/// the value (MOTO-NOTES.md).
pub fn soa_minimum(c: &Clients, zone: &str) -> u64 {
    let out = c.block_on(c.r53.list_resource_record_sets().hosted_zone_id(zone).send()).unwrap();
    let soa = out.resource_record_sets().iter().find(|r| r.r#type().as_str() == "SOA").expect("an SOA record");
    let value = soa.resource_records()[0].value();
    let fields: Vec<&str> = value.trim_start_matches("{'Value': '").trim_end_matches("'}").split_whitespace().collect();
    assert_eq!(fields.len(), 7, "an SOA value: {value:?}");
    fields[6].parse().unwrap()
}
