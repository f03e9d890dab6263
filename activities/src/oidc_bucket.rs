//! The management side's OIDC bucket (HyperShift's quick-setup): every hosted cluster's issuer
//! documents are published there, read by anyone (AWS's STS fetches them without credentials).
//! Made once, tagged with the management side's identity; a bucket of that name that does not
//! carry it is someone else's, never configured or deleted here.

use aws_sdk_s3::types::{
    BucketLocationConstraint, CreateBucketConfiguration, PublicAccessBlockConfiguration, Tag, Tagging,
};

use crate::client::Aws;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::{CREATED_BY_TAG, IDENTITY_TAG, Identity};

/// The IAM actions of making and configuring it.
pub const IAM_WRITE: &[&str] = &[
    "s3:CreateBucket",
    "s3:PutBucketTagging",
    "s3:PutBucketPublicAccessBlock",
    "s3:PutBucketPolicy",
    "s3:ListAllMyBuckets",
    "s3:ListBucketVersions",
];
/// The IAM actions of its delete (only when empty: clusters' documents are never deleted here).
pub const IAM_DELETE: &[&str] = &["s3:ListBucket", "s3:ListBucketVersions", "s3:ListAllMyBuckets", "s3:DeleteBucket"];

/// Anyone may read the objects, nothing else (HyperShift's quick-setup policy).
pub fn public_read_policy(bucket: &str) -> String {
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                       "Resource": format!("arn:aws:s3:::{bucket}/*")}]
    })
    .to_string()
}

/// Whose bucket `name` is, read before making it: what decides whether an untagged bucket of
/// that name found later is the one a killed attempt made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BucketFound {
    /// None there at this time (ms since the epoch).
    Absent { at: i64 },
    /// Carries `id`'s identity and a creator: made by a create-management.
    Ours,
    /// There, without that proof: never configured, tagged or deleted here.
    Foreign,
}

