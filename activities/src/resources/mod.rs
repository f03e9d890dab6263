//! Every kind of resource infraflow creates, with one way to find them (by identity or by cluster
//! ownership) and one way to delete each: what compensation and teardown are built from.
//!
//! Why split so: `resources/` was split by concept when it passed 600 lines — this file (305 lines)
//! is the dispatch of finds by kind and the by-id tag reads, `delete` how each kind is deleted and
//! the checks made against AWS just before, `kind` every `Kind`, `scope` what a lookup reads.

use crate::client::Aws;
use crate::error::AwsResult;
use crate::tags::{IDENTITY_TAG, TagQuery, owned};
use crate::{classic_elb, compute, dns, elb, endpoints, iam, nat, network, privatelink, routing, s3, security};

mod delete;
pub(crate) mod kind;
pub(crate) mod scope;
pub use delete::{delete, delete_by_id_if_created_by, delete_if_still_the_clusters, delete_in_scope, incarnation};
pub use kind::Kind;
pub use scope::Scope;

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &["ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets", "ec2:DescribeTags"];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &[];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &[];

fn query(scope: &Scope) -> TagQuery {
    match scope {
        Scope::Identity(key) => TagQuery::new(IDENTITY_TAG, key.clone()),
        Scope::CreatedBy { identity, created_by } => {
            TagQuery { created_by: Some(created_by.clone()), ..TagQuery::new(IDENTITY_TAG, identity.clone()) }
        }
        Scope::Owned(infra) => owned(infra),
    }
}

/// `<infraID>-`: how every IAM name of the cluster starts.
fn name_prefix(scope: &Scope) -> String {
    let infra = match scope {
        Scope::Owned(infra) => infra.as_str(),
        Scope::Identity(key) | Scope::CreatedBy { identity: key, .. } => key.split('/').next().unwrap_or_default(),
    };
    format!("{infra}-")
}

/// Ids of the resources of `kind` in `scope` that are to be deleted: in any state but
/// deleted (a failed endpoint or service still occupies its VPC and must go too).
pub async fn find(aws: &Aws, kind: Kind, scope: &Scope) -> AwsResult<Vec<String>> {
    let mut q = query(scope);
    if let Scope::Owned(_) = scope {
        // IAM is global: what a cluster of this infraID in another region uses is not this
        // (regional) teardown's to delete.
        q.region = Some(aws.region.clone());
    }
    find_matching(aws, kind, scope, q).await
}

/// The IAM of cluster `infra` that records another region than `aws`'s: what a teardown here
/// leaves (`--dry-run` names it).
pub async fn find_iam_of_other_regions(aws: &Aws, infra: &str) -> AwsResult<Vec<(Kind, String)>> {
    let scope = Scope::Owned(infra.to_string());
    let mut elsewhere = Vec::new();
    for kind in [Kind::InstanceProfile, Kind::IamRole, Kind::OidcProvider] {
        let here = find(aws, kind, &scope).await?;
        let all = find_matching(aws, kind, &scope, query(&scope)).await?;
        elsewhere.extend(all.into_iter().filter(|id| !here.contains(id)).map(|id| (kind, id)));
    }
    Ok(elsewhere)
}

