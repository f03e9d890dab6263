//! Tag conventions: ownership (`kubernetes.io/cluster/<infraID>=owned`), `Name` as HyperShift
//! names things, and the identity tag that makes every create idempotent across processes.

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use serde::{Deserialize, Serialize};

/// The tag whose value names a resource's identity within its cluster: `<infraID>/<role>[/<zone>]`.
pub const IDENTITY_TAG: &str = "infraflow.io/identity";
/// The workflow that created the resource (informational).
pub const WORKFLOW_TAG: &str = "infraflow.io/workflow";

pub fn ownership_key(infra_id: &str) -> String {
    format!("kubernetes.io/cluster/{infra_id}")
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
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workflow: String,
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
        }
    }

    pub fn with_tags(mut self, extra: &[(String, String)], workflow: &str) -> Identity {
        self.extra_tags = extra.to_vec();
        self.workflow = workflow.to_string();
        self
    }

    /// The identity tag's value.
    pub fn key(&self) -> String {
        match &self.zone {
            Some(z) => format!("{}/{}/{z}", self.infra_id, self.role),
            None => format!("{}/{}", self.infra_id, self.role),
        }
    }

    /// A deterministic idempotency token (ClientToken, CallerReference) at most 64 characters.
    pub fn token(&self) -> String {
        self.token_with("")
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

    pub fn tags(&self) -> Vec<(String, String)> {
        let mut t = vec![
            (ownership_key(&self.infra_id), "owned".to_string()),
            ("Name".to_string(), self.name.clone()),
            (IDENTITY_TAG.to_string(), self.key()),
        ];
        if !self.workflow.is_empty() {
            t.push((WORKFLOW_TAG.to_string(), self.workflow.clone()));
        }
        for (k, v) in &self.extra_tags {
            if !t.iter().any(|(tk, _)| tk == k) {
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

    /// The query that finds this very resource.
    pub fn query(&self) -> TagQuery {
        TagQuery { key: IDENTITY_TAG.to_string(), value: self.key() }
    }
}

/// A tag that must be present with this value. Sent to AWS as a filter *and* checked on what
/// comes back: some implementations ignore tag filters on some calls and return everything
/// (measured: moto's DescribeNatGateways), and a lookup that adopts or deletes the wrong
/// resource is the worst bug this tool can have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagQuery {
    pub key: String,
    pub value: String,
}

impl TagQuery {
    pub fn filter(&self) -> Filter {
        Filter::builder().name(format!("tag:{}", self.key)).values(&self.value).build()
    }

    pub fn matches(&self, tags: &[Tag]) -> bool {
        tags.iter().any(|t| t.key() == Some(self.key.as_str()) && t.value() == Some(self.value.as_str()))
    }
}

/// The query that finds everything a cluster owns.
pub fn owned(infra_id: &str) -> TagQuery {
    TagQuery { key: ownership_key(infra_id), value: "owned".to_string() }
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
    }
}
