//! Whether a provision fits the account's quotas before it changes anything: what it will make
//! of each quota (one VPC and internet gateway of a network of its own, an Elastic IP and a NAT
//! gateway per NAT zone; nothing of these in a customer's VPC), less what the cluster already has
//! (a resumed or repeated provision keeps it), against the quota less what the account uses.

use infraflow_activities::quotas::{self, Quota, Usage};
use infraflow_activities::{AwsError, AwsPool};
use serde_json::Value;

use crate::provision::input::ProvisionInput;

/// What a provision of `p` makes of each quota: (quota, zone for per-zone quotas, how many).
/// Zones left out are one zone AWS picks: its per-zone NAT quota is not known before.
pub fn wanted(p: &ProvisionInput) -> Vec<(Quota, Option<String>, u32)> {
    if p.vpc_id.is_some() {
        return Vec::new();
    }
    let zones: Vec<Option<String>> = match &p.zones {
        Some(z) => z.iter().cloned().map(Some).collect(),
        None => vec![None],
    };
    let nat_zones: Vec<Option<String>> = if p.public_only {
        Vec::new()
    } else if p.single_nat_gateway {
        zones.into_iter().take(1).collect()
    } else {
        zones
    };
    let mut out = vec![(Quota::Vpcs, None, 1), (Quota::InternetGateways, None, 1)];
    out.push((Quota::ElasticIps, None, nat_zones.len() as u32));
    out.extend(nat_zones.into_iter().flatten().map(|z| (Quota::NatGateways, Some(z), 1)));
    out.retain(|(_, _, n)| *n > 0);
    out
}

/// `p` with the zone a provision that names none gets (the first available, as `preflight`
/// picks it), so that its per-zone NAT gateway quota is checked too; `p` as it is otherwise.
pub async fn with_its_zone(aws: &infraflow_activities::Aws, p: &ProvisionInput) -> Result<ProvisionInput, AwsError> {
    if p.zones.is_some() || p.vpc_id.is_some() || p.public_only {
        return Ok(p.clone());
    }
    let zones = infraflow_activities::network::availability_zones(aws).await?;
    Ok(ProvisionInput { zones: zones.first().map(|z| vec![z.name.clone()]), ..p.clone() })
}

/// What a workflow admitted beside others still claims of the quotas: what it makes, less what
/// its cluster has made so far (`Usage` counts that as in use already).
#[derive(Clone, Debug)]
pub struct Claim {
    pub infra: String,
    pub wanted: Vec<(Quota, Option<String>, u32)>,
}

impl Claim {
    pub fn of(p: &ProvisionInput) -> Claim {
        Claim { infra: p.infra_id().to_string(), wanted: wanted(p) }
    }

    fn left(&self, usage: &Usage, quota: Quota, zone: Option<&str>) -> u32 {
        self.wanted
            .iter()
            .filter(|(q, z, _)| *q == quota && z.as_deref() == zone)
            .map(|(_, _, n)| n.saturating_sub(usage.own_of(&self.infra, quota, zone)))
            .sum()
    }
}

/// Each quota `p` would overrun beside `others` (workflows admitted before it and not finished),
/// as a phrase: `needs 3 Elastic IPs, 1 free (quota 5, 4 in use)`.
pub fn shortfalls(p: &ProvisionInput, usage: &Usage, others: &[Claim]) -> Vec<String> {
    let mine = Claim::of(p);
    let mut out = Vec::new();
    for (quota, zone, _) in &mine.wanted {
        let Some(limit) = usage.limits.get(quota) else { continue };
        let zone = zone.as_deref();
        let new = mine.left(usage, *quota, zone);
        let in_use = usage.in_use_of(*quota, zone);
        let claimed: u32 = others.iter().map(|c| c.left(usage, *quota, zone)).sum();
        let free = limit.value.saturating_sub(in_use + claimed);
        if new > free {
            let (at, per) = match zone {
                Some(z) => (format!(" in {z}"), " per zone"),
                None => (String::new(), ""),
            };
            let claimed =
                if claimed > 0 { format!(", {claimed} claimed by workflows running here") } else { String::new() };
            out.push(format!(
                "needs {new} {}{at}, {free} free (quota {}{per}, {in_use} in use{claimed})",
                quota.name(new),
                limit.value
            ));
        }
    }
    out
}

