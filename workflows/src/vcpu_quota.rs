//! Whether a scale-nodepool (or create-cluster's node pools) fits the region's On-Demand vCPU
//! quota before it is journaled: the instances it launches beyond what the pool (the cluster)
//! has, times their type's vCPUs, against the standard families' quota less the vCPUs running.
//! Other families' quotas are not read. AWS publishes no default for this quota (it sets one per
//! account): when Service Quotas cannot be read, nothing is checked, and the note says so.

use infraflow_activities::compute::vcpu_room;
use infraflow_activities::tags::{TagQuery, ownership_key};
use infraflow_activities::{AwsError, AwsPool};
use serde_json::Value;

use crate::scale_nodepool::ScaleInput;

/// What a workflow launches: region, instance type, instances wanted in all, and the tag of
/// those that count as had already.
fn launches(workflow: &str, input: &Value) -> Option<(String, String, u32, TagQuery)> {
    match workflow {
        "scale-nodepool" => {
            let s: ScaleInput = serde_json::from_value(input.clone()).ok()?;
            let wanted = u32::try_from(s.replicas).ok()?;
            Some((s.region.clone().unwrap_or_default(), s.instance_type.clone(), wanted, s.pool_query()))
        }
        "create-cluster" => {
            let infra = &input["infra"];
            let id = infra["infraID"].as_str()?;
            let zones = infra["zones"].as_array().map_or(1, |z| z.len().max(1)) as u32;
            let replicas = u32::try_from(input["nodePool"]["replicas"].as_i64()?).ok()?;
            let kind = input["nodePool"]["instanceType"].as_str()?.to_string();
            let region = infra["region"].as_str()?.to_string();
            Some((region, kind, replicas * zones, TagQuery::new(ownership_key(id), "owned")))
        }
        _ => None,
    }
}

/// The vCPUs a workflow of `input` launches would overrun, as a phrase (`needs 12 vCPUs of
/// On-Demand standard instances (3 m6i.xlarge), 8 free (quota 8, 0 in use)`), and a note when
/// the quota could not be read.
pub async fn shortfalls_before_submit(
    pool: &AwsPool,
    workflow: &str,
    input: &Value,
) -> Result<(Vec<String>, Option<String>), AwsError> {
    let Some((region, kind, wanted, mine)) = launches(workflow, input) else { return Ok((Vec::new(), None)) };
    let aws = pool.region(&region).await;
    let Some(room) = vcpu_room(&aws, &kind, &mine).await? else { return Ok((Vec::new(), None)) };
    let new = wanted.saturating_sub(room.own);
    if new == 0 {
        return Ok((Vec::new(), None));
    }
    let quota = match room.quota {
        Ok(q) => q,
        Err(why) => {
            return Ok((
                Vec::new(),
                Some(format!(
                    "the On-Demand vCPU quota could not be read ({why}) and has no published default: the {new} {kind} instances' vCPUs were not checked"
                )),
            ));
        }
    };
    let need = new * room.each;
    let free = quota.saturating_sub(room.in_use);
    let short = (need > free).then(|| {
        format!(
            "needs {need} vCPUs of On-Demand standard instances ({new} {kind}), {free} free (quota {quota}, {} in use)",
            room.in_use
        )
    });
    Ok((short.into_iter().collect(), None))
}
