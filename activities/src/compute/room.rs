//! EC2's room in a region for On-Demand instances of the standard families (A, C, D, H, I, M, R,
//! T, Z: one vCPU quota, Service Quotas' `ec2` `L-1216C47A`): the quota, the vCPUs the region's
//! pending and running instances of those families use, and how many of them a node pool (or a
//! cluster) has already. Reads only: the quota, the instances and their types' vCPUs.

use std::collections::{BTreeMap, BTreeSet};

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::{TagQuery, filter};

/// The standard families' On-Demand vCPU quota.
const STANDARD_VCPUS: (&str, &str) = ("ec2", "L-1216C47A");

/// What the region holds and allows of the standard families' vCPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VcpuRoom {
    /// Service Quotas' applied value, or why it could not be read: AWS publishes no default for
    /// this quota (it sets one per account), so nothing stands in for it.
    pub quota: Result<u32, String>,
    /// vCPUs of the standard families' pending and running instances.
    pub in_use: u32,
    /// vCPUs of one instance of the type asked about.
    pub each: u32,
    /// Pending and running instances carrying the tag asked about (what a pool has already).
    pub own: u32,
}

/// Whether instances of `instance_type` count against the standard families' quota: its family
/// starts with A, C, D, H, I, M, R, T or Z, less the families with quotas of their own that share
/// a first letter (Inf, DL, Trn, HPC, Mac).
pub fn is_standard(instance_type: &str) -> bool {
    let family = instance_type.split('.').next().unwrap_or_default().to_ascii_lowercase();
    let own_quota = ["inf", "dl", "trn", "hpc", "mac"].iter().any(|p| family.starts_with(p));
    family.starts_with(['a', 'c', 'd', 'h', 'i', 'm', 'r', 't', 'z']) && !own_quota
}

/// The room for `instance_type` (None: not a standard family, whose quota this does not read),
/// `own` counting the live instances tagged `mine`.
pub async fn vcpu_room(aws: &Aws, instance_type: &str, mine: &TagQuery) -> AwsResult<Option<VcpuRoom>> {
    if !is_standard(instance_type) {
        return Ok(None);
    }
    let census = vcpu_census(aws, &[instance_type]).await?;
    Ok(Some(census.room(instance_type, mine)))
}

/// The region's standard-family vCPUs in one read, for any number of askers (a daemon admits
/// several node pools against one reading): the quota, the pending and running instances, and
/// the vCPUs of their types and of the types asked about.
#[derive(Clone, Debug)]
pub struct VcpuCensus {
    /// As `VcpuRoom::quota`.
    pub quota: Result<u32, String>,
    running: Vec<(String, Vec<(String, String)>)>,
    vcpus: BTreeMap<String, u32>,
}

impl VcpuCensus {
    /// A census of what was read elsewhere: the quota, the (type, tags) of the pending and running
    /// instances, and the vCPUs of each type.
    pub fn of(
        quota: Result<u32, String>,
        running: Vec<(String, Vec<(String, String)>)>,
        vcpus: BTreeMap<String, u32>,
    ) -> VcpuCensus {
        VcpuCensus { quota, running, vcpus }
    }

    /// vCPUs of one instance of `instance_type` (0 for a type not asked about or not standard).
    pub fn each(&self, instance_type: &str) -> u32 {
        self.vcpus.get(instance_type).copied().filter(|_| is_standard(instance_type)).unwrap_or(0)
    }

    /// vCPUs of the standard families' pending and running instances.
    pub fn in_use(&self) -> u32 {
        self.running.iter().map(|(t, _)| self.each(t)).sum()
    }

    /// Pending and running instances carrying the tag `mine`.
    pub fn own(&self, mine: &TagQuery) -> u32 {
        self.running.iter().filter(|(_, tags)| mine.matches_pairs(tags)).count() as u32
    }

    /// The room for `instance_type` as seen by the instances tagged `mine`.
    pub fn room(&self, instance_type: &str, mine: &TagQuery) -> VcpuRoom {
        VcpuRoom {
            quota: self.quota.clone(),
            in_use: self.in_use(),
            each: self.each(instance_type),
            own: self.own(mine),
        }
    }
}

/// Reads the census, knowing the vCPUs of `asked` (instance types about to be launched) too.
pub async fn vcpu_census(aws: &Aws, asked: &[&str]) -> AwsResult<VcpuCensus> {
    let (service, code) = STANDARD_VCPUS;
    let (quota, running) = futures::join!(crate::quotas::applied_value(aws, service, code), running(aws));
    let running = running?;
    let types: BTreeSet<String> = running
        .iter()
        .map(|(t, _)| t.as_str())
        .chain(asked.iter().copied())
        .filter(|t| is_standard(t))
        .map(str::to_string)
        .collect();
    let vcpus = vcpus_of(aws, &types).await?;
    Ok(VcpuCensus::of(quota, running, vcpus))
}

/// The region's pending and running instances: (type, tags).
async fn running(aws: &Aws) -> AwsResult<Vec<(String, Vec<(String, String)>)>> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = aws
            .ec2
            .describe_instances()
            .filters(filter("instance-state-name", &["pending", "running"]))
            .set_next_token(token.take())
            .send()
            .await
            .map_err(|e| classify("DescribeInstances", e))?;
        for i in page.reservations().iter().flat_map(|r| r.instances()) {
            let kind = i.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default();
            let tags =
                i.tags().iter().filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())));
            out.push((kind, tags.collect()));
        }
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            return Ok(out);
        }
    }
}

/// The default vCPUs of each of `types`, 100 types a call (the API's most).
async fn vcpus_of(aws: &Aws, types: &BTreeSet<String>) -> AwsResult<BTreeMap<String, u32>> {
    let mut out = BTreeMap::new();
    let names: Vec<&String> = types.iter().collect();
    for chunk in names.chunks(100) {
        let asked = chunk.iter().map(|t| aws_sdk_ec2::types::InstanceType::from(t.as_str()));
        let page = aws
            .ec2
            .describe_instance_types()
            .set_instance_types(Some(asked.collect()))
            .send()
            .await
            .map_err(|e| classify("DescribeInstanceTypes", e))?;
        for t in page.instance_types() {
            let (Some(kind), Some(v)) = (t.instance_type(), t.v_cpu_info().and_then(|v| v.default_v_cpus())) else {
                continue;
            };
            out.insert(kind.as_str().to_string(), v.max(0) as u32);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::is_standard;

    #[test]
    fn the_standard_families_are_told_from_those_with_quotas_of_their_own() {
        for t in
            ["m6i.xlarge", "c5.large", "t3.micro", "r7g.2xlarge", "i4i.large", "z1d.large", "a1.medium", "d3.xlarge"]
        {
            assert!(is_standard(t), "{t}");
        }
        for t in [
            "inf2.xlarge",
            "dl1.24xlarge",
            "trn1.2xlarge",
            "hpc6a.48xlarge",
            "mac2.metal",
            "p4d.24xlarge",
            "g5.xlarge",
            "x2idn.large",
            "u-6tb1.metal",
        ] {
            assert!(!is_standard(t), "{t}");
        }
    }
}
