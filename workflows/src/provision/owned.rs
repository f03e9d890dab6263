//! What the cluster owns inside its VPC, whoever made the VPC: the worker security group and the
//! two private zones (`<name>.<baseDomain>` and `<name>.hypershift.local`), side by side, off the
//! network's critical path (with the DHCP options of a network infraflow made).

use infraflow_activities::{Kind, dns, security};
use infraflow_engine::{StepError, join_pair};

use super::plan::Plan;
use crate::aws_steps::from_aws;
use crate::provision::input::worker_rules;

pub(super) struct Owned {
    pub security_group_id: String,
    pub private_zone_id: String,
    pub local_zone_id: String,
}

/// What needs only the VPC, side by side: the DHCP options of a network infraflow made
/// (`made_network`), the worker group, the private zones. Started in this order, which is the
/// order of their journal positions since version 2.
pub(super) async fn ensure_owned(plan: &Plan<'_>, vpc: &str, made_network: bool) -> Result<Owned, StepError> {
    let (p, infra) = (plan.p, plan.infra);
    // Called first: its journal position comes before the group's and the zones'.
    let dhcp = made_network.then(|| super::network::ensure_dhcp_options(plan, vpc));
    let dhcp = async move {
        if let Some(step) = dhcp {
            step.await?;
        }
        Ok::<_, StepError>(())
    };
    let sg_ident = plan.ident("worker-sg", None, format!("{infra}-worker-sg"));
    let sg_look = plan.first(&sg_ident);
    let sg_name = format!("{infra}-worker-sg");
    let rules = worker_rules(&p.vpc_cidr);
    // From version 4 the rules nobody owns are revoked as steps of their own, after the group's
    // (journaled and undone: `revoke`); runs of earlier versions revoke inside the group's step.
    let journaled_revoke = plan.ctx.code_version() >= 4;
    let extra = if journaled_revoke { security::Extra::Keep } else { security::Extra::RevokeInOwnGroup };
    let sg = plan.ctx.step_with(
        "security-group",
        "ec2.ensure-security-group",
        &(&sg_ident, vpc, &rules),
        plan.with_undo(Kind::SecurityGroup, &sg_ident),
        || async {
            let aws = plan.pool.region(plan.region).await;
            security::ensure_security_group(
                &aws,
                &sg_ident,
                vpc,
                &sg_name,
                "worker security group",
                &rules,
                // What anyone but its controllers added to the worker group the cluster made is
                // drift (`infraflow check`): a provision takes it out again.
                extra,
                sg_look.lookup(),
            )
            .await
            .map_err(from_aws)
        },
    );
    let private = ensure_private_zone(plan, "private-zone", p.private_zone_name(), vpc);
    let local = ensure_private_zone(plan, "local-zone", format!("{}.hypershift.local", p.name), vpc);
    let (_, (security_group_id, (private_zone_id, local_zone_id))) =
        join_pair(dhcp, join_pair(sg, join_pair(private, local))).await?;
    if journaled_revoke {
        super::revoke::revoke_unwanted(plan, &security_group_id, &rules).await?;
    }
    Ok(Owned { security_group_id, private_zone_id, local_zone_id })
}

/// A private zone of the cluster (`role` is its step key and identity role), associated with `vpc`.
async fn ensure_private_zone(plan: &Plan<'_>, role: &str, name: String, vpc: &str) -> Result<String, StepError> {
    let ident = plan.ident(role, None, name.clone());
    plan.ctx
        .step_with(
            role,
            "route53.ensure-private-zone",
            &(&ident, &name, vpc),
            plan.with_undo(Kind::HostedZone, &ident),
            || async {
                let aws = plan.pool.region(plan.region).await;
                dns::ensure_private_zone(&aws, &ident, &name, vpc).await.map_err(from_aws)
            },
        )
        .await
}
