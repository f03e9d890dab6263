//! `scale-nodepool`: a node pool's EC2 instances to an absolute replica count, up or down, and
//! its subnet onto the cluster's PrivateLink endpoints.
//!
//! Why members are counted by tag and indexed: a node pool is counted by its tag
//! (`infraflow.io/nodepool=<infraID>/<pool>`, `NODEPOOL_TAG`); members have stable indices
//! (`infraflow.io/member`), scale-up fills the lowest free ones, scale-down removes the newest
//! first (`plan`). A member's ClientToken includes the workflow id, so a member launched again
//! after a scale-down is a new instance on AWS too.

use infraflow_activities::compute::{self, LaunchSpec, Member};
use infraflow_activities::privatelink;
use infraflow_activities::tags::{TagQuery, ownership_key};
use infraflow_activities::{AwsPool, Kind};
use serde_json::Value;

use crate::aws_steps::{acting_region, create_opts, from_aws, probe_environment, read_opts};
pub use crate::nodepool::{NODEPOOL_TAG, ScaleInput, ScaleOutput};
use crate::{user_data, validate};
use infraflow_engine::{ActivityError, InputError, StepError};
use infraflow_engine::{BoxFuture, Validated, WorkflowDef};
use infraflow_engine::{WfCtx, join_branches};

/// The step key of terminating `m`: by its member index, or, for an instance of the pool without
/// one (its index reads as u32::MAX), by its instance id: two of them must not share a key.
fn terminate_key(m: &Member) -> String {
    if m.index == u32::MAX {
        format!("member/{}/terminate", m.instance_id)
    } else {
        format!("member/{}/terminate", m.index)
    }
}

/// What to do to reach `replicas` from the live members: indices to launch, members to
/// terminate (newest first).
pub fn plan(live: &[Member], replicas: usize) -> (Vec<u32>, Vec<Member>) {
    if live.len() < replicas {
        let used: std::collections::BTreeSet<u32> = live.iter().map(|m| m.index).collect();
        let launch = (0u32..).filter(|i| !used.contains(i)).take(replicas - live.len()).collect();
        (launch, Vec::new())
    } else {
        let mut newest = live.to_vec();
        newest.sort_by(|a, b| b.launched.cmp(&a.launched).then(b.index.cmp(&a.index)));
        newest.truncate(live.len() - replicas);
        (Vec::new(), newest)
    }
}

pub struct ScaleNodePool {
    pub pool: AwsPool,
}

impl WorkflowDef for ScaleNodePool {
    fn hold(&self, request: infraflow_engine::HoldRequest, input: &Value) -> Option<infraflow_engine::TakeHold> {
        crate::hold::admission::admission_and_lease(&self.pool, request, self.name(), input)
    }

    fn name(&self) -> &'static str {
        "scale-nodepool"
    }

    fn summary(&self) -> &'static str {
        "a node pool's instances to an absolute replica count"
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        let mut s: ScaleInput = validate::decode(input)?;
        s.check()?;
        if let Some(file) = &s.user_data_file {
            let (path, digest) = user_data::pin(file, s.user_data_sha256.as_deref())?;
            (s.user_data_file, s.user_data_sha256) = (Some(path), Some(digest));
        }
        let cluster = validate::cluster_key(&s.infra_id, validate::role(input)?.as_ref());
        let input = serde_json::to_value(&s).map_err(|e| InputError(e.to_string()))?;
        Ok(Validated { input: validate::session_named(id, input), cluster })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.assuming(crate::aws_steps::role_of(&input).as_ref());
        Box::pin(async move {
            let s: ScaleInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let out = scale(&ctx, &pool, &s).await?;
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        use crate::policy::*;
        actions(&[(NETWORK, Use::Read), (COMPUTE, Use::Manage), (ENDPOINTS, Use::Manage), (RESOURCES, Use::Read)])
    }

    fn undo_context(&self, input: &Value) -> serde_json::Map<String, Value> {
        crate::aws_steps::role_context(input)
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let region = serde_json::from_value::<ScaleInput>(input.clone())
            .map(|s| s.region.unwrap_or_default())
            .unwrap_or_default();
        Some(probe_environment(&self.pool.assuming(crate::aws_steps::role_of(input).as_ref()), &region))
    }
}

