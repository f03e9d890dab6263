//! `provision-infra`: the AWS infrastructure of a HyperShift hosted cluster, as
//! `hypershift create infra aws` makes it, built from idempotent steps with write-ahead undos.

use std::collections::BTreeMap;

use infraflow_activities::AwsPool;
use infraflow_activities::security::Rule;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aws_steps::probe_environment;
pub use crate::provision::provision;
use crate::validate;
use infraflow_engine::WfCtx;
use infraflow_engine::{ActivityError, InputError, StepError};
use infraflow_engine::{BoxFuture, Validated, WorkflowDef};

/// User tags per resource: EC2 and Route53 allow 50, and infraflow writes up to 6 of its own
/// (ownership, Name, identity, created-by, and a subnet's role tag), with a margin.
pub use crate::validate::MAX_ADDITIONAL_TAGS;

/// At most this many zones fit HyperShift's layout in a /16 (a /20 public and a /20 private each).
pub const MAX_ZONES: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum EndpointAccess {
    #[default]
    Public,
    PublicAndPrivate,
    Private,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisionInput {
    pub name: String,
    #[serde(rename = "infraID", default, skip_serializing_if = "Option::is_none")]
    pub infra_id: Option<String>,
    pub region: String,
    /// The role its AWS calls go through, with STS's `externalID` and `sessionName` (read by
    /// `validate::role`); left out, the process's own credentials.
    #[serde(rename = "roleARN", default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
    #[serde(rename = "externalID", default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// Bring your own VPC: the customer's VPC the cluster goes into, with `subnets`. infraflow
    /// then makes no network: it checks the customer's (`provision::customer_rules`) and marks
    /// its subnets for the cluster.
    #[serde(rename = "vpcID", default, skip_serializing_if = "Option::is_none")]
    pub vpc_id: Option<String>,
    /// The customer's subnets, a zone each (with `vpcID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnets: Option<Vec<CustomerZone>>,
    #[serde(rename = "vpcCIDR", default = "default_cidr")]
    pub vpc_cidr: String,
    pub base_domain: String,
    /// The private zone is `<baseDomainPrefix>.<baseDomain>`: the name when left out, the base
    /// domain itself with `none` (HyperShift's `--base-domain-prefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_domain_prefix: Option<String>,
    #[serde(default)]
    pub endpoint_access: EndpointAccess,
    #[serde(rename = "singleNATGateway", default)]
    pub single_nat_gateway: bool,
    #[serde(default)]
    pub public_only: bool,
    #[serde(default)]
    pub additional_tags: BTreeMap<String, String>,
    /// How long the cluster may live (`6h`, `3d`): what this workflow creates carries
    /// `expirationDate` = submission + this, the tag `infraflow sweep` tears expired clusters by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<String>,
}

/// One zone of a customer's network: its private subnet (the nodes'; none in a public-only
/// cluster) and its public one (the public load balancers'; optional, in every zone or in none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomerZone {
    pub zone: String,
    #[serde(rename = "privateSubnetID", default, skip_serializing_if = "Option::is_none")]
    pub private_subnet_id: Option<String>,
    #[serde(rename = "publicSubnetID", default, skip_serializing_if = "Option::is_none")]
    pub public_subnet_id: Option<String>,
}

fn default_cidr() -> String {
    "10.0.0.0/16".into()
}

/// What `hypershift create cluster aws --infra-json` reads — HyperShift's `CreateInfraOutput`,
/// every key of it (`tests/fixtures/hypershift/create-infra-output.keys`) — plus the worker security
/// group and the public subnets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionOutput {
    pub region: String,
    /// HyperShift's output has it and never fills it: always empty, kept for its readers.
    #[serde(default)]
    pub zone: String,
    #[serde(rename = "infraID")]
    pub infra_id: String,
    /// Capital N, as HyperShift writes it (`alias`: outputs journaled by earlier versions).
    #[serde(rename = "Name", alias = "name")]
    pub name: String,
    #[serde(rename = "machineCIDR")]
    pub machine_cidr: String,
    #[serde(rename = "vpcID")]
    pub vpc_id: String,
    pub zones: Vec<OutputZone>,
    pub base_domain: String,
    /// The input's, empty when left out (as HyperShift writes it: the zone is then named after
    /// the cluster).
    #[serde(default)]
    pub base_domain_prefix: String,
    #[serde(default)]
    pub public_only: bool,
    #[serde(rename = "publicZoneID")]
    pub public_zone_id: String,
    #[serde(rename = "privateZoneID")]
    pub private_zone_id: String,
    #[serde(rename = "localZoneID")]
    pub local_zone_id: String,
    #[serde(rename = "securityGroupID")]
    pub security_group_id: String,
    #[serde(rename = "publicSubnetIDs")]
    pub public_subnet_ids: Vec<String>,
    /// HyperShift's proxy and shared-VPC keys: infraflow makes neither, so they stay empty (its
    /// readers expect the keys).
    #[serde(default)]
    pub proxy_addr: String,
    #[serde(default)]
    pub secure_proxy_addr: String,
    #[serde(rename = "proxyPrivateSSHKey", default)]
    pub proxy_private_ssh_key: String,
    #[serde(rename = "proxyCA", default)]
    pub proxy_ca: String,
    #[serde(rename = "vpcCreatorAccountID", default)]
    pub vpc_creator_account_id: String,
    #[serde(rename = "clusterAccountID", default)]
    pub cluster_account_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputZone {
    pub name: String,
    #[serde(rename = "subnetID")]
    pub subnet_id: String,
}

