//! What a customer's network must be to hold a cluster (bring your own VPC): the input's rules,
//! checked before anything is read, and the network's, checked on what AWS holds — by `run` and
//! `submit` before anything is journaled, and again by the provision's preflight. Every rule
//! broken is named, all at once, one line each.

use infraflow_activities::customer_network::{self, CustomerNetwork, DefaultRoute};
use infraflow_activities::network::{self, ZoneInfo};
use infraflow_activities::tags::{IDENTITY_TAG, OWNED, OWNERSHIP_PREFIX};
use infraflow_activities::{AwsError, AwsPool};
use infraflow_engine::InputError;
use serde_json::Value;

use crate::provision::input::ProvisionInput;

fn is_id(prefix: &str, v: &str) -> bool {
    v.strip_prefix(prefix).is_some_and(|hex| {
        (8..=17).contains(&hex.len()) && hex.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    })
}

/// The input's rules for a customer's network; fills `zones` from `subnets` when left out.
pub(crate) fn validate_input(p: &mut ProvisionInput) -> Result<(), InputError> {
    let Some(vpc) = &p.vpc_id else {
        return Err(InputError::field("subnets", "given without vpcID: name the customer's VPC they are in"));
    };
    if !is_id("vpc-", vpc) {
        return Err(InputError::field("vpcID", format!("{vpc:?} is not a VPC id like vpc-0a1b2c3d4e5f67890")));
    }
    let subnets = match &p.subnets {
        Some(s) if !s.is_empty() => s,
        _ => {
            return Err(InputError::field(
                "subnets",
                "required with vpcID: one entry per zone, {\"zone\", \"privateSubnetID\", \"publicSubnetID\"}",
            ));
        }
    };
    if p.single_nat_gateway {
        return Err(InputError::field(
            "singleNATGateway",
            "infraflow makes no NAT gateway in a customer's VPC (vpcID): the private subnets' routes are the customer's",
        ));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, z) in subnets.iter().enumerate() {
        let field = |f: &str| format!("subnets[{i}].{f}");
        if seen.contains(&z.zone.as_str()) {
            return Err(InputError::field(&field("zone"), format!("{:?} is listed twice: one entry per zone", z.zone)));
        }
        seen.push(&z.zone);
        match (&z.private_subnet_id, p.public_only) {
            (None, false) => {
                return Err(InputError::field(&field("privateSubnetID"), "required: the nodes' subnet in this zone"));
            }
            (Some(_), true) => {
                return Err(InputError::field(
                    &field("privateSubnetID"),
                    "a public-only cluster has no private subnets: leave it out",
                ));
            }
            _ => {}
        }
        if p.public_only && z.public_subnet_id.is_none() {
            return Err(InputError::field(&field("publicSubnetID"), "required in a public-only cluster"));
        }
        for (f, id) in [("privateSubnetID", &z.private_subnet_id), ("publicSubnetID", &z.public_subnet_id)] {
            if let Some(id) = id
                && !is_id("subnet-", id)
            {
                return Err(InputError::field(&field(f), format!("{id:?} is not a subnet id like subnet-0a1b2c3d")));
            }
        }
        if z.private_subnet_id.is_some() && z.private_subnet_id == z.public_subnet_id {
            return Err(InputError::field(&field("publicSubnetID"), "the same subnet as privateSubnetID: give two"));
        }
    }
    let publics = subnets.iter().filter(|z| z.public_subnet_id.is_some()).count();
    if publics != 0 && publics != subnets.len() {
        return Err(InputError::field(
            "subnets",
            "publicSubnetID in some zones only: give one in every zone (public load balancers span them all) or in none",
        ));
    }
    let ids = subnet_ids(p);
    if let Some((i, dup)) = ids.iter().enumerate().find(|(i, id)| ids[..*i].contains(id)) {
        return Err(InputError::field(
            "subnets",
            format!("{dup} is given twice (entry {i}): each subnet serves one zone and one role"),
        ));
    }
    let zones: Vec<String> = subnets.iter().map(|z| z.zone.clone()).collect();
    match &p.zones {
        None => p.zones = Some(zones),
        Some(given) if *given != zones => {
            return Err(InputError::field(
                "zones",
                format!(
                    "{given:?} are not the zones of subnets, {zones:?}: leave zones out with vpcID, or list the same"
                ),
            ));
        }
        Some(_) => {}
    }
    Ok(())
}

