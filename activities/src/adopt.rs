//! Adopting what HyperShift's CLI made: a create that finds nothing with its identity looks
//! for the resource the way `hypershift create infra aws` names it (`Identity::hypershift_query`)
//! and, finding exactly one, tags it with the identity — never with created-by, so no
//! compensation deletes it and teardown (by the ownership tag) still does. Two of a kind (what
//! HyperShift's re-runs can leave) are the operator's to sort out: the workflow pauses naming both.

use std::future::Future;

use crate::client::Aws;
use crate::consistency::once_consistent;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::{IDENTITY_TAG, Identity, TagQuery};

/// The one resource of `what` HyperShift made for `id`'s role, tagged with `id`'s identity now;
/// None if there is none (or HyperShift does not make this role). `find` lists what a query
/// matches, as the kind's own lookup does; `id_of` names each.
pub async fn adopt_hypershift<T, F, Fut>(
    aws: &Aws,
    id: &Identity,
    what: &str,
    find: F,
    id_of: fn(&T) -> &str,
) -> AwsResult<Option<T>>
where
    F: FnOnce(TagQuery) -> Fut,
    Fut: Future<Output = AwsResult<Vec<T>>>,
{
    let Some(q) = id.hypershift_query() else { return Ok(None) };
    let mut found = find(q).await?;
    found.sort_by(|a, b| id_of(a).cmp(id_of(b)));
    found.dedup_by(|a, b| id_of(a) == id_of(b));
    if found.len() > 1 {
        let many: Vec<&str> = found.iter().map(id_of).collect();
        return Err(AwsError {
            operator: true,
            ..AwsError::terminal(
                "adopt",
                format!(
                    "HyperShift made {} {what}s named {:?} for cluster {} ({}), one too many: delete the one that is not the cluster's, or tag the one that is with {IDENTITY_TAG}={}, then `infraflow retry`",
                    many.len(),
                    id.name,
                    id.infra_id,
                    many.join(", "),
                    id.key()
                ),
            )
        });
    }
    let Some(one) = found.pop() else { return Ok(None) };
    tag_as(aws, id_of(&one), id).await?;
    // What HyperShift's query found may be another workflow's own (its identity is this one's,
    // the tag index lagging): marked then, as every other adoption is (review F14).
    mark_if_adopted(aws, id_of(&one), id).await?;
    tracing::info!(resource = %id_of(&one), identity = %id.key(), "adopted what HyperShift made");
    Ok(Some(one))
}

/// EC2 tags as pairs.
pub fn pairs(tags: &[aws_sdk_ec2::types::Tag]) -> Vec<(String, String)> {
    tags.iter().filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string()))).collect()
}

/// `id_of` for kinds whose lookups list ids.
pub fn itself(s: &String) -> &str {
    s
}

/// Writes the adoption tags (identity, Name, ownership, additional tags; never created-by).
pub(crate) async fn tag_as(aws: &Aws, resource: &str, id: &Identity) -> AwsResult<()> {
    let tags = id.adoption_tags().into_iter().map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build());
    let tags: Vec<_> = tags.collect();
    once_consistent(|| async {
        aws.ec2
            .create_tags()
            .resources(resource)
            .set_tags(Some(tags.clone()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("CreateTags", e))
    })
    .await
}

/// Marks the EC2 resource `resource`, found with `id`'s identity, as adopted by `id`'s workflow
/// when another workflow created it (`Identity::adoption_mark`): from then on no undo of its
/// creator deletes it, whichever journal or host that undo runs from. Only a found resource is
/// read (one DescribeTags: the tag index that just listed it by its identity tag knows it; a
/// delete reads by id instead, `resources::tags_by_id`): a resource this attempt creates is
/// tagged by its create.
pub async fn mark_if_adopted(aws: &Aws, resource: &str, id: &Identity) -> AwsResult<()> {
    if id.workflow.is_empty() {
        return Ok(());
    }
    let out = once_consistent(|| async {
        aws.ec2
            .describe_tags()
            .filters(crate::tags::filter("resource-id", &[resource]))
            .send()
            .await
            .map_err(|e| classify("DescribeTags", e))
    })
    .await?;
    let tags: Vec<(String, String)> = out
        .tags()
        .iter()
        .filter(|t| t.resource_id() == Some(resource))
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
        .collect();
    mark_adopted_given(aws, resource, id, &tags).await
}

/// `mark_if_adopted` for a resource whose tags the lookup read already.
pub async fn mark_adopted_given(aws: &Aws, resource: &str, id: &Identity, tags: &[(String, String)]) -> AwsResult<()> {
    let Some((k, v)) = id.adoption_mark(tags) else { return Ok(()) };
    let tag = aws_sdk_ec2::types::Tag::builder().key(k).value(&v).build();
    once_consistent(|| async {
        aws.ec2
            .create_tags()
            .resources(resource)
            .tags(tag.clone())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("CreateTags", e))
    })
    .await?;
    tracing::info!(resource, identity = %id.key(), adopter = %v, "adopted what another workflow made");
    Ok(())
}
