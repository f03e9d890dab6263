//! The cluster's network: VPC, DHCP options and availability zones here, the internet gateway
//! (`gateway`) and subnets (`subnets`) beside; idempotent ensure and delete-if-exists for each.
//! The IAM actions of all three are declared here, as one area of the policy.

use aws_sdk_ec2::types::{AttributeBooleanValue, NewDhcpConfiguration, ResourceType, Tag, VpcAttributeName};
use serde::{Deserialize, Serialize};

mod gateway;
mod subnets;

pub use gateway::{delete_internet_gateway, ensure_internet_gateway, find_internet_gateways};
pub use subnets::{SubnetInfo, delete_subnet, describe_subnets, ensure_subnet, find_subnets};

use crate::adopt::{adopt_hypershift, itself};
use crate::client::Aws;
use crate::consistency::once_consistent;
use crate::error::{AwsError, AwsResult, classify, gone_ok, missing};
use crate::inventory::Lookup;
use crate::tags::{Identity, TagQuery, filter};

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &[
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeVpcs",
    "ec2:DescribeSubnets",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeVpcAttribute",
];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &[
    "ec2:CreateVpc",
    "ec2:ModifyVpcAttribute",
    "ec2:CreateSubnet",
    "ec2:CreateInternetGateway",
    "ec2:AttachInternetGateway",
    "ec2:CreateDhcpOptions",
    "ec2:AssociateDhcpOptions",
    "ec2:CreateTags",
];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &[
    "ec2:DeleteVpc",
    "ec2:DeleteSubnet",
    "ec2:DetachInternetGateway",
    "ec2:DeleteInternetGateway",
    "ec2:DeleteDhcpOptions",
    // The cluster's own VPC goes back to the default options before its set is deleted.
    "ec2:AssociateDhcpOptions",
];

/// A zone as EC2 names it in this account, and its account-independent id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneInfo {
    pub name: String,
    pub id: String,
}

/// The available Availability Zones of the region, in name order. Local and Wavelength Zones
/// (which DescribeAvailabilityZones also lists once opted into, and which sort first by name)
/// lack NLBs, interface endpoints and most instance types: they are never a cluster's zone.
pub async fn availability_zones(aws: &Aws) -> AwsResult<Vec<ZoneInfo>> {
    let out = aws
        .ec2
        .describe_availability_zones()
        .filters(filter("state", &["available"]))
        .filters(filter("zone-type", &["availability-zone"]))
        .send()
        .await
        .map_err(|e| classify("DescribeAvailabilityZones", e))?;
    let mut zones: Vec<ZoneInfo> = out
        .availability_zones()
        .iter()
        .filter(|z| z.zone_type().is_none_or(|t| t == "availability-zone"))
        .filter_map(|z| {
            Some(ZoneInfo { name: z.zone_name()?.to_string(), id: z.zone_id().unwrap_or_default().to_string() })
        })
        .collect();
    zones.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(zones)
}

/// The VPCs cluster `infra` lives in: those it owns, and a customer's it was provisioned into
/// (carrying its maker's record, `customer_network::marks`). What the cluster's controllers made
/// inside them is the cluster's; what carries its tag elsewhere is a look-alike. One read of the
/// region's VPCs (a handful), judged here: AWS filters cannot ask for one tag *or* another.
pub async fn cluster_vpcs(aws: &Aws, infra: &str) -> AwsResult<Vec<String>> {
    let owned = crate::tags::owned(infra);
    let record = crate::customer_network::marks::record_key(infra);
    let out = aws.ec2.describe_vpcs().send().await.map_err(|e| classify("DescribeVpcs", e))?;
    Ok(out
        .vpcs()
        .iter()
        .filter(|v| owned.matches(v.tags()) || v.tags().iter().any(|t| t.key() == Some(record.as_str())))
        .filter_map(|v| v.vpc_id().map(str::to_string))
        .collect())
}

pub async fn find_vpcs(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    let out = aws.ec2.describe_vpcs().filters(q.filter()).send().await.map_err(|e| classify("DescribeVpcs", e))?;
    Ok(out.vpcs().iter().filter(|v| q.matches(v.tags())).filter_map(|v| v.vpc_id().map(str::to_string)).collect())
}

