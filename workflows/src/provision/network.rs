//! The network phase when infraflow makes the network: the VPC and its DHCP options, and the
//! critical path — the internet gateway and each zone's subnets and address, then the NAT
//! gateways, then the route tables.

use infraflow_activities::network::{SubnetInfo, ZoneInfo};
use infraflow_activities::routing::Target;
use infraflow_activities::tags::KARPENTER_DISCOVERY_TAG;
use infraflow_activities::{Kind, nat, network, routing};
use infraflow_engine::{ActivityError, StepError, join_branches, join_pair};

use super::plan::{Network, Plan, ZoneNet};
use crate::aws_steps::{from_aws, read_opts};
use crate::provision::input::zone_cidrs;
use crate::validate;

/// A zone's subnets and address, made side by side.
struct ZoneStart {
    zone: String,
    public: SubnetInfo,
    private: Option<SubnetInfo>,
    eip: Option<String>,
}

pub(super) async fn ensure_vpc(plan: &Plan<'_>) -> Result<String, StepError> {
    let (p, infra) = (plan.p, plan.infra);
    let vpc_ident = plan.ident("vpc", None, format!("{infra}-vpc"));
    let look = plan.first(&vpc_ident);
    plan.ctx
        .step_with(
            "vpc",
            "ec2.ensure-vpc",
            &(&vpc_ident, &p.vpc_cidr),
            plan.with_undo(Kind::Vpc, &vpc_ident),
            || async {
                let aws = plan.pool.region(plan.region).await;
                network::ensure_vpc(&aws, &vpc_ident, &p.vpc_cidr, look.lookup()).await.map_err(from_aws)
            },
        )
        .await
}

/// Everything of the network after the VPC but its DHCP options (which need only the VPC, and
/// start beside what the cluster owns: `owned`): the chain of gateway, zones, NAT gateways and
/// route tables.
pub(super) async fn ensure_zones_and_routes(
    plan: &Plan<'_>,
    zones: &[ZoneInfo],
    vpc: &str,
) -> Result<Network, StepError> {
    // Boxed: the chain nests every zone's steps, too large a future for a worker's stack.
    Box::pin(ensure_chain(plan, zones, vpc)).await
}

/// The DHCP options step, its journal position taken at this call (the caller orders it).
pub(super) fn ensure_dhcp_options<'a>(
    plan: &'a Plan<'a>,
    vpc: &'a str,
) -> impl Future<Output = Result<String, StepError>> + 'a {
    let region = plan.region;
    let domain = if region == "us-east-1" { "ec2.internal".to_string() } else { format!("{region}.compute.internal") };
    let dhcp = plan.ident("dhcp-options", None, format!("{}-dhcp", plan.infra));
    let look = plan.first(&dhcp);
    let options = plan.with_undo(Kind::DhcpOptions, &dhcp);
    let input = serde_json::to_value((&dhcp, &domain, vpc)).unwrap_or_default();
    let pool = plan.pool;
    plan.ctx.step_with("dhcp-options", "ec2.ensure-dhcp-options", &input, options, move || {
        let (dhcp, domain, lookup) = (dhcp.clone(), domain.clone(), look.lookup());
        async move {
            let aws = pool.region(region).await;
            network::ensure_dhcp_options(&aws, &dhcp, &domain, vpc, lookup).await.map_err(from_aws)
        }
    })
}