/// Every subnet id the input names, private before public.
pub(crate) fn subnet_ids(p: &ProvisionInput) -> Vec<String> {
    let subnets = p.subnets.as_deref().unwrap_or_default();
    let private = subnets.iter().filter_map(|z| z.private_subnet_id.clone());
    private.chain(subnets.iter().filter_map(|z| z.public_subnet_id.clone())).collect()
}

/// Whose a resource of a would-be customer's network is, if its tags say it is a cluster's rather
/// than the customer's: another cluster's ownership tag, or an identity infraflow gave it for a
/// cluster (its own included: what infraflow made is never a customer's network). Such a
/// network's teardown is that cluster's, and would take the network from under this one
/// (SAFETY-A7937A6 G4).
fn clusters_own(infra: &str, tags: &std::collections::BTreeMap<String, String>) -> Option<String> {
    let owner = tags
        .iter()
        .filter(|(_, v)| v.as_str() == OWNED)
        .filter_map(|(k, _)| k.strip_prefix(OWNERSHIP_PREFIX))
        .find(|owner| *owner != infra);
    if let Some(owner) = owner {
        return Some(format!("cluster {owner}'s ({OWNERSHIP_PREFIX}{owner}={OWNED})"));
    }
    let identity = tags.get(IDENTITY_TAG)?;
    let maker = identity.split('/').next().unwrap_or_default();
    Some(format!("made by infraflow for cluster {maker} ({IDENTITY_TAG}={identity})"))
}

/// Whether IPv4 block `inner` lies inside block `outer` (`10.1.2.0/24` in `10.1.0.0/16`). None
/// when either is not an IPv4 CIDR.
fn cidr_within(inner: &str, outer: &str) -> Option<bool> {
    let parse = |c: &str| -> Option<(u32, u32)> {
        let (addr, len) = c.split_once('/')?;
        let addr: std::net::Ipv4Addr = addr.parse().ok()?;
        let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
        Some((u32::from(addr), len))
    };
    let ((a, alen), (b, blen)) = (parse(inner)?, parse(outer)?);
    let mask = |len: u32| if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some(alen >= blen && a & mask(blen) == b & mask(blen))
}

