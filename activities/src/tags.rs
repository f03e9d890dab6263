//! Tag conventions: ownership (`kubernetes.io/cluster/<infraID>=owned`), `Name` as HyperShift
//! names things, and the identity tag that makes every create idempotent across processes.

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use serde::{Deserialize, Serialize};

/// The tag whose value names a resource's identity within its cluster: `<infraID>/<role>[/<zone>]`.
pub const IDENTITY_TAG: &str = "infraflow.io/identity";
/// The workflow that created the resource, set at creation and never changed: compensation
/// deletes a resource only if this names the compensating workflow (an adopted resource belongs
/// to whoever made it).
pub const CREATED_BY_TAG: &str = "infraflow.io/created-by";
/// The one adoption mark releases before a7937a6's successor wrote: the first workflow other than
/// the creator that found the resource and went on using it. Still read (a mark of a former
/// release keeps the creator's undo off as before), emptied or removed only by the workflow it
/// names; never written any more: one slot let the first adopter's rollback take the mark a later
/// adopter's live cluster relied on (SAFETY-A7937A6 G1).
pub const ADOPTED_BY_TAG: &str = "infraflow.io/adopted-by";
/// Every adopter's own mark: `infraflow.io/adopted-by/<digest of its workflow>` = the workflow.
/// Each adopter writes its own and takes off only its own at rollback (`marks`); an empty value
/// is no mark. The journal is memory, AWS tags are the proof: an undo of the creator (whichever
/// journal, host or tool it runs from) leaves alone what any other workflow marked, since that
/// workflow's cluster may be running on it.
pub const ADOPTER_PREFIX: &str = "infraflow.io/adopted-by/";

/// How many adopters' marks a resource carries at most: every run of a cluster's provision adopts
/// what the first made (a repair run, a CI "ensure"), and a completed run never takes its mark off,
/// so marks would pile up to AWS's tag limit (50; Route53's 10) and every later run would fail.
/// Past this, an adopter writes none: the marks there already keep the creator's undo off, and
/// all of them would have to be taken off by rollbacks for that to change.
pub const MAX_ADOPTER_MARKS: usize = 8;

/// The key of workflow `workflow`'s own adoption mark (a digest: a workflow's creator runs long,
/// and a tag key must stay within 128 characters).
pub fn adoption_key(workflow: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in workflow.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{ADOPTER_PREFIX}{h:016x}")
}

/// Whether `key` is an adoption mark's: the former single slot, or an adopter's own.
pub fn is_adoption_key(key: &str) -> bool {
    key == ADOPTED_BY_TAG || key.starts_with(ADOPTER_PREFIX)
}

/// Every workflow `tags` name as an adopter (non-empty marks), in any slot.
pub fn adopters<'a>(tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut found: Vec<String> =
        tags.into_iter().filter(|(k, v)| is_adoption_key(k) && !v.is_empty()).map(|(_, v)| v.to_string()).collect();
    found.sort();
    found.dedup();
    found
}

