//! Whether a scale-nodepool (or create-cluster's node pools) fits the region's On-Demand vCPU
//! quota: the instances it launches beyond what the pool (the cluster) has, times their type's
//! vCPUs, against the standard families' quota less the vCPUs running and less what workflows
//! admitted beside it still claim. Checked before it is journaled, and again by its admission
//! (`hold::admission`). Other families' quotas are not read. AWS publishes no default for this quota
//! (it sets one per account): when Service Quotas cannot be read, nothing is checked, and the
//! note says so.

use infraflow_activities::compute::{VcpuCensus, is_standard, vcpu_census};
use infraflow_activities::tags::{TagQuery, ownership_key};
use infraflow_activities::{AwsError, AwsPool};
use serde_json::Value;

use crate::nodepool::ScaleInput;

/// What a workflow launches of the standard families: its instances' type, how many the pool
/// (or cluster) has in all once it ends, and the tag of those it has already.
#[derive(Clone, Debug)]
pub struct VcpuClaim {
    pub instance_type: String,
    pub wanted: u32,
    pub mine: TagQuery,
}

impl VcpuClaim {
    /// The claim of a workflow of `input` and its region; None for one that launches nothing a
    /// standard-family quota counts.
    pub fn of(workflow: &str, input: &Value) -> Option<(VcpuClaim, String)> {
        let (region, claim) = match workflow {
            "scale-nodepool" => {
                let s: ScaleInput = serde_json::from_value(input.clone()).ok()?;
                let wanted = u32::try_from(s.replicas).ok()?;
                let claim = VcpuClaim { instance_type: s.instance_type.clone(), wanted, mine: s.pool_query() };
                (s.region.clone().unwrap_or_default(), claim)
            }
            "create-cluster" => {
                let infra = &input["infra"];
                let id = infra["infraID"].as_str()?;
                let zones = infra["zones"].as_array().map_or(1, |z| z.len().max(1)) as u32;
                let replicas = u32::try_from(input["nodePool"]["replicas"].as_i64()?).ok()?;
                let claim = VcpuClaim {
                    instance_type: input["nodePool"]["instanceType"].as_str()?.to_string(),
                    wanted: replicas * zones,
                    mine: TagQuery::new(ownership_key(id), "owned"),
                };
                (infra["region"].as_str()?.to_string(), claim)
            }
            _ => return None,
        };
        (claim.wanted > 0 && is_standard(&claim.instance_type)).then_some((claim, region))
    }

    /// vCPUs this claim still launches, beside what the census shows it has.
    pub fn left(&self, census: &VcpuCensus) -> u32 {
        self.wanted.saturating_sub(census.own(&self.mine)) * census.each(&self.instance_type)
    }

    /// Where a "checked before journaling" mark of this claim is kept (`hold::admission`).
    pub fn checked_key(&self) -> String {
        format!("vcpus {}={}", self.mine.key, self.mine.value)
    }
}

/// The claim's shortfall beside `others` (admitted and unfinished), as a phrase (`needs 12
/// vCPUs of On-Demand standard instances (3 m6i.xlarge), 8 free (quota 8, 0 in use)`); Err
/// with a note when the quota could not be read, None when it fits.
pub fn shortfall(claim: &VcpuClaim, census: &VcpuCensus, others: &[VcpuClaim]) -> Result<Option<String>, String> {
    let new = claim.wanted.saturating_sub(census.own(&claim.mine));
    if new == 0 {
        return Ok(None);
    }
    let kind = &claim.instance_type;
    let quota = census.quota.clone().map_err(|why| {
        format!(
            "the On-Demand vCPU quota could not be read ({why}) and has no published default: the {new} {kind} instances' vCPUs were not checked"
        )
    })?;
    let need = new * census.each(kind);
    let in_use = census.in_use();
    let claimed: u32 = others.iter().map(|o| o.left(census)).sum();
    let free = quota.saturating_sub(in_use + claimed);
    let claimed = if claimed > 0 { format!(", {claimed} claimed by workflows running here") } else { String::new() };
    Ok((need > free).then(|| {
        format!(
            "needs {need} vCPUs of On-Demand standard instances ({new} {kind}), {free} free (quota {quota}, {in_use} in use{claimed})"
        )
    }))
}