async fn find_matching(aws: &Aws, kind: Kind, scope: &Scope, q: TagQuery) -> AwsResult<Vec<String>> {
    let f = &q;
    if let Scope::Owned(infra) = scope
        && crate::look_alikes::judged_by_vpc(kind)
    {
        // A cluster's only inside its VPCs: what is tagged for it elsewhere is left, named.
        let (mut ids, _) = crate::look_alikes::split_by_vpc(aws, kind, infra, f).await?;
        ids.sort();
        ids.dedup();
        return Ok(ids);
    }
    let mut ids = match kind {
        Kind::Instance => compute::find_instances(aws, f).await?.into_iter().map(|m| m.instance_id).collect(),
        // Only Karpenter's, on its own marks, in the cluster's VPCs: the rest is left, named.
        Kind::LaunchTemplate => match scope {
            Scope::Owned(infra) => crate::look_alikes::split_launch_templates(aws, infra, f).await?.0,
            _ => Vec::new(),
        },
        // Only what a controller of the cluster is shown to have made: the rest is left, named.
        Kind::Volume | Kind::Snapshot | Kind::NetworkInterface => {
            crate::look_alikes::split(aws, kind, scope, f).await?.0
        }
        // Only a teardown looks for them: no identity of infraflow's names a bucket.
        Kind::RegistryBucket => match scope {
            Scope::Owned(infra) => s3::find_registry_buckets(aws, infra, f).await?.owned,
            _ => Vec::new(),
        },
        Kind::VpcEndpoint => {
            endpoints::find_vpc_endpoints_to_delete(aws, f).await?.into_iter().map(|(id, _)| id).collect()
        }
        Kind::EndpointService => {
            privatelink::find_endpoint_services_to_delete(aws, f).await?.into_iter().map(|s| s.service_id).collect()
        }
        Kind::ClassicLoadBalancer => classic_elb::find_classic_load_balancers(aws, f).await?,
        Kind::LoadBalancer => elb::find_load_balancers(aws, f).await?,
        Kind::TargetGroup => elb::find_target_groups(aws, f).await?,
        Kind::NatGateway => nat::find_nat_gateways(aws, f).await?.into_iter().map(|(id, _)| id).collect(),
        Kind::ElasticIp => nat::find_addresses(aws, f).await?,
        Kind::RouteTable => routing::find_route_tables(aws, f).await?,
        Kind::SecurityGroup => security::find_security_groups(aws, f).await?,
        Kind::Subnet => network::find_subnets(aws, f).await?.into_iter().map(|s| s.subnet_id).collect(),
        Kind::InternetGateway => network::find_internet_gateways(aws, f).await?,
        Kind::Vpc => network::find_vpcs(aws, f).await?,
        Kind::DhcpOptions => network::find_dhcp_options(aws, f).await?,
        // IAM names start with the cluster's infraID (names are the ids).
        Kind::InstanceProfile => iam::find_instance_profiles(aws, &name_prefix(scope), f).await?,
        Kind::IamRole => iam::find_roles(aws, &name_prefix(scope), f).await?,
        Kind::OidcProvider => iam::find_oidc_providers(aws, f).await?,
        Kind::HostedZone => match scope {
            Scope::Owned(infra) => {
                let vpcs = network::cluster_vpcs(aws, infra).await?;
                dns::find_owned_zones(aws, infra, &vpcs).await?
            }
            Scope::Identity(key) => dns::find_zones_by_identity(aws, key, None).await?,
            Scope::CreatedBy { identity, created_by } => {
                dns::find_zones_by_identity(aws, identity, Some(created_by)).await?
            }
        },
    };
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// `find`, asked again in place (for up to 30 s) while it fails in a way a retry can help: in an
/// account where other clusters are torn down at the same time, a read that lists and then reads
/// each listed resource meets ones deleted in between. Retried here, one kind costs one more read;
/// retried as a step, every kind of a teardown's discovery is read again.
pub async fn find_retrying_in_place(aws: &Aws, kind: Kind, scope: &Scope) -> AwsResult<Vec<String>> {
    crate::consistency::retry_in_place(
        || find(aws, kind, scope),
        |e| e.retryable,
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(250),
        std::time::Duration::from_secs(4),
    )
    .await
}

/// The prefix of the ids of an EC2 kind (None: not an EC2 id, or not told apart by prefix).
fn ec2_id_prefix(kind: Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::Instance => "i-",
        Kind::Volume => "vol-",
        Kind::Snapshot => "snap-",
        Kind::NetworkInterface => "eni-",
        Kind::VpcEndpoint => "vpce-",
        Kind::NatGateway => "nat-",
        Kind::ElasticIp => "eipalloc-",
        Kind::RouteTable => "rtb-",
        Kind::SecurityGroup => "sg-",
        Kind::Subnet => "subnet-",
        Kind::InternetGateway => "igw-",
        Kind::Vpc => "vpc-",
        Kind::DhcpOptions => "dopt-",
        _ => return None,
    })
}

