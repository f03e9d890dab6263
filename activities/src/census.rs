//! The clusters of an account as AWS shows them: every resource of a region (and the account's
//! IAM and private zones) that carries an ownership tag, with all its tags — what the janitor
//! classifies — and the protection check a teardown makes before it deletes.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Tag;

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::resources::Kind;
use crate::tags::{OWNED, OWNERSHIP_PREFIX, PROTECTION_TAG, REGION_TAG, filter, ownership_pairs};
use crate::{dns, elb, iam};

/// The IAM actions of the census and the protection check (all reads).
pub const IAM_READ: &[&str] = &[
    "ec2:DescribeVpcs",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeInstances",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeNatGateways",
    "ec2:DescribeAddresses",
    "ec2:DescribeRouteTables",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeTags",
    "elasticloadbalancing:DescribeLoadBalancers",
    "elasticloadbalancing:DescribeTags",
    "route53:ListHostedZones",
    "route53:ListTagsForResources",
    "iam:ListRoles",
    "iam:GetRole",
    "iam:GetInstanceProfile",
    "iam:ListOpenIDConnectProviders",
    "iam:GetOpenIDConnectProvider",
];
/// It writes and deletes nothing.
pub const IAM_WRITE: &[&str] = &[];
pub const IAM_DELETE: &[&str] = &[];

/// One resource that carries an ownership tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tagged {
    pub kind: &'static str,
    pub id: String,
    pub tags: Vec<(String, String)>,
    /// Regional (EC2, ELB) rather than the account's (IAM, Route53): only a regional resource, or
    /// IAM recording this region, puts a cluster in a region.
    pub regional: bool,
    /// The VPC it is in (subnets): a VPC that HyperShift's rule would anchor must hold the
    /// cluster's subnets.
    pub vpc: Option<String>,
}

impl Tagged {
    /// The clusters this resource says it is owned by (`kubernetes.io/cluster/<infraID>=owned`).
    pub fn owners(&self) -> impl Iterator<Item = &str> {
        self.tags.iter().filter(|(_, v)| v == OWNED).filter_map(|(k, _)| k.strip_prefix(OWNERSHIP_PREFIX))
    }

    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The clusters whose record of marks it carries (`infraflow.io/marks/<infraID>`): on a VPC,
    /// a bring-your-own cluster's word that this network is a customer's it was provisioned into.
    pub fn marked_for(&self) -> impl Iterator<Item = &str> {
        self.tags.iter().filter_map(|(k, _)| k.strip_prefix(crate::customer_network::marks::MARKS_PREFIX))
    }

    /// Whether it places its cluster in `region`.
    pub fn in_region(&self, region: &str) -> bool {
        self.regional || self.tag(REGION_TAG) == Some(region)
    }
}

fn ec2_pairs(tags: &[Tag]) -> Vec<(String, String)> {
    tags.iter().filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string()))).collect()
}

fn owned(tags: &[(String, String)]) -> bool {
    !ownership_pairs(tags).is_empty()
}

/// Follows an EC2 describe's `NextToken` pages, collecting `(id, tags, vpc)` of each page: those
/// with an ownership tag, and VPCs with a bring-your-own cluster's record of marks.
macro_rules! ec2_pages {
    ($aws:expr, $op:ident, $name:literal, $kind:literal, |$out:ident| $items:expr) => {{
        let mut found: Vec<Tagged> = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let $out = $aws.ec2.$op().set_next_token(token.clone()).send().await.map_err(|e| classify($name, e))?;
            for (id, tags, vpc) in $items {
                let tags = ec2_pairs(tags);
                let vpc: Option<&str> = vpc;
                let record = $kind == "vpc"
                    && tags.iter().any(|(k, _)| k.starts_with(crate::customer_network::marks::MARKS_PREFIX));
                if owned(&tags) || record {
                    found.push(Tagged {
                        kind: $kind,
                        id: id.to_string(),
                        tags,
                        regional: true,
                        vpc: vpc.map(str::to_string),
                    });
                }
            }
            token = $out.next_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        found
    }};
}

