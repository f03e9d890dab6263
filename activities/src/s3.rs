//! S3: the image registry's bucket a running cluster's registry operator made
//! (`<infraID>-image-registry-<region>-<suffix>`; infraflow creates none): found by its name
//! prefix **and** the cluster's ownership tag, emptied of every object version and delete marker,
//! then deleted. A bucket with the prefix but not the tag is someone else's: named, never touched.

use aws_sdk_s3::types::{Delete, ObjectIdentifier};

use crate::client::Aws;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::TagQuery;

/// The IAM actions this file's lookups call (ListBuckets is `s3:ListAllMyBuckets`).
pub const IAM_READ: &[&str] = &["s3:ListAllMyBuckets", "s3:GetBucketLocation", "s3:GetBucketTagging"];
/// It creates nothing.
pub const IAM_WRITE: &[&str] = &[];
/// Emptying (ListObjectVersions is `s3:ListBucketVersions`; DeleteObjects is authorized per
/// object as `s3:DeleteObject` and, naming a version, `s3:DeleteObjectVersion`) and deleting.
pub const IAM_DELETE: &[&str] =
    &["s3:ListBucketVersions", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:DeleteBucket"];

/// How every registry bucket of cluster `infra` is named (HyperShift's destroy looks for the same).
pub fn registry_prefix(infra: &str) -> String {
    format!("{infra}-image-registry-")
}

/// The registry buckets of a cluster in one region: those to delete (the prefix and the tag
/// `q`), and those with the prefix that `q` does not match (left, and named).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RegistryBuckets {
    pub owned: Vec<String>,
    pub not_owned: Vec<String>,
}

/// The buckets named `<infra>-image-registry-…` in `aws`'s region, split by whether their tags
/// match `q`. Buckets of other regions are not this (regional) teardown's.
pub async fn find_registry_buckets(aws: &Aws, infra: &str, q: &TagQuery) -> AwsResult<RegistryBuckets> {
    let prefix = registry_prefix(infra);
    let mut named = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = aws
            .s3
            .list_buckets()
            .prefix(&prefix)
            .set_continuation_token(token.clone())
            .send()
            .await
            .map_err(|e| classify("ListBuckets", e))?;
        // The prefix is asked of the server and checked here (an emulator may ignore it).
        named.extend(
            out.buckets().iter().filter_map(|b| b.name()).filter(|n| n.starts_with(&prefix)).map(str::to_string),
        );
        token = out.continuation_token().filter(|t| !t.is_empty()).map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    let mut found = RegistryBuckets::default();
    for name in named {
        if !in_region(aws, &name).await? {
            continue;
        }
        match bucket_tags(aws, &name).await? {
            Some(tags) if q.matches_pairs(&tags) => found.owned.push(name),
            Some(_) => found.not_owned.push(name),
            None => {} // deleted between the list and the read
        }
    }
    Ok(found)
}

/// Whether bucket `name` lives in `aws`'s region (an empty location is us-east-1, `EU` is
/// eu-west-1). A bucket gone since the list is in no region.
async fn in_region(aws: &Aws, name: &str) -> AwsResult<bool> {
    match aws.s3.get_bucket_location().bucket(name).send().await {
        Ok(out) => {
            let region = match out.location_constraint().map(|c| c.as_str()) {
                None | Some("") => "us-east-1",
                Some("EU") => "eu-west-1",
                Some(other) => other,
            };
            Ok(region == aws.region)
        }
        Err(e) => gone_is(classify("GetBucketLocation", e), false),
    }
}

/// The tags of bucket `name`: empty when it has none, None when it is gone.
pub async fn bucket_tags(aws: &Aws, name: &str) -> AwsResult<Option<Vec<(String, String)>>> {
    match aws.s3.get_bucket_tagging().bucket(name).send().await {
        Ok(out) => Ok(Some(out.tag_set().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect())),
        Err(e) => {
            let e = classify("GetBucketTagging", e);
            if e.code_is("NoSuchTagSet") {
                return Ok(Some(Vec::new()));
            }
            gone_is(e, None)
        }
    }
}

/// `value` when `e` says the bucket does not exist; otherwise `e`.
fn gone_is<T>(e: AwsError, value: T) -> AwsResult<T> {
    if e.code_is("NoSuchBucket") { Ok(value) } else { Err(e) }
}

/// Empties bucket `name` of every object version and delete marker, then deletes it; false if it
/// was already gone. Each call is idempotent on its own (a version deleted twice is deleted), so
/// a run killed anywhere starts the listing over and finishes the job.
pub async fn delete_bucket_if_exists(aws: &Aws, name: &str) -> AwsResult<bool> {
    // Bucket names are reused: the one a journaled inventory names may since be someone else's.
    // Read from AWS, now, that it is still a cluster's registry (its tag names the cluster its
    // name starts with); otherwise it is not ours to empty, and counts as gone.
    let Some(tags) = bucket_tags(aws, name).await? else { return Ok(false) };
    let ours = tags.iter().any(|(k, v)| {
        v == crate::tags::OWNED
            && k.strip_prefix(crate::tags::OWNERSHIP_PREFIX)
                .is_some_and(|infra| name.starts_with(&registry_prefix(infra)))
    });
    if !ours {
        return Ok(false);
    }
    loop {
        // Always from the start: what the last batch deleted is no longer listed.
        let out = match aws.s3.list_object_versions().bucket(name).max_keys(1000).send().await {
            Ok(out) => out,
            Err(e) => return gone_is(classify("ListObjectVersions", e), false),
        };
        let versions = out.versions().iter().map(|v| (v.key(), v.version_id()));
        let markers = out.delete_markers().iter().map(|m| (m.key(), m.version_id()));
        let objects: Vec<ObjectIdentifier> = versions
            .chain(markers)
            .filter_map(|(key, version)| {
                ObjectIdentifier::builder().key(key?).set_version_id(version.map(str::to_string)).build().ok()
            })
            .collect();
        if objects.is_empty() {
            break;
        }
        let batch = Delete::builder()
            .set_objects(Some(objects))
            .quiet(true)
            .build()
            .map_err(|e| AwsError::terminal("DeleteObjects", e.to_string()))?;
        let deleted = match aws.s3.delete_objects().bucket(name).delete(batch).send().await {
            Ok(out) => out,
            Err(e) => return gone_is(classify("DeleteObjects", e), false),
        };
        if let Some(err) = deleted.errors().first() {
            // Per object, AWS answers inside a 200: an object locked or denied stays, and says why.
            let e = AwsError {
                code: err.code().map(str::to_string),
                ..AwsError::terminal(
                    "DeleteObjects",
                    format!(
                        "bucket {name}: {} of its objects could not be deleted, {} (version {}): {}",
                        deleted.errors().len(),
                        err.key().unwrap_or("?"),
                        err.version_id().unwrap_or("null"),
                        err.message().unwrap_or("no reason given")
                    ),
                )
            };
            return Err(e);
        }
    }
    match aws.s3.delete_bucket().bucket(name).send().await {
        Ok(_) => Ok(true),
        // An object written after the listing (the registry is still running): empty it again.
        Err(e) => {
            let e = classify("DeleteBucket", e);
            if e.code_is("BucketNotEmpty") {
                return Err(AwsError { retryable: true, ..e });
            }
            gone_is(e, false)
        }
    }
}
