//! The provision-infra body as a graph: every step starts as soon as what it needs exists, so
//! the run waits for the longest chain (VPC → gateway → NAT → route table → S3 endpoint), not
//! for the sum of its calls; and a first provisioning skips the lookups an inventory answered.

use std::sync::atomic::{AtomicBool, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use infraflow_activities::inventory::take_inventory;
use infraflow_activities::network::{SubnetInfo, ZoneInfo};
use infraflow_activities::routing::Target;
use infraflow_activities::tags::KARPENTER_DISCOVERY_TAG;
use infraflow_activities::throttle::read_retrying;
use infraflow_activities::{AwsPool, Identity, Inventory, Kind, dns, endpoints, nat, network, routing, security};
use serde::{Deserialize, Serialize};

use crate::aws_steps::{FirstAttempt, create_opts, from_aws, read_opts};
use crate::provision_infra::{OutputZone, ProvisionInput, ProvisionOutput, worker_rules, zone_cidrs};
use crate::validate;
use infraflow_engine::{ActivityError, StepError};
use infraflow_engine::{WfCtx, join_branches, join_pair};

/// The roles of what provision-infra creates, once per cluster and once per zone: the identity
/// keys its inventory reads. A role missing here is only ever looked up step by step.
const CLUSTER_ROLES: [&str; 6] =
    ["vpc", "dhcp-options", "internet-gateway", "worker-sg", "public-route-table", "s3-endpoint"];
const ZONE_ROLES: [&str; 5] = ["public-subnet", "private-subnet", "eip", "nat", "private-route-table"];

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preflight {
    public_zone_id: String,
    zones: Vec<ZoneInfo>,
    /// What the cluster had when the workflow started (journaled for the record; trusted only by
    /// the execution that read it).
    #[serde(default)]
    inventory: Inventory,
}

/// A zone's subnets and address, made side by side.
struct ZoneStart {
    zone: String,
    public: SubnetInfo,
    private: Option<SubnetInfo>,
    eip: Option<String>,
}

fn identity_keys(infra: &str, zones: &[String]) -> std::collections::BTreeSet<String> {
    let cluster = CLUSTER_ROLES.iter().map(|r| Identity::new(infra, r, None, String::new()).key());
    let zoned = zones
        .iter()
        .flat_map(|z| ZONE_ROLES.iter().map(move |r| Identity::new(infra, r, Some(z), String::new()).key()));
    cluster.chain(zoned).collect()
}

/// The provision-infra body, callable as part of a larger workflow (create-cluster).
pub async fn provision(ctx: &WfCtx, pool: &AwsPool, p: &ProvisionInput) -> Result<ProvisionOutput, StepError> {
    let infra: &str = p.infra_id();
    let region = p.region.clone();
    let extra: Vec<(String, String)> = p.additional_tags.clone().into_iter().collect();
    let expires = crate::expiry::date(ctx, p.expires_in.as_deref());
    let ident = |role: &str, zone: Option<&str>, name: String| {
        Identity::new(infra, role, zone, name)
            .with_tags(&extra, ctx.creator())
            .with_hypershift_tags(Some(&p.name))
            .with_expiration(expires.as_deref())
    };
    let with_undo = |kind: Kind, id: &Identity| create_opts(&region, kind, id);

    // Read-only checks first: a missing public zone or unknown zone fails before any write. The
    // same step reads what the cluster already has, a call per kind, beside the checks.
    let took_inventory = AtomicBool::new(false);
    let pre: Preflight = ctx
        .step_with("preflight", "provision.preflight", &serde_json::json!({"region": region, "baseDomain": p.base_domain, "zones": p.zones}), read_opts(), || async {
            let aws = pool.region(&region).await;
            let early = async {
                match &p.zones {
                    Some(names) => take_inventory(&aws, infra, &identity_keys(infra, names)).await.map(Some),
                    None => Ok(None),
                }
            };
            let (public_zone_id, available, early) = futures::try_join!(
                read_retrying(|| dns::find_public_zone(&aws, &p.base_domain)),
                read_retrying(|| network::availability_zones(&aws)),
                early
            ).map_err(from_aws)?;
            let public_zone_id = public_zone_id.ok_or_else(|| {
                ActivityError::terminal(format!(
                    "baseDomain: no public hosted zone named {} in this account; create it first (infraflow never creates it)",
                    p.base_domain
                ))
            })?;
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
            let inventory = match early {
                Some(i) => i,
                None => {
                    let names: Vec<String> = zones.iter().map(|z| z.name.clone()).collect();
                    take_inventory(&aws, infra, &identity_keys(infra, &names)).await.map_err(from_aws)?
                }
            };
            took_inventory.store(true, Ordering::SeqCst);
            Ok(Preflight { public_zone_id, zones, inventory })
        })
        .await?;
    // Replayed from the journal (a resume, a retry), the inventory is history: look up.
    let inventory = took_inventory.load(Ordering::SeqCst).then_some(&pre.inventory);
    let first = |id: &Identity| FirstAttempt::new(inventory, id);

    let vpc_ident = ident("vpc", None, format!("{infra}-vpc"));
    let look = first(&vpc_ident);
    let vpc_id: String = ctx
        .step_with("vpc", "ec2.ensure-vpc", &(&vpc_ident, &p.vpc_cidr), with_undo(Kind::Vpc, &vpc_ident), || async {
            let aws = pool.region(&region).await;
            network::ensure_vpc(&aws, &vpc_ident, &p.vpc_cidr, look.lookup()).await.map_err(from_aws)
        })
        .await?;
    let vpc = vpc_id.as_str();

    // Off the critical path: what needs only the VPC, side by side with the chain below.
    let domain = if region == "us-east-1" { "ec2.internal".to_string() } else { format!("{region}.compute.internal") };
    let dhcp = ident("dhcp-options", None, format!("{infra}-dhcp"));
    let dhcp_look = first(&dhcp);
    let dhcp_step = ctx.step_with(
        "dhcp-options",
        "ec2.ensure-dhcp-options",
        &(&dhcp, &domain, vpc),
        with_undo(Kind::DhcpOptions, &dhcp),
        || async {
            let aws = pool.region(&region).await;
            network::ensure_dhcp_options(&aws, &dhcp, &domain, vpc, dhcp_look.lookup()).await.map_err(from_aws)
        },
    );
    let sg_ident = ident("worker-sg", None, format!("{infra}-worker-sg"));
    let sg_look = first(&sg_ident);
    let sg_name = format!("{infra}-worker-sg");
    let rules = worker_rules(&p.vpc_cidr);
    let sg_step = ctx.step_with(
        "security-group",
        "ec2.ensure-security-group",
        &(&sg_ident, vpc, &rules),
        with_undo(Kind::SecurityGroup, &sg_ident),
        || async {
            let aws = pool.region(&region).await;
            security::ensure_security_group(
                &aws,
                &sg_ident,
                vpc,
                &sg_name,
                "worker security group",
                &rules,
                sg_look.lookup(),
            )
            .await
            .map_err(from_aws)
        },
    );
    let private_name = p.private_zone_name();
    let local_name = format!("{}.hypershift.local", p.name);
    let pz_ident = ident("private-zone", None, private_name.clone());
    let lz_ident = ident("local-zone", None, local_name.clone());
    let pz = ctx.step_with(
        "private-zone",
        "route53.ensure-private-zone",
        &(&pz_ident, &private_name, vpc),
        with_undo(Kind::HostedZone, &pz_ident),
        || async {
            let aws = pool.region(&region).await;
            dns::ensure_private_zone(&aws, &pz_ident, &private_name, vpc).await.map_err(from_aws)
        },
    );
    let lz = ctx.step_with(
        "local-zone",
        "route53.ensure-private-zone",
        &(&lz_ident, &local_name, vpc),
        with_undo(Kind::HostedZone, &lz_ident),
        || async {
            let aws = pool.region(&region).await;
            dns::ensure_private_zone(&aws, &lz_ident, &local_name, vpc).await.map_err(from_aws)
        },
    );
    let side: Vec<BoxFuture<'_, Result<String, StepError>>> =
        vec![dhcp_step.boxed(), sg_step.boxed(), pz.boxed(), lz.boxed()];

    let prefix = validate::cidr16("vpcCIDR", &p.vpc_cidr)
        .map_err(|e| StepError::Failed { step: "vpc".into(), error: ActivityError::terminal(e.0) })?;
    let nat_zones: Vec<&str> = if p.public_only {
        vec![]
    } else if p.single_nat_gateway {
        vec![pre.zones[0].name.as_str()]
    } else {
        pre.zones.iter().map(|z| z.name.as_str()).collect()
    };

    // The critical path: gateway and zones, then NAT gateways, then route tables, then the S3
    // endpoint on all of them.
    // Boxed: the chain nests every zone's steps, too large a future for a worker's stack.
    let chain = Box::pin(async {
        let igw_ident = ident("internet-gateway", None, format!("{infra}-igw"));
        let igw_look = first(&igw_ident);
        let igw_step = ctx.step_with(
            "internet-gateway",
            "ec2.ensure-internet-gateway",
            &(&igw_ident, vpc),
            with_undo(Kind::InternetGateway, &igw_ident),
            || async {
                let aws = pool.region(&region).await;
                network::ensure_internet_gateway(&aws, &igw_ident, vpc, igw_look.lookup()).await.map_err(from_aws)
            },
        );
        // Each zone's subnets and address, side by side.
        let starts = pre.zones.iter().enumerate().map(|(i, z)| {
            let zctx = ctx.scoped(&format!("zone/{}", z.name));
            let (pub_cidr, priv_cidr) = zone_cidrs(prefix, i);
            let wants_nat = nat_zones.contains(&z.name.as_str());
            let (region, ident, with_undo, first) = (&region, &ident, &with_undo, &first);
            let zone = z.name.clone();
            async move {
                let mut pub_ident = ident("public-subnet", Some(&zone), format!("{infra}-public-{zone}"));
                pub_ident.extra_tags.push(("kubernetes.io/role/elb".into(), "1".into()));
                // HyperShift's automatic node provisioning finds the nodes' subnets by this tag:
                // the private ones, or the public ones of a public-only cluster.
                let karpenter = (KARPENTER_DISCOVERY_TAG.to_string(), infra.to_string());
                if p.public_only {
                    pub_ident.unjournaled_tags.push(karpenter.clone());
                }
                let pub_look = first(&pub_ident);
                let public = zctx.step_with(
                    "public-subnet",
                    "ec2.ensure-subnet",
                    &(&pub_ident, vpc, &pub_cidr),
                    with_undo(Kind::Subnet, &pub_ident),
                    || async {
                        let aws = pool.region(region).await;
                        network::ensure_subnet(&aws, &pub_ident, vpc, &pub_cidr, &zone, pub_look.lookup())
                            .await
                            .map_err(from_aws)
                    },
                );
                let mut priv_ident = ident("private-subnet", Some(&zone), format!("{infra}-private-{zone}"));
                priv_ident.extra_tags.push(("kubernetes.io/role/internal-elb".into(), "1".into()));
                priv_ident.unjournaled_tags.push(karpenter);
                let priv_look = first(&priv_ident);
                let private = async {
                    if p.public_only {
                        return Ok(None);
                    }
                    zctx.step_with(
                        "private-subnet",
                        "ec2.ensure-subnet",
                        &(&priv_ident, vpc, &priv_cidr),
                        with_undo(Kind::Subnet, &priv_ident),
                        || async {
                            let aws = pool.region(region).await;
                            network::ensure_subnet(&aws, &priv_ident, vpc, &priv_cidr, &zone, priv_look.lookup())
                                .await
                                .map_err(from_aws)
                        },
                    )
                    .await
                    .map(Some)
                };
                let eip_ident = ident("eip", Some(&zone), format!("{infra}-eip-{zone}"));
                let eip_look = first(&eip_ident);
                let eip = async {
                    if !wants_nat {
                        return Ok(None);
                    }
                    zctx.step_with(
                        "eip",
                        "ec2.ensure-eip",
                        &eip_ident,
                        with_undo(Kind::ElasticIp, &eip_ident),
                        || async {
                            let aws = pool.region(region).await;
                            // The VPC is not in the step's input (older journals): it only narrows adoption.
                            nat::ensure_eip(&aws, &eip_ident, vpc, eip_look.lookup()).await.map_err(from_aws)
                        },
                    )
                    .await
                    .map(Some)
                };
                let (public, (private, eip)) = join_pair(public, join_pair(private, eip)).await?;
                Ok::<_, StepError>(ZoneStart { zone, public, private, eip })
            }
        });
        let (igw, zones) = join_pair(igw_step, join_branches(starts)).await?;

        // NAT gateways (they need the attached gateway), each then waited for.
        let nat_branches = zones.iter().filter_map(|z| z.eip.as_ref().map(|eip| (z, eip))).map(|(z, alloc)| {
            let zctx = ctx.scoped(&format!("zone/{}", z.zone));
            let nat_ident = ident("nat", Some(&z.zone), format!("{infra}-nat-{}", z.zone));
            let nat_look = first(&nat_ident);
            let subnet = z.public.subnet_id.clone();
            let (region, with_undo) = (&region, &with_undo);
            async move {
                let nat_id: String = zctx
                    .step_with(
                        "nat-gateway",
                        "ec2.ensure-nat-gateway",
                        &(&nat_ident, &subnet, alloc),
                        with_undo(Kind::NatGateway, &nat_ident),
                        || async {
                            let aws = pool.region(region).await;
                            nat::ensure_nat_gateway(&aws, &nat_ident, &subnet, alloc, nat_look.lookup())
                                .await
                                .map_err(from_aws)
                        },
                    )
                    .await?;
                zctx.step_with("nat-available", "ec2.wait-nat-available", &nat_id, read_opts(), || async {
                    let aws = pool.region(region).await;
                    nat::wait_nat_available(&aws, &nat_id).await.map_err(from_aws)
                })
                .await?;
                Ok::<_, StepError>((z.zone.clone(), nat_id))
            }
        });
        // The public route table needs only the gateway and the public subnets.
        let public_subnets: Vec<String> = zones.iter().map(|z| z.public.subnet_id.clone()).collect();
        let prt_ident = ident("public-route-table", None, format!("{infra}-public"));
        let prt_look = first(&prt_ident);
        let public_table = ctx.step_with(
            "public-route-table",
            "ec2.ensure-route-table",
            &(&prt_ident, vpc, &igw, &public_subnets),
            with_undo(Kind::RouteTable, &prt_ident),
            || async {
                let aws = pool.region(&region).await;
                routing::ensure_route_table(
                    &aws,
                    &prt_ident,
                    vpc,
                    &Target::InternetGateway(igw.clone()),
                    &public_subnets,
                    true,
                    prt_look.lookup(),
                )
                .await
                .map_err(from_aws)
            },
        );
        // Private route tables: each zone's own NAT, or the single one.
        let private_tables = async {
            let nats: Vec<(String, String)> = join_branches(nat_branches).await?;
            let shared_nat = nats.first().map(|(_, n)| n.clone());
            let rt_branches = zones.iter().filter(|z| z.private.is_some()).map(|z| {
                let zctx = ctx.scoped(&format!("zone/{}", z.zone));
                let rt_ident = ident("private-route-table", Some(&z.zone), format!("{infra}-private-{}", z.zone));
                let rt_look = first(&rt_ident);
                let own = nats.iter().find(|(zone, _)| *zone == z.zone).map(|(_, n)| n.clone());
                let nat_id = own.or_else(|| shared_nat.clone()).unwrap_or_default();
                let subnet = z.private.as_ref().map(|s| s.subnet_id.clone()).unwrap_or_default();
                let (region, with_undo) = (&region, &with_undo);
                async move {
                    zctx.step_with(
                        "private-route-table",
                        "ec2.ensure-route-table",
                        &(&rt_ident, vpc, &nat_id, &subnet),
                        with_undo(Kind::RouteTable, &rt_ident),
                        || async {
                            let aws = pool.region(region).await;
                            routing::ensure_route_table(
                                &aws,
                                &rt_ident,
                                vpc,
                                &Target::Nat(nat_id.clone()),
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
        };
        let (public_table, mut all_tables) = join_pair(public_table, private_tables).await?;

        all_tables.push(public_table);
        let s3_ident = ident("s3-endpoint", None, format!("{infra}-private-s3"));
        let s3_look = first(&s3_ident);
        ctx.step_with(
            "s3-endpoint",
            "ec2.ensure-s3-endpoint",
            &(&s3_ident, vpc, &all_tables),
            with_undo(Kind::VpcEndpoint, &s3_ident),
            || async {
                let aws = pool.region(&region).await;
                endpoints::ensure_s3_endpoint(&aws, &s3_ident, vpc, &all_tables, s3_look.lookup())
                    .await
                    .map_err(from_aws)
            },
        )
        .await
        .map(|_: String| ())?;
        Ok::<_, StepError>(zones)
    });
    let (side, zones) = join_pair(join_branches(side), chain).await?;
    let [_dhcp, security_group_id, private_zone_id, local_zone_id]: [String; 4] =
        side.try_into().map_err(|_| StepError::Decode { step: "output".into(), detail: "side steps".into() })?;

    Ok(ProvisionOutput {
        region: region.clone(),
        zone: String::new(),
        infra_id: infra.to_string(),
        name: p.name.clone(),
        machine_cidr: p.vpc_cidr.clone(),
        vpc_id: vpc_id.clone(),
        zones: zones
            .iter()
            .map(|z| OutputZone {
                name: z.zone.clone(),
                subnet_id: z.private.as_ref().unwrap_or(&z.public).subnet_id.clone(),
            })
            .collect(),
        base_domain: p.base_domain.clone(),
        base_domain_prefix: p.base_domain_prefix.clone().unwrap_or_default(),
        public_only: p.public_only,
        public_zone_id: pre.public_zone_id,
        private_zone_id,
        local_zone_id,
        security_group_id,
        public_subnet_ids: zones.iter().map(|z| z.public.subnet_id.clone()).collect(),
        ..ProvisionOutput::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inventory_reads_every_role_of_every_zone() {
        let keys = identity_keys("c-abcde", &["us-east-1a".into(), "us-east-1b".into()]);
        assert_eq!(keys.len(), CLUSTER_ROLES.len() + 2 * ZONE_ROLES.len());
        assert!(keys.contains("c-abcde/vpc"));
        assert!(keys.contains("c-abcde/nat/us-east-1b"));
    }
}
