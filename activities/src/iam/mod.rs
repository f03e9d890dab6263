//! IAM: a cluster's OIDC provider, its roles with their inline policies, and the worker instance
//! profile — ensured here; found by tag and deleted for compensation and teardown in `cleanup`.
//!
//! IAM has no idempotency tokens and its names are unique per account, so every create is found
//! by name first, and a name held by anything without this identity's tag is refused, never
//! adopted (it may be another cluster's). IAM is eventually consistent: a name just made may
//! read as NoSuchEntity for seconds (retryable, as every not-found is) and its create then
//! answers EntityAlreadyExists, which is resolved by reading it again, never by making another.
//!
//! Why split so: `iam/` was split by concept when it passed 600 lines — this file (488 lines) makes
//! the cluster's IAM, `cleanup` finds it by tag and deletes it (beside them `home`, where
//! region-less IAM belongs, and `room`, IAM's account-wide room for a create-iam).

use aws_sdk_iam::types::Tag;

use crate::client::Aws;
use crate::error::missing;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::{CREATED_BY_TAG, IDENTITY_TAG, Identity, REGION_TAG};

pub mod as_is;
mod cleanup;
pub mod home;
mod room;
pub use cleanup::incarnation;
pub(crate) use cleanup::now;
pub use cleanup::{
    delete_instance_profile, delete_oidc_provider, delete_role, find_instance_profiles, find_oidc_providers,
    find_roles, role_tags,
};
pub use room::{IamRoom, iam_existing, iam_room};

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &[
    "iam:GetRole",
    "iam:GetRolePolicy",
    "iam:ListRoles",
    "iam:GetInstanceProfile",
    "iam:ListInstanceProfiles",
    "iam:ListOpenIDConnectProviders",
    "iam:GetOpenIDConnectProvider",
    // The account's roles and instance profiles and their quotas (`room`), for create-iam's
    // quota check before it is journaled.
    "iam:GetAccountSummary",
    // Where region-less IAM belongs (`home`): the account's regions and the cluster's VPCs there.
    "ec2:DescribeRegions",
    "ec2:DescribeVpcs",
];
/// The IAM actions of its creates and configuration (tag-on-create needs the Tag* actions).
pub const IAM_WRITE: &[&str] = &[
    "iam:CreateOpenIDConnectProvider",
    "iam:TagOpenIDConnectProvider",
    "iam:CreateRole",
    "iam:TagRole",
    "iam:PutRolePolicy",
    // A role's trust put back as create-iam gave it (its own run resumed, or `repairDrift`).
    "iam:UpdateAssumeRolePolicy",
    "iam:CreateInstanceProfile",
    "iam:TagInstanceProfile",
    "iam:AddRoleToInstanceProfile",
];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &[
    "iam:DeleteOpenIDConnectProvider",
    "iam:ListRolePolicies",
    "iam:DeleteRolePolicy",
    "iam:ListAttachedRolePolicies",
    "iam:DetachRolePolicy",
    "iam:ListInstanceProfilesForRole",
    "iam:RemoveRoleFromInstanceProfile",
    "iam:DeleteRole",
    "iam:DeleteInstanceProfile",
];

/// HyperShift's thumbprint of an S3-hosted issuer (S3's root CA): AWS ignores it, but needs one.
pub const S3_ISSUER_THUMBPRINT: &str = "A9D53002E97E00E043244F3D170D6F4C414104FD";

fn iam_tags(pairs: Vec<(String, String)>) -> AwsResult<Vec<Tag>> {
    pairs
        .into_iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build().map_err(|e| AwsError::terminal("tag", e.to_string())))
        .collect()
}

fn pairs(tags: &[Tag]) -> Vec<(String, String)> {
    tags.iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()
}

