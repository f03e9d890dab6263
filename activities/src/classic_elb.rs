//! Classic load balancers (ELBv1). infraflow never creates one: a hosted cluster's cloud provider
//! does, for every `Service` of type LoadBalancer, tagged `kubernetes.io/cluster/<infraID>=owned`.
//! Teardown finds them by that tag (never by VPC membership, which would take a foreign load
//! balancer placed in the cluster's VPC) and deletes them before the subnets and groups they use.

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::TagQuery;

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &["elasticloadbalancing:DescribeLoadBalancers", "elasticloadbalancing:DescribeTags"];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &[];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["elasticloadbalancing:DeleteLoadBalancer"];

/// DescribeTags takes at most 20 load balancer names per call.
const TAGS_PER_CALL: usize = 20;

/// Names of the classic load balancers carrying the tag `q`, across every page.
pub async fn find_classic_load_balancers(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    let mut names = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let o = aws
            .classic_elb
            .describe_load_balancers()
            .set_marker(marker.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeLoadBalancers", e))?;
        names.extend(o.load_balancer_descriptions().iter().filter_map(|l| l.load_balancer_name().map(str::to_string)));
        marker = o.next_marker().filter(|m| !m.is_empty()).map(str::to_string);
        if marker.is_none() {
            break;
        }
    }
    let mut found = Vec::new();
    for chunk in names.chunks(TAGS_PER_CALL) {
        let r = aws
            .classic_elb
            .describe_tags()
            .set_load_balancer_names(Some(chunk.to_vec()))
            .send()
            .await
            .map_err(|e| classify("DescribeTags", e));
        let r = match r {
            // Deleted between the two reads: nothing of it to find.
            Err(e) if e.code_is("LoadBalancerNotFound") => continue,
            r => r?,
        };
        for d in r.tag_descriptions() {
            let tags: Vec<(String, String)> =
                d.tags().iter().map(|t| (t.key().to_string(), t.value().unwrap_or_default().to_string())).collect();
            if q.matches_pairs(&tags)
                && let Some(name) = d.load_balancer_name()
            {
                found.push(name.to_string());
            }
        }
    }
    Ok(found)
}

/// Deletes the classic load balancer `name`; false if it was already gone. (DeleteLoadBalancer
/// succeeds on a missing name, so "already gone" is read first: teardown reports what it removed.)
/// Its network interfaces outlive it for minutes; the subnets and groups they hold wait them out.
pub async fn delete_classic_load_balancer(aws: &Aws, name: &str) -> AwsResult<bool> {
    let exists = aws.classic_elb.describe_load_balancers().load_balancer_names(name).send().await;
    match exists.map_err(|e| classify("DescribeLoadBalancers", e)) {
        Err(e) if e.code_is("LoadBalancerNotFound") => return Ok(false),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    let r = aws.classic_elb.delete_load_balancer().load_balancer_name(name).send().await;
    crate::network::gone_ok(r.map(|_| ()).map_err(|e| classify("DeleteLoadBalancer", e)))
}
