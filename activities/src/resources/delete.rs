//! How each kind is deleted: what it needs first (detach, disassociate), what blocks it, and the
//! checks a delete makes against AWS just before it (the creator's tags for an undo, the
//! cluster's tags again for a name a teardown replays).

use super::{Kind, Scope, find, tags_by_id};
use crate::client::Aws;
use crate::error::{AwsError, AwsResult};
use crate::tags::{IDENTITY_TAG, TagQuery, owned};
use crate::{
    classic_elb, compute, dns, ebs, elb, endpoints, iam, interfaces, nat, network, privatelink, routing, s3, security,
};

/// Deletes one resource, doing what its kind needs first (detach, disassociate) and waiting for
/// asynchronous deletes. Returns false if it was already gone. A dependency error names what
/// still uses the resource, so a paused teardown says what blocks it.
pub async fn delete(aws: &Aws, kind: Kind, id: &str) -> AwsResult<bool> {
    match delete_unexplained(aws, kind, id).await {
        Err(mut e) if e.is_dependency_violation() => {
            if let Ok(blockers) = blockers_of(aws, kind, id).await
                && !blockers.is_empty()
            {
                e.message = format!("{}; still in use by {}", e.message, blockers.join(", "));
            }
            Err(e)
        }
        r => r,
    }
}

/// Deletes `id` of `kind` for the teardown of cluster `infra`, which found it in an earlier
/// round, perhaps days ago (a takeover after downtime replays the journaled inventory). EC2 ids
/// are never reused, but names are: an IAM role, instance profile, OIDC provider (by its
/// issuer's URL) or classic load balancer of that name may since have been deleted and made
/// again, by anyone. Those are read again now:
/// - no longer carrying the cluster's ownership tag (for IAM this region's): someone else's now,
///   left, and counted as gone (SAFETY-F393541 F13);
/// - carrying it, but not the `incarnation` of the name discovery journaled (`incarnation`):
///   made again with the cluster's tags since, by whoever re-made a cluster of this infraID. Not
///   the resource this teardown found, yet claiming to be the cluster's: the delete pauses naming
///   it (SAFETY-A7937A6 G12), and the operator says whether it goes (`retry`: a new pass finds
///   it anew) or not (`cancel`). Without a journaled incarnation (discovery could not read one,
///   or a round of an older version), the tags decide alone, as before.
///
/// The registry bucket checks itself (`s3`).
pub async fn delete_if_still_the_clusters(
    aws: &Aws,
    kind: Kind,
    id: &str,
    infra: &str,
    incarnation: Option<&str>,
) -> AwsResult<bool> {
    // An instance or a template tagged for two clusters is neither's to delete: read just before
    // the delete (an instance whose ownership tag another cluster's tools added since discovery
    // too), the round pauses naming both, as a volume's does.
    if matches!(kind, Kind::Instance | Kind::LaunchTemplate) {
        let Some(tags) = tags_by_id(aws, kind, id).await? else { return Ok(false) };
        if let Some(owners) = crate::provenance::other_owners(&tags) {
            let action = if kind == Kind::Instance { "TerminateInstances" } else { "DeleteLaunchTemplate" };
            return Err(crate::provenance::two_owners(action, kind.as_str(), id, &owners));
        }
        return delete(aws, kind, id).await;
    }
    // IAM says which incarnation in the same read as the tags; a classic load balancer's is
    // read only when one was journaled.
    let (tags, read) = match kind {
        Kind::IamRole | Kind::InstanceProfile | Kind::OidcProvider => match iam::now(aws, kind, id).await? {
            Some(now) => (Some(now.tags), Some(now.incarnation)),
            None => (None, None),
        },
        Kind::ClassicLoadBalancer => (classic_elb::tags_now(aws, id).await?, None),
        _ => return delete(aws, kind, id).await,
    };
    let mut q = owned(infra);
    q.region = Some(aws.region.clone());
    match tags {
        Some(tags) if !q.matches_pairs(&tags) => {
            tracing::warn!(kind = kind.as_str(), id, "no longer tagged as the cluster's since it was found: left");
            Ok(false)
        }
        Some(_) => {
            let now = match (incarnation, read) {
                (None, _) => None,
                (Some(_), Some(read)) => read,
                (Some(_), None) => self::incarnation(aws, kind, id).await?,
            };
            if let Some(found) = incarnation
                && now.as_deref() != Some(found)
            {
                return Err(AwsError::operator(
                    read_operation(kind),
                    format!(
                        "{} {id} was deleted and made again with cluster {infra}'s tags since this teardown found it \
                         (not the one it found): left; `retry` if it is the cluster's and goes too, `cancel` if it \
                         belongs to a cluster made anew",
                        kind.as_str()
                    ),
                ));
            }
            delete(aws, kind, id).await
        }
        None => Ok(false),
    }
}

/// Which resource of a name that can be made again is there now — a role's or instance
/// profile's unique id, an OIDC provider's or classic load balancer's creation time — for a
/// teardown to journal at discovery and compare at its delete; None if it is gone, AWS does not
/// say, or `kind`'s ids are never reused.
pub async fn incarnation(aws: &Aws, kind: Kind, name: &str) -> AwsResult<Option<String>> {
    match kind {
        Kind::IamRole | Kind::InstanceProfile | Kind::OidcProvider => iam::incarnation(aws, kind, name).await,
        Kind::ClassicLoadBalancer => classic_elb::incarnation(aws, name).await,
        _ => Ok(None),
    }
}