/// The adoption marks of workflow `adopter` among `tags`: its own key, and the former slot while
/// it names it (key and value: what its rollback takes off).
pub fn marks_of_adopter<'a>(
    adopter: &str,
    tags: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(String, String)> {
    let own = adoption_key(adopter);
    tags.into_iter()
        .filter(|(k, v)| (*k == own || *k == ADOPTED_BY_TAG) && *v == adopter)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
/// The region of the cluster an IAM resource (global) was made for: a teardown in another
/// region leaves it, and a create-iam for another region refuses it.
pub const REGION_TAG: &str = "infraflow.io/region";

/// HyperShift's tags on what its CLI makes (`hypershift.openshift.io/infra-id`, `…/cluster-name`),
/// written by infraflow on what it makes, and HyperShift's automatic node provisioning's
/// (Karpenter) subnet tag. Never HyperShift's `…/source`: infraflow is not its CLI.
pub const HYPERSHIFT_INFRA_ID_TAG: &str = "hypershift.openshift.io/infra-id";
pub const HYPERSHIFT_CLUSTER_NAME_TAG: &str = "hypershift.openshift.io/cluster-name";
pub const KARPENTER_DISCOVERY_TAG: &str = "karpenter.sh/discovery";

/// When a cluster may be torn down by the janitor (`infraflow sweep`): RFC 3339 in UTC, HyperShift
/// CI's key and format. Written on what a workflow with `expiresIn` creates, never moved on what
/// it adopts.
pub const EXPIRATION_TAG: &str = "expirationDate";
/// Any value: the cluster is never torn down — `teardown` refuses or pauses naming the resource
/// that carries it, and `sweep` never submits one.
pub const PROTECTION_TAG: &str = "infraflow.io/do-not-delete";

/// The ownership tag's key is this prefix and the infraID; its value on what a cluster owns is
/// `OWNED` (as HyperShift writes it too).
pub const OWNERSHIP_PREFIX: &str = "kubernetes.io/cluster/";
pub const OWNED: &str = "owned";

pub fn ownership_key(infra_id: &str) -> String {
    format!("{OWNERSHIP_PREFIX}{infra_id}")
}

/// The ownership tags (`kubernetes.io/cluster/<infraID>=owned`) among `tags`: whose resource it is.
pub fn ownership_pairs(tags: &[(String, String)]) -> Vec<(String, String)> {
    tags.iter().filter(|(k, v)| k.starts_with(OWNERSHIP_PREFIX) && v == OWNED).cloned().collect()
}

/// Whether two resources are tagged owned by exactly the same clusters (at least one): what a
/// delete asks of the thing holding a cluster's resource (an instance holding a volume, a VPC
/// holding a gateway, a profile holding a role) before it takes that resource away from it. One
/// shared owner is not enough: the holder also being another cluster's makes it that cluster's.
pub fn same_owners(a: &[(String, String)], b: &[(String, String)]) -> bool {
    let (mut a, mut b) = (ownership_pairs(a), ownership_pairs(b));
    a.sort();
    b.sort();
    !a.is_empty() && a == b
}

/// Who a resource belongs to and what it is: everything needed to tag it and to find it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    pub infra_id: String,
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// HyperShift's Name tag.
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_tags: Vec<(String, String)>,
    /// The workflow creating it: written as the created-by tag when the resource is made.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workflow: String,
    /// Tags this version writes beside the identity that steps do not journal (HyperShift's):
    /// a step's input may change only with a new flow version, what it writes inside may change
    /// freely — and no lookup or undo reads them.
    #[serde(skip)]
    pub unjournaled_tags: Vec<(String, String)>,
}

impl Identity {
    pub fn new(infra_id: &str, role: &str, zone: Option<&str>, name: String) -> Identity {
        Identity {
            infra_id: infra_id.to_string(),
            role: role.to_string(),
            zone: zone.map(str::to_string),
            name,
            extra_tags: Vec::new(),
            workflow: String::new(),
            unjournaled_tags: Vec::new(),
        }
    }

    /// HyperShift's tags on what its CLI makes: the infraID, and the cluster's name when known.
    pub fn with_hypershift_tags(mut self, cluster_name: Option<&str>) -> Identity {
        self.unjournaled_tags.push((HYPERSHIFT_INFRA_ID_TAG.to_string(), self.infra_id.clone()));
        if let Some(name) = cluster_name {
            self.unjournaled_tags.push((HYPERSHIFT_CLUSTER_NAME_TAG.to_string(), name.to_string()));
        }
        self
    }

    /// The janitor's expiration date on what this identity creates (none: nothing written).
    pub fn with_expiration(mut self, date: Option<&str>) -> Identity {
        if let Some(date) = date {
            self.unjournaled_tags.push((EXPIRATION_TAG.to_string(), date.to_string()));
        }
        self
    }

    pub fn with_tags(mut self, extra: &[(String, String)], workflow: &str) -> Identity {
        self.extra_tags = extra.to_vec();
        self.workflow = workflow.to_string();
        self
    }

    /// The value of an additional tag of this identity (the region of IAM, for one).
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.extra_tags.iter().chain(&self.unjournaled_tags).find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The identity tag's value.
    pub fn key(&self) -> String {
        match &self.zone {
            Some(z) => format!("{}/{}/{z}", self.infra_id, self.role),
            None => format!("{}/{}", self.infra_id, self.role),
        }
    }

