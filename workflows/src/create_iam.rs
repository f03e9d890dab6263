//! `create-iam`: the IAM half of a hosted cluster (seed 002; HyperShift's `create iam aws`) — the
//! OIDC provider of the cluster's issuer, the seven operator roles that trust it, and the worker
//! role with its instance profile — with the output `hypershift create cluster aws --iam-json`
//! reads.

use std::collections::BTreeMap;

use infraflow_activities::iam::{self, OidcProvider, S3_ISSUER_THUMBPRINT, issuer_host_path};
use infraflow_activities::tags::REGION_TAG;
use infraflow_activities::{AwsPool, Identity, Kind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aws_steps::{acting_region, aws_retry, from_aws, probe_environment, undo};
use crate::cluster_roles::worker_trust_policy;
use crate::cluster_roles::{
    Grants, KARPENTER_ROLE, LONGEST_SUFFIX, OPERATOR_ROLES, Zones, trust_policy, worker_names, worker_policy,
};
use crate::cluster_roles::{KMS_PROVIDER_ACCOUNTS, KMS_PROVIDER_SUFFIX, kms_provider_policy};
use crate::validate;
use infraflow_engine::{ActivityError, InputError, StepError};
use infraflow_engine::{BoxFuture, StepOptions, Validated, WfCtx, WorkflowDef};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateIamInput {
    /// The cluster's name (not used in IAM names, which HyperShift derives from the infraID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(rename = "infraID")]
    pub infra_id: String,
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
    /// The issuer, when it is not `https://<oidcBucket>.s3.<oidcBucketRegion>.amazonaws.com/<infraID>`.
    #[serde(rename = "issuerURL", default, skip_serializing_if = "Option::is_none")]
    pub issuer_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_bucket: Option<String>,
    /// Defaults to `region`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_bucket_region: Option<String>,
    /// The issuer certificate's SHA-1 thumbprint; HyperShift's S3 default when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thumbprint: Option<String>,
    /// The zones the ingress operator writes records in (both, or its policy allows every zone).
    #[serde(rename = "publicZoneID", default, skip_serializing_if = "Option::is_none")]
    pub public_zone_id: Option<String>,
    #[serde(rename = "privateZoneID", default, skip_serializing_if = "Option::is_none")]
    pub private_zone_id: Option<String>,
    /// The zone the control-plane operator writes records in (else every zone).
    #[serde(rename = "localZoneID", default, skip_serializing_if = "Option::is_none")]
    pub local_zone_id: Option<String>,
    /// The KMS key that encrypts etcd: HyperShift's KMS provider role is made for it.
    #[serde(rename = "kmsKeyARN", default, skip_serializing_if = "Option::is_none")]
    pub kms_key_arn: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub additional_tags: BTreeMap<String, String>,
    /// How long the cluster may live (`6h`, `3d`): what this workflow creates carries
    /// `expirationDate` = submission + this, the tag `infraflow sweep` tears expired clusters by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<String>,
    /// The cluster's nodes are Karpenter's (HyperShift's AutoNode): its role is made too
    /// (`<infraID>-karpenter`, output as `roles.karpenterARN`; version 3 on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_node: bool,
    /// Puts the cluster's IAM back as this input defines it where it drifted (`infraflow
    /// check` names each drift), even on roles an earlier submission of the cluster made: their
    /// trust and inline policy are rewritten. Without it such a role is left, and the run
    /// pauses naming it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repair_drift: bool,
}

impl CreateIamInput {
    pub fn check(&self) -> Result<(), InputError> {
        if let Some(n) = &self.name {
            validate::dns_label("name", n, 40)?;
        }
        validate::dns_label("infraID", &self.infra_id, 64 - LONGEST_SUFFIX - 1)?;
        validate::region("region", &self.region)?;
        match (&self.issuer_url, &self.oidc_bucket) {
            (Some(_), Some(_)) => return Err(InputError::field("issuerURL", "give issuerURL or oidcBucket, not both")),
            (None, None) => {
                return Err(InputError::field(
                    "oidcBucket",
                    "is required (the S3 bucket serving the cluster's OIDC documents), unless issuerURL is given",
                ));
            }
            (Some(url), None) => {
                let rest = url.strip_prefix("https://").unwrap_or_default();
                if rest.is_empty() || rest.contains(['?', '#', ' ']) || url.len() > 255 {
                    return Err(InputError::field(
                        "issuerURL",
                        format!("{url:?} is not an https:// URL of at most 255 characters without query"),
                    ));
                }
            }
            (None, Some(bucket)) => {
                let ok = (3..=63).contains(&bucket.len())
                    && bucket.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
                if !ok {
                    return Err(InputError::field("oidcBucket", format!("{bucket:?} is not an S3 bucket name")));
                }
            }
        }
        if let Some(r) = &self.oidc_bucket_region {
            validate::region("oidcBucketRegion", r)?;
        }
        if let Some(t) = &self.thumbprint
            && (t.len() != 40 || !t.chars().all(|c| c.is_ascii_hexdigit()))
        {
            return Err(InputError::field("thumbprint", format!("{t:?} is not a SHA-1 thumbprint (40 hex digits)")));
        }
        for (field, zone) in [
            ("publicZoneID", &self.public_zone_id),
            ("privateZoneID", &self.private_zone_id),
            ("localZoneID", &self.local_zone_id),
        ] {
            if let Some(z) = zone
                && (z.is_empty() || z.len() > 32 || !z.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()))
            {
                return Err(InputError::field(field, format!("{z:?} is not a hosted zone id like Z0123ABC")));
            }
        }
        if self.public_zone_id.is_some() != self.private_zone_id.is_some() {
            return Err(InputError::field(
                "privateZoneID",
                "publicZoneID and privateZoneID go together: the ingress role is scoped to both or to none",
            ));
        }
        if let Some(key) = &self.kms_key_arn {
            validate::kms_key_arn("kmsKeyARN", key)?;
        }
        validate::additional_tags("additionalTags", &self.additional_tags)?;
        crate::expiry::validate(self.expires_in.as_deref(), &self.additional_tags)
    }

    /// HyperShift's default: `https://<bucket>.s3.<bucket region>.amazonaws.com/<infraID>`.
    pub fn issuer(&self) -> String {
        match (&self.issuer_url, &self.oidc_bucket) {
            (Some(url), _) => url.trim_end_matches('/').to_string(),
            (None, bucket) => format!(
                "https://{}.s3.{}.amazonaws.com/{}",
                bucket.as_deref().unwrap_or_default(),
                self.oidc_bucket_region.as_deref().unwrap_or(&self.region),
                self.infra_id
            ),
        }
    }

    pub(crate) fn zones(&self) -> Zones {
        Zones {
            public: self.public_zone_id.clone(),
            private: self.private_zone_id.clone(),
            local: self.local_zone_id.clone(),
        }
    }
}

