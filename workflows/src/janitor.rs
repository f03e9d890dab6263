//! The janitor's rules (`infraflow sweep`): which clusters of an account are expired, protected,
//! busy or not yet due, from the tags AWS holds and the workflows this journal has unfinished;
//! and the teardown it submits for an expired one. Reads AWS only through `census`.

use std::collections::{BTreeMap, BTreeSet};

use infraflow_activities::anchor;
use infraflow_activities::census::Tagged;
use infraflow_activities::tags::{CREATED_BY_TAG, EXPIRATION_TAG, PROTECTION_TAG};
use serde::{Deserialize, Serialize};

use crate::expiry::{parse_rfc3339, rfc3339};

/// What the janitor makes of a cluster: exactly one of these, in this order of precedence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Some resource carries `infraflow.io/do-not-delete`: never torn down.
    Protected,
    /// A workflow of the cluster is unfinished in this journal (running, queued, paused).
    Active,
    /// An `expirationDate` in the past: the sweep submits its teardown.
    Expired,
    /// No `expirationDate`, or only future ones (or none that can be read).
    Unexpired,
}

impl Class {
    pub const ALL: [Class; 4] = [Class::Protected, Class::Active, Class::Expired, Class::Unexpired];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Protected => "protected",
            Class::Active => "active",
            Class::Expired => "expired",
            Class::Unexpired => "unexpired",
        }
    }
}

/// One cluster as the sweep saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Swept {
    #[serde(rename = "infraID")]
    pub infra_id: String,
    pub region: String,
    pub class: Class,
    pub reason: String,
    /// The cluster's expiry as its anchor says it (the latest of its anchors', when two
    /// journals made two), when it can be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_date: Option<String>,
    /// The anchor the class was read from (`vpc vpc-…`, `oidc-provider arn:…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
    /// `expirationDate`s on resources that are not the cluster's anchor: reported, never deciding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
    /// Its resources by kind.
    pub resources: BTreeMap<String, usize>,
    /// The teardown the sweep submitted (or had submitted before) for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub teardown: Option<String>,
    /// What the sweep saw, carried by its teardown and checked again before each round of deletes.
    #[serde(skip)]
    pub evidence: Option<Evidence>,
}

/// What a sweep saw of an expired cluster: the anchor it read the date from. The teardown it
/// submits deletes nothing unless this still holds (review F4: a cluster re-dated, re-created
/// or in another account is not the one the sweep judged).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Evidence {
    /// `vpc` or `oidc-provider`.
    pub anchor_kind: String,
    pub anchor_id: String,
    /// The anchor's creator (`infraflow.io/created-by`), none for HyperShift's VPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// The `expirationDate` the sweep read on it, verbatim.
    pub expiration_date: String,
    /// The account the census was read in (the teardown runs in it, or deletes nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

/// Classifies every cluster that has a resource in `region` (a regional one, or IAM recording
/// this region): `census` is what AWS holds, `busy` the infraIDs with an unfinished workflow in
/// this journal, `now` seconds since the epoch. A cluster's expiry is read from its anchor only
/// (`anchor::anchor_of`); a cluster with no anchor in the region is never expired.
pub fn classify(region: &str, census: &[Tagged], busy: &BTreeSet<String>, now: i64) -> Vec<Swept> {
    let mut by_cluster: BTreeMap<&str, Vec<&Tagged>> = BTreeMap::new();
    for r in census {
        // A customer's VPC is in the census for the record of marks it carries: it tells the
        // anchor rule that its cluster was provisioned into someone's network.
        let clusters: BTreeSet<&str> = r.owners().chain(r.marked_for()).collect();
        for infra in clusters {
            by_cluster.entry(infra).or_default().push(r);
        }
    }
    by_cluster
        .into_iter()
        .filter(|(_, rs)| rs.iter().any(|r| r.in_region(region)))
        .map(|(infra, rs)| classify_one(region, infra, &rs, busy, now))
        .collect()
}

