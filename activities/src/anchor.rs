//! A cluster's anchor: the one resource whose tags are its creator's word about the whole
//! cluster — when it expires, which region it is in. Any other resource that carries the
//! cluster's name proves nothing about the cluster (anyone with `CreateTags`, and every backup
//! tool that copies tags, can write the same tags), so facts about the cluster are read here only.

use crate::census::Tagged;
use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::{CREATED_BY_TAG, IDENTITY_TAG, REGION_TAG, owned};

/// Which maker's rule made a resource the cluster's anchor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Maker {
    /// infraflow's provision: the VPC with identity `<infraID>/vpc` and a creator.
    InfraflowVpc,
    /// HyperShift's CLI, by its own lookup: the VPC tagged owned and named `<infraID>-vpc`, no
    /// identity tag.
    HypershiftVpc,
    /// infraflow's create-iam of an IAM-only cluster: the OIDC provider with identity
    /// `<infraID>/oidc-provider`, a creator, and this region recorded.
    InfraflowOidcProvider,
}

/// Whether `r` is the anchor of cluster `infra` in `region`, and by whose rule. Never a resource
/// that names a second cluster as owner: a tag of two clusters is nobody's word about either.
pub fn anchor_of(infra: &str, region: &str, r: &Tagged) -> Option<Maker> {
    let owners: Vec<&str> = r.owners().collect();
    if owners != [infra] {
        return None;
    }
    let identity = r.tag(IDENTITY_TAG);
    let has_creator = r.tag(CREATED_BY_TAG).is_some_and(|c| !c.is_empty());
    match r.kind {
        "vpc" if identity == Some(&format!("{infra}/vpc")) && has_creator => Some(Maker::InfraflowVpc),
        "vpc" if identity.is_none() && r.tag("Name") == Some(&format!("{infra}-vpc")) => Some(Maker::HypershiftVpc),
        "oidc-provider"
            if identity == Some(&format!("{infra}/oidc-provider"))
                && has_creator
                && r.tag(REGION_TAG) == Some(region) =>
        {
            Some(Maker::InfraflowOidcProvider)
        }
        _ => None,
    }
}

/// The anchors of cluster `infra` among `census` (its owned resources, and the VPCs that carry
/// its record of marks). Whatever is not sure to be the cluster's maker's word is no anchor:
/// - a cluster whose record of marks sits on a VPC was provisioned into a customer's network: no
///   VPC anchors it (SAFETY-A7937A6 G3: anyone's `<infraID>-vpc` expired a live one);
/// - a VPC by HyperShift's rule anchors only while it holds subnets owned by the cluster, as
///   HyperShift's own lookup finds them (a lone VPC named so is anyone's);
/// - an OIDC provider anchors an IAM-only cluster, and beside HyperShift's VPC always (an
///   undated provider then keeps the cluster unexpired: that VPC may be anyone's); beside
///   infraflow's VPC only with a date of its own (create-cluster's IAM part carries none: its
///   VPC's date is the cluster's). A VPC never supersedes a provider's word: the janitor takes
///   the latest date over them all.
pub fn anchors<'a>(infra: &str, region: &str, census: &[&'a Tagged]) -> Vec<&'a Tagged> {
    let customers = census.iter().any(|r| r.kind == "vpc" && r.marked_for().any(|m| m == infra));
    let holds_subnets = |vpc: &Tagged| {
        census.iter().any(|s| s.kind == "subnet" && s.vpc.as_deref() == Some(vpc.id.as_str()) && s.owners().eq([infra]))
    };
    let all: Vec<&Tagged> = census
        .iter()
        .copied()
        .filter(|r| match anchor_of(infra, region, r) {
            Some(Maker::InfraflowVpc) => !customers,
            Some(Maker::HypershiftVpc) => !customers && holds_subnets(r),
            Some(Maker::InfraflowOidcProvider) => true,
            None => false,
        })
        .collect();
    let infraflows_vpc = all.iter().any(|r| anchor_of(infra, region, r) == Some(Maker::InfraflowVpc));
    if infraflows_vpc {
        all.into_iter().filter(|r| r.kind == "vpc" || r.tag(crate::tags::EXPIRATION_TAG).is_some()).collect()
    } else {
        all
    }
}

