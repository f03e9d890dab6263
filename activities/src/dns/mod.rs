//! Route53: the public zone of the base domain (looked up, never created), and private zones
//! attached to the cluster's VPC, marked at creation so a re-run or teardown finds them.
//!
//! Why this file is one (566 lines): one concept, a cluster's private zones — found by their
//! comment marker, made, adopted (HyperShift's by its own lookup, another workflow's with this
//! adopter's mark), judged by the regions of the VPCs they serve, and deleted with their records;
//! the marker and the adoption marks are read by every one of those paths. Records, the hosted zone
//! limit and the SOA are files of their own already (`records`, `room`, `soa`; `names` and
//! `vpc_zones` since).

mod names;
pub mod public;
mod records;
mod room;
mod soa;
mod vpc_zones;

use aws_sdk_route53::types::{Change, ChangeAction, HostedZoneConfig, Tag, TagResourceType, Vpc, VpcRegion};

use crate::client::Aws;
use crate::error::missing;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::{Identity, OWNED, adopters, adoption_key, ownership_key};
use crate::throttle::within_rate;
use names::{bare, fqdn};
use records::change_records;
pub use records::{
    WrittenCname, cname_values, delete_records_named, delete_records_named_pointing_to, delete_records_pointing_to,
    records_named_pointing_to, records_of, restore_cnames, upsert_cnames,
};
pub use room::{ZoneRoom, zone_room, zones_existing};
pub use soa::{NEGATIVE_CACHE_TTL, ensure_negative_cache_ttl, negative_cache_ttl};
pub use vpc_zones::zones_of_vpc;

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &[
    "route53:ListHostedZones",
    "route53:ListHostedZonesByName",
    "route53:ListHostedZonesByVPC",
    "route53:ListResourceRecordSets",
    "route53:ListTagsForResources",
    "route53:GetHostedZone",
    "route53:ListTagsForResource",
    // The account's hosted zone limit and count (`room`), for the quota check before a
    // provision is journaled.
    "route53:GetAccountLimit",
];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &[
    "route53:CreateHostedZone",
    "route53:ChangeTagsForResource",
    "route53:ChangeResourceRecordSets",
    // Adopting a private zone HyperShift made: its comment takes infraflow's identity marker.
    "route53:UpdateHostedZoneComment",
    "ec2:DescribeVpcs",
];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["route53:DeleteHostedZone", "route53:ChangeResourceRecordSets"];

/// The comment written at creation: `infraflow:<identity>[ created-by:<workflow>]`. Tags on a
/// hosted zone need a second call; the comment is set atomically with the zone, so a crash
/// between the two calls can neither hide the zone nor lose who created it.
fn marker(id: &Identity) -> String {
    let base = format!("infraflow:{}", id.key());
    if id.workflow.is_empty() { base } else { format!("{base} created-by:{}", id.workflow) }
}

/// The identity and creator a zone comment records, if infraflow wrote it.
fn parse_marker(comment: &str) -> Option<(&str, Option<&str>)> {
    let rest = comment.strip_prefix("infraflow:")?;
    match rest.split_once(" created-by:") {
        Some((key, by)) => Some((key, Some(by))),
        None => Some((rest, None)),
    }
}

/// ChangeTagsForResource's limit per call.
const ROUTE53_TAGS_PER_CALL: usize = 10;

/// A hosted zone as listed: id, name, whether private, and its comment.
#[derive(Clone, Debug)]
pub struct ZoneSummary {
    pub id: String,
    pub name: String,
    pub private: bool,
    pub comment: String,
}

async fn zones_named(aws: &Aws, name: &str) -> AwsResult<Vec<ZoneSummary>> {
    let want = fqdn(name);
    let out = within_rate(|| async {
        let r = aws.r53.list_hosted_zones_by_name().dns_name(&want).send().await;
        r.map_err(|e| classify("ListHostedZonesByName", e))
    })
    .await?;
    Ok(out
        .hosted_zones()
        .iter()
        .filter(|z| z.name().eq_ignore_ascii_case(&want))
        .map(|z| ZoneSummary {
            id: bare(z.id()),
            name: z.name().to_string(),
            private: z.config().is_some_and(|c| c.private_zone()),
            comment: z.config().and_then(|c| c.comment()).unwrap_or_default().to_string(),
        })
        .collect())
}

