//! The drift of a network infraflow made: each thing the provision makes, compared with what the
//! VPC holds now (`vpc_state`), by the identities the provision tagged it with. What a second
//! provision repairs is said so; what it does not, with what to do instead.

use infraflow_activities::security::{self, Rule};
use infraflow_activities::tags::{CREATED_BY_TAG, KARPENTER_DISCOVERY_TAG, ownership_key};
use infraflow_activities::vpc_state::{TableFacts, Tags, VpcState};

use super::report::Drift;
use crate::provision::input::{ProvisionInput, ProvisionOutput, worker_rules};

/// What the check compares against: the provision's input and what it output.
pub(super) struct Made<'a> {
    pub p: &'a ProvisionInput,
    pub o: &'a ProvisionOutput,
}

impl Made<'_> {
    fn infra(&self) -> &str {
        &self.o.infra_id
    }

    fn identity(&self, role: &str, zone: Option<&str>) -> String {
        match zone {
            Some(z) => format!("{}/{role}/{z}", self.infra()),
            None => format!("{}/{role}", self.infra()),
        }
    }

    fn zones(&self) -> impl Iterator<Item = &str> {
        self.o.zones.iter().map(|z| z.name.as_str())
    }

    /// The zones with a NAT gateway of their own, as the provision chose them.
    fn nat_zones(&self) -> Vec<&str> {
        if self.p.public_only {
            Vec::new()
        } else if self.p.single_nat_gateway {
            self.zones().take(1).collect()
        } else {
            self.zones().collect()
        }
    }
}

fn missing(kind: &str, identity: &str) -> Drift {
    Drift::new(kind, identity, "present", "missing")
}

/// A tag a provision writes only when it creates: put back by hand.
fn tag_drift(kind: &str, id: &str, tags: &Tags, key: &str, value: &str) -> Option<Drift> {
    let found = tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    (found != Some(value)).then(|| {
        Drift::new(
            "tag",
            id,
            format!("{key}={value} on the {kind}"),
            found.map_or("no such tag".into(), |v| format!("{key}={v}")),
        )
        .by_hand(format!(
            "a provision tags only what it creates: aws ec2 create-tags --resources {id} --tags Key={key},Value={value}"
        ))
    })
}

/// Everything of a made network: VPC, DHCP options, gateway, subnets, NAT gateways, route tables.
pub(super) fn made_network(m: &Made<'_>, s: &VpcState) -> Vec<Drift> {
    let mut out = Vec::new();
    let Some(vpc) = &s.vpc else {
        out.push(missing("vpc", &m.o.vpc_id).by_hand(
            "the VPC is gone with all it held: tear the cluster down (`infraflow run teardown`) and provision it anew",
        ));
        return out;
    };
    let owner = ownership_key(m.infra());
    if !vpc.dns_support {
        out.push(Drift::new("vpc-attribute", &vpc.id, "enableDnsSupport on", "off"));
    }
    if !vpc.dns_hostnames {
        out.push(Drift::new("vpc-attribute", &vpc.id, "enableDnsHostnames on", "off"));
    }
    out.extend(tag_drift("VPC", &vpc.id, &vpc.tags, &owner, "owned"));
    match s.dhcp_options.first() {
        None => out.push(missing("dhcp-options", &m.identity("dhcp-options", None))),
        Some(set) if vpc.dhcp_options_id != set.id => out.push(Drift::new(
            "dhcp-association",
            &vpc.id,
            format!("DHCP options {}", set.id),
            if vpc.dhcp_options_id.is_empty() { "none".to_string() } else { vpc.dhcp_options_id.clone() },
        )),
        Some(_) => {}
    }
    let igw_identity = m.identity("internet-gateway", None);
    let igw = s.internet_gateways.iter().find(|(_, tags)| has(tags, &igw_identity)).map(|(id, _)| id.clone());
    if igw.is_none() {
        out.push(Drift::new("internet-gateway", &igw_identity, format!("attached to {}", vpc.id), "none attached"));
    }
    let mut public_subnets = Vec::new();
    let mut private_subnets = Vec::new();
    for zone in m.zones() {
        let public_identity = m.identity("public-subnet", Some(zone));
        match s.subnet(&public_identity) {
            None => out.push(missing("subnet", &public_identity)),
            Some(sub) => {
                public_subnets.push(sub.id.clone());
                out.extend(tag_drift("subnet", &sub.id, &sub.tags, &owner, "owned"));
                out.extend(tag_drift("subnet", &sub.id, &sub.tags, "kubernetes.io/role/elb", "1"));
                if m.p.public_only {
                    out.extend(tag_drift("subnet", &sub.id, &sub.tags, KARPENTER_DISCOVERY_TAG, m.infra()));
                }
            }
        }
        if m.p.public_only {
            continue;
        }
        let private_identity = m.identity("private-subnet", Some(zone));
        match s.subnet(&private_identity) {
            None => out.push(missing("subnet", &private_identity)),
            Some(sub) => {
                private_subnets.push((zone, sub.id.clone()));
                out.extend(tag_drift("subnet", &sub.id, &sub.tags, &owner, "owned"));
                out.extend(tag_drift("subnet", &sub.id, &sub.tags, "kubernetes.io/role/internal-elb", "1"));
                out.extend(tag_drift("subnet", &sub.id, &sub.tags, KARPENTER_DISCOVERY_TAG, m.infra()));
            }
        }
    }
    let mut nats = Vec::new();
    for zone in m.nat_zones() {
        let identity = m.identity("nat", Some(zone));
        match s.nat(&identity) {
            None => out.push(missing("nat-gateway", &identity)),
            Some(n) if n.state != "available" && n.state != "pending" => {
                out.push(Drift::new("nat-gateway", &n.id, "available", n.state.clone()))
            }
            Some(n) => nats.push((zone, n.id.clone())),
        }
    }
    let mut tables = Vec::new();
    let public_identity = m.identity("public-route-table", None);
    match s.table(&public_identity) {
        None => out.push(missing("route-table", &public_identity)),
        Some(t) => {
            tables.push(t.id.clone());
            out.extend(route_drift(t, igw.as_deref()));
            out.extend(association_drift(t, &public_subnets));
            if !t.main {
                out.push(Drift::new("main-route-table", &vpc.id, format!("route table {}", t.id), "another table"));
            }
        }
    }
    let single = nats.first().map(|(_, n)| n.clone());
    for (zone, subnet) in &private_subnets {
        let identity = m.identity("private-route-table", Some(zone));
        let Some(t) = s.table(&identity) else {
            out.push(missing("route-table", &identity));
            continue;
        };
        tables.push(t.id.clone());
        let nat = nats.iter().find(|(z, _)| z == zone).map(|(_, n)| n.clone()).or_else(|| single.clone());
        out.extend(route_drift(t, nat.as_deref()));
        out.extend(association_drift(t, std::slice::from_ref(subnet)));
    }
    out.extend(endpoint_drift(m, s, &tables, true));
    out
}

