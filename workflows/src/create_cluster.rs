//! `create-cluster`: provision-infra, then (with `iam`) create-iam, then (for PublicAndPrivate or
//! Private) create-privatelink, then one scale-nodepool per zone whose nodes get the worker
//! instance profile — as child steps of one journaled workflow, so a crash anywhere resumes the
//! whole, and a terminal failure anywhere compensates all of it.
//!
//! Why one workflow and not several: it calls the other workflows' bodies with scoped contexts
//! (`infra/...`, `iam/...`, `privatelink/...`, `nodepool/<zone>/...`): one journal, one lease, one
//! compensation list, so a crash anywhere resumes the whole and the cluster counts as one writer.

use infraflow_activities::AwsPool;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aws_steps::probe_environment;
use crate::cluster_roles::Grants;
use crate::create_iam::{self, CreateIamInput, CreateIamOutput};
use crate::create_privatelink::{self, GuestSide, ManagementSide, PrivateLinkInput, PrivateLinkOutput};
use crate::provision_infra::{self, EndpointAccess, ProvisionInput, ProvisionOutput};
use crate::scale_nodepool::{self, ScaleInput, ScaleOutput};
use crate::validate;
use infraflow_engine::{ActivityError, InputError, StepError};
use infraflow_engine::{BoxFuture, Validated, WorkflowDef};
use infraflow_engine::{WfCtx, join_branches};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePoolSpec {
    /// Instances per zone.
    pub replicas: i64,
    pub instance_type: String,
    #[serde(rename = "imageID")]
    pub image_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrivateLinkSpec {
    /// Where the load balancers live; default: the cluster's own VPC and public subnets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management: Option<ManagementSide>,
    #[serde(default)]
    pub allowed_principals: Vec<String>,
    #[serde(rename = "exposeAPIServer", default)]
    pub expose_api_server: bool,
}

/// The cluster's IAM (create-iam's input but for what the infrastructure gives: the infraID,
/// region, zones and tags).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IamSpec {
    #[serde(rename = "issuerURL", default, skip_serializing_if = "Option::is_none")]
    pub issuer_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_bucket: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_bucket_region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thumbprint: Option<String>,
    #[serde(rename = "kmsKeyARN", default, skip_serializing_if = "Option::is_none")]
    pub kms_key_arn: Option<String>,
}

