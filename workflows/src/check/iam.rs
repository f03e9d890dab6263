//! The cluster's IAM in `infraflow check`: the roles create-iam made there with the trust and
//! inline policy it gave them, its OIDC provider with its issuer, audiences and thumbprint, and —
//! when the issuer is an S3 bucket this process can read — the issuer's discovery document and
//! keys there (HyperShift's `fix dr-oidc-iam` exists because they go missing). Reads only.

use infraflow_activities::iam::as_is::{self, DocumentNow};
use infraflow_activities::iam::{S3_ISSUER_THUMBPRINT, issuer_host_path};
use infraflow_activities::{Aws, AwsError, AwsPool};
use serde_json::Value;

use super::report::Drift;
use crate::cluster_roles::{
    Grants, KARPENTER_ROLE, KMS_PROVIDER_ACCOUNTS, KMS_PROVIDER_SUFFIX, OPERATOR_ROLES, kms_provider_policy,
    trust_policy, worker_names, worker_policy, worker_trust_policy,
};
use crate::create_iam::{CreateIamInput, CreateIamOutput};

/// The audiences HyperShift's provider serves.
const CLIENT_IDS: [&str; 2] = ["openshift", "sts.amazonaws.com"];

/// What the newest completed create-iam (or create-cluster's IAM part) of a cluster made.
#[derive(Clone, Debug)]
pub struct IamMade {
    pub workflow: String,
    pub input: CreateIamInput,
    pub output: CreateIamOutput,
    /// The grants its version gave the operators' roles.
    pub grants: Grants,
}

impl IamMade {
    /// From a completed `create-iam`, or `create-cluster` with `iam`, of flow `version`; None for
    /// a create-cluster without IAM, or a run whose journal cannot be read as one.
    pub fn from_run(name: &str, id: &str, input: &Value, output: &Value, version: u32) -> Option<IamMade> {
        let (input, grants) = match name {
            "create-iam" => (
                serde_json::from_value::<CreateIamInput>(input.clone()).ok()?,
                match version {
                    0 | 1 => Grants::Seed002,
                    2 => Grants::Hypershift2025,
                    _ => Grants::Current,
                },
            ),
            "create-cluster" => {
                let c: crate::create_cluster::CreateClusterInput = serde_json::from_value(input.clone()).ok()?;
                let spec = c.iam.as_ref()?;
                let infra: crate::provision::input::ProvisionOutput =
                    serde_json::from_value(output["infra"].clone()).ok()?;
                let zones = [&infra.public_zone_id, &infra.private_zone_id, &infra.local_zone_id]
                    .map(|z| Some(z.clone()).filter(|z| !z.is_empty()));
                let grants = match version {
                    0..=2 => Grants::Seed002,
                    3 | 4 => Grants::Hypershift2025,
                    _ => Grants::Current,
                };
                (spec.input(&c.infra, zones, c.auto_node), grants)
            }
            _ => return None,
        };
        let output = match name {
            "create-cluster" => output["iam"].clone(),
            _ => output.clone(),
        };
        Some(IamMade { workflow: id.to_string(), input, output: serde_json::from_value(output).ok()?, grants })
    }

    /// The create-iam input that makes this IAM again, repairing what drifted.
    fn repair(&self) -> String {
        let mut input = serde_json::to_value(&self.input).unwrap_or_default();
        input["repairDrift"] = Value::Bool(true);
        format!(
            "run create-iam with the cluster's IAM input and repairDrift: infraflow run create-iam --input - <<< '{input}'"
        )
    }
}

/// One role as made: its name, trust and inline policy (under the role's own name), and the
/// documents of the later generations a newer run may have brought it up to.
struct RoleMade {
    name: String,
    policy_name: String,
    trust: Value,
    policies: Vec<Value>,
}

fn roles_made(m: &IamMade) -> Vec<RoleMade> {
    let (p, o) = (&m.input, &m.output);
    let infra = p.infra_id.as_str();
    let host_path = issuer_host_path(&o.issuer_url);
    let zones = p.zones();
    let at = Grants::ALL.iter().position(|g| *g == m.grants).unwrap_or_default();
    let karpenter = p.auto_node.then_some(&KARPENTER_ROLE);
    let mut made: Vec<RoleMade> = OPERATOR_ROLES
        .iter()
        .chain(karpenter)
        .map(|r| RoleMade {
            name: r.name(infra),
            policy_name: r.name(infra),
            trust: trust_policy(&o.oidc_provider_arn, host_path, r.service_accounts),
            policies: Grants::ALL[at..].iter().map(|g| r.policy(&zones, *g)).collect(),
        })
        .collect();
    if let Some(key) = &p.kms_key_arn {
        let name = format!("{infra}-{KMS_PROVIDER_SUFFIX}");
        made.push(RoleMade {
            name: name.clone(),
            policy_name: name,
            trust: trust_policy(&o.oidc_provider_arn, host_path, KMS_PROVIDER_ACCOUNTS),
            policies: vec![kms_provider_policy(key)],
        });
    }
    let (role, policy, _) = worker_names(infra);
    made.push(RoleMade {
        name: role,
        policy_name: policy,
        trust: worker_trust_policy(),
        policies: vec![worker_policy()],
    });
    made
}

