//! Where a cluster's IAM that records no region belongs. IAM is global; infraflow writes the
//! region it made IAM for (`infraflow.io/region`), HyperShift's CLI does not. A teardown in one
//! region deletes region-less IAM only while the cluster's VPC is there, or in no region at all:
//! when the cluster's VPC stands in another region, the IAM is that region's cluster's — left
//! and named (SAFETY-A7937A6: a teardown naming us-west-2 deleted a us-east-1 cluster's roles).
//! Its reads are declared with the IAM area's (`iam::IAM_READ`).

use crate::client::{Aws, AwsPool};
use crate::error::{AwsResult, classify};
use crate::resources::{self, Kind, Scope};
use crate::tags::REGION_TAG;

/// Region-less IAM of cluster `infra` that a teardown in `aws`'s region leaves, each with the
/// regions where the cluster has VPCs (`network::cluster_vpcs`: its own, or a customer's carrying
/// its record). Deleted here only when the cluster's VPCs are here alone, or nowhere at all: a
/// cluster with VPCs in another region — beside this one or instead of it — keeps its IAM, named
/// (the IAM cannot say which region's cluster it serves). Reads every region only when there is
/// region-less IAM.
pub async fn anchored_elsewhere(pool: &AwsPool, aws: &Aws, infra: &str) -> AwsResult<Vec<(Kind, String, Vec<String>)>> {
    let scope = Scope::Owned(infra.to_string());
    let mut regionless = Vec::new();
    for kind in [Kind::InstanceProfile, Kind::IamRole, Kind::OidcProvider] {
        for id in resources::find(aws, kind, &scope).await? {
            let tags = crate::census::iam_tags(aws, kind, &id).await?.unwrap_or_default();
            if !tags.iter().any(|(k, _)| k == REGION_TAG) {
                regionless.push((kind, id));
            }
        }
    }
    if regionless.is_empty() {
        return Ok(Vec::new());
    }
    let regions = aws.ec2.describe_regions().send().await.map_err(|e| classify("DescribeRegions", e))?;
    let mut homes = Vec::new();
    for region in regions.regions().iter().filter_map(|r| r.region_name()) {
        let there = if region == aws.region { aws.clone() } else { pool.region(region).await };
        if !crate::network::cluster_vpcs(&there, infra).await?.is_empty() {
            homes.push(region.to_string());
        }
    }
    let here_alone = homes.is_empty() || homes == [aws.region.clone()];
    if here_alone {
        return Ok(Vec::new());
    }
    Ok(regionless.into_iter().map(|(kind, id)| (kind, id, homes.clone())).collect())
}