/// The public zone named `base_domain`, if any.
pub async fn find_public_zone(aws: &Aws, base_domain: &str) -> AwsResult<Option<String>> {
    Ok(zones_named(aws, base_domain).await?.into_iter().find(|z| !z.private).map(|z| z.id))
}

/// A private zone `name` associated with the VPC, tagged as owned, whose negative answers are
/// cached for a minute (HyperShift's SOA minimum), whether it was made here or found.
pub async fn ensure_private_zone(aws: &Aws, id: &Identity, name: &str, vpc_id: &str) -> AwsResult<String> {
    let key = id.key();
    // One read of the zones of this name serves the lookup and, when it finds nothing marked,
    // the adoption of HyperShift's.
    let named = zones_named(aws, name).await?;
    let found = named.iter().find(|z| z.private && parse_marker(&z.comment).is_some_and(|(k, _)| k == key)).cloned();
    let (zone, tags) = match found {
        // Made by whoever the comment names: tag it again without claiming it.
        Some(z) => {
            let creator = parse_marker(&z.comment).and_then(|(_, by)| by);
            let made_by_us = creator == Some(id.workflow.as_str());
            if !made_by_us {
                refuse_zone_of_other_vpcs(aws, &z.id, name, vpc_id).await?;
            }
            let mut tags = if made_by_us { id.tags() } else { id.adoption_tags() };
            // Another workflow made it: this adopter's own mark keeps that workflow's undo off it
            // (every adopter has its own: one's rollback never takes another's).
            if let Some(by) = creator.filter(|_| !made_by_us && !id.workflow.is_empty()) {
                // Route53 holds ten tags a zone: a mark only while it fits beside those there and
                // few others' marks (those keep the creator's undo off already).
                let there: Vec<(String, String)> = zone_tags(aws, &z.id)
                    .await?
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
                    .collect();
                let others = adopters(there.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                let mark = (adoption_key(&id.workflow), id.workflow.clone());
                let mut keys: Vec<&str> = there.iter().chain(&tags).chain([&mark]).map(|(k, _)| k.as_str()).collect();
                keys.sort();
                keys.dedup();
                if others.contains(&id.workflow) || (others.len() < ZONE_ADOPTER_MARKS && keys.len() <= ZONE_TAG_LIMIT)
                {
                    tags.push(mark);
                }
                tracing::info!(zone = %z.id, identity = %key, creator = by, "adopted a zone another workflow made");
            }
            (z.id, tags)
        }
        None => match adopt_hypershift_zone(aws, id, name, vpc_id, named).await? {
            Some(z) => (z, id.adoption_tags()),
            None => (create_private_zone(aws, id, name, vpc_id, marker(id)).await?, id.tags()),
        },
    };
    // Tagged every time: a zone adopted after a lost reply (or a crash) may lack its tags.
    // Route53 takes at most 10 tags per call (and 50 per zone).
    let tags: Vec<Tag> = tags.into_iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect();
    // Route53 allows five requests a second per account, and a zone step makes several: a
    // throttled one is asked again in place (adding tags twice changes nothing), not by failing
    // the step, whose retry would ask for every call again.
    for chunk in tags.chunks(ROUTE53_TAGS_PER_CALL) {
        within_rate(|| async {
            let r = aws.r53.change_tags_for_resource().resource_type(TagResourceType::Hostedzone).resource_id(&zone);
            r.set_add_tags(Some(chunk.to_vec())).send().await.map_err(|e| classify("ChangeTagsForResource", e))
        })
        .await?;
    }
    ensure_negative_cache_ttl(aws, &zone, name).await?;
    Ok(zone)
}

/// A marked zone another workflow made is used only where it serves this VPC: the same infraID's
/// provision in another region must not take (and hand out as its own) the zone of the cluster
/// running there (review F3). It pauses naming the VPCs the zone serves.
async fn refuse_zone_of_other_vpcs(aws: &Aws, zone: &str, name: &str, vpc_id: &str) -> AwsResult<()> {
    let Some(vpcs) = zone_vpcs(aws, zone).await? else { return Ok(()) };
    if vpcs.is_empty() || vpcs.iter().any(|(v, _)| v == vpc_id) {
        return Ok(());
    }
    let serves: Vec<String> = vpcs.iter().map(|(v, r)| format!("{v} in {r}")).collect();
    Err(AwsError {
        operator: true,
        ..AwsError::terminal(
            "GetHostedZone",
            format!(
                "the private zone {name} ({zone}) marked for this cluster serves {}, not {vpc_id}: it is another region's (or another VPC's) cluster's; check the input's region and infraID, then `infraflow retry`",
                serves.join(", ")
            ),
        )
    })
}

/// The VPCs (id, region) zone `zone` is associated with; None if it is gone.
pub async fn zone_vpcs(aws: &Aws, zone: &str) -> AwsResult<Option<Vec<(String, String)>>> {
    let out = within_rate(|| async {
        aws.r53.get_hosted_zone().id(zone).send().await.map_err(|e| classify("GetHostedZone", e))
    })
    .await;
    let out = match out {
        Ok(o) => o,
        Err(e) if e.is_not_found() || e.code_is("NoSuchHostedZone") => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(
        out.vpcs()
            .iter()
            .map(|v| {
                let region = v.vpc_region().map(|r| r.as_str().to_string()).unwrap_or_default();
                (v.vpc_id().unwrap_or_default().to_string(), region)
            })
            .collect(),
    ))
}

/// How many tags Route53 holds on one zone, and how many adopters' marks a zone carries at most.
const ZONE_TAG_LIMIT: usize = 10;
const ZONE_ADOPTER_MARKS: usize = 2;

/// The private zones infraflow marked for `infra_id`, with where each serves: here (`here` lists
/// the zones associated with the cluster's own VPCs of `aws`'s region; or no VPC at all: a zone
/// whose VPC went first), or else the regions of the VPCs it serves. Anyone's VPC of this region
/// is no proof: a hub VPC associated with every cluster's zones would make another region's
/// cluster's zones this region's (SAFETY-A7937A6 G8). A zone of `here` serves here without a
/// `GetHostedZone`: Route53's five requests a second are a fleet's teardown floor.
async fn marked_zones(aws: &Aws, infra_id: &str, here: &[String]) -> AwsResult<Vec<(String, Result<(), Vec<String>>)>> {
    let prefix = format!("infraflow:{infra_id}/");
    let marked: Vec<String> = private_zones(aws)
        .await?
        .iter()
        .filter(|z| z.config().and_then(|c| c.comment()).unwrap_or_default().starts_with(&prefix))
        .map(|z| bare(z.id()))
        .collect();
    let read = marked.into_iter().map(|zone| async move {
        if here.contains(&zone) {
            return Ok(Some((zone, Ok(()))));
        }
        let Some(vpcs) = zone_vpcs(aws, &zone).await? else { return Ok(None) };
        let mut regions: Vec<String> = vpcs.into_iter().map(|(_, r)| r).collect();
        regions.sort();
        regions.dedup();
        Ok(Some((zone, if regions.is_empty() { Ok(()) } else { Err(regions) })))
    });
    Ok(futures::future::try_join_all(read).await?.into_iter().flatten().collect())
}

/// The private zones marked for `infra_id` that serve none of its VPCs of `aws`'s region
/// (`cluster_vpcs`), with the regions of the VPCs they serve: what a teardown here leaves.
pub async fn marked_zones_elsewhere(
    aws: &Aws,
    infra_id: &str,
    cluster_vpcs: &[String],
) -> AwsResult<Vec<(String, Vec<String>)>> {
    let here = futures::future::try_join_all(cluster_vpcs.iter().map(|vpc| zones_of_vpc(aws, vpc))).await?;
    let here: Vec<String> = here.into_iter().flatten().collect();
    Ok(marked_zones(aws, infra_id, &here).await?.into_iter().filter_map(|(z, r)| r.err().map(|r| (z, r))).collect())
}

/// The private zone `name` HyperShift's CLI made for this cluster (it finds its zones by name and
/// does not mark them): associated with the cluster's VPC and no other, and either without a
/// comment (HyperShift writes none) or tagged as the cluster's. Its comment becomes the identity
/// marker, without a creator, so no compensation deletes it. A zone a person made (a comment of
/// theirs, untagged) or shares with other VPCs is never taken: teardown would delete it with
/// every record. Two such zones pause the workflow naming both.
/// `named`: the zones of that name, as the caller just read them.
async fn adopt_hypershift_zone(
    aws: &Aws,
    id: &Identity,
    name: &str,
    vpc_id: &str,
    named: Vec<ZoneSummary>,
) -> AwsResult<Option<String>> {
    let mut theirs = Vec::new();
    for z in named.into_iter().filter(|z| z.private && parse_marker(&z.comment).is_none()) {
        let out = aws.r53.get_hosted_zone().id(&z.id).send().await.map_err(|e| classify("GetHostedZone", e))?;
        if out.vpcs().is_empty() || !out.vpcs().iter().all(|v| v.vpc_id() == Some(vpc_id)) {
            continue;
        }
        if !z.comment.is_empty() && !zone_is_owned(aws, &z.id, &id.infra_id).await? {
            tracing::info!(zone = %z.id, comment = %z.comment, "left a private zone of the cluster's name that is someone's own");
            continue;
        }
        theirs.push(z.id);
    }
    if theirs.len() > 1 {
        return Err(AwsError {
            operator: true,
            ..AwsError::terminal(
                "adopt",
                format!(
                    "there are {} private zones {name} on VPC {vpc_id} ({}), one too many: delete the one that is not the cluster's, then `infraflow retry`",
                    theirs.len(),
                    theirs.join(", ")
                ),
            )
        });
    }
    let Some(zone) = theirs.pop() else { return Ok(None) };
    let adopted = Identity { workflow: String::new(), ..id.clone() };
    aws.r53
        .update_hosted_zone_comment()
        .id(&zone)
        .comment(marker(&adopted))
        .send()
        .await
        .map_err(|e| classify("UpdateHostedZoneComment", e))?;
    tracing::info!(zone = %zone, identity = %id.key(), "adopted the private zone HyperShift made");
    Ok(Some(zone))
}

/// The tags of zone `zone`; None if it is gone.
async fn zone_tags(aws: &Aws, zone: &str) -> AwsResult<Option<Vec<Tag>>> {
    let out = within_rate(|| async {
        aws.r53
            .list_tags_for_resource()
            .resource_type(TagResourceType::Hostedzone)
            .resource_id(zone)
            .send()
            .await
            .map_err(|e| classify("ListTagsForResource", e))
    })
    .await;
    match out {
        Ok(o) => Ok(Some(o.resource_tag_set().map(|s| s.tags().to_vec()).unwrap_or_default())),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether zone `zone` carries the cluster's ownership tag.
async fn zone_is_owned(aws: &Aws, zone: &str, infra_id: &str) -> AwsResult<bool> {
    let key = ownership_key(infra_id);
    let tags = zone_tags(aws, zone).await?.unwrap_or_default();
    Ok(tags.iter().any(|t| t.key() == Some(key.as_str()) && t.value() == Some(OWNED)))
}

async fn create_private_zone(aws: &Aws, id: &Identity, name: &str, vpc_id: &str, mark: String) -> AwsResult<String> {
    let out = aws
        .r53
        .create_hosted_zone()
        .name(name)
        .caller_reference(id.token())
        .vpc(Vpc::builder().vpc_id(vpc_id).vpc_region(VpcRegion::from(aws.region.as_str())).build())
        .hosted_zone_config(HostedZoneConfig::builder().comment(mark).private_zone(true).build())
        .send()
        .await
        .map_err(|e| classify("CreateHostedZone", e))?;
    Ok(bare(out.hosted_zone().map(|z| z.id()).ok_or_else(|| missing("CreateHostedZone", "zone id"))?))
}

/// Every private hosted zone of the account, following pagination.
pub(crate) async fn private_zones(aws: &Aws) -> AwsResult<Vec<aws_sdk_route53::types::HostedZone>> {
    let mut zones = Vec::new();
    let mut marker_token: Option<String> = None;
    loop {
        let out = within_rate(|| async {
            aws.r53
                .list_hosted_zones()
                .set_marker(marker_token.clone())
                .send()
                .await
                .map_err(|e| classify("ListHostedZones", e))
        })
        .await?;
        zones.extend(out.hosted_zones().iter().filter(|z| z.config().is_some_and(|c| c.private_zone())).cloned());
        if !out.is_truncated() {
            return Ok(zones);
        }
        marker_token = out.next_marker().map(str::to_string);
    }
}

/// Whether the private zone `name` is infraflow's zone of identity `key` (`<infraID>/<role>`):
/// proof that a name given to teardown is this cluster's, not another's.
pub async fn private_zone_has_identity(aws: &Aws, name: &str, key: &str) -> AwsResult<bool> {
    Ok(zones_named(aws, name)
        .await?
        .iter()
        .any(|z| z.private && parse_marker(&z.comment).is_some_and(|(k, _)| k == key)))
}

/// The private zones whose comment names identity `key`, each with its creator (from the
/// comment) and its adoption mark (a tag): what a rollback reads to remove its own mark and to
/// see that what it made is in someone else's use.
pub async fn zone_marks(aws: &Aws, key: &str) -> AwsResult<Vec<(String, Option<String>, Vec<(String, String)>)>> {
    let mut out = Vec::new();
    for z in private_zones(aws).await? {
        let comment = z.config().and_then(|c| c.comment()).unwrap_or_default();
        let Some((k, by)) = parse_marker(comment) else { continue };
        if k != key {
            continue;
        }
        let zone = bare(z.id());
        let Some(tags) = zone_tags(aws, &zone).await? else { continue };
        let tags = tags.iter().filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string()))).collect();
        out.push((zone, by.map(str::to_string), tags));
    }
    Ok(out)
}