/// The scale-nodepool body, callable from create-cluster.
pub async fn scale(ctx: &WfCtx, pool: &AwsPool, s: &ScaleInput) -> Result<ScaleOutput, StepError> {
    // Resolved once at the workflow's start, so every undo names its region explicitly.
    let region = acting_region(ctx, s.region.as_deref().unwrap_or_default());
    let q = s.pool_query();
    let owner = ownership_key(&s.infra_id);
    let observe = |key: &'static str| {
        let (q, region, owner) = (q.clone(), region.clone(), owner.clone());
        let input = (q.value.clone(), region.clone());
        ctx.step_with(key, "ec2.list-nodepool", &input, read_opts(), move || {
            let (q, region, owner) = (q.clone(), region.clone(), owner.clone());
            async move {
                let aws = pool.region(&region).await;
                let members = compute::find_instances(&aws, &q).await.map_err(from_aws)?;
                // Only members this cluster owns count (and are ever terminated).
                let owned = TagQuery::new(owner, "owned");
                let owned_ids = compute::find_instances(&aws, &owned).await.map_err(from_aws)?;
                Ok(members
                    .into_iter()
                    .filter(|m| owned_ids.iter().any(|o| o.instance_id == m.instance_id))
                    .collect::<Vec<_>>())
            }
        })
    };
    let live: Vec<Member> = observe("observe").await?;
    let (launch, surplus) = plan(&live, s.replicas as usize);
    let spec = LaunchSpec {
        subnet_id: s.subnet_id.clone(),
        instance_type: s.instance_type.clone(),
        image_id: s.image_id.clone(),
        security_group_ids: s.security_group_ids.clone(),
        instance_profile: s.instance_profile.clone(),
        public_ip: s.public_ips,
        user_data_sha256: s.user_data_sha256.clone(),
    };
    let launches = launch.iter().map(|&i| {
        let mctx = ctx.scoped(&format!("member/{i}"));
        let id = s.member(i, ctx.creator(), crate::expiry::date(ctx, s.expires_in.as_deref()).as_deref());
        let token = id.token();
        let (spec, region) = (&spec, &region);
        async move {
            let instance: String = mctx
                .step_with(
                    "launch",
                    "ec2.ensure-instance",
                    &(&id, spec),
                    create_opts(region, Kind::Instance, &id),
                    || async {
                        let user_data = match (&s.user_data_file, &s.user_data_sha256) {
                            (Some(path), Some(digest)) => Some(user_data::load(path, digest)?),
                            _ => None,
                        };
                        let aws = pool.region(region).await;
                        compute::ensure_instance(&aws, &id, spec, user_data.as_deref(), &token).await.map_err(from_aws)
                    },
                )
                .await?;
            mctx.step_with("running", "ec2.wait-instance-running", &instance, read_opts(), || async {
                let aws = pool.region(region).await;
                compute::wait_instance_running(&aws, &instance).await.map_err(from_aws)
            })
            .await?;
            Ok::<_, StepError>(())
        }
    });
    join_branches(launches).await?;
    let terminations = surplus.iter().map(|m| {
        let region = &region;
        async move {
            ctx.step_with(&terminate_key(m), "ec2.terminate-instance", &m.instance_id, read_opts(), || async {
                let aws = pool.region(region).await;
                compute::terminate_instance(&aws, &m.instance_id).await.map_err(from_aws)
            })
            .await
        }
    });
    join_branches(terminations).await?;
    for vpce in &s.vpc_endpoint_ids {
        let region = &region;
        ctx.step_with(
            &format!("endpoint/{vpce}/subnet"),
            "ec2.add-endpoint-subnet",
            &(vpce, &s.subnet_id),
            read_opts(),
            || async {
                let aws = pool.region(region).await;
                privatelink::add_subnet_to_endpoint(&aws, vpce, &s.subnet_id).await.map_err(from_aws)
            },
        )
        .await
        .map(|_: bool| ())?;
    }
    let now: Vec<Member> = observe("observe-final").await?;
    Ok(ScaleOutput {
        node_pool: s.node_pool.clone(),
        replicas: s.replicas,
        instance_ids: now.into_iter().map(|m| m.instance_id).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(index: u32, launched: i64) -> Member {
        Member { instance_id: format!("i-{index}"), index, state: "running".into(), launched, vpc: None }
    }

    #[test]
    fn members_without_an_index_get_step_keys_of_their_own() {
        let (a, b) = (
            Member { instance_id: "i-a".into(), ..m(u32::MAX, 1) },
            Member { instance_id: "i-b".into(), ..m(u32::MAX, 2) },
        );
        assert_ne!(terminate_key(&a), terminate_key(&b));
        assert_eq!(terminate_key(&m(3, 1)), "member/3/terminate");
    }

    #[test]
    fn scaling_up_fills_the_lowest_free_indices() {
        let (launch, kill) = plan(&[m(0, 1), m(2, 2)], 4);
        assert_eq!(launch, [1, 3]);
        assert!(kill.is_empty());
    }

    #[test]
    fn scaling_down_terminates_the_newest_first() {
        let (launch, kill) = plan(&[m(0, 5), m(1, 9), m(2, 7)], 1);
        assert!(launch.is_empty());
        assert_eq!(kill.iter().map(|m| m.index).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(plan(&[m(0, 5)], 0).1.len(), 1);
    }
}