/// HyperShift's `CreateIAMOutput`, field for field (`tests/fixtures/hypershift/create-iam-output.keys`),
/// plus the provider's ARN.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateIamOutput {
    pub region: String,
    pub profile_name: String,
    #[serde(rename = "infraID")]
    pub infra_id: String,
    #[serde(rename = "issuerURL")]
    pub issuer_url: String,
    /// Role ARNs by HyperShift's field names (`ingressARN`, `storageARN`, ...).
    pub roles: BTreeMap<String, String>,
    /// The input's key, empty without one (as HyperShift writes it).
    #[serde(rename = "kmsKeyARN", default)]
    pub kms_key_arn: String,
    #[serde(rename = "kmsProviderRoleARN", default)]
    pub kms_provider_role_arn: String,
    #[serde(rename = "oidcProviderARN")]
    pub oidc_provider_arn: String,
}

pub struct CreateIam {
    pub pool: AwsPool,
}

impl WorkflowDef for CreateIam {
    fn hold(&self, request: infraflow_engine::HoldRequest, input: &Value) -> Option<infraflow_engine::TakeHold> {
        crate::hold::lease::for_input(&self.pool, request, self.name(), input)
    }

    fn name(&self) -> &'static str {
        "create-iam"
    }

    fn summary(&self) -> &'static str {
        "the cluster's OIDC provider, operator roles and worker instance profile"
    }

    /// 2: the operators' policies grant what HyperShift grants today (the seed's for runs of 1).
    /// 3: HyperShift's grants at 3ee9615 (the node-pool role reads Karpenter's interruption
    /// queue), and `autoNode` makes Karpenter's role.
    fn version(&self) -> u32 {
        3
    }

    fn oldest_version(&self) -> u32 {
        1
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        let p: CreateIamInput = validate::decode(input)?;
        p.check()?;
        let cluster = validate::cluster_key(&p.infra_id, validate::role(input)?.as_ref());
        let input = serde_json::to_value(&p).map_err(|e| InputError(e.to_string()))?;
        Ok(Validated { input: validate::session_named(id, input), cluster })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.assuming(crate::aws_steps::role_of(&input).as_ref());
        Box::pin(async move {
            let p: CreateIamInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let grants = match ctx.code_version() {
                0 | 1 => Grants::Seed002,
                2 => Grants::Hypershift2025,
                _ => Grants::Current,
            };
            let out = create_iam(&ctx, &pool, &p, grants).await?;
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        use crate::policy::*;
        actions(&[(IAM, Use::Manage)])
    }

    fn undo_context(&self, input: &Value) -> serde_json::Map<String, Value> {
        crate::aws_steps::role_context(input)
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let region = serde_json::from_value::<CreateIamInput>(input.clone()).map(|p| p.region).unwrap_or_default();
        Some(probe_environment(&self.pool.assuming(crate::aws_steps::role_of(input).as_ref()), &region))
    }
}

/// Options of an IAM create step: retries and the write-ahead undo, but no consistency settle
/// before a retry's lookup. An IAM name (or a provider's URL) is unique in the account, so a
/// create that a lookup too early did not see answers EntityAlreadyExists and is read again:
/// it can never make a second one, whatever the lookup saw.
fn unique_name_opts(region: &str, kind: Kind, id: &Identity) -> StepOptions {
    StepOptions { retry: Some(aws_retry()), undo: Some(undo(region, kind, id)), settle: None }
}

/// The step of one role, `iam::ensure_role` under `key`: its input is the role's identity, trust
/// and policy document.
#[allow(clippy::too_many_arguments)]
async fn role_step(
    ctx: &WfCtx,
    pool: &AwsPool,
    region: &str,
    key: &str,
    id: &Identity,
    name: &str,
    trust: &str,
    policy: iam::InlinePolicy<'_>,
) -> Result<String, StepError> {
    ctx.step_with(
        key,
        "iam.ensure-role",
        &(id, trust, policy.document),
        unique_name_opts(region, Kind::IamRole, id),
        || async {
            let aws = pool.region(region).await;
            iam::ensure_role(&aws, id, name, trust, policy).await.map_err(from_aws)
        },
    )
    .await
}

/// The create-iam body, callable from create-cluster. One role after another, as HyperShift
/// makes them: IAM's write rate is low, and a failure then leaves a short, exact list to undo.
/// `grants` is what the operators' policies carry (the caller's version decides); with the
/// current ones, a role of an earlier submission that still has the seed's policy is brought up
/// to date (nothing else of another submission's is rewritten).
pub async fn create_iam(
    ctx: &WfCtx,
    pool: &AwsPool,
    p: &CreateIamInput,
    grants: Grants,
) -> Result<CreateIamOutput, StepError> {
    let region = acting_region(ctx, &p.region);
    let region = region.as_str();
    let infra = p.infra_id.as_str();
    let extra: Vec<(String, String)> = p.additional_tags.clone().into_iter().collect();
    let expires = crate::expiry::date(ctx, p.expires_in.as_deref());
    // IAM is global, a cluster regional: its IAM records the region it serves, so that a
    // teardown (or another create-iam) naming another region leaves it. Not journaled with the
    // steps' identities (it was added after them; the region comes from the journaled
    // environment): `Identity::unjournaled_tags`, as HyperShift's tags.
    let ident = |role: &str, name: &str| {
        let mut id = Identity::new(infra, role, None, name.to_string())
            .with_tags(&extra, ctx.creator())
            .with_hypershift_tags(p.name.as_deref())
            .with_expiration(expires.as_deref());
        id.unjournaled_tags.push((REGION_TAG.to_string(), region.to_string()));
        id
    };
    let issuer = p.issuer();
    let thumbprint = p.thumbprint.as_deref().unwrap_or(S3_ISSUER_THUMBPRINT);

    let provider_id = ident("oidc-provider", issuer_host_path(&issuer));
    let provider: OidcProvider = ctx
        .step_with(
            "oidc-provider",
            "iam.ensure-oidc-provider",
            &(&provider_id, &issuer, thumbprint),
            unique_name_opts(region, Kind::OidcProvider, &provider_id),
            || async {
                let aws = pool.region(region).await;
                iam::ensure_oidc_provider(&aws, &provider_id, &issuer, thumbprint).await.map_err(from_aws)
            },
        )
        .await?;

    let zones = p.zones();
    let mut roles = BTreeMap::new();
    // Karpenter's role after the seven, when the cluster's nodes are Karpenter's (HyperShift
    // makes it with `--create-karpenter-role-arn`).
    let karpenter = p.auto_node.then_some(&KARPENTER_ROLE);
    for role in OPERATOR_ROLES.iter().chain(karpenter) {
        let name = role.name(infra);
        let id = ident(&format!("role/{}", role.suffix), &name);
        let trust = trust_policy(&provider.arn, issuer_host_path(&issuer), role.service_accounts).to_string();
        let policy = role.policy(&zones, grants).to_string();
        let generation = |g: Grants| role.policy(&zones, g).to_string();
        let at = Grants::ALL.iter().position(|g| *g == grants).unwrap_or_default();
        let differ = |gs: &[Grants]| -> Vec<String> {
            let mut docs: Vec<String> = gs.iter().map(|g| generation(*g)).filter(|d| *d != policy).collect();
            docs.dedup();
            docs
        };
        let (replaces, superseded_by) = (differ(&Grants::ALL[..at]), differ(&Grants::ALL[at + 1..]));
        let policy = iam::InlinePolicy {
            name: &name,
            document: &policy,
            replaces: &replaces,
            superseded_by: &superseded_by,
            repair: p.repair_drift,
        };
        let arn = role_step(ctx, pool, region, &format!("role/{}", role.suffix), &id, &name, &trust, policy).await?;
        roles.insert(role.field.to_string(), arn);
    }

    // HyperShift's KMS provider role, when a key encrypts etcd: after the seven, as it makes it.
    let mut kms_provider_role_arn = String::new();
    if let Some(key) = &p.kms_key_arn {
        let name = format!("{infra}-{KMS_PROVIDER_SUFFIX}");
        let id = ident(&format!("role/{KMS_PROVIDER_SUFFIX}"), &name);
        let trust = trust_policy(&provider.arn, issuer_host_path(&issuer), KMS_PROVIDER_ACCOUNTS).to_string();
        let policy = kms_provider_policy(key).to_string();
        let policy = iam::InlinePolicy {
            name: &name,
            document: &policy,
            replaces: &[],
            superseded_by: &[],
            repair: p.repair_drift,
        };
        let key = format!("role/{KMS_PROVIDER_SUFFIX}");
        kms_provider_role_arn = role_step(ctx, pool, region, &key, &id, &name, &trust, policy).await?;
    }

    let (role_name, policy_name, profile_name) = worker_names(infra);
    let role_id = ident("worker-role", &role_name);
    let (trust, policy) = (worker_trust_policy().to_string(), worker_policy().to_string());
    let policy = iam::InlinePolicy {
        name: &policy_name,
        document: &policy,
        replaces: &[],
        superseded_by: &[],
        repair: p.repair_drift,
    };
    role_step(ctx, pool, region, "worker-role", &role_id, &role_name, &trust, policy).await?;
    let profile_id = ident("worker-instance-profile", &profile_name);
    let _: String = ctx
        .step_with(
            "worker-instance-profile",
            "iam.ensure-instance-profile",
            &(&profile_id, &role_name),
            unique_name_opts(region, Kind::InstanceProfile, &profile_id),
            || async {
                let aws = pool.region(region).await;
                iam::ensure_instance_profile(&aws, &profile_id, &profile_name, &role_name).await.map_err(from_aws)
            },
        )
        .await?;

    Ok(CreateIamOutput {
        region: region.to_string(),
        profile_name,
        infra_id: p.infra_id.clone(),
        issuer_url: issuer,
        roles,
        kms_key_arn: p.kms_key_arn.clone().unwrap_or_default(),
        kms_provider_role_arn,
        oidc_provider_arn: provider.arn,
    })
}
