//! What a tenant may name and see: its permission, the roles, accounts, regions and infraID
//! prefixes of the tenants file, how many of its workflows may be unfinished, and its own
//! workflows and clusters only. A workflow belongs to the tenant that submitted it; a cluster
//! to the tenant that submitted its first journaled workflow (an operator's, through the
//! journal path, belongs to no tenant).

use std::collections::HashMap;
use std::sync::Mutex;

use infraflow_activities::RoleAllowList;
use infraflow_journal::{Journal, WorkflowRow};
use serde_json::Value;

use super::auth::Authenticated;
use super::problem::Problem;
use super::tenants::{Permission, Tenant};

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

/// `input` with the SourceIdentity of its role's session set to the caller (`<tenant>,<subject>`),
/// so that CloudTrail names who asked in every record of the session; an input without a role
/// (the daemon's own identity) is left as it is.
pub fn naming_the_caller(who: &Authenticated, mut input: Value) -> Value {
    if let Some(m) = input.as_object_mut()
        && m.get("roleARN").is_some_and(Value::is_string)
    {
        m.insert("sourceIdentity".into(), Value::String(who.source_identity()));
    }
    input
}

/// `input` with the SourceIdentity `first` (a journaled input) has, or none if it has none.
pub fn naming_as(first: &Value, mut input: Value) -> Value {
    if let Some(m) = input.as_object_mut() {
        match first.get("sourceIdentity") {
            Some(named) => drop(m.insert("sourceIdentity".into(), named.clone())),
            None => drop(m.remove("sourceIdentity")),
        }
    }
    input
}

/// What a submission (or a teardown plan) names, held to the tenant's fences: its role, the
/// role's account, the region, the infraID's prefix. Each refusal is one line naming the rule.
pub fn may_name(who: &Authenticated, others: &[Tenant], workflow: &str, input: &Value) -> Result<(), Problem> {
    let t = &who.tenant;
    // The daemon's host is not a tenant's: no path on it is read or written for one (a node
    // pool's user data, a canary's effects file), and a canary names no cluster of its own.
    for (key, why) in [
        ("externalID", format!("the daemon gives tenant {}'s roles their ExternalId: leave externalID out", t.name)),
        (
            "sourceIdentity",
            format!(
                "the daemon names tenant {} and its subject as the session's SourceIdentity: leave sourceIdentity out",
                t.name
            ),
        ),
        ("userDataFile", "names a file on the daemon's host: the API takes none".to_string()),
        ("effectsFile", "names a file on the daemon's host: the API takes none".to_string()),
    ] {
        if let Some(path) = find_key(input, key, "input") {
            return Err(Problem::field(&path, format!("{path} {why}")));
        }
    }
    if workflow == "canary" && input.get("cluster").is_some() {
        return Err(Problem::field("input.cluster", "a canary through the API names no cluster"));
    }
    let role = infraflow_workflows::role_of(input);
    match &role {
        Some(r) => {
            let list = RoleAllowList { patterns: t.roles.clone(), said: String::new(), external_ids: Vec::new() };
            if !list.allows(&r.arn) {
                return Err(Problem::forbidden(format!("tenant {} may not act through role {}", t.name, r.arn)));
            }
            // A role two tenants' patterns grant is neither's for sure (whose ExternalId?).
            let shared = others.iter().filter(|o| o.name != t.name).find(|o| {
                RoleAllowList { patterns: o.roles.clone(), said: String::new(), external_ids: Vec::new() }
                    .allows(&r.arn)
            });
            if let Some(o) = shared {
                return Err(Problem::forbidden(format!(
                    "role {} is granted to tenant {} too: the operator must give it to one tenant",
                    r.arn, o.name
                )));
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

/// Who each journaled workflow belongs to and which cluster it names, read once a workflow
/// (a workflow's submitter and input never change) and kept: a listing or a submission reads
/// the journal's rows, not every workflow's history again.
#[derive(Default)]
pub struct Ownership {
    known: Mutex<HashMap<String, Owner>>,
}

#[derive(Clone, Default)]
struct Owner {
    tenant: Option<String>,
    infra_id: Option<String>,
}

impl Ownership {
    fn owner(&self, journal: &Journal, row: &WorkflowRow) -> Owner {
        if let Some(o) = self.known.lock().unwrap().get(&row.id) {
            return o.clone();
        }
        let Ok(Some(view)) = journal.load(&row.id) else { return Owner::default() };
        let owner = Owner {
            tenant: tenant_of(view.submitter.as_deref()).map(str::to_string),
            infra_id: infraflow_workflows::cluster::of(&view.workflow, &view.input).map(|c| c.infra_id),
        };
        self.known.lock().unwrap().insert(row.id.clone(), owner.clone());
        owner
    }

    /// The journal's rows of the caller's tenant, oldest first.
    pub fn own_rows(&self, journal: &Journal, who: &Authenticated) -> Result<Vec<WorkflowRow>, Problem> {
        let rows = journal.list().map_err(|e| Problem::internal(format!("cannot read the journal: {e}")))?;
        Ok(rows
            .into_iter()
            .filter(|r| self.owner(journal, r).tenant.as_deref() == Some(who.tenant.name.as_str()))
            .collect())
    }

    /// A cluster (by its infraID, whatever the account, region or role a workflow named it
    /// with) whose first journaled workflow is another tenant's, or an operator's, is not the
    /// caller's: not sure is not theirs.
    pub fn cluster_is_own(&self, journal: &Journal, who: &Authenticated, infra_id: &str) -> Result<(), Problem> {
        let rows = journal.list().map_err(|e| Problem::internal(format!("cannot read the journal: {e}")))?;
        let first = rows
            .iter()
            .filter(|r| self.owner(journal, r).infra_id.as_deref() == Some(infra_id))
            .min_by_key(|r| (r.created_at, r.id.clone()));
        if let Some(first) = first
            && self.owner(journal, first).tenant.as_deref() != Some(who.tenant.name.as_str())
        {
            return Err(Problem::forbidden(format!(
                "cluster {infra_id} belongs to another tenant or to the operator: tenant {} may not act on it",
                who.tenant.name
            )));
        }
        Ok(())
    }

    /// Refused when the tenant already has as many unfinished workflows as it may.
    pub fn has_room(&self, journal: &Journal, who: &Authenticated) -> Result<(), Problem> {
        let Some(max) = who.tenant.max_unfinished else { return Ok(()) };
        let unfinished = self.own_rows(journal, who)?.iter().filter(|r| !r.state.is_finished()).count();
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
}

/// Where `key` is in `v` (`input.nodePool.userDataFile`), at any depth.
fn find_key(v: &Value, key: &str, at: &str) -> Option<String> {
    match v {
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            let here = format!("{at}.{k}");
            if k == key { Some(here) } else { find_key(v, key, &here) }
        }),
        Value::Array(a) => a.iter().enumerate().find_map(|(i, v)| find_key(v, key, &format!("{at}[{i}]"))),
        _ => None,
    }
}
