//! `/v1`: what each route does for an authenticated tenant, as the CLI's commands do for an
//! operator — submit (`POST /v1/workflows`), list, status, history, wait (a long poll), cancel,
//! retry, a cluster's drift check and a teardown's plan — with the same JSON `status --json`
//! prints. Every refusal is a problem document; nothing is journaled before every check passed.

use std::time::Duration;

use hyper::StatusCode;
use infraflow_engine::{Engine, Submission, SystemClock};
use infraflow_journal::{RequestOutcome, WorkflowState};
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::Authenticated;
use super::fences;
use super::problem::Problem;
use super::tenants::Permission;
use crate::render;

/// The longest one `wait` request holds: a client waits longer by asking again.
const WAIT_AT_MOST: Duration = Duration::from_secs(60);

/// A route's answer: its status and JSON body, and the workflow it was about (for the audit).
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
    pub workflow: Option<String>,
}

impl Answer {
    fn ok(body: Value) -> Answer {
        Answer { status: StatusCode::OK, body, workflow: None }
    }

    fn about(mut self, id: &str) -> Answer {
        self.workflow = Some(id.to_string());
        self
    }
}

/// What the routes share: the daemon's engine, the tenants, and who owns what.
pub struct Routes {
    pub engine: std::sync::Arc<Engine>,
    pub tenants: super::tenants::Tenants,
    pub ownership: fences::Ownership,
    pub submitting: tokio::sync::Mutex<()>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SubmitBody {
    workflow: String,
    input: Value,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    no_rollback: bool,
}

impl Routes {
    /// The action a request asks for (`submit`, `status`, …), as the audit names it, and its answer.
    pub async fn dispatch(
        &self,
        who: &Authenticated,
        method: &hyper::Method,
        path: &str,
        query: &str,
        body: &[u8],
        traceparent: Option<String>,
    ) -> (&'static str, Result<Answer, Problem>) {
        use hyper::Method;
        let decoded: Vec<String> = path
            .trim_start_matches("/v1/")
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned())
            .collect();
        let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
        match (method, segments.as_slice()) {
            (&Method::POST, ["workflows"]) => ("submit", self.submit(who, body, traceparent).await),
            (&Method::GET, ["workflows"]) => ("list", self.list(who, query)),
            (&Method::GET, ["workflows", id]) => ("status", self.status(who, id)),
            (&Method::GET, ["workflows", id, "history"]) => ("history", self.history(who, id)),
            (&Method::GET, ["workflows", id, "wait"]) => ("wait", self.wait(who, id, query).await),
            (&Method::POST, ["workflows", id, "cancel"]) => ("cancel", self.cancel(who, id).await),
            (&Method::POST, ["workflows", id, "retry"]) => ("retry", self.retry(who, id).await),
            (&Method::GET, ["clusters", infra, "check"]) => ("check", self.check(who, infra, query).await),
            (&Method::POST, ["teardown-plan"]) => ("plan", self.plan(who, body).await),
            (_, ["workflows", ..] | ["clusters", ..] | ["teardown-plan"]) => (
                "unknown",
                Err(Problem::new(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not a method of {path}"))),
            ),
            _ => ("unknown", Err(Problem::not_found(format!("no route {path}; the routes are in /v1/openapi.json")))),
        }
    }

    async fn submit(&self, who: &Authenticated, body: &[u8], traceparent: Option<String>) -> Result<Answer, Problem> {
        fences::permits(who, Permission::Submit, "submit")?;
        let de = &mut serde_json::Deserializer::from_slice(body);
        let b: SubmitBody = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            Problem::field(&field, format!("the body is not a submission: {} (at {field})", e.inner()))
        })?;
        let registry = crate::registry::full_registry();
        let def = registry.workflow(&b.workflow).ok_or_else(|| {
            Problem::field(
                "workflow",
                format!("unknown workflow {:?}; known workflows: {}", b.workflow, registry.workflow_names().join(", ")),
            )
        })?;
        let id = match b.id {
            Some(id) => id,
            None => infraflow_engine::new_id(def.name(), SystemClock.now()),
        };
        infraflow_engine::check_id(&id).map_err(|e| Problem::field("id", e))?;
        let validated = def.validate(&id, &b.input).map_err(|e| Problem::field("input", e.to_string()))?;
        fences::may_name(who, &self.tenants.all(), def.name(), &b.input)?;
        let cluster = infraflow_workflows::cluster::of(def.name(), &validated.input).map(|c| c.infra_id);
        self.journal_checks(who, &id, cluster.as_deref())?;
        // A submission again of a journaled id (an idempotent retry, perhaps by another subject of
        // the tenant) keeps the session name its first submission journaled: the caller's input
        // is what is compared, not who sent it.
        let journaled = self.engine.journal().load(&id).ok().flatten().map(|v| v.input);
        let input = match &journaled {
            Some(first) => fences::naming_as(first, b.input),
            None => fences::naming_the_caller(who, b.input),
        };
        let submission = Submission {
            workflow: b.workflow,
            input,
            id: Some(id.clone()),
            no_rollback: b.no_rollback,
            submitter: Some(who.submitter()),
            traceparent,
        };
        let journaled = self.engine.journal().row(&id).ok().flatten().is_some();
        crate::admit::refuse_unless_journaled(journaled, &submission).await.map_err(|f| {
            if f.code == crate::failure::USAGE {
                Problem::new(StatusCode::UNPROCESSABLE_ENTITY, f.message)
            } else {
                Problem::new(StatusCode::BAD_GATEWAY, f.message)
            }
        })?;
        // Checked again and journaled one submission at a time: two tenants' first workflows of
        // one new cluster cannot both pass (AWS was read above, outside the lock).
        let _one_at_a_time = self.submitting.lock().await;
        self.journal_checks(who, &id, cluster.as_deref())?;
        let submitted = self.engine.submit(submission).await.map_err(|e| Problem::bad(e.to_string()))?;
        let status = if submitted.created { StatusCode::CREATED } else { StatusCode::OK };
        Ok(Answer { status, body: json!({ "id": id, "created": submitted.created }), workflow: Some(id) })
    }