/// The DHCP options the VPC uses (None for a VPC not found).
async fn dhcp_options_of(aws: &Aws, vpc_id: &str) -> AwsResult<Option<String>> {
    let out = aws.ec2.describe_vpcs().vpc_ids(vpc_id).send().await.map_err(|e| classify("DescribeVpcs", e));
    match out {
        Ok(o) => Ok(o.vpcs().first().and_then(|v| v.dhcp_options_id()).map(str::to_string)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The VPCs using DHCP options `dopt_id`, each with whether it belongs to the set's cluster (the
/// set's ownership tag); None if the set is gone.
pub async fn dhcp_options_users(aws: &Aws, dopt_id: &str) -> AwsResult<Option<Vec<(String, bool)>>> {
    let described = aws.ec2.describe_dhcp_options().dhcp_options_ids(dopt_id).send().await;
    let owner = match described.map_err(|e| classify("DescribeDhcpOptions", e)) {
        Ok(o) => o
            .dhcp_options()
            .first()
            .and_then(|d| d.tags().iter().find(|t| t.key().is_some_and(|k| k.starts_with("kubernetes.io/cluster/"))))
            .cloned(),
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(vpcs_using_dhcp_options(aws, dopt_id, owner.as_ref()).await?))
}

/// The VPCs using DHCP options `dopt_id`, each with whether it has the tag `owner` (key, value).
async fn vpcs_using_dhcp_options(aws: &Aws, dopt_id: &str, owner: Option<&Tag>) -> AwsResult<Vec<(String, bool)>> {
    let out = aws
        .ec2
        .describe_vpcs()
        .filters(filter("dhcp-options-id", &[dopt_id]))
        .send()
        .await
        .map_err(|e| classify("DescribeVpcs", e))?;
    Ok(out
        .vpcs()
        .iter()
        .filter(|v| v.dhcp_options_id() == Some(dopt_id))
        .filter_map(|v| {
            let owned = owner.is_some_and(|o| v.tags().iter().any(|t| t.key() == o.key() && t.value() == o.value()));
            Some((v.vpc_id()?.to_string(), owned))
        })
        .collect())
}

/// A VPC with DNS support and DNS hostnames, found by identity or created.
pub async fn ensure_vpc(aws: &Aws, id: &Identity, cidr: &str, lookup: Lookup) -> AwsResult<String> {
    let found = match lookup.first() {
        true => match find_vpcs(aws, &id.query()).await?.into_iter().next() {
            Some(v) => {
                crate::adopt::mark_if_adopted(aws, &v, id).await?;
                Some(v)
            }
            None => adopt_hypershift(aws, id, "VPC", |q| async move { find_vpcs(aws, &q).await }, itself).await?,
        },
        false => None,
    };
    let (vpc_id, found) = match found {
        Some(v) => (v, true),
        None => {
            let out = aws
                .ec2
                .create_vpc()
                .cidr_block(cidr)
                .tag_specifications(id.tag_spec(ResourceType::Vpc))
                .send()
                .await
                .map_err(|e| classify("CreateVpc", e))?;
            (out.vpc().and_then(|v| v.vpc_id()).ok_or_else(|| missing("CreateVpc", "VPC id"))?.to_string(), false)
        }
    };
    // A VPC found (resumed, or adopted from HyperShift) is read first: one taken over whole is
    // configured already and is not written to. A new one has DNS support already (AWS's
    // default for every VPC: `CreateVpc` documents it) and is given DNS hostnames without asking.
    let (support, hostnames) = match found {
        true => tokio::try_join!(
            vpc_attribute_on(aws, &vpc_id, VpcAttributeName::EnableDnsSupport),
            vpc_attribute_on(aws, &vpc_id, VpcAttributeName::EnableDnsHostnames)
        )?,
        false => (true, false),
    };
    // One attribute per call: AWS refuses both at once, but takes the two calls side by side.
    // In place while the new id settles.
    let vpc = vpc_id.as_str();
    let turn_on = |which: VpcAttributeName, already: bool| async move {
        if already {
            return Ok(());
        }
        once_consistent(|| async {
            let on = AttributeBooleanValue::builder().value(true).build();
            let call = aws.ec2.modify_vpc_attribute().vpc_id(vpc);
            let call = match which {
                VpcAttributeName::EnableDnsHostnames => call.enable_dns_hostnames(on),
                _ => call.enable_dns_support(on),
            };
            call.send().await.map(|_| ()).map_err(|e| classify("ModifyVpcAttribute", e))
        })
        .await
    };
    tokio::try_join!(
        turn_on(VpcAttributeName::EnableDnsSupport, support),
        turn_on(VpcAttributeName::EnableDnsHostnames, hostnames)
    )?;
    Ok(vpc_id)
}

/// Whether the VPC's boolean attribute `which` is on.
pub(crate) async fn vpc_attribute_on(aws: &Aws, vpc_id: &str, which: VpcAttributeName) -> AwsResult<bool> {
    let out = aws
        .ec2
        .describe_vpc_attribute()
        .vpc_id(vpc_id)
        .attribute(which.clone())
        .send()
        .await
        .map_err(|e| classify("DescribeVpcAttribute", e))?;
    let value = match which {
        VpcAttributeName::EnableDnsHostnames => out.enable_dns_hostnames(),
        _ => out.enable_dns_support(),
    };
    Ok(value.and_then(|v| v.value()).unwrap_or(false))
}

pub async fn delete_vpc(aws: &Aws, vpc_id: &str) -> AwsResult<bool> {
    gone_ok(aws.ec2.delete_vpc().vpc_id(vpc_id).send().await.map(|_| ()).map_err(|e| classify("DeleteVpc", e)))
}

pub async fn find_dhcp_options(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    let out = aws
        .ec2
        .describe_dhcp_options()
        .filters(q.filter())
        .send()
        .await
        .map_err(|e| classify("DescribeDhcpOptions", e))?;
    Ok(out
        .dhcp_options()
        .iter()
        .filter(|d| q.matches(d.tags()))
        .filter_map(|d| d.dhcp_options_id().map(str::to_string))
        .collect())
}

/// DHCP options with the region's internal domain, associated with the VPC.
pub async fn ensure_dhcp_options(
    aws: &Aws,
    id: &Identity,
    domain: &str,
    vpc_id: &str,
    lookup: Lookup,
) -> AwsResult<String> {
    let found = match lookup.first() {
        true => match find_dhcp_options(aws, &id.query()).await?.into_iter().next() {
            Some(d) => {
                crate::adopt::mark_if_adopted(aws, &d, id).await?;
                Some(d)
            }
            None => {
                // Theirs that the VPC uses, else theirs that no VPC uses: after two runs, each
                // VPC holds its own.
                let find = |q: TagQuery| async move {
                    let all = find_dhcp_options(aws, &q).await?;
                    if let Some(current) = dhcp_options_of(aws, vpc_id).await?.filter(|d| all.contains(d)) {
                        return Ok(vec![current]);
                    }
                    let mut free = Vec::new();
                    for d in all {
                        if vpcs_using_dhcp_options(aws, &d, None).await?.is_empty() {
                            free.push(d);
                        }
                    }
                    Ok(free)
                };
                adopt_hypershift(aws, id, "DHCP options set", find, itself).await?
            }
        },
        false => None,
    };
    let (dopt, found) = match found {
        Some(d) => (d, true),
        None => {
            let conf = |k: &str, v: &str| NewDhcpConfiguration::builder().key(k).values(v).build();
            let out = aws
                .ec2
                .create_dhcp_options()
                .dhcp_configurations(conf("domain-name", domain))
                .dhcp_configurations(conf("domain-name-servers", "AmazonProvidedDNS"))
                .tag_specifications(id.tag_spec(ResourceType::DhcpOptions))
                .send()
                .await
                .map_err(|e| classify("CreateDhcpOptions", e))?;
            let dopt = out
                .dhcp_options()
                .and_then(|d| d.dhcp_options_id())
                .ok_or_else(|| missing("CreateDhcpOptions", "DHCP options id"))?
                .to_string();
            // Some implementations drop tags given at creation; tagging again is harmless.
            once_consistent(|| async {
                aws.ec2
                    .create_tags()
                    .resources(&dopt)
                    .set_tags(Some(id.ec2_tags()))
                    .send()
                    .await
                    .map_err(|e| classify("CreateTags", e))
            })
            .await?;
            (dopt, false)
        }
    };
    // Found options may be in use already (a resume, or HyperShift's whole cluster): then the
    // association is left as it is.
    if found && dhcp_options_of(aws, vpc_id).await?.as_deref() == Some(dopt.as_str()) {
        return Ok(dopt);
    }
    once_consistent(|| async {
        aws.ec2
            .associate_dhcp_options()
            .dhcp_options_id(&dopt)
            .vpc_id(vpc_id)
            .send()
            .await
            .map_err(|e| classify("AssociateDhcpOptions", e))
    })
    .await?;
    Ok(dopt)
}

/// Subnets in `vpc_id` that are not owned by `infra_id`: someone else's, which teardown never
/// deletes and which keep the VPC from being deleted.
pub async fn subnets_not_owned_in(aws: &Aws, vpc_id: &str, infra_id: &str) -> AwsResult<Vec<String>> {
    let out = aws
        .ec2
        .describe_subnets()
        .filters(filter("vpc-id", &[vpc_id]))
        .send()
        .await
        .map_err(|e| classify("DescribeSubnets", e))?;
    let owned = crate::tags::owned(infra_id);
    Ok(out
        .subnets()
        .iter()
        .filter(|s| s.vpc_id() == Some(vpc_id) && !owned.matches(s.tags()))
        .filter_map(|s| s.subnet_id().map(str::to_string))
        .collect())
}

/// Deletes DHCP options, first moving the VPCs of its own cluster still using them back to the
/// default options. A VPC of anyone else using them is never re-pointed: the delete then fails
/// as a dependency (waited out, then a pause naming the VPC), so its owner decides.
pub async fn delete_dhcp_options(aws: &Aws, dopt_id: &str) -> AwsResult<bool> {
    let Some(users) = dhcp_options_users(aws, dopt_id).await? else { return Ok(false) };
    if let Some((foreign, _)) = users.iter().find(|(_, owned)| !owned) {
        return Err(AwsError {
            operation: "DeleteDhcpOptions",
            code: Some("DependencyViolation".into()),
            message: format!(
                "DHCP options {dopt_id} are also used by VPC {foreign}, which is not this cluster's; associate that VPC with other DHCP options, or leave these"
            ),
            retryable: true,
            ..AwsError::default()
        });
    }
    for (vpc, _) in users {
        let r = aws.ec2.associate_dhcp_options().dhcp_options_id("default").vpc_id(&vpc).send().await;
        gone_ok(r.map(|_| ()).map_err(|e| classify("AssociateDhcpOptions", e)))?;
    }
    gone_ok(
        aws.ec2
            .delete_dhcp_options()
            .dhcp_options_id(dopt_id)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("DeleteDhcpOptions", e)),
    )
}