/// Whether bucket `name` is absent, this management side's (its identity and a creator), or
/// another's.
pub async fn find_oidc_bucket(aws: &Aws, id: &Identity, name: &str) -> AwsResult<BucketFound> {
    Ok(match crate::s3::bucket_tags(aws, name).await? {
        None => BucketFound::Absent { at: now_ms() },
        Some(tags) if is_ours(&tags, id) => BucketFound::Ours,
        Some(_) => BucketFound::Foreign,
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// How far another clock (S3's, the host that journaled `Absent`) may be off ours.
const CLOCK_SKEW_MS: i64 = 60_000;

/// Whether untagged bucket `name` is the one a killed attempt of ours made: created after `absent_at`
/// (when none was there) and holding nothing. Anyone else's bucket made in between holds
/// something, or is older, or is left to the operator.
async fn made_by_a_killed_attempt(aws: &Aws, name: &str, absent_at: i64) -> AwsResult<bool> {
    let listed = aws.s3.list_buckets().send().await.map_err(|e| classify("ListBuckets", e))?;
    let created = listed
        .buckets()
        .iter()
        .find(|b| b.name() == Some(name))
        .and_then(|b| b.creation_date())
        .and_then(|d| d.to_millis().ok());
    if !created.is_some_and(|c| c + CLOCK_SKEW_MS >= absent_at) {
        return Ok(false);
    }
    Ok(!holds_objects(aws, name).await?)
}

/// Whether bucket `name` holds any object or object version (a delete marker included).
async fn holds_objects(aws: &Aws, name: &str) -> AwsResult<bool> {
    let versions = aws
        .s3
        .list_object_versions()
        .bucket(name)
        .max_keys(1)
        .send()
        .await
        .map_err(|e| classify("ListObjectVersions", e))?;
    Ok(!versions.versions().is_empty() || !versions.delete_markers().is_empty())
}

/// The first path segments (clusters' infraIDs, HyperShift's layout) of objects in bucket `name`.
pub async fn clusters_in(aws: &Aws, name: &str) -> AwsResult<Vec<String>> {
    let listed =
        aws.s3.list_objects_v2().bucket(name).max_keys(100).send().await.map_err(|e| classify("ListObjectsV2", e))?;
    let mut found: Vec<String> = listed
        .contents()
        .iter()
        .filter_map(|o| o.key())
        .map(|k| k.split('/').next().unwrap_or(k).to_string())
        .collect();
    found.dedup();
    Ok(found)
}

/// What a delete of the management side's bucket or zone did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Removal {
    Deleted,
    Gone,
    /// There without this management side's proof: left.
    NotOurs,
}

/// The maker's proof: the identity tag, and a created-by tag (naming `id.workflow` when set).
fn is_ours(tags: &[(String, String)], id: &Identity) -> bool {
    let key = id.key();
    tags.iter().any(|(k, v)| k == IDENTITY_TAG && *v == key)
        && tags
            .iter()
            .any(|(k, v)| k == CREATED_BY_TAG && !v.is_empty() && (id.workflow.is_empty() || *v == id.workflow))
}

/// Bucket `name` in `aws`'s region, made if missing and tagged with `id`; its public access
/// block lets the read policy stand, and the policy is written. `before` is what
/// `find_oidc_bucket` journaled before the first attempt: a bucket of that name with no tags at
/// all is the one a killed attempt made only if it was absent then; one without `id`'s proof is
/// refused (the operator's to rename or adopt by hand). True if this workflow made it.
pub async fn ensure_oidc_bucket(aws: &Aws, id: &Identity, name: &str, before: BucketFound) -> AwsResult<bool> {
    let refused = || {
        AwsError::operator(
            "GetBucketTagging",
            format!(
                "bucket {name} exists and is not this management side's (no {IDENTITY_TAG}={} with a {CREATED_BY_TAG}): name another oidcBucket",
                id.key()
            ),
        )
    };
    // (made by this workflow, to be tagged now)
    let (made, untagged) = match crate::s3::bucket_tags(aws, name).await? {
        Some(tags) if is_ours(&tags, &id.clone().with_tags(&[], "")) => {
            (tags.iter().any(|(k, v)| k == CREATED_BY_TAG && *v == id.workflow), false)
        }
        // Made by an attempt of ours killed before it tagged the bucket.
        Some(tags) if tags.is_empty() => match before {
            BucketFound::Absent { at } if made_by_a_killed_attempt(aws, name, at).await? => (true, true),
            _ => return Err(refused()),
        },
        Some(_) => return Err(refused()),
        None => {
            if before == BucketFound::Foreign {
                return Err(refused());
            }
            let mut create = aws.s3.create_bucket().bucket(name);
            if aws.region != "us-east-1" {
                let at = CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(aws.region.as_str()))
                    .build();
                create = create.create_bucket_configuration(at);
            }
            match create.send().await.map_err(|e| classify("CreateBucket", e)) {
                Ok(_) => {}
                // Ours from an attempt whose answer was lost: its tags say so below.
                Err(e) if e.code_is("BucketAlreadyOwnedByYou") => {}
                Err(e) => return Err(e),
            }
            (true, true)
        }
    };
    if untagged {
        // Tagging replaces every tag: written only on the bucket this workflow made, never over
        // what an operator added to one found.
        let tags: Vec<Tag> =
            id.tags().into_iter().filter_map(|(k, v)| Tag::builder().key(k).value(v).build().ok()).collect();
        let tagging =
            Tagging::builder().set_tag_set(Some(tags)).build().map_err(|e| AwsError::terminal("tag", e.to_string()))?;
        aws.s3
            .put_bucket_tagging()
            .bucket(name)
            .tagging(tagging)
            .send()
            .await
            .map_err(|e| classify("PutBucketTagging", e))?;
    }
    let open = PublicAccessBlockConfiguration::builder()
        .block_public_acls(true)
        .ignore_public_acls(true)
        .block_public_policy(false)
        .restrict_public_buckets(false)
        .build();
    aws.s3
        .put_public_access_block()
        .bucket(name)
        .public_access_block_configuration(open)
        .send()
        .await
        .map_err(|e| classify("PutPublicAccessBlock", e))?;
    aws.s3
        .put_bucket_policy()
        .bucket(name)
        .policy(public_read_policy(name))
        .send()
        .await
        .map_err(|e| classify("PutBucketPolicy", e))?;
    Ok(made)
}

/// Refuses (a pause naming them) while bucket `name`, if this management side's, holds clusters'
/// documents or any object version: nothing of the management side may go while a cluster uses it.
pub async fn refuse_while_used(aws: &Aws, id: &Identity, name: &str) -> AwsResult<()> {
    let Some(tags) = crate::s3::bucket_tags(aws, name).await? else { return Ok(()) };
    if !is_ours(&tags, id) || !holds_objects(aws, name).await? {
        return Ok(());
    }
    let clusters = clusters_in(aws, name).await?;
    let named = if clusters.is_empty() {
        "old object versions".to_string()
    } else {
        format!("the documents of {}", clusters.join(", "))
    };
    Err(AwsError::operator(
        "DeleteBucket",
        format!(
            "bucket {name} still holds {named}: tear those clusters down (or empty the bucket) first, then `infraflow retry`"
        ),
    ))
}

/// Deletes bucket `name` if it carries `id`'s proof (`id.workflow` set: made by that workflow,
/// as an undo asks) and holds nothing; a bucket still used is refused (`refuse_while_used`).
pub async fn delete_oidc_bucket_if_empty(aws: &Aws, id: &Identity, name: &str) -> AwsResult<Removal> {
    let Some(tags) = crate::s3::bucket_tags(aws, name).await? else { return Ok(Removal::Gone) };
    if !is_ours(&tags, id) {
        return Ok(Removal::NotOurs);
    }
    refuse_while_used(aws, id, name).await?;
    let r = aws.s3.delete_bucket().bucket(name).send().await.map_err(|e| classify("DeleteBucket", e));
    match r {
        Ok(_) => Ok(Removal::Deleted),
        Err(e) if e.code_is("NoSuchBucket") => Ok(Removal::Gone),
        // Written to between the check and the delete: the same pause, asked again by `retry`.
        Err(e) if e.code_is("BucketNotEmpty") => Err(AwsError::operator(
            "DeleteBucket",
            format!("bucket {name} was written to as it was being deleted: see what uses it, then `infraflow retry`"),
        )),
        Err(e) => Err(e),
    }
}