/// Whether what is named `name` is this identity's; an error naming it if it is someone else's,
/// or this cluster's IAM made for another region (IAM is global; one infraID's IAM serves the
/// cluster of one region: a pause names it).
fn claim(what: &str, name: &str, tags: &[Tag], id: &Identity) -> AwsResult<()> {
    if id.query().matches_pairs(&pairs(tags)) {
        let theirs = tags.iter().find(|t| t.key() == REGION_TAG).map(|t| t.value());
        return match (theirs, id.tag(REGION_TAG)) {
            (Some(theirs), Some(ours)) if theirs != ours => Err(AwsError {
                operator: true,
                ..AwsError::terminal(
                    "claim",
                    format!(
                        "the {what} {name} is cluster {}'s IAM for region {theirs}, not {ours}: it is left untouched (IAM is global, and one infraID's IAM serves one region); use another infraID here, or tear down the {theirs} cluster first",
                        id.infra_id
                    ),
                )
            }),
            _ => Ok(()),
        };
    }
    let held = pairs(tags)
        .into_iter()
        .find(|(k, _)| k == IDENTITY_TAG)
        .map(|(_, v)| format!("it is infraflow's {v}"))
        .unwrap_or_else(|| "it has no infraflow identity tag".to_string());
    Err(AwsError::terminal(
        "claim",
        format!(
            "the {what} {name} exists and is not cluster {}'s ({held}, not {IDENTITY_TAG}={}): it is left untouched; delete or rename it, or use another infraID",
            id.infra_id,
            id.key()
        ),
    ))
}

/// A role's inline policy: its name, this version's document, and what an earlier infraflow wrote
/// for the same inputs, which may be replaced on another submission's role (an upgrade).
#[derive(Clone, Copy, Debug)]
pub struct InlinePolicy<'a> {
    pub name: &'a str,
    pub document: &'a str,
    /// What earlier versions wrote for the same inputs: another submission's role that still
    /// has one of them is brought up to this document.
    pub replaces: &'a [String],
    /// What later versions write for the same inputs: a run of an earlier version resumed on a
    /// role it made leaves such a document as it is (a later run upgraded the role; writing the
    /// earlier one back would flip the policy at every resume, SAFETY-F393541 F17).
    pub superseded_by: &'a [String],
    /// The run repairs drift (`repairDrift`): a role of the cluster that another submission made
    /// gets this trust and policy back, whatever it holds now (`infraflow check` named the drift).
    pub repair: bool,
}

/// A role `name` with trust policy `trust` and inline policy `policy`: found by name (and this
/// identity's tag) or created tagged; returns its ARN. The policy is written every time on a role
/// this workflow made: a resumed run must leave it exactly as this version defines it.
pub async fn ensure_role(
    aws: &Aws,
    id: &Identity,
    name: &str,
    trust: &str,
    policy: InlinePolicy<'_>,
) -> AwsResult<String> {
    let arn = match get_role(aws, name).await? {
        Some(role) => {
            claim("IAM role", name, &role.tags, id)?;
            let creator = pairs(&role.tags).into_iter().find(|(k, _)| k == CREATED_BY_TAG).map(|(_, v)| v);
            if creator.as_ref().is_some_and(|c| *c != id.workflow) {
                // Another submission's role: taken as it is, or brought from exactly what an
                // earlier version wrote to what this one writes, or not at all. Rewriting any
                // other policy would change what a running cluster's operators may do.
                let current = role_policy(aws, name, policy.name).await?;
                let same = |a: Option<&str>, b: &str| a.and_then(decoded_json) == decoded_json(b);
                let upgrade = policy.replaces.iter().any(|old| same(current.as_deref(), old));
                // A later release's run brought it up: an earlier run resumed takes it as it is.
                let later = policy.superseded_by.iter().any(|l| same(current.as_deref(), l));
                let as_made =
                    same(Some(&role.trust), trust) && (upgrade || later || same(current.as_deref(), policy.document));
                if !as_made && !policy.repair {
                    return Err(AwsError {
                        operator: true,
                        ..AwsError::terminal(
                            "PutRolePolicy",
                            format!(
                                "IAM role {name} was made by workflow {} with another trust or inline policy than this workflow's: it is left as it is; if `infraflow check` names it as the cluster's drift, run create-iam with \"repairDrift\": true, else run the workflow that made it again, or tear the cluster's IAM down before making it anew",
                                creator.unwrap_or_default()
                            ),
                        )
                    });
                }
                if let Some(mark) = id.adoption_mark(&pairs(&role.tags)) {
                    tag_role(aws, name, mark).await?;
                }
                if as_made && !upgrade {
                    return Ok(role.arn);
                }
            }
            if !policy.superseded_by.is_empty() {
                let current = role_policy(aws, name, policy.name).await?.and_then(|c| decoded_json(&c));
                if policy.superseded_by.iter().any(|later| current.is_some() && current == decoded_json(later)) {
                    return Ok(role.arn);
                }
            }
            // Its trust as this run gives it: a trust changed by hand is drift, and a resumed
            // run or a repair leaves the role exactly as defined.
            if decoded_json(&role.trust) != decoded_json(trust) {
                aws.iam
                    .update_assume_role_policy()
                    .role_name(name)
                    .policy_document(trust)
                    .send()
                    .await
                    .map_err(|e| classify("UpdateAssumeRolePolicy", e))?;
            }
            role.arn
        }
        None => create_role(aws, id, name, trust).await?,
    };
    aws.iam
        .put_role_policy()
        .role_name(name)
        .policy_name(policy.name)
        .policy_document(policy.document)
        .send()
        .await
        .map_err(|e| classify("PutRolePolicy", e))?;
    Ok(arn)
}