    /// The idempotency token (ClientToken, CallerReference) of creating this resource in this
    /// workflow, at most 64 characters. AWS remembers tokens — a CallerReference forever, an EC2
    /// token with its first answer, even once that resource is gone — so a token is shared only
    /// by the retries of one creation in one workflow; another workflow creating the same
    /// identity (an infraID torn down and made again) has its own. Finding the resource by its
    /// identity tag, not the token, is what makes creates idempotent across workflows.
    pub fn token(&self) -> String {
        self.token_with(&format!("@{}", self.workflow))
    }

    /// A token that also depends on `salt`: for resources that may be made again under the same
    /// identity later (a node pool member after a scale-down), where AWS would otherwise return
    /// the old, terminated one.
    pub fn token_with(&self, salt: &str) -> String {
        let key = format!("{}{salt}", self.key());
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let readable: String = key.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(47).collect();
        format!("{readable}-{h:016x}")
    }

    /// The tags written at creation, the created-by tag and the expiration date included.
    pub fn tags(&self) -> Vec<(String, String)> {
        let mut t = self.adoption_tags();
        if !self.workflow.is_empty() {
            t.insert(3, (CREATED_BY_TAG.to_string(), self.workflow.clone()));
        }
        if let Some(date) = self.tag(EXPIRATION_TAG) {
            t.push((EXPIRATION_TAG.to_string(), date.to_string()));
        }
        t
    }

    /// The tags that may be (re)applied to a resource this workflow found rather than made:
    /// everything but created-by, which must keep naming the creator, and `expirationDate`: a
    /// cluster's expiry is its creator's word, and a later workflow that finds the cluster (an
    /// "ensure" run, a CI template with `expiresIn`) must never move it (review F2).
    pub fn adoption_tags(&self) -> Vec<(String, String)> {
        let mut t = vec![
            (ownership_key(&self.infra_id), OWNED.to_string()),
            ("Name".to_string(), self.name.clone()),
            (IDENTITY_TAG.to_string(), self.key()),
        ];
        for (k, v) in self.extra_tags.iter().chain(&self.unjournaled_tags) {
            if !t.iter().any(|(tk, _)| tk == k) && k != CREATED_BY_TAG && k != EXPIRATION_TAG {
                t.push((k.clone(), v.clone()));
            }
        }
        t
    }

    pub fn ec2_tags(&self) -> Vec<Tag> {
        self.tags().into_iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect()
    }

    pub fn tag_spec(&self, kind: ResourceType) -> TagSpecification {
        TagSpecification::builder().resource_type(kind).set_tags(Some(self.ec2_tags())).build()
    }

    /// The tag to write on a resource this workflow found with its identity (`tags` as read):
    /// its own adoption mark, when another workflow created it. None when this workflow made it,
    /// nobody recorded a creator (what HyperShift made: no undo deletes it), or this workflow's
    /// mark is there already. Other adopters' marks change nothing: each adopter has its own.
    pub fn adoption_mark(&self, tags: &[(String, String)]) -> Option<(String, String)> {
        let creator = tags.iter().find(|(k, _)| k == CREATED_BY_TAG).map(|(_, v)| v.as_str())?;
        let pairs = tags.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let all = adopters(pairs);
        let marked = all.iter().any(|a| *a == self.workflow);
        (!self.workflow.is_empty() && creator != self.workflow && !marked && all.len() < MAX_ADOPTER_MARKS)
            .then(|| (adoption_key(&self.workflow), self.workflow.clone()))
    }

    /// The query that finds this very resource, whoever made it (what a create adopts).
    pub fn query(&self) -> TagQuery {
        TagQuery::new(IDENTITY_TAG, self.key())
    }

