//! The marks a cluster puts on a customer's subnets and VPC: the tags HyperShift, the cloud
//! provider and Karpenter find them by, and — in the same `CreateTags` call — a record of which of
//! them this cluster added (`infraflow.io/marks/<infraID>` = `<creator> <key> <key> …`), so that
//! taking the marks off removes only what the cluster added: a tag the customer (or another
//! cluster) had put there first is never removed. The record is on the resource, where every
//! journal can read it: a rollback removes only its own creator's marks, a teardown the cluster's.
//! A later workflow of the cluster that finds them (another journal's, a second run) writes itself
//! as their adopter (`infraflow.io/marks-adopted-by/<infraID>`): the maker's rollback then hands
//! the record over instead of taking off marks a live cluster's run relies on, and the adopter's
//! rollback drops only its adoption.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Tag;
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::{OWNERSHIP_PREFIX, filter, ownership_key};

/// The key of a cluster's record of its marks: `infraflow.io/marks/<infraID>`.
pub const MARKS_PREFIX: &str = "infraflow.io/marks/";

pub fn record_key(infra: &str) -> String {
    format!("{MARKS_PREFIX}{infra}")
}

/// How many adopters' marks of one cluster a customer's resource carries at most.
const CUSTOMER_ADOPTER_MARKS: usize = 3;

/// The key a former release named the last workflow that adopted cluster `infra`'s marks with:
/// one slot, rewritten by each adopter (SAFETY-A7937A6 G1). Still read, never written.
fn adopted_key(infra: &str) -> String {
    format!("infraflow.io/marks-adopted-by/{infra}")
}

/// The key of workflow `adopter`'s own adoption of cluster `infra`'s marks: one per adopter, so
/// one's rollback never takes another's.
fn adopter_key(infra: &str, adopter: &str) -> String {
    let digest = crate::tags::adoption_key(adopter);
    let digest = digest.rsplit('/').next().unwrap_or_default();
    format!("{}/{digest}", adopted_key(infra))
}

/// Every adoption of cluster `infra`'s marks on a resource: (key, adopter), in either slot.
fn adoptions(infra: &str, tags: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let legacy = adopted_key(infra);
    let own = format!("{legacy}/");
    tags.iter()
        .filter(|(k, v)| (**k == legacy || k.starts_with(&own)) && !v.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// What a cluster wants on one of the customer's resources.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Marked {
    pub resource: String,
    pub tags: Vec<(String, String)>,
}

/// The tags of `ids` (subnets, VPCs), by resource.
async fn tags_of(aws: &Aws, ids: &[&str]) -> AwsResult<BTreeMap<String, BTreeMap<String, String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> =
        ids.iter().map(|i| (i.to_string(), BTreeMap::new())).collect();
    let mut token = None;
    loop {
        let page = aws
            .ec2
            .describe_tags()
            .filters(filter("resource-id", ids))
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| classify("DescribeTags", e))?;
        for t in page.tags() {
            if let (Some(id), Some(key)) = (t.resource_id(), t.key())
                && let Some(tags) = out.get_mut(id)
            {
                tags.insert(key.to_string(), t.value().unwrap_or_default().to_string());
            }
        }
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            return Ok(out);
        }
    }
}

/// Puts `wants` on the customer's resources for cluster `infra`, recording what `creator` added.
/// A resource that already carries the cluster's record (an earlier run, a crashed attempt of this
/// one) is left as it is; a tag already present — with any value — is never overwritten. Returns
/// the resources it marked now.
pub async fn mark(aws: &Aws, infra: &str, creator: &str, wants: &[Marked]) -> AwsResult<Vec<String>> {
    let ids: Vec<&str> = wants.iter().map(|m| m.resource.as_str()).collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let now = tags_of(aws, &ids).await?;
    let record = record_key(infra);
    let mut marked = Vec::new();
    for want in wants {
        let have = now.get(&want.resource).cloned().unwrap_or_default();
        if let Some((maker, _)) = marks_of(infra, &have) {
            let all = adoptions(infra, &have);
            let adopted = all.iter().any(|(_, a)| a == creator);
            // The customer's tag budget is theirs: a few adopters' marks keep the maker's undo
            // off as well as many (`tags::MAX_ADOPTER_MARKS`, smaller here).
            if maker != creator && !adopted && all.len() < CUSTOMER_ADOPTER_MARKS {
                let tag = Tag::builder().key(adopter_key(infra, creator)).value(creator).build();
                aws.ec2
                    .create_tags()
                    .resources(&want.resource)
                    .tags(tag)
                    .send()
                    .await
                    .map_err(|e| classify("CreateTags", e))?;
                marked.push(want.resource.clone());
            }
            continue;
        }
        let added: Vec<&(String, String)> = want.tags.iter().filter(|(k, _)| !have.contains_key(k)).collect();
        // Each key with the value written: taken off only while it still holds it (G9).
        let listed: Vec<String> = added.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut tags: Vec<Tag> = added.iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect();
        tags.push(Tag::builder().key(&record).value(format!("{creator} {}", listed.join(" ")).trim_end()).build());
        aws.ec2
            .create_tags()
            .resources(&want.resource)
            .set_tags(Some(tags))
            .send()
            .await
            .map_err(|e| classify("CreateTags", e))?;
        marked.push(want.resource.clone());
    }
    Ok(marked)
}

