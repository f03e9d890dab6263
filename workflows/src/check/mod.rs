//! `infraflow check`: is a provisioned cluster still as its provision made it? Reads only — the
//! provision's identities and attributes, compared with its journaled input and output
//! (`drift`) — and says what would hold up a teardown today and what leaks (`holdups`). A
//! second `run provision-infra` repairs the drift its report says it repairs.

mod drift;
mod holdups;
pub mod iam;
pub mod report;

use std::collections::BTreeSet;

use infraflow_activities::tags::{IDENTITY_TAG, TagQuery, owned};
use infraflow_activities::vpc_state::{self, VpcState};
use infraflow_activities::{Aws, AwsError, AwsPool, dns, tagging};
use infraflow_engine::{ActivityError, InputError};
use serde_json::Value;

use crate::aws_steps::from_aws;
use crate::provision::input::{ProvisionInput, ProvisionOutput};
pub use report::{BY_PROVISION, CheckReport, Drift};

/// The workflows whose journaled runs a check compares a cluster with.
pub const CHECKED_WORKFLOWS: [&str; 2] = ["provision-infra", "create-cluster"];

/// A completed provision, as the journal holds it.
#[derive(Clone, Debug)]
pub struct Provisioned {
    /// The workflow id.
    pub workflow: String,
    pub input: ProvisionInput,
    pub output: ProvisionOutput,
    /// The input the role (if any) is read from.
    role_input: Value,
    /// The account the provision acted in, as journaled (None for a journal without it).
    account: Option<String>,
    /// The cluster's IAM, as the newest completed create-iam (or create-cluster's IAM part)
    /// made it; None when this journal made none.
    iam: Option<iam::IamMade>,
}

impl Provisioned {
    /// From a completed `provision-infra` or `create-cluster` run (its `infra` part).
    pub fn from_run(name: &str, id: &str, input: &Value, output: &Value) -> Result<Provisioned, CheckError> {
        let (i, o) = match name {
            "provision-infra" => (input.clone(), output.clone()),
            "create-cluster" => (input["infra"].clone(), output["infra"].clone()),
            other => return Err(CheckError::Input(InputError(format!("{other} does not provision a cluster")))),
        };
        let unreadable = |what: &str, e: serde_json::Error| {
            CheckError::Input(InputError(format!("the journaled {what} of {id} cannot be read: {e}")))
        };
        // Who asked for the provision is not who reads it now: a check names its own caller
        // (`asked_by`), or none (the daemon's schedule, the operator's `infraflow check`).
        let mut role_input = input.clone();
        if let Some(m) = role_input.as_object_mut() {
            m.remove("sourceIdentity");
        }
        Ok(Provisioned {
            workflow: id.to_string(),
            input: serde_json::from_value(i).map_err(|e| unreadable("input", e))?,
            output: serde_json::from_value(o).map_err(|e| unreadable("output", e))?,
            role_input,
            account: None,
            iam: None,
        })
    }

    /// The provision read through its role in the name of `source_identity` (the API's caller),
    /// not its first submitter's; a provision without a role is read as it is.
    pub fn asked_by(mut self, source_identity: &str) -> Provisioned {
        if let Some(m) = self.role_input.as_object_mut()
            && m.get("roleARN").is_some_and(Value::is_string)
        {
            m.insert("sourceIdentity".into(), Value::String(source_identity.to_string()));
        }
        self
    }

    /// The provision with the cluster's IAM as `made` made it.
    pub fn with_iam(self, made: Option<iam::IamMade>) -> Provisioned {
        Provisioned { iam: made, ..self }
    }

    /// The provision as made in `account` (its journaled environment's).
    pub fn made_in(self, account: Option<&str>) -> Provisioned {
        Provisioned { account: account.map(str::to_string), ..self }
    }

    pub fn infra_id(&self) -> &str {
        &self.output.infra_id
    }

    pub fn region(&self) -> &str {
        &self.output.region
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("cannot read the cluster: {0}")]
    Aws(#[from] ActivityError),
}

/// The IAM actions a check calls: reads only.
pub fn iam_actions() -> BTreeSet<&'static str> {
    use crate::policy::{DNS, TAGGING, Use, VPC_STATE, actions};
    let mut all = actions(&[(VPC_STATE, Use::Read), (DNS, Use::Read), (TAGGING, Use::Read)]);
    all.extend(infraflow_activities::iam::as_is::IAM_READ);
    all
}

/// Checks the cluster `made` provisioned. A report that finds anything is read once more after
/// the consistency settle, and that second reading is the report: EC2 lists what was just made
/// (or changed) only after a moment, and a check right after a provision must not call that
/// drift. A cluster in sync costs one reading.
pub async fn check(pool: &AwsPool, made: &Provisioned) -> Result<CheckReport, CheckError> {
    let pool = pool.assuming(crate::aws_steps::role_of(&made.role_input).as_ref());
    let first = read_retrying(&pool, made).await?;
    if first.in_sync {
        return Ok(first);
    }
    tokio::time::sleep(crate::aws_steps::consistency_settle()).await;
    read_retrying(&pool, made).await
}