/// The EC2 ids of `kind` anywhere in `value` (a step's output), each once.
pub fn ids_of_kind(kind: Kind, value: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s)
                if s.starts_with(prefix) && !s.starts_with("vpce-svc-") && !out.contains(s) =>
            {
                out.push(s.clone());
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, prefix, out)),
            serde_json::Value::Object(m) => m.values().for_each(|x| walk(x, prefix, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Some(prefix) = ec2_id_prefix(kind) {
        walk(value, prefix, &mut out);
    }
    out
}

/// The tags of EC2 resource `id`, read from the resource's own description by id — consistent
/// once the id is known, where DescribeTags reads the tag index, which lags as tag filters do
/// (SAFETY-7243D60 N10). None if it is gone or `kind` is not an EC2 kind.
pub(crate) async fn tags_by_id(aws: &Aws, kind: Kind, id: &str) -> AwsResult<Option<Vec<(String, String)>>> {
    use crate::adopt::pairs;
    use crate::error::classify;
    let ec2 = &aws.ec2;
    let id = id.to_string();
    let read: AwsResult<Option<Vec<(String, String)>>> = match kind {
        Kind::Instance => {
            ec2.describe_instances().instance_ids(&id).send().await.map_err(|e| classify("DescribeInstances", e)).map(
                |o| {
                    o.reservations()
                        .iter()
                        .flat_map(|r| r.instances())
                        .find(|i| i.instance_id() == Some(&id))
                        .map(|i| pairs(i.tags()))
                },
            )
        }
        Kind::LaunchTemplate => compute::launch_template_tags(aws, &id).await,
        Kind::VpcEndpoint => ec2
            .describe_vpc_endpoints()
            .vpc_endpoint_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeVpcEndpoints", e))
            .map(|o| o.vpc_endpoints().iter().find(|x| x.vpc_endpoint_id() == Some(&id)).map(|x| pairs(x.tags()))),
        Kind::EndpointService => ec2
            .describe_vpc_endpoint_service_configurations()
            .service_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeVpcEndpointServiceConfigurations", e))
            .map(|o| o.service_configurations().iter().find(|x| x.service_id() == Some(&id)).map(|x| pairs(x.tags()))),
        Kind::NatGateway => ec2
            .describe_nat_gateways()
            .nat_gateway_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeNatGateways", e))
            .map(|o| o.nat_gateways().iter().find(|x| x.nat_gateway_id() == Some(&id)).map(|x| pairs(x.tags()))),
        Kind::ElasticIp => ec2
            .describe_addresses()
            .allocation_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeAddresses", e))
            .map(|o| o.addresses().iter().find(|x| x.allocation_id() == Some(&id)).map(|x| pairs(x.tags()))),
        Kind::RouteTable => ec2
            .describe_route_tables()
            .route_table_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeRouteTables", e))
            .map(|o| o.route_tables().iter().find(|x| x.route_table_id() == Some(&id)).map(|x| pairs(x.tags()))),
        Kind::SecurityGroup => ec2
            .describe_security_groups()
            .group_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeSecurityGroups", e))
            .map(|o| o.security_groups().iter().find(|x| x.group_id() == Some(&id)).map(|x| pairs(x.tags()))),
        Kind::Subnet => ec2
            .describe_subnets()
            .subnet_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeSubnets", e))
            .map(|o| o.subnets().iter().find(|x| x.subnet_id() == Some(&id)).map(|x| pairs(x.tags()))),
        Kind::InternetGateway => ec2
            .describe_internet_gateways()
            .internet_gateway_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeInternetGateways", e))
            .map(|o| {
                o.internet_gateways().iter().find(|x| x.internet_gateway_id() == Some(&id)).map(|x| pairs(x.tags()))
            }),
        Kind::Vpc => ec2
            .describe_vpcs()
            .vpc_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeVpcs", e))
            .map(|o| o.vpcs().iter().find(|x| x.vpc_id() == Some(&id)).map(|x| pairs(x.tags()))),
        Kind::DhcpOptions => ec2
            .describe_dhcp_options()
            .dhcp_options_ids(&id)
            .send()
            .await
            .map_err(|e| classify("DescribeDhcpOptions", e))
            .map(|o| o.dhcp_options().iter().find(|x| x.dhcp_options_id() == Some(&id)).map(|x| pairs(x.tags()))),
        _ => return Ok(None),
    };
    match read {
        Err(e) if e.is_not_found() => Ok(None),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_a_delete_waits_for_comes_before_it_in_the_teardown_order() {
        let at = |k: Kind| Kind::TEARDOWN_ORDER.iter().position(|x| *x == k).unwrap();
        for kind in Kind::TEARDOWN_ORDER {
            for before in kind.deleted_after() {
                assert!(
                    at(*before) < at(kind),
                    "{} waits for {}, which comes after it",
                    kind.as_str(),
                    before.as_str()
                );
            }
        }
    }
}