/// Every resource of `aws`'s region, and of the account's IAM and private zones, carrying an
/// ownership tag. Kinds that do not outlive their cluster's VPC alone (listeners, routes) are
/// not read: a cluster always has one of these. Gone resources are never listed (unlike EC2's
/// DescribeTags, which keeps a deleted resource's tags for a while).
pub async fn owned_resources(aws: &Aws) -> AwsResult<Vec<Tagged>> {
    let live = |state: Option<&str>| !matches!(state, Some("deleted" | "deleting" | "terminated" | "shutting-down"));
    let (vpcs, subnets, groups, instances, gateways, nats, addresses, tables, dhcp) = futures::try_join!(
        async {
            Ok(ec2_pages!(aws, describe_vpcs, "DescribeVpcs", "vpc", |o| o.vpcs().iter().map(|v| (
                v.vpc_id().unwrap_or_default(),
                v.tags(),
                None
            ))))
        },
        async {
            Ok(ec2_pages!(aws, describe_subnets, "DescribeSubnets", "subnet", |o| o.subnets().iter().map(|s| (
                s.subnet_id().unwrap_or_default(),
                s.tags(),
                s.vpc_id()
            ))))
        },
        async {
            Ok(ec2_pages!(aws, describe_security_groups, "DescribeSecurityGroups", "security-group", |o| o
                .security_groups()
                .iter()
                .map(|g| (g.group_id().unwrap_or_default(), g.tags(), g.vpc_id()))))
        },
        async {
            Ok(ec2_pages!(aws, describe_instances, "DescribeInstances", "instance", |o| o
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter(|i| live(i.state().and_then(|s| s.name()).map(|n| n.as_str())))
                .map(|i| (i.instance_id().unwrap_or_default(), i.tags(), i.vpc_id()))))
        },
        async {
            Ok(ec2_pages!(aws, describe_internet_gateways, "DescribeInternetGateways", "internet-gateway", |o| o
                .internet_gateways()
                .iter()
                .map(|g| (g.internet_gateway_id().unwrap_or_default(), g.tags(), None))))
        },
        async {
            Ok(ec2_pages!(aws, describe_nat_gateways, "DescribeNatGateways", "nat-gateway", |o| o
                .nat_gateways()
                .iter()
                .filter(|n| live(n.state().map(|s| s.as_str())))
                .map(|n| (n.nat_gateway_id().unwrap_or_default(), n.tags(), n.vpc_id()))))
        },
        async {
            let out = aws.ec2.describe_addresses().send().await.map_err(|e| classify("DescribeAddresses", e))?;
            Ok(out
                .addresses()
                .iter()
                .map(|a| (a.allocation_id().unwrap_or_default(), ec2_pairs(a.tags())))
                .filter(|(_, tags)| owned(tags))
                .map(|(id, tags)| Tagged { kind: "elastic-ip", id: id.to_string(), tags, regional: true, vpc: None })
                .collect::<Vec<_>>())
        },
        async {
            Ok(ec2_pages!(aws, describe_route_tables, "DescribeRouteTables", "route-table", |o| o
                .route_tables()
                .iter()
                .map(|t| (t.route_table_id().unwrap_or_default(), t.tags(), t.vpc_id()))))
        },
        async {
            Ok(ec2_pages!(aws, describe_dhcp_options, "DescribeDhcpOptions", "dhcp-options", |o| o
                .dhcp_options()
                .iter()
                .map(|d| (d.dhcp_options_id().unwrap_or_default(), d.tags(), None))))
        },
    )?;
    let mut all: Vec<Tagged> = [vpcs, subnets, groups, instances, gateways, nats, addresses, tables, dhcp].concat();
    let (balancers, zones, account_iam) =
        futures::try_join!(load_balancers(aws), private_zones(aws), iam_resources(aws))?;
    all.extend(balancers);
    all.extend(zones);
    all.extend(account_iam);
    Ok(all)
}

async fn load_balancers(aws: &Aws) -> AwsResult<Vec<Tagged>> {
    let arns: Vec<String> = elb::list_load_balancers(aws).await?.into_iter().map(|(arn, _)| arn).collect();
    Ok(elb::tags_of(aws, &arns)
        .await?
        .into_iter()
        .filter(|(_, tags)| owned(tags))
        .map(|(id, tags)| Tagged { kind: "load-balancer", id, tags, regional: true, vpc: None })
        .collect())
}

/// Every private zone carrying an ownership tag (tags read ten zones a call).
async fn private_zones(aws: &Aws) -> AwsResult<Vec<Tagged>> {
    let ids: Vec<String> = dns::private_zones(aws)
        .await?
        .iter()
        .map(|z| z.id().rsplit('/').next().unwrap_or_default().to_string())
        .collect();
    Ok(dns::tags_of_zones(aws, &ids)
        .await?
        .into_iter()
        .filter(|(_, tags)| owned(tags))
        .map(|(id, tags)| Tagged { kind: "hosted-zone", id, tags, regional: false, vpc: None })
        .collect())
}

fn iam_pairs(tags: &[aws_sdk_iam::types::Tag]) -> Vec<(String, String)> {
    tags.iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()
}

/// Roles and OIDC providers carrying an ownership tag (ListRoles carries no tags: each role is
/// read; one deleted in between is passed over — it is no cluster's any more).
async fn iam_resources(aws: &Aws) -> AwsResult<Vec<Tagged>> {
    let mut names = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let out = aws.iam.list_roles().set_marker(marker.clone()).send().await.map_err(|e| classify("ListRoles", e))?;
        names.extend(out.roles().iter().map(|r| r.role_name().to_string()));
        marker = out.marker().map(str::to_string).filter(|_| out.is_truncated());
        if marker.is_none() {
            break;
        }
    }
    let mut found = Vec::new();
    for name in names {
        if let Some(tags) = iam_tags(aws, Kind::IamRole, &name).await?.filter(|t| owned(t)) {
            found.push(Tagged { kind: "iam-role", id: name, tags, regional: false, vpc: None });
        }
    }
    for arn in iam::list_oidc_providers(aws).await? {
        if let Some(tags) = iam_tags(aws, Kind::OidcProvider, &arn).await?.filter(|t| owned(t)) {
            found.push(Tagged { kind: "oidc-provider", id: arn, tags, regional: false, vpc: None });
        }
    }
    Ok(found)
}

