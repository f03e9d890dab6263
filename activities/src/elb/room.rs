//! ELB's room in a region for what a create-privatelink makes: the account's limits of network
//! load balancers and target groups (`DescribeAccountLimits`), and the names of those the region
//! has (a name is unique per account and region, so a link run again finds its own by name and
//! makes none). Reads only, side by side.

use std::collections::BTreeSet;

use aws_sdk_elasticloadbalancingv2::types::LoadBalancerTypeEnum;

use crate::client::Aws;
use crate::error::{AwsResult, classify};

/// AWS's published defaults (the Network Load Balancers guide's quotas), used when ELB names no
/// limit.
const NLBS_DEFAULT: u32 = 50;
const TARGET_GROUPS_DEFAULT: u32 = 3000;

/// What the region holds and allows of network load balancers and target groups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElbRoom {
    /// The network load balancers' names, and ELB's limit of them.
    pub nlbs: BTreeSet<String>,
    pub nlb_limit: u32,
    /// Every target group's name (every kind counts against one limit), and the limit.
    pub target_groups: BTreeSet<String>,
    pub target_group_limit: u32,
}

pub async fn elb_room(aws: &Aws) -> AwsResult<ElbRoom> {
    let (limits, nlbs, target_groups) = futures::try_join!(limits(aws), nlb_names(aws), target_group_names(aws))?;
    let limit = |name: &str, default: u32| {
        limits.iter().find(|(n, _)| n == name).and_then(|(_, max)| max.parse::<u32>().ok()).unwrap_or(default)
    };
    Ok(ElbRoom {
        nlb_limit: limit("network-load-balancers", NLBS_DEFAULT),
        target_group_limit: limit("target-groups", TARGET_GROUPS_DEFAULT),
        nlbs,
        target_groups,
    })
}

/// ELB's limits for the account: (name, max).
async fn limits(aws: &Aws) -> AwsResult<Vec<(String, String)>> {
    every_page(|marker| async move {
        let o = aws.elb.describe_account_limits().set_marker(marker).send().await;
        let o = o.map_err(|e| classify("DescribeAccountLimits", e))?;
        let limits =
            o.limits().iter().filter_map(|l| Some((l.name()?.to_string(), l.max().unwrap_or_default().to_string())));
        Ok((limits.collect(), o.next_marker().map(str::to_string)))
    })
    .await
}

async fn nlb_names(aws: &Aws) -> AwsResult<BTreeSet<String>> {
    let names = every_page(|marker| async move {
        let o = aws.elb.describe_load_balancers().set_marker(marker).send().await;
        let o = o.map_err(|e| classify("DescribeLoadBalancers", e))?;
        let names = o
            .load_balancers()
            .iter()
            .filter(|l| l.r#type() == Some(&LoadBalancerTypeEnum::Network))
            .filter_map(|l| l.load_balancer_name().map(str::to_string));
        Ok((names.collect(), o.next_marker().map(str::to_string)))
    });
    Ok(names.await?.into_iter().collect())
}

async fn target_group_names(aws: &Aws) -> AwsResult<BTreeSet<String>> {
    let names = every_page(|marker| async move {
        let o = aws.elb.describe_target_groups().set_marker(marker).send().await;
        let o = o.map_err(|e| classify("DescribeTargetGroups", e))?;
        let names = o.target_groups().iter().filter_map(|t| t.target_group_name().map(str::to_string));
        Ok((names.collect(), o.next_marker().map(str::to_string)))
    });
    Ok(names.await?.into_iter().collect())
}

/// Every page of an ELB listing, following its `Marker`.
async fn every_page<T, F, Fut>(mut page: F) -> AwsResult<Vec<T>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = AwsResult<(Vec<T>, Option<String>)>>,
{
    let (mut all, mut marker) = page(None).await?;
    while let Some(m) = marker.take() {
        let (more, next) = page(Some(m)).await?;
        all.extend(more);
        marker = next;
    }
    Ok(all)
}
