//! What provision-infra is asked and answers (DESIGN.md's contract): its input and output, and
//! what follows from the input alone (the infra id, the zone name, the subnets' CIDRs, the
//! worker group's rules). Below every feature that reads a provision's input.

use std::collections::BTreeMap;

use infraflow_activities::security::Rule;
use serde::{Deserialize, Serialize};

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
    /// STS's `SourceIdentity`: who asked, as CloudTrail shows it on every call of the session
    /// (the daemon's API sets it to the tenant and subject; a tenant may not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_identity: Option<String>,
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
