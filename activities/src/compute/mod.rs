//! EC2 instances of node pools: launch one member idempotently, wait for running, terminate and
//! wait for terminated; an AutoNode cluster's launch templates (`launch_templates`).

use aws_sdk_ec2::types::{
    IamInstanceProfileSpecification, InstanceNetworkInterfaceSpecification, InstanceStateName, InstanceType,
    ResourceType,
};
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::error::missing;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::{Identity, TagQuery, filter};
use crate::wait::{WAIT_BUDGET, poll_until};

mod launch_templates;
mod room;

pub(crate) use launch_templates::launch_template_tags;
pub use launch_templates::{
    CLUSTER_NAME_TAG, FoundTemplate, KARPENTER_NAME_PREFIX, NODE_CLASS_TAG, NODE_POOL_TAG, delete_launch_template,
    find_launch_templates,
};
pub use room::{VcpuCensus, VcpuRoom, is_standard, vcpu_census, vcpu_room};

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &[
    "ec2:DescribeInstances",
    // The region's On-Demand vCPUs and their quota (`room`), for the quota check before a
    // scale-nodepool is journaled.
    "ec2:DescribeInstanceTypes",
    "servicequotas:GetServiceQuota",
    // Karpenter's launch templates (`launch_templates`), found and judged by a teardown.
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeLaunchTemplateVersions",
];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &["ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"];

/// The tag naming a node pool member's index.
pub const MEMBER_TAG: &str = "infraflow.io/member";

/// What every member of a node pool is launched with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchSpec {
    pub subnet_id: String,
    pub instance_type: String,
    pub image_id: String,
    pub security_group_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Give the instance a public address: a node in a public subnet (HyperShift's
    /// `--public-only`: no NAT gateway) has no other way out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public_ip: bool,
    /// The digest of the user data the instance is launched with (the data itself is never
    /// part of anything journaled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data_sha256: Option<String>,
}

/// A live instance: not terminated or shutting down.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub instance_id: String,
    pub index: u32,
    pub state: String,
    /// Seconds since the epoch.
    pub launched: i64,
    /// The VPC it runs in.
    pub vpc: Option<String>,
}

fn live(state: Option<&InstanceStateName>) -> bool {
    !matches!(state, Some(InstanceStateName::Terminated) | Some(InstanceStateName::ShuttingDown))
}