fn read_operation(kind: Kind) -> &'static str {
    match kind {
        Kind::IamRole => "GetRole",
        Kind::InstanceProfile => "GetInstanceProfile",
        Kind::OidcProvider => "GetOpenIDConnectProvider",
        _ => "DescribeLoadBalancers",
    }
}

/// Network interfaces that keep a subnet, security group or VPC from being deleted.
async fn blockers_of(aws: &Aws, kind: Kind, id: &str) -> AwsResult<Vec<String>> {
    let field = match kind {
        Kind::Subnet => "subnet-id",
        Kind::SecurityGroup => "group-id",
        Kind::Vpc => "vpc-id",
        _ => return Ok(Vec::new()),
    };
    let mut blockers = Vec::new();
    if kind == Kind::Vpc {
        // Subnets left in the VPC (not ours: ours were deleted before it).
        let subnets = aws
            .ec2
            .describe_subnets()
            .filters(crate::tags::filter("vpc-id", &[id]))
            .send()
            .await
            .map_err(|e| crate::error::classify("DescribeSubnets", e))?;
        blockers.extend(
            subnets
                .subnets()
                .iter()
                .filter(|s| s.vpc_id() == Some(id))
                .filter_map(|s| s.subnet_id().map(|i| format!("subnet {i}"))),
        );
    }
    let out = aws
        .ec2
        .describe_network_interfaces()
        .filters(crate::tags::filter(field, &[id]))
        .send()
        .await
        .map_err(|e| crate::error::classify("DescribeNetworkInterfaces", e))?;
    blockers.extend(out.network_interfaces().iter().map(|n| {
        let eni = n.network_interface_id().unwrap_or("?");
        match n.description().filter(|d| !d.is_empty()) {
            Some(d) => format!("network interface {eni} ({d})"),
            None => format!("network interface {eni}"),
        }
    }));
    blockers.truncate(5);
    Ok(blockers)
}

async fn delete_unexplained(aws: &Aws, kind: Kind, id: &str) -> AwsResult<bool> {
    match kind {
        Kind::Instance => compute::terminate_instance(aws, id).await,
        Kind::LaunchTemplate => compute::delete_launch_template(aws, id).await,
        Kind::Volume => ebs::delete_volume(aws, id).await,
        Kind::Snapshot => ebs::delete_snapshot(aws, id).await,
        Kind::RegistryBucket => s3::delete_bucket_if_exists(aws, id).await,
        Kind::NetworkInterface => interfaces::delete_interface(aws, id).await,
        Kind::VpcEndpoint => endpoints::delete_vpc_endpoint(aws, id).await,
        Kind::EndpointService => privatelink::delete_endpoint_service(aws, id).await,
        Kind::ClassicLoadBalancer => classic_elb::delete_classic_load_balancer(aws, id).await,
        Kind::LoadBalancer => elb::delete_load_balancer(aws, id).await,
        Kind::TargetGroup => elb::delete_target_group(aws, id).await,
        Kind::NatGateway => nat::delete_nat_gateway(aws, id).await,
        Kind::HostedZone => dns::delete_zone(aws, id).await,
        Kind::ElasticIp => nat::release_eip(aws, id).await,
        Kind::RouteTable => routing::delete_route_table(aws, id).await,
        Kind::SecurityGroup => security::delete_security_group(aws, id).await,
        Kind::Subnet => network::delete_subnet(aws, id).await,
        Kind::InternetGateway => network::delete_internet_gateway(aws, id).await,
        Kind::Vpc => network::delete_vpc(aws, id).await,
        Kind::DhcpOptions => network::delete_dhcp_options(aws, id).await,
        Kind::InstanceProfile => iam::delete_instance_profile(aws, id).await,
        Kind::IamRole => iam::delete_role(aws, id).await,
        Kind::OidcProvider => iam::delete_oidc_provider(aws, id).await,
    }
}

/// Deletes the EC2 resource `id` of `kind` only if its own tags say it has identity `identity`
/// and was created by `created_by`, and no other workflow adopted it since. False if it is gone,
/// not tagged so, or not an EC2 kind.
pub async fn delete_by_id_if_created_by(
    aws: &Aws,
    kind: Kind,
    id: &str,
    identity: &str,
    created_by: &str,
) -> AwsResult<bool> {
    let Some(tags) = tags_by_id(aws, kind, id).await? else { return Ok(false) };
    let q = TagQuery { created_by: Some(created_by.to_string()), ..TagQuery::new(IDENTITY_TAG, identity) };
    if !q.matches_pairs(&tags) {
        return Ok(false);
    }
    delete(aws, kind, id).await
}

/// Deletes whatever of `kind` is in `scope`: with `Scope::CreatedBy`, the compensation of a
/// create step, which never removes a resource the workflow adopted.
pub async fn delete_in_scope(aws: &Aws, kind: Kind, scope: &Scope) -> AwsResult<Vec<String>> {
    let mut deleted = Vec::new();
    for id in find(aws, kind, scope).await? {
        if delete(aws, kind, &id).await? {
            deleted.push(id);
        }
    }
    Ok(deleted)
}
