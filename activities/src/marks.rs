//! Adoption marks (`infraflow.io/adopted-by/<digest>`, one per adopter) at rollback: an adopter
//! that rolls back removes its own mark and no other, so the creator's own rollback can delete
//! what it made only once no adopter is left; a creator's rollback that finds what it made
//! marked by any other workflow does not pass over it in silence. (`adopt` writes the marks;
//! `tags::TagQuery` keeps the creator's undo off a marked resource.)

use aws_sdk_ec2::types::Tag;

use crate::client::Aws;
use crate::error::{AwsError, AwsResult, classify};
use crate::resources::{Kind, Scope};
use crate::tags::{CREATED_BY_TAG, adopters, marks_of_adopter};
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

/// One resource with the undone step's identity: who made it, and its tags (every adopter's mark).
struct Marked {
    id: String,
    created_by: Option<String>,
    tags: Vec<(String, String)>,
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
        let pairs = || m.tags.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let made_here = m.created_by.as_deref() == Some(creator);
        let own = marks_of_adopter(creator, pairs());
        if !made_here && !own.is_empty() {
            remove_marks(aws, kind, &m.id, &own).await?;
            tracing::info!(resource = %m.id, identity, adopter = creator, "removed this workflow's adoption mark at its rollback");
        }
        let others: Vec<String> = adopters(pairs()).into_iter().filter(|a| a != creator).collect();
        if made_here && !others.is_empty() {
            in_use.push((m.id, others.join(", ")));
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
                "made by this workflow but in use by another: {}; it is left, and this rollback waits: once every workflow named is done with it (rolled back, or its cluster torn down) — a retry deletes it only when no workflow's mark is left on it —, `infraflow retry`; or tear the cluster down with `infraflow run teardown`",
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
            .map(|(id, created_by, tags)| Marked { id, created_by, tags })
            .collect());
    }
    let mut out = Vec::new();
    for id in resources::find(aws, kind, &Scope::Identity(identity.to_string())).await? {
        let Some(tags) = tags_of(aws, kind, &id).await? else { continue };
        let created_by = tags.iter().find(|(k, _)| k == CREATED_BY_TAG).map(|(_, v)| v.clone());
        out.push(Marked { created_by, tags, id });
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

/// Takes the marks `own` (an adopter's: key and value) off resource `id`: EC2 and Route53 delete
/// them, ELB and IAM empty them (an empty mark is no mark) with the tagging calls their creates
/// already use.
async fn remove_marks(aws: &Aws, kind: Kind, id: &str, own: &[(String, String)]) -> AwsResult<()> {
    let keys = || own.iter().map(|(k, _)| k.clone());
    let empty_iam = || -> Vec<aws_sdk_iam::types::Tag> {
        keys().filter_map(|k| aws_sdk_iam::types::Tag::builder().key(k).value("").build().ok()).collect()
    };
    let r = match kind {
        Kind::HostedZone => return dns::remove_zone_marks(aws, id, &keys().collect::<Vec<_>>()).await,
        Kind::LoadBalancer | Kind::TargetGroup => {
            let empty = keys()
                .map(|k| aws_sdk_elasticloadbalancingv2::types::Tag::builder().key(k).value("").build())
                .collect();
            let call = aws.elb.add_tags().resource_arns(id).set_tags(Some(empty));
            call.send().await.map(|_| ()).map_err(|e| classify("AddTags", e))
        }
        Kind::IamRole => {
            let call = aws.iam.tag_role().role_name(id).set_tags(Some(empty_iam()));
            call.send().await.map(|_| ()).map_err(|e| classify("TagRole", e))
        }
        Kind::InstanceProfile => {
            let call = aws.iam.tag_instance_profile().instance_profile_name(id).set_tags(Some(empty_iam()));
            call.send().await.map(|_| ()).map_err(|e| classify("TagInstanceProfile", e))
        }
        Kind::OidcProvider => {
            let call =
                aws.iam.tag_open_id_connect_provider().open_id_connect_provider_arn(id).set_tags(Some(empty_iam()));
            call.send().await.map(|_| ()).map_err(|e| classify("TagOpenIDConnectProvider", e))
        }
        _ => {
            // With its value, EC2 deletes a tag only while it still has that value.
            let tags = own.iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect();
            aws.ec2
                .delete_tags()
                .resources(id)
                .set_tags(Some(tags))
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
