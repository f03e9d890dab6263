//! `provision-infra`: the AWS infrastructure of a HyperShift hosted cluster, as
//! `hypershift create infra aws` makes it, built from idempotent steps with write-ahead undos.

use std::collections::BTreeMap;

use infraflow_activities::network::{SubnetInfo, ZoneInfo};
use infraflow_activities::routing::Target;
use infraflow_activities::security::Rule;
use infraflow_activities::{AwsPool, Identity, Kind, dns, endpoints, nat, network, routing, security};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aws_steps::{create_opts, probe_environment, read_opts};
use crate::context::{WfCtx, join_branches};
use crate::error::{ActivityError, InputError, StepError};
use crate::registry::{BoxFuture, Validated, WorkflowDef};
use crate::validate;

/// User tags per resource: EC2 and Route53 allow 50, and infraflow writes up to 6 of its own
/// (ownership, Name, identity, created-by, and a subnet's role tag), with a margin.
pub const MAX_ADDITIONAL_TAGS: usize = 40;

/// At most this many zones fit HyperShift's layout in a /16 (a /20 public and a /20 private each).
pub const MAX_ZONES: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum EndpointAccess {
    #[default]
    Public,
    PublicAndPrivate,
    Private,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisionInput {
    pub name: String,
    #[serde(rename = "infraID", default, skip_serializing_if = "Option::is_none")]
    pub infra_id: Option<String>,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    #[serde(rename = "vpcCIDR", default = "default_cidr")]
    pub vpc_cidr: String,
    pub base_domain: String,
    #[serde(default)]
    pub endpoint_access: EndpointAccess,
    #[serde(rename = "singleNATGateway", default)]
    pub single_nat_gateway: bool,
    #[serde(default)]
    pub public_only: bool,
    #[serde(default)]
    pub additional_tags: BTreeMap<String, String>,
}

fn default_cidr() -> String {
    "10.0.0.0/16".into()
}

/// What `hypershift create cluster aws --infra-json` reads, plus the worker security group and
/// the public subnets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionOutput {
    pub region: String,
    #[serde(rename = "infraID")]
    pub infra_id: String,
    pub name: String,
    #[serde(rename = "machineCIDR")]
    pub machine_cidr: String,
    #[serde(rename = "vpcID")]
    pub vpc_id: String,
    pub zones: Vec<OutputZone>,
    pub base_domain: String,
    #[serde(rename = "publicZoneID")]
    pub public_zone_id: String,
    #[serde(rename = "privateZoneID")]
    pub private_zone_id: String,
    #[serde(rename = "localZoneID")]
    pub local_zone_id: String,
    #[serde(rename = "securityGroupID")]
    pub security_group_id: String,
    #[serde(rename = "publicSubnetIDs")]
    pub public_subnet_ids: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputZone {
    pub name: String,
    #[serde(rename = "subnetID")]
    pub subnet_id: String,
}

impl ProvisionInput {
    /// Checks every field; fills in the derived infra id.
    pub fn validate(mut self, workflow_id: &str) -> Result<ProvisionInput, InputError> {
        validate::dns_label("name", &self.name, 40)?;
        match &self.infra_id {
            Some(id) => validate::dns_label("infraID", id, 60)?,
            None => self.infra_id = Some(derive_infra_id(&self.name, workflow_id)),
        }
        validate::region("region", &self.region)?;
        validate::cidr16("vpcCIDR", &self.vpc_cidr)?;
        validate::domain("baseDomain", &self.base_domain)?;
        if let Some(zones) = &self.zones {
            if zones.is_empty() {
                return Err(InputError::field(
                    "zones",
                    "must name at least one zone (or be left out for the first available one)",
                ));
            }
            if zones.len() > MAX_ZONES {
                return Err(InputError::field(
                    "zones",
                    format!(
                        "{} zones do not fit in a /16: at most {MAX_ZONES} (each takes a public and a private /20)",
                        zones.len()
                    ),
                ));
            }
            for (i, z) in zones.iter().enumerate() {
                let suffix = z.strip_prefix(self.region.as_str()).unwrap_or("");
                if suffix.is_empty()
                    || !suffix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                {
                    return Err(InputError::field(
                        &format!("zones[{i}]"),
                        format!("{z:?} is not a zone of region {}", self.region),
                    ));
                }
                if zones[..i].contains(z) {
                    return Err(InputError::field(&format!("zones[{i}]"), format!("{z:?} is listed twice")));
                }
            }
        }
        if self.additional_tags.len() > MAX_ADDITIONAL_TAGS {
            return Err(InputError::field(
                "additionalTags",
                format!(
                    "{} tags, at most {MAX_ADDITIONAL_TAGS}: AWS allows 50 per resource and infraflow writes up to {} of its own",
                    self.additional_tags.len(),
                    50 - MAX_ADDITIONAL_TAGS
                ),
            ));
        }
        for (k, v) in &self.additional_tags {
            if k.is_empty() || k.len() > 128 || k.to_ascii_lowercase().starts_with("aws:") {
                return Err(InputError::field(
                    "additionalTags",
                    format!("key {k:?} must be 1 to 128 characters and not start with aws:"),
                ));
            }
            if v.len() > 256 {
                return Err(InputError::field(
                    "additionalTags",
                    format!("value of {k:?} is longer than 256 characters"),
                ));
            }
        }
        Ok(self)
    }

    pub fn infra_id(&self) -> &str {
        self.infra_id.as_deref().unwrap_or_default()
    }
}

/// `<name>-<5 letters>`, stable for a workflow id, as HyperShift derives `jparrill-dest-zjhcn`.
fn derive_infra_id(name: &str, workflow_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in workflow_id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let suffix: String = (0..5)
        .map(|i| {
            let c = (h >> (i * 5)) % 26;
            char::from(b'a' + c as u8)
        })
        .collect();
    format!("{name}-{suffix}")
}

/// The CIDRs of zone `i`: public `x.y.(16i).0/20`, private `x.y.(128+16i).0/20`.
pub fn zone_cidrs(prefix: (u8, u8), i: usize) -> (String, String) {
    let (a, b) = prefix;
    (format!("{a}.{b}.{}.0/20", 16 * i), format!("{a}.{b}.{}.0/20", 128 + 16 * i))
}

/// HyperShift's worker ingress rules, all from the machine network.
fn worker_rules(cidr: &str) -> Vec<Rule> {
    vec![
        Rule::new("icmp", -1, -1, cidr),
        Rule::new("tcp", 22, 22, cidr),
        Rule::new("tcp", 4789, 4789, cidr),
        Rule::new("udp", 4789, 4789, cidr),
        Rule::new("udp", 6081, 6081, cidr),
        Rule::new("udp", 500, 500, cidr),
        Rule::new("udp", 4500, 4500, cidr),
        Rule::new("tcp", 9000, 9999, cidr),
        Rule::new("udp", 9000, 9999, cidr),
        Rule::new("tcp", 10250, 10250, cidr),
        Rule::new("tcp", 30000, 32767, cidr),
        Rule::new("udp", 30000, 32767, cidr),
    ]
}

pub struct ProvisionInfra {
    pub pool: AwsPool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preflight {
    public_zone_id: String,
    zones: Vec<ZoneInfo>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ZoneOut {
    zone: String,
    public: SubnetInfo,
    private: Option<SubnetInfo>,
    nat: Option<String>,
}

impl WorkflowDef for ProvisionInfra {
    fn name(&self) -> &'static str {
        "provision-infra"
    }

    fn summary(&self) -> &'static str {
        "VPC, subnets, gateways, routes, security group, endpoints and DNS zones of a hosted cluster"
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        let p: ProvisionInput = validate::decode(input)?;
        let p = p.validate(id)?;
        let cluster = p.infra_id().to_string();
        Ok(Validated { input: serde_json::to_value(&p).map_err(|e| InputError(e.to_string()))?, cluster })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.clone();
        Box::pin(async move {
            let p: ProvisionInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let out = provision(&ctx, &pool, &p).await?;
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        use crate::policy::*;
        actions(&[
            (NETWORK, Use::Manage),
            (NAT, Use::Manage),
            (ROUTING, Use::Manage),
            (SECURITY, Use::Manage),
            (ENDPOINTS, Use::Manage),
            (DNS, Use::Manage),
            (RESOURCES, Use::Read),
        ])
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let region = serde_json::from_value::<ProvisionInput>(input.clone()).map(|p| p.region).unwrap_or_default();
        Some(probe_environment(&self.pool, &region))
    }
}

/// The provision-infra body, callable as part of a larger workflow (create-cluster).
pub async fn provision(ctx: &WfCtx, pool: &AwsPool, p: &ProvisionInput) -> Result<ProvisionOutput, StepError> {
    let infra: &str = p.infra_id();
    let region = p.region.clone();
    let extra: Vec<(String, String)> = p.additional_tags.clone().into_iter().collect();
    let ident = |role: &str, zone: Option<&str>, name: String| {
        Identity::new(infra, role, zone, name).with_tags(&extra, ctx.workflow_id())
    };
    let with_undo = |kind: Kind, id: &Identity| create_opts(&region, kind, id);

    // Read-only checks first: a missing public zone or unknown zone fails before any write.
    let pre: Preflight = ctx
        .step_with("preflight", "provision.preflight", &serde_json::json!({"region": region, "baseDomain": p.base_domain, "zones": p.zones}), read_opts(), || async {
            let aws = pool.region(&region).await;
            let public_zone_id = dns::find_public_zone(&aws, &p.base_domain).await?.ok_or_else(|| {
                ActivityError::terminal(format!(
                    "baseDomain: no public hosted zone named {} in this account; create it first (infraflow never creates it)",
                    p.base_domain
                ))
            })?;
            let available = network::availability_zones(&aws).await?;
            let zones = match &p.zones {
                None => vec![available.first().cloned().ok_or_else(|| ActivityError::terminal(format!("region {region} has no available zone")))?],
                Some(names) => names
                    .iter()
                    .map(|n| {
                        available.iter().find(|z| &z.name == n).cloned().ok_or_else(|| {
                            ActivityError::terminal(format!(
                                "zones: {n} is not an available Availability Zone of {region} (Local and Wavelength Zones cannot hold a cluster)"
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            };
            Ok(Preflight { public_zone_id, zones })
        })
        .await?;

    let vpc_id_ident = ident("vpc", None, format!("{infra}-vpc"));
    let vpc_id: String = ctx
        .step_with(
            "vpc",
            "ec2.ensure-vpc",
            &(&vpc_id_ident, &p.vpc_cidr),
            with_undo(Kind::Vpc, &vpc_id_ident),
            || async {
                let aws = pool.region(&region).await;
                Ok(network::ensure_vpc(&aws, &vpc_id_ident, &p.vpc_cidr).await?)
            },
        )
        .await?;

    let domain = if region == "us-east-1" { "ec2.internal".to_string() } else { format!("{region}.compute.internal") };
    let dhcp = ident("dhcp-options", None, format!("{infra}-dhcp"));
    let vpc = vpc_id.clone();
    let dhcp_step = ctx.step_with(
        "dhcp-options",
        "ec2.ensure-dhcp-options",
        &(&dhcp, &domain, &vpc),
        with_undo(Kind::DhcpOptions, &dhcp),
        || async {
            let aws = pool.region(&region).await;
            Ok(network::ensure_dhcp_options(&aws, &dhcp, &domain, &vpc).await?)
        },
    );
    let igw_ident = ident("internet-gateway", None, format!("{infra}-igw"));
    let igw_step = ctx.step_with(
        "internet-gateway",
        "ec2.ensure-internet-gateway",
        &(&igw_ident, &vpc),
        with_undo(Kind::InternetGateway, &igw_ident),
        || async {
            let aws = pool.region(&region).await;
            Ok(network::ensure_internet_gateway(&aws, &igw_ident, &vpc).await?)
        },
    );
    let sg_ident = ident("worker-sg", None, format!("{infra}-worker-sg"));
    let sg_name = format!("{infra}-worker-sg");
    let rules = worker_rules(&p.vpc_cidr);
    let sg_step = ctx.step_with(
        "security-group",
        "ec2.ensure-security-group",
        &(&sg_ident, &vpc, &rules),
        with_undo(Kind::SecurityGroup, &sg_ident),
        || async {
            let aws = pool.region(&region).await;
            Ok(security::ensure_security_group(&aws, &sg_ident, &vpc, &sg_name, "worker security group", &rules)
                .await?)
        },
    );
    let (_dhcp, igw, sg): (Result<String, _>, Result<String, _>, Result<String, _>) =
        futures::join!(dhcp_step, igw_step, sg_step);
    // Wait for all three before judging: every started step is then journaled.
    let (_dhcp, igw, sg) = (_dhcp?, igw?, sg?);

    let prefix = validate::cidr16("vpcCIDR", &p.vpc_cidr)
        .map_err(|e| StepError::Failed { step: "vpc".into(), error: ActivityError::terminal(e.0) })?;
    let nat_zones: Vec<&str> = if p.public_only {
        vec![]
    } else if p.single_nat_gateway {
        vec![pre.zones[0].name.as_str()]
    } else {
        pre.zones.iter().map(|z| z.name.as_str()).collect()
    };

    // Zones are independent branches: subnets, EIP and NAT of each run concurrently.
    let branches = pre.zones.iter().enumerate().map(|(i, z)| {
        let zctx = ctx.scoped(&format!("zone/{}", z.name));
        let (pub_cidr, priv_cidr) = zone_cidrs(prefix, i);
        let wants_nat = nat_zones.contains(&z.name.as_str());
        let vpc = vpc_id.clone();
        let (pool, region, ident, with_undo) = (pool, &region, &ident, &with_undo);
        let zone = z.name.clone();
        async move {
            let mut pub_ident = ident("public-subnet", Some(&zone), format!("{infra}-public-{zone}"));
            pub_ident.extra_tags.push(("kubernetes.io/role/elb".into(), "1".into()));
            let public: SubnetInfo = zctx
                .step_with(
                    "public-subnet",
                    "ec2.ensure-subnet",
                    &(&pub_ident, &vpc, &pub_cidr),
                    with_undo(Kind::Subnet, &pub_ident),
                    || async {
                        let aws = pool.region(region).await;
                        Ok(network::ensure_subnet(&aws, &pub_ident, &vpc, &pub_cidr, &zone).await?)
                    },
                )
                .await?;
            let private = if p.public_only {
                None
            } else {
                let mut priv_ident = ident("private-subnet", Some(&zone), format!("{infra}-private-{zone}"));
                priv_ident.extra_tags.push(("kubernetes.io/role/internal-elb".into(), "1".into()));
                let s: SubnetInfo = zctx
                    .step_with(
                        "private-subnet",
                        "ec2.ensure-subnet",
                        &(&priv_ident, &vpc, &priv_cidr),
                        with_undo(Kind::Subnet, &priv_ident),
                        || async {
                            let aws = pool.region(region).await;
                            Ok(network::ensure_subnet(&aws, &priv_ident, &vpc, &priv_cidr, &zone).await?)
                        },
                    )
                    .await?;
                Some(s)
            };
            let nat = if wants_nat {
                let eip_ident = ident("eip", Some(&zone), format!("{infra}-eip-{zone}"));
                let alloc: String = zctx
                    .step_with("eip", "ec2.ensure-eip", &eip_ident, with_undo(Kind::ElasticIp, &eip_ident), || async {
                        let aws = pool.region(region).await;
                        Ok(nat::ensure_eip(&aws, &eip_ident).await?)
                    })
                    .await?;
                let nat_ident = ident("nat", Some(&zone), format!("{infra}-nat-{zone}"));
                let subnet = public.subnet_id.clone();
                let nat_id: String = zctx
                    .step_with(
                        "nat-gateway",
                        "ec2.ensure-nat-gateway",
                        &(&nat_ident, &subnet, &alloc),
                        with_undo(Kind::NatGateway, &nat_ident),
                        || async {
                            let aws = pool.region(region).await;
                            Ok(nat::ensure_nat_gateway(&aws, &nat_ident, &subnet, &alloc).await?)
                        },
                    )
                    .await?;
                zctx.step_with("nat-available", "ec2.wait-nat-available", &nat_id, read_opts(), || async {
                    let aws = pool.region(region).await;
                    Ok(nat::wait_nat_available(&aws, &nat_id).await?)
                })
                .await?;
                Some(nat_id)
            } else {
                None
            };
            Ok::<_, StepError>(ZoneOut { zone, public, private, nat })
        }
    });
    let zones: Vec<ZoneOut> = join_branches(branches).await?;

    // Private route tables: each zone's own NAT, or the single one.
    let shared_nat = zones.iter().find_map(|z| z.nat.clone());
    let rt_branches = zones.iter().filter(|z| z.private.is_some()).map(|z| {
        let zctx = ctx.scoped(&format!("zone/{}", z.zone));
        let rt_ident = ident("private-route-table", Some(&z.zone), format!("{infra}-private-{}", z.zone));
        let nat_id = z.nat.clone().or_else(|| shared_nat.clone()).unwrap_or_default();
        let subnet = z.private.as_ref().map(|s| s.subnet_id.clone()).unwrap_or_default();
        let (vpc, region, with_undo) = (vpc_id.clone(), &region, &with_undo);
        async move {
            zctx.step_with(
                "private-route-table",
                "ec2.ensure-route-table",
                &(&rt_ident, &vpc, &nat_id, &subnet),
                with_undo(Kind::RouteTable, &rt_ident),
                || async {
                    let aws = pool.region(region).await;
                    Ok(routing::ensure_route_table(
                        &aws,
                        &rt_ident,
                        &vpc,
                        &Target::Nat(nat_id.clone()),
                        std::slice::from_ref(&subnet),
                        false,
                    )
                    .await?)
                },
            )
            .await
        }
    });
    let private_tables: Vec<String> = join_branches(rt_branches).await?;

    let public_subnets: Vec<String> = zones.iter().map(|z| z.public.subnet_id.clone()).collect();
    let prt_ident = ident("public-route-table", None, format!("{infra}-public"));
    let public_table: String = ctx
        .step_with(
            "public-route-table",
            "ec2.ensure-route-table",
            &(&prt_ident, &vpc_id, &igw, &public_subnets),
            with_undo(Kind::RouteTable, &prt_ident),
            || async {
                let aws = pool.region(&region).await;
                Ok(routing::ensure_route_table(
                    &aws,
                    &prt_ident,
                    &vpc_id,
                    &Target::InternetGateway(igw.clone()),
                    &public_subnets,
                    true,
                )
                .await?)
            },
        )
        .await?;

    let mut all_tables = private_tables.clone();
    all_tables.push(public_table);
    let s3_ident = ident("s3-endpoint", None, format!("{infra}-private-s3"));
    ctx.step_with(
        "s3-endpoint",
        "ec2.ensure-s3-endpoint",
        &(&s3_ident, &vpc_id, &all_tables),
        with_undo(Kind::VpcEndpoint, &s3_ident),
        || async {
            let aws = pool.region(&region).await;
            Ok(endpoints::ensure_s3_endpoint(&aws, &s3_ident, &vpc_id, &all_tables).await?)
        },
    )
    .await
    .map(|_: String| ())?;

    let private_name = format!("{}.{}", p.name, p.base_domain);
    let local_name = format!("{}.hypershift.local", p.name);
    let pz_ident = ident("private-zone", None, private_name.clone());
    let lz_ident = ident("local-zone", None, local_name.clone());
    let pz = ctx.step_with(
        "private-zone",
        "route53.ensure-private-zone",
        &(&pz_ident, &private_name, &vpc_id),
        with_undo(Kind::HostedZone, &pz_ident),
        || async {
            let aws = pool.region(&region).await;
            Ok(dns::ensure_private_zone(&aws, &pz_ident, &private_name, &vpc_id).await?)
        },
    );
    let lz = ctx.step_with(
        "local-zone",
        "route53.ensure-private-zone",
        &(&lz_ident, &local_name, &vpc_id),
        with_undo(Kind::HostedZone, &lz_ident),
        || async {
            let aws = pool.region(&region).await;
            Ok(dns::ensure_private_zone(&aws, &lz_ident, &local_name, &vpc_id).await?)
        },
    );
    let (pz, lz): (Result<String, _>, Result<String, _>) = futures::join!(pz, lz);
    let (private_zone_id, local_zone_id) = (pz?, lz?);

    Ok(ProvisionOutput {
        region: region.clone(),
        infra_id: infra.to_string(),
        name: p.name.clone(),
        machine_cidr: p.vpc_cidr.clone(),
        vpc_id,
        zones: zones
            .iter()
            .map(|z| OutputZone {
                name: z.zone.clone(),
                subnet_id: z.private.as_ref().unwrap_or(&z.public).subnet_id.clone(),
            })
            .collect(),
        base_domain: p.base_domain.clone(),
        public_zone_id: pre.public_zone_id,
        private_zone_id,
        local_zone_id,
        security_group_id: sg,
        public_subnet_ids: public_subnets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_cidrs_follow_hypershift() {
        assert_eq!(zone_cidrs((10, 0), 0), ("10.0.0.0/20".into(), "10.0.128.0/20".into()));
        assert_eq!(zone_cidrs((10, 0), 2), ("10.0.32.0/20".into(), "10.0.160.0/20".into()));
        assert_eq!(zone_cidrs((10, 0), 7), ("10.0.112.0/20".into(), "10.0.240.0/20".into()));
    }

    #[test]
    fn the_derived_infra_id_is_stable_per_workflow() {
        assert_eq!(derive_infra_id("demo", "wf-1"), derive_infra_id("demo", "wf-1"));
        assert_ne!(derive_infra_id("demo", "wf-1"), derive_infra_id("demo", "wf-2"));
        assert!(derive_infra_id("demo", "wf-1").starts_with("demo-"));
    }
}
