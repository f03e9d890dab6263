//! The cluster lease: one writer per cluster across journals, hosts and tools, held as an object
//! in S3 (`<prefix>/<account>/<region>/<infraID>`) and moved only by S3's conditional writes —
//! taken with `If-None-Match: *`, renewed and taken over with `If-Match: <etag>`, released with a
//! conditional delete. No forced unlock exists: an expired lease is taken over by
//! compare-and-swap. Expiry is judged by the waiter's own clock (the record unchanged for its
//! whole time to live since the waiter first saw it), never by comparing hosts' clocks.

use std::time::Duration;

use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::primitives::ByteStream;
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::error::{AwsError, AwsResult, classify};

/// What a holder needs: read the record, write it conditionally, delete it conditionally.
pub const IAM_ACTIONS: &[&str] = &["s3:GetObject", "s3:PutObject", "s3:DeleteObject"];

/// Where leases live: a bucket the operator names and a key prefix in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseStore {
    pub bucket: String,
    pub prefix: String,
}

impl LeaseStore {
    /// The object of one cluster's lease.
    pub fn key(&self, account: &str, region: &str, infra_id: &str) -> String {
        self.under(&format!("{account}/{region}/{infra_id}"))
    }

    /// `rest` under the prefix: with no prefix (`--lock-prefix ""`), at the bucket's top, never
    /// under a key starting with `/`.
    fn under(&self, rest: &str) -> String {
        match self.prefix.trim_end_matches('/') {
            "" => rest.to_string(),
            prefix => format!("{prefix}/{rest}"),
        }
    }
}

/// Who holds a lease: written in its body, shown to those who wait.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The journal the holding workflow is recorded in (a path or a URL without password).
    pub journal: String,
    pub workflow: String,
    /// The workflow's creator (`<id>@<uuid>`): the same submission, whichever process runs it.
    pub creator: String,
    pub host: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "workflow {} of journal {} on {}", self.workflow, self.journal, self.host)
    }
}

/// A lease's body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub holder: Holder,
    /// How long the record stands unrenewed before another may take it over.
    pub ttl_ms: u64,
    /// The holder's wall clock at this write, for people (never compared across hosts).
    pub written_at_ms: i64,
    /// Counts the holder's writes: every body differs, so every write has a new ETag (an ETag
    /// is the body's digest, and a compare-and-swap must never match a stale copy).
    pub serial: u64,
}

/// A record as read, with the ETag a compare-and-swap names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub record: Record,
    pub etag: String,
}

/// The answer to a conditional write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The write took: the new ETag.
    Took(String),
    /// The condition failed: someone else wrote first.
    Lost,
}

fn precondition_failed<E>(e: &SdkError<E, aws_smithy_runtime_api::client::orchestrator::HttpResponse>) -> bool {
    // 412: the condition failed; 409: a conditional write raced another to the same key.
    e.raw_response().is_some_and(|r| matches!(r.status().as_u16(), 412 | 409))
}

fn not_found<E>(e: &SdkError<E, aws_smithy_runtime_api::client::orchestrator::HttpResponse>) -> bool {
    e.raw_response().is_some_and(|r| r.status().as_u16() == 404)
}

fn body(record: &Record) -> ByteStream {
    ByteStream::from(serde_json::to_vec(record).expect("a record serializes"))
}

/// Writes `record` at `key` only if no object is there (`If-None-Match: *`).
pub async fn create(aws: &Aws, store: &LeaseStore, key: &str, record: &Record) -> AwsResult<Written> {
    let put = aws.s3.put_object().bucket(&store.bucket).key(key).if_none_match("*").body(body(record));
    match put.content_type("application/json").send().await {
        Ok(out) => Ok(Written::Took(out.e_tag().unwrap_or_default().to_string())),
        Err(e) if precondition_failed(&e) => Ok(Written::Lost),
        Err(e) => Err(classify("PutObject", e)),
    }
}

/// Replaces the record at `key` only if it is still the one with `etag` (`If-Match`): a renewal,
/// or a takeover of a lease seen expired.
pub async fn replace(aws: &Aws, store: &LeaseStore, key: &str, etag: &str, record: &Record) -> AwsResult<Written> {
    let put = aws.s3.put_object().bucket(&store.bucket).key(key).if_match(etag).body(body(record));
    match put.content_type("application/json").send().await {
        Ok(out) => Ok(Written::Took(out.e_tag().unwrap_or_default().to_string())),
        // Gone (released since) is lost too: the caller starts again from `create`.
        Err(e) if precondition_failed(&e) || not_found(&e) => Ok(Written::Lost),
        Err(e) => Err(classify("PutObject", e)),
    }
}

