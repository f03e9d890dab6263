//! provision-infra's body as named phases: a preflight that only reads, the network (made, or the
//! customer's checked and marked), what the cluster owns in it (worker group, DNS zones), and the
//! S3 endpoint on its route tables. Inside each phase every step starts as soon as what it needs
//! exists, so a run waits for the longest chain (VPC → gateway → NAT → route table → S3
//! endpoint), not for the sum of its calls; a first provisioning skips the lookups an inventory
//! answered. Step keys are the journal's contract: a phase moved keeps its keys.

use infraflow_activities::AwsPool;
use infraflow_engine::{StepError, WfCtx, join_pair};

use input::{OutputZone, ProvisionInput, ProvisionOutput};

pub(crate) mod customer;
pub(crate) mod customer_rules;
mod endpoints;
pub mod input;
mod network;
mod owned;
mod plan;
mod preflight;
pub(crate) mod revoke;

use plan::{Network, Plan};

pub use customer_rules::check_before_submit;

/// The provision-infra body, callable as part of a larger workflow (create-cluster).
pub async fn provision(ctx: &WfCtx, pool: &AwsPool, p: &ProvisionInput) -> Result<ProvisionOutput, StepError> {
    let (pre, took_inventory) = preflight::run(ctx, pool, p).await?;
    let plan = Plan {
        ctx,
        pool,
        p,
        infra: p.infra_id(),
        region: &p.region,
        extra: p.additional_tags.clone().into_iter().collect(),
        expires: crate::expiry::date(ctx, p.expires_in.as_deref()),
        inventory: took_inventory.then_some(&pre.inventory),
    };
    let plan = &plan;
    let vpc = match &pre.customer {
        Some(net) => net.vpc_id.clone(),
        None => network::ensure_vpc(plan).await?,
    };
    let vpc = vpc.as_str();
    // A customer's network is marked first: what the cluster then makes in it names the marked
    // VPC, subnets and route tables, which a policy scoped to the cluster allows by those marks.
    let customer_net = match &pre.customer {
        Some(customer) => Some(customer::mark(plan, customer).await?),
        None => None,
    };
    let network_then_endpoint = async {
        let net = match customer_net {
            Some(net) => net,
            None => network::ensure_zones_and_routes(plan, &pre.zones, vpc).await?,
        };
        endpoints::ensure_s3_endpoint(plan, vpc, &net.route_tables, pre.customer.as_ref()).await?;
        Ok::<_, StepError>(net)
    };
    // What the cluster owns needs only the VPC: beside the network's chain, off its critical path.
    let (own, net) =
        join_pair(Box::pin(owned::ensure_owned(plan, vpc, pre.customer.is_none())), Box::pin(network_then_endpoint))
            .await?;
    Ok(output(p, &pre.public_zone_id, vpc, own, &net))
}

/// HyperShift's `CreateInfraOutput` of what the phases made or checked.
fn output(p: &ProvisionInput, public_zone_id: &str, vpc: &str, own: owned::Owned, net: &Network) -> ProvisionOutput {
    ProvisionOutput {
        region: p.region.clone(),
        zone: String::new(),
        infra_id: p.infra_id().to_string(),
        name: p.name.clone(),
        machine_cidr: p.vpc_cidr.clone(),
        vpc_id: vpc.to_string(),
        zones: net
            .zones
            .iter()
            .map(|z| OutputZone {
                name: z.zone.clone(),
                subnet_id: z.private.as_ref().or(z.public.as_ref()).cloned().unwrap_or_default(),
            })
            .collect(),
        base_domain: p.base_domain.clone(),
        base_domain_prefix: p.base_domain_prefix.clone().unwrap_or_default(),
        public_only: p.public_only,
        public_zone_id: public_zone_id.to_string(),
        private_zone_id: own.private_zone_id,
        local_zone_id: own.local_zone_id,
        security_group_id: own.security_group_id,
        public_subnet_ids: net.zones.iter().filter_map(|z| z.public.clone()).collect(),
        ..ProvisionOutput::default()
    }
}