pub(crate) struct Role {
    arn: String,
    /// IAM's unique id of this role: a role deleted and made again under the same name has
    /// another one.
    pub(crate) id: String,
    pub(crate) tags: Vec<Tag>,
    /// The trust policy as IAM returns it (URL-encoded JSON).
    trust: String,
}

pub(crate) async fn get_role(aws: &Aws, name: &str) -> AwsResult<Option<Role>> {
    match aws.iam.get_role().role_name(name).send().await.map_err(|e| classify("GetRole", e)) {
        Ok(out) => {
            let role = out.role().ok_or_else(|| missing("GetRole", "role"))?;
            Ok(Some(Role {
                arn: role.arn().to_string(),
                id: role.role_id().to_string(),
                tags: role.tags().to_vec(),
                trust: role.assume_role_policy_document().unwrap_or_default().to_string(),
            }))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The inline policy `policy` of role `role` as IAM returns it; None if it has none.
async fn role_policy(aws: &Aws, role: &str, policy: &str) -> AwsResult<Option<String>> {
    let r = aws.iam.get_role_policy().role_name(role).policy_name(policy).send().await;
    match r.map_err(|e| classify("GetRolePolicy", e)) {
        Ok(out) => Ok(Some(out.policy_document().to_string())),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// A policy document as JSON, whether IAM returned it URL-encoded (as AWS does) or not.
fn decoded_json(doc: &str) -> Option<serde_json::Value> {
    serde_json::from_str(doc).ok().or_else(|| {
        let decoded = percent_encoding::percent_decode_str(doc).decode_utf8().ok()?;
        serde_json::from_str(&decoded).ok()
    })
}

async fn tag_role(aws: &Aws, name: &str, (k, v): (String, String)) -> AwsResult<()> {
    let tag = Tag::builder().key(k).value(v).build().map_err(|e| AwsError::terminal("tag", e.to_string()))?;
    aws.iam.tag_role().role_name(name).tags(tag).send().await.map(|_| ()).map_err(|e| classify("TagRole", e))
}

async fn create_role(aws: &Aws, id: &Identity, name: &str, trust: &str) -> AwsResult<String> {
    let r = aws
        .iam
        .create_role()
        .role_name(name)
        .path("/")
        .assume_role_policy_document(trust)
        .set_tags(Some(iam_tags(id.tags())?))
        .send()
        .await
        .map_err(|e| classify("CreateRole", e));
    match r {
        Ok(out) => Ok(out.role().ok_or_else(|| missing("CreateRole", "role"))?.arn().to_string()),
        // Made by an attempt whose reply was lost, and not readable yet; or someone else's.
        Err(e) if e.code_is("EntityAlreadyExists") => match get_role(aws, name).await? {
            Some(role) => claim("IAM role", name, &role.tags, id).map(|()| role.arn),
            None => Err(AwsError::not_yet("GetRole", format!("role {name} exists but cannot be read yet"))),
        },
        Err(e) => Err(e),
    }
}

/// Instance profile `name` holding role `role`: found by name (and this identity's tag) or
/// created tagged. Returns the profile's ARN.
pub async fn ensure_instance_profile(aws: &Aws, id: &Identity, name: &str, role: &str) -> AwsResult<String> {
    let (arn, roles) = match get_instance_profile(aws, name).await? {
        Some(p) => {
            claim("instance profile", name, &p.tags, id)?;
            if let Some((k, v)) = id.adoption_mark(&pairs(&p.tags)) {
                let tag =
                    Tag::builder().key(k).value(v).build().map_err(|e| AwsError::terminal("tag", e.to_string()))?;
                let r = aws.iam.tag_instance_profile().instance_profile_name(name).tags(tag).send().await;
                r.map_err(|e| classify("TagInstanceProfile", e))?;
            }
            (p.arn, p.roles)
        }
        None => create_instance_profile(aws, id, name).await?,
    };
    if let Some(other) = roles.iter().find(|r| *r != role) {
        // A profile holds one role: the one there was put by someone else, which is theirs to
        // take out. The workflow waits for them (a pause), and `retry` then carries on.
        return Err(AwsError {
            operator: true,
            ..AwsError::terminal(
                "AddRoleToInstanceProfile",
                format!(
                    "instance profile {name} holds role {other}, not {role}: remove it from the profile, then `infraflow retry`"
                ),
            )
        });
    }
    if roles.is_empty() {
        let r = aws
            .iam
            .add_role_to_instance_profile()
            .instance_profile_name(name)
            .role_name(role)
            .send()
            .await
            .map_err(|e| classify("AddRoleToInstanceProfile", e));
        match r {
            Ok(_) => {}
            // Added by an attempt whose reply was lost: read again on the next attempt.
            Err(e) if e.code_is("LimitExceeded") => {
                return Err(AwsError::not_yet("AddRoleToInstanceProfile", format!("{name} holds a role already")));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(arn)
}

pub(crate) struct Profile {
    arn: String,
    /// IAM's unique id of this profile (another for a same-name re-creation).
    pub(crate) id: String,
    roles: Vec<String>,
    pub(crate) tags: Vec<Tag>,
}

pub(crate) async fn get_instance_profile(aws: &Aws, name: &str) -> AwsResult<Option<Profile>> {
    let r = aws
        .iam
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
        .map_err(|e| classify("GetInstanceProfile", e));
    match r {
        Ok(out) => {
            let p = out.instance_profile().ok_or_else(|| missing("GetInstanceProfile", "instance profile"))?;
            Ok(Some(Profile {
                arn: p.arn().to_string(),
                id: p.instance_profile_id().to_string(),
                roles: p.roles().iter().map(|r| r.role_name().to_string()).collect(),
                tags: p.tags().to_vec(),
            }))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

async fn create_instance_profile(aws: &Aws, id: &Identity, name: &str) -> AwsResult<(String, Vec<String>)> {
    let r = aws
        .iam
        .create_instance_profile()
        .instance_profile_name(name)
        .path("/")
        .set_tags(Some(iam_tags(id.tags())?))
        .send()
        .await
        .map_err(|e| classify("CreateInstanceProfile", e));
    match r {
        Ok(out) => Ok((
            out.instance_profile()
                .ok_or_else(|| missing("CreateInstanceProfile", "instance profile"))?
                .arn()
                .to_string(),
            Vec::new(),
        )),
        Err(e) if e.code_is("EntityAlreadyExists") => match get_instance_profile(aws, name).await? {
            Some(p) => claim("instance profile", name, &p.tags, id).map(|()| (p.arn, p.roles)),
            None => Err(AwsError::not_yet("GetInstanceProfile", format!("{name} exists but cannot be read yet"))),
        },
        Err(e) => Err(e),
    }
}

/// The OIDC provider of an issuer, as this cluster uses it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OidcProvider {
    pub arn: String,
    /// False for a provider someone else made for this issuer: used as it is, never tagged,
    /// never deleted (as a public zone is).
    pub owned: bool,
}

/// `https://host/path` → `host/path`, how IAM names a provider in its ARN and trust conditions.
pub fn issuer_host_path(issuer_url: &str) -> &str {
    issuer_url.trim_start_matches("https://").trim_end_matches('/')
}

/// The OIDC provider for `issuer_url` (client ids `openshift` and `sts.amazonaws.com`): this
/// identity's if it exists, someone else's used as it is, or created tagged.
pub async fn ensure_oidc_provider(
    aws: &Aws,
    id: &Identity,
    issuer_url: &str,
    thumbprint: &str,
) -> AwsResult<OidcProvider> {
    if let Some((arn, tags)) = find_oidc_provider(aws, issuer_url).await? {
        let owned = id.query().matches_pairs(&pairs(&tags));
        if owned {
            claim("OIDC provider", &arn, &tags, id)?;
            if let Some((k, v)) = id.adoption_mark(&pairs(&tags)) {
                let tag =
                    Tag::builder().key(k).value(v).build().map_err(|e| AwsError::terminal("tag", e.to_string()))?;
                let r =
                    aws.iam.tag_open_id_connect_provider().open_id_connect_provider_arn(&arn).tags(tag).send().await;
                r.map_err(|e| classify("TagOpenIDConnectProvider", e))?;
            }
        } else if let Some((_, other)) = pairs(&tags).into_iter().find(|(k, _)| k == IDENTITY_TAG) {
            // Another infraflow cluster's: its teardown would delete the provider this
            // cluster's roles trust. An issuer serves one cluster.
            return Err(AwsError {
                operator: true,
                ..AwsError::terminal(
                    "claim",
                    format!(
                        "the OIDC provider for {issuer_url} ({arn}) is infraflow's {other}, another cluster's: an issuer serves one cluster, and that cluster's teardown would delete the provider this cluster's roles trust; give this cluster its own issuer (issuerURL or oidcBucket), then `infraflow retry`"
                    ),
                )
            });
        }
        return Ok(OidcProvider { arn, owned });
    }
    let r = aws
        .iam
        .create_open_id_connect_provider()
        .url(issuer_url)
        .client_id_list("openshift")
        .client_id_list("sts.amazonaws.com")
        .thumbprint_list(thumbprint)
        .set_tags(Some(iam_tags(id.tags())?))
        .send()
        .await
        .map_err(|e| classify("CreateOpenIDConnectProvider", e));
    match r {
        Ok(out) => Ok(OidcProvider {
            arn: out
                .open_id_connect_provider_arn()
                .ok_or_else(|| missing("CreateOpenIDConnectProvider", "provider ARN"))?
                .to_string(),
            owned: true,
        }),
        Err(e) if e.code_is("EntityAlreadyExists") => Err(AwsError::not_yet(
            "ListOpenIDConnectProviders",
            format!("the provider for {issuer_url} exists but is not listed yet"),
        )),
        Err(e) => Err(e),
    }
}

/// The provider whose ARN ends with the issuer's `host/path` exactly, with its tags.
async fn find_oidc_provider(aws: &Aws, issuer_url: &str) -> AwsResult<Option<(String, Vec<Tag>)>> {
    let suffix = format!(":oidc-provider/{}", issuer_host_path(issuer_url));
    for arn in list_oidc_providers(aws).await? {
        if arn.ends_with(&suffix) {
            return Ok(oidc_provider_tags(aws, &arn).await?.map(|tags| (arn, tags)));
        }
    }
    Ok(None)
}

pub(crate) async fn list_oidc_providers(aws: &Aws) -> AwsResult<Vec<String>> {
    let out =
        aws.iam.list_open_id_connect_providers().send().await.map_err(|e| classify("ListOpenIDConnectProviders", e))?;
    Ok(out.open_id_connect_provider_list().iter().filter_map(|p| p.arn().map(str::to_string)).collect())
}

pub(crate) async fn oidc_provider_tags(aws: &Aws, arn: &str) -> AwsResult<Option<Vec<Tag>>> {
    Ok(oidc_provider(aws, arn).await?.map(|(tags, _)| tags))
}

/// The OIDC provider `arn`'s tags and when it was made (a provider has no unique id, and its
/// ARN is its issuer's URL: a re-creation differs only by its date); None if it is gone.
pub(crate) async fn oidc_provider(aws: &Aws, arn: &str) -> AwsResult<Option<(Vec<Tag>, Option<String>)>> {
    Ok(get_oidc_provider(aws, arn).await?.map(|out| {
        let made = out.create_date().map(|d| format!("{}.{:09}", d.secs(), d.subsec_nanos()));
        (out.tags().to_vec(), made)
    }))
}

/// OIDC provider `arn` as IAM describes it; None if it is gone.
pub(crate) async fn get_oidc_provider(
    aws: &Aws,
    arn: &str,
) -> AwsResult<Option<aws_sdk_iam::operation::get_open_id_connect_provider::GetOpenIdConnectProviderOutput>> {
    let r = aws
        .iam
        .get_open_id_connect_provider()
        .open_id_connect_provider_arn(arn)
        .send()
        .await
        .map_err(|e| classify("GetOpenIDConnectProvider", e));
    match r {
        Ok(out) => Ok(Some(out)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The OIDC provider serving `issuer` (`https://host/path`), if the account has one: what a
/// management side's roles trust (HyperShift's `create operator-roles` finds it the same way).
pub async fn find_oidc_provider_by_issuer(aws: &Aws, issuer: &str) -> AwsResult<Option<String>> {
    let host_path = issuer_host_path(issuer);
    // Exactly `…:oidc-provider/<host/path>`: a provider whose path merely ends so is another issuer.
    let suffix = format!(":oidc-provider/{host_path}");
    Ok(list_oidc_providers(aws).await?.into_iter().find(|arn| arn.ends_with(&suffix)))
}
