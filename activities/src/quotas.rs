//! The service quotas a provision can meet half-way (Elastic IPs, VPCs, internet gateways, NAT
//! gateways per zone), read as AWS holds them for the account — Service Quotas' applied value,
//! or AWS's published default when Service Quotas cannot be read, said so — with what the
//! account uses of each now and what of it a cluster already has. Reads only.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::NatGatewayState;

use crate::adopt::pairs;
use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::owned;

/// The IAM actions this file calls.
pub const IAM_READ: &[&str] = &[
    "servicequotas:GetServiceQuota",
    "ec2:DescribeAddresses",
    "ec2:DescribeVpcs",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeNatGateways",
    "ec2:DescribeSubnets",
    // The zone a provision that names none gets (`quota::provision::with_its_zone`).
    "ec2:DescribeAvailabilityZones",
];
pub const IAM_WRITE: &[&str] = &[];
pub const IAM_DELETE: &[&str] = &[];

/// A quota a provision draws on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Quota {
    ElasticIps,
    Vpcs,
    InternetGateways,
    /// Per Availability Zone.
    NatGateways,
}

impl Quota {
    pub const ALL: [Quota; 4] = [Quota::ElasticIps, Quota::Vpcs, Quota::InternetGateways, Quota::NatGateways];

    /// Service Quotas' service and quota codes.
    pub fn codes(self) -> (&'static str, &'static str) {
        match self {
            Quota::ElasticIps => ("ec2", "L-0263D0A3"),
            Quota::Vpcs => ("vpc", "L-F678F1CE"),
            Quota::InternetGateways => ("vpc", "L-A4707A72"),
            Quota::NatGateways => ("vpc", "L-FE5A380F"),
        }
    }

    /// AWS's published default (EC2's and Amazon VPC's quota pages): 5 of each, per region (NAT
    /// gateways: per Availability Zone).
    pub fn published_default(self) -> u32 {
        5
    }

    /// `Elastic IP`, `Elastic IPs`.
    pub fn name(self, n: u32) -> String {
        let one = match self {
            Quota::ElasticIps => "Elastic IP",
            Quota::Vpcs => "VPC",
            Quota::InternetGateways => "internet gateway",
            Quota::NatGateways => "NAT gateway",
        };
        if n == 1 { one.to_string() } else { format!("{one}s") }
    }
}

/// One quota as the account holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    pub value: u32,
    /// Why AWS's published default stands in for Service Quotas' value, if it does.
    pub defaulted: Option<String>,
}

/// What the account allows and uses, and what of it each cluster asked about already has (which
/// a provision finds and keeps rather than makes).
#[derive(Clone, Debug, Default)]
pub struct Usage {
    pub limits: BTreeMap<Quota, Limit>,
    /// In use now, by quota (NAT gateways: by zone, under `zone_nats`).
    pub in_use: BTreeMap<Quota, u32>,
    /// By cluster (infraID): what carries its ownership tag.
    pub own: BTreeMap<String, BTreeMap<Quota, u32>>,
    /// NAT gateways pending or available per zone, and each cluster's per zone.
    pub zone_nats: BTreeMap<String, u32>,
    pub own_zone_nats: BTreeMap<String, BTreeMap<String, u32>>,
}

impl Usage {
    /// Cluster `infra`'s count of `quota` (in `zone`, for NAT gateways).
    pub fn own_of(&self, infra: &str, quota: Quota, zone: Option<&str>) -> u32 {
        match zone {
            Some(z) => self.own_zone_nats.get(infra).and_then(|m| m.get(z)).copied().unwrap_or(0),
            None => self.own.get(infra).and_then(|m| m.get(&quota)).copied().unwrap_or(0),
        }
    }

    /// In use now of `quota` (in `zone`, for NAT gateways).
    pub fn in_use_of(&self, quota: Quota, zone: Option<&str>) -> u32 {
        match zone {
            Some(z) => self.zone_nats.get(z).copied().unwrap_or(0),
            None => self.in_use.get(&quota).copied().unwrap_or(0),
        }
    }
}

/// Service Quotas' applied value of `quota`, or the published default and why.
async fn limit(aws: &Aws, quota: Quota) -> Limit {
    let (service, code) = quota.codes();
    match applied_value(aws, service, code).await {
        Ok(value) => Limit { value, defaulted: None },
        Err(why) => Limit { value: quota.published_default(), defaulted: Some(why) },
    }
}

