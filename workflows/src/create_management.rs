//! `create-management`: what every hosted cluster of a management cluster
//! needs before the first one, made in one command and resumable — the OIDC bucket with the
//! access HyperShift's quick-setup documents, the public zone if missing, and the HyperShift
//! operator's three roles as `hypershift create operator-roles aws` makes them. Its resources
//! carry the ownership key `management.<namePrefix>`, which no infraID can be (a dot): no
//! cluster's teardown or sweep ever names them; only `teardown-management` deletes them.

use infraflow_activities::iam::{self, issuer_host_path};
use infraflow_activities::tags::CREATED_BY_TAG;
use infraflow_activities::{AwsPool, Identity, dns, oidc_bucket};
use infraflow_engine::{ActivityError, BoxFuture, InputError, StepError, StepOptions, Validated, WfCtx, WorkflowDef};
use infraflow_journal::Undo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aws_steps::{aws_retry, from_aws, probe_environment};
use crate::validate;

/// The undo of the bucket's step: deleted if ours and still empty.
pub const DELETE_OIDC_BUCKET: &str = "s3.delete-oidc-bucket";
/// The undo of the zone's step: deleted if made by this workflow and still empty.
pub const DELETE_PUBLIC_ZONE: &str = "route53.delete-public-zone";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagementInput {
    pub region: String,
    pub oidc_bucket: String,
    /// The public zone clusters' names go under: made when missing, taken as it is when there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_domain: Option<String>,
    /// The roles' names start with it (HyperShift's default `hypershift`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
    /// Where the HyperShift operator runs (default `hypershift`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_namespace: Option<String>,
    /// The management cluster's issuer, whose IAM OIDC provider the roles trust…
    #[serde(rename = "oidcIssuerURL", default, skip_serializing_if = "Option::is_none")]
    pub oidc_issuer_url: Option<String>,
    /// …or the instance role they trust instead.
    #[serde(rename = "instanceRoleARN", default, skip_serializing_if = "Option::is_none")]
    pub instance_role_arn: Option<String>,
    #[serde(rename = "roleARN", default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
    #[serde(rename = "externalID", default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_identity: Option<String>,
}

impl ManagementInput {
    fn prefix(&self) -> &str {
        self.name_prefix.as_deref().unwrap_or("hypershift")
    }

    /// The ownership key's name: `management.<prefix>`, which no cluster's infraID can be.
    pub fn owner(&self) -> String {
        format!("management.{}", self.prefix())
    }
}

/// HyperShift's `CreateOperatorRolesOutput`, plus what else was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagementOutput {
    pub oidc_bucket: String,
    #[serde(rename = "publicZoneID", default, skip_serializing_if = "String::is_empty")]
    pub public_zone_id: String,
    #[serde(rename = "operatorEC2RoleARN")]
    pub operator_ec2_role_arn: String,
    #[serde(rename = "operatorOIDCS3RoleARN")]
    pub operator_oidc_s3_role_arn: String,
    #[serde(rename = "externalDNSRoleARN")]
    pub external_dns_role_arn: String,
}

pub struct CreateManagement {
    pub pool: AwsPool,
}

fn role_policy(file: &str, bucket: &str, zone: Option<&str>) -> String {
    let text = match file {
        "operator-ec2" => include_str!("../policies/management/operator-ec2.json"),
        "operator-oidc-s3" => include_str!("../policies/management/operator-oidc-s3.json"),
        _ => include_str!("../policies/management/external-dns.json"),
    };
    let zone_arn =
        zone.map(|z| format!("arn:aws:route53:::hostedzone/{z}")).unwrap_or("arn:aws:route53:::hostedzone/*".into());
    let doc: Value = serde_json::from_str(&text.replace("BUCKET", bucket).replace("ZONE_ARN", &zone_arn))
        .expect("workflows/policies/management/ holds JSON");
    doc.to_string()
}

