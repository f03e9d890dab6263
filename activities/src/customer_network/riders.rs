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
