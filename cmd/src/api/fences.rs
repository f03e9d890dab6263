//! What a tenant may name and see: its permission, the roles, accounts, regions and infraID
//! prefixes of the tenants file, how many of its workflows may be unfinished, and its own
//! workflows and clusters only. A workflow belongs to the tenant that submitted it; a cluster
//! to the tenant that submitted its first journaled workflow (an operator's, through the
//! journal path, belongs to no tenant).

use infraflow_activities::RoleAllowList;
use infraflow_journal::{Journal, WorkflowRow};
use serde_json::Value;

use super::auth::Authenticated;
use super::problem::Problem;
use super::tenants::Permission;

/// Refused unless the caller's permission is at least `needed`.
pub fn permits(who: &Authenticated, needed: Permission, action: &str) -> Result<(), Problem> {
    if who.tenant.permission >= needed {
        return Ok(());
    }
    Err(Problem::forbidden(format!(
        "tenant {} may {:?}, not {action} (the tenants file gives it)",
        who.tenant.name, who.tenant.permission
    )))
}

/// The tenant a workflow's submitter names (`<tenant>/<subject>`).
pub fn tenant_of(submitter: Option<&str>) -> Option<&str> {
    submitter.and_then(|s| s.split('/').next())
}

/// Workflow `id` if the caller's tenant submitted it; any other (unknown, another tenant's, an
/// operator's) is the same 404, so a tenant learns nothing of the others'.
pub fn own_workflow(
    journal: &Journal,
    who: &Authenticated,
    id: &str,
) -> Result<infraflow_journal::WorkflowView, Problem> {
    let not_found = || Problem::not_found(format!("no workflow {id} of tenant {}", who.tenant.name));
    let view = journal.load(id).map_err(|e| Problem::internal(format!("cannot read the journal: {e}")))?;
    match view {
        Some(v) if tenant_of(v.submitter.as_deref()) == Some(who.tenant.name.as_str()) => Ok(v),
        _ => Err(not_found()),
    }
}

/// The journal's rows of the caller's tenant, oldest first.
pub fn own_rows(journal: &Journal, who: &Authenticated) -> Result<Vec<WorkflowRow>, Problem> {
    let rows = journal.list().map_err(|e| Problem::internal(format!("cannot read the journal: {e}")))?;
    Ok(rows.into_iter().filter(|r| row_tenant(journal, r).as_deref() == Some(who.tenant.name.as_str())).collect())
}

fn row_tenant(journal: &Journal, row: &WorkflowRow) -> Option<String> {
    let view = journal.load(&row.id).ok()??;
    tenant_of(view.submitter.as_deref()).map(str::to_string)
}

/// What a submission (or a teardown plan) names, held to the tenant's fences: its role, the
/// role's account, the region, the infraID's prefix. Each refusal is one line naming the rule.
pub fn may_name(who: &Authenticated, workflow: &str, input: &Value) -> Result<(), Problem> {
    let t = &who.tenant;
    if input.get("externalID").is_some() && t.external_id.is_some() {
        return Err(Problem::field(
            "input.externalID",
            format!("the daemon gives tenant {}'s roles their ExternalId: leave externalID out", t.name),
        ));
    }
    let role = infraflow_workflows::role_of(input);
    match &role {
        Some(r) => {
            let list = RoleAllowList { patterns: t.roles.clone(), said: String::new(), external_ids: Vec::new() };
            if !list.allows(&r.arn) {
                return Err(Problem::forbidden(format!("tenant {} may not act through role {}", t.name, r.arn)));
            }
            let account = r.arn.split(':').nth(4).unwrap_or_default();
            if !t.accounts.is_empty() && !t.accounts.iter().any(|a| a == account) {
                return Err(Problem::forbidden(format!("tenant {} may not act in account {account}", t.name)));
            }
        }
        None if t.daemon_identity => {}
        None if workflow == "canary" => {}
        None => {
            return Err(Problem::forbidden(format!(
                "tenant {} must name one of its roles (roleARN): the daemon's own identity is not its",
                t.name
            )));
        }
    }
    if let Some(c) = infraflow_workflows::cluster::of(workflow, input) {
        if !t.regions.is_empty() && !t.regions.iter().any(|r| *r == c.region) {
            return Err(Problem::forbidden(format!("tenant {} may not act in region {:?}", t.name, c.region)));
        }
        if !t.infra_id_prefixes.is_empty() && !t.infra_id_prefixes.iter().any(|p| c.infra_id.starts_with(p.as_str())) {
            return Err(Problem::forbidden(format!(
                "tenant {} may not name infraID {}: its clusters start with {}",
                t.name,
                c.infra_id,
                t.infra_id_prefixes.join(" or ")
            )));
        }
    }
    Ok(())
}

/// A cluster (its journal key) another tenant, or an operator, made first is not the caller's.
pub fn cluster_is_own(journal: &Journal, who: &Authenticated, cluster: &str) -> Result<(), Problem> {
    if cluster.is_empty() {
        return Ok(());
    }
    let rows = journal.list().map_err(|e| Problem::internal(format!("cannot read the journal: {e}")))?;
    if let Some(first) = rows.iter().filter(|r| r.cluster == cluster).min_by_key(|r| r.created_at)
        && row_tenant(journal, first).as_deref() != Some(who.tenant.name.as_str())
    {
        return Err(Problem::forbidden(format!(
            "cluster {cluster} belongs to another tenant or to the operator: tenant {} may not act on it",
            who.tenant.name
        )));
    }
    Ok(())
}

/// Refused when the tenant already has as many unfinished workflows as it may.
pub fn has_room(journal: &Journal, who: &Authenticated) -> Result<(), Problem> {
    let Some(max) = who.tenant.max_unfinished else { return Ok(()) };
    let unfinished = own_rows(journal, who)?.iter().filter(|r| !r.state.is_finished()).count();
    if unfinished >= max {
        return Err(Problem {
            retry_after: Some(30),
            ..Problem::new(
                hyper::StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "tenant {} has {unfinished} unfinished workflows, its limit: wait for one to end",
                    who.tenant.name
                ),
            )
        });
    }
    Ok(())
}
