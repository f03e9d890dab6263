//! The private zones a VPC is associated with: where records naming its endpoints resolve.

use aws_sdk_route53::types::VpcRegion;

use super::names::bare;
use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::throttle::within_rate;

/// The private zones associated with a VPC (ListHostedZonesByVPC, every page).
pub async fn zones_of_vpc(aws: &Aws, vpc_id: &str) -> AwsResult<Vec<String>> {
    let mut zones = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let out = within_rate(|| async {
            aws.r53
                .list_hosted_zones_by_vpc()
                .vpc_id(vpc_id)
                .vpc_region(VpcRegion::from(aws.region.as_str()))
                .set_next_token(next.clone())
                .send()
                .await
                .map_err(|e| classify("ListHostedZonesByVPC", e))
        })
        .await;
        let out = match out {
            Ok(o) => o,
            // A VPC already gone has no zones left to find through it.
            Err(e) if e.is_not_found() || e.code_is("InvalidVPCId") => return Ok(zones),
            Err(e) => return Err(e),
        };
        zones.extend(out.hosted_zone_summaries().iter().map(|z| bare(z.hosted_zone_id())));
        match out.next_token() {
            Some(t) if !t.is_empty() => next = Some(t.to_string()),
            _ => return Ok(zones),
        }
    }
}
