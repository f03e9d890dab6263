//! Whether a create-privatelink (or create-cluster's PrivateLink half) fits ELB's quotas in its
//! region before it is journaled: a network load balancer and a target group for each service it
//! links (the router's; the API server's with `exposeAPIServer`), less those of its names the
//! region has already (a run again keeps them), against ELB's limits less what the region has.
//! Endpoint services have no quota of their own (each needs its load balancer, counted here).

use infraflow_activities::elb::elb_room;
use infraflow_activities::{AwsError, AwsPool};
use serde_json::Value;

use crate::create_privatelink::{API_SERVER, ROUTER, service_name};

/// The cluster, region and services of a workflow that links.
fn links(workflow: &str, input: &Value) -> Option<(String, String, Vec<&'static str>)> {
    let (infra, region, expose) = match workflow {
        "create-privatelink" => (&input["infraID"], &input["region"], &input["exposeAPIServer"]),
        "create-cluster" => {
            (&input["infra"]["infraID"], &input["infra"]["region"], &input["privateLink"]["exposeAPIServer"])
        }
        _ => return None,
    };
    let mut services = vec![ROUTER];
    if expose.as_bool() == Some(true) {
        services.push(API_SERVER);
    }
    Some((infra.as_str()?.to_string(), region.as_str()?.to_string(), services))
}

/// What the load balancers and target groups a workflow of `input` makes would overrun, as
/// phrases (`needs 2 network load balancers, 1 free (quota 50, 49 in use)`); none for a workflow
/// that links nothing.
pub async fn shortfalls_before_submit(pool: &AwsPool, workflow: &str, input: &Value) -> Result<Vec<String>, AwsError> {
    let Some((infra, region, services)) = links(workflow, input) else { return Ok(Vec::new()) };
    let names: Vec<String> = services.iter().map(|s| service_name(&infra, s)).collect();
    let room = elb_room(&pool.region(&region).await).await?;
    let mut out = Vec::new();
    for (have, limit, one, many) in [
        (&room.nlbs, room.nlb_limit, "network load balancer", "network load balancers"),
        (&room.target_groups, room.target_group_limit, "target group", "target groups"),
    ] {
        let new = names.iter().filter(|n| !have.contains(*n)).count() as u32;
        let in_use = have.len() as u32;
        let free = limit.saturating_sub(in_use);
        if new > free {
            out.push(format!(
                "needs {new} {}, {free} free (quota {limit}, {in_use} in use)",
                if new == 1 { one } else { many }
            ));
        }
    }
    Ok(out)
}
