//! What is read from AWS before a workflow is journaled, so that an input AWS refuses is bad
//! input — exit 2 (a 422 from the API), nothing journaled: a teardown's protection, a customer's
//! network's rules, a provision the account's quotas cannot hold. Shared by `run`, `submit` and
//! the API's submit.

use infraflow_engine::Submission;
use infraflow_journal::{Journal, Location};

use crate::failure::Failure;

/// The refusals of `check_aws_before_journal` without the store's proof: what the daemon's API
/// reads before it journals a submission (the daemon proved its store once, at start).
pub(crate) async fn refuse_before_journal(db: &Location, submission: &Submission) -> Result<(), Failure> {
    refuse_unless_journaled(already_journaled(db, submission.id.as_deref()), submission).await
}

/// The refusals, unless the workflow is `journaled` already (its own steps read the same
/// again). The daemon's API says which from its own journal handle: a second handle of a SQLite
/// file in one process would drop the process's locks on it when closed (POSIX locks are the
/// process's, not the handle's).
pub(crate) async fn refuse_unless_journaled(journaled: bool, submission: &Submission) -> Result<(), Failure> {
    if !journaled {
        refuse_protected_teardown(submission).await?;
        refuse_unfit_customer_network(submission).await?;
        if infraflow_workflows::quota::on() {
            refuse_over_quota(submission).await?;
        }
    }
    Ok(())
}

/// A workflow that would meet a quota half-way (a provision's Elastic IPs, VPCs, internet
/// gateways, NAT gateways per zone; IAM roles and instance profiles; a link's load balancers and
/// target groups; a node pool's On-Demand vCPUs) is refused before it makes anything: one line
/// naming each quota, exit 2.
/// Quotas Service Quotas would not tell are AWS's published defaults, said on stderr.
async fn refuse_over_quota(submission: &Submission) -> Result<(), Failure> {
    let role = infraflow_workflows::role_of(&submission.input);
    let pool = crate::registry::pool().assuming(role.as_ref());
    let admission = infraflow_workflows::quota::provision::admit_before_submit(&pool, &submission.workflow, &submission.input)
        .await
        .map_err(|e| {
            Failure::other(format!(
                "cannot read the account's quotas and usage to check that the {} fits: {e}; nothing was submitted (--skip-quota-check journals it unchecked)",
                submission.workflow
            ))
        })?;
    if let Some(note) = admission.note {
        eprintln!("infraflow: {note}");
    }
    match admission.refusal {
        Some(why) => Err(Failure::usage(why)),
        None => Ok(()),
    }
}

/// A provision into a customer's VPC (`vpcID`) whose network breaks a rule: every rule broken
/// named, one line each, exit 2, nothing journaled or changed.
async fn refuse_unfit_customer_network(submission: &Submission) -> Result<(), Failure> {
    let role = infraflow_workflows::role_of(&submission.input);
    let pool = crate::registry::pool().assuming(role.as_ref());
    match infraflow_workflows::provision::check_before_submit(&pool, &submission.workflow, &submission.input).await {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(Failure::usage(why)),
        Err(e) => Err(Failure::other(format!(
            "cannot read the customer's network (vpcID) to check it: {e}; nothing was submitted"
        ))),
    }
}

/// A teardown of a protected cluster (`infraflow.io/do-not-delete` on any of its resources) is
/// bad input: exit 2 naming the resource, nothing journaled. Read from AWS, where the tag is.
/// Not read again for a teardown this journal already holds (`run --id` resuming it): its own
/// discovery reads the tag before every round of deletes, and pauses on it.
async fn refuse_protected_teardown(submission: &Submission) -> Result<(), Failure> {
    if submission.workflow != "teardown" {
        return Ok(());
    }
    let field = |k: &str| submission.input[k].as_str().unwrap_or_default().to_string();
    let (infra, region) = (field("infraID"), field("region"));
    // Read where the teardown will act: through its role, in the role's account (review F11).
    let role = infraflow_workflows::role_of(&submission.input);
    let pool = crate::registry::pool().assuming(role.as_ref());
    match infraflow_workflows::teardown::find_protection(&pool, &infra, &region).await {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(Failure::usage(why)),
        Err(e) => Err(Failure::other(format!(
            "cannot check whether cluster {infra} is protected (infraflow.io/do-not-delete): {e}; nothing was submitted"
        ))),
    }
}

/// Whether the journal at `db` holds workflow `id`, read without creating or changing anything
/// (an unreadable journal counts as not: the caller then checks AWS, the safe way).
fn already_journaled(db: &Location, id: Option<&str>) -> bool {
    let Some(id) = id else { return false };
    if let Location::Sqlite(path) = db
        && !path.exists()
    {
        return false;
    }
    Journal::open_read_only_at(db).ok().and_then(|j| j.row(id).ok().flatten()).is_some()
}
