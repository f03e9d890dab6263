//! Route53 records: listing a zone's records, the CNAMEs a workflow writes and restores, and the
//! records pointing at what a cluster deletes.

use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ResourceRecordSet};

use super::names::fqdn;
use super::vpc_zones::zones_of_vpc;
use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::throttle::within_rate;

/// Records of a zone other than its own SOA and NS, every page.
pub async fn records_of(aws: &Aws, zone_id: &str) -> AwsResult<Vec<ResourceRecordSet>> {
    let mut all: Vec<ResourceRecordSet> = Vec::new();
    let mut start: Option<(String, aws_sdk_route53::types::RrType, Option<String>)> = None;
    loop {
        let out = within_rate(|| async {
            let mut req = aws.r53.list_resource_record_sets().hosted_zone_id(zone_id);
            if let Some((name, kind, id)) = &start {
                req =
                    req.start_record_name(name).start_record_type(kind.clone()).set_start_record_identifier(id.clone());
            }
            req.send().await.map_err(|e| classify("ListResourceRecordSets", e))
        })
        .await?;
        all.extend(out.resource_record_sets().iter().cloned());
        match (out.is_truncated(), out.next_record_name(), out.next_record_type()) {
            (true, Some(name), Some(kind)) => {
                start = Some((name.to_string(), kind.clone(), out.next_record_identifier().map(str::to_string)))
            }
            _ => break,
        }
    }
    let apex = all.iter().find(|r| r.r#type().as_str() == "SOA").map(|r| r.name().to_string());
    Ok(all
        .into_iter()
        .filter(|r| !(matches!(r.r#type().as_str(), "SOA" | "NS") && Some(r.name()) == apex.as_deref()))
        .collect())
}

/// Applies record changes to a zone in one batch.
pub(super) async fn change_records(aws: &Aws, zone_id: &str, changes: Vec<Change>) -> AwsResult<()> {
    let batch = ChangeBatch::builder()
        .set_changes(Some(changes))
        .build()
        .map_err(|e| crate::error::AwsError::terminal("ChangeResourceRecordSets", e.to_string()))?;
    aws.r53
        .change_resource_record_sets()
        .hosted_zone_id(zone_id)
        .change_batch(batch)
        .send()
        .await
        .map_err(|e| classify("ChangeResourceRecordSets", e))?;
    Ok(())
}

/// The current CNAME value of each name in the zone (None where there is no such record).
pub async fn cname_values(aws: &Aws, zone_id: &str, names: &[String]) -> AwsResult<Vec<(String, Option<String>)>> {
    let records = records_of(aws, zone_id).await?;
    Ok(names
        .iter()
        .map(|n| {
            let value = records
                .iter()
                .find(|r| r.r#type().as_str() == "CNAME" && same_name(r.name(), n))
                .and_then(|r| r.resource_records().first())
                .map(|rr| rr.value().to_string());
            (n.clone(), value)
        })
        .collect())
}

/// Route53 returns `*` as `\052` and names with a trailing dot.
fn same_name(listed: &str, name: &str) -> bool {
    let listed = listed.replace("\\052", "*");
    listed.trim_end_matches('.').eq_ignore_ascii_case(name.trim_end_matches('.'))
}

/// A CNAME a workflow wrote, and what the name held before (None: nothing).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WrittenCname {
    pub name: String,
    pub wrote: String,
    #[serde(default)]
    pub previous: Option<String>,
}

/// Undoes CNAME writes: a name that still holds what was written gets its previous value back
/// (or is deleted if it had none); a name someone has changed since is left alone.
pub async fn restore_cnames(aws: &Aws, zone_id: &str, written: &[WrittenCname]) -> AwsResult<usize> {
    let names: Vec<String> = written.iter().map(|w| w.name.clone()).collect();
    let current = match cname_values(aws, zone_id, &names).await {
        Ok(c) => c,
        Err(e) if e.is_not_found() => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut upserts = Vec::new();
    let mut deletes = Vec::new();
    for (w, (_, now)) in written.iter().zip(&current) {
        if now.as_deref() != Some(w.wrote.as_str()) {
            continue;
        }
        match &w.previous {
            Some(prev) => upserts.push((w.name.clone(), prev.clone())),
            None => deletes.push(w.name.clone()),
        }
    }
    let n = upserts.len() + deletes.len();
    if !upserts.is_empty() {
        upsert_cnames(aws, zone_id, &upserts).await?;
    }
    if !deletes.is_empty() {
        delete_records_named(aws, zone_id, &deletes).await?;
    }
    Ok(n)
}

/// Creates or updates CNAME records (`name` -> `value`) in one change.
pub async fn upsert_cnames(aws: &Aws, zone_id: &str, records: &[(String, String)]) -> AwsResult<()> {
    use aws_sdk_route53::types::{ResourceRecord, RrType};
    let changes: Vec<Change> = records
        .iter()
        .filter_map(|(name, value)| {
            let set = ResourceRecordSet::builder()
                .name(name)
                .r#type(RrType::Cname)
                .ttl(300)
                .resource_records(ResourceRecord::builder().value(value).build().ok()?)
                .build()
                .ok()?;
            Change::builder().action(ChangeAction::Upsert).resource_record_set(set).build().ok()
        })
        .collect();
    change_records(aws, zone_id, changes).await?;
    Ok(())
}

/// Deletes the records with these names (any type but the apex SOA/NS); absent ones are fine.
pub async fn delete_records_named(aws: &Aws, zone_id: &str, names: &[String]) -> AwsResult<usize> {
    let want: Vec<String> = names.iter().map(|n| fqdn(n).replace('*', "\\052")).collect();
    let records = match records_of(aws, zone_id).await {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return Ok(0),
        Err(e) => return Err(e),
    };
    let doomed = records.into_iter().filter(|r| {
        want.iter().any(|w| w.eq_ignore_ascii_case(r.name()) || w.replace("\\052", "*").eq_ignore_ascii_case(r.name()))
    });
    delete_record_sets(aws, zone_id, doomed.collect()).await
}

/// Deletes these record sets of `zone_id` in one change; returns how many.
async fn delete_record_sets(aws: &Aws, zone_id: &str, sets: Vec<ResourceRecordSet>) -> AwsResult<usize> {
    let doomed: Vec<Change> = sets
        .into_iter()
        .filter_map(|r| Change::builder().action(ChangeAction::Delete).resource_record_set(r).build().ok())
        .collect();
    if doomed.is_empty() {
        return Ok(0);
    }
    let n = doomed.len();
    change_records(aws, zone_id, doomed).await?;
    Ok(n)
}

/// The records named `name` whose value is one of `targets` (DNS names of load balancers), as a
/// CNAME or an alias: a record of that name pointing elsewhere (another cluster of the same name,
/// a blue/green replacement) is not this cluster's.
pub async fn records_named_pointing_to(
    aws: &Aws,
    zone_id: &str,
    name: &str,
    targets: &[String],
) -> AwsResult<Vec<ResourceRecordSet>> {
    let want = fqdn(name).replace('*', "\\052");
    let norm = |v: &str| {
        let v = v.trim_end_matches('.').to_ascii_lowercase();
        v.strip_prefix("dualstack.").map(str::to_string).unwrap_or(v)
    };
    let targets: Vec<String> = targets.iter().filter(|t| !t.is_empty()).map(|t| norm(t)).collect();
    let records = match records_of(aws, zone_id).await {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(records
        .into_iter()
        .filter(|r| want.eq_ignore_ascii_case(r.name()) || want.replace("\\052", "*").eq_ignore_ascii_case(r.name()))
        .filter(|r| {
            let alias = r.alias_target().map(|a| norm(a.dns_name()));
            let values = r.resource_records().iter().map(|v| norm(v.value()));
            let cname =
                if r.r#type() == &aws_sdk_route53::types::RrType::Cname { values.collect() } else { Vec::new() };
            alias.into_iter().chain(cname).any(|v| targets.contains(&v))
        })
        .collect())
}

/// Deletes `records_named_pointing_to`; returns how many.
pub async fn delete_records_named_pointing_to(
    aws: &Aws,
    zone_id: &str,
    name: &str,
    targets: &[String],
) -> AwsResult<usize> {
    let doomed = records_named_pointing_to(aws, zone_id, name, targets).await?;
    delete_record_sets(aws, zone_id, doomed).await
}

/// Deletes CNAME records, in any private zone, whose value is one of `targets` (an endpoint's
/// DNS names): records left pointing at a deleted endpoint would resolve to nothing.
pub async fn delete_records_pointing_to(aws: &Aws, targets: &[String], vpc_id: &str) -> AwsResult<usize> {
    if targets.is_empty() {
        return Ok(0);
    }
    let norm = |s: &str| s.trim_end_matches('.').to_ascii_lowercase();
    let targets: Vec<String> = targets.iter().map(|t| norm(t)).collect();
    let mut deleted = 0;
    // Records naming an interface endpoint resolve only in zones associated with its VPC: those
    // are read, not every zone of the account.
    for zone in zones_of_vpc(aws, vpc_id).await? {
        let doomed: Vec<Change> = records_of(aws, &zone)
            .await?
            .into_iter()
            .filter(|r| r.r#type().as_str() == "CNAME")
            .filter(|r| r.resource_records().iter().any(|v| targets.contains(&norm(v.value()))))
            .filter_map(|r| Change::builder().action(ChangeAction::Delete).resource_record_set(r).build().ok())
            .collect();
        if !doomed.is_empty() {
            deleted += doomed.len();
            change_records(aws, &zone, doomed).await?;
        }
    }
    Ok(deleted)
}