/// Every read is idempotent: the whole check is read again on a retryable error (throttling
/// above all), as a step's would be.
async fn read_retrying(pool: &AwsPool, made: &Provisioned) -> Result<CheckReport, CheckError> {
    let read = crate::read_again::read_retrying(|e: &AwsError| e.retryable, || read_report(pool, made));
    read.await.map_err(|e| CheckError::Aws(from_aws(e)))
}

/// A private zone's VPCs and negative-caching TTL; None if the zone is gone.
async fn zone_facts(aws: &Aws, zone: &str, name: &str) -> Result<Option<(Vec<(String, String)>, String)>, AwsError> {
    let Some(vpcs) = dns::zone_vpcs(aws, zone).await? else { return Ok(None) };
    Ok(Some((vpcs, dns::negative_cache_ttl(aws, zone, name).await?)))
}

async fn read_report(pool: &AwsPool, made: &Provisioned) -> Result<CheckReport, AwsError> {
    let (p, o) = (&made.input, &made.output);
    let infra = o.infra_id.as_str();
    let aws = pool.region(&o.region).await;
    let made_network = p.vpc_id.is_none();
    let dhcp = made_network.then(|| TagQuery::new(IDENTITY_TAG, format!("{infra}/dhcp-options")));
    let owned = owned(infra);
    let (private_name, local_name) = (p.private_zone_name(), format!("{}.hypershift.local", p.name));
    let (env, state, private, local, (addresses, volumes, unknown)) = futures::try_join!(
        aws.environment(),
        vpc_state::read(&aws, &o.vpc_id, dhcp.as_ref()),
        zone_facts(&aws, &o.private_zone_id, &private_name),
        zone_facts(&aws, &o.local_zone_id, &local_name),
        async {
            futures::try_join!(
                vpc_state::unassociated_addresses(&aws, &owned),
                vpc_state::available_volumes(&aws, &owned),
                tagging::left_unknown(&aws, infra, &infraflow_activities::Kind::TEARDOWN_ORDER),
            )
        },
    )?;
    // Under other credentials every resource reads as gone: said so, never reported as drift
    // (SAFETY-A7937A6 G13).
    if let Some(account) = made.account.as_deref().filter(|a| *a != env.account) {
        return Err(AwsError::operator(
            "GetCallerIdentity",
            format!(
                "{infra} was provisioned in account {account}, and these credentials act in {}: check with the provision's credentials (or its role)",
                env.account
            ),
        ));
    }
    let mut report = CheckReport::new(infra, env.account, &o.region, &made.workflow);
    let m = drift::Made { p, o };
    if made_network {
        report.drift.extend(drift::made_network(&m, &state));
        report.hold_ups.extend(holdups::hold_ups(infra, &state));
        report.leaks.extend(holdups::vpc_leaks(infra, &state));
    } else {
        report.drift.extend(customer_network(&m, &state));
    }
    if state.vpc.is_some() {
        report.drift.extend(drift::worker_group(&m, &state));
    }
    report.drift.extend(drift::private_zone(&o.private_zone_id, &o.vpc_id, &o.region, private));
    report.drift.extend(drift::private_zone(&o.local_zone_id, &o.vpc_id, &o.region, local));
    report.leaks.extend(holdups::address_leaks(&addresses));
    report.leaks.extend(holdups::volume_leaks(&volumes));
    report.leaks.extend(holdups::unknown_kind_leaks(unknown));
    if let Some(made_iam) = &made.iam {
        report.drift.extend(iam::drift(pool, &aws, made_iam).await?);
    }
    Ok(report.finish())
}

/// A customer's network (bring your own VPC): infraflow made none of it, so only what it needs
/// is compared — the VPC and each subnet still there, each subnet still marked as the cluster's.
/// Nothing of it is the provision's to repair.
fn customer_network(m: &drift::Made<'_>, s: &VpcState) -> Vec<Drift> {
    let Some(vpc) = &s.vpc else {
        return vec![Drift::new("vpc", &m.o.vpc_id, "present", "missing").by_hand(
            "the customer's VPC is gone: the cluster's network with it; tear the cluster down (`infraflow run teardown`)",
        )];
    };
    let owner = infraflow_activities::tags::ownership_key(&m.o.infra_id);
    let mut out = Vec::new();
    for zone in m.p.subnets.iter().flatten() {
        for id in [&zone.private_subnet_id, &zone.public_subnet_id].into_iter().flatten() {
            match s.subnets.iter().find(|sub| &sub.id == id) {
                None => out.push(Drift::new("subnet", id, format!("in {}", vpc.id), "missing").by_hand(
                    "the customer's subnet: infraflow never makes one in a customer's VPC; give the cluster a subnet in that zone",
                )),
                Some(sub) if !sub.tags.iter().any(|(k, v)| *k == owner && v == "shared") => out.push(
                    Drift::new("tag", id, format!("{owner}=shared on the subnet"), "no such tag").by_hand(format!(
                        "the cluster's record on the subnet says it was marked, so a provision does not mark it again: aws ec2 create-tags --resources {id} --tags Key={owner},Value=shared"
                    )),
                ),
                Some(_) => {}
            }
        }
    }
    out
}