/// An expiration date as the janitor reads it: RFC 3339, or HyperShift CI's
/// `date --iso=minutes --utc` (`2026-11-25T19:00+00:00`, no seconds).
pub fn parse_expiration(v: &str) -> Option<i64> {
    parse_rfc3339(v).or_else(|| {
        let (head, zone) = v.split_at_checked(16)?;
        parse_rfc3339(&format!("{head}:00{zone}"))
    })
}

fn classify_one(region: &str, infra: &str, rs: &[&Tagged], busy: &BTreeSet<String>, now: i64) -> Swept {
    let mut resources: BTreeMap<String, usize> = BTreeMap::new();
    for r in rs {
        *resources.entry(r.kind.to_string()).or_default() += 1;
    }
    let anchors = anchor::anchors(infra, region, rs);
    let ignored: Vec<String> = rs
        .iter()
        .filter(|r| !anchors.iter().any(|a| a.id == r.id))
        .filter_map(|r| {
            Some(format!("{} {} says {}: not the cluster's anchor, ignored", r.kind, r.id, r.tag(EXPIRATION_TAG)?))
        })
        .collect();
    // Every anchor must have expired: two journals racing may have made two VPCs, and the one
    // still in use may be the later-dated one.
    let dates: Vec<Option<(i64, &str)>> =
        anchors.iter().map(|a| a.tag(EXPIRATION_TAG).and_then(|v| Some((parse_expiration(v)?, v)))).collect();
    let latest = anchors.iter().zip(&dates).filter_map(|(a, d)| d.map(|(t, v)| (t, v, *a))).max_by_key(|(t, _, _)| *t);
    let undated = anchors.iter().zip(&dates).find(|(_, d)| d.is_none()).map(|(a, _)| *a);
    let (class, reason) = if let Some(p) = rs.iter().find(|r| r.tag(PROTECTION_TAG).is_some()) {
        (Class::Protected, format!("{} {} carries {PROTECTION_TAG}", p.kind, p.id))
    } else if busy.contains(infra) {
        (Class::Active, "a workflow of this cluster is unfinished in this journal".to_string())
    } else if anchors.is_empty() {
        (
            Class::Unexpired,
            "no anchor (the VPC or OIDC provider its creator made and tagged for it alone): nothing says when it expires".into(),
        )
    } else if let Some(a) = undated {
        let why = match a.tag(EXPIRATION_TAG) {
            Some(_) => format!("has an {EXPIRATION_TAG} that is not an RFC 3339 time: left alone"),
            None => format!("has no {EXPIRATION_TAG} tag"),
        };
        (Class::Unexpired, format!("its anchor {} {} {why}", a.kind, a.id))
    } else {
        match latest {
            Some((t, v, a)) if t <= now => {
                (Class::Expired, format!("its anchor {} {} expired at {v} ({} ago)", a.kind, a.id, age(now - t)))
            }
            Some((t, _, _)) => (Class::Unexpired, format!("expires at {} (in {})", rfc3339(t), age(t - now))),
            None => (Class::Unexpired, format!("no {EXPIRATION_TAG} tag")),
        }
    };
    let evidence = (class == Class::Expired)
        .then(|| {
            latest.map(|(_, v, a)| Evidence {
                anchor_kind: a.kind.to_string(),
                anchor_id: a.id.clone(),
                created_by: a.tag(CREATED_BY_TAG).map(str::to_string),
                expiration_date: v.to_string(),
                account: None,
            })
        })
        .flatten();
    Swept {
        infra_id: infra.to_string(),
        region: region.to_string(),
        class,
        reason,
        expiration_date: latest.map(|(t, _, _)| rfc3339(t)),
        anchor: latest
            .map(|(_, _, a)| format!("{} {}", a.kind, a.id))
            .or(anchors.first().map(|a| format!("{} {}", a.kind, a.id))),
        ignored,
        resources,
        teardown: None,
        evidence,
    }
}

