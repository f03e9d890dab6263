//! The Resource Groups Tagging API: every resource of the region, of any service, that still
//! carries a cluster's ownership tag — the teardown's last word, which names what it does not
//! know how to delete instead of calling the cluster gone.

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::resources::Kind;
use crate::tags::{OWNED, ownership_key};

/// The IAM actions this file calls.
pub const IAM_READ: &[&str] = &["tag:GetResources"];
pub const IAM_WRITE: &[&str] = &[];
pub const IAM_DELETE: &[&str] = &[];

/// `ec2:vpc` of `arn:aws:ec2:us-east-1:123:vpc/vpc-1`; `s3:` of a bucket (no type).
fn service_and_type(arn: &str) -> String {
    let mut parts = arn.splitn(6, ':');
    let service = parts.nth(2).unwrap_or_default();
    let resource = parts.nth(2).unwrap_or_default();
    let kind = resource.split(['/', ':']).next().filter(|_| resource.contains(['/', ':'])).unwrap_or_default();
    format!("{service}:{kind}")
}

/// Whether a teardown that deletes `kinds` finds and judges `arn` itself (a resource of those
/// kinds; a bucket only when named like cluster `infra`'s registry): what the tagging API lists
/// for a while after its delete on AWS (it is eventually consistent), and whose proof is the
/// discovery rounds before.
pub fn known(arn: &str, infra: &str, kinds: &[Kind]) -> bool {
    let t = service_and_type(arn);
    if t == Kind::RegistryBucket.arn_type() {
        let bucket = arn.rsplit(':').next().unwrap_or_default();
        return kinds.contains(&Kind::RegistryBucket) && bucket.starts_with(&crate::s3::registry_prefix(infra));
    }
    kinds.iter().any(|k| k.arn_type() == t)
}

/// The ARNs of every resource of the region that carries `kubernetes.io/cluster/<infra>=owned`.
pub async fn owned_arns(aws: &Aws, infra: &str) -> AwsResult<Vec<String>> {
    let filter =
        aws_sdk_resourcegroupstagging::types::TagFilter::builder().key(ownership_key(infra)).values(OWNED).build();
    let mut arns = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = aws
            .tagging
            .get_resources()
            .tag_filters(filter.clone())
            .set_pagination_token(token.clone())
            .send()
            .await
            .map_err(|e| classify("GetResources", e))?;
        arns.extend(out.resource_tag_mapping_list().iter().filter_map(|m| m.resource_arn().map(str::to_string)));
        token = out.pagination_token().filter(|t| !t.is_empty()).map(str::to_string);
        if token.is_none() {
            arns.sort();
            arns.dedup();
            return Ok(arns);
        }
    }
}

/// What still carries the cluster's tag and is of none of `kinds` (those a teardown deletes).
pub async fn left_unknown(aws: &Aws, infra: &str, kinds: &[Kind]) -> AwsResult<Vec<String>> {
    Ok(owned_arns(aws, infra).await?.into_iter().filter(|a| !known(a, infra, kinds)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arns_are_told_apart_by_service_and_resource_type() {
        let known = |arn| known(arn, "c1", &Kind::TEARDOWN_ORDER);
        assert!(known("arn:aws:ec2:us-east-1:123456789012:vpc/vpc-1"));
        assert!(known("arn:aws:ec2:us-east-1::snapshot/snap-1"));
        assert!(known("arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/net/x/y"));
        assert!(!known("arn:aws:ec2:us-east-1:123456789012:customer-gateway/cgw-1"));
        assert!(known("arn:aws:s3:::c1-image-registry-us-east-1-abc"), "the registry's bucket");
        assert!(!known("arn:aws:s3:::c1-logs"), "a tagged bucket of another name is not deleted");
        assert!(!known("arn:aws:s3:::c10-image-registry-us-east-1-abc"), "nor another cluster's");
        assert!(!known("arn:aws:sqs:us-east-1:123456789012:queue"));
        assert!(!known("arn:aws:logs:us-east-1:123456789012:log-group:x"));
        assert_eq!(service_and_type("arn:aws:logs:us-east-1:1:log-group:x"), "logs:log-group");
        let template = "arn:aws:ec2:us-east-1:123456789012:launch-template/lt-1";
        assert!(known(template), "Karpenter's templates are judged by teardown's discovery");
        let before_karpenter: Vec<Kind> =
            Kind::TEARDOWN_ORDER.into_iter().filter(|k| *k != Kind::LaunchTemplate).collect();
        assert!(!super::known(template, "c1", &before_karpenter), "a teardown that does not judge them names them");
    }
}
