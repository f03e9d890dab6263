//! The launch templates Karpenter makes for an AutoNode cluster (HyperShift runs it with
//! `CLUSTER_NAME=<infraID>`): found by the cluster's tag, judged by Karpenter's own marks, and
//! deleted as Karpenter's `DeleteAll` deletes them (aws/karpenter-provider-aws
//! `pkg/providers/launchtemplate/launchtemplate.go`).

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::TagQuery;

/// The prefix of every launch template name Karpenter gives (`karpenter.k8s.aws/<hash>`).
pub const KARPENTER_NAME_PREFIX: &str = "karpenter.k8s.aws/";
/// The tag naming the EC2NodeClass a template (or instance) was made for.
pub const NODE_CLASS_TAG: &str = "karpenter.k8s.aws/ec2nodeclass";
/// The tag naming the NodePool an instance was launched for.
pub const NODE_POOL_TAG: &str = "karpenter.sh/nodepool";
/// The tag Karpenter writes with the cluster's name (`CLUSTER_NAME`, the infraID under HyperShift).
pub const CLUSTER_NAME_TAG: &str = "eks:eks-cluster-name";

/// A launch template carrying a cluster's tag, with what judges it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundTemplate {
    pub id: String,
    pub name: String,
    pub tags: Vec<(String, String)>,
    /// The security groups its versions launch into (their own and their interfaces'): any
    /// version may be launched (`$Latest`, a version number), so every one is judged.
    pub groups: Vec<String>,
}

/// The launch templates matching `q`, each with the security groups of all its versions.
pub async fn find_launch_templates(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<FoundTemplate>> {
    let mut found = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = aws
            .ec2
            .describe_launch_templates()
            .filters(q.filter())
            .set_next_token(token.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeLaunchTemplates", e))?;
        for t in page.launch_templates() {
            let (Some(id), Some(name)) = (t.launch_template_id(), t.launch_template_name()) else { continue };
            if !q.matches(t.tags()) {
                continue;
            }
            found.push(FoundTemplate {
                id: id.to_string(),
                name: name.to_string(),
                tags: crate::adopt::pairs(t.tags()),
                groups: Vec::new(),
            });
        }
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    for t in &mut found {
        t.groups = every_version_groups(aws, &t.id).await?;
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found)
}

/// The security groups every version of template `id` names; empty if it is gone.
async fn every_version_groups(aws: &Aws, id: &str) -> AwsResult<Vec<String>> {
    let mut groups = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let read = aws
            .ec2
            .describe_launch_template_versions()
            .launch_template_id(id)
            .set_next_token(token.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeLaunchTemplateVersions", e));
        let out = match read {
            Ok(o) => o,
            Err(e) if e.is_not_found() => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        for d in out.launch_template_versions().iter().filter_map(|v| v.launch_template_data()) {
            groups.extend(d.security_group_ids().iter().cloned());
            groups.extend(d.network_interfaces().iter().flat_map(|n| n.groups().iter().cloned()));
        }
        token = out.next_token().filter(|t| !t.is_empty()).map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    groups.sort();
    groups.dedup();
    Ok(groups)
}

/// The tags of launch template `id`; None if it is gone.
pub(crate) async fn launch_template_tags(aws: &Aws, id: &str) -> AwsResult<Option<Vec<(String, String)>>> {
    let read = aws
        .ec2
        .describe_launch_templates()
        .launch_template_ids(id)
        .send()
        .await
        .map_err(|e| classify("DescribeLaunchTemplates", e));
    match read {
        Ok(o) => Ok(o
            .launch_templates()
            .iter()
            .find(|t| t.launch_template_id() == Some(id))
            .map(|t| crate::adopt::pairs(t.tags()))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes launch template `id` (its every version with it); false if it was already gone.
pub async fn delete_launch_template(aws: &Aws, id: &str) -> AwsResult<bool> {
    let r = aws.ec2.delete_launch_template().launch_template_id(id).send().await;
    crate::error::gone_ok(r.map(|_| ()).map_err(|e| classify("DeleteLaunchTemplate", e)))
}
