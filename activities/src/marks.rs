//! Adoption marks (`infraflow.io/adopted-by`) at rollback: an adopter that rolls back removes
//! the mark it wrote (only while the mark still names it), so the creator's own rollback can
//! delete what it made; a creator's rollback that finds what it made marked by another
//! workflow does not pass over it in silence. (`adopt` writes the marks; `tags::TagQuery` keeps
//! the creator's undo off a marked resource.)

use aws_sdk_ec2::types::Tag;

use crate::client::Aws;
use crate::error::{AwsError, AwsResult, classify};
use crate::resources::{Kind, Scope};
use crate::tags::{ADOPTED_BY_TAG, CREATED_BY_TAG};
use crate::{census, dns, elb, resources};

/// The IAM actions of removing a mark (a rollback's: written only by managing workflows). ELB and
/// IAM marks are emptied with the tagging calls their creates already use (an empty mark is no
/// mark, `tags::ADOPTED_BY_TAG`): the scoped policy must fit a role's inline policy.
pub const IAM_WRITE: &[&str] = &[
    "ec2:DeleteTags",
    "elasticloadbalancing:AddTags",
    "iam:TagRole",
    "iam:TagInstanceProfile",
    "iam:TagOpenIDConnectProvider",
    "route53:ChangeTagsForResource",
];
/// Its reads: each kind's own describe, declared by that kind's file.
pub const IAM_READ: &[&str] = &[];
pub const IAM_DELETE: &[&str] = &[];

/// One resource with the undone step's identity: who made it, who marked it.
struct Marked {
    id: String,
    created_by: Option<String>,
    adopted_by: Option<String>,
}

/// What the rollback of workflow `creator`'s step (identity `identity`, of `kind`) finds after its
/// delete found nothing of its own to delete: removes `creator`'s own adoption marks, and
/// returns the resources `creator` made that another workflow marked as adopted (id, adopter):
/// left, and to be named (the caller pauses).
pub async fn settle_at_rollback(
    aws: &Aws,
    kind: Kind,
    identity: &str,
    creator: &str,
) -> AwsResult<Vec<(String, String)>> {
    let mut in_use = Vec::new();
    for m in marked(aws, kind, identity).await? {
        match (&m.created_by, &m.adopted_by) {
            (_, Some(mark)) if mark == creator && m.created_by.as_deref() != Some(creator) => {
                remove_mark(aws, kind, &m.id, creator).await?;
                tracing::info!(resource = %m.id, identity, adopter = creator, "removed this workflow's adoption mark at its rollback");
            }
            (Some(made), Some(mark)) if made == creator && mark != creator => in_use.push((m.id, mark.clone())),
            _ => {}
        }
    }
    Ok(in_use)
}

/// The pause of a creator's rollback over what another workflow adopted.
pub fn in_use_error(kind: Kind, in_use: &[(String, String)]) -> AwsError {
    let named: Vec<String> =
        in_use.iter().map(|(id, by)| format!("{} {id} (adopted by {by})", kind.as_str())).collect();
    AwsError {
        operator: true,
        ..AwsError::terminal(
            "rollback",
            format!(
                "made by this workflow but in use by another: {}; it is left, and this rollback waits: once that workflow is done with it (rolled back, or its cluster torn down), `infraflow retry`; or tear the cluster down with `infraflow run teardown`",
                named.join(", ")
            ),
        )
    }
}

async fn marked(aws: &Aws, kind: Kind, identity: &str) -> AwsResult<Vec<Marked>> {
    if kind == Kind::HostedZone {
        return Ok(dns::zone_marks(aws, identity)
            .await?
            .into_iter()
            .map(|(id, created_by, adopted_by)| Marked { id, created_by, adopted_by })
            .collect());
    }
    let mut out = Vec::new();
    for id in resources::find(aws, kind, &Scope::Identity(identity.to_string())).await? {
        let Some(tags) = tags_of(aws, kind, &id).await? else { continue };
        let tag = |k: &str| tags.iter().find(|(tk, _)| tk == k).map(|(_, v)| v.clone());
        let adopted_by = tag(ADOPTED_BY_TAG).filter(|v| !v.is_empty());
        out.push(Marked { created_by: tag(CREATED_BY_TAG), adopted_by, id });
    }
    Ok(out)
}

async fn tags_of(aws: &Aws, kind: Kind, id: &str) -> AwsResult<Option<Vec<(String, String)>>> {
    match kind {
        Kind::LoadBalancer | Kind::TargetGroup => {
            Ok(elb::tags_of(aws, &[id.to_string()]).await?.into_iter().next().map(|(_, t)| t))
        }
        Kind::IamRole | Kind::InstanceProfile | Kind::OidcProvider => census::iam_tags(aws, kind, id).await,
        Kind::RegistryBucket | Kind::ClassicLoadBalancer | Kind::HostedZone => Ok(None),
        // Read from the resource's own description by id: the tag index lags (N10).
        _ => resources::tags_by_id(aws, kind, id).await,
    }
}

async fn remove_mark(aws: &Aws, kind: Kind, id: &str, creator: &str) -> AwsResult<()> {
    let empty_iam = || aws_sdk_iam::types::Tag::builder().key(ADOPTED_BY_TAG).value("").build();
    let r = match kind {
        Kind::HostedZone => return dns::remove_zone_mark(aws, id).await,
        Kind::LoadBalancer | Kind::TargetGroup => {
            let empty = aws_sdk_elasticloadbalancingv2::types::Tag::builder().key(ADOPTED_BY_TAG).value("").build();
            let call = aws.elb.add_tags().resource_arns(id).tags(empty);
            call.send().await.map(|_| ()).map_err(|e| classify("AddTags", e))
        }
        Kind::IamRole => match empty_iam() {
            Ok(t) => {
                aws.iam.tag_role().role_name(id).tags(t).send().await.map(|_| ()).map_err(|e| classify("TagRole", e))
            }
            Err(_) => Ok(()),
        },
        Kind::InstanceProfile => match empty_iam() {
            Ok(t) => {
                let call = aws.iam.tag_instance_profile().instance_profile_name(id).tags(t);
                call.send().await.map(|_| ()).map_err(|e| classify("TagInstanceProfile", e))
            }
            Err(_) => Ok(()),
        },
        Kind::OidcProvider => match empty_iam() {
            Ok(t) => {
                let call = aws.iam.tag_open_id_connect_provider().open_id_connect_provider_arn(id).tags(t);
                call.send().await.map(|_| ()).map_err(|e| classify("TagOpenIDConnectProvider", e))
            }
            Err(_) => Ok(()),
        },
        _ => {
            // With its value, EC2 deletes the tag only while it still has that value.
            let tag = Tag::builder().key(ADOPTED_BY_TAG).value(creator).build();
            aws.ec2
                .delete_tags()
                .resources(id)
                .tags(tag)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify("DeleteTags", e))
        }
    };
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        r => r,
    }
}