/// Service Quotas' applied value of quota `code` of `service`, or why it could not be read (the
/// error code: `AccessDeniedException`, `NoSuchResourceException`).
pub(crate) async fn applied_value(aws: &Aws, service: &str, code: &str) -> Result<u32, String> {
    let r = aws.quotas.get_service_quota().service_code(service).quota_code(code).send().await;
    match r.map_err(|e| classify("GetServiceQuota", e)) {
        Ok(out) => match out.quota().and_then(|q| q.value()) {
            Some(v) if v >= 0.0 => Ok(v as u32),
            _ => Err("Service Quotas gave no value".into()),
        },
        Err(e) => Err(e.code.clone().unwrap_or_else(|| e.message.clone())),
    }
}

/// Reads every quota, the account's usage of each, and the share of each cluster of `infras`: 4
/// quota reads and 4 or 5 Describe calls, side by side.
pub async fn read(aws: &Aws, infras: &[String]) -> AwsResult<Usage> {
    let queries: Vec<(String, crate::tags::TagQuery)> = infras.iter().map(|i| (i.clone(), owned(i))).collect();
    let owners = |tags: &[(String, String)]| -> Vec<String> {
        queries.iter().filter(|(_, q)| q.matches_pairs(tags)).map(|(i, _)| i.clone()).collect()
    };
    let limits = futures::future::join_all(Quota::ALL.map(|q| async move { (q, limit(aws, q).await) }));
    let addresses = async {
        let out = aws.ec2.describe_addresses().send().await.map_err(|e| classify("DescribeAddresses", e))?;
        Ok(out.addresses().iter().map(|a| pairs(a.tags())).collect::<Vec<_>>())
    };
    let vpcs = async {
        let out = aws.ec2.describe_vpcs().send().await.map_err(|e| classify("DescribeVpcs", e))?;
        Ok(out.vpcs().iter().map(|v| pairs(v.tags())).collect::<Vec<_>>())
    };
    let gateways = async {
        let out =
            aws.ec2.describe_internet_gateways().send().await.map_err(|e| classify("DescribeInternetGateways", e))?;
        Ok(out.internet_gateways().iter().map(|g| pairs(g.tags())).collect::<Vec<_>>())
    };
    let nats = async {
        let out = aws.ec2.describe_nat_gateways().send().await.map_err(|e| classify("DescribeNatGateways", e))?;
        Ok(out
            .nat_gateways()
            .iter()
            .filter(|n| matches!(n.state(), Some(NatGatewayState::Pending | NatGatewayState::Available)))
            .map(|n| (n.subnet_id().unwrap_or_default().to_string(), pairs(n.tags())))
            .collect::<Vec<_>>())
    };
    let (limits, described) = futures::join!(limits, async { futures::try_join!(addresses, vpcs, gateways, nats) });
    let (addresses, vpcs, gateways, nats) = described?;
    let mut usage = Usage { limits: limits.into_iter().collect(), ..Usage::default() };
    for (quota, tags) in [(Quota::ElasticIps, &addresses), (Quota::Vpcs, &vpcs), (Quota::InternetGateways, &gateways)] {
        usage.in_use.insert(quota, tags.len() as u32);
        for infra in tags.iter().flat_map(|t| owners(t)) {
            *usage.own.entry(infra).or_default().entry(quota).or_insert(0) += 1;
        }
    }
    // Each NAT gateway's zone is its subnet's: one read of those subnets.
    let subnets: Vec<&str> = nats.iter().map(|(s, _)| s.as_str()).collect();
    let zone_of: BTreeMap<String, String> = if subnets.is_empty() {
        BTreeMap::new()
    } else {
        let out = aws
            .ec2
            .describe_subnets()
            .filters(crate::tags::filter("subnet-id", &subnets))
            .send()
            .await
            .map_err(|e| classify("DescribeSubnets", e))?;
        out.subnets()
            .iter()
            .filter_map(|s| Some((s.subnet_id()?.to_string(), s.availability_zone()?.to_string())))
            .collect()
    };
    for (subnet, tags) in &nats {
        let zone = zone_of.get(subnet).cloned().unwrap_or_default();
        *usage.zone_nats.entry(zone.clone()).or_insert(0) += 1;
        for infra in owners(tags) {
            *usage.own_zone_nats.entry(infra).or_default().entry(zone.clone()).or_insert(0) += 1;
        }
    }
    Ok(usage)
}
