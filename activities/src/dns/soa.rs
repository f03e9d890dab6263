//! A private zone's negative-caching TTL (the SOA record's last field): HyperShift sets it to 60 s
//! (`setSOAMinimum`), so a name looked up inside the VPC before its record exists is asked again
//! within a minute, not cached as missing for Route53's default day.

use aws_sdk_route53::types::{Change, ChangeAction, ResourceRecord, ResourceRecordSet, RrType};

use super::names::fqdn;
use super::records::change_records;
use crate::client::Aws;
use crate::error::{AwsError, AwsResult, classify};
use crate::throttle::within_rate;

/// The negative-caching TTL HyperShift gives its private zones, in seconds.
pub const NEGATIVE_CACHE_TTL: u32 = 60;

/// Sets the SOA's negative-caching TTL of zone `zone_id` (named `name`) to
/// [`NEGATIVE_CACHE_TTL`]. Read first, written only if it differs: a re-run after a crash (before
/// or after the write) reads 60 and writes nothing, and the UPSERT itself is idempotent.
pub async fn ensure_negative_cache_ttl(aws: &Aws, zone_id: &str, name: &str) -> AwsResult<()> {
    let (soa, fields) = read_soa(aws, zone_id, name).await?;
    if fields[6] == NEGATIVE_CACHE_TTL.to_string() {
        return Ok(());
    }
    let mut fields = fields;
    fields[6] = NEGATIVE_CACHE_TTL.to_string();
    let record = ResourceRecord::builder()
        .value(fields.join(" "))
        .build()
        .map_err(|e| AwsError::terminal("ChangeResourceRecordSets", e.to_string()))?;
    let set = ResourceRecordSet::builder()
        .name(soa.name())
        .r#type(RrType::Soa)
        .ttl(soa.ttl().unwrap_or(900))
        .resource_records(record)
        .build()
        .map_err(|e| AwsError::terminal("ChangeResourceRecordSets", e.to_string()))?;
    let change = Change::builder()
        .action(ChangeAction::Upsert)
        .resource_record_set(set)
        .build()
        .map_err(|e| AwsError::terminal("ChangeResourceRecordSets", e.to_string()))?;
    within_rate(|| change_records(aws, zone_id, vec![change.clone()])).await
}

/// The negative-caching TTL zone `zone_id` (named `name`) holds now: read only (`check`).
pub async fn negative_cache_ttl(aws: &Aws, zone_id: &str, name: &str) -> AwsResult<String> {
    Ok(read_soa(aws, zone_id, name).await?.1.swap_remove(6))
}

/// The zone's SOA record and its seven fields.
async fn read_soa(aws: &Aws, zone_id: &str, name: &str) -> AwsResult<(ResourceRecordSet, Vec<String>)> {
    let apex = fqdn(name);
    // Both calls are asked again in place while Route53 throttles them (five requests a second
    // per account): the read changes nothing, the UPSERT is the same every time.
    let out = within_rate(|| async {
        let r = aws.r53.list_resource_record_sets().hosted_zone_id(zone_id).start_record_name(&apex);
        r.start_record_type(RrType::Soa).max_items(1).send().await.map_err(|e| classify("ListResourceRecordSets", e))
    })
    .await?;
    let soa = out
        .resource_record_sets()
        .iter()
        .find(|r| r.r#type() == &RrType::Soa && r.name().eq_ignore_ascii_case(&apex))
        .ok_or_else(|| {
            AwsError::not_yet("ListResourceRecordSets", format!("zone {zone_id} shows no SOA record yet"))
        })?;
    let value = soa.resource_records().first().map(|r| r.value()).unwrap_or_default();
    let Some(fields) = soa_fields(value) else {
        return Err(AwsError::terminal(
            "ListResourceRecordSets",
            format!(
                "the SOA record of zone {zone_id} is {value:?}, not the seven fields of an SOA: it is left as it is"
            ),
        ));
    };
    Ok((soa.clone(), fields))
}

/// The seven fields of an SOA value (`mname rname serial refresh retry expire minimum`), from
/// AWS's text or from moto's (which wraps it as a Python dict's text: MOTO-NOTES.md).
fn soa_fields(value: &str) -> Option<Vec<String>> {
    let inner = value.trim().trim_start_matches("{'Value': '").trim_end_matches("'}");
    let fields: Vec<String> = inner.split_whitespace().map(str::to_string).collect();
    let numeric = fields.len() == 7 && fields[2..].iter().all(|f| f.parse::<u64>().is_ok());
    numeric.then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_soa_value_is_read_from_aws_text_and_from_motos_wrapped_text() {
        let aws = "ns-2048.awsdns-64.com. hostmaster.example.com. 1 7200 900 1209600 86400";
        assert_eq!(soa_fields(aws).unwrap()[6], "86400");
        let moto = format!("{{'Value': '{aws}'}}");
        assert_eq!(soa_fields(&moto).unwrap().join(" "), aws);
        assert_eq!(soa_fields("ns. hostmaster. 1 7200 900"), None);
        assert_eq!(soa_fields("ns. hostmaster. 1 7200 900 1209600 soon"), None);
    }
}