    /// What the journal says of a submission: its cluster is the tenant's or no one's yet, its
    /// id is free or the tenant's own, and the tenant has room for one more unfinished.
    fn journal_checks(&self, who: &Authenticated, id: &str, cluster: Option<&str>) -> Result<(), Problem> {
        let journal = self.engine.journal();
        if let Some(c) = cluster {
            self.ownership.cluster_is_own(journal, who, c)?;
        }
        if let Ok(Some(v)) = journal.load(id)
            && fences::tenant_of(v.submitter.as_deref()) != Some(who.tenant.name.as_str())
        {
            return Err(Problem::new(StatusCode::CONFLICT, format!("workflow id {id} is taken: choose another")));
        }
        self.ownership.has_room(journal, who)
    }

    fn list(&self, who: &Authenticated, query: &str) -> Result<Answer, Problem> {
        let q = Query::parse(query);
        let states = match q.get("state") {
            Some(s) => vec![crate::cli::parse_state(s).map_err(|e| Problem::field("state", e))?],
            None => Vec::new(),
        };
        let journal = self.engine.journal();
        let mut rows = self.ownership.own_rows(journal, who)?;
        rows.retain(|r| render::row_matches(r, &states, q.get("workflow"), q.get("cluster")));
        let waits = crate::status::waits(journal, &rows).map_err(|e| Problem::internal(e.message))?;
        Ok(Answer::ok(render::list_json(&rows, &waits)))
    }

    fn status(&self, who: &Authenticated, id: &str) -> Result<Answer, Problem> {
        let view = fences::own_workflow(self.engine.journal(), who, id)?;
        Ok(Answer::ok(self.view_json(id, &view)?).about(id))
    }

    fn view_json(&self, id: &str, view: &infraflow_journal::WorkflowView) -> Result<Value, Problem> {
        let journal = self.engine.journal();
        let read = |e: infraflow_journal::JournalError| Problem::internal(format!("cannot read the journal: {e}"));
        let row = journal.row(id).map_err(read)?.ok_or_else(|| Problem::not_found(format!("no workflow {id}")))?;
        let waiting = journal.waiting_for(id, crate::status::now_ms()).map_err(read)?;
        Ok(render::view_json(&row, view, &waiting))
    }

    fn history(&self, who: &Authenticated, id: &str) -> Result<Answer, Problem> {
        fences::own_workflow(self.engine.journal(), who, id)?;
        let events =
            self.engine.journal().events(id).map_err(|e| Problem::internal(format!("cannot read the journal: {e}")))?;
        Ok(Answer::ok(render::history_json(&events)).about(id))
    }