/// A resource's record of cluster `infra`'s marks: who added them, and each key with the value
/// written (`key=value`; a former release's record names keys alone).
pub fn marks_of(infra: &str, tags: &BTreeMap<String, String>) -> Option<(String, Vec<String>)> {
    let value = tags.get(&record_key(infra))?;
    let mut words = value.split(' ').filter(|w| !w.is_empty());
    let creator = words.next()?.to_string();
    Some((creator, words.map(str::to_string).collect()))
}

/// One word of a record: the key, and the value it was written with — for a former release's
/// record (keys alone), the value infraflow writes for that key, when it writes a fixed one.
fn written(infra: &str, word: &str) -> (String, Option<String>) {
    if let Some((k, v)) = word.split_once('=') {
        return (k.to_string(), Some(v.to_string()));
    }
    let value = match word {
        k if k == ownership_key(infra) => Some("shared".to_string()),
        k if k.starts_with("kubernetes.io/role/") => Some("1".to_string()),
        crate::tags::KARPENTER_DISCOVERY_TAG => Some(infra.to_string()),
        _ => None,
    };
    (word.to_string(), value)
}

/// What taking cluster `infra`'s marks off `tags` removes: each key it added that still holds
/// what it wrote, and the record. A role tag (`kubernetes.io/role/…`) stays while another
/// cluster's ownership tag is on the resource: that cluster's load balancers need it too.
pub fn removal(infra: &str, tags: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let Some((_, words)) = marks_of(infra, tags) else { return Vec::new() };
    let own = ownership_key(infra);
    let shared_with_another = tags.keys().any(|k| k.starts_with(OWNERSHIP_PREFIX) && *k != own);
    let mut out: Vec<(String, String)> = words
        .iter()
        .map(|w| written(infra, w))
        // A value someone changed since is theirs now, and stays.
        .filter_map(|(k, was)| tags.get(&k).filter(|v| was.as_ref().is_none_or(|w| w == *v)).map(|v| (k, v.clone())))
        .filter(|(k, v)| match k.as_str() {
            k if k == own => true,
            k if k.starts_with("kubernetes.io/role/") => !shared_with_another,
            crate::tags::KARPENTER_DISCOVERY_TAG => v == infra,
            _ => true,
        })
        .collect();
    let record = record_key(infra);
    out.push((record.clone(), tags[&record].clone()));
    out.extend(adoptions(infra, tags));
    out
}

/// What a rollback of workflow `creator` does to one resource carrying cluster `infra`'s marks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtRollback {
    /// Its own marks, adopted by nobody since: they come off (`removal`).
    TakeOff,
    /// Its own marks, adopted since by another workflow: the record becomes that adopter's (its
    /// adoption, `key`, comes off; every other adopter's stays).
    HandOver { to: String, key: String },
    /// Another's marks it adopted: only its own adoptions (`keys`) come off.
    DropAdoption { keys: Vec<(String, String)> },
    /// Not its marks.
    Leave,
}

pub fn at_rollback(infra: &str, creator: &str, tags: &BTreeMap<String, String>) -> AtRollback {
    let Some((maker, _)) = marks_of(infra, tags) else { return AtRollback::Leave };
    let (own, others): (Vec<(String, String)>, Vec<(String, String)>) =
        adoptions(infra, tags).into_iter().partition(|(_, a)| a == creator);
    if maker != creator {
        return if own.is_empty() { AtRollback::Leave } else { AtRollback::DropAdoption { keys: own } };
    }
    match others.into_iter().next() {
        Some((key, to)) => AtRollback::HandOver { to, key },
        None => AtRollback::TakeOff,
    }
}