impl ProvisionInput {
    /// Checks every field; fills in the derived infra id.
    pub fn validate(mut self, workflow_id: &str) -> Result<ProvisionInput, InputError> {
        validate::dns_label("name", &self.name, 40)?;
        match &self.infra_id {
            Some(id) => validate::dns_label("infraID", id, 60)?,
            None => self.infra_id = Some(derive_infra_id(&self.name, workflow_id)),
        }
        validate::region("region", &self.region)?;
        if self.vpc_id.is_some() || self.subnets.is_some() {
            // A customer's VPC may be of any size: its CIDR is checked against the VPC's.
            validate::cidr("vpcCIDR", &self.vpc_cidr)?;
            crate::provision::customer_rules::validate_input(&mut self)?;
        } else {
            validate::cidr16("vpcCIDR", &self.vpc_cidr)?;
        }
        validate::domain("baseDomain", &self.base_domain)?;
        if let Some(prefix) = &self.base_domain_prefix {
            validate::dns_label("baseDomainPrefix", prefix, 63)?;
        }
        if let Some(zones) = &self.zones {
            if zones.is_empty() {
                return Err(InputError::field(
                    "zones",
                    "must name at least one zone (or be left out for the first available one)",
                ));
            }
            if zones.len() > MAX_ZONES {
                return Err(InputError::field(
                    "zones",
                    format!(
                        "{} zones do not fit in a /16: at most {MAX_ZONES} (each takes a public and a private /20)",
                        zones.len()
                    ),
                ));
            }
            for (i, z) in zones.iter().enumerate() {
                let suffix = z.strip_prefix(self.region.as_str()).unwrap_or("");
                if suffix.is_empty()
                    || !suffix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                {
                    return Err(InputError::field(
                        &format!("zones[{i}]"),
                        format!("{z:?} is not a zone of region {}", self.region),
                    ));
                }
                if zones[..i].contains(z) {
                    return Err(InputError::field(&format!("zones[{i}]"), format!("{z:?} is listed twice")));
                }
            }
        }
        validate::additional_tags("additionalTags", &self.additional_tags)?;
        crate::expiry::validate(self.expires_in.as_deref(), &self.additional_tags)?;
        Ok(self)
    }

    pub fn infra_id(&self) -> &str {
        self.infra_id.as_deref().unwrap_or_default()
    }

    /// HyperShift's `ZoneName`: `<prefix or name>.<baseDomain>`, or the base domain with `none`.
    pub fn private_zone_name(&self) -> String {
        match self.base_domain_prefix.as_deref() {
            Some("none") => self.base_domain.clone(),
            Some(prefix) => format!("{prefix}.{}", self.base_domain),
            None => format!("{}.{}", self.name, self.base_domain),
        }
    }
}

/// `<name>-<5 letters>`, stable for a workflow id, as HyperShift derives `jparrill-dest-zjhcn`.
fn derive_infra_id(name: &str, workflow_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in workflow_id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let suffix: String = (0..5)
        .map(|i| {
            let c = (h >> (i * 5)) % 26;
            char::from(b'a' + c as u8)
        })
        .collect();
    format!("{name}-{suffix}")
}

/// The CIDRs of zone `i`: public `x.y.(16i).0/20`, private `x.y.(128+16i).0/20`.
pub fn zone_cidrs(prefix: (u8, u8), i: usize) -> (String, String) {
    let (a, b) = prefix;
    (format!("{a}.{b}.{}.0/20", 16 * i), format!("{a}.{b}.{}.0/20", 128 + 16 * i))
}