/// Deletes the record at `key` only if it is still the one with `etag`: a holder never deletes
/// a lease another has taken over.
pub async fn release(aws: &Aws, store: &LeaseStore, key: &str, etag: &str) -> AwsResult<Written> {
    match aws.s3.delete_object().bucket(&store.bucket).key(key).if_match(etag).send().await {
        Ok(_) => Ok(Written::Took(String::new())),
        Err(e) if precondition_failed(&e) || not_found(&e) => Ok(Written::Lost),
        Err(e) => Err(classify("DeleteObject", e)),
    }
}

/// The record at `key`, if there is one. A body that does not parse is someone else's object:
/// an error naming it, never overwritten.
pub async fn read(aws: &Aws, store: &LeaseStore, key: &str) -> AwsResult<Option<Seen>> {
    let out = match aws.s3.get_object().bucket(&store.bucket).key(key).send().await {
        Ok(out) => out,
        Err(e) if not_found(&e) => return Ok(None),
        Err(e) => return Err(classify("GetObject", e)),
    };
    let etag = out.e_tag().unwrap_or_default().to_string();
    let bytes = out.body.collect().await.map_err(|e| AwsError {
        retryable: true,
        ..AwsError::terminal("GetObject", format!("reading s3://{}/{key}: {e}", store.bucket))
    })?;
    let record = serde_json::from_slice(&bytes.into_bytes()).map_err(|e| {
        AwsError::terminal(
            "GetObject",
            format!(
                "s3://{}/{key} is not an infraflow cluster lease ({e}): remove it or choose another --lock-bucket",
                store.bucket
            ),
        )
    })?;
    Ok(Some(Seen { record, etag }))
}

/// Proves the store honours conditional writes before anything relies on them, on one probe key
/// that stays (`<prefix>/.self-test/store`): an `If-None-Match: *` write of it must be refused
/// once it exists, and a write and a delete of it with `If-Match` naming an ETag it does not have
/// must be refused too (renewals, takeovers and releases rely on that: SAFETY-A7937A6 G5). The
/// first proof makes it and writes it again (two calls in turn); every later one writes it once,
/// beside a read that shows it is there (one round trip); then the two stale writes side by side
/// (one more). A store that accepts any of them (an S3 look-alike, a proxy that drops a header)
/// would let two writers hold one cluster, and is refused.
pub async fn self_test(aws: &Aws, store: &LeaseStore) -> AwsResult<Result<(), String>> {
    let key = store.under(".self-test/store");
    let record = |serial| Record {
        holder: Holder {
            journal: "(self-test)".into(),
            workflow: "(the store's proof)".into(),
            creator: String::new(),
            host: String::new(),
        },
        ttl_ms: 0,
        written_at_ms: 0,
        serial,
    };
    let ignores = || {
        Err(format!(
            "s3://{} ignores If-None-Match (a second conditional write of one key succeeded): it cannot hold a cluster lease; use an S3 bucket",
            store.bucket
        ))
    };
    let probe = record(1);
    let (first, there) = futures::join!(create(aws, store, &key, &probe), read(aws, store, &key));
    let first = match first {
        // Not retried: a bucket that is not there will not be for the next attempt either.
        Err(e) if e.code_is("NoSuchBucket") => {
            return Ok(Err(format!(
                "bucket s3://{} does not exist, or these credentials cannot see it: create it, or name another with --lock-bucket",
                store.bucket
            )));
        }
        r => r?,
    };
    let if_none_match = match first {
        // Made now: a second write must be refused.
        Written::Took(_) => match create(aws, store, &key, &record(2)).await? {
            Written::Lost => Ok(()),
            Written::Took(_) => ignores(),
        },
        // Refused: proof enough if the key is there (read again if the read ran before another
        // process's first proof made it); a store that refuses a write of a key it lacks is not
        // one conditional writes can be trusted to.
        Written::Lost => match there? {
            Some(_) => Ok(()),
            None if read(aws, store, &key).await?.is_some() => Ok(()),
            None => Err(format!(
                "s3://{} refused a conditional write of s3://{}/{key}, which it does not hold: it cannot hold a cluster lease",
                store.bucket, store.bucket
            )),
        },
    };
    if if_none_match.is_err() {
        return Ok(if_none_match);
    }
    // An ETag no object has (an ETag is a quoted digest).
    let stale = "\"00000000000000000000000000000000\"";
    let overwrite = record(2);
    let (put, delete) = futures::join!(replace(aws, store, &key, stale, &overwrite), release(aws, store, &key, stale));
    Ok(match (put?, delete?) {
        (Written::Lost, Written::Lost) => Ok(()),
        (put, _) => Err(format!(
            "s3://{} ignores If-Match (a {} naming a stale ETag succeeded): it cannot hold a cluster lease; use an S3 bucket",
            store.bucket,
            if matches!(put, Written::Took(_)) { "write" } else { "delete" }
        )),
    })
}

/// How long a lease stands unrenewed before another may take it over, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);
