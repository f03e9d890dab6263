//! One read of every EC2 resource a workflow's identities name, a call per kind in parallel: lets
//! the first attempt of a create skip its own lookup when the inventory saw nothing there.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::{Filter, Tag};
use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::error::{AwsResult, classify};
use crate::tags::{IDENTITY_TAG, Identity};
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
}

impl Inventory {
    /// What the first attempt of the step creating `id` may do. Only a cluster with nothing of
    /// its own in the account skips lookups: one that has anything (a re-run, an adoption) may
    /// have more that AWS does not list yet (eventual consistency), and looks up step by step.
    pub fn lookup_for(&self, id: &Identity) -> Lookup {
        if self.present.is_empty() && self.looked.contains(&id.key()) { Lookup::Skip } else { Lookup::First }
    }
}

fn keys_in<'a>(tags: impl Iterator<Item = &'a [Tag]>, wanted: &BTreeSet<String>, into: &mut BTreeSet<String>) {
    for tag in tags.flatten() {
        // Checked on what comes back: some implementations ignore tag filters on some calls.
        if tag.key() == Some(IDENTITY_TAG)
            && let Some(v) = tag.value()
            && wanted.contains(v)
        {
            into.insert(v.to_string());
        }
    }
}

/// Reads, in parallel, the VPCs, DHCP options, internet gateways, security groups, subnets,
/// addresses, NAT gateways, route tables and VPC endpoints tagged with one of `keys`.
pub async fn take_inventory(aws: &Aws, keys: &BTreeSet<String>) -> AwsResult<Inventory> {
    let wanted: BTreeSet<String> = keys.iter().take(MAX_KEYS).cloned().collect();
    let f = || {
        Filter::builder().name(format!("tag:{IDENTITY_TAG}")).set_values(Some(wanted.iter().cloned().collect())).build()
    };
    let ec2 = &aws.ec2;
    // Each read retried in place (nine must succeed together) and boxed (nine SDK futures
    // inline would make one very large future).
    let (vpcs, dopts, igws, groups, subnets, addrs, nats, tables, endpoints) = tokio::try_join!(
        read_retrying(|| async {
            ec2.describe_vpcs().filters(f()).send().await.map_err(|e| classify("DescribeVpcs", e))
        })
        .boxed(),
        read_retrying(|| async {
            ec2.describe_dhcp_options().filters(f()).send().await.map_err(|e| classify("DescribeDhcpOptions", e))
        })
        .boxed(),
        read_retrying(|| async {
            ec2.describe_internet_gateways()
                .filters(f())
                .send()
                .await
                .map_err(|e| classify("DescribeInternetGateways", e))
        })
        .boxed(),
        read_retrying(|| async {
            ec2.describe_security_groups().filters(f()).send().await.map_err(|e| classify("DescribeSecurityGroups", e))
        })
        .boxed(),
        read_retrying(|| async {
            ec2.describe_subnets().filters(f()).send().await.map_err(|e| classify("DescribeSubnets", e))
        })
        .boxed(),
        read_retrying(|| async {
            ec2.describe_addresses().filters(f()).send().await.map_err(|e| classify("DescribeAddresses", e))
        })
        .boxed(),
        read_retrying(|| async {
            ec2.describe_nat_gateways().filter(f()).send().await.map_err(|e| classify("DescribeNatGateways", e))
        })
        .boxed(),
        read_retrying(|| async {
            ec2.describe_route_tables().filters(f()).send().await.map_err(|e| classify("DescribeRouteTables", e))
        })
        .boxed(),
        read_retrying(|| async {
            ec2.describe_vpc_endpoints().filters(f()).send().await.map_err(|e| classify("DescribeVpcEndpoints", e))
        })
        .boxed(),
    )?;
    let mut present = BTreeSet::new();
    keys_in(vpcs.vpcs().iter().map(|r| r.tags()), &wanted, &mut present);
    keys_in(dopts.dhcp_options().iter().map(|r| r.tags()), &wanted, &mut present);
    keys_in(igws.internet_gateways().iter().map(|r| r.tags()), &wanted, &mut present);
    keys_in(groups.security_groups().iter().map(|r| r.tags()), &wanted, &mut present);
    keys_in(subnets.subnets().iter().map(|r| r.tags()), &wanted, &mut present);
    keys_in(addrs.addresses().iter().map(|r| r.tags()), &wanted, &mut present);
    keys_in(nats.nat_gateways().iter().map(|r| r.tags()), &wanted, &mut present);
    keys_in(tables.route_tables().iter().map(|r| r.tags()), &wanted, &mut present);
    keys_in(endpoints.vpc_endpoints().iter().map(|r| r.tags()), &wanted, &mut present);
    let truncated = [
        vpcs.next_token(),
        dopts.next_token(),
        igws.next_token(),
        groups.next_token(),
        subnets.next_token(),
        nats.next_token(),
        tables.next_token(),
        endpoints.next_token(),
    ]
    .iter()
    .any(|t| t.is_some_and(|t| !t.is_empty()));
    if truncated {
        // A page was left unread: nothing may be presumed absent.
        return Ok(Inventory { looked: wanted, present: keys.clone() });
    }
    Ok(Inventory { looked: wanted, present })
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
        let empty = Inventory { looked: looked.clone(), present: BTreeSet::new() };
        assert_eq!(empty.lookup_for(&id("vpc")), Lookup::Skip);
        assert_eq!(empty.lookup_for(&id("igw")), Lookup::First, "a key it did not read");
        let live = Inventory { looked, present: [id("nat").key()].into() };
        assert_eq!(live.lookup_for(&id("vpc")), Lookup::First, "anything present: look up everything");
    }
}
