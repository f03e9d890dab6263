//! Route53's room for hosted zones: the account's limit and how many it has (`GetAccountLimit`,
//! `MAX_HOSTED_ZONES_BY_OWNER`: both in one call), and how many of a cluster's zone names exist
//! already. Reads only.

use aws_sdk_route53::types::AccountLimitType;

use crate::client::Aws;
use crate::error::{AwsResult, classify};

/// The account's hosted zones and their limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneRoom {
    pub count: u32,
    pub limit: u32,
}

pub async fn zone_room(aws: &Aws) -> AwsResult<ZoneRoom> {
    let asked = aws.r53.get_account_limit().r#type(AccountLimitType::MaxHostedZonesByOwner);
    let out = asked.send().await.map_err(|e| classify("GetAccountLimit", e))?;
    let limit = out.limit().map(|l| l.value()).unwrap_or(0).max(0) as u32;
    Ok(ZoneRoom { count: out.count().max(0) as u32, limit })
}

/// How many of the zones named exist (a provision resumed or run again keeps them: they are not
/// new), one read each, side by side.
pub async fn zones_existing(aws: &Aws, names: &[String]) -> AwsResult<u32> {
    let found = futures::future::join_all(names.iter().map(|name| async move {
        let out = aws.r53.list_hosted_zones_by_name().dns_name(name).max_items(1).send().await;
        let out = out.map_err(|e| classify("ListHostedZonesByName", e))?;
        let wanted = format!("{}.", name.trim_end_matches('.'));
        Ok::<u32, crate::AwsError>(u32::from(out.hosted_zones().first().is_some_and(|z| z.name() == wanted)))
    }));
    found.await.into_iter().sum()
}