/// Every rule the customer's network `net` breaks for the cluster of `p`, one line each naming
/// the resource and the rule. `available`: the region's Availability Zones; `account`: the one
/// the cluster acts in, when known (a network another account shares is refused).
pub(crate) fn violations(
    p: &ProvisionInput,
    net: &CustomerNetwork,
    available: &[ZoneInfo],
    account: Option<&str>,
) -> Vec<String> {
    let (vpc, region, infra) = (net.vpc_id.as_str(), p.region.as_str(), p.infra_id());
    if !net.exists {
        return vec![format!("vpcID {vpc}: no such VPC in {region}")];
    }
    let mut out = Vec::new();
    if let Some(whose) = clusters_own(infra, &net.tags) {
        out.push(format!("{vpc}: {whose}, not a customer's network; its teardown would delete it under this cluster"));
    }
    if net.is_default {
        out.push(format!("{vpc}: the region's default VPC; make a VPC of its own for the cluster"));
    }
    let shared =
        |owner: &Option<String>| account.zip(owner.as_deref()).filter(|(a, o)| a != o).map(|(_, o)| o.to_string());
    if let Some(owner) = shared(&net.owner_id) {
        out.push(format!("{vpc}: owned by account {owner} and shared to this one; shared VPCs are not supported yet"));
    }
    if !net.dns_support {
        out.push(format!("{vpc}: DNS support (enableDnsSupport) is off; the cluster's private zones need it on"));
    }
    if !net.dns_hostnames {
        out.push(format!("{vpc}: DNS hostnames (enableDnsHostnames) are off; the cluster's nodes need them on"));
    }
    if !net.cidrs.contains(&p.vpc_cidr) {
        out.push(format!(
            "vpcCIDR {} is not a CIDR block of {vpc} ({}); set vpcCIDR to the VPC's: the worker group admits the machine network",
            p.vpc_cidr,
            net.cidrs.join(", ")
        ));
    }
    for (i, z) in p.subnets.as_deref().unwrap_or_default().iter().enumerate() {
        if !available.iter().any(|a| a.name == z.zone) {
            out.push(format!("subnets[{i}].zone {}: not an available Availability Zone of {region}", z.zone));
        }
        for (role, id) in [("private", &z.private_subnet_id), ("public", &z.public_subnet_id)] {
            let Some(id) = id else { continue };
            let Some(s) = net.subnets.get(id) else {
                out.push(format!("{id} (subnets[{i}], {role}): no such subnet in {region}"));
                continue;
            };
            if s.vpc_id != vpc {
                out.push(format!("{id} ({role}): in {}, not in vpcID {vpc}", s.vpc_id));
                continue;
            }
            if s.zone != z.zone {
                out.push(format!("{id} ({role}): in zone {}, not {} as subnets[{i}] says", s.zone, z.zone));
            }
            if let Some(whose) = clusters_own(infra, &s.tags) {
                out.push(format!("{id} ({role}): {whose}, not a customer's subnet"));
            }
            if let Some(owner) = shared(&s.owner_id) {
                out.push(format!("{id} ({role}): owned by account {owner} and shared to this one; shared subnets are not supported yet"));
            }
            if cidr_within(&s.cidr, &p.vpc_cidr) == Some(false) {
                out.push(format!(
                    "{id} ({role}): its block {} is outside vpcCIDR {}; the worker group admits only vpcCIDR: use subnets inside it",
                    s.cidr, p.vpc_cidr
                ));
            }
            let table = s.route_table.as_deref().unwrap_or("none");
            match (role, &s.default_route) {
                ("private", DefaultRoute::NatGateway(_) | DefaultRoute::TransitGateway(_) | DefaultRoute::Instance(_)) => {}
                ("private", DefaultRoute::InternetGateway(igw)) => out.push(format!(
                    "{id} (private): its route table {table} sends 0.0.0.0/0 to internet gateway {igw}: that is a public subnet; a private one routes out through a NAT gateway, a transit gateway or a proxy instance"
                )),
                ("private", route) => out.push(format!(
                    "{id} (private): its route table {table} has no default route (0.0.0.0/0) to a NAT gateway, a transit gateway or a proxy instance{}; nodes there cannot reach the internet",
                    found(route)
                )),
                ("public", DefaultRoute::InternetGateway(_)) => {}
                (_, route) => out.push(format!(
                    "{id} (public): its route table {table} does not send 0.0.0.0/0 to an internet gateway{}; public load balancers there are unreachable",
                    found(route)
                )),
            }
        }
    }
    out
}

fn found(route: &DefaultRoute) -> String {
    match route {
        DefaultRoute::None => String::new(),
        DefaultRoute::Other(what) => format!(" (it goes to {what})"),
        DefaultRoute::InternetGateway(id)
        | DefaultRoute::NatGateway(id)
        | DefaultRoute::TransitGateway(id)
        | DefaultRoute::Instance(id) => format!(" (it goes to {id})"),
    }
}

/// The message of a refusal: a heading, then one line per rule broken.
pub(crate) fn refusal(broken: &[String]) -> String {
    format!(
        "the customer's network cannot hold this cluster ({} rule{} broken; nothing was changed):\n  {}",
        broken.len(),
        if broken.len() == 1 { "" } else { "s" },
        broken.join("\n  ")
    )
}

/// Before `workflow` (provision-infra, or create-cluster's `infra`) is journaled: the rules its
/// customer's network breaks, read from AWS (nothing for an input without `vpcID`). Reads only,
/// read again on a retryable error.
pub async fn check_before_submit(pool: &AwsPool, workflow: &str, input: &Value) -> Result<Option<String>, AwsError> {
    crate::read_again::read_retrying(|e: &AwsError| e.retryable, || check_once(pool, workflow, input)).await
}

