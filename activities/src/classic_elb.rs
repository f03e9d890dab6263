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
    Ok(find_with_dns_names(aws, q).await?.into_iter().map(|(name, _)| name).collect())
}

/// The classic load balancers carrying the tag `q`: (name, DNS name).
pub async fn find_with_dns_names(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, String)>> {
    Ok(find_described(aws, q).await?.into_iter().map(|(name, dns, _)| (name, dns)).collect())
}

/// The classic load balancers carrying the tag `q`, each with its VPC.
pub async fn find_with_vpcs(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, Option<String>)>> {
    Ok(find_described(aws, q).await?.into_iter().map(|(name, _, vpc)| (name, vpc)).collect())
}

/// The classic load balancers carrying the tag `q`: (name, DNS name, VPC).
async fn find_described(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, String, Option<String>)>> {
    let mut all: Vec<(String, String, Option<String>)> = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let o = aws
            .classic_elb
            .describe_load_balancers()
            .set_marker(marker.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeLoadBalancers", e))?;
        all.extend(o.load_balancer_descriptions().iter().filter_map(|l| {
            let vpc = l.vpc_id().map(str::to_string);
            Some((l.load_balancer_name()?.to_string(), l.dns_name().unwrap_or_default().to_string(), vpc))
        }));
        marker = o.next_marker().filter(|m| !m.is_empty()).map(str::to_string);
        if marker.is_none() {
            break;
        }
    }
    let names: Vec<String> = all.iter().map(|(n, _, _)| n.clone()).collect();
    let mut found = Vec::new();
    for chunk in names.chunks(TAGS_PER_CALL) {
        let tagged = match tags_of(aws, chunk).await {
            Ok(t) => t,
            // One of the chunk was deleted between the two reads (other clusters' cloud providers
            // make and remove load balancers all the time): AWS then answers for none of the
            // chunk, so each name is asked alone, and only the vanished one is left out.
            Err(e) if e.code_is("LoadBalancerNotFound") => {
                let mut each = Vec::new();
                for name in chunk {
                    match tags_of(aws, std::slice::from_ref(name)).await {
                        Ok(t) => each.extend(t),
                        Err(e) if e.code_is("LoadBalancerNotFound") => {}
                        Err(e) => return Err(e),
                    }
                }
                each
            }
            Err(e) => return Err(e),
        };
        for (name, tags) in tagged {
            if q.matches_pairs(&tags) {
                found.extend(all.iter().filter(|(n, _, _)| *n == name).cloned());
            }
        }
    }
    Ok(found)
}

/// The tags of each of `names` (at most `TAGS_PER_CALL`).
async fn tags_of(aws: &Aws, names: &[String]) -> AwsResult<Vec<(String, Vec<(String, String)>)>> {
    let r = aws
        .classic_elb
        .describe_tags()
        .set_load_balancer_names(Some(names.to_vec()))
        .send()
        .await
        .map_err(|e| classify("DescribeTags", e))?;
    Ok(r.tag_descriptions()
        .iter()
        .filter_map(|d| {
            let tags =
                d.tags().iter().map(|t| (t.key().to_string(), t.value().unwrap_or_default().to_string())).collect();
            Some((d.load_balancer_name()?.to_string(), tags))
        })
        .collect())
}

/// The tags classic load balancer `name` carries now; None if it is gone.
pub(crate) async fn tags_now(aws: &Aws, name: &str) -> AwsResult<Option<Vec<(String, String)>>> {
    match tags_of(aws, &[name.to_string()]).await {
        Ok(found) => Ok(found.into_iter().find(|(n, _)| n == name).map(|(_, tags)| tags)),
        Err(e) if e.code_is("LoadBalancerNotFound") => Ok(None),
        Err(e) => Err(e),
    }
}

/// Which classic load balancer of that name is there now: when it was made (a name deleted and
/// made again has another date); None if it is gone or AWS does not say.
pub async fn incarnation(aws: &Aws, name: &str) -> AwsResult<Option<String>> {
    let r = aws.classic_elb.describe_load_balancers().load_balancer_names(name).send().await;
    match r.map_err(|e| classify("DescribeLoadBalancers", e)) {
        Ok(out) => Ok(out
            .load_balancer_descriptions()
            .iter()
            .find(|d| d.load_balancer_name() == Some(name))
            .and_then(|d| d.created_time())
            .map(|t| format!("{}.{:09}", t.secs(), t.subsec_nanos()))),
        Err(e) if e.code_is("LoadBalancerNotFound") => Ok(None),
        Err(e) => Err(e),
    }
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
    crate::error::gone_ok(r.map(|_| ()).map_err(|e| classify("DeleteLoadBalancer", e)))
}
