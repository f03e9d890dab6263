//! `teardown`: deletes what the makers of an infra id's cluster made, on their proof, in reverse
//! dependency order, found by tag so that resources a crashed run never journaled go too.
//!
//! The teardown's rounds are one concept — a round's discovery and the stops it makes before any
//! delete (protection, held subnets, riders, region-less IAM of another region) share the one
//! journaled discovery step and are called from it; what each stop says is `stops`. A round's
//! deletes as a graph are `graph`, what it found `discovered`, what it leaves and names `left`,
//! its plan `plan` (for `run teardown --dry-run`).

use std::collections::BTreeMap;

use infraflow_activities::customer_network::riders;
use infraflow_activities::tags::owned;
use infraflow_activities::{
    Aws, AwsError, AwsPool, Kind, Scope, census, classic_elb, dns, elb, look_alikes, resources,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::discovered::Discovered;
use super::graph::{delete_as_graph, delete_kind};
use super::planned::Planned;
use super::stops::{held_subnets_error, protected_error, riders_error};
use crate::aws_steps::{from_aws, probe_environment, read_opts};
use crate::janitor::Evidence;
use crate::validate;
use infraflow_engine::WfCtx;
use infraflow_engine::{ActivityError, InputError, StepError};
use infraflow_engine::{BoxFuture, Validated, WorkflowDef};

/// Discover-and-delete rounds: a second round catches what appeared during the first.
const ROUNDS: u32 = 3;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TeardownInput {
    #[serde(rename = "infraID")]
    pub infra_id: String,
    pub region: String,
    /// The role its AWS calls go through, with STS's `externalID` and `sessionName` (read by
    /// `validate::role`); left out, the process's own credentials.
    #[serde(rename = "roleARN", default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
    #[serde(rename = "externalID", default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    /// STS's `SourceIdentity`: who asked, as CloudTrail shows it on every call of the session
    /// (the daemon's API sets it to the tenant and subject; a tenant may not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_identity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Attempts per delete before pausing on a dependency that does not go away (default 34,
    /// about fifteen minutes of waiting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delete_attempts: Option<u32>,
    /// Written by `sweep` only: the anchor and date it judged expired. Checked again before
    /// each round of deletes; when it no longer holds, the teardown deletes nothing more and
    /// says why (`stopped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swept_expired: Option<Evidence>,
    /// HyperShift's `--preserve-iam`: the cluster's roles, instance profiles and OIDC provider
    /// stay (named under `preserved`), for a cluster made again with the same identity (version
    /// 6 on).
    #[serde(rename = "preserveIAM", default, skip_serializing_if = "std::ops::Not::not")]
    pub preserve_iam: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TeardownOutput {
    #[serde(rename = "infraID")]
    pub infra_id: String,
    /// Deleted resource ids by kind.
    pub deleted: BTreeMap<String, Vec<String>>,
    pub rounds: u32,
    /// What carries the cluster's name but not its tag, left, and why (version 3 on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<Planned>,
    /// Why a sweep's teardown stopped before deleting (more): the cluster is not the one the
    /// sweep judged expired any more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The customer's resources (bring your own VPC) whose marks of the cluster came off, with
    /// the tag keys removed (version 4 on); nothing of the customer's is ever deleted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unmarked: BTreeMap<String, Vec<String>>,
    /// The cluster's IAM a `preserveIAM` teardown left, by kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub preserved: BTreeMap<String, Vec<String>>,
}

pub struct Teardown {
    pub pool: AwsPool,
}

/// Attempts per delete by default: with `delete_retry`'s backoff, about 15 minutes
/// (15 minutes) of waiting out DependencyViolation before pausing.
const DEFAULT_DELETE_ATTEMPTS: u32 = 34;

impl WorkflowDef for Teardown {
    fn hold(&self, request: infraflow_engine::HoldRequest, input: &Value) -> Option<infraflow_engine::TakeHold> {
        crate::hold::lease::for_input(&self.pool, request, self.name(), input)
    }

    fn name(&self) -> &'static str {
        "teardown"
    }

    fn summary(&self) -> &'static str {
        "delete what an infra id's makers made, on their proof (look-alikes are named, never deleted)"
    }

    /// 2: what a running cluster's controllers leave (volumes, snapshots, interfaces) is found
    /// and deleted too, and a last check names what carries the tag and teardown cannot delete.
    /// 3: the image registry's bucket too, and each round's deletes run as a dependency graph.
    /// 4: a cluster in a customer's VPC has its marks taken off the customer's subnets and VPC
    /// once nothing of its own is left.
    /// 5: discovery journals which incarnation of each reusable name it found (an IAM role's or
    /// profile's id, an OIDC provider's or classic load balancer's creation time), and a delete
    /// journals it in its input: another incarnation since pauses the delete (SAFETY-A7937A6 G12).
    /// 6: Karpenter's launch templates (an AutoNode cluster's) are deleted on Karpenter's own
    /// marks, look-alikes named; `preserveIAM` keeps the cluster's IAM.
    fn version(&self) -> u32 {
        6
    }

    /// Runs the previous releases journaled keep running: 7243d60 journaled version 1 (one kind
    /// after another, nothing a running cluster leaves), and every version's kinds and order are
    /// kept (`kind_in_version`). An upgrade never strands a half-done teardown.
    fn oldest_version(&self) -> u32 {
        1
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        let t: TeardownInput = validate::decode(input)?;
        validate::dns_label("infraID", &t.infra_id, 60)?;
        validate::region("region", &t.region)?;
        if let Some(d) = &t.base_domain {
            validate::domain("baseDomain", d)?;
        }
        if let Some(n) = &t.name {
            validate::dns_label("name", n, 40)?;
        }
        if t.max_delete_attempts.is_some_and(|n| !(1..=50).contains(&n)) {
            return Err(InputError::field("maxDeleteAttempts", "must be between 1 and 50"));
        }
        let cluster = validate::cluster_key(&t.infra_id, validate::role(input)?.as_ref());
        let input = serde_json::to_value(&t).map_err(|e| InputError(e.to_string()))?;
        Ok(Validated { input: validate::session_named(id, input), cluster })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.assuming(crate::aws_steps::role_of(&input).as_ref());
        Box::pin(async move {
            let t: TeardownInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let attempts = t.max_delete_attempts.unwrap_or(DEFAULT_DELETE_ATTEMPTS);
            // The cluster's ingress wrote `*.apps.<name>.<baseDomain>` into the public zone
            // (HyperShift's destroy removes it too), under the rule of `public_record_decision`.
            // Checked first, while the private zone and the load balancers still exist.
            let public_record = match (&t.base_domain, &t.name) {
                (Some(base), Some(name)) => {
                    let record = format!("*.apps.{name}.{base}");
                    let (region, infra) = (t.region.clone(), t.infra_id.clone());
                    let removed: usize = ctx
                        .step_with(
                            "public-apps-record",
                            "route53.delete-public-record",
                            &record,
                            read_opts(),
                            || async {
                                let aws = pool.region(&region).await;
                                match public_record_decision(&aws, &infra, name, base).await.map_err(from_aws)? {
                                    Ok(Target { zone, targets }) => {
                                        Ok(dns::delete_records_named_pointing_to(&aws, &zone, &record, &targets)
                                            .await
                                            .map_err(from_aws)?)
                                    }
                                    Err(_) => Ok(0),
                                }
                            },
                        )
                        .await?;
                    (removed > 0).then_some(record)
                }
                _ => None,
            };
            let mut out = teardown(&ctx, &pool, &t, attempts).await?;
            if let Some(record) = public_record {
                out.deleted.entry("public-record".into()).or_default().push(record);
            }
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        use crate::policy::*;
        actions(&[
            (NETWORK, Use::Remove),
            (NAT, Use::Remove),
            (ROUTING, Use::Remove),
            (SECURITY, Use::Remove),
            (ENDPOINTS, Use::Remove),
            (PRIVATELINK, Use::Remove),
            (ELB, Use::Remove),
            (CLASSIC_ELB, Use::Remove),
            (COMPUTE, Use::Remove),
            (DNS, Use::Remove),
            (IAM, Use::Remove),
            (RESOURCES, Use::Read),
            (CENSUS, Use::Read),
            (EBS, Use::Remove),
            (INTERFACES, Use::Remove),
            (TAGGING, Use::Read),
            (S3, Use::Remove),
            (CUSTOMER_NETWORK, Use::Remove),
        ])
    }

    fn undo_context(&self, input: &Value) -> serde_json::Map<String, Value> {
        crate::aws_steps::role_context(input)
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let region = serde_json::from_value::<TeardownInput>(input.clone()).map(|t| t.region).unwrap_or_default();
        Some(probe_environment(&self.pool.assuming(crate::aws_steps::role_of(input).as_ref()), &region))
    }
}

/// Where the public `*.apps` record may be deleted: its zone, and the DNS names of the cluster's
/// own load balancers it may point at.
pub(crate) struct Target {
    pub zone: String,
    pub targets: Vec<String>,
}

/// Whether teardown may remove `*.apps.<name>.<base>` from the public zone, and where; otherwise
/// why not. Only if the cluster owns the private zone `<name>.<base>` (a mistyped name must never
/// remove another cluster's record), and only a record that points at one of the cluster's own
/// load balancers (a replacement cluster of the same name has its own).
pub(crate) async fn public_record_decision(
    aws: &Aws,
    infra: &str,
    name: &str,
    base: &str,
) -> Result<Result<Target, String>, AwsError> {
    let ours = format!("{infra}/private-zone");
    if !dns::private_zone_has_identity(aws, &format!("{name}.{base}"), &ours).await? {
        return Ok(Err(format!("the private zone {name}.{base} is not this cluster's")));
    }
    let Some(zone) = dns::find_public_zone(aws, base).await? else {
        return Ok(Err(format!("there is no public zone {base}")));
    };
    let owned = owned(infra);
    let (classic, v2) =
        futures::try_join!(classic_elb::find_with_dns_names(aws, &owned), elb::find_with_dns_names(aws, &owned))?;
    let targets = classic.into_iter().chain(v2).map(|(_, dns)| dns).collect();
    Ok(Ok(Target { zone, targets }))
}

/// The teardown body. Which kinds it deletes and in what order follow the run's flow version
/// (`ctx.code_version()`): teardown's own.
async fn teardown(
    ctx: &WfCtx,
    pool: &AwsPool,
    t: &TeardownInput,
    max_delete_attempts: u32,
) -> Result<TeardownOutput, StepError> {
    let (infra_id, region) = (t.infra_id.as_str(), t.region.as_str());
    let mut out = TeardownOutput { infra_id: infra_id.to_string(), ..Default::default() };
    // After a `retry` (a pause on a dependency that the operator has since removed), discovery
    // starts over: the journaled inventory of the paused round is what the world was before the
    // fix, and may lack what appeared since (a load balancer missed, a new group). Deletes are
    // idempotent, so a new pass re-deletes nothing that is gone.
    let pass = match ctx.resumes() {
        0 => String::new(),
        n => format!("pass{}/", n + 1),
    };
    let version = ctx.code_version();
    let kinds: Vec<Kind> = Kind::TEARDOWN_ORDER
        .into_iter()
        .filter(|k| kind_in_version(*k, version) && !(t.preserve_iam && IAM_KINDS.contains(k)))
        .collect();
    let kinds = kinds.as_slice();
    for round in 1..=ROUNDS {
        let rctx = ctx.scoped(&format!("{pass}round{round}"));
        if let Some(seen) = &t.swept_expired {
            // Only the first round of the first pass must still see the anchor: after it, a
            // gone anchor is this teardown's own delete.
            let first = pass.is_empty() && round == 1;
            if let Some(why) = sweep_evidence_broken(&rctx, pool, infra_id, region, seen, first).await? {
                out.rounds = round;
                out.stopped =
                    Some(format!("not the cluster the sweep judged expired any more: {why}; nothing more is deleted"));
                return Ok(out);
            }
        }
        let discovered: Discovered = rctx
            .step_with("discover", "aws.discover-owned", &(infra_id, region), read_opts(), || async {
                let aws = pool.region(region).await;
                let scope = Scope::Owned(infra_id.to_string());
                // Every kind is read side by side: one round trip, not fifteen.
                let reads = kinds.iter().map(|&kind| {
                    let (aws, scope) = (&aws, &scope);
                    async move { resources::find_retrying_in_place(aws, kind, scope).await.map(|ids| (kind, ids)) }
                });
                let found = futures::future::try_join_all(reads).await.map_err(from_aws)?;
                let found: BTreeMap<Kind, Vec<String>> = found.into_iter().filter(|(_, ids)| !ids.is_empty()).collect();
                // Protection is absolute: a cluster protected since the teardown began (or whose
                // protection was put on while it was paused) stops it before anything is deleted.
                if let Some((kind, id)) = census::first_protected(&aws, &found).await.map_err(from_aws)? {
                    return Err(protected_error(infra_id, kind, &id));
                }
                // Region-less IAM (HyperShift's) of a cluster with VPCs in another region may be
                // that region's: left here, and named by the last check.
                let mut found = found;
                if IAM_KINDS.iter().any(|k| found.contains_key(k)) {
                    let elsewhere = infraflow_activities::iam::home::anchored_elsewhere(pool, &aws, infra_id)
                        .await
                        .map_err(from_aws)?;
                    for (kind, id, _) in elsewhere {
                        if let Some(ids) = found.get_mut(&kind) {
                            ids.retain(|i| *i != id);
                        }
                    }
                    found.retain(|_, ids| !ids.is_empty());
                }
                // Another cluster provisioned into the cluster's VPC runs there: its network is
                // never taken from under it. Stopped on before anything of this round is deleted.
                let none = Vec::new();
                let (vpcs, endpoints) =
                    (found.get(&Kind::Vpc).unwrap_or(&none), found.get(&Kind::VpcEndpoint).unwrap_or(&none));
                let (mut riding, on_endpoints) = futures::try_join!(
                    riders::riders(&aws, infra_id, vpcs),
                    riders::riders_on_endpoints(&aws, infra_id, endpoints),
                )
                .map_err(from_aws)?;
                riding.extend(on_endpoints);
                if !riding.is_empty() {
                    return Err(riders_error(&riding));
                }
                // Someone's interface in the cluster's subnet: never deleted, and it keeps the
                // subnet. Stopped on before anything of this round is deleted.
                if version >= 3 && found.contains_key(&Kind::Subnet) {
                    let held = look_alikes::interfaces_holding_subnets(&aws, infra_id).await.map_err(from_aws)?;
                    if !held.is_empty() {
                        return Err(held_subnets_error(&held));
                    }
                }
                if version >= 5 {
                    Discovered::read(&aws, found).await.map_err(from_aws)
                } else {
                    Ok(Discovered::Bare(found))
                }
            })
            .await?;
        let inventory = discovered.found();
        out.rounds = round;
        if inventory.is_empty() {
            if version >= 4 {
                out.unmarked = unmark_customer_network(&rctx, pool, infra_id, region).await?;
            }
            if version >= 2 {
                out.left = last_check(&rctx, pool, (infra_id, region), version).await?.unwrap_or_default();
            }
            if t.preserve_iam {
                out.preserved = preserved_iam(&rctx, pool, infra_id, region).await?;
            }
            return Ok(out);
        }
        if round == ROUNDS {
            let left: Vec<String> =
                inventory.iter().flat_map(|(k, ids)| ids.iter().map(move |i| format!("{} {i}", k.as_str()))).collect();
            return Err(StepError::Failed {
                step: rctx.key("discover"),
                error: infraflow_engine::ActivityError::terminal(format!(
                    "resources keep reappearing after {ROUNDS} rounds (is something still creating them?): {}",
                    left.join(", ")
                )),
            });
        }
        let deleted = if version >= 3 {
            delete_as_graph(&rctx, pool, (infra_id, region), &discovered, max_delete_attempts).await?
        } else {
            // Runs of versions 1 and 2 keep their steps' order: one kind after another.
            let mut deleted = Vec::new();
            for &kind in kinds {
                let Some(ids) = inventory.get(&kind) else { continue };
                let keys = ids.iter().map(|id| format!("delete/{}/{id}", kind.as_str()));
                deleted.push((
                    kind,
                    delete_kind(&rctx, pool, (infra_id, region), (kind, &discovered), ids, keys, max_delete_attempts)
                        .await?,
                ));
            }
            deleted
        };
        for (kind, gone) in deleted {
            for (id, gone) in gone {
                if gone {
                    out.deleted.entry(kind.as_str().to_string()).or_default().push(id);
                }
            }
        }
    }
    Ok(out)
}

/// Takes the cluster's marks off a customer's network it was provisioned into (only the tags it
/// added: `customer_network::marks`), once nothing of the cluster's own is left in it.
async fn unmark_customer_network(
    ctx: &WfCtx,
    pool: &AwsPool,
    infra_id: &str,
    region: &str,
) -> Result<BTreeMap<String, Vec<String>>, StepError> {
    ctx.step_with(
        "unmark-customer-network",
        "ec2.unmark-customer-network",
        &(infra_id, region),
        read_opts(),
        || async {
            let aws = pool.region(region).await;
            let done = infraflow_activities::customer_network::unmark(&aws, infra_id, None).await.map_err(from_aws)?;
            Ok(done.into_iter().collect())
        },
    )
    .await
}

/// The global kinds a regional teardown judges by region.
const IAM_KINDS: [Kind; 3] = [Kind::InstanceProfile, Kind::IamRole, Kind::OidcProvider];

/// Reads the cluster's anchors now and says why the sweep's evidence `seen` no longer holds, if
/// it does not (also when this process acts in another account than the census read).
async fn sweep_evidence_broken(
    rctx: &WfCtx,
    pool: &AwsPool,
    infra_id: &str,
    region: &str,
    seen: &Evidence,
    first: bool,
) -> Result<Option<String>, StepError> {
    rctx.step_with("sweep-evidence", "aws.check-sweep-evidence", seen, read_opts(), || async {
        let aws = pool.region(region).await;
        if let Some(account) = &seen.account {
            let here = aws.environment().await.map_err(from_aws)?.account;
            if here != *account {
                return Ok(Some(format!("the sweep read account {account}, and this teardown acts in {here}")));
            }
        }
        let oidc = (seen.anchor_kind == "oidc-provider").then_some(seen.anchor_id.as_str());
        let live = infraflow_activities::anchor::read_anchors(&aws, infra_id, oidc).await.map_err(from_aws)?;
        let now = infraflow_engine::SystemClock.now() / 1000;
        Ok(crate::janitor::evidence_broken(seen, &live, first, now))
    })
    .await
}

/// Whether runs of flow `version` find and delete `kind`: version 1 knew nothing a running
/// cluster leaves, version 2 not its registry bucket, versions before 6 not Karpenter's templates.
fn kind_in_version(kind: Kind, version: u32) -> bool {
    match version {
        0 | 1 => !kind.left_by_a_running_cluster(),
        2 => !matches!(kind, Kind::RegistryBucket | Kind::LaunchTemplate),
        3..=5 => kind != Kind::LaunchTemplate,
        _ => true,
    }
}

/// The cluster's IAM a `preserveIAM` teardown leaves, by kind: read once nothing else of the
/// cluster is left, and named in the output.
async fn preserved_iam(
    ctx: &WfCtx,
    pool: &AwsPool,
    infra_id: &str,
    region: &str,
) -> Result<BTreeMap<String, Vec<String>>, StepError> {
    ctx.step_with("preserved-iam", "iam.find-preserved", &(infra_id, region), read_opts(), || async {
        let aws = pool.region(region).await;
        let scope = Scope::Owned(infra_id.to_string());
        let mut kept = BTreeMap::new();
        for kind in IAM_KINDS {
            let ids = resources::find_retrying_in_place(&aws, kind, &scope).await.map_err(from_aws)?;
            if !ids.is_empty() {
                kept.insert(kind.as_str().to_string(), ids);
            }
        }
        Ok(kept)
    })
    .await
}

/// The teardown's last word, once discovery finds nothing more: what still carries the
/// cluster's tag in the region (the tagging API, any service) and is of a kind teardown does not
/// judge (before version 6, Karpenter's launch templates among them) pauses it, naming each
/// ARN — never `completed` over a leak. (IAM, which the tagging API does not list, is read by the
/// discovery that came before; a `preserveIAM` teardown names what it kept.) From version 3, the buckets
/// with the registry's name prefix but without the cluster's tag, and the look-alikes (from
/// version 6 the launch templates without Karpenter's proof too): left, and named in the output.
/// (Version 2 journaled `null` here, which reads back as None.)
async fn last_check(
    ctx: &WfCtx,
    pool: &AwsPool,
    (infra_id, region): (&str, &str),
    version: u32,
) -> Result<Option<Vec<Planned>>, StepError> {
    let judged: Vec<Kind> =
        Kind::TEARDOWN_ORDER.into_iter().filter(|k| version >= 6 || *k != Kind::LaunchTemplate).collect();
    ctx.step_with("last-check", "tag.find-left", &(infra_id, region), read_opts(), || async {
        let aws = pool.region(region).await;
        let left = infraflow_activities::tagging::left_unknown(&aws, infra_id, &judged).await.map_err(from_aws)?;
        if !left.is_empty() {
            return Err(ActivityError {
                operator: true,
                ..ActivityError::terminal(format!(
                    "still tagged kubernetes.io/cluster/{infra_id}=owned, of kinds teardown does not delete: {}; delete them (or untag them), then `infraflow retry`",
                    left.join(", ")
                ))
            });
        }
        if version < 3 {
            return Ok(None);
        }
        let mut left = super::left::unowned_registry_buckets(&aws, infra_id).await.map_err(from_aws)?;
        left.extend(super::left::look_alikes(&aws, infra_id, version >= 6).await.map_err(from_aws)?);
        left.extend(super::left::iam_of_another_region(pool, &aws, infra_id).await.map_err(from_aws)?);
        Ok(Some(left))
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::graph::delete_retry;
    use super::*;

    /// Dependencies AWS releases asynchronously (a load balancer's network interfaces, a NAT
    /// gateway's address) can take many minutes: deletes and undos wait this long.
    const DEPENDENCY_BUDGET: Duration = Duration::from_secs(15 * 60);

    #[test]
    fn deletes_and_undos_wait_out_dependencies_for_fifteen_minutes() {
        let teardown = delete_retry(DEFAULT_DELETE_ATTEMPTS).nominal_budget();
        assert!(teardown >= DEPENDENCY_BUDGET, "teardown waits {teardown:?}");
        assert!(teardown < DEPENDENCY_BUDGET * 2);
        let undo = infraflow_engine::EngineConfig::default().undo_retry.nominal_budget();
        assert!(undo >= DEPENDENCY_BUDGET, "undos wait {undo:?}");
        assert!(undo < DEPENDENCY_BUDGET * 2);
    }
}