fn has(tags: &Tags, identity: &str) -> bool {
    infraflow_activities::vpc_state::has_identity(tags, identity)
}

/// The table's default route, to `target` (None: the target itself is missing, reported on its
/// own, so a route to anything is not reported twice).
fn route_drift(t: &TableFacts, target: Option<&str>) -> Option<Drift> {
    let target = target?;
    let found = match &t.default_route {
        None => "no route".to_string(),
        Some((to, true)) => format!("a blackhole route to {to}"),
        Some((to, false)) if to == target => return None,
        Some((to, false)) => format!("0.0.0.0/0 to {to}"),
    };
    Some(Drift::new("route", &t.id, format!("0.0.0.0/0 to {target}"), found))
}

fn association_drift(t: &TableFacts, subnets: &[String]) -> Vec<Drift> {
    subnets
        .iter()
        .filter(|s| !t.subnets.contains(s))
        .map(|s| Drift::new("route-table-association", &t.id, format!("associated with {s}"), "not associated"))
        .collect()
}

/// The S3 gateway endpoint on every route table of the cluster's (`required`: the provision
/// made it; in a customer's VPC, only when the cluster's own is there).
pub(super) fn endpoint_drift(m: &Made<'_>, s: &VpcState, tables: &[String], required: bool) -> Vec<Drift> {
    let identity = m.identity("s3-endpoint", None);
    match s.endpoint(&identity) {
        None if required && !tables.is_empty() => vec![missing("s3-endpoint", &identity)],
        None => Vec::new(),
        Some(e) => tables
            .iter()
            .filter(|t| !e.route_tables.contains(t))
            .map(|t| Drift::new("s3-endpoint-route-table", &e.id, format!("serves route table {t}"), "not serving it"))
            .collect(),
    }
}

/// The worker group: its rules, none missing and none added but its controllers'.
pub(super) fn worker_group(m: &Made<'_>, s: &VpcState) -> Vec<Drift> {
    let id = &m.o.security_group_id;
    let Some(g) = s.security_groups.iter().find(|g| &g.id == id) else {
        return vec![missing("security-group", id)];
    };
    let wanted: Vec<Rule> = worker_rules(&m.p.vpc_cidr);
    let mut out: Vec<Drift> = wanted
        .iter()
        .filter(|w| !g.ingress.iter().any(|r| w.matches(r)))
        .map(|w| Drift::new("security-group-rule", id, w.describe(), "missing"))
        .collect();
    let made_here = g.tags.iter().any(|(k, _)| k == CREATED_BY_TAG);
    for r in security::unwanted(&g.ingress, &wanted) {
        let d = Drift::new("security-group-rule", id, "no such rule", format!("{} added", r.describe()));
        out.push(if made_here {
            d
        } else {
            d.by_hand(format!(
                "the group was made by HyperShift's CLI, whose rules infraflow leaves: revoke it yourself if it is unwanted (aws ec2 revoke-security-group-ingress --group-id {id} …)"
            ))
        });
    }
    out
}

/// A private zone: there, serving the cluster's VPC, its negative-caching TTL HyperShift's.
pub(super) fn private_zone(
    zone_id: &str,
    vpc_id: &str,
    region: &str,
    facts: Option<(Vec<(String, String)>, String)>,
) -> Vec<Drift> {
    let Some((vpcs, ttl)) = facts else {
        return vec![missing("private-zone", zone_id)];
    };
    let mut out = Vec::new();
    if !vpcs.iter().any(|(v, _)| v == vpc_id) {
        let found = if vpcs.is_empty() {
            "no VPC".to_string()
        } else {
            vpcs.iter().map(|(v, _)| v.as_str()).collect::<Vec<_>>().join(", ")
        };
        out.push(Drift::new("private-zone-vpc", zone_id, format!("serves {vpc_id}"), found).by_hand(format!(
            "a provision refuses a zone serving other VPCs rather than re-point it: aws route53 associate-vpc-with-hosted-zone --hosted-zone-id {zone_id} --vpc VPCRegion={region},VPCId={vpc_id}"
        )));
    }
    let want = infraflow_activities::dns::NEGATIVE_CACHE_TTL.to_string();
    if ttl != want {
        out.push(Drift::new("soa-minimum", zone_id, want, ttl));
    }
    out
}