/// The vCPUs a workflow of `input` launches would overrun, and a note when the quota could not
/// be read. One that fits is marked checked for its admission.
pub async fn shortfalls_before_submit(
    pool: &AwsPool,
    workflow: &str,
    input: &Value,
) -> Result<(Vec<String>, Option<String>), AwsError> {
    let Some((claim, region)) = VcpuClaim::of(workflow, input) else { return Ok((Vec::new(), None)) };
    let aws = pool.region(&region).await;
    let census = vcpu_census(&aws, &[claim.instance_type.as_str()]).await?;
    match shortfall(&claim, &census, &[]) {
        Ok(None) => {
            crate::quota::checked_before_journal(&claim.checked_key(), &region);
            Ok((Vec::new(), None))
        }
        Ok(Some(short)) => Ok((vec![short], None)),
        Err(note) => Ok((Vec::new(), Some(note))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(pool: &str) -> (String, Vec<(String, String)>) {
        ("m6i.xlarge".to_string(), vec![("pool".to_string(), pool.to_string())])
    }

    fn claim(pool: &str, wanted: u32) -> VcpuClaim {
        VcpuClaim { instance_type: "m6i.xlarge".into(), wanted, mine: TagQuery::new("pool", pool) }
    }

    fn census(quota: u32, running: Vec<(String, Vec<(String, String)>)>) -> VcpuCensus {
        VcpuCensus::of(Ok(quota), running, [("m6i.xlarge".to_string(), 4)].into())
    }

    #[test]
    fn what_an_admitted_pool_still_launches_is_not_free_and_what_it_launched_is_counted_once() {
        // Pool a was admitted for two nodes and has launched one: 4 vCPUs in use, 4 claimed.
        let c = census(12, vec![node("a")]);
        let a = claim("a", 2);
        assert_eq!(a.left(&c), 4);
        assert_eq!(shortfall(&claim("b", 1), &c, std::slice::from_ref(&a)), Ok(None));
        assert_eq!(
            shortfall(&claim("b", 2), &c, &[a]),
            Ok(Some(
                "needs 8 vCPUs of On-Demand standard instances (2 m6i.xlarge), 4 free (quota 12, 4 in use, 4 claimed by workflows running here)"
                    .into()
            ))
        );
    }

    #[test]
    fn a_pool_scaled_within_what_it_has_needs_nothing_and_an_unread_quota_is_a_note() {
        let c = census(4, vec![node("a"), node("a")]);
        assert_eq!(shortfall(&claim("a", 2), &c, &[]), Ok(None));
        let unread =
            VcpuCensus::of(Err("AccessDeniedException".into()), vec![], [("m6i.xlarge".to_string(), 4)].into());
        let note = shortfall(&claim("a", 1), &unread, &[]).unwrap_err();
        assert!(note.contains("AccessDeniedException") && note.contains("were not checked"), "{note}");
    }

    #[test]
    fn only_standard_families_with_instances_to_launch_claim() {
        let input = |kind: &str, replicas: i64| {
            serde_json::json!({"infraID": "v-abcde", "nodePool": "w", "replicas": replicas, "region": "us-east-1",
                               "subnetID": "subnet-1", "instanceType": kind, "imageID": "ami-1", "securityGroupIDs": ["sg-1"]})
        };
        assert!(VcpuClaim::of("scale-nodepool", &input("m6i.xlarge", 2)).is_some());
        assert!(VcpuClaim::of("scale-nodepool", &input("m6i.xlarge", 0)).is_none());
        assert!(VcpuClaim::of("scale-nodepool", &input("g5.xlarge", 2)).is_none());
        assert!(VcpuClaim::of("teardown", &input("m6i.xlarge", 2)).is_none());
    }
}