/// Which quotas stand at AWS's published defaults because Service Quotas could not be read, and
/// why: said to the operator, who may have more.
pub fn defaulted(usage: &Usage) -> Option<String> {
    let mut why: Vec<String> = Vec::new();
    let mut which: Vec<String> = Vec::new();
    for (quota, limit) in &usage.limits {
        if let Some(w) = &limit.defaulted {
            which.push(format!("{} {}", limit.value, quota.name(limit.value)));
            if !why.contains(w) {
                why.push(w.clone());
            }
        }
    }
    (!which.is_empty()).then(|| {
        format!(
            "Service Quotas could not be read ({}): AWS's published defaults used ({}); pass --skip-quota-check if the account has more",
            why.join(", "),
            which.join(", ")
        )
    })
}

/// What the quota check says before a provision (or create-cluster) is journaled: a refusal (one
/// line naming each quota it would overrun) and a note (defaults stood in for Service Quotas).
#[derive(Debug, Default)]
pub struct Admission {
    pub refusal: Option<String>,
    pub note: Option<String>,
}

/// Reads the quotas a workflow of `input` draws on and whether it fits: a provision's (or
/// create-cluster's infrastructure) network quotas, a create-iam's (or create-cluster's IAM)
/// roles and instance profiles, a create-privatelink's (or create-cluster's) load balancers and
/// target groups, a scale-nodepool's (or create-cluster's) On-Demand vCPUs, a provision's hosted
/// zones; other workflows fit. Read again on a retryable error (throttling), as a step would.
pub async fn admit_before_submit(pool: &AwsPool, workflow: &str, input: &Value) -> Result<Admission, AwsError> {
    crate::read_again::read_retrying(|e: &AwsError| e.retryable, || admit_once(pool, workflow, input)).await
}

async fn admit_once(pool: &AwsPool, workflow: &str, input: &Value) -> Result<Admission, AwsError> {
    let (network, iam, links, (vcpus, vcpu_note), (zones, zone_note)) = futures::try_join!(
        network_shortfalls(pool, workflow, input),
        crate::quota::iam::shortfalls_before_submit(pool, workflow, input),
        crate::quota::link::shortfalls_before_submit(pool, workflow, input),
        crate::quota::vcpu::shortfalls_before_submit(pool, workflow, input),
        crate::quota::zone::shortfalls_before_submit(pool, workflow, input)
    )?;
    let (mut short, note, hint, region) = network.unwrap_or_default();
    short.extend(iam);
    short.extend(links);
    short.extend(vcpus);
    short.extend(zones);
    let notes: Vec<String> = [note, vcpu_note, zone_note].into_iter().flatten().collect();
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    let given = input["region"].as_str().or(input["infra"]["region"].as_str()).unwrap_or_default();
    let region = if region.is_empty() { given.to_string() } else { region };
    let refusal = (!short.is_empty()).then(|| {
        format!(
            "{workflow} would not fit the account's quotas in {region}: {}; nothing was submitted — release some, ask AWS for more (Service Quotas){hint}, or pass --skip-quota-check",
            short.join("; "),
        )
    });
    Ok(Admission { refusal, note })
}