/// The drift of the cluster's IAM: each a difference with its repair (create-iam again, with
/// `repairDrift`, for what it made; by hand, for the issuer's documents it never writes).
pub async fn drift(pool: &AwsPool, aws: &Aws, m: &IamMade) -> Result<Vec<Drift>, AwsError> {
    let mut out = Vec::new();
    let repair = m.repair();
    let o = &m.output;
    match as_is::provider_now(aws, &o.oidc_provider_arn).await? {
        None => out.push(Drift::new("oidc-provider", &o.oidc_provider_arn, "present", "missing").by_hand(&repair)),
        Some(now) => {
            let url = issuer_host_path(&o.issuer_url);
            if now.url != url {
                out.push(
                    Drift::new(
                        "oidc-provider",
                        &o.oidc_provider_arn,
                        format!("issuer {url}"),
                        format!("issuer {}", now.url),
                    )
                    .by_hand(&repair),
                );
            }
            let missing: Vec<&str> =
                CLIENT_IDS.into_iter().filter(|c| !now.client_ids.iter().any(|x| x == c)).collect();
            if !missing.is_empty() {
                out.push(Drift::new("oidc-provider", &o.oidc_provider_arn, format!("audiences {}", CLIENT_IDS.join(", ")), format!("audiences {}", now.client_ids.join(", "))).by_hand(format!(
                    "add the audiences: aws iam add-client-id-to-open-id-connect-provider --open-id-connect-provider-arn {} --client-id {}",
                    o.oidc_provider_arn, missing[0]
                )));
            }
            let thumbprint = m.input.thumbprint.as_deref().unwrap_or(S3_ISSUER_THUMBPRINT).to_ascii_lowercase();
            if !now.thumbprints.contains(&thumbprint) {
                out.push(Drift::new("oidc-provider", &o.oidc_provider_arn, format!("thumbprint {thumbprint}"), format!("thumbprints {}", now.thumbprints.join(", "))).by_hand(format!(
                    "aws iam update-open-id-connect-provider-thumbprint --open-id-connect-provider-arn {} --thumbprint-list {thumbprint}",
                    o.oidc_provider_arn
                )));
            }
        }
    }
    for r in roles_made(m) {
        match as_is::role_now(aws, &r.name, &r.policy_name).await? {
            None => out.push(Drift::new("iam-role", &r.name, "present", "missing").by_hand(&repair)),
            Some(now) => {
                if now.trust.as_ref() != Some(&r.trust) {
                    out.push(
                        Drift::new("trust", &r.name, "the trust create-iam gave it", "another trust").by_hand(&repair),
                    );
                }
                match &now.policy {
                    None => out.push(
                        Drift::new("role-policy", &r.name, format!("inline policy {}", r.policy_name), "missing")
                            .by_hand(&repair),
                    ),
                    Some(p) if !r.policies.contains(p) => out.push(
                        Drift::new(
                            "role-policy",
                            &r.name,
                            format!("inline policy {} as create-iam wrote it", r.policy_name),
                            "another document",
                        )
                        .by_hand(&repair),
                    ),
                    Some(_) => {}
                }
            }
        }
    }
    out.extend(issuer_documents(pool, m).await?);
    Ok(out)
}

/// The issuer's discovery document and keys, when the issuer is HyperShift's S3 bucket.
async fn issuer_documents(pool: &AwsPool, m: &IamMade) -> Result<Vec<Drift>, AwsError> {
    let (p, issuer) = (&m.input, &m.output.issuer_url);
    let Some(bucket) = p.oidc_bucket.as_deref().filter(|_| p.issuer_url.is_none()) else { return Ok(Vec::new()) };
    let aws = pool.region(p.oidc_bucket_region.as_deref().unwrap_or(&p.region)).await;
    let by_hand = "the issuer's documents are the cluster's to publish (HyperShift writes them when it makes the cluster; `hypershift fix dr-oidc-iam` writes them again): create-iam never writes them";
    let mut out = Vec::new();
    for (key, what) in [
        (format!("{}/.well-known/openid-configuration", p.infra_id), "discovery document"),
        (format!("{}/openid/v1/jwks", p.infra_id), "keys"),
    ] {
        let at = format!("s3://{bucket}/{key}");
        match as_is::document_now(&aws, bucket, &key).await? {
            DocumentNow::Missing => {
                out.push(Drift::new("oidc-document", &at, format!("the issuer's {what}"), "missing").by_hand(by_hand))
            }
            DocumentNow::NotJson => out.push(
                Drift::new("oidc-document", &at, format!("the issuer's {what} (JSON)"), "not JSON").by_hand(by_hand),
            ),
            DocumentNow::Json(doc)
                if what == "discovery document" && doc["issuer"].as_str() != Some(issuer.as_str()) =>
            {
                out.push(
                    Drift::new("oidc-document", &at, format!("issuer {issuer}"), format!("issuer {}", doc["issuer"]))
                        .by_hand(by_hand),
                )
            }
            DocumentNow::Json(doc) if what == "keys" && doc["keys"].as_array().is_none_or(Vec::is_empty) => {
                out.push(Drift::new("oidc-document", &at, "at least one key", "none").by_hand(by_hand))
            }
            DocumentNow::Json(_) => {}
            // Nothing can be said of what cannot be read: not a drift.
            DocumentNow::Unreadable(why) => {
                tracing::info!(document = %at, why, "the issuer's document is not readable here: not checked")
            }
        }
    }
    Ok(out)
}
