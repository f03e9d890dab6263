//! A cluster's IAM as AWS holds it now, for `infraflow check` to compare with what create-iam
//! made: a role's trust and inline policy, an OIDC provider's issuer, audiences and thumbprints,
//! and the issuer's documents in its S3 bucket. Reads only.

use super::{decoded_json, get_oidc_provider, get_role, role_policy};
use crate::client::Aws;
use crate::error::{AwsResult, classify};

/// The IAM actions these reads call.
pub const IAM_READ: &[&str] = &["iam:GetRole", "iam:GetRolePolicy", "iam:GetOpenIDConnectProvider", "s3:GetObject"];

/// A role now: its trust, and its inline policy of the name asked (None: it has none).
#[derive(Clone, Debug, PartialEq)]
pub struct RoleNow {
    pub trust: Option<serde_json::Value>,
    pub policy: Option<serde_json::Value>,
}

/// Role `name` and its inline policy `policy`; None if the role is gone.
pub async fn role_now(aws: &Aws, name: &str, policy: &str) -> AwsResult<Option<RoleNow>> {
    let Some(role) = get_role(aws, name).await? else { return Ok(None) };
    let inline = role_policy(aws, name, policy).await?;
    Ok(Some(RoleNow { trust: decoded_json(&role.trust), policy: inline.as_deref().and_then(decoded_json) }))
}

/// An OIDC provider now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderNow {
    /// Without its scheme, as IAM keeps it.
    pub url: String,
    pub client_ids: Vec<String>,
    pub thumbprints: Vec<String>,
}

/// OIDC provider `arn`; None if it is gone.
pub async fn provider_now(aws: &Aws, arn: &str) -> AwsResult<Option<ProviderNow>> {
    Ok(get_oidc_provider(aws, arn).await?.map(|out| ProviderNow {
        url: out.url().unwrap_or_default().trim_start_matches("https://").to_string(),
        client_ids: out.client_id_list().to_vec(),
        thumbprints: out.thumbprint_list().iter().map(|t| t.to_ascii_lowercase()).collect(),
    }))
}

/// What reading one of the issuer's documents found.
#[derive(Clone, Debug, PartialEq)]
pub enum DocumentNow {
    Json(serde_json::Value),
    /// There, but not JSON.
    NotJson,
    Missing,
    /// This process may not read it (AccessDenied): nothing can be said of it.
    Unreadable(String),
}

/// Object `key` of bucket `bucket` (through `aws`, a client of the bucket's region).
pub async fn document_now(aws: &Aws, bucket: &str, key: &str) -> AwsResult<DocumentNow> {
    let r = aws.s3.get_object().bucket(bucket).key(key).send().await.map_err(|e| classify("GetObject", e));
    let out = match r {
        Ok(out) => out,
        Err(e) if e.is_not_found() => return Ok(DocumentNow::Missing),
        Err(e) if e.operator => return Ok(DocumentNow::Unreadable(e.message)),
        Err(e) => return Err(e),
    };
    let bytes = out
        .body
        .collect()
        .await
        .map_err(|e| crate::error::AwsError::not_yet("GetObject", format!("reading s3://{bucket}/{key}: {e}")))?
        .into_bytes();
    Ok(serde_json::from_slice(&bytes).map(DocumentNow::Json).unwrap_or(DocumentNow::NotJson))
}