/// A provision's shortfalls, the note on defaulted quotas, a hint and its region; None for a
/// workflow that makes no network. A provision that fits is marked checked for its admission.
async fn network_shortfalls(
    pool: &AwsPool,
    workflow: &str,
    input: &Value,
) -> Result<Option<(Vec<String>, Option<String>, &'static str, String)>, AwsError> {
    let infra = match workflow {
        "provision-infra" => input,
        "create-cluster" => &input["infra"],
        _ => return Ok(None),
    };
    let Ok(p) = serde_json::from_value::<ProvisionInput>(infra.clone()) else { return Ok(None) };
    if wanted(&p).is_empty() {
        return Ok(None);
    }
    let aws = pool.region(&p.region).await;
    let infras = [p.infra_id().to_string()];
    let (p, usage) = futures::try_join!(with_its_zone(&aws, &p), quotas::read(&aws, &infras))?;
    let short = shortfalls(&p, &usage, &[]);
    if short.is_empty() {
        crate::quota::checked_before_journal(p.infra_id(), &p.region);
    }
    let hint = if p.single_nat_gateway || p.public_only || short.is_empty() { "" } else { ", use singleNATGateway" };
    Ok(Some((short, defaulted(&usage), hint, p.region.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use infraflow_activities::quotas::Limit;

    fn input(extra: serde_json::Value) -> ProvisionInput {
        let mut v = serde_json::json!({"name": "q", "infraID": "q-abcde", "region": "us-east-1", "baseDomain": "example.com",
                                       "zones": ["us-east-1a", "us-east-1b", "us-east-1c"]});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    fn usage(eips: u32, own: u32) -> Usage {
        let mut u = Usage::default();
        for q in Quota::ALL {
            u.limits.insert(q, Limit { value: 5, defaulted: None });
        }
        u.in_use.insert(Quota::ElasticIps, eips);
        u.own.entry("q-abcde".into()).or_default().insert(Quota::ElasticIps, own);
        u
    }

    #[test]
    fn three_nat_zones_need_three_addresses_and_a_single_nat_gateway_one() {
        let p = input(serde_json::json!({}));
        assert_eq!(shortfalls(&p, &usage(4, 0), &[]), vec!["needs 3 Elastic IPs, 1 free (quota 5, 4 in use)"]);
        assert!(shortfalls(&input(serde_json::json!({"singleNATGateway": true})), &usage(4, 0), &[]).is_empty());
        assert!(shortfalls(&input(serde_json::json!({"publicOnly": true})), &usage(5, 0), &[]).is_empty());
    }

    #[test]
    fn what_the_cluster_already_has_is_not_needed_again() {
        // A provision run again over its own three addresses (5 in use, 3 its own) needs none.
        assert!(shortfalls(&input(serde_json::json!({})), &usage(5, 3), &[]).is_empty());
        assert_eq!(
            shortfalls(&input(serde_json::json!({})), &usage(5, 2), &[]),
            vec!["needs 1 Elastic IP, 0 free (quota 5, 5 in use)"]
        );
    }

    #[test]
    fn a_customers_vpc_needs_none_of_these() {
        let p = input(serde_json::json!({"vpcID": "vpc-1", "zones": null, "subnets": []}));
        assert!(wanted(&p).is_empty());
    }

    #[test]
    fn a_full_zone_is_named_with_its_nat_gateways() {
        let mut u = usage(0, 0);
        u.zone_nats.insert("us-east-1b".into(), 5);
        assert_eq!(
            shortfalls(&input(serde_json::json!({})), &u, &[]),
            vec!["needs 1 NAT gateway in us-east-1b, 0 free (quota 5 per zone, 5 in use)"]
        );
    }

    #[test]
    fn what_workflows_admitted_before_still_claim_is_not_free() {
        // Another cluster admitted for 3 addresses has made 1 (in use): it claims 2 more.
        let mut u = usage(1, 0);
        u.own.entry("other-abcde".into()).or_default().insert(Quota::ElasticIps, 1);
        let other = Claim { infra: "other-abcde".into(), wanted: vec![(Quota::ElasticIps, None, 3)] };
        let single = input(serde_json::json!({"singleNATGateway": true}));
        assert!(shortfalls(&single, &u, std::slice::from_ref(&other)).is_empty());
        let three = input(serde_json::json!({}));
        assert_eq!(
            shortfalls(&three, &u, &[other]),
            vec!["needs 3 Elastic IPs, 2 free (quota 5, 1 in use, 2 claimed by workflows running here)"]
        );
    }

    #[test]
    fn defaults_are_said_with_why() {
        let mut u = usage(0, 0);
        u.limits.insert(Quota::ElasticIps, Limit { value: 5, defaulted: Some("AccessDeniedException".into()) });
        let said = defaulted(&u).unwrap();
        assert!(said.contains("AccessDeniedException") && said.contains("5 Elastic IPs"), "{said}");
    }
}
