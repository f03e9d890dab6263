//! What scale-nodepool is asked and answers (DESIGN.md's contract): a node pool as its input
//! names it, the checks of each field, the tags its members carry. Below every feature that
//! reads a node pool's input (its vCPU quota).

use infraflow_activities::Identity;
use infraflow_activities::compute::MEMBER_TAG;
use infraflow_activities::tags::TagQuery;
use infraflow_engine::InputError;
use serde::{Deserialize, Serialize};

use crate::validate;

/// The tag naming a node pool: `<infraID>/<nodePool>`.
pub const NODEPOOL_TAG: &str = "infraflow.io/nodepool";
const MAX_REPLICAS: i64 = 500;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScaleInput {
    #[serde(rename = "infraID")]
    pub infra_id: String,
    pub node_pool: String,
    pub replicas: i64,
    #[serde(rename = "subnetID")]
    pub subnet_id: String,
    pub instance_type: String,
    #[serde(rename = "imageID")]
    pub image_id: String,
    #[serde(rename = "securityGroupIDs")]
    pub security_group_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(rename = "vpcEndpointIDs", default, skip_serializing_if = "Vec::is_empty")]
    pub vpc_endpoint_ids: Vec<String>,
    /// Nodes get public addresses: set it for a `publicOnly` cluster (provision-infra's output
    /// says so), whose subnets have no NAT gateway — as HyperShift's `aws-machine-public-ips`.
    #[serde(rename = "publicIPs", default, skip_serializing_if = "std::ops::Not::not")]
    pub public_ips: bool,
    /// A file holding the nodes' user data (`user_data`): read at each launch, only its path
    /// and digest journaled.
    #[serde(rename = "userDataFile", default, skip_serializing_if = "Option::is_none")]
    pub user_data_file: Option<String>,
    /// Set at submit from `userDataFile`.
    #[serde(rename = "userDataSHA256", default, skip_serializing_if = "Option::is_none")]
    pub user_data_sha256: Option<String>,
    /// Defaults to the SDK's region (AWS_REGION or the profile's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The role its AWS calls go through, with STS's `externalID` and `sessionName` (read by
    /// `validate::role`); left out, the process's own credentials.
    #[serde(rename = "roleARN", default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
    #[serde(rename = "externalID", default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    /// STS's `SourceIdentity`: who asked, as CloudTrail shows it on every call of the session
    /// (the daemon's API sets it to the tenant and subject; a tenant may not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_identity: Option<String>,
    /// `expirationDate` on what this workflow creates: submission + this (`6h`, `3d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleOutput {
    pub node_pool: String,
    pub replicas: i64,
    #[serde(rename = "instanceIDs")]
    pub instance_ids: Vec<String>,
}

fn prefixed(field: &str, v: &str, prefix: &str) -> Result<(), InputError> {
    let ok =
        v.strip_prefix(prefix).is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric()));
    if ok { Ok(()) } else { Err(InputError::field(field, format!("{v:?} is not an id like {prefix}0123abcd"))) }
}

impl ScaleInput {
    pub fn check(&self) -> Result<(), InputError> {
        validate::dns_label("infraID", &self.infra_id, 60)?;
        validate::dns_label("nodePool", &self.node_pool, 40)?;
        crate::expiry::refuse_on_a_part(self.expires_in.as_deref(), "a node pool")?;
        if self.replicas < 0 {
            return Err(InputError::field(
                "replicas",
                format!("{} is negative; use 0 to remove every instance", self.replicas),
            ));
        }
        if self.replicas > MAX_REPLICAS {
            return Err(InputError::field("replicas", format!("{} is more than {MAX_REPLICAS}", self.replicas)));
        }
        prefixed("subnetID", &self.subnet_id, "subnet-")?;
        prefixed("imageID", &self.image_id, "ami-")?;
        let t = &self.instance_type;
        if !t.contains('.') || !t.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-') {
            return Err(InputError::field("instanceType", format!("{t:?} is not an instance type like m6i.xlarge")));
        }
        if self.security_group_ids.is_empty() {
            return Err(InputError::field("securityGroupIDs", "must name at least one security group"));
        }
        for (i, sg) in self.security_group_ids.iter().enumerate() {
            prefixed(&format!("securityGroupIDs[{i}]"), sg, "sg-")?;
        }
        for (i, e) in self.vpc_endpoint_ids.iter().enumerate() {
            prefixed(&format!("vpcEndpointIDs[{i}]"), e, "vpce-")?;
        }
        if let Some(r) = &self.region {
            validate::region("region", r)?;
        }
        Ok(())
    }

    pub(crate) fn pool_query(&self) -> TagQuery {
        TagQuery::new(NODEPOOL_TAG, format!("{}/{}", self.infra_id, self.node_pool))
    }

    pub(crate) fn member(&self, index: u32, workflow: &str, expires: Option<&str>) -> Identity {
        let mut id = Identity::new(
            &self.infra_id,
            &format!("nodepool/{}", self.node_pool),
            Some(&index.to_string()),
            format!("{}-{}-{index}", self.infra_id, self.node_pool),
        )
        .with_tags(&[], workflow)
        .with_hypershift_tags(None)
        .with_expiration(expires);
        id.extra_tags.push((NODEPOOL_TAG.into(), format!("{}/{}", self.infra_id, self.node_pool)));
        id.extra_tags.push((MEMBER_TAG.into(), index.to_string()));
        id
    }
}