/// Removes adoption marks `keys` of zone `zone` (an adopter's own: the caller has read that they
/// name it).
pub async fn remove_zone_marks(aws: &Aws, zone: &str, keys: &[String]) -> AwsResult<()> {
    within_rate(|| async {
        aws.r53
            .change_tags_for_resource()
            .resource_type(TagResourceType::Hostedzone)
            .resource_id(zone)
            .set_remove_tag_keys(Some(keys.to_vec()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("ChangeTagsForResource", e))
    })
    .await
}

/// Private zones whose creation comment names identity `key` (and, if given, creator `created_by`
/// — and then only those no other workflow adopted since: their tags are read).
pub async fn find_zones_by_identity(aws: &Aws, key: &str, created_by: Option<&str>) -> AwsResult<Vec<String>> {
    let marked: Vec<String> = private_zones(aws)
        .await?
        .iter()
        .filter(|z| {
            let comment = z.config().and_then(|c| c.comment()).unwrap_or_default();
            parse_marker(comment).is_some_and(|(k, by)| k == key && created_by.is_none_or(|w| by == Some(w)))
        })
        .map(|z| bare(z.id()))
        .collect();
    let Some(creator) = created_by else { return Ok(marked) };
    let mut mine = Vec::new();
    for zone in marked {
        let Some(tags) = zone_tags(aws, &zone).await? else { continue };
        let adopted = adopters(tags.iter().filter_map(|t| Some((t.key()?, t.value()?)))).iter().any(|a| a != creator);
        if adopted {
            tracing::info!(zone = %zone, creator, "left a zone another workflow adopted");
        } else {
            mine.push(zone);
        }
    }
    Ok(mine)
}

/// Private zones of the cluster in `aws`'s region: marked at creation by infraflow for
/// `infra_id` and serving this region (a zone is regional through its VPCs: one serving only
/// another region's VPCs is the cluster of that region's, review F3), or — among the zones
/// associated with the cluster's VPCs `vpcs` — tagged owned (by the cluster's other tools). Tags
/// are read only for those few zones: an account may hold hundreds of zones.
pub async fn find_owned_zones(aws: &Aws, infra_id: &str, vpcs: &[String]) -> AwsResult<Vec<String>> {
    let of_vpcs = futures::future::try_join_all(vpcs.iter().map(|vpc| zones_of_vpc(aws, vpc))).await?;
    let mut on_vpcs: Vec<String> = of_vpcs.into_iter().flatten().collect();
    on_vpcs.sort();
    on_vpcs.dedup();
    let mut owned: Vec<String> =
        marked_zones(aws, infra_id, &on_vpcs).await?.into_iter().filter(|(_, r)| r.is_ok()).map(|(z, _)| z).collect();
    let candidates: Vec<String> = on_vpcs.into_iter().filter(|z| !owned.contains(z)).collect();
    let key = ownership_key(infra_id);
    for (id, tags) in tags_of_zones(aws, &candidates).await? {
        if tags.iter().any(|(k, v)| *k == key && v == OWNED) {
            owned.push(id);
        }
    }
    Ok(owned)
}

/// The tags of zones `ids`, ten a call (ListTagsForResources); a zone deleted since it was listed
/// is left out (AWS then answers for none of its ten, which are asked again one by one).
pub(crate) async fn tags_of_zones(aws: &Aws, ids: &[String]) -> AwsResult<Vec<(String, Vec<(String, String)>)>> {
    let ten = |chunk: Vec<String>| async move {
        let out = within_rate(|| async {
            aws.r53
                .list_tags_for_resources()
                .resource_type(TagResourceType::Hostedzone)
                .set_resource_ids(Some(chunk.clone()))
                .send()
                .await
                .map_err(|e| classify("ListTagsForResources", e))
        })
        .await?;
        Ok::<_, crate::error::AwsError>(
            out.resource_tag_sets()
                .iter()
                .filter_map(|set| {
                    let tags = set.tags().iter().filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())));
                    Some((bare(set.resource_id()?), tags.collect()))
                })
                .collect::<Vec<_>>(),
        )
    };
    let mut out = Vec::new();
    for chunk in ids.chunks(10) {
        match ten(chunk.to_vec()).await {
            Ok(t) => out.extend(t),
            Err(e) if e.is_not_found() => {
                for id in chunk {
                    match ten(vec![id.clone()]).await {
                        Ok(t) => out.extend(t),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Deletes a hosted zone after emptying it of records.
pub async fn delete_zone(aws: &Aws, zone_id: &str) -> AwsResult<bool> {
    let records = match records_of(aws, zone_id).await {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e),
    };
    if !records.is_empty() {
        let changes: Vec<Change> = records
            .into_iter()
            .filter_map(|r| Change::builder().action(ChangeAction::Delete).resource_record_set(r).build().ok())
            .collect();
        match change_records(aws, zone_id, changes).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    // A throttle is waited out in place: a teardown deletes the cluster's zones beside everything
    // else, and Route53 allows the account 5 requests a second.
    crate::error::gone_ok(
        within_rate(|| async {
            aws.r53
                .delete_hosted_zone()
                .id(zone_id)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify("DeleteHostedZone", e))
        })
        .await,
    )
}

/// The private zone named `name`, if exactly one exists.
pub async fn find_private_zone(aws: &Aws, name: &str) -> AwsResult<Option<String>> {
    let zones: Vec<ZoneSummary> = zones_named(aws, name).await?.into_iter().filter(|z| z.private).collect();
    Ok(if zones.len() == 1 { zones.into_iter().next().map(|z| z.id) } else { None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tags::Identity;

    #[test]
    fn zone_markers_record_identity_and_creator() {
        let id = Identity::new("i", "local-zone", None, "n".into()).with_tags(&[], "wf-7");
        assert_eq!(marker(&id), "infraflow:i/local-zone created-by:wf-7");
        assert_eq!(parse_marker(&marker(&id)), Some(("i/local-zone", Some("wf-7"))));
        assert_eq!(parse_marker("infraflow:i/local-zone"), Some(("i/local-zone", None)), "zones of older versions");
        assert_eq!(parse_marker("made by hand"), None);
    }
}