    /// The query HyperShift's CLI finds this role's resource by (`cmd/infra/aws/ec2.go`): the
    /// cluster's ownership tag and the `Name` it gives the role — DHCP options and the S3
    /// endpoint carry no Name there, the ownership tag alone — restricted to resources without
    /// an identity tag. None for roles HyperShift's CLI does not make.
    pub fn hypershift_query(&self) -> Option<TagQuery> {
        let name = match self.role.as_str() {
            "vpc"
            | "internet-gateway"
            | "public-subnet"
            | "private-subnet"
            | "eip"
            | "nat"
            | "public-route-table"
            | "private-route-table" => Some(self.name.clone()),
            "dhcp-options" | "s3-endpoint" => None,
            _ => return None,
        };
        Some(TagQuery { name, unclaimed: Some(self.key()), ..owned(&self.infra_id) })
    }
}

/// A tag that must be present with this value (and, for compensation, a creator). Sent to AWS as
/// a filter *and* checked on what comes back: some implementations ignore tag filters on some
/// calls and return everything (measured: moto's DescribeNatGateways), and a lookup that adopts
/// or deletes the wrong resource is the worst bug this tool can have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagQuery {
    pub key: String,
    pub value: String,
    /// When set, only resources whose created-by tag names this workflow match.
    pub created_by: Option<String>,
    /// When set, only resources with this `Name` tag match (HyperShift's lookups).
    pub name: Option<String>,
    /// When set, only resources with no identity tag, or with exactly this one, match: what
    /// HyperShift's CLI made, never something infraflow made for another role. This identity's
    /// own tag is accepted so that an adoption whose identity tag the tag index does not list yet
    /// is found again, not adopted from under itself and made twice.
    pub unclaimed: Option<String>,
    /// When set, resources recording another region (`REGION_TAG`: IAM, which is global) do not
    /// match: a regional teardown leaves the IAM of the same infraID's cluster elsewhere.
    pub region: Option<String>,
}

impl TagQuery {
    /// Resources carrying tag `key=value`, whoever made them.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> TagQuery {
        TagQuery { key: key.into(), value: value.into(), created_by: None, name: None, unclaimed: None, region: None }
    }

    /// The server-side filter: the main tag (the creator is checked client-side, on `matches`).
    pub fn filter(&self) -> Filter {
        Filter::builder().name(format!("tag:{}", self.key)).values(&self.value).build()
    }

    pub fn matches(&self, tags: &[Tag]) -> bool {
        let pairs: Vec<(String, String)> = tags
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
            .collect();
        self.matches_pairs(&pairs)
    }

    /// `matches` for tags read as pairs (ELBv2's DescribeTags).
    pub fn matches_pairs(&self, tags: &[(String, String)]) -> bool {
        let has = |k: &str, v: &str| tags.iter().any(|(tk, tv)| tk == k && tv == v);
        let adopted_by_another =
            |w: &str| adopters(tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))).iter().any(|a| a != w);
        has(&self.key, &self.value)
            && self.created_by.as_deref().is_none_or(|w| has(CREATED_BY_TAG, w) && !adopted_by_another(w))
            && self.name.as_deref().is_none_or(|n| has("Name", n))
            && self.unclaimed.as_deref().is_none_or(|mine| tags.iter().all(|(k, v)| k != IDENTITY_TAG || v == mine))
            && self.region.as_deref().is_none_or(|r| tags.iter().all(|(k, v)| k != REGION_TAG || v == r))
    }
}

/// The query that finds everything a cluster owns.
pub fn owned(infra_id: &str) -> TagQuery {
    TagQuery::new(ownership_key(infra_id), OWNED)
}

