//! The stops a teardown makes before it deletes anything, each an operator's to clear: a
//! resource of the cluster protected (`infraflow.io/do-not-delete`), another cluster riding on
//! its network, someone's interface holding its subnets. Checked in every round's discovery,
//! and (protection) before a teardown is journaled.

use std::collections::BTreeMap;

use infraflow_activities::{AwsError, AwsPool, Kind, Scope, census, look_alikes, resources};
use infraflow_engine::ActivityError;

/// Why a teardown does not go on: one resource of the cluster carries `infraflow.io/do-not-delete`.
/// Only an operator can decide (remove the tag, then `retry`): the teardown pauses.
pub(super) fn protected_error(infra: &str, kind: Kind, id: &str) -> ActivityError {
    ActivityError { operator: true, ..ActivityError::terminal(protected_message(infra, kind, id)) }
}

/// Why a teardown stops before deleting: interfaces that are not the cluster's hold its subnets.
pub(super) fn riders_error(riding: &[(String, Vec<String>)]) -> ActivityError {
    let named: Vec<String> =
        riding.iter().map(|(id, others)| format!("{id} is used by cluster {}", others.join(", cluster "))).collect();
    ActivityError {
        operator: true,
        ..ActivityError::terminal(format!(
            "another cluster runs on this cluster's network: {}; tear {} down first (its marks name it), then `infraflow retry`",
            named.join("; "),
            if riding.iter().map(|(_, o)| o.len()).sum::<usize>() == 1 { "that cluster" } else { "those clusters" }
        ))
    }
}

pub(super) fn held_subnets_error(held: &[look_alikes::Left]) -> ActivityError {
    let named: Vec<String> = held
        .iter()
        .map(|l| format!("network interface {} in subnet {} ({})", l.id, l.holds.as_deref().unwrap_or("?"), l.reason))
        .collect();
    ActivityError {
        operator: true,
        ..ActivityError::terminal(format!(
            "not the cluster's, and never deleted by its teardown: {}; move or delete {}, then `infraflow retry`",
            named.join("; "),
            if held.len() == 1 { "it" } else { "them" }
        ))
    }
}

/// The one line naming the protected resource: what `teardown` refuses and pauses with.
pub fn protected_message(infra: &str, kind: Kind, id: &str) -> String {
    format!(
        "cluster {infra} is protected: {} {id} carries {}; remove that tag to tear it down",
        kind.as_str(),
        infraflow_activities::tags::PROTECTION_TAG
    )
}

/// The resource of cluster `infra` in `region` that protects it from teardown, if any: what
/// `teardown` checks before it is journaled (and each discovery round checks again); read again
/// on a retryable error.
pub async fn find_protection(pool: &AwsPool, infra: &str, region: &str) -> Result<Option<String>, AwsError> {
    crate::read_again::read_retrying(|e: &AwsError| e.retryable, || find_protection_once(pool, infra, region)).await
}

/// The kinds whose protection is read in EC2's tag index are looked for only when that index
/// lists a protected resource at all (one read beside the other kinds' finds): otherwise none of
/// them can be, and a fleet's submits spare the region a dozen describes each.
async fn find_protection_once(pool: &AwsPool, infra: &str, region: &str) -> Result<Option<String>, AwsError> {
    let aws = pool.region(region).await;
    let scope = Scope::Owned(infra.to_string());
    let read = |of: census::ProtectionRead| {
        let reads =
            Kind::TEARDOWN_ORDER.into_iter().filter(move |k| census::ProtectionRead::of(*k) == of).map(|kind| {
                let (aws, scope) = (&aws, &scope);
                async move { resources::find_retrying_in_place(aws, kind, scope).await.map(|ids| (kind, ids)) }
            });
        futures::future::try_join_all(reads)
    };
    let (in_ec2, mut found) =
        futures::try_join!(census::any_ec2_protected(&aws), read(census::ProtectionRead::OwnService))?;
    if in_ec2 {
        found.extend(read(census::ProtectionRead::Ec2).await?);
    }
    let found: BTreeMap<Kind, Vec<String>> = found.into_iter().filter(|(_, ids)| !ids.is_empty()).collect();
    Ok(census::first_protected(&aws, &found).await?.map(|(kind, id)| protected_message(infra, kind, &id)))
}