/// The live anchors of `infra` as AWS holds them now, in `aws`'s region: its VPCs (by the
/// ownership tag) and, when `oidc` names one, that OIDC provider. What a sweep's teardown reads
/// before each round, to know the cluster it was sent for is still the one it will delete.
pub async fn read_anchors(aws: &Aws, infra: &str, oidc: Option<&str>) -> AwsResult<Vec<Tagged>> {
    let q = owned(infra);
    let record = crate::customer_network::marks::record_key(infra);
    let by_record = aws_sdk_ec2::types::Filter::builder().name("tag-key").values(&record).build();
    let (vpcs, customers, subnets) = futures::try_join!(
        async { aws.ec2.describe_vpcs().filters(q.filter()).send().await.map_err(|e| classify("DescribeVpcs", e)) },
        async { aws.ec2.describe_vpcs().filters(by_record).send().await.map_err(|e| classify("DescribeVpcs", e)) },
        async {
            aws.ec2.describe_subnets().filters(q.filter()).send().await.map_err(|e| classify("DescribeSubnets", e))
        },
    )?;
    let vpc = |v: &aws_sdk_ec2::types::Vpc| Tagged {
        kind: "vpc",
        id: v.vpc_id().unwrap_or_default().to_string(),
        tags: crate::adopt::pairs(v.tags()),
        regional: true,
        vpc: None,
    };
    let mut found: Vec<Tagged> = vpcs.vpcs().iter().filter(|v| q.matches(v.tags())).map(vpc).collect();
    found.extend(customers.vpcs().iter().filter(|v| !q.matches(v.tags())).map(vpc));
    found.extend(subnets.subnets().iter().filter(|s| q.matches(s.tags())).map(|s| Tagged {
        kind: "subnet",
        id: s.subnet_id().unwrap_or_default().to_string(),
        tags: crate::adopt::pairs(s.tags()),
        regional: true,
        vpc: s.vpc_id().map(str::to_string),
    }));
    if let Some(arn) = oidc
        && let Some(tags) = crate::iam::oidc_provider_tags(aws, arn).await?
    {
        let tags = tags.iter().map(|t| (t.key().to_string(), t.value().to_string())).collect();
        found.push(Tagged { kind: "oidc-provider", id: arn.to_string(), tags, regional: false, vpc: None });
    }
    let region = aws.region.clone();
    let refs: Vec<&Tagged> = found.iter().collect();
    let keep: Vec<String> = anchors(infra, &region, &refs).iter().map(|r| r.id.clone()).collect();
    Ok(found.into_iter().filter(|r| keep.contains(&r.id)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(kind: &'static str, id: &str, tags: &[(&str, &str)]) -> Tagged {
        Tagged {
            kind,
            id: id.into(),
            tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            regional: kind != "oidc-provider",
            vpc: None,
        }
    }

    #[test]
    fn only_the_makers_vpc_or_provider_anchors_a_cluster() {
        let own = ("kubernetes.io/cluster/c1", "owned");
        let ours = res("vpc", "vpc-1", &[own, (IDENTITY_TAG, "c1/vpc"), (CREATED_BY_TAG, "w@1")]);
        assert_eq!(anchor_of("c1", "us-east-1", &ours), Some(Maker::InfraflowVpc));
        let hypershift = res("vpc", "vpc-2", &[own, ("Name", "c1-vpc")]);
        assert_eq!(anchor_of("c1", "us-east-1", &hypershift), Some(Maker::HypershiftVpc));
        let group = res("security-group", "sg-1", &[own, (IDENTITY_TAG, "c1/vpc"), (CREATED_BY_TAG, "w@1")]);
        assert_eq!(anchor_of("c1", "us-east-1", &group), None, "a group is no cluster's word");
        let no_creator = res("vpc", "vpc-3", &[own, (IDENTITY_TAG, "c1/vpc")]);
        assert_eq!(anchor_of("c1", "us-east-1", &no_creator), None);
        let two = res("vpc", "vpc-4", &[own, ("kubernetes.io/cluster/c2", "owned"), ("Name", "c1-vpc")]);
        assert_eq!(anchor_of("c1", "us-east-1", &two), None, "a VPC of two clusters anchors neither");
        assert_eq!(anchor_of("c2", "us-east-1", &two), None);
        let p = |region| {
            res(
                "oidc-provider",
                "arn",
                &[own, (IDENTITY_TAG, "c1/oidc-provider"), (CREATED_BY_TAG, "w"), (REGION_TAG, region)],
            )
        };
        assert_eq!(anchor_of("c1", "us-east-1", &p("us-east-1")), Some(Maker::InfraflowOidcProvider));
        assert_eq!(anchor_of("c1", "us-east-1", &p("us-west-2")), None, "another region's IAM");
        let provider = p("us-east-1");
        assert_eq!(anchors("c1", "us-east-1", &[&provider, &ours]), vec![&ours], "a VPC, when there is one");
        assert_eq!(anchors("c1", "us-east-1", &[&provider, &group]), vec![&provider]);
    }
}