async fn check_once(pool: &AwsPool, workflow: &str, input: &Value) -> Result<Option<String>, AwsError> {
    let infra = match workflow {
        "provision-infra" => input,
        "create-cluster" => &input["infra"],
        _ => return Ok(None),
    };
    let Ok(p) = serde_json::from_value::<ProvisionInput>(infra.clone()) else { return Ok(None) };
    let Some(vpc) = &p.vpc_id else { return Ok(None) };
    let aws = pool.region(&p.region).await;
    let ids = subnet_ids(&p);
    let (net, available) =
        futures::try_join!(customer_network::read(&aws, vpc, &ids), network::availability_zones(&aws))?;
    let broken = violations(&p, &net, &available, None);
    Ok((!broken.is_empty()).then(|| refusal(&broken)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::input::CustomerZone;
    use infraflow_activities::customer_network::CustomerSubnet;

    fn input(subnets: Vec<CustomerZone>) -> ProvisionInput {
        serde_json::from_value(serde_json::json!({
            "name": "byo", "region": "us-east-1", "baseDomain": "example.com",
            "vpcID": "vpc-0123456789abcdef0", "vpcCIDR": "10.1.0.0/16",
            "subnets": subnets,
        }))
        .unwrap()
    }

    fn zone(z: &str, private: Option<&str>, public: Option<&str>) -> CustomerZone {
        CustomerZone {
            zone: z.into(),
            private_subnet_id: private.map(str::to_string),
            public_subnet_id: public.map(str::to_string),
        }
    }

    #[test]
    fn the_input_rules_name_the_field() {
        let ok = |s| {
            let mut p = input(s);
            validate_input(&mut p).map(|()| p)
        };
        let p = ok(vec![zone("us-east-1a", Some("subnet-0000000a"), Some("subnet-0000000b"))]).unwrap();
        assert_eq!(p.zones, Some(vec!["us-east-1a".to_string()]), "zones follow the subnets");
        let e = ok(vec![zone("us-east-1a", None, Some("subnet-0000000b"))]).unwrap_err().0;
        assert!(e.contains("subnets[0].privateSubnetID"), "{e}");
        let e = ok(vec![
            zone("us-east-1a", Some("subnet-0000000a"), Some("subnet-0000000b")),
            zone("us-east-1b", Some("subnet-0000000c"), None),
        ])
        .unwrap_err()
        .0;
        assert!(e.contains("in every zone"), "{e}");
        let e = ok(vec![zone("us-east-1a", Some("subnet-0000000a"), Some("subnet-0000000a"))]).unwrap_err().0;
        assert!(e.contains("the same subnet"), "{e}");
        let e = ok(vec![zone("us-east-1a", Some("sn-1"), None)]).unwrap_err().0;
        assert!(e.contains("not a subnet id"), "{e}");
        let mut nat = input(vec![zone("us-east-1a", Some("subnet-0000000a"), None)]);
        nat.single_nat_gateway = true;
        assert!(validate_input(&mut nat).unwrap_err().0.contains("singleNATGateway"));
    }

    fn subnet(id: &str, vpc: &str, zone: &str, route: DefaultRoute) -> CustomerSubnet {
        CustomerSubnet {
            subnet_id: id.into(),
            vpc_id: vpc.into(),
            zone: zone.into(),
            zone_id: String::new(),
            cidr: String::new(),
            route_table: Some("rtb-1".into()),
            default_route: route,
            tags: Default::default(),
            owner_id: None,
        }
    }

    #[test]
    fn every_broken_rule_is_named_at_once() {
        let mut p = input(vec![
            zone("us-east-1a", Some("subnet-0000000a"), Some("subnet-0000000b")),
            zone("us-east-1b", Some("subnet-0000000c"), Some("subnet-0000000d")),
        ]);
        validate_input(&mut p).unwrap();
        let vpc = "vpc-0123456789abcdef0";
        let net = CustomerNetwork {
            vpc_id: vpc.into(),
            exists: true,
            cidrs: vec!["10.1.0.0/16".into()],
            dns_support: true,
            dns_hostnames: false,
            subnets: [
                subnet("subnet-0000000a", vpc, "us-east-1a", DefaultRoute::NatGateway("nat-1".into())),
                subnet("subnet-0000000b", vpc, "us-east-1a", DefaultRoute::InternetGateway("igw-1".into())),
                subnet("subnet-0000000c", vpc, "us-east-1b", DefaultRoute::None),
                subnet("subnet-0000000d", "vpc-other", "us-east-1b", DefaultRoute::InternetGateway("igw-1".into())),
            ]
            .into_iter()
            .map(|s| (s.subnet_id.clone(), s))
            .collect(),
            ..Default::default()
        };
        let zones = [
            ZoneInfo { name: "us-east-1a".into(), id: "use1-az1".into() },
            ZoneInfo { name: "us-east-1b".into(), id: "use1-az2".into() },
        ];
        let broken = violations(&p, &net, &zones, None);
        assert_eq!(broken.len(), 3, "{broken:#?}");
        assert!(broken[0].contains("enableDnsHostnames"));
        assert!(broken[1].starts_with("subnet-0000000c (private)") && broken[1].contains("no default route"));
        assert!(broken[2].starts_with("subnet-0000000d (public): in vpc-other"));
        let gone = CustomerNetwork { vpc_id: vpc.into(), ..Default::default() };
        assert_eq!(violations(&p, &gone, &zones, None), [format!("vpcID {vpc}: no such VPC in us-east-1")]);
    }

    /// SAFETY-A7937A6 G4 and G7: another cluster's network, the default VPC, a shared one, a
    /// subnet outside vpcCIDR — each refused, naming it.
    #[test]
    fn a_network_of_another_cluster_or_account_or_outside_vpc_cidr_is_refused_naming_it() {
        let mut p = input(vec![zone("us-east-1a", Some("subnet-0000000a"), Some("subnet-0000000b"))]);
        p.infra_id = Some("x-abcde".into());
        validate_input(&mut p).unwrap();
        let vpc = "vpc-0123456789abcdef0";
        let tagged = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut private = subnet("subnet-0000000a", vpc, "us-east-1a", DefaultRoute::NatGateway("nat-1".into()));
        private.tags = tagged(&[(IDENTITY_TAG, "y-abcde/private-subnet/us-east-1a")]);
        private.cidr = "10.1.2.0/24".into();
        let mut public = subnet("subnet-0000000b", vpc, "us-east-1a", DefaultRoute::InternetGateway("igw-1".into()));
        public.cidr = "100.64.1.0/24".into();
        public.owner_id = Some("222222222222".into());
        let net = CustomerNetwork {
            vpc_id: vpc.into(),
            exists: true,
            cidrs: vec!["10.1.0.0/16".into(), "100.64.0.0/16".into()],
            dns_support: true,
            dns_hostnames: true,
            subnets: [private, public].into_iter().map(|s| (s.subnet_id.clone(), s)).collect(),
            tags: tagged(&[("kubernetes.io/cluster/y-abcde", "owned"), ("kubernetes.io/cluster/x-abcde", "shared")]),
            is_default: true,
            owner_id: Some("111111111111".into()),
            ..Default::default()
        };
        let zones = [ZoneInfo { name: "us-east-1a".into(), id: "use1-az1".into() }];
        let broken = violations(&p, &net, &zones, Some("111111111111"));
        assert_eq!(broken.len(), 5, "{broken:#?}");
        assert!(broken[0].contains("cluster y-abcde's (kubernetes.io/cluster/y-abcde=owned)"), "{}", broken[0]);
        assert!(broken[1].contains("default VPC"), "{}", broken[1]);
        assert!(
            broken[2].starts_with("subnet-0000000a (private): made by infraflow for cluster y-abcde"),
            "{}",
            broken[2]
        );
        assert!(broken[3].contains("owned by account 222222222222"), "{}", broken[3]);
        assert!(broken[4].contains("100.64.1.0/24 is outside vpcCIDR 10.1.0.0/16"), "{}", broken[4]);
        // Its own shared mark, another cluster's shared mark and record: a customer's network
        // two clusters share is a customer's.
        let mut shared = net.clone();
        shared.tags = tagged(&[("kubernetes.io/cluster/z-abcde", "shared"), ("infraflow.io/marks/z-abcde", "w@1 k")]);
        shared.is_default = false;
        for s in shared.subnets.values_mut() {
            s.tags = Default::default();
            s.owner_id = None;
            s.cidr = "10.1.9.0/24".into();
        }
        assert_eq!(violations(&p, &shared, &zones, Some("111111111111")), Vec::<String>::new());
    }

    #[test]
    fn a_block_lies_within_another_only_when_its_prefix_matches() {
        assert_eq!(cidr_within("10.1.2.0/24", "10.1.0.0/16"), Some(true));
        assert_eq!(cidr_within("10.2.0.0/24", "10.1.0.0/16"), Some(false));
        assert_eq!(cidr_within("10.0.0.0/8", "10.1.0.0/16"), Some(false));
        assert_eq!(cidr_within("", "10.1.0.0/16"), None);
    }
}