/// S3's rules for a bucket name: 3-63 of lowercase letters, digits, '-' and '.', a letter or
/// digit at each end, no "..", not an IP address, none of S3's reserved prefixes and suffixes.
fn is_bucket_name(b: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&b.len())
        && b.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && edge(b.chars().next())
        && edge(b.chars().last())
        && !b.contains("..")
        && b.parse::<std::net::Ipv4Addr>().is_err()
        && !["xn--", "sthree-", "amzn-s3-demo-"].iter().any(|p| b.starts_with(p))
        && !["-s3alias", "--ol-s3", "--x-s3", ".mrap"].iter().any(|s| b.ends_with(s))
}

fn trust(p: &ManagementInput, provider_arn: Option<&str>, account: &str) -> String {
    let namespace = p.operator_namespace.as_deref().unwrap_or("hypershift");
    match (provider_arn, &p.instance_role_arn) {
        (Some(provider), _) => {
            let host = issuer_host_path(p.oidc_issuer_url.as_deref().unwrap_or_default());
            serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
                "Principal": {"Federated": provider}, "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {"StringEquals": {format!("{host}:sub"): format!("system:serviceaccount:{namespace}:{account}")}}}]})
            .to_string()
        }
        (None, Some(role)) => serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
            "Principal": {"AWS": role}, "Action": "sts:AssumeRole"}]})
        .to_string(),
        (None, None) => String::new(),
    }
}

impl WorkflowDef for CreateManagement {
    fn hold(&self, request: infraflow_engine::HoldRequest, input: &Value) -> Option<infraflow_engine::TakeHold> {
        crate::hold::lease::for_input(&self.pool, request, self.name(), input)
    }