/// The critical path: gateway and zones, then NAT gateways, then route tables.
async fn ensure_chain(plan: &Plan<'_>, zones: &[ZoneInfo], vpc: &str) -> Result<Network, StepError> {
    let (ctx, p, infra) = (plan.ctx, plan.p, plan.infra);
    let prefix = validate::cidr16("vpcCIDR", &p.vpc_cidr)
        .map_err(|e| StepError::Failed { step: "vpc".into(), error: ActivityError::terminal(e.0) })?;
    let nat_zones: Vec<&str> = if p.public_only {
        vec![]
    } else if p.single_nat_gateway {
        vec![zones[0].name.as_str()]
    } else {
        zones.iter().map(|z| z.name.as_str()).collect()
    };
    let igw_ident = plan.ident("internet-gateway", None, format!("{infra}-igw"));
    let igw_look = plan.first(&igw_ident);
    let igw_step = ctx.step_with(
        "internet-gateway",
        "ec2.ensure-internet-gateway",
        &(&igw_ident, vpc),
        plan.with_undo(Kind::InternetGateway, &igw_ident),
        || async {
            let aws = plan.pool.region(plan.region).await;
            network::ensure_internet_gateway(&aws, &igw_ident, vpc, igw_look.lookup()).await.map_err(from_aws)
        },
    );
    let starts = zones
        .iter()
        .enumerate()
        // Each boxed: a zone's three steps make a future too large to move about on a worker's
        // stack (an unoptimized build overflowed it with three zones).
        .map(|(i, z)| {
            Box::pin(ensure_zone_start(plan, vpc, z, zone_cidrs(prefix, i), nat_zones.contains(&z.name.as_str())))
        });
    let (igw, started) = join_pair(igw_step, join_branches(starts)).await?;

    let public_subnets: Vec<String> = started.iter().map(|z| z.public.subnet_id.clone()).collect();
    let (public_table, mut tables) = join_pair(
        Box::pin(ensure_public_table(plan, vpc, &igw, &public_subnets)),
        Box::pin(ensure_private_tables(plan, vpc, &started)),
    )
    .await?;
    tables.push(public_table);
    let zones = started
        .into_iter()
        .map(|z| ZoneNet { zone: z.zone, public: Some(z.public.subnet_id), private: z.private.map(|s| s.subnet_id) })
        .collect();
    Ok(Network { zones, route_tables: tables })
}

/// A zone's public and private subnets and, where a NAT gateway goes, its address: side by side.
async fn ensure_zone_start(
    plan: &Plan<'_>,
    vpc: &str,
    z: &ZoneInfo,
    (pub_cidr, priv_cidr): (String, String),
    wants_nat: bool,
) -> Result<ZoneStart, StepError> {
    let (p, infra, region) = (plan.p, plan.infra, plan.region);
    let zctx = plan.ctx.scoped(&format!("zone/{}", z.name));
    let zone = z.name.clone();
    let mut pub_ident = plan.ident("public-subnet", Some(&zone), format!("{infra}-public-{zone}"));
    pub_ident.extra_tags.push(("kubernetes.io/role/elb".into(), "1".into()));
    // HyperShift's automatic node provisioning finds the nodes' subnets by this tag: the private
    // ones, or the public ones of a public-only cluster.
    let karpenter = (KARPENTER_DISCOVERY_TAG.to_string(), infra.to_string());
    if p.public_only {
        pub_ident.unjournaled_tags.push(karpenter.clone());
    }
    let pub_look = plan.first(&pub_ident);
    let public = zctx.step_with(
        "public-subnet",
        "ec2.ensure-subnet",
        &(&pub_ident, vpc, &pub_cidr),
        plan.with_undo(Kind::Subnet, &pub_ident),
        || async {
            let aws = plan.pool.region(region).await;
            network::ensure_subnet(&aws, &pub_ident, vpc, &pub_cidr, &zone, pub_look.lookup()).await.map_err(from_aws)
        },
    );
    let mut priv_ident = plan.ident("private-subnet", Some(&zone), format!("{infra}-private-{zone}"));
    priv_ident.extra_tags.push(("kubernetes.io/role/internal-elb".into(), "1".into()));
    priv_ident.unjournaled_tags.push(karpenter);
    let priv_look = plan.first(&priv_ident);
    let private = async {
        if p.public_only {
            return Ok(None);
        }
        zctx.step_with(
            "private-subnet",
            "ec2.ensure-subnet",
            &(&priv_ident, vpc, &priv_cidr),
            plan.with_undo(Kind::Subnet, &priv_ident),
            || async {
                let aws = plan.pool.region(region).await;
                network::ensure_subnet(&aws, &priv_ident, vpc, &priv_cidr, &zone, priv_look.lookup())
                    .await
                    .map_err(from_aws)
            },
        )
        .await
        .map(Some)
    };
    let eip_ident = plan.ident("eip", Some(&zone), format!("{infra}-eip-{zone}"));
    let eip_look = plan.first(&eip_ident);
    let eip = async {
        if !wants_nat {
            return Ok(None);
        }
        zctx.step_with("eip", "ec2.ensure-eip", &eip_ident, plan.with_undo(Kind::ElasticIp, &eip_ident), || async {
            let aws = plan.pool.region(region).await;
            // The VPC is not in the step's input (older journals): it only narrows adoption.
            nat::ensure_eip(&aws, &eip_ident, vpc, eip_look.lookup()).await.map_err(from_aws)
        })
        .await
        .map(Some)
    };
    let (public, (private, eip)) = join_pair(public, join_pair(private, eip)).await?;
    Ok(ZoneStart { zone: z.name.clone(), public, private, eip })
}

