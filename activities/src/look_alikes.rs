//! What carries a cluster's name without its maker's proof: the volumes, snapshots and network
//! interfaces a teardown finds by the cluster's tag (or in its subnets) split into those its
//! controllers made (deleted) and the look-alikes (left, each named with why); the instances,
//! load balancers, target groups and security groups tagged for it outside its VPCs (left,
//! named); and the private zones marked for the cluster that serve only another region (left,
//! named).

use crate::client::Aws;
use crate::error::AwsResult;
use crate::provenance::{self, Verdict};
use crate::resources::kind::Kind;
use crate::resources::scope::Scope;
use crate::tags::{TagQuery, owned};
use crate::{classic_elb, compute, dns, ebs, elb, interfaces, network, security};

/// A resource left, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Left {
    pub kind: Kind,
    pub id: String,
    pub reason: String,
    /// The cluster's subnet it keeps from being deleted (an interface left in it).
    pub holds: Option<String>,
}

/// The kinds judged here.
pub fn judged(kind: Kind) -> bool {
    matches!(kind, Kind::Volume | Kind::Snapshot | Kind::NetworkInterface)
}

/// The kinds a teardown deletes only inside the cluster's own VPCs: what the cloud provider, the
/// NodePool machines and infraflow make for a cluster lives there, and HyperShift's destroy
/// deletes them by that membership. One tagged for the cluster elsewhere (copied tags, a tool
/// that tags everything) is left and named.
pub fn judged_by_vpc(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Instance | Kind::LoadBalancer | Kind::TargetGroup | Kind::ClassicLoadBalancer | Kind::SecurityGroup
    )
}

/// The resources of `kind` (one of `judged_by_vpc`) of cluster `infra` matching `q`: those in
/// the cluster's VPCs (its VPCs are read only when something was found), and the ones left.
pub async fn split_by_vpc(aws: &Aws, kind: Kind, infra: &str, q: &TagQuery) -> AwsResult<(Vec<String>, Vec<Left>)> {
    let found: Vec<(String, Option<String>)> = match kind {
        Kind::Instance => compute::find_instances(aws, q).await?.into_iter().map(|m| (m.instance_id, m.vpc)).collect(),
        Kind::LoadBalancer => elb::find_load_balancers_with_vpcs(aws, q).await?,
        Kind::TargetGroup => elb::find_target_groups_with_vpcs(aws, q).await?,
        Kind::ClassicLoadBalancer => classic_elb::find_with_vpcs(aws, q).await?,
        Kind::SecurityGroup => security::find_security_groups_with_vpcs(aws, q).await?,
        _ => return Ok((Vec::new(), Vec::new())),
    };
    if found.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let vpcs = network::cluster_vpcs(aws, infra).await?;
    let mut delete = Vec::new();
    let mut left = Vec::new();
    for (id, vpc) in found {
        match vpc {
            Some(v) if vpcs.contains(&v) => delete.push(id),
            Some(v) => left.push(Left {
                kind,
                id,
                reason: format!("carries the cluster's tag but is in {v}, not a VPC of the cluster's"),
                holds: None,
            }),
            None => {
                left.push(Left { kind, id, reason: "carries the cluster's tag but is in no VPC".into(), holds: None })
            }
        }
    }
    Ok((delete, left))
}

/// The launch templates of cluster `infra` matching `q`: Karpenter's (its marks, every security
/// group it launches into in the cluster's VPCs) to delete, and the look-alikes left — the marks
/// copied onto a template that launches elsewhere, or a template without them.
pub async fn split_launch_templates(aws: &Aws, infra: &str, q: &TagQuery) -> AwsResult<(Vec<String>, Vec<Left>)> {
    let found = compute::find_launch_templates(aws, q).await?;
    if found.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let vpcs = network::cluster_vpcs(aws, infra).await?;
    let mut groups: Vec<String> = found.iter().flat_map(|t| t.groups.iter().cloned()).collect();
    groups.sort();
    groups.dedup();
    let group_vpcs = security::vpcs_of_groups(aws, &groups).await?;
    let (mut delete, mut left) = (Vec::new(), Vec::new());
    for t in found {
        // A group that is gone says nothing of where the template launches (the cluster's own
        // goes with its teardown): only one in another VPC is elsewhere.
        let elsewhere: Vec<&String> =
            t.groups.iter().filter(|g| group_vpcs.get(*g).is_some_and(|v| !vpcs.contains(v))).collect();
        let placed = t.groups.iter().any(|g| group_vpcs.get(g).is_some_and(|v| vpcs.contains(v)));
        let verdict = match provenance::karpenter_template(&t.name, &t.tags, infra) {
            Verdict::Delete if t.groups.is_empty() => {
                Verdict::Leave("Karpenter's marks, but it names no security group: where it launches is unknown".into())
            }
            Verdict::Delete if elsewhere.is_empty() && !placed => Verdict::Leave(format!(
                "Karpenter's marks, but none of the groups it launches into ({}) is left to say where: not shown to be the cluster's",
                t.groups.join(", ")
            )),
            Verdict::Delete if !elsewhere.is_empty() => Verdict::Leave(format!(
                "Karpenter's marks, but it launches into {}, not of a VPC of the cluster's",
                elsewhere.iter().map(|g| g.as_str()).collect::<Vec<_>>().join(", ")
            )),
            v => v,
        };
        match verdict {
            Verdict::Delete => delete.push(t.id),
            Verdict::Leave(reason) => left.push(Left {
                kind: Kind::LaunchTemplate,
                id: t.id,
                reason: format!("{} {reason}", t.name),
                holds: None,
            }),
        }
    }
    Ok((delete, left))
}

