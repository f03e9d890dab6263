//! What only infraflow can tell of a live cluster: what would hold its teardown up today (foreign
//! subnets, interfaces and peerings in its VPC, a foreign VPC on its DHCP options) and what its
//! life left that costs or lingers (volumes, addresses and interfaces attached to nothing, tagged
//! kinds teardown does not delete) — each judged by the same provenance rules teardown uses.

use infraflow_activities::provenance::{self, Verdict};
use infraflow_activities::tags::IDENTITY_TAG;
use infraflow_activities::vpc_state::{Tags, VpcState};

use crate::teardown::planned::Planned;

fn planned(kind: &str, id: &str, reason: String) -> Planned {
    Planned { kind: kind.into(), id: id.into(), reason: Some(reason) }
}

/// What would keep a teardown of the cluster's own VPC waiting, then pause it.
pub(super) fn hold_ups(infra: &str, s: &VpcState) -> Vec<Planned> {
    let Some(vpc) = &s.vpc else { return Vec::new() };
    let owned = infraflow_activities::tags::owned(infra);
    let mut out = Vec::new();
    for sub in s.subnets.iter().filter(|sub| !owned.matches_pairs(&sub.tags)) {
        out.push(planned(
            "subnet",
            &sub.id,
            format!("not the cluster's, in its VPC {}: never deleted, it keeps the VPC", vpc.id),
        ));
    }
    for set in &s.dhcp_options {
        for other in set.used_by.iter().filter(|v| **v != vpc.id) {
            out.push(planned(
                "vpc",
                other,
                format!("uses the cluster's DHCP options {}, and is never re-pointed", set.id),
            ));
        }
    }
    for p in &s.peerings {
        out.push(planned(
            "vpc-peering",
            p,
            format!("peers the cluster's VPC {}: a VPC is not deleted while it is peered; end it first", vpc.id),
        ));
    }
    for (n, reason) in judged_interfaces(infra, s) {
        if let Verdict::Leave(why) = reason {
            out.push(planned("network-interface", &n, why));
        }
    }
    out
}

/// The interfaces of the VPC a teardown judges — those tagged as the cluster's, and those left
/// available (attached to nothing) — that none of the cluster's NAT gateways or endpoints names
/// and no AWS service manages: each with teardown's verdict. (One in use by an instance is
/// judged with its instance, by the teardown's instance rules, not here.)
fn judged_interfaces(infra: &str, s: &VpcState) -> Vec<(String, Verdict)> {
    let owned = infraflow_activities::tags::owned(infra);
    let named = |id: &str| {
        s.nat_gateways.iter().any(|n| n.interfaces.iter().any(|i| i == id))
            || s.endpoints.iter().any(|e| e.interfaces.iter().any(|i| i == id))
    };
    s.interfaces
        .iter()
        .filter(|n| n.status == "available" || owned.matches_pairs(&n.tags))
        .filter(|n| !named(&n.id) && !n.requester_managed)
        .map(|n| (n.id.clone(), provenance::interface(&n.tags, &n.description, n.requester_managed)))
        .collect()
}

/// What leaks inside the VPC: interfaces the cluster's controllers made, left `available`.
pub(super) fn vpc_leaks(infra: &str, s: &VpcState) -> Vec<Planned> {
    judged_interfaces(infra, s)
        .into_iter()
        .filter(|(id, v)| *v == Verdict::Delete && s.interfaces.iter().any(|n| &n.id == id && n.status == "available"))
        .map(|(id, _)| {
            planned("network-interface", &id, "a controller of the cluster made it; attached to nothing".into())
        })
        .collect()
}

/// Addresses infraflow made for the cluster that nothing uses (billed by the hour).
pub(super) fn address_leaks(addresses: &[(String, Tags)]) -> Vec<Planned> {
    addresses
        .iter()
        .filter(|(_, tags)| tags.iter().any(|(k, _)| k == IDENTITY_TAG))
        .map(|(id, _)| {
            planned("elastic-ip", id, "made for the cluster, associated with nothing: billed until released".into())
        })
        .collect()
}

/// Volumes the cluster's storage driver made (its marks, no backup's) attached to nothing.
pub(super) fn volume_leaks(volumes: &[(String, Tags)]) -> Vec<Planned> {
    volumes
        .iter()
        .filter(|(_, tags)| provenance::volume(tags) == Verdict::Delete)
        .map(|(id, _)| {
            planned(
                "volume",
                id,
                "the cluster's storage driver made it; attached to nothing, it is billed until deleted".into(),
            )
        })
        .collect()
}

/// What carries the cluster's tag and is of a kind teardown does not delete.
pub(super) fn unknown_kind_leaks(arns: Vec<String>) -> Vec<Planned> {
    arns.into_iter()
        .map(|arn| {
            planned(
                "tagged",
                &arn,
                "carries the cluster's ownership tag, of a kind teardown does not delete: a teardown would pause naming it".into(),
            )
        })
        .collect()
}