/// The resources (subnets, VPCs) carrying cluster `infra`'s record, with their tags.
async fn carrying_record(aws: &Aws, infra: &str) -> AwsResult<BTreeMap<String, BTreeMap<String, String>>> {
    let record = record_key(infra);
    let mut ids: Vec<String> = Vec::new();
    let mut token = None;
    loop {
        let page = aws
            .ec2
            .describe_tags()
            .filters(filter("key", &[&record]))
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| classify("DescribeTags", e))?;
        ids.extend(
            page.tags()
                .iter()
                .filter(|t| t.key() == Some(record.as_str()))
                .filter_map(|t| t.resource_id().map(str::to_string)),
        );
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    // Only the kinds `mark` writes on: a record copied or forged onto anything else (an
    // instance, a volume) makes none of its tags the cluster's to take off (G9).
    ids.retain(|id| ["subnet-", "vpc-", "rtb-", "vpce-"].iter().any(|p| id.starts_with(p)));
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    // An endpoint is marked only as another cluster's S3 endpoint this one rides on (its
    // infraflow identity): a record on any other endpoint (a customer's own) is no one's word.
    let anothers = |tags: &BTreeMap<String, String>| {
        tags.get(crate::tags::IDENTITY_TAG)
            .is_some_and(|i| i.ends_with("/s3-endpoint") && !i.starts_with(&format!("{infra}/")))
    };
    Ok(tags_of(aws, &refs)
        .await?
        .into_iter()
        .filter(|(id, tags)| tags.contains_key(&record) && (!id.starts_with("vpce-") || anothers(tags)))
        .collect())
}

/// What `unmark(aws, infra, None)` would take off, read only: each resource with the keys.
pub async fn marks_to_remove(aws: &Aws, infra: &str) -> AwsResult<Vec<(String, Vec<String>)>> {
    Ok(carrying_record(aws, infra)
        .await?
        .into_iter()
        .map(|(id, tags)| {
            let keys = removal(infra, &tags).into_iter().map(|(k, _)| k).collect();
            (id, keys)
        })
        .collect())
}