pub fn filter(name: &str, values: &[&str]) -> Filter {
    Filter::builder().name(name).set_values(Some(values.iter().map(|v| v.to_string()).collect())).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_deterministic_and_fit_aws_limits() {
        let id =
            Identity::new("a-very-long-infra-id-with-many-characters-x1y2z", "nat", Some("us-east-1a"), "n".into());
        assert_eq!(id.token(), id.clone().token());
        assert!(id.token().len() <= 64);
        let other =
            Identity::new("a-very-long-infra-id-with-many-characters-x1y2z", "nat", Some("us-east-1b"), "n".into());
        assert_ne!(id.token(), other.token());
        let a = id.clone().with_tags(&[], "wf-1");
        let b = id.clone().with_tags(&[], "wf-2");
        assert_ne!(a.token(), b.token(), "another workflow never reuses a token");
        assert_eq!(a.token(), a.clone().token(), "retries within one workflow do");
    }

    #[test]
    fn ownership_and_identity_tags_are_always_present() {
        let id = Identity::new("infra1", "vpc", None, "infra1-vpc".into())
            .with_tags(&[("team".into(), "sre".into()), ("Name".into(), "override".into())], "wf-1");
        let tags = id.tags();
        assert!(tags.contains(&("kubernetes.io/cluster/infra1".into(), "owned".into())));
        assert!(tags.contains(&("Name".into(), "infra1-vpc".into())), "additional tags never replace Name");
        assert!(tags.contains(&(IDENTITY_TAG.into(), "infra1/vpc".into())));
        assert!(tags.contains(&("team".into(), "sre".into())));
        assert!(tags.contains(&(CREATED_BY_TAG.into(), "wf-1".into())));
        assert!(!id.adoption_tags().iter().any(|(k, _)| k == CREATED_BY_TAG), "adoption never rewrites the creator");
    }

    #[test]
    fn adoption_never_moves_a_clusters_expiration_date() {
        let dated = Identity::new("infra1", "vpc", None, "n".into())
            .with_tags(&[], "wf-1")
            .with_expiration(Some("2026-11-26T00:00:00Z"));
        assert!(dated.tags().contains(&(EXPIRATION_TAG.into(), "2026-11-26T00:00:00Z".into())), "written at creation");
        assert!(!dated.adoption_tags().iter().any(|(k, _)| k == EXPIRATION_TAG), "never on what it finds");
        let by_tag =
            Identity::new("infra1", "vpc", None, "n".into()).with_tags(&[(EXPIRATION_TAG.into(), "x".into())], "wf-1");
        assert!(!by_tag.adoption_tags().iter().any(|(k, _)| k == EXPIRATION_TAG), "not through additionalTags either");
        assert_eq!(by_tag.tags().iter().filter(|(k, _)| k == EXPIRATION_TAG).count(), 1);
    }

    #[test]
    fn additional_tags_cannot_forge_the_creator() {
        let id = Identity::new("infra1", "vpc", None, "n".into())
            .with_tags(&[(CREATED_BY_TAG.into(), "someone-else".into())], "wf-1");
        let creators: Vec<_> = id.tags().into_iter().filter(|(k, _)| k == CREATED_BY_TAG).collect();
        assert_eq!(creators, vec![(CREATED_BY_TAG.to_string(), "wf-1".to_string())]);
    }

    #[test]
    fn a_creator_query_matches_only_what_that_workflow_made() {
        let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
        let mine = vec![tag(IDENTITY_TAG, "i/vpc"), tag(CREATED_BY_TAG, "wf-2")];
        let theirs = vec![tag(IDENTITY_TAG, "i/vpc"), tag(CREATED_BY_TAG, "wf-1")];
        let q = TagQuery { created_by: Some("wf-2".into()), ..TagQuery::new(IDENTITY_TAG, "i/vpc") };
        assert!(q.matches(&mine));
        assert!(!q.matches(&theirs));
        let any = TagQuery { created_by: None, ..q };
        assert!(any.matches(&theirs));
    }

    #[test]
    fn an_undo_by_creator_skips_what_another_workflow_adopted() {
        let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
        let q = TagQuery { created_by: Some("wf-1".into()), ..TagQuery::new(IDENTITY_TAG, "i/vpc") };
        let adopted = vec![tag(IDENTITY_TAG, "i/vpc"), tag(CREATED_BY_TAG, "wf-1"), tag(ADOPTED_BY_TAG, "wf-2")];
        assert!(!q.matches(&adopted), "wf-2 runs on it: wf-1's undo leaves it");
        let released = vec![tag(IDENTITY_TAG, "i/vpc"), tag(CREATED_BY_TAG, "wf-1"), tag(ADOPTED_BY_TAG, "")];
        assert!(q.matches(&released), "an adopter that rolled back emptied its mark");
        let self_marked = vec![tag(IDENTITY_TAG, "i/vpc"), tag(CREATED_BY_TAG, "wf-1"), tag(ADOPTED_BY_TAG, "wf-1")];
        assert!(q.matches(&self_marked));
        let own_slot =
            vec![tag(IDENTITY_TAG, "i/vpc"), tag(CREATED_BY_TAG, "wf-1"), tag(&adoption_key("wf-3"), "wf-3")];
        assert!(!q.matches(&own_slot), "any adopter's own mark keeps the creator's undo off");
    }

    #[test]
    fn the_adoption_mark_is_written_once_and_only_over_another_creator() {
        let p = |k: &str, v: &str| (k.to_string(), v.to_string());
        let me = Identity::new("i", "vpc", None, "n".into()).with_tags(&[], "wf-2");
        let theirs = vec![p(IDENTITY_TAG, "i/vpc"), p(CREATED_BY_TAG, "wf-1")];
        assert_eq!(me.adoption_mark(&[p(IDENTITY_TAG, "i/vpc"), p(CREATED_BY_TAG, "wf-2")]), None, "its own");
        assert_eq!(me.adoption_mark(&[p(IDENTITY_TAG, "i/vpc")]), None, "HyperShift's: no undo deletes it");
        assert_eq!(me.adoption_mark(&theirs), Some((adoption_key("wf-2"), "wf-2".to_string())));
        let marked = vec![p(CREATED_BY_TAG, "wf-1"), p(ADOPTED_BY_TAG, "wf-3")];
        assert_eq!(
            me.adoption_mark(&marked),
            Some((adoption_key("wf-2"), "wf-2".to_string())),
            "a later adopter marks too: the first adopter's rollback must not leave it unmarked"
        );
        let mine = vec![p(CREATED_BY_TAG, "wf-1"), p(&adoption_key("wf-2"), "wf-2")];
        assert_eq!(me.adoption_mark(&mine), None, "once");
        assert_ne!(adoption_key("wf-2"), adoption_key("wf-3"));
        let many: Vec<(String, String)> = std::iter::once(p(CREATED_BY_TAG, "wf-1"))
            .chain((0..MAX_ADOPTER_MARKS).map(|i| (adoption_key(&format!("r{i}")), format!("r{i}"))))
            .collect();
        assert_eq!(me.adoption_mark(&many), None, "never past the cap: the tag limit would stop every run");
    }
}