impl IamSpec {
    pub(crate) fn input(&self, infra: &ProvisionInput, zones: [Option<String>; 3], auto_node: bool) -> CreateIamInput {
        let [public_zone_id, private_zone_id, local_zone_id] = zones;
        CreateIamInput {
            // The pool the parts are given acts through create-cluster's role.
            role_arn: None,
            external_id: None,
            session_name: None,
            source_identity: None,
            name: Some(infra.name.clone()),
            infra_id: infra.infra_id().to_string(),
            region: infra.region.clone(),
            issuer_url: self.issuer_url.clone(),
            oidc_bucket: self.oidc_bucket.clone(),
            oidc_bucket_region: self.oidc_bucket_region.clone(),
            thumbprint: self.thumbprint.clone(),
            public_zone_id,
            private_zone_id,
            local_zone_id,
            kms_key_arn: self.kms_key_arn.clone(),
            additional_tags: infra.additional_tags.clone(),
            expires_in: infra.expires_in.clone(),
            auto_node,
            repair_drift: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateClusterInput {
    pub infra: ProvisionInput,
    /// The role the AWS calls of it and its parts go through, with STS's `externalID` and
    /// `sessionName` (read by `validate::role`); left out, the process's own credentials.
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
    pub node_pool: NodePoolSpec,
    #[serde(default)]
    pub private_link: PrivateLinkSpec,
    /// The IAM half (OIDC provider, operator roles, worker profile); left out, the cluster's
    /// IAM is someone else's (`hypershift create iam aws`) and node pools use
    /// `nodePool.instanceProfile` if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam: Option<IamSpec>,
    /// How long the cluster may live (`6h`, `3d`): every part stamps `expirationDate` on what it
    /// creates. Kept in `infra.expiresIn` once validated (either place may give it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<String>,
    /// The cluster's nodes are Karpenter's (HyperShift's AutoNode): its IAM part makes
    /// Karpenter's role too (version 5 on; needs `iam`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_node: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateClusterOutput {
    pub infra: ProvisionOutput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam: Option<CreateIamOutput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_link: Option<PrivateLinkOutput>,
    pub node_pools: Vec<ScaleOutput>,
}

fn scale_input(
    c: &CreateClusterInput,
    infra: &ProvisionOutput,
    iam: Option<&CreateIamOutput>,
    zone: &str,
    subnet: &str,
    endpoints: Vec<String>,
) -> ScaleInput {
    ScaleInput {
        // The pool the parts are given acts through create-cluster's role.
        role_arn: None,
        external_id: None,
        session_name: None,
        source_identity: None,
        infra_id: infra.infra_id.clone(),
        node_pool: format!("{}-{zone}", c.infra.name),
        replicas: c.node_pool.replicas,
        subnet_id: subnet.to_string(),
        instance_type: c.node_pool.instance_type.clone(),
        image_id: c.node_pool.image_id.clone(),
        security_group_ids: vec![infra.security_group_id.clone()],
        // The input's profile wins: the operator chose it over the cluster's.
        instance_profile: c.node_pool.instance_profile.clone().or_else(|| iam.map(|i| i.profile_name.clone())),
        vpc_endpoint_ids: endpoints,
        region: Some(infra.region.clone()),
        // A public-only cluster's zones are public subnets without NAT: its nodes need addresses.
        public_ips: infra.public_only,
        user_data_file: None,
        user_data_sha256: None,
        // The cluster's expiry is its anchor's (the VPC's); its parts carry none of their own.
        expires_in: None,
    }
}

pub struct CreateCluster {
    pub pool: AwsPool,
}

impl WorkflowDef for CreateCluster {
    /// Admitted to the account's quotas, then the cluster's lease.
    fn hold(&self, request: infraflow_engine::HoldRequest, input: &Value) -> Option<infraflow_engine::TakeHold> {
        crate::hold::admission::admission_and_lease(&self.pool, request, self.name(), input)
    }

    fn name(&self) -> &'static str {
        "create-cluster"
    }

    fn summary(&self) -> &'static str {
        "provision-infra, create-privatelink (private clusters) and a node pool per zone, as one workflow"
    }

    /// 2: provision-infra's steps start as soon as their inputs exist, which moved their positions.
    /// 3: the IAM part's operator policies grant what HyperShift grants today.
    /// 4: the worker group's rules nobody owns are revoked in steps of their own (as
    /// provision-infra's 4).
    /// 5: the IAM part grants as HyperShift does at 3ee9615 (create-iam's 3), and `autoNode`
    /// makes Karpenter's role.
    fn version(&self) -> u32 {
        5
    }

    /// Runs of 2 replay with seed 002's grants.
    fn oldest_version(&self) -> u32 {
        2
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        let mut c: CreateClusterInput = validate::decode(input)?;
        if let Some(whole) = c.expires_in.take() {
            if c.infra.expires_in.as_ref().is_some_and(|part| *part != whole) {
                return Err(InputError::field("expiresIn", "infra.expiresIn says otherwise: give one of the two"));
            }
            c.infra.expires_in = Some(whole);
        }
        let in_infra = [
            ("infra.roleARN", c.infra.role_arn.is_some()),
            ("infra.externalID", c.infra.external_id.is_some()),
            ("infra.sessionName", c.infra.session_name.is_some()),
            ("infra.sourceIdentity", c.infra.source_identity.is_some()),
        ];
        if let Some((field, _)) = in_infra.iter().find(|(_, given)| *given) {
            return Err(InputError::field(
                field,
                "give the role's fields at the top of the input: every part acts through it",
            ));
        }
        c.infra = c
            .infra
            .validate(id)
            .map_err(|e| InputError(e.0.replacen("invalid input: ", "invalid input: infra.", 1)))?;
        let probe = ScaleInput {
            infra_id: c.infra.infra_id().to_string(),
            node_pool: format!("{}-zone", c.infra.name),
            replicas: c.node_pool.replicas,
            subnet_id: "subnet-0".into(),
            instance_type: c.node_pool.instance_type.clone(),
            image_id: c.node_pool.image_id.clone(),
            security_group_ids: vec!["sg-0".into()],
            instance_profile: None,
            vpc_endpoint_ids: Vec::new(),
            region: Some(c.infra.region.clone()),
            public_ips: c.infra.public_only,
            user_data_file: None,
            user_data_sha256: None,
            expires_in: None,
            role_arn: None,
            external_id: None,
            session_name: None,
            source_identity: None,
        };
        probe.check().map_err(|e| InputError(e.0.replacen("invalid input: ", "invalid input: nodePool.", 1)))?;
        if c.auto_node && c.iam.is_none() {
            return Err(InputError::field("autoNode", "needs iam: Karpenter's role is made with the cluster's IAM"));
        }
        if let Some(iam) = &c.iam {
            let zone = || Some("Z0000PROBE".to_string());
            iam.input(&c.infra, [zone(), zone(), zone()], c.auto_node)
                .check()
                .map_err(|e| InputError(e.0.replacen("invalid input: ", "invalid input: iam.", 1)))?;
        }
        let cluster = validate::cluster_key(c.infra.infra_id(), validate::role(input)?.as_ref());
        let input = serde_json::to_value(&c).map_err(|e| InputError(e.to_string()))?;
        Ok(Validated { input: validate::session_named(id, input), cluster })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.assuming(crate::aws_steps::role_of(&input).as_ref());
        Box::pin(async move {
            let c: CreateClusterInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let infra = provision_infra::provision(&ctx.scoped("infra"), &pool, &c.infra).await?;
            let iam = match &c.iam {
                Some(spec) => {
                    let zones = [&infra.public_zone_id, &infra.private_zone_id, &infra.local_zone_id]
                        .map(|z| Some(z.clone()).filter(|z| !z.is_empty()));
                    let input = spec.input(&c.infra, zones, c.auto_node);
                    let grants = match ctx.code_version() {
                        0..=2 => Grants::Seed002,
                        3 | 4 => Grants::Hypershift2025,
                        _ => Grants::Current,
                    };
                    Some(create_iam::create_iam(&ctx.scoped("iam"), &pool, &input, grants).await?)
                }
                None => None,
            };
            let private_link = if c.infra.endpoint_access == EndpointAccess::Public {
                None
            } else {
                let management = c.private_link.management.clone().unwrap_or_else(|| ManagementSide {
                    vpc_id: infra.vpc_id.clone(),
                    subnet_ids: infra.public_subnet_ids.clone(),
                });
                let input = PrivateLinkInput {
                    // The pool the parts are given acts through create-cluster's role.
                    role_arn: None,
                    external_id: None,
                    session_name: None,
                    source_identity: None,
                    name: c.infra.name.clone(),
                    infra_id: infra.infra_id.clone(),
                    region: infra.region.clone(),
                    management,
                    guest: GuestSide {
                        vpc_id: infra.vpc_id.clone(),
                        subnet_ids: infra.zones.iter().map(|z| z.subnet_id.clone()).collect(),
                        machine_cidr: infra.machine_cidr.clone(),
                    },
                    allowed_principals: c.private_link.allowed_principals.clone(),
                    expose_api_server: c.private_link.expose_api_server,
                    local_zone_id: Some(infra.local_zone_id.clone()),
                    expires_in: None,
                };
                Some(create_privatelink::create_privatelink(&ctx.scoped("privatelink"), &pool, &input).await?)
            };
            let endpoints: Vec<String> = private_link.iter().map(|p| p.router.vpc_endpoint_id.clone()).collect();
            let pools = infra.zones.iter().map(|z| {
                let input = scale_input(&c, &infra, iam.as_ref(), &z.name, &z.subnet_id, endpoints.clone());
                let zctx = ctx.scoped(&format!("nodepool/{}", z.name));
                let pool = &pool;
                async move { scale_nodepool::scale(&zctx, pool, &input).await }
            });
            let node_pools = join_branches(pools).await?;
            let out = CreateClusterOutput { infra, iam, private_link, node_pools };
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    /// What its three parts call: provision-infra, create-privatelink and scale-nodepool.
    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        let pool = self.pool.clone();
        let mut all = crate::provision_infra::ProvisionInfra { pool: pool.clone() }.iam_actions();
        all.extend(crate::create_privatelink::CreatePrivateLink { pool: pool.clone() }.iam_actions());
        all.extend(crate::create_iam::CreateIam { pool: pool.clone() }.iam_actions());
        all.extend(crate::scale_nodepool::ScaleNodePool { pool }.iam_actions());
        all
    }

    fn undo_context(&self, input: &Value) -> serde_json::Map<String, Value> {
        crate::aws_steps::role_context(input)
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let region =
            serde_json::from_value::<CreateClusterInput>(input.clone()).map(|c| c.infra.region).unwrap_or_default();
        Some(probe_environment(&self.pool.assuming(crate::aws_steps::role_of(input).as_ref()), &region))
    }
}
