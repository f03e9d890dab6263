//! A cluster's IAM found by its tags and deleted, each kind with what IAM requires gone first
//! (a role's place in profiles, its policies): what compensation and teardown use. Names are
//! listed, then each read for its tags; one listed but not readable yet is asked again.

use super::{get_instance_profile, get_role, list_oidc_providers, oidc_provider, oidc_provider_tags, pairs};
use crate::client::Aws;
use crate::error::gone_ok;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::{OWNERSHIP_PREFIX, TagQuery};

/// The ARNs of the OIDC providers whose tags match `q`.
pub async fn find_oidc_providers(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    let mut found = Vec::new();
    for arn in list_oidc_providers(aws).await? {
        let tags = oidc_provider_tags(aws, &arn).await?.ok_or_else(|| unreadable("GetOpenIDConnectProvider", &arn))?;
        if q.matches_pairs(&pairs(&tags)) {
            found.push(arn);
        }
    }
    Ok(found)
}

/// Listed, yet NoSuchEntity when read: not visible everywhere yet, or deleted in between. The
/// lookup is asked again (the next listing shows which).
fn unreadable(operation: &'static str, name: &str) -> AwsError {
    AwsError::not_yet(operation, format!("{name} is listed but cannot be read yet"))
}

/// The names of the roles whose names start with `prefix` and whose tags match `q`.
pub async fn find_roles(aws: &Aws, prefix: &str, q: &TagQuery) -> AwsResult<Vec<String>> {
    let names = role_names(aws, prefix).await?;
    // ListRoles carries no tags: each candidate is read. One listed but not readable yet (IAM is
    // eventually consistent) is asked again, never passed over: it may be the cluster's.
    let mut found = Vec::new();
    for name in names {
        let role = get_role(aws, &name).await?.ok_or_else(|| unreadable("GetRole", &name))?;
        if q.matches_pairs(&pairs(&role.tags)) {
            found.push(name);
        }
    }
    Ok(found)
}

/// Role `name`'s tags; None if it is gone. A role not readable yet but listed (IAM is eventually
/// consistent: one just made answers NoSuchEntity for a while) is a not-yet error, asked again:
/// never taken for gone, which would leave it behind.
pub async fn role_tags(aws: &Aws, name: &str) -> AwsResult<Option<Vec<(String, String)>>> {
    if let Some(role) = get_role(aws, name).await? {
        return Ok(Some(pairs(&role.tags)));
    }
    if role_names(aws, name).await?.iter().any(|n| n == name) {
        return Err(AwsError::not_yet("GetRole", format!("{name} is listed but cannot be read yet")));
    }
    Ok(None)
}

/// The names of the roles listed whose names start with `prefix`.
async fn role_names(aws: &Aws, prefix: &str) -> AwsResult<Vec<String>> {
    let mut names = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let out = aws.iam.list_roles().set_marker(marker.clone()).send().await.map_err(|e| classify("ListRoles", e))?;
        names.extend(out.roles().iter().map(|r| r.role_name().to_string()).filter(|n| n.starts_with(prefix)));
        marker = out.marker().map(str::to_string).filter(|_| out.is_truncated());
        if marker.is_none() {
            break;
        }
    }
    Ok(names)
}

/// The names of the instance profiles whose names start with `prefix` and whose tags match `q`.
pub async fn find_instance_profiles(aws: &Aws, prefix: &str, q: &TagQuery) -> AwsResult<Vec<String>> {
    let mut names = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let out = aws
            .iam
            .list_instance_profiles()
            .set_marker(marker.clone())
            .send()
            .await
            .map_err(|e| classify("ListInstanceProfiles", e))?;
        names.extend(
            out.instance_profiles()
                .iter()
                .map(|p| p.instance_profile_name().to_string())
                .filter(|n| n.starts_with(prefix)),
        );
        marker = out.marker().map(str::to_string).filter(|_| out.is_truncated());
        if marker.is_none() {
            break;
        }
    }
    let mut found = Vec::new();
    for name in names {
        let p = get_instance_profile(aws, &name).await?.ok_or_else(|| unreadable("GetInstanceProfile", &name))?;
        if q.matches_pairs(&pairs(&p.tags)) {
            found.push(name);
        }
    }
    Ok(found)
}

/// What IAM holds now under a role's, instance profile's or OIDC provider's name.
pub(crate) struct Now {
    pub(crate) tags: Vec<(String, String)>,
    /// Which one it is: the role's or profile's unique id, the provider's creation date. A
    /// same-name re-creation has another.
    pub(crate) incarnation: Option<String>,
}

/// What IAM holds now on role, instance profile or OIDC provider `name` (an ARN for a
/// provider); None if it is gone.
pub(crate) async fn now(aws: &Aws, kind: crate::Kind, name: &str) -> AwsResult<Option<Now>> {
    use crate::Kind;
    Ok(match kind {
        Kind::IamRole => get_role(aws, name).await?.map(|r| Now { tags: pairs(&r.tags), incarnation: Some(r.id) }),
        Kind::InstanceProfile => {
            get_instance_profile(aws, name).await?.map(|p| Now { tags: pairs(&p.tags), incarnation: Some(p.id) })
        }
        Kind::OidcProvider => {
            oidc_provider(aws, name).await?.map(|(t, made)| Now { tags: pairs(&t), incarnation: made })
        }
        _ => None,
    })
}