/// Live instances carrying the tag `q`.
pub async fn find_instances(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<Member>> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = aws
            .ec2
            .describe_instances()
            .filters(q.filter())
            .filters(filter("instance-state-name", &["pending", "running", "stopping", "stopped"]))
            .set_next_token(token.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeInstances", e))?;
        for i in page.reservations().iter().flat_map(|r| r.instances()) {
            if !q.matches(i.tags()) || !live(i.state().and_then(|s| s.name())) {
                continue;
            }
            let Some(id) = i.instance_id() else { continue };
            let index = i
                .tags()
                .iter()
                .find(|t| t.key() == Some(MEMBER_TAG))
                .and_then(|t| t.value())
                .and_then(|v| v.parse().ok())
                .unwrap_or(u32::MAX);
            out.push(Member {
                instance_id: id.to_string(),
                index,
                state: i.state().and_then(|s| s.name()).map(|n| n.as_str().to_string()).unwrap_or_default(),
                launched: i.launch_time().map(|t| t.secs()).unwrap_or(0),
                vpc: i.vpc_id().map(str::to_string),
            });
        }
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    out.sort_by_key(|m| (m.index, m.instance_id.clone()));
    Ok(out)
}

/// One node pool member: found by identity, or launched with a deterministic client token.
pub async fn ensure_instance(
    aws: &Aws,
    id: &Identity,
    spec: &LaunchSpec,
    user_data: Option<&[u8]>,
    token: &str,
) -> AwsResult<String> {
    if let Some(m) = find_instances(aws, &id.query()).await?.into_iter().next() {
        crate::adopt::mark_if_adopted(aws, &m.instance_id, id).await?;
        return Ok(m.instance_id);
    }
    let mut req = aws
        .ec2
        .run_instances()
        .image_id(&spec.image_id)
        .instance_type(InstanceType::from(spec.instance_type.as_str()))
        // Exactly one: asking for a range lets implementations pick either end.
        .min_count(1)
        .max_count(1)
        .client_token(token)
        .tag_specifications(id.tag_spec(ResourceType::Instance));
    // A public address can only be asked for on the network interface, which then carries the
    // subnet and groups too (AWS refuses them twice).
    req = if spec.public_ip {
        req.network_interfaces(
            InstanceNetworkInterfaceSpecification::builder()
                .device_index(0)
                .subnet_id(&spec.subnet_id)
                .set_groups(Some(spec.security_group_ids.clone()))
                .associate_public_ip_address(true)
                .build(),
        )
    } else {
        req.subnet_id(&spec.subnet_id).set_security_group_ids(Some(spec.security_group_ids.clone()))
    };
    if let Some(data) = user_data {
        req = req.user_data(aws_smithy_types::base64::encode(data));
    }
    if let Some(profile) = &spec.instance_profile {
        req = req.iam_instance_profile(IamInstanceProfileSpecification::builder().name(profile).build());
    }
    let out = req.send().await.map_err(|e| match classify("RunInstances", e) {
        // The image, subnet and groups are the input's: if AWS does not know them, no wait helps.
        e if e.code.as_deref().is_some_and(|c| {
            c.starts_with("InvalidAMIID.") || c == "InvalidSubnetID.NotFound" || c == "InvalidGroup.NotFound"
        }) =>
        {
            AwsError { retryable: false, ..e }
        }
        // IAM is eventually consistent: a profile made seconds ago is not known to EC2 yet. It
        // is retried in place (the same token), never made again; a name that never appears
        // fails when the retries run out.
        e if e.code_is("InvalidParameterValue") && e.message.contains("iamInstanceProfile") => {
            AwsError { retryable: true, ..e }
        }
        e => e,
    })?;
    Ok(out
        .instances()
        .first()
        .and_then(|i| i.instance_id())
        .ok_or_else(|| missing("RunInstances", "instance id"))?
        .to_string())
}

async fn instance_state(aws: &Aws, instance_id: &str) -> AwsResult<Option<InstanceStateName>> {
    let out = aws.ec2.describe_instances().instance_ids(instance_id).send().await;
    match out.map_err(|e| classify("DescribeInstances", e)) {
        Ok(o) => Ok(o.reservations().iter().flat_map(|r| r.instances()).find_map(|i| i.state()?.name().cloned())),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

pub async fn wait_instance_running(aws: &Aws, instance_id: &str) -> AwsResult<()> {
    poll_until("DescribeInstances", &format!("instance {instance_id} not running"), WAIT_BUDGET, || async {
        match instance_state(aws, instance_id).await? {
            Some(InstanceStateName::Running) => Ok(Some(())),
            Some(InstanceStateName::Terminated) | Some(InstanceStateName::ShuttingDown) => Err(AwsError::terminal(
                "DescribeInstances",
                format!("instance {instance_id} terminated while starting (capacity, image or quota?)"),
            )),
            _ => Ok(None),
        }
    })
    .await
}

/// Terminates the instance and waits until it is terminated.
pub async fn terminate_instance(aws: &Aws, instance_id: &str) -> AwsResult<bool> {
    let acted = match instance_state(aws, instance_id).await? {
        None | Some(InstanceStateName::Terminated) => return Ok(false),
        Some(InstanceStateName::ShuttingDown) => true,
        Some(_) => {
            let r = aws.ec2.terminate_instances().instance_ids(instance_id).send().await;
            crate::error::gone_ok(r.map(|_| ()).map_err(|e| classify("TerminateInstances", e)))?
        }
    };
    poll_until("DescribeInstances", &format!("instance {instance_id} not terminated"), WAIT_BUDGET, || async {
        Ok(matches!(instance_state(aws, instance_id).await?, None | Some(InstanceStateName::Terminated)).then_some(()))
    })
    .await?;
    Ok(acted)
}

/// Whether instance `id` belongs to exactly the clusters `owners` names (`tags::same_owners`);
/// None if it is gone. What a delete asks before it takes a volume or an interface off an
/// instance: the cluster's own instance may be detached from, anyone else's never.
pub(crate) async fn instance_shares_owner(aws: &Aws, id: &str, owners: &[(String, String)]) -> AwsResult<Option<bool>> {
    let described =
        aws.ec2.describe_instances().instance_ids(id).send().await.map_err(|e| classify("DescribeInstances", e));
    let found = match described {
        Ok(o) => o.reservations().iter().flat_map(|r| r.instances()).next().cloned(),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    // The same clusters exactly: an instance that shares one owner but also names another
    // cluster is that other cluster's node as much (review F7).
    Ok(found.map(|i| crate::tags::same_owners(&crate::adopt::pairs(i.tags()), owners)))
}