#[cfg(test)]
mod hypershift_tests {
    use super::*;

    #[test]
    fn hypershifts_query_matches_its_own_resource_and_never_one_infraflow_made() {
        let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
        let vpc = Identity::new("c1", "vpc", None, "c1-vpc".into());
        let q = vpc.hypershift_query().unwrap();
        let theirs = vec![tag("kubernetes.io/cluster/c1", "owned"), tag("Name", "c1-vpc")];
        assert!(q.matches(&theirs));
        let ours = vec![tag("kubernetes.io/cluster/c1", "owned"), tag("Name", "c1-vpc"), tag(IDENTITY_TAG, "c1/vpc")];
        assert!(q.matches(&ours), "its own identity (an adoption the tag index lags on) is found again");
        let another =
            vec![tag("kubernetes.io/cluster/c1", "owned"), tag("Name", "c1-vpc"), tag(IDENTITY_TAG, "c1/igw")];
        assert!(!q.matches(&another), "another role's identity means infraflow's: never adopted again");
        let other_name = vec![tag("kubernetes.io/cluster/c1", "owned"), tag("Name", "c1-igw")];
        assert!(!q.matches(&other_name));
        let other_cluster = vec![tag("kubernetes.io/cluster/c2", "owned"), tag("Name", "c1-vpc")];
        assert!(!q.matches(&other_cluster));
        let dhcp = Identity::new("c1", "dhcp-options", None, "c1-dhcp".into()).hypershift_query().unwrap();
        assert!(dhcp.matches(&[tag("kubernetes.io/cluster/c1", "owned")]), "DHCP options by ownership alone");
        assert!(Identity::new("c1", "worker-sg", None, "c1-worker-sg".into()).hypershift_query().is_none());
    }
}
