//! EBS volumes and snapshots a running cluster's CSI driver made (infraflow creates neither):
//! found by the cluster's ownership tag and kept only on the driver's proof (`provenance`), a
//! volume detached first when the instance holding it is the cluster's, and deleted. A volume on
//! someone else's instance, or tagged for two clusters, pauses naming them; so does a snapshot
//! an image is made from.

use aws_sdk_ec2::types::{VolumeAttachmentState, VolumeState};

use crate::adopt::pairs;
use crate::client::Aws;
use crate::error::gone_ok;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::{TagQuery, ownership_pairs};

/// The IAM actions this file's lookups call.
pub const IAM_READ: &[&str] = &["ec2:DescribeVolumes", "ec2:DescribeSnapshots", "ec2:DescribeInstances"];
/// It creates nothing.
pub const IAM_WRITE: &[&str] = &[];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["ec2:DetachVolume", "ec2:DeleteVolume", "ec2:DeleteSnapshot"];

/// Volumes carrying the tag `q`, in any state but deleted, with their tags.
pub async fn find_volumes(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, Vec<(String, String)>)>> {
    let mut ids = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = aws
            .ec2
            .describe_volumes()
            .filters(q.filter())
            .set_next_token(token.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeVolumes", e))?;
        ids.extend(
            out.volumes()
                .iter()
                .filter(|v| q.matches(v.tags()) && !matches!(v.state(), Some(VolumeState::Deleted)))
                .filter_map(|v| Some((v.volume_id()?.to_string(), pairs(v.tags())))),
        );
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            return Ok(ids);
        }
    }
}

/// This account's snapshots carrying the tag `q` (never a public or shared one of another),
/// with their tags.
pub async fn find_snapshots(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, Vec<(String, String)>)>> {
    let mut ids = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = aws
            .ec2
            .describe_snapshots()
            .owner_ids("self")
            .filters(q.filter())
            .set_next_token(token.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeSnapshots", e))?;
        ids.extend(
            out.snapshots()
                .iter()
                .filter(|s| q.matches(s.tags()))
                .filter_map(|s| Some((s.snapshot_id()?.to_string(), pairs(s.tags())))),
        );
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            return Ok(ids);
        }
    }
}

/// Deletes volume `id`; false if it was gone. Attached to an instance of its own cluster, it is
/// detached first and waited for (in place for up to 30 s, then as a retryable state); attached
/// to another instance, the delete pauses naming it: a volume in someone else's use is not the
/// teardown's to take.
pub async fn delete_volume(aws: &Aws, id: &str) -> AwsResult<bool> {
    crate::consistency::retry_in_place(
        || delete_volume_once(aws, id),
        |e| e.retryable && !e.operator,
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(250),
        std::time::Duration::from_secs(4),
    )
    .await
}

async fn delete_volume_once(aws: &Aws, id: &str) -> AwsResult<bool> {
    let out = aws.ec2.describe_volumes().volume_ids(id).send().await.map_err(|e| classify("DescribeVolumes", e));
    let volume = match out {
        Ok(o) => match o.volumes().first() {
            Some(v) => v.clone(),
            None => return Ok(false),
        },
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e),
    };
    if matches!(volume.state(), Some(VolumeState::Deleted | VolumeState::Deleting)) {
        return Ok(false);
    }
    let tags = pairs(volume.tags());
    if let Some(owners) = crate::provenance::other_owners(&tags) {
        return Err(crate::provenance::two_owners("DeleteVolume", "volume", id, &owners));
    }
    let ours = ownership_pairs(&tags);
    let held: Vec<&str> = volume
        .attachments()
        .iter()
        .filter(|a| !matches!(a.state(), Some(VolumeAttachmentState::Detached)))
        .filter_map(|a| a.instance_id())
        .collect();
    for instance in held {
        match crate::compute::instance_shares_owner(aws, instance, &ours).await? {
            None => continue,
            Some(true) => {}
            Some(false) => {
                return Err(AwsError {
                    operator: true,
                    ..AwsError::terminal(
                        "DetachVolume",
                        format!(
                            "volume {id} is attached to instance {instance}, which is not its cluster's: it is left; detach it from that instance (or delete it yourself), then `infraflow retry`"
                        ),
                    )
                });
            }
        }
        let r = aws.ec2.detach_volume().volume_id(id).instance_id(instance).force(true).send().await;
        match r.map_err(|e| classify("DetachVolume", e)) {
            Ok(_) => {}
            Err(e) if e.is_not_found() || e.code_is("IncorrectState") => {}
            Err(e) => return Err(e),
        }
        return Err(AwsError::not_yet(
            "DetachVolume",
            format!("volume {id} is being detached from instance {instance}"),
        ));
    }
    gone_ok(aws.ec2.delete_volume().volume_id(id).send().await.map(|_| ()).map_err(|e| classify("DeleteVolume", e)))
        .map_err(|e| if e.code_is("VolumeInUse") { AwsError { retryable: true, ..e } } else { e })
}

/// Deletes snapshot `id`; false if it was gone. One an image is made from pauses naming it
/// (`InvalidSnapshot.InUse`): the image is someone's, deregistering it is theirs to decide.
pub async fn delete_snapshot(aws: &Aws, id: &str) -> AwsResult<bool> {
    let r =
        aws.ec2.delete_snapshot().snapshot_id(id).send().await.map(|_| ()).map_err(|e| classify("DeleteSnapshot", e));
    gone_ok(r).map_err(|e| {
        if !e.code_is("InvalidSnapshot.InUse") {
            return e;
        }
        let image = e.message.split_whitespace().find(|w| w.starts_with("ami-")).map(|w| w.trim_end_matches(['.', ',', ')']));
        let by = image.map(|i| format!("image {i}")).unwrap_or_else(|| "an image".into());
        AwsError {
            operator: true,
            ..AwsError::terminal(
                "DeleteSnapshot",
                format!("snapshot {id} is in use by {by}: it is left; deregister the image (or delete the snapshot yourself when it is free), then `infraflow retry`"),
            )
        }
    })
}