/// The tags of one IAM resource, read as the IAM lookups read them; None if it is gone (or not IAM).
pub(crate) async fn iam_tags(aws: &Aws, kind: Kind, id: &str) -> AwsResult<Option<Vec<(String, String)>>> {
    Ok(match kind {
        Kind::IamRole => iam::get_role(aws, id).await?.map(|r| iam_pairs(&r.tags)),
        Kind::InstanceProfile => iam::get_instance_profile(aws, id).await?.map(|p| iam_pairs(&p.tags)),
        Kind::OidcProvider => iam::oidc_provider_tags(aws, id).await?.map(|t| iam_pairs(&t)),
        _ => None,
    })
}

/// Where the protection tag of a kind's resources is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtectionRead {
    /// EC2's tag index, one call for every id.
    Ec2,
    /// The resource's own service: ELB, Route53, IAM, S3.
    OwnService,
    /// Not read: made by the cluster's cloud provider, deleted by name, not tagged by people.
    Never,
}

impl ProtectionRead {
    pub fn of(kind: Kind) -> ProtectionRead {
        match kind {
            Kind::LoadBalancer
            | Kind::TargetGroup
            | Kind::HostedZone
            | Kind::IamRole
            | Kind::InstanceProfile
            | Kind::OidcProvider
            | Kind::RegistryBucket => ProtectionRead::OwnService,
            Kind::ClassicLoadBalancer => ProtectionRead::Never,
            _ => ProtectionRead::Ec2,
        }
    }
}

/// Whether any EC2 resource of the region carries `infraflow.io/do-not-delete` (one read of
/// EC2's tag index): when none does, no EC2 resource of any cluster is protected, whatever a
/// discovery would find, and `first_protected`'s EC2 pass would find nothing either (it reads
/// the same index).
pub async fn any_ec2_protected(aws: &Aws) -> AwsResult<bool> {
    let out = aws
        .ec2
        .describe_tags()
        .filters(filter("key", &[PROTECTION_TAG]))
        .max_results(5)
        .send()
        .await
        .map_err(|e| classify("DescribeTags", e))?;
    Ok(!out.tags().is_empty())
}

/// The first resource of `inventory` (what a teardown found to delete) that carries
/// `infraflow.io/do-not-delete`: a teardown must not go on. EC2 in one call for every id, ELB a
/// call per twenty, zones and IAM a call each.
pub async fn first_protected(aws: &Aws, inventory: &BTreeMap<Kind, Vec<String>>) -> AwsResult<Option<(Kind, String)>> {
    let protected = |tags: &[(String, String)]| tags.iter().any(|(k, _)| k == PROTECTION_TAG);
    let mut ec2_ids: Vec<(Kind, &String)> = Vec::new();
    for (kind, ids) in inventory {
        match ProtectionRead::of(*kind) {
            ProtectionRead::Ec2 => {
                ec2_ids.extend(ids.iter().map(|id| (*kind, id)));
                continue;
            }
            ProtectionRead::Never => continue,
            ProtectionRead::OwnService => {}
        }
        match kind {
            Kind::LoadBalancer | Kind::TargetGroup => {
                for (arn, tags) in elb::tags_of(aws, ids).await? {
                    if protected(&tags) {
                        return Ok(Some((*kind, arn)));
                    }
                }
            }
            Kind::HostedZone => {
                for (zone, tags) in dns::tags_of_zones(aws, ids).await? {
                    if protected(&tags) {
                        return Ok(Some((*kind, zone)));
                    }
                }
            }
            Kind::IamRole | Kind::InstanceProfile | Kind::OidcProvider => {
                for id in ids {
                    if iam_tags(aws, *kind, id).await?.is_some_and(|t| protected(&t)) {
                        return Ok(Some((*kind, id.clone())));
                    }
                }
            }
            Kind::RegistryBucket => {
                for name in ids {
                    if crate::s3::bucket_tags(aws, name).await?.is_some_and(|t| protected(&t)) {
                        return Ok(Some((*kind, name.clone())));
                    }
                }
            }
            _ => {}
        }
    }
    for chunk in ec2_ids.chunks(190) {
        let ids: Vec<&str> = chunk.iter().map(|(_, id)| id.as_str()).collect();
        let out = aws
            .ec2
            .describe_tags()
            .filters(filter("key", &[PROTECTION_TAG]))
            .filters(filter("resource-id", &ids))
            .send()
            .await
            .map_err(|e| classify("DescribeTags", e))?;
        let hit = out.tags().iter().find_map(|t| chunk.iter().find(|(_, id)| Some(id.as_str()) == t.resource_id()));
        if let Some((kind, id)) = hit {
            return Ok(Some((*kind, (*id).clone())));
        }
    }
    Ok(None)
}
