//! The provision's first phase, which only reads: the public zone exists, the zones are
//! Availability Zones of the region, a customer's network (bring your own VPC) meets every rule,
//! and what the cluster already has, a read per kind — all side by side, in one journaled step.

use std::sync::atomic::{AtomicBool, Ordering};

use infraflow_activities::customer_network::{self, CustomerNetwork};
use infraflow_activities::inventory::take_inventory;
use infraflow_activities::network::ZoneInfo;
use infraflow_activities::throttle::read_retrying;
use infraflow_activities::{AwsPool, Identity, Inventory, dns, network};
use infraflow_engine::{ActivityError, StepError, WfCtx};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aws_steps::{from_aws, read_opts};
use crate::provision::customer_rules;
use crate::provision::input::ProvisionInput;

/// The roles of what provision-infra creates, once per cluster and once per zone: the identity
/// keys its inventory reads. A role missing here is only ever looked up step by step.
const CLUSTER_ROLES: [&str; 6] =
    ["vpc", "dhcp-options", "internet-gateway", "worker-sg", "public-route-table", "s3-endpoint"];
const ZONE_ROLES: [&str; 5] = ["public-subnet", "private-subnet", "eip", "nat", "private-route-table"];

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Preflight {
    pub public_zone_id: String,
    pub zones: Vec<ZoneInfo>,
    /// What the cluster had when the workflow started (journaled for the record; trusted only by
    /// the execution that read it).
    #[serde(default)]
    pub inventory: Inventory,
    /// The customer's network as checked (bring your own VPC): the VPC and subnets the phases
    /// use instead of making their own, and whether an S3 gateway endpoint was already there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer: Option<CustomerNetwork>,
}

pub(crate) fn identity_keys(infra: &str, zones: &[String]) -> std::collections::BTreeSet<String> {
    let cluster = CLUSTER_ROLES.iter().map(|r| Identity::new(infra, r, None, String::new()).key());
    let zoned = zones
        .iter()
        .flat_map(|z| ZONE_ROLES.iter().map(move |r| Identity::new(infra, r, Some(z), String::new()).key()));
    cluster.chain(zoned).collect()
}

/// The step's input: the same keys as before bring-your-own existed, for the journals of then;
/// the customer's ids only when given.
fn step_input(p: &ProvisionInput) -> serde_json::Value {
    let mut input = serde_json::json!({"region": p.region, "baseDomain": p.base_domain, "zones": p.zones});
    if let (Some(vpc), Some(subnets)) = (&p.vpc_id, &p.subnets) {
        input["vpcID"] = serde_json::json!(vpc);
        input["subnets"] = serde_json::json!(subnets);
    }
    input
}

/// Runs the preflight: what it found, and whether this execution read it (false: replayed from
/// the journal, and its inventory is history).
pub(crate) async fn run(ctx: &WfCtx, pool: &AwsPool, p: &ProvisionInput) -> Result<(Preflight, bool), StepError> {
    let (infra, region) = (p.infra_id(), p.region.as_str());
    let took_inventory = AtomicBool::new(false);
    let pre: Preflight = ctx
        .step_with("preflight", "provision.preflight", &step_input(p), read_opts(), || async {
            let aws = pool.region(region).await;
            // In a customer's VPC the cluster makes two things: looking each up costs less than
            // the inventory's nine reads, so none is taken (every create looks up).
            let customer_vpc = p.vpc_id.is_some();
            let early = async {
                match &p.zones {
                    Some(names) if !customer_vpc => {
                        take_inventory(&aws, infra, &identity_keys(infra, names)).await.map(Some)
                    }
                    _ => Ok(None),
                }
            };
            let customer = async {
                match &p.vpc_id {
                    Some(vpc) => customer_network::read(&aws, vpc, &customer_rules::subnet_ids(p)).await.map(Some),
                    None => Ok(None),
                }
            };
            let (public_zone_id, available, early, customer) = futures::try_join!(
                read_retrying(|| dns::find_public_zone(&aws, &p.base_domain)),
                read_retrying(|| network::availability_zones(&aws)),
                early,
                customer
            )
            .map_err(from_aws)?;
            let public_zone_id = public_zone_id.ok_or_else(|| {
                ActivityError::terminal(format!(
                    "baseDomain: no public hosted zone named {} in this account; create it first (infraflow never creates it)",
                    p.base_domain
                ))
            })?;
            if let Some(net) = &customer {
                let env = ctx.environment();
                let account = env.as_ref().and_then(|e| e.get("account")).and_then(Value::as_str);
                let broken = customer_rules::violations(p, net, &available, account);
                if !broken.is_empty() {
                    return Err(ActivityError::terminal(customer_rules::refusal(&broken)));
                }
            }
            let zones = chosen_zones(p, &available)?;
            let inventory = match early {
                Some(i) => i,
                None if customer_vpc => Inventory::default(),
                None => {
                    let names: Vec<String> = zones.iter().map(|z| z.name.clone()).collect();
                    take_inventory(&aws, infra, &identity_keys(infra, &names)).await.map_err(from_aws)?
                }
            };
            took_inventory.store(true, Ordering::SeqCst);
            Ok(Preflight { public_zone_id, zones, inventory, customer })
        })
        .await?;
    let took = took_inventory.load(Ordering::SeqCst);
    Ok((pre, took))
}

/// The zones the input names, as the region lists them; left out, the first available one.
fn chosen_zones(p: &ProvisionInput, available: &[ZoneInfo]) -> Result<Vec<ZoneInfo>, ActivityError> {
    let region = &p.region;
    match &p.zones {
        None => Ok(vec![
            available
                .first()
                .cloned()
                .ok_or_else(|| ActivityError::terminal(format!("region {region} has no available zone")))?,
        ]),
        Some(names) => names
            .iter()
            .map(|n| {
                available.iter().find(|z| &z.name == n).cloned().ok_or_else(|| {
                    ActivityError::terminal(format!(
                        "zones: {n} is not an available Availability Zone of {region} (Local and Wavelength Zones cannot hold a cluster)"
                    ))
                })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inventory_reads_every_role_of_every_zone() {
        let keys = identity_keys("c-abcde", &["us-east-1a".into(), "us-east-1b".into()]);
        assert_eq!(keys.len(), CLUSTER_ROLES.len() + 2 * ZONE_ROLES.len());
        assert!(keys.contains("c-abcde/vpc"));
        assert!(keys.contains("c-abcde/nat/us-east-1b"));
    }
}