/// The public route table: needs only the gateway and the public subnets.
async fn ensure_public_table(plan: &Plan<'_>, vpc: &str, igw: &str, subnets: &[String]) -> Result<String, StepError> {
    let prt_ident = plan.ident("public-route-table", None, format!("{}-public", plan.infra));
    let look = plan.first(&prt_ident);
    let subnets = subnets.to_vec();
    plan.ctx
        .step_with(
            "public-route-table",
            "ec2.ensure-route-table",
            &(&prt_ident, vpc, igw, &subnets),
            plan.with_undo(Kind::RouteTable, &prt_ident),
            || async {
                let aws = plan.pool.region(plan.region).await;
                let target = Target::InternetGateway(igw.to_string());
                routing::ensure_route_table(&aws, &prt_ident, vpc, &target, &subnets, true, look.lookup())
                    .await
                    .map_err(from_aws)
            },
        )
        .await
}

/// Each zone's NAT gateway (it needs the attached gateway), waited for; then the private route
/// tables: each zone's own NAT, or the single one.
async fn ensure_private_tables(plan: &Plan<'_>, vpc: &str, zones: &[ZoneStart]) -> Result<Vec<String>, StepError> {
    let (ctx, infra, region) = (plan.ctx, plan.infra, plan.region);
    let nat_branches = zones.iter().filter_map(|z| z.eip.as_ref().map(|eip| (z, eip))).map(|(z, alloc)| {
        let zctx = ctx.scoped(&format!("zone/{}", z.zone));
        let nat_ident = plan.ident("nat", Some(&z.zone), format!("{infra}-nat-{}", z.zone));
        let nat_look = plan.first(&nat_ident);
        let subnet = z.public.subnet_id.clone();
        async move {
            let nat_id: String = zctx
                .step_with(
                    "nat-gateway",
                    "ec2.ensure-nat-gateway",
                    &(&nat_ident, &subnet, alloc),
                    plan.with_undo(Kind::NatGateway, &nat_ident),
                    || async {
                        let aws = plan.pool.region(region).await;
                        nat::ensure_nat_gateway(&aws, &nat_ident, &subnet, alloc, nat_look.lookup())
                            .await
                            .map_err(from_aws)
                    },
                )
                .await?;
            zctx.step_with("nat-available", "ec2.wait-nat-available", &nat_id, read_opts(), || async {
                let aws = plan.pool.region(region).await;
                nat::wait_nat_available(&aws, &nat_id).await.map_err(from_aws)
            })
            .await?;
            Ok::<_, StepError>((z.zone.clone(), nat_id))
        }
    });
    let nats: Vec<(String, String)> = join_branches(nat_branches).await?;
    let shared_nat = nats.first().map(|(_, n)| n.clone());
    let rt_branches = zones.iter().filter(|z| z.private.is_some()).map(|z| {
        let zctx = ctx.scoped(&format!("zone/{}", z.zone));
        let rt_ident = plan.ident("private-route-table", Some(&z.zone), format!("{infra}-private-{}", z.zone));
        let rt_look = plan.first(&rt_ident);
        let own = nats.iter().find(|(zone, _)| *zone == z.zone).map(|(_, n)| n.clone());
        let nat_id = own.or_else(|| shared_nat.clone()).unwrap_or_default();
        let subnet = z.private.as_ref().map(|s| s.subnet_id.clone()).unwrap_or_default();
        async move {
            zctx.step_with(
                "private-route-table",
                "ec2.ensure-route-table",
                &(&rt_ident, vpc, &nat_id, &subnet),
                plan.with_undo(Kind::RouteTable, &rt_ident),
                || async {
                    let aws = plan.pool.region(region).await;
                    let target = Target::Nat(nat_id.clone());
                    routing::ensure_route_table(
                        &aws,
                        &rt_ident,
                        vpc,
                        &target,
                        std::slice::from_ref(&subnet),
                        false,
                        rt_look.lookup(),
                    )
                    .await
                    .map_err(from_aws)
                },
            )
            .await
        }
    });
    join_branches(rt_branches).await
}