/// The resources of `kind` (one of `judged`) matching `q` in `scope`: those to delete, and the
/// look-alikes left.
pub async fn split(aws: &Aws, kind: Kind, scope: &Scope, q: &TagQuery) -> AwsResult<(Vec<String>, Vec<Left>)> {
    let verdicts: Vec<(String, Verdict, Option<String>)> = match kind {
        Kind::Volume => ebs::find_volumes(aws, q)
            .await?
            .into_iter()
            .map(|(id, tags)| (id, provenance::volume(&tags), None))
            .collect(),
        Kind::Snapshot => ebs::find_snapshots(aws, q)
            .await?
            .into_iter()
            .map(|(id, tags)| (id, provenance::snapshot(&tags), None))
            .collect(),
        Kind::NetworkInterface => {
            let subnets_of = match scope {
                Scope::Owned(infra) => Some(owned(infra)),
                _ => None,
            };
            interfaces::find_interfaces(aws, q, subnets_of.as_ref())
                .await?
                .into_iter()
                // The interface of the cluster's own NAT gateway or endpoint is its owner's: it
                // goes when its owner does (AWS deletes it; moto leaves it behind, unattached).
                .filter(|n| n.named_by.is_none())
                .map(|n| {
                    let v = provenance::interface(&n.tags, &n.description, n.requester_managed);
                    (n.id, v, n.in_cluster_subnet)
                })
                .collect()
        }
        _ => return Ok((Vec::new(), Vec::new())),
    };
    let mut delete = Vec::new();
    let mut left = Vec::new();
    for (id, verdict, holds) in verdicts {
        match verdict {
            Verdict::Delete => delete.push(id),
            Verdict::Leave(reason) => left.push(Left { kind, id, reason, holds }),
        }
    }
    Ok((delete, left))
}

/// Everything of cluster `infra` a teardown in `aws`'s region leaves although it carries the
/// cluster's name: the look-alikes of the judged kinds, what is tagged for it outside its VPCs,
/// and its private zones serving only other regions. What `--dry-run` lists under `leave` and a teardown's output under `left`.
pub async fn left(aws: &Aws, infra: &str, with_templates: bool) -> AwsResult<Vec<Left>> {
    let scope = Scope::Owned(infra.to_string());
    let q = owned(infra);
    let (volumes, snapshots, eni) = futures::try_join!(
        split(aws, Kind::Volume, &scope, &q),
        split(aws, Kind::Snapshot, &scope, &q),
        split(aws, Kind::NetworkInterface, &scope, &q),
    )?;
    let mut all: Vec<Left> = [volumes.1, snapshots.1, eni.1].concat();
    let by_vpc =
        [Kind::Instance, Kind::LoadBalancer, Kind::TargetGroup, Kind::ClassicLoadBalancer, Kind::SecurityGroup]
            .map(|kind| split_by_vpc(aws, kind, infra, &q));
    for (_, left) in futures::future::try_join_all(by_vpc).await? {
        all.extend(left);
    }
    if with_templates {
        all.extend(split_launch_templates(aws, infra, &q).await?.1);
    }
    let vpcs = network::cluster_vpcs(aws, infra).await?;
    for (zone, regions) in dns::marked_zones_elsewhere(aws, infra, &vpcs).await? {
        all.push(Left {
            holds: None,
            kind: Kind::HostedZone,
            id: zone,
            reason: format!(
                "marked for the cluster, but serves none of its VPCs in {} (it serves others' VPCs, in {}): left; a teardown where the cluster's VPC is removes it, and with no VPC of the cluster left anywhere, delete it by hand once its VPCs are someone else's to keep",
                aws.region,
                regions.join(", ")
            ),
        });
    }
    Ok(all)
}

/// The interfaces left in the cluster's subnets that are not its controllers' (a person's standby
/// interface, another tool's): each keeps its subnet, and so the VPC, from being deleted. A
/// teardown stops on them before it deletes anything (AWS would refuse the subnet only after
/// its dependency wait; moto deletes the subnet from under them).
pub async fn interfaces_holding_subnets(aws: &Aws, infra: &str) -> AwsResult<Vec<Left>> {
    let scope = Scope::Owned(infra.to_string());
    let (_, left) = split(aws, Kind::NetworkInterface, &scope, &owned(infra)).await?;
    Ok(left.into_iter().filter(|l| l.holds.is_some()).collect())
}