    /// Answers once the workflow rests (completed, failed, compensated, paused) or `timeout`
    /// (at most a minute) passes: its status, and `"rests"` saying which.
    async fn wait(&self, who: &Authenticated, id: &str, query: &str) -> Result<Answer, Problem> {
        fences::own_workflow(self.engine.journal(), who, id)?;
        let timeout = match Query::parse(query).get("timeout") {
            Some(t) => crate::cli::parse_age(t).map_err(|e| Problem::field("timeout", e))?.min(WAIT_AT_MOST),
            None => WAIT_AT_MOST,
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(50);
        loop {
            let view = fences::own_workflow(self.engine.journal(), who, id)?;
            let state = view.summary.state;
            let rests = state.is_finished() || state == WorkflowState::Paused;
            if rests || tokio::time::Instant::now() >= deadline {
                let mut body = self.view_json(id, &view)?;
                body["rests"] = json!(rests);
                return Ok(Answer::ok(body).about(id));
            }
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(tokio::time::Instant::now()))).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    async fn cancel(&self, who: &Authenticated, id: &str) -> Result<Answer, Problem> {
        self.request(who, id, "cancel").await
    }

    async fn retry(&self, who: &Authenticated, id: &str) -> Result<Answer, Problem> {
        self.request(who, id, "retry").await
    }

    /// Journals the operator's request (`cancel` or `retry`) of the tenant's workflow `id`: 202
    /// with its state, or 409 saying why it does not apply.
    async fn request(&self, who: &Authenticated, id: &str, action: &str) -> Result<Answer, Problem> {
        fences::permits(who, Permission::Operate, action)?;
        fences::own_workflow(self.engine.journal(), who, id)?;
        let journal = self.engine.journal();
        let outcome = if action == "cancel" {
            journal.request_cancel(id, SystemClock.now()).await
        } else {
            journal.request_resume(id, SystemClock.now()).await
        };
        let conflict = |why: String| Err(Problem::new(StatusCode::CONFLICT, why));
        match outcome.map_err(|e| Problem::internal(format!("cannot write the journal: {e}")))? {
            RequestOutcome::Done(s) | RequestOutcome::AlreadyRequested(s) => Ok(Answer {
                status: StatusCode::ACCEPTED,
                body: json!({ "id": id, "state": s.as_str() }),
                workflow: Some(id.into()),
            }),
            RequestOutcome::NotApplicable(s) if action == "cancel" => {
                conflict(format!("workflow {id} is {s}; nothing to cancel (a teardown removes what it made)"))
            }
            RequestOutcome::NotApplicable(s) => {
                conflict(format!("workflow {id} is {s}; only paused or failed workflows can be retried"))
            }
            RequestOutcome::Superseded { by } => conflict(format!(
                "workflow {id} will not resume its compensation: {by}, a later workflow of its cluster, has run since; tear the cluster down instead"
            )),
        }
    }

    async fn check(&self, who: &Authenticated, infra: &str, query: &str) -> Result<Answer, Problem> {
        let q = Query::parse(query);
        let region =
            q.get("region").ok_or_else(|| Problem::field("region", "name the cluster's region: ?region=us-east-1"))?;
        let journal = self.engine.journal();
        let own: Vec<String> = self.ownership.own_rows(journal, who)?.into_iter().map(|r| r.id).collect();
        let made = crate::check::provisioned(journal)
            .map_err(|e| Problem::internal(e.message))?
            .into_iter()
            .find(|p| p.input.infra_id() == infra && p.input.region == region && own.contains(&p.workflow))
            .ok_or_else(|| {
                Problem::not_found(format!("no cluster {infra} in {region} of tenant {}", who.tenant.name))
            })?;
        // The reads go through the cluster's role in the caller's name, not its first submitter's.
        let made = made.asked_by(&who.source_identity());
        let report = infraflow_workflows::check::check(&crate::registry::pool(), &made)
            .await
            .map_err(|e| Problem::new(StatusCode::BAD_GATEWAY, e.to_string()))?;
        Ok(Answer::ok(serde_json::to_value(&report).unwrap_or_default()))
    }

    async fn plan(&self, who: &Authenticated, body: &[u8]) -> Result<Answer, Problem> {
        let input: Value =
            serde_json::from_slice(body).map_err(|e| Problem::bad(format!("the body is not JSON: {e}")))?;
        fences::may_name(who, &self.tenants.all(), "teardown", &input)?;
        if let Some(c) = infraflow_workflows::cluster::of("teardown", &input) {
            self.ownership.cluster_is_own(self.engine.journal(), who, &c.infra_id)?;
        }
        let plan =
            infraflow_workflows::teardown::plan::plan(&crate::registry::pool(), &fences::naming_the_caller(who, input))
                .await
                .map_err(|e| match e {
                    infraflow_workflows::teardown::plan::PlanError::Input(e) => Problem::field("input", e.to_string()),
                    e => Problem::new(StatusCode::BAD_GATEWAY, e.to_string()),
                })?;
        Ok(Answer::ok(serde_json::to_value(&plan).unwrap_or_default()))
    }
}

/// A query string's `name=value` pairs (percent-decoded).
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: &str) -> Query {
        let decode =
            |s: &str| percent_encoding::percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned();
        Query(
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}
