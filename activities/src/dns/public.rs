//! The management side's public zone (the base domain clusters' records go under): found by
//! name, or made — its comment marks whose it is (`infraflow:<identity> created-by:<creator>`), as a
//! cluster's private zones are marked — and deleted only if marked so and holding nothing but
//! its NS and SOA records.

use aws_sdk_route53::types::HostedZoneConfig;

use super::names::bare;
use super::{parse_marker, zones_named};
use crate::client::Aws;
use crate::error::{AwsError, AwsResult, classify, missing};
use crate::tags::Identity;
use crate::throttle::within_rate;

/// The public zone `name`: the one there (whoever made it; true if this call made it), or a new
/// one marked with `id`.
pub async fn ensure_public_zone(aws: &Aws, id: &Identity, name: &str) -> AwsResult<(String, bool)> {
    if let Some(z) = zones_named(aws, name).await?.into_iter().find(|z| !z.private) {
        return Ok((z.id, false));
    }
    let mark = super::marker(id);
    let out = within_rate(|| async {
        aws.r53
            .create_hosted_zone()
            .name(name)
            // The same token on a retry: Route53 answers the zone it made, never a second one.
            .caller_reference(id.token())
            .hosted_zone_config(HostedZoneConfig::builder().comment(mark.clone()).private_zone(false).build())
            .send()
            .await
            .map_err(|e| classify("CreateHostedZone", e))
    })
    .await;
    match out {
        Ok(out) => {
            Ok((bare(out.hosted_zone().map(|z| z.id()).ok_or_else(|| missing("CreateHostedZone", "zone id"))?), true))
        }
        // Made by an attempt whose answer was lost: found by name now.
        Err(e) if e.code_is("HostedZoneAlreadyExists") => {
            let z = zones_named(aws, name).await?.into_iter().find(|z| !z.private);
            z.map(|z| (z.id, true)).ok_or(e)
        }
        Err(e) => Err(e),
    }
}

/// Deletes public zone `name` if its comment marks it as made by `id` (by the workflow `id.workflow`
/// when set, as an undo asks) and it holds only its NS and SOA records; false if it is gone or not this management side's. Records of clusters in it are
/// refused (the operator's: those clusters' names would stop resolving).
pub async fn delete_public_zone_if_empty(aws: &Aws, id: &Identity, name: &str) -> AwsResult<bool> {
    let key = id.key();
    let Some(z) = zones_named(aws, name).await?.into_iter().find(|z| {
        !z.private
            && parse_marker(&z.comment).is_some_and(|(k, by)| {
                k == key && by.is_some_and(|by| !by.is_empty() && (id.workflow.is_empty() || by == id.workflow))
            })
    }) else {
        return Ok(false);
    };
    let records = aws
        .r53
        .list_resource_record_sets()
        .hosted_zone_id(&z.id)
        .send()
        .await
        .map_err(|e| classify("ListResourceRecordSets", e))?;
    let others = records.resource_record_sets().iter().filter(|r| !matches!(r.r#type().as_str(), "NS" | "SOA")).count();
    if others > 0 {
        return Err(AwsError::operator(
            "DeleteHostedZone",
            format!(
                "public zone {name} ({}) still holds {others} records of clusters: tear those clusters down first, then `infraflow retry`",
                z.id
            ),
        ));
    }
    match aws.r53.delete_hosted_zone().id(&z.id).send().await.map_err(|e| classify("DeleteHostedZone", e)) {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}
