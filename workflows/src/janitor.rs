//! The janitor's rules (`infraflow sweep`): which clusters of an account are expired, protected,
//! busy or not yet due, from the tags AWS holds and the workflows this journal has unfinished;
//! and the teardown it submits for an expired one. Reads AWS only through `census`.

use std::collections::{BTreeMap, BTreeSet};

use infraflow_activities::census::Tagged;
use infraflow_activities::tags::{EXPIRATION_TAG, PROTECTION_TAG};
use serde::Serialize;

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
    /// The earliest `expirationDate` its resources carry, when any can be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_date: Option<String>,
    /// Its resources by kind.
    pub resources: BTreeMap<String, usize>,
    /// The teardown the sweep submitted (or had submitted before) for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub teardown: Option<String>,
}

/// Classifies every cluster that has a resource in `region` (a regional one, or IAM recording
/// this region): `census` is what AWS holds, `busy` the infraIDs with an unfinished workflow in
/// this journal, `now` seconds since the epoch.
pub fn classify(region: &str, census: &[Tagged], busy: &BTreeSet<String>, now: i64) -> Vec<Swept> {
    let mut by_cluster: BTreeMap<&str, Vec<&Tagged>> = BTreeMap::new();
    for r in census {
        for infra in r.owners() {
            by_cluster.entry(infra).or_default().push(r);
        }
    }
    by_cluster
        .into_iter()
        .filter(|(_, rs)| rs.iter().any(|r| r.in_region(region)))
        .map(|(infra, rs)| classify_one(region, infra, &rs, busy, now))
        .collect()
}

fn classify_one(region: &str, infra: &str, rs: &[&Tagged], busy: &BTreeSet<String>, now: i64) -> Swept {
    let mut resources: BTreeMap<String, usize> = BTreeMap::new();
    for r in rs {
        *resources.entry(r.kind.to_string()).or_default() += 1;
    }
    let dates: Vec<(i64, &str, &Tagged)> = rs
        .iter()
        .filter_map(|r| {
            let v = r.tag(EXPIRATION_TAG)?;
            Some((parse_rfc3339(v)?, v, *r))
        })
        .collect();
    let earliest = dates.iter().min_by_key(|(t, _, _)| *t);
    let unreadable = rs.iter().find(|r| r.tag(EXPIRATION_TAG).is_some_and(|v| parse_rfc3339(v).is_none()));
    let (class, reason) = if let Some(p) = rs.iter().find(|r| r.tag(PROTECTION_TAG).is_some()) {
        (Class::Protected, format!("{} {} carries {PROTECTION_TAG}", p.kind, p.id))
    } else if busy.contains(infra) {
        (Class::Active, "a workflow of this cluster is unfinished in this journal".to_string())
    } else {
        match earliest {
            Some((t, v, r)) if *t <= now => {
                (Class::Expired, format!("{} {} expired at {v} ({} ago)", r.kind, r.id, age(now - t)))
            }
            Some((t, _, _)) => (Class::Unexpired, format!("expires at {} (in {})", rfc3339(*t), age(t - now))),
            None => match unreadable {
                Some(r) => (
                    Class::Unexpired,
                    format!("{} {} has an {EXPIRATION_TAG} that is not an RFC 3339 time: left alone", r.kind, r.id),
                ),
                None => (Class::Unexpired, format!("no {EXPIRATION_TAG} tag")),
            },
        }
    };
    Swept {
        infra_id: infra.to_string(),
        region: region.to_string(),
        class,
        reason,
        expiration_date: earliest.map(|(t, _, _)| rfc3339(*t)),
        resources,
        teardown: None,
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

/// The teardown input of an expired cluster.
pub fn teardown_input(s: &Swept) -> serde_json::Value {
    serde_json::json!({ "infraID": s.infra_id, "region": s.region })
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
        }
    }

    const NOW: i64 = 1_795_633_200; // 2026-11-25T19:00:00Z

    #[test]
    fn each_cluster_gets_exactly_one_class_in_precedence_order() {
        let own = |i: &str| format!("kubernetes.io/cluster/{i}");
        let (a, b, c, d, e) = (own("a"), own("b"), own("c"), own("d"), own("e"));
        let census = vec![
            res("vpc", "vpc-a", &[(&a, "owned"), ("expirationDate", "2026-11-26T00:00:00Z")], true),
            res("vpc", "vpc-b", &[(&b, "owned"), ("expirationDate", "2026-11-25T16:00:00Z")], true),
            res("subnet", "subnet-b", &[(&b, "owned")], true),
            res("vpc", "vpc-c", &[(&c, "owned"), ("expirationDate", "2026-11-25T16:00:00Z")], true),
            res("iam-role", "c-role", &[(&c, "owned"), (PROTECTION_TAG, "")], false),
            res("vpc", "vpc-d", &[(&d, "owned"), ("expirationDate", "2026-11-20T00:00:00Z")], true),
            res("vpc", "vpc-e", &[(&e, "owned")], true),
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
        assert!(b.reason.contains("vpc vpc-b expired at 2026-11-25T16:00:00Z (3h0m ago)"), "{}", b.reason);
        assert!(swept[2].reason.contains("iam-role c-role"), "{}", swept[2].reason);
        assert_eq!(teardown_id(b), "sweep-b-us-east-1-20261125t160000z");
        let long = Swept { infra_id: "x".repeat(60), ..b.clone() };
        let id = teardown_id(&long);
        assert!(id.len() <= 64 && infraflow_engine::check_id(&id).is_ok(), "{id}");
        assert_ne!(id, teardown_id(&Swept { region: "us-west-2".into(), ..long.clone() }));
    }

    #[test]
    fn the_earliest_date_counts_and_a_garbled_one_never_expires_a_cluster() {
        let k = "kubernetes.io/cluster/x";
        let census = vec![
            res("vpc", "vpc-1", &[(k, "owned"), ("expirationDate", "2027-01-01T00:00:00Z")], true),
            res("subnet", "subnet-1", &[(k, "owned"), ("expirationDate", "2026-11-01T00:00:00Z")], true),
        ];
        assert_eq!(classify("us-east-1", &census, &BTreeSet::new(), NOW)[0].class, Class::Expired);
        let garbled = vec![res("vpc", "vpc-1", &[(k, "owned"), ("expirationDate", "yesterday")], true)];
        let s = &classify("us-east-1", &garbled, &BTreeSet::new(), NOW)[0];
        assert_eq!(s.class, Class::Unexpired);
        assert!(s.reason.contains("not an RFC 3339 time"), "{}", s.reason);
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