    fn name(&self) -> &'static str {
        "create-management"
    }

    fn summary(&self) -> &'static str {
        "the management side every cluster needs: the OIDC bucket, the public zone, the HyperShift operator's roles"
    }

    fn version(&self) -> u32 {
        1
    }

    fn oldest_version(&self) -> u32 {
        1
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        let p: ManagementInput = validate::decode(input)?;
        validate::region("region", &p.region)?;
        if !is_bucket_name(&p.oidc_bucket) {
            return Err(InputError::field(
                "oidcBucket",
                format!(
                    "{:?} is not an S3 bucket name (3-63 lowercase letters, digits, '-', '.'; a letter or digit at each end)",
                    p.oidc_bucket
                ),
            ));
        }
        if let Some(url) = &p.oidc_issuer_url
            && !(url.starts_with("https://") && url.len() > "https://".len())
        {
            return Err(InputError::field("oidcIssuerURL", format!("{url:?} is not an https:// issuer URL")));
        }
        if let Some(arn) = &p.instance_role_arn
            && !(arn.starts_with("arn:aws") && arn.contains(":iam::") && arn.contains(":role/"))
        {
            return Err(InputError::field("instanceRoleARN", format!("{arn:?} is not an IAM role's ARN")));
        }
        if let Some(ns) = &p.operator_namespace {
            validate::dns_label("operatorNamespace", ns, 63)?;
        }
        let role = validate::role(input)?;
        if let Some(d) = &p.base_domain {
            validate::domain("baseDomain", d)?;
        }
        validate::dns_label("namePrefix", p.prefix(), 32)?;
        match (&p.oidc_issuer_url, &p.instance_role_arn) {
            (Some(_), Some(_)) => {
                return Err(InputError::field("instanceRoleARN", "give oidcIssuerURL or instanceRoleARN, not both"));
            }
            (None, None) => {
                return Err(InputError::field(
                    "oidcIssuerURL",
                    "give the management cluster's issuer (or instanceRoleARN): the roles trust it",
                ));
            }
            _ => {}
        }
        let input = serde_json::to_value(&p).map_err(|e| InputError(e.to_string()))?;
        Ok(Validated {
            input: validate::session_named(id, input),
            cluster: validate::cluster_key(&p.owner(), role.as_ref()),
        })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.assuming(crate::aws_steps::role_of(&input).as_ref());
        Box::pin(async move {
            let p: ManagementInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let out = create_management(&ctx, &pool, &p).await?;
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        use crate::policy::*;
        let mut all = actions(&[(IAM, Use::Manage), (DNS, Use::Manage)]);
        all.extend(infraflow_activities::s3::IAM_READ);
        all.extend(oidc_bucket::IAM_WRITE);
        all.extend(oidc_bucket::IAM_DELETE);
        all
    }

    fn undo_context(&self, input: &Value) -> serde_json::Map<String, Value> {
        crate::aws_steps::role_context(input)
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let region = serde_json::from_value::<ManagementInput>(input.clone()).map(|p| p.region).unwrap_or_default();
        Some(probe_environment(&self.pool.assuming(crate::aws_steps::role_of(input).as_ref()), &region))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UndoInput {
    region: String,
    owner: String,
    /// The identity's key (`<owner>/<what>`).
    identity: String,
    created_by: String,
    name: String,
    /// The role the workflow acts through (`undo_context`).
    #[serde(default)]
    role: Option<infraflow_activities::AssumedRole>,
}

/// Registers the undos of the bucket's and the zone's steps: each deletes only what this
/// workflow made and only while it is empty.
pub fn register_undo(r: &mut infraflow_engine::Registry, pool: AwsPool) {
    for activity in [DELETE_OIDC_BUCKET, DELETE_PUBLIC_ZONE] {
        let pool = pool.clone();
        r.add_undo(activity, move |input: Value| {
            let pool = pool.clone();
            async move {
                let u: UndoInput = serde_json::from_value(input)
                    .map_err(|e| ActivityError::terminal(format!("bad undo input: {e}")))?;
                let aws = pool.assuming(u.role.as_ref()).region(&u.region).await;
                let what = u.identity.strip_prefix(&format!("{}/", u.owner)).unwrap_or_default().to_string();
                let id = Identity::new(&u.owner, &what, None, u.name.clone()).with_tags(&[], &u.created_by);
                let removal = if activity == DELETE_OIDC_BUCKET {
                    oidc_bucket::delete_oidc_bucket_if_empty(&aws, &id, &u.name).await
                } else {
                    dns::public::delete_public_zone_if_empty(&aws, &id, &u.name).await
                }
                .map_err(from_aws)?;
                Ok(serde_json::json!({ "deleted": removal == oidc_bucket::Removal::Deleted }))
            }
        });
    }
}

fn undo_of(activity: &str, region: &str, id: &Identity, name: &str) -> Undo {
    Undo {
        activity: activity.to_string(),
        input: serde_json::json!({"region": region, "owner": id.infra_id, "identity": id.key(), "createdBy": id.workflow, "name": name}),
    }
}

async fn create_management(ctx: &WfCtx, pool: &AwsPool, p: &ManagementInput) -> Result<ManagementOutput, StepError> {
    let region = crate::aws_steps::acting_region(ctx, &p.region);
    let owner = p.owner();
    let ident =
        |role: &str, name: &str| Identity::new(&owner, role, None, name.to_string()).with_tags(&[], ctx.creator());
    let bucket_id = ident("oidc-bucket", &p.oidc_bucket);
    let opts = |undo: Undo| StepOptions { retry: Some(aws_retry()), undo: Some(undo), settle: None };
    // Read and journaled before any attempt to make it: an untagged bucket of that name found
    // after a kill is the killed attempt's only if there was none before.
    let before: oidc_bucket::BucketFound = ctx
        .step_with(
            "oidc-bucket-before",
            "s3.find-oidc-bucket",
            &(&bucket_id, &p.oidc_bucket),
            crate::aws_steps::read_opts(),
            || async {
                let aws = pool.region(&region).await;
                oidc_bucket::find_oidc_bucket(&aws, &bucket_id, &p.oidc_bucket).await.map_err(from_aws)
            },
        )
        .await?;
    let _: bool = ctx
        .step_with(
            "oidc-bucket",
            "s3.ensure-oidc-bucket",
            &(&bucket_id, &p.oidc_bucket),
            opts(undo_of(DELETE_OIDC_BUCKET, &region, &bucket_id, &p.oidc_bucket)),
            || async {
                let aws = pool.region(&region).await;
                oidc_bucket::ensure_oidc_bucket(&aws, &bucket_id, &p.oidc_bucket, before).await.map_err(from_aws)
            },
        )
        .await?;
    let mut public_zone_id = String::new();
    if let Some(base) = &p.base_domain {
        let zone_id = ident("public-zone", base);
        let (zone, _made): (String, bool) = ctx
            .step_with(
                "public-zone",
                "route53.ensure-public-zone",
                &(&zone_id, base),
                opts(undo_of(DELETE_PUBLIC_ZONE, &region, &zone_id, base)),
                || async {
                    let aws = pool.region(&region).await;
                    dns::public::ensure_public_zone(&aws, &zone_id, base).await.map_err(from_aws)
                },
            )
            .await?;
        public_zone_id = zone;
    }
    // The management cluster's provider, found by its issuer (HyperShift's CLI requires it there).
    let provider: Option<String> = match &p.oidc_issuer_url {
        Some(issuer) => Some(
            ctx.step_with("issuer-provider", "iam.find-oidc-provider", issuer, crate::aws_steps::read_opts(), || async {
                let aws = pool.region(&region).await;
                iam::find_oidc_provider_by_issuer(&aws, issuer).await.map_err(from_aws)?.ok_or_else(|| ActivityError {
                    operator: true,
                    ..ActivityError::terminal(format!(
                        "no IAM OIDC provider serves issuer {issuer}: register the management cluster's provider first"
                    ))
                })
            })
            .await?,
        ),
        None => None,
    };
    let prefix = p.prefix();
    let zone = (!public_zone_id.is_empty()).then_some(public_zone_id.as_str());
    let mut arns = Vec::new();
    for (file, account) in
        [("operator-ec2", "operator"), ("operator-oidc-s3", "operator"), ("external-dns", "external-dns")]
    {
        let name = format!("{prefix}-{file}");
        let id = ident(&format!("role/{file}"), &name);
        let trust = trust(p, provider.as_deref(), account);
        let document = role_policy(file, &p.oidc_bucket, zone);
        let policy =
            iam::InlinePolicy { name: &name, document: &document, replaces: &[], superseded_by: &[], repair: false };
        let arn: String = ctx
            .step_with(
                &format!("role/{file}"),
                "iam.ensure-role",
                &(&id, &trust, &document),
                opts(crate::aws_steps::undo(&region, infraflow_activities::Kind::IamRole, &id)),
                || async {
                    let aws = pool.region(&region).await;
                    // A role of the name without a creator is nobody's proof of ours, though it
                    // carries the identity tag (anyone can copy it): refused, never rewritten.
                    if let Some(tags) = iam::role_tags(&aws, &name).await.map_err(from_aws)?
                        && !tags.iter().any(|(k, v)| k == CREATED_BY_TAG && !v.is_empty())
                    {
                        return Err(ActivityError {
                            operator: true,
                            ..ActivityError::terminal(format!(
                                "role {name} exists and is not this management side's (no {CREATED_BY_TAG}): delete or rename it, or give another namePrefix"
                            ))
                        });
                    }
                    iam::ensure_role(&aws, &id, &name, &trust, policy).await.map_err(from_aws)
                },
            )
            .await?;
        arns.push(arn);
    }
    Ok(ManagementOutput {
        oidc_bucket: p.oidc_bucket.clone(),
        public_zone_id,
        operator_ec2_role_arn: arns[0].clone(),
        operator_oidc_s3_role_arn: arns[1].clone(),
        external_dns_role_arn: arns[2].clone(),
    })
}
