//! One read of every EC2 resource a workflow's identities name, a call per kind in parallel: lets
//! the first attempt of a create skip its own lookup when the inventory saw nothing there.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::{Filter, Tag};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::{IDENTITY_TAG, Identity, ownership_key};
use crate::throttle::read_retrying;

/// EC2 accepts at most 200 values in one filter.
pub const MAX_KEYS: usize = 200;

/// Whether a create first looks for what an earlier attempt or workflow made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Look up by identity before creating: always safe, and what every retry does.
    First,
    /// An inventory taken by this same execution, under the cluster's lease, found nothing with
    /// this identity, and no earlier attempt of the step exists: create straight away.
    Skip,
}

impl Lookup {
    pub fn first(self) -> bool {
        self == Lookup::First
    }
}

/// Which identity keys were looked for, and which of them exist in the account in any state (a
/// deleting NAT gateway counts).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    pub looked: BTreeSet<String>,
    pub present: BTreeSet<String>,
    /// Something of the cluster (its ownership tag) without an identity tag exists: what
    /// HyperShift's CLI made, which the creates adopt by looking up.
    #[serde(default)]
    pub unclaimed: bool,
}

impl Inventory {
    /// What the first attempt of the step creating `id` may do. Only a cluster with nothing of
    /// its own in the account skips lookups: one that has anything (a re-run, an adoption) may
    /// have more that AWS does not list yet (eventual consistency), and looks up step by step.
    pub fn lookup_for(&self, id: &Identity) -> Lookup {
        if self.present.is_empty() && !self.unclaimed && self.looked.contains(&id.key()) {
            Lookup::Skip
        } else {
            Lookup::First
        }
    }
}

/// What one read found: the wanted identity keys it listed, whether it listed something of the
/// cluster without an identity, and whether a page was left unread.
struct Found {
    keys: BTreeSet<String>,
    unclaimed: bool,
    truncated: bool,
}

fn found<'a>(
    tags: impl Iterator<Item = &'a [Tag]>,
    next_token: Option<&str>,
    owner: &str,
    wanted: &BTreeSet<String>,
) -> Found {
    let mut out =
        Found { keys: BTreeSet::new(), unclaimed: false, truncated: next_token.is_some_and(|t| !t.is_empty()) };
    for tags in tags {
        // Checked on what comes back: some implementations ignore tag filters on some calls.
        if !tags.iter().any(|t| t.key() == Some(owner) && t.value() == Some("owned")) {
            continue;
        }
        match tags.iter().find(|t| t.key() == Some(IDENTITY_TAG)).and_then(|t| t.value()) {
            Some(key) if wanted.contains(key) => {
                out.keys.insert(key.to_string());
            }
            Some(_) => {}
            None => out.unclaimed = true,
        }
    }
    out
}