/// Why the sweep's evidence no longer holds for the anchors AWS shows now (`live`), if it does
/// not: the anchor gone (when `gone_is_change`), replaced, re-dated to the future, or of another
/// creator. None: the teardown may go on.
pub fn evidence_broken(e: &Evidence, live: &[Tagged], gone_is_change: bool, now: i64) -> Option<String> {
    if let Some(other) = live.iter().find(|a| a.id != e.anchor_id) {
        return Some(format!(
            "the cluster has another anchor now ({} {}), not the {} {} the sweep judged expired: it was made again",
            other.kind, other.id, e.anchor_kind, e.anchor_id
        ));
    }
    let Some(anchor) = live.iter().find(|a| a.id == e.anchor_id) else {
        return gone_is_change.then(|| format!("its anchor {} {} is gone", e.anchor_kind, e.anchor_id));
    };
    if anchor.tag(CREATED_BY_TAG) != e.created_by.as_deref() {
        return Some(format!(
            "its anchor {} {} has another creator now: it was made again",
            e.anchor_kind, e.anchor_id
        ));
    }
    match anchor.tag(EXPIRATION_TAG) {
        Some(v) if v == e.expiration_date => None,
        Some(v) if parse_expiration(v).is_some_and(|t| t <= now) => None,
        Some(v) => Some(format!("its anchor {} {} says {EXPIRATION_TAG}={v} now", e.anchor_kind, e.anchor_id)),
        None => Some(format!("its anchor {} {} has no {EXPIRATION_TAG} any more", e.anchor_kind, e.anchor_id)),
    }
}

