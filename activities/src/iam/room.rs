//! IAM's account-wide room for what a create-iam makes: the count and quota of roles and
//! instance profiles (one `GetAccountSummary`), and which of its names exist already. Reads only.

use crate::client::Aws;
use crate::error::{AwsResult, classify};

/// IAM's account-wide room for roles and instance profiles: (in use, quota) of each, as
/// `GetAccountSummary` gives both in one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IamRoom {
    pub roles: (u32, u32),
    pub profiles: (u32, u32),
}

pub async fn iam_room(aws: &Aws) -> AwsResult<IamRoom> {
    let out = aws.iam.get_account_summary().send().await.map_err(|e| classify("GetAccountSummary", e))?;
    let map = out.summary_map();
    let of = |k: aws_sdk_iam::types::SummaryKeyType| map.and_then(|m| m.get(&k)).copied().unwrap_or(0).max(0) as u32;
    use aws_sdk_iam::types::SummaryKeyType as K;
    Ok(IamRoom {
        roles: (of(K::Roles), of(K::RolesQuota)),
        profiles: (of(K::InstanceProfiles), of(K::InstanceProfilesQuota)),
    })
}

/// How many of the roles and instance profiles named exist already (a create-iam resumed or run
/// again keeps them: they are not new), one read each, side by side.
pub async fn iam_existing(aws: &Aws, roles: &[String], profiles: &[String]) -> AwsResult<(u32, u32)> {
    let gone = |e: &crate::AwsError| e.code_is("NoSuchEntity");
    let roles = futures::future::join_all(roles.iter().map(|name| async move {
        match aws.iam.get_role().role_name(name).send().await.map_err(|e| classify("GetRole", e)) {
            Ok(_) => Ok(1),
            Err(e) if gone(&e) => Ok(0),
            Err(e) => Err(e),
        }
    }));
    let profiles = futures::future::join_all(profiles.iter().map(|name| async move {
        let r = aws.iam.get_instance_profile().instance_profile_name(name).send().await;
        match r.map_err(|e| classify("GetInstanceProfile", e)) {
            Ok(_) => Ok(1),
            Err(e) if gone(&e) => Ok(0),
            Err(e) => Err(e),
        }
    }));
    let (roles, profiles) = futures::join!(roles, profiles);
    let sum = |v: Vec<AwsResult<u32>>| v.into_iter().sum::<AwsResult<u32>>();
    Ok((sum(roles)?, sum(profiles)?))
}