/// Reads, in parallel, the VPCs, DHCP options, internet gateways, security groups, subnets,
/// addresses, NAT gateways, route tables and VPC endpoints of cluster `infra_id` (its ownership
/// tag): which of `keys` exist, and whether anything of the cluster has no identity (HyperShift's).
pub async fn take_inventory(aws: &Aws, infra_id: &str, keys: &BTreeSet<String>) -> AwsResult<Inventory> {
    let wanted: BTreeSet<String> = keys.iter().take(MAX_KEYS).cloned().collect();
    let owner = ownership_key(infra_id);
    let f = || Filter::builder().name(format!("tag:{owner}")).values("owned").build();
    let (ec2, w, own) = (&aws.ec2, &wanted, owner.as_str());
    // Each read retried in place (nine must succeed together) and boxed (nine SDK futures
    // inline would make one very large future).
    let reads: Vec<BoxFuture<'_, AwsResult<Found>>> = vec![
        read_retrying(|| async {
            let o = ec2.describe_vpcs().filters(f()).send().await.map_err(|e| classify("DescribeVpcs", e))?;
            Ok(found(o.vpcs().iter().map(|r| r.tags()), o.next_token(), own, w))
        })
        .boxed(),
        read_retrying(|| async {
            let o = ec2.describe_dhcp_options().filters(f()).send().await;
            let o = o.map_err(|e| classify("DescribeDhcpOptions", e))?;
            Ok(found(o.dhcp_options().iter().map(|r| r.tags()), o.next_token(), own, w))
        })
        .boxed(),
        read_retrying(|| async {
            let o = ec2.describe_internet_gateways().filters(f()).send().await;
            let o = o.map_err(|e| classify("DescribeInternetGateways", e))?;
            Ok(found(o.internet_gateways().iter().map(|r| r.tags()), o.next_token(), own, w))
        })
        .boxed(),
        read_retrying(|| async {
            let o = ec2.describe_security_groups().filters(f()).send().await;
            let o = o.map_err(|e| classify("DescribeSecurityGroups", e))?;
            Ok(found(o.security_groups().iter().map(|r| r.tags()), o.next_token(), own, w))
        })
        .boxed(),
        read_retrying(|| async {
            let o = ec2.describe_subnets().filters(f()).send().await.map_err(|e| classify("DescribeSubnets", e))?;
            Ok(found(o.subnets().iter().map(|r| r.tags()), o.next_token(), own, w))
        })
        .boxed(),
        read_retrying(|| async {
            let o = ec2.describe_addresses().filters(f()).send().await;
            let o = o.map_err(|e| classify("DescribeAddresses", e))?;
            // DescribeAddresses has no pages.
            Ok(found(o.addresses().iter().map(|r| r.tags()), None, own, w))
        })
        .boxed(),
        read_retrying(|| async {
            let o = ec2.describe_nat_gateways().filter(f()).send().await;
            let o = o.map_err(|e| classify("DescribeNatGateways", e))?;
            Ok(found(o.nat_gateways().iter().map(|r| r.tags()), o.next_token(), own, w))
        })
        .boxed(),
        read_retrying(|| async {
            let o = ec2.describe_route_tables().filters(f()).send().await;
            let o = o.map_err(|e| classify("DescribeRouteTables", e))?;
            Ok(found(o.route_tables().iter().map(|r| r.tags()), o.next_token(), own, w))
        })
        .boxed(),
        read_retrying(|| async {
            let o = ec2.describe_vpc_endpoints().filters(f()).send().await;
            let o = o.map_err(|e| classify("DescribeVpcEndpoints", e))?;
            Ok(found(o.vpc_endpoints().iter().map(|r| r.tags()), o.next_token(), own, w))
        })
        .boxed(),
    ];
    let all = futures::future::try_join_all(reads).await?;
    if all.iter().any(|f| f.truncated) {
        // A page was left unread: nothing may be presumed absent.
        return Ok(Inventory { looked: wanted, present: keys.clone(), unclaimed: true });
    }
    let unclaimed = all.iter().any(|f| f.unclaimed);
    let present = all.into_iter().flat_map(|f| f.keys).collect();
    Ok(Inventory { looked: wanted, present, unclaimed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(role: &str) -> Identity {
        Identity::new("c-abcde", role, None, String::new())
    }

    #[test]
    fn only_a_cluster_with_nothing_of_its_own_skips_lookups_and_only_for_keys_it_read() {
        let looked: BTreeSet<String> = [id("vpc").key(), id("nat").key()].into();
        let empty = Inventory { looked: looked.clone(), present: BTreeSet::new(), unclaimed: false };
        assert_eq!(empty.lookup_for(&id("vpc")), Lookup::Skip);
        assert_eq!(empty.lookup_for(&id("igw")), Lookup::First, "a key it did not read");
        let hypershifts = Inventory { unclaimed: true, ..empty.clone() };
        assert_eq!(hypershifts.lookup_for(&id("vpc")), Lookup::First, "HyperShift's resources: look up, to adopt");
        let live = Inventory { looked, present: [id("nat").key()].into(), unclaimed: false };
        assert_eq!(live.lookup_for(&id("vpc")), Lookup::First, "anything present: look up everything");
    }
}