/// `3d4h`, `5h12m`, `42s`: how long, for people.
fn age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m", s / 60),
        3_600..86_400 => format!("{}h{}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// The id of the teardown the sweep submits for an expired cluster: the same for every sweep of
/// the same expiry (so a sweep killed after its journal write, run again, submits nothing new),
/// another for a cluster made again under the same infraID with a new date.
pub fn teardown_id(s: &Swept) -> String {
    let date: String =
        s.expiration_date.as_deref().unwrap_or_default().chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let id = format!("sweep-{}-{}-{}", s.infra_id, s.region, date.to_ascii_lowercase());
    if id.len() <= 64 {
        return id;
    }
    // Ids hold 64 characters: a long infraID keeps its start, and the whole is hashed (FNV-1a).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let head: String = s.infra_id.chars().take(40).collect();
    format!("sweep-{}-{h:016x}", head.trim_end_matches('-'))
}

/// The teardown input of an expired cluster: with the sweep's evidence, which the teardown
/// checks before each round of deletes.
pub fn teardown_input(s: &Swept) -> serde_json::Value {
    let mut input = serde_json::json!({ "infraID": s.infra_id, "region": s.region });
    if let Some(e) = &s.evidence {
        input["sweptExpired"] = serde_json::to_value(e).unwrap_or_default();
    }
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(kind: &'static str, id: &str, tags: &[(&str, &str)], regional: bool) -> Tagged {
        Tagged {
            kind,
            id: id.into(),
            tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            regional,
            vpc: None,
        }
    }

    fn subnet_in(vpc: &str, id: &str, tags: &[(&str, &str)]) -> Tagged {
        Tagged { vpc: Some(vpc.into()), ..res("subnet", id, tags, true) }
    }

    /// SAFETY-A7937A6 G3: HyperShift's CLI (`create infra aws --additional-tags
    /// expirationDate=…`) or anyone makes `<infraID>-vpc` with the owned tag and a past date; a
    /// cluster provisioned into a customer's VPC, or made of IAM alone, is not expired by it.
    #[test]
    fn a_vpc_named_for_the_cluster_never_expires_one_in_a_customers_network_or_of_iam_alone() {
        let own = |i: &str| (format!("kubernetes.io/cluster/{i}"), "owned");
        let ((x, o), (y, _)) = (own("x"), own("y"));
        let past = ("expirationDate", "2020-01-01T00:00:00Z");
        let future = ("expirationDate", "2027-01-01T00:00:00Z");
        let census = vec![
            // x: provisioned into a customer's VPC (its record there), a worker group of its own.
            res(
                "vpc",
                "vpc-customer",
                &[("kubernetes.io/cluster/x", "shared"), ("infraflow.io/marks/x", "w@1 k")],
                true,
            ),
            res(
                "security-group",
                "sg-x",
                &[(&x, o), ("infraflow.io/identity", "x/worker-sg"), ("infraflow.io/created-by", "w@1")],
                true,
            ),
            res("vpc", "vpc-forged-x", &[(&x, o), ("Name", "x-vpc"), past], true),
            subnet_in("vpc-forged-x", "subnet-forged-x", &[(&x, o)]),
            // y: IAM alone, its provider dated in the future; a lone VPC named for it.
            res(
                "oidc-provider",
                "arn:y",
                &[
                    (&y, o),
                    ("infraflow.io/identity", "y/oidc-provider"),
                    ("infraflow.io/created-by", "w@2"),
                    ("infraflow.io/region", "us-east-1"),
                    future,
                ],
                false,
            ),
            res("vpc", "vpc-forged-y", &[(&y, o), ("Name", "y-vpc"), past], true),
        ];
        let swept = classify("us-east-1", &census, &BTreeSet::new(), NOW);
        let by: BTreeMap<&str, &Swept> = swept.iter().map(|s| (s.infra_id.as_str(), s)).collect();
        assert_eq!(by["x"].class, Class::Unexpired, "{}", by["x"].reason);
        assert!(by["x"].ignored.iter().any(|i| i.contains("vpc-forged-x")), "{:?}", by["x"].ignored);
        assert_eq!(by["y"].class, Class::Unexpired, "{}", by["y"].reason);
        assert_eq!(by["y"].anchor.as_deref(), Some("oidc-provider arn:y"));
        // HyperShift's infra for y (subnets owned by y in its VPC) anchors too, but the
        // provider's later date wins: the latest date over all anchors.
        let mut with_subnets = census.clone();
        with_subnets.push(subnet_in("vpc-forged-y", "subnet-y", &[(&y, o)]));
        let swept = classify("us-east-1", &with_subnets, &BTreeSet::new(), NOW);
        let y = swept.iter().find(|s| s.infra_id == "y").unwrap();
        assert_eq!(y.class, Class::Unexpired, "{}", y.reason);
        assert_eq!(y.expiration_date.as_deref(), Some("2027-01-01T00:00:00Z"));
        // An IAM-only cluster made without a date never expires, whatever VPC appears for it.
        let undated: Vec<Tagged> = with_subnets
            .iter()
            .map(|r| Tagged {
                tags: r
                    .tags
                    .iter()
                    .filter(|(k, v)| !(r.kind == "oidc-provider" && k == "expirationDate" && !v.is_empty()))
                    .cloned()
                    .collect(),
                ..r.clone()
            })
            .collect();
        let swept = classify("us-east-1", &undated, &BTreeSet::new(), NOW);
        let y = swept.iter().find(|s| s.infra_id == "y").unwrap();
        assert_eq!(y.class, Class::Unexpired, "{}", y.reason);
    }

    const NOW: i64 = 1_795_633_200; // 2026-11-25T19:00:00Z

    #[test]
    fn each_cluster_gets_exactly_one_class_in_precedence_order() {
        let own = |i: &str| format!("kubernetes.io/cluster/{i}");
        let (a, b, c, d, e) = (own("a"), own("b"), own("c"), own("d"), own("e"));
        let census = vec![
            res("vpc", "vpc-a", &[(&a, "owned"), ("Name", "a-vpc"), ("expirationDate", "2026-11-26T00:00:00Z")], true),
            res("vpc", "vpc-b", &[(&b, "owned"), ("Name", "b-vpc"), ("expirationDate", "2026-11-25T16:00:00Z")], true),
            subnet_in("vpc-b", "subnet-b", &[(&b, "owned")]),
            res("vpc", "vpc-c", &[(&c, "owned"), ("Name", "c-vpc"), ("expirationDate", "2026-11-25T16:00:00Z")], true),
            res("iam-role", "c-role", &[(&c, "owned"), (PROTECTION_TAG, "")], false),
            res("vpc", "vpc-d", &[(&d, "owned"), ("Name", "d-vpc"), ("expirationDate", "2026-11-20T00:00:00Z")], true),
            res("vpc", "vpc-e", &[(&e, "owned"), ("Name", "e-vpc")], true),
            res("vpc", "vpc-shared", &[(&e, "shared")], true),
        ];
        let busy: BTreeSet<String> = ["d".to_string()].into();
        let swept = classify("us-east-1", &census, &busy, NOW);
        let classes: Vec<(&str, Class)> = swept.iter().map(|s| (s.infra_id.as_str(), s.class)).collect();
        assert_eq!(
            classes,
            vec![
                ("a", Class::Unexpired),
                ("b", Class::Expired),
                ("c", Class::Protected),
                ("d", Class::Active),
                ("e", Class::Unexpired)
            ]
        );
        let b = &swept[1];
        assert_eq!(b.resources, [("subnet".to_string(), 1), ("vpc".to_string(), 1)].into());
        assert_eq!(b.expiration_date.as_deref(), Some("2026-11-25T16:00:00Z"));
        assert!(b.reason.contains("its anchor vpc vpc-b expired at 2026-11-25T16:00:00Z (3h0m ago)"), "{}", b.reason);
        assert!(swept[2].reason.contains("iam-role c-role"), "{}", swept[2].reason);
        assert_eq!(teardown_id(b), "sweep-b-us-east-1-20261125t160000z");
        let long = Swept { infra_id: "x".repeat(60), ..b.clone() };
        let id = teardown_id(&long);
        assert!(id.len() <= 64 && infraflow_engine::check_id(&id).is_ok(), "{id}");
        assert_ne!(id, teardown_id(&Swept { region: "us-west-2".into(), ..long.clone() }));
    }

    #[test]
    fn only_the_anchors_date_counts_and_a_garbled_one_never_expires_a_cluster() {
        let k = "kubernetes.io/cluster/x";
        let anchor = |date: &'static str| {
            res("vpc", "vpc-1", &[(k, "owned"), ("Name", "x-vpc"), ("expirationDate", date)], true)
        };
        // HyperShift's VPC anchors while it holds the cluster's subnets, as HyperShift's lookup.
        let subnet = subnet_in("vpc-1", "subnet-1", &[(k, "owned")]);
        let forged = res("security-group", "sg-1", &[(k, "owned"), ("expirationDate", "2020-01-01T00:00:00Z")], true);
        let s = &classify(
            "us-east-1",
            &[anchor("2027-01-01T00:00:00Z"), subnet.clone(), forged.clone()],
            &BTreeSet::new(),
            NOW,
        )[0];
        assert_eq!(s.class, Class::Unexpired, "{s:?}");
        assert_eq!(s.ignored.len(), 1, "{s:?}");
        assert!(s.ignored[0].contains("security-group sg-1"), "{s:?}");
        let alone = &classify("us-east-1", std::slice::from_ref(&forged), &BTreeSet::new(), NOW)[0];
        assert_eq!(alone.class, Class::Unexpired, "no anchor, no expiry: {alone:?}");
        let garbled = vec![anchor("yesterday"), subnet.clone()];
        let s = &classify("us-east-1", &garbled, &BTreeSet::new(), NOW)[0];
        assert_eq!(s.class, Class::Unexpired);
        assert!(s.reason.contains("not an RFC 3339 time"), "{}", s.reason);
        let ci = &classify("us-east-1", &[anchor("2026-11-25T18:00+00:00"), subnet.clone()], &BTreeSet::new(), NOW)[0];
        assert_eq!(ci.class, Class::Expired, "HyperShift CI's --iso=minutes is read: {ci:?}");
        assert_eq!(ci.expiration_date.as_deref(), Some("2026-11-25T18:00:00Z"));
        let e = ci.evidence.clone().unwrap();
        assert_eq!((e.anchor_kind.as_str(), e.anchor_id.as_str()), ("vpc", "vpc-1"));
        assert_eq!(teardown_input(ci)["sweptExpired"]["expirationDate"], "2026-11-25T18:00+00:00");
        let lone = &classify("us-east-1", &[anchor("2026-11-25T18:00+00:00")], &BTreeSet::new(), NOW)[0];
        assert_eq!(lone.class, Class::Unexpired, "a lone VPC named for the cluster is anyone's: {lone:?}");
    }

    #[test]
    fn two_anchors_expire_a_cluster_only_when_both_have() {
        let k = "kubernetes.io/cluster/x";
        let vpc = |id: &str, date: &str| {
            let tags = [
                (k, "owned"),
                ("infraflow.io/identity", "x/vpc"),
                ("infraflow.io/created-by", id),
                ("expirationDate", date),
            ];
            res("vpc", id, &tags, true)
        };
        let census = vec![vpc("vpc-1", "2026-11-01T00:00:00Z"), vpc("vpc-2", "2027-01-01T00:00:00Z")];
        assert_eq!(classify("us-east-1", &census, &BTreeSet::new(), NOW)[0].class, Class::Unexpired);
        let census = vec![vpc("vpc-1", "2026-11-01T00:00:00Z"), vpc("vpc-2", "2026-11-02T00:00:00Z")];
        assert_eq!(classify("us-east-1", &census, &BTreeSet::new(), NOW)[0].class, Class::Expired);
    }

    #[test]
    fn a_sweeps_evidence_breaks_when_the_cluster_is_re_dated_or_made_again() {
        let k = "kubernetes.io/cluster/x";
        let vpc = |id: &str, by: &str, date: &str| {
            let tags = [
                (k, "owned"),
                ("infraflow.io/identity", "x/vpc"),
                ("infraflow.io/created-by", by),
                ("expirationDate", date),
            ];
            res("vpc", id, &tags, true)
        };
        let seen = Evidence {
            anchor_kind: "vpc".into(),
            anchor_id: "vpc-1".into(),
            created_by: Some("w@1".into()),
            expiration_date: "2026-11-01T00:00:00Z".into(),
            account: None,
        };
        assert_eq!(evidence_broken(&seen, &[vpc("vpc-1", "w@1", "2026-11-01T00:00:00Z")], true, NOW), None);
        assert_eq!(evidence_broken(&seen, &[vpc("vpc-1", "w@1", "2026-11-20T00:00:00Z")], true, NOW), None);
        assert!(
            evidence_broken(&seen, &[vpc("vpc-1", "w@1", "2099-01-01T00:00:00Z")], true, NOW).unwrap().contains("2099")
        );
        assert!(evidence_broken(&seen, &[vpc("vpc-1", "v@2", "2026-11-01T00:00:00Z")], true, NOW).is_some());
        assert!(evidence_broken(&seen, &[vpc("vpc-9", "v@2", "2026-11-01T00:00:00Z")], false, NOW).is_some());
        assert!(evidence_broken(&seen, &[], true, NOW).unwrap().contains("gone"));
        assert_eq!(evidence_broken(&seen, &[], false, NOW), None, "gone by this teardown's own deletes");
    }

    #[test]
    fn account_wide_resources_place_a_cluster_in_a_region_only_with_its_region_tag() {
        let k = "kubernetes.io/cluster/x";
        let hypershift_role = vec![res("iam-role", "x-role", &[(k, "owned")], false)];
        assert!(classify("us-east-1", &hypershift_role, &BTreeSet::new(), NOW).is_empty());
        let ours = vec![res("iam-role", "x-role", &[(k, "owned"), ("infraflow.io/region", "us-west-2")], false)];
        assert!(classify("us-east-1", &ours, &BTreeSet::new(), NOW).is_empty());
        assert_eq!(classify("us-west-2", &ours, &BTreeSet::new(), NOW).len(), 1);
    }
}
