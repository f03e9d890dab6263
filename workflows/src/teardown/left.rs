//! What a teardown leaves although it carries the cluster's name, each with why: the buckets
//! named like its registry without its tag, and the look-alikes without their maker's proof.
//! Named under `left` in a teardown's output and `leave` in `--dry-run`; never deleted.

use infraflow_activities::tags::owned;
use infraflow_activities::{Aws, AwsError, AwsPool, Kind, s3};

use super::planned::Planned;

/// What carries the cluster's name without its maker's proof (`look_alikes::left`), as the
/// plan's and the output's entries.
/// With `with_templates` (version 6 on), the launch templates without Karpenter's proof too.
pub(crate) async fn look_alikes(aws: &Aws, infra_id: &str, with_templates: bool) -> Result<Vec<Planned>, AwsError> {
    Ok(infraflow_activities::look_alikes::left(aws, infra_id, with_templates)
        .await?
        .into_iter()
        .map(|l| Planned { kind: l.kind.as_str().into(), id: l.id, reason: Some(l.reason) })
        .collect())
}

/// The buckets named like the cluster's registry that do not carry its tag: what a teardown
/// leaves, and why (`--dry-run` and the teardown's output both name them).
pub(crate) async fn unowned_registry_buckets(aws: &Aws, infra_id: &str) -> Result<Vec<Planned>, AwsError> {
    let found = s3::find_registry_buckets(aws, infra_id, &owned(infra_id)).await?;
    Ok(found
        .not_owned
        .into_iter()
        .map(|name| Planned {
            kind: Kind::RegistryBucket.as_str().into(),
            id: name,
            reason: Some(format!(
                "named like the cluster's image registry ({}) but not tagged kubernetes.io/cluster/{infra_id}=owned: not the cluster's",
                s3::registry_prefix(infra_id)
            )),
        })
        .collect())
}

/// The cluster's IAM that records no region while its VPC stands in another region
/// (`iam::home`): that region's cluster's, left by a teardown here.
pub(crate) async fn iam_of_another_region(pool: &AwsPool, aws: &Aws, infra_id: &str) -> Result<Vec<Planned>, AwsError> {
    Ok(infraflow_activities::iam::home::anchored_elsewhere(pool, aws, infra_id)
        .await?
        .into_iter()
        .map(|(kind, id, regions)| Planned {
            kind: kind.as_str().into(),
            id,
            reason: Some(format!(
                "IAM (global) without {}, of a cluster with VPCs in {} (this teardown acts in {}): it may serve either, so it is left; delete it by hand once its cluster is gone",
                infraflow_activities::tags::REGION_TAG,
                regions.join(", "),
                aws.region
            )),
        })
        .collect())
}
