//! Other clusters provisioned into a VPC a cluster made: a bring-your-own cluster's record of
//! marks (`infraflow.io/marks/<other>`) or its shared tag on the VPC says that cluster runs in
//! it. The maker's teardown would delete the network from under it (SAFETY-A7937A6 G4), so it
//! stops before its first delete and names them. Reads only.

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::{OWNERSHIP_PREFIX, filter};

use super::marks::MARKS_PREFIX;

/// The other clusters `tags` (a VPC's) say run in it: their record of marks, or their
/// `kubernetes.io/cluster/<other>=shared`. Never `infra` itself.
pub fn riders_in_tags<'a>(infra: &str, tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut found: Vec<String> = tags
        .into_iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(MARKS_PREFIX).or_else(|| k.strip_prefix(OWNERSHIP_PREFIX).filter(|_| v == "shared"))
        })
        .filter(|other| *other != infra && !other.is_empty())
        .map(str::to_string)
        .collect();
    found.sort();
    found.dedup();
    found
}

/// For each of `vpcs` (cluster `infra`'s own) that another cluster runs in: (VPC, those clusters).
pub async fn riders(aws: &Aws, infra: &str, vpcs: &[String]) -> AwsResult<Vec<(String, Vec<String>)>> {
    if vpcs.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = vpcs.iter().map(String::as_str).collect();
    let out = aws
        .ec2
        .describe_vpcs()
        .filters(filter("vpc-id", &ids))
        .send()
        .await
        .map_err(|e| classify("DescribeVpcs", e))?;
    Ok(out
        .vpcs()
        .iter()
        .filter(|v| v.vpc_id().is_some_and(|id| ids.contains(&id)))
        .filter_map(|v| {
            let tags = v.tags().iter().map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default()));
            let others = riders_in_tags(infra, tags);
            (!others.is_empty()).then(|| (v.vpc_id().unwrap_or_default().to_string(), others))
        })
        .collect())
}

/// For each of `endpoints` (cluster `infra`'s own) that another cluster records itself on (a
/// second bring-your-own cluster in the same customer's VPC rides on the first's S3 endpoint):
/// (endpoint, those clusters).
pub async fn riders_on_endpoints(
    aws: &Aws,
    infra: &str,
    endpoints: &[String],
) -> AwsResult<Vec<(String, Vec<String>)>> {
    if endpoints.is_empty() {
        return Ok(Vec::new());
    }
    // One read each, by id (moto serves no `vpc-endpoint-id` filter; a cluster has one or two).
    let mut found = Vec::new();
    for id in endpoints {
        let out = match aws.ec2.describe_vpc_endpoints().vpc_endpoint_ids(id).send().await {
            Ok(out) => out,
            Err(e) => match classify("DescribeVpcEndpoints", e) {
                e if e.is_not_found() => continue,
                e => return Err(e),
            },
        };
        for e in out.vpc_endpoints().iter().filter(|e| e.vpc_endpoint_id() == Some(id.as_str())) {
            let tags = e.tags().iter().map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default()));
            let others = riders_in_tags(infra, tags);
            if !others.is_empty() {
                found.push((id.clone(), others));
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vpc_names_the_other_clusters_marked_or_shared_in_it_never_its_maker() {
        let tags = [
            ("kubernetes.io/cluster/y", "owned"),
            ("kubernetes.io/cluster/x", "shared"),
            ("infraflow.io/marks/x", "w@1 kubernetes.io/cluster/x"),
            ("infraflow.io/marks/y", "w@2"),
            ("kubernetes.io/cluster/z", "shared"),
            ("Name", "y-vpc"),
        ];
        assert_eq!(riders_in_tags("y", tags), ["x", "z"]);
        assert_eq!(riders_in_tags("y", [("kubernetes.io/cluster/y", "owned")]), Vec::<String>::new());
    }
}