/// Takes cluster `infra`'s marks off every resource carrying its record — only those `creator`
/// added, when given (a rollback); the cluster's, whoever added them, when not (a teardown).
/// Returns the resources unmarked, each with the keys removed.
pub async fn unmark(aws: &Aws, infra: &str, creator: Option<&str>) -> AwsResult<Vec<(String, Vec<String>)>> {
    let mut done = Vec::new();
    for (id, tags) in carrying_record(aws, infra).await? {
        let step = creator.map_or(AtRollback::TakeOff, |c| at_rollback(infra, c, &tags));
        // Deleted with their values: a tag someone changed since is theirs now, and stays.
        let (remove, rewrite): (Vec<(String, String)>, Option<Tag>) = match step {
            AtRollback::Leave => continue,
            AtRollback::TakeOff => (removal(infra, &tags), None),
            AtRollback::DropAdoption { keys } => (keys, None),
            AtRollback::HandOver { to, key } => {
                let keys = marks_of(infra, &tags).map(|(_, keys)| keys).unwrap_or_default();
                let record = format!("{to} {}", keys.join(" "));
                let rewrite = Some(Tag::builder().key(record_key(infra)).value(record.trim_end()).build());
                (vec![(key, to)], rewrite)
            }
        };
        if let Some(record) = rewrite {
            aws.ec2.create_tags().resources(&id).tags(record).send().await.map_err(|e| classify("CreateTags", e))?;
        }
        let keys: Vec<Tag> = remove.iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect();
        aws.ec2
            .delete_tags()
            .resources(&id)
            .set_tags(Some(keys))
            .send()
            .await
            .map_err(|e| classify("DeleteTags", e))?;
        done.push((id, remove.into_iter().map(|(k, _)| k).collect()));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn only_what_the_cluster_added_comes_off() {
        let t = tags(&[
            ("kubernetes.io/cluster/c1", "shared"),
            ("kubernetes.io/role/elb", "1"),
            ("karpenter.sh/discovery", "c1"),
            ("Name", "customer-public-a"),
            ("infraflow.io/marks/c1", "w@1 kubernetes.io/cluster/c1 karpenter.sh/discovery"),
        ]);
        let keys: Vec<String> = removal("c1", &t).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["kubernetes.io/cluster/c1", "karpenter.sh/discovery", "infraflow.io/marks/c1"]);
        assert_eq!(
            marks_of("c1", &t),
            Some(("w@1".into(), vec!["kubernetes.io/cluster/c1".into(), "karpenter.sh/discovery".into()]))
        );
        assert!(removal("c2", &t).is_empty(), "another cluster's record is not c1's");
    }

    #[test]
    fn a_rollback_hands_adopted_marks_over_and_an_adopter_drops_only_its_adoption() {
        let record = ("infraflow.io/marks/c1", "a@1 kubernetes.io/cluster/c1");
        let adopted = ("infraflow.io/marks-adopted-by/c1", "b@2");
        let t = tags(&[("kubernetes.io/cluster/c1", "shared"), record, adopted]);
        let legacy = "infraflow.io/marks-adopted-by/c1".to_string();
        assert_eq!(at_rollback("c1", "a@1", &t), AtRollback::HandOver { to: "b@2".into(), key: legacy.clone() });
        assert_eq!(at_rollback("c1", "b@2", &t), AtRollback::DropAdoption { keys: vec![(legacy, "b@2".into())] });
        assert_eq!(at_rollback("c1", "c@3", &t), AtRollback::Leave);
        let own = tags(&[("kubernetes.io/cluster/c1", "shared"), record]);
        assert_eq!(at_rollback("c1", "a@1", &own), AtRollback::TakeOff);
        assert_eq!(at_rollback("c1", "b@2", &own), AtRollback::Leave);
        let keys: Vec<String> = removal("c1", &t).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            ["kubernetes.io/cluster/c1", "infraflow.io/marks/c1", "infraflow.io/marks-adopted-by/c1"],
            "a teardown takes all off"
        );
    }

    /// SAFETY-A7937A6 G1's mirror: the maker a@1, adopters b@2 then c@3 (c@3's cluster live). b@2's
    /// rollback takes its own adoption only; a@1's then hands the record to c@3, not takes it off.
    #[test]
    fn each_adopter_of_a_customers_marks_drops_only_its_own_and_the_maker_hands_over_to_one_left() {
        let record = ("infraflow.io/marks/c1", "a@1 kubernetes.io/cluster/c1");
        let (b, c) = (adopter_key("c1", "b@2"), adopter_key("c1", "c@3"));
        assert_ne!(b, c);
        let t = tags(&[("kubernetes.io/cluster/c1", "shared"), record, (&b, "b@2"), (&c, "c@3")]);
        assert_eq!(at_rollback("c1", "b@2", &t), AtRollback::DropAdoption { keys: vec![(b.clone(), "b@2".into())] });
        let after_b = tags(&[("kubernetes.io/cluster/c1", "shared"), record, (&c, "c@3")]);
        assert_eq!(at_rollback("c1", "a@1", &after_b), AtRollback::HandOver { to: "c@3".into(), key: c.clone() });
        assert_eq!(removal("c1", &t).len(), 4, "a teardown takes every adoption off with the marks");
    }

    /// SAFETY-A7937A6 G9: a value the customer changed since the mark is theirs, and stays; a
    /// former release's record (keys alone) takes a key off only while it holds what infraflow
    /// writes for it.
    #[test]
    fn a_mark_comes_off_only_while_it_holds_the_value_written() {
        let t = tags(&[
            ("kubernetes.io/cluster/c1", "shared"),
            ("kubernetes.io/role/internal-elb", "true"),
            ("karpenter.sh/discovery", "c1"),
            (
                "infraflow.io/marks/c1",
                "w@1 kubernetes.io/cluster/c1=shared kubernetes.io/role/internal-elb=1 karpenter.sh/discovery=c1",
            ),
        ]);
        let keys: Vec<String> = removal("c1", &t).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["kubernetes.io/cluster/c1", "karpenter.sh/discovery", "infraflow.io/marks/c1"]);
        let old = tags(&[
            ("kubernetes.io/cluster/c1", "shared"),
            ("kubernetes.io/role/elb", "yes"),
            ("infraflow.io/marks/c1", "w@1 kubernetes.io/cluster/c1 kubernetes.io/role/elb"),
        ]);
        let keys: Vec<String> = removal("c1", &old).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["kubernetes.io/cluster/c1", "infraflow.io/marks/c1"], "the changed role tag stays");
    }

    #[test]
    fn a_role_tag_stays_while_another_cluster_uses_the_subnet() {
        let t = tags(&[
            ("kubernetes.io/cluster/c1", "shared"),
            ("kubernetes.io/cluster/c2", "shared"),
            ("kubernetes.io/role/internal-elb", "1"),
            ("karpenter.sh/discovery", "c2"),
            (
                "infraflow.io/marks/c1",
                "w@1 kubernetes.io/cluster/c1 kubernetes.io/role/internal-elb karpenter.sh/discovery",
            ),
        ]);
        let keys: Vec<String> = removal("c1", &t).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            ["kubernetes.io/cluster/c1", "infraflow.io/marks/c1"],
            "c2's role tag and its discovery tag stay"
        );
    }
}