/// HyperShift's worker ingress rules, all from the machine network.
pub(crate) fn worker_rules(cidr: &str) -> Vec<Rule> {
    vec![
        Rule::new("icmp", -1, -1, cidr),
        Rule::new("tcp", 22, 22, cidr),
        Rule::new("tcp", 4789, 4789, cidr),
        Rule::new("udp", 4789, 4789, cidr),
        Rule::new("udp", 6081, 6081, cidr),
        Rule::new("udp", 500, 500, cidr),
        Rule::new("udp", 4500, 4500, cidr),
        Rule::new("tcp", 9000, 9999, cidr),
        Rule::new("udp", 9000, 9999, cidr),
        Rule::new("tcp", 10250, 10250, cidr),
        Rule::new("tcp", 30000, 32767, cidr),
        Rule::new("udp", 30000, 32767, cidr),
    ]
}

pub struct ProvisionInfra {
    pub pool: AwsPool,
}

impl WorkflowDef for ProvisionInfra {
    /// Admitted to the account's quotas, then the cluster's lease.
    fn hold(&self, request: infraflow_engine::HoldRequest, input: &Value) -> Option<infraflow_engine::TakeHold> {
        crate::quota_hold::admission_and_lease(&self.pool, request, self.name(), input)
    }

    fn name(&self) -> &'static str {
        "provision-infra"
    }

    fn summary(&self) -> &'static str {
        "VPC, subnets, gateways, routes, security group, endpoints and DNS zones of a hosted cluster"
    }

    /// 2: steps start as soon as their inputs exist (the zones beside the gateway, the DNS zones
    /// beside everything after the VPC), which moved their positions. 3: a customer's VPC
    /// (`vpcID`), checked and marked instead of a network made; a run of 2 has the same steps.
    /// 4: the worker group's rules nobody owns are read and revoked in steps of their own, after
    /// the group's, and given back at rollback (`provision::revoke`).
    fn version(&self) -> u32 {
        4
    }

    fn oldest_version(&self) -> u32 {
        2
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        let p: ProvisionInput = validate::decode(input)?;
        let p = p.validate(id)?;
        let cluster = validate::cluster_key(p.infra_id(), validate::role(input)?.as_ref());
        let input = serde_json::to_value(&p).map_err(|e| InputError(e.to_string()))?;
        Ok(Validated { input: validate::session_named(id, input), cluster })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.assuming(crate::aws_steps::role_of(&input).as_ref());
        Box::pin(async move {
            let p: ProvisionInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let out = provision(&ctx, &pool, &p).await?;
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        use crate::policy::*;
        actions(&[
            (NETWORK, Use::Manage),
            (NAT, Use::Manage),
            (ROUTING, Use::Manage),
            (SECURITY, Use::Manage),
            (ENDPOINTS, Use::Manage),
            (DNS, Use::Manage),
            (RESOURCES, Use::Read),
            (CUSTOMER_NETWORK, Use::Manage),
            // The quota check `run` and `submit` make before journaling it.
            (QUOTAS, Use::Read),
        ])
    }

    fn undo_context(&self, input: &Value) -> serde_json::Map<String, Value> {
        crate::aws_steps::role_context(input)
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let region = serde_json::from_value::<ProvisionInput>(input.clone()).map(|p| p.region).unwrap_or_default();
        Some(probe_environment(&self.pool.assuming(crate::aws_steps::role_of(input).as_ref()), &region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_cidrs_follow_hypershift() {
        assert_eq!(zone_cidrs((10, 0), 0), ("10.0.0.0/20".into(), "10.0.128.0/20".into()));
        assert_eq!(zone_cidrs((10, 0), 2), ("10.0.32.0/20".into(), "10.0.160.0/20".into()));
        assert_eq!(zone_cidrs((10, 0), 7), ("10.0.112.0/20".into(), "10.0.240.0/20".into()));
    }

    #[test]
    fn the_derived_infra_id_is_stable_per_workflow() {
        assert_eq!(derive_infra_id("demo", "wf-1"), derive_infra_id("demo", "wf-1"));
        assert_ne!(derive_infra_id("demo", "wf-1"), derive_infra_id("demo", "wf-2"));
        assert!(derive_infra_id("demo", "wf-1").starts_with("demo-"));
    }
}