/// Which role, instance profile or OIDC provider of that name is there now (`Now::incarnation`),
/// for a teardown to journal at discovery and compare at its delete; None if it is gone, or
/// for other kinds.
pub async fn incarnation(aws: &Aws, kind: crate::Kind, name: &str) -> AwsResult<Option<String>> {
    Ok(now(aws, kind, name).await?.and_then(|n| n.incarnation))
}

/// Deletes the OIDC provider `arn`; false if it was gone.
pub async fn delete_oidc_provider(aws: &Aws, arn: &str) -> AwsResult<bool> {
    let r = aws.iam.delete_open_id_connect_provider().open_id_connect_provider_arn(arn).send().await;
    gone_ok(r.map(|_| ()).map_err(|e| classify("DeleteOpenIDConnectProvider", e)))
}

/// Deletes role `name` with what IAM requires gone first: its place in instance profiles, its
/// inline policies, its attached managed policies. False if it was gone.
pub async fn delete_role(aws: &Aws, name: &str) -> AwsResult<bool> {
    let profiles: Vec<String> = match aws.iam.list_instance_profiles_for_role().role_name(name).send().await {
        Ok(out) => out.instance_profiles().iter().map(|p| p.instance_profile_name().to_string()).collect(),
        Err(e) => match classify("ListInstanceProfilesForRole", e) {
            e if e.is_not_found() => return Ok(false),
            e => return Err(e),
        },
    };
    if !profiles.is_empty() {
        // Only the role's own cluster's profiles give it up: a profile of someone else's that
        // holds it (they put it there) pauses the delete, naming it.
        let owners: Vec<(String, String)> = match get_role(aws, name).await? {
            Some(role) => pairs(&role.tags).into_iter().filter(|(k, _)| k.starts_with(OWNERSHIP_PREFIX)).collect(),
            None => return Ok(false),
        };
        for profile in profiles {
            let Some(p) = get_instance_profile(aws, &profile).await? else { continue };
            if !crate::tags::same_owners(&pairs(&p.tags), &owners) {
                return Err(AwsError {
                    operator: true,
                    ..AwsError::terminal(
                        "RemoveRoleFromInstanceProfile",
                        format!(
                            "role {name} is held by instance profile {profile}, which is not its cluster's: it is left there; remove the role from that profile, then `infraflow retry`"
                        ),
                    )
                });
            }
            remove_role_from_profile(aws, &profile, name).await?;
        }
    }
    let inline = aws.iam.list_role_policies().role_name(name).send().await.map_err(|e| classify("ListRolePolicies", e));
    for policy in inline.map(|o| o.policy_names().to_vec()).or_else(not_found_empty)? {
        let r = aws.iam.delete_role_policy().role_name(name).policy_name(&policy).send().await;
        gone_ok(r.map(|_| ()).map_err(|e| classify("DeleteRolePolicy", e)))?;
    }
    let attached = aws
        .iam
        .list_attached_role_policies()
        .role_name(name)
        .send()
        .await
        .map_err(|e| classify("ListAttachedRolePolicies", e));
    let arns: Vec<String> = attached
        .map(|o| o.attached_policies().iter().filter_map(|p| p.policy_arn().map(str::to_string)).collect())
        .or_else(not_found_empty)?;
    for arn in arns {
        let r = aws.iam.detach_role_policy().role_name(name).policy_arn(&arn).send().await;
        gone_ok(r.map(|_| ()).map_err(|e| classify("DetachRolePolicy", e)))?;
    }
    let r = aws.iam.delete_role().role_name(name).send().await;
    gone_ok(r.map(|_| ()).map_err(|e| classify("DeleteRole", e)))
}

fn not_found_empty<T>(e: AwsError) -> AwsResult<Vec<T>> {
    if e.is_not_found() { Ok(Vec::new()) } else { Err(e) }
}

async fn remove_role_from_profile(aws: &Aws, profile: &str, role: &str) -> AwsResult<bool> {
    let r = aws.iam.remove_role_from_instance_profile().instance_profile_name(profile).role_name(role).send().await;
    gone_ok(r.map(|_| ()).map_err(|e| classify("RemoveRoleFromInstanceProfile", e)))
}

/// Deletes instance profile `name`, its role removed first (the role itself stays). False if
/// it was gone.
pub async fn delete_instance_profile(aws: &Aws, name: &str) -> AwsResult<bool> {
    let Some(p) = get_instance_profile(aws, name).await? else { return Ok(false) };
    for role in &p.roles {
        remove_role_from_profile(aws, name, role).await?;
    }
    let r = aws.iam.delete_instance_profile().instance_profile_name(name).send().await;
    gone_ok(r.map(|_| ()).map_err(|e| classify("DeleteInstanceProfile", e)))
}
