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

/// The public zone `name` this management side made (its mark names `id`, and by the workflow
/// `id.workflow` when set, as an undo asks), if there is one.
async fn ours(aws: &Aws, id: &Identity, name: &str) -> AwsResult<Option<super::ZoneSummary>> {
    let key = id.key();
    Ok(zones_named(aws, name).await?.into_iter().find(|z| {
        !z.private
            && parse_marker(&z.comment).is_some_and(|(k, by)| {
                k == key && by.is_some_and(|by| !by.is_empty() && (id.workflow.is_empty() || by == id.workflow))
            })
    }))
}

/// Refuses (a pause naming them) while the zone this management side made holds records of
/// clusters: anything but its own NS and SOA (a delegation's NS records count).
pub async fn refuse_while_used(aws: &Aws, id: &Identity, name: &str) -> AwsResult<()> {
    let Some(z) = ours(aws, id, name).await? else { return Ok(()) };
    let records = aws
        .r53
        .list_resource_record_sets()
        .hosted_zone_id(&z.id)
        .send()
        .await
        .map_err(|e| classify("ListResourceRecordSets", e))?;
    let apex = bare_name(name);
    let used: Vec<String> = records
        .resource_record_sets()
        .iter()
        .filter(|r| !(matches!(r.r#type().as_str(), "NS" | "SOA") && bare_name(r.name()) == apex))
        .map(|r| format!("{} {}", bare_name(r.name()), r.r#type().as_str()))
        .collect();
    if used.is_empty() {
        return Ok(());
    }
    Err(AwsError::operator(
        "DeleteHostedZone",
        format!(
            "public zone {name} ({}) still holds records of clusters ({}): tear those clusters down first, then `infraflow retry`",
            z.id,
            used.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        ),
    ))
}

fn bare_name(n: &str) -> String {
    n.trim_end_matches('.').to_ascii_lowercase()
}

/// Deletes public zone `name` if this management side made it (`ours`) and no cluster uses it
/// (`refuse_while_used`); a zone of that name it did not make is left.
pub async fn delete_public_zone_if_empty(
    aws: &Aws,
    id: &Identity,
    name: &str,
) -> AwsResult<crate::oidc_bucket::Removal> {
    use crate::oidc_bucket::Removal;
    let Some(z) = ours(aws, id, name).await? else {
        let there = zones_named(aws, name).await?.iter().any(|z| !z.private);
        return Ok(if there { Removal::NotOurs } else { Removal::Gone });
    };
    refuse_while_used(aws, id, name).await?;
    match aws.r53.delete_hosted_zone().id(&z.id).send().await.map_err(|e| classify("DeleteHostedZone", e)) {
        Ok(_) => Ok(Removal::Deleted),
        Err(e) if e.is_not_found() => Ok(Removal::Gone),
        Err(e) => Err(e),
    }
}
