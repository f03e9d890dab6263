//! The status page `daemon --listen` serves at `/` (and `--api-listen`, behind a sign-in): the
//! workflows (filtered by state, workflow, cluster, searched by id and error, newest change
//! first, a page at a time), one workflow's timeline, run graph, steps, output, input and journal
//! events, and cancel / retry behind a confirmation. Server-rendered from minijinja templates
//! (`templates/`), the data the CLI's `status --json` prints; no JavaScript, nothing fetched from
//! elsewhere: it works offline.
//!
//! This file is the page's routes and each route's gathering of what its template draws; every
//! route passes the `guard` (Host, Origin, token) and shows what its `viewer` may see. What each
//! view shows is `history`, `svg`, `timeline`, `schedules` (the daemon's last sweep and drift
//! checks) and the templates.

mod guard;
mod history;
mod schedules;
mod svg;
mod timeline;
mod viewer;

pub use guard::{Guard, allowed_hosts};
pub use viewer::Viewer;

use std::collections::BTreeSet;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use infraflow_engine::SystemClock;
use infraflow_journal::{Journal, RequestOutcome, WorkflowState};
use minijinja::{Environment, context};
use serde_json::{Value, json};

use crate::render;

/// Rows a page of the list shows; `offset` pages past them.
const MAX_ROWS: usize = 500;
/// Seconds between refreshes while something shown is unfinished.
const REFRESH_SECONDS: u32 = 3;

pub struct Page {
    journal: Journal,
    templates: Environment<'static>,
    /// Whether the cancel and retry buttons exist (loopback, or `--allow-remote-actions`).
    actions: bool,
    guard: Guard,
    /// The daemon's last sweep (`--sweep-every`), shown under the list.
    sweep: crate::sweep::SharedSweep,
    /// The daemon's last drift check of each cluster (`--check-every`), shown under the list.
    checks: crate::checked::SharedChecks,
    /// `--trace-link`: where a workflow's trace id links to (`{traceId}` replaced).
    trace_link: Option<String>,
}

type Reply = Response<Full<Bytes>>;

impl Page {
    pub fn new(journal: Journal, actions: bool, guard: Guard) -> Page {
        let mut templates = Environment::new();
        // minijinja's core has no `truncate`: the page's own, by characters, never mid-character.
        templates.add_filter("truncate", |s: String, n: usize| -> String {
            if s.chars().count() <= n { s } else { s.chars().take(n.saturating_sub(1)).chain(['…']).collect() }
        });
        for (name, source) in [
            ("base.html", include_str!("templates/base.html")),
            ("list.html", include_str!("templates/list.html")),
            ("workflow.html", include_str!("templates/workflow.html")),
            ("confirm.html", include_str!("templates/confirm.html")),
            ("row.html", include_str!("templates/row.html")),
        ] {
            templates.add_template(name, source).expect("the page's templates parse");
        }
        Page {
            journal,
            templates,
            actions,
            guard,
            sweep: Default::default(),
            checks: Default::default(),
            trace_link: None,
        }
    }

    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// The page with the daemon's last sweep under the list.
    pub fn with_sweep(mut self, sweep: crate::sweep::SharedSweep) -> Page {
        self.sweep = sweep;
        self
    }

    /// The page with the daemon's last drift checks under the list.
    pub fn with_checks(mut self, checks: crate::checked::SharedChecks) -> Page {
        self.checks = checks;
        self
    }

    /// The page with each workflow's trace id linked to `link` (`{traceId}` replaced).
    pub fn with_trace_link(mut self, link: Option<String>) -> Page {
        self.trace_link = link;
        self
    }

    /// The page's answer to `req` (`form`: its body, read for POSTs only) as `viewer` sees it, or
    /// None when the path is not the page's.
    pub async fn respond<B>(&self, req: &Request<B>, form: &[u8], viewer: &Viewer) -> Option<Reply> {
        let path = req.uri().path();
        let query = req.uri().query().unwrap_or_default();
        if path != "/" && !path.starts_with("/workflows/") {
            return None;
        }
        if !self.guard.host_allowed(req) {
            return Some(html(
                StatusCode::MISDIRECTED_REQUEST,
                "<p>refused: this page answers only for the names it is served under (the --listen address, loopback names, --page-host)</p>".into(),
            ));
        }
        if path == "/" {
            return Some(if req.method() == Method::GET { self.list(query, viewer) } else { only_get() });
        }
        let events_page = param(query, "events").parse().unwrap_or(0);
        let rest = path.strip_prefix("/workflows/")?;
        let (id, action) = match rest.rsplit_once('/') {
            Some((id, a @ ("cancel" | "retry"))) => (decode(id), Some(a)),
            _ => (decode(rest), None),
        };
        if !viewer.sees(&id) {
            return Some(not_found(&id));
        }
        Some(match (req.method(), action) {
            (&Method::GET, None) => self.workflow(&id, events_page, viewer),
            (_, Some(_)) if !self.actions || !viewer.may_act_on(&id) => forbidden_actions(viewer),
            (&Method::GET, Some(action)) => self.confirm(&id, action, viewer),
            (&Method::POST, Some(action)) => self.act(req, form, &id, action, viewer).await,
            _ => only_get(),
        })
    }

    fn draw_row(&self, w: &Value) -> minijinja::Value {
        let drawn = self.templates.get_template("row.html").and_then(|t| t.render(context! { w => w }));
        minijinja::Value::from_safe_string(drawn.unwrap_or_else(|e| {
            let id = escape(w["id"].as_str().unwrap_or_default());
            format!(
                "<tr class=\"workflow\" data-id=\"{id}\"><td>{id}</td><td colspan=\"5\" class=\"error\">cannot draw this row: {}</td></tr>",
                escape(&e.to_string())
            )
        }))
    }

    fn render(&self, name: &str, ctx: minijinja::Value) -> Reply {
        match self.templates.get_template(name).and_then(|t| t.render(ctx)) {
            Ok(body) => html(StatusCode::OK, body),
            Err(e) => html(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("<p>cannot draw the page: {}</p>", escape(&e.to_string())),
            ),
        }
    }

    fn base(&self, viewer: &Viewer) -> Value {
        if let Some(who) = viewer.signed_in_as() {
            return json!({"who": who, "actions": self.actions});
        }
        let waiting: Vec<String> = infraflow_activities::pacing::waiting_now()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| format!("{n} {}", c.as_str()))
            .collect();
        json!({"journal": self.journal.describe(), "rate_waiting": waiting.join(", "), "actions": self.actions})
    }

    fn list(&self, query: &str, viewer: &Viewer) -> Reply {
        let rows = match self.journal.list() {
            Ok(rows) => rows.into_iter().filter(|r| viewer.sees(&r.id)).collect::<Vec<_>>(),
            Err(e) => {
                return html(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("<p>cannot read the journal: {}</p>", escape(&e.to_string())),
                );
            }
        };
        let param = |name: &str| param(query, name);
        let (state, workflow, cluster, q, error) =
            (param("state"), param("workflow"), param("cluster"), param("q"), param("error"));
        let offset: usize = param("offset").parse().unwrap_or(0);
        let workflows: BTreeSet<String> = rows.iter().map(|r| r.workflow.clone()).collect();
        let states: Vec<WorkflowState> = WorkflowState::parse(&state).into_iter().collect();
        let mut shown: Vec<_> = rows
            .into_iter()
            .filter(|r| {
                fn given(v: &str) -> Option<&str> {
                    Some(v).filter(|v| !v.is_empty())
                }
                // An unknown state matches nothing rather than everything.
                (state.is_empty() || !states.is_empty())
                    && render::row_matches(r, &states, given(&workflow), None)
                    && r.cluster.contains(cluster.as_str())
                    && r.id.contains(q.as_str())
                    && (error.is_empty() || r.error.as_deref().is_some_and(|e| contains_folded(e, &error)))
            })
            .collect();
        // The last change first: what just broke is on top, whenever it was submitted.
        shown.sort_by(|a, b| (b.updated_at, b.created_at, &a.id).cmp(&(a.updated_at, a.created_at, &b.id)));
        let total = shown.len();
        let offset = offset.min(total.saturating_sub(1) / MAX_ROWS * MAX_ROWS);
        let shown: Vec<_> = shown.into_iter().skip(offset).take(MAX_ROWS).collect();
        let unfinished = shown.iter().any(|r| !r.state.is_finished() && r.state != WorkflowState::Paused);
        let now = SystemClock.now();
        // What the page's queued and running rows wait for, as `status` says it; a row whose wait
        // cannot be read shows its step instead.
        let waits = crate::status::waits(&self.journal, &shown).unwrap_or_default();
        let mut items = render::list_json(&shown, &waits);
        if let Value::Array(items) = &mut items {
            for (item, row) in items.iter_mut().zip(&shown) {
                item["age"] = json!(render::age(now - row.created_at));
            }
        }
        // Each row drawn alone: one that cannot be drawn shows why in its place, and the page
        // still answers (it is opened when something needs attention).
        let rows: Vec<minijinja::Value> =
            items.as_array().map(Vec::as_slice).unwrap_or_default().iter().map(|w| self.draw_row(w)).collect();
        self.render(
            "list.html",
            context! {
                base => self.base(viewer),
                title => "workflows",
                refresh => unfinished.then_some(REFRESH_SECONDS),
                rows => rows,
                total => total,
                offset => offset,
                next => (offset + MAX_ROWS < total).then_some(offset + MAX_ROWS),
                previous => (offset > 0).then(|| offset.saturating_sub(MAX_ROWS)),
                paging => list_query(&[("state", &state), ("workflow", &workflow), ("cluster", &cluster), ("q", &q), ("error", &error)]),
                states => WorkflowState::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
                workflows => workflows,
                filter => json!({"state": state, "workflow": workflow, "cluster": cluster, "q": q, "error": error}),
                sweep => viewer.sees_the_daemon().then(|| schedules::last_sweep(&self.sweep)),
                checks => viewer.sees_the_daemon().then(|| schedules::last_checks(&self.checks)),
            },
        )
    }

    fn workflow(&self, id: &str, events_page: usize, viewer: &Viewer) -> Reply {
        let now = SystemClock.now();
        let found = (|| -> infraflow_journal::Result<Option<(Value, Value)>> {
            let (Some(row), Some(view)) = (self.journal.row(id)?, self.journal.load(id)?) else { return Ok(None) };
            let waiting = self.journal.waiting_for(id, now)?;
            let events = self.journal.events(id)?;
            let (nodes, edges) = crate::graph::shape(&view.steps, &crate::graph::durations(&events));
            let lanes = timeline::lanes(&events, now, row.state.is_finished() || row.state == WorkflowState::Paused);
            let mut status = render::view_json(&row, &view, &waiting);
            if !viewer.sees_the_daemon()
                && let Some(o) = status.as_object_mut()
            {
                // Which host and process runs it is the daemon's, not a tenant's.
                o.remove("owner");
            }
            // Each step's first start and last end, as the timeline draws them.
            if let Some(steps) = status["steps"].as_array_mut() {
                for step in steps {
                    let lane = lanes.iter().find(|l| step["key"] == l.key.as_str());
                    let (first, last) = lane.map(timeline::Lane::span).unwrap_or_default();
                    step["firstStart"] = json!(first.map(render::iso_time));
                    step["lastEnd"] = json!(last.map(render::iso_time));
                }
            }
            let (history, pages) = history::page(&events, events_page, !viewer.sees_the_daemon());
            status["age"] = json!(render::age(now - row.created_at));
            let rate_waits: Vec<Value> = crate::rate_waits::of_workflow(id)
                .into_iter()
                .map(|(step, class, secs)| json!({"step": step, "class": class, "seconds": secs}))
                .collect();
            status["rateWaits"] = json!(rate_waits);
            let facts = json!({
                "svg": svg::draw(&nodes, &edges),
                "timeline": timeline::draw(&lanes),
                "input": serde_json::to_string_pretty(&crate::redact::redacted(&view.input)).unwrap_or_default(),
                "history": history,
                "events": events.len(),
                "events_page": events_page.min(pages - 1),
                "events_pages": pages,
                "can_cancel": !row.state.is_finished(),
                "can_retry": matches!(row.state, WorkflowState::Paused | WorkflowState::Failed | WorkflowState::CompensationFailed),
                "unfinished": !row.state.is_finished() && row.state != WorkflowState::Paused,
                "output": view.summary.output.as_ref().map(|o| serde_json::to_string_pretty(o).unwrap_or_default()),
            });
            Ok(Some((status, facts)))
        })();
        match found {
            Ok(Some((status, facts))) => self.render(
                "workflow.html",
                context! {
                    base => self.base(viewer),
                    title => id,
                    refresh => facts["unfinished"].as_bool().unwrap_or(false).then_some(REFRESH_SECONDS),
                    trace_link => status["traceId"].as_str().zip(self.trace_link.as_ref()).map(|(id, link)| link.replace("{traceId}", id)),
                    w => status,
                    facts => facts,
                },
            ),
            Ok(None) => not_found(id),
            Err(e) => html(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("<p>cannot read the journal: {}</p>", escape(&e.to_string())),
            ),
        }
    }

    fn confirm(&self, id: &str, action: &str, viewer: &Viewer) -> Reply {
        self.render(
            "confirm.html",
            context! {
                base => self.base(viewer), title => format!("{action} {id}"), id => id, action => action, csrf => viewer.csrf(&self.guard),
            },
        )
    }

    async fn act<B>(&self, req: &Request<B>, form: &[u8], id: &str, action: &str, viewer: &Viewer) -> Reply {
        if !self.guard.same_origin(req) || !self.guard.token_in(form, viewer.csrf(&self.guard)) {
            return html(
                StatusCode::FORBIDDEN,
                "<p>refused: the request does not come from this page (its Origin is another site's, or it lacks the page's token): open the workflow's page and use its button</p>".into(),
            );
        }
        let now = SystemClock.now();
        let outcome = if action == "cancel" {
            self.journal.request_cancel(id, now).await
        } else {
            self.journal.request_resume(id, now).await
        };
        let refused = match outcome {
            Ok(RequestOutcome::Done(_) | RequestOutcome::AlreadyRequested(_)) => None,
            Ok(RequestOutcome::NotApplicable(state)) => Some(format!("workflow {id} is {state}; nothing to {action}")),
            Ok(RequestOutcome::Superseded { by }) => Some(format!(
                "workflow {id} will not resume its compensation: {by}, a later workflow of its cluster, has run since; remove the cluster with teardown instead"
            )),
            Err(e) => Some(format!("cannot {action} {id}: {e}")),
        };
        if let Some(why) = refused {
            return html(StatusCode::CONFLICT, format!("<p>{}</p><p><a href=\"/\">back</a></p>", escape(&why)));
        }
        let mut r = html(StatusCode::SEE_OTHER, String::new());
        if let Ok(v) = format!("/workflows/{}", encode(id)).parse() {
            r.headers_mut().insert(hyper::header::LOCATION, v);
        }
        r
    }
}

pub(crate) fn html(status: StatusCode, body: String) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/html; charset=utf-8"));
    // The page loads nothing from elsewhere and runs no script; say so to the browser.
    r.headers_mut().insert(
        hyper::header::CONTENT_SECURITY_POLICY,
        hyper::header::HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'",
        ),
    );
    r
}

fn only_get() -> Reply {
    html(
        StatusCode::METHOD_NOT_ALLOWED,
        "<p>this page answers GET; actions are POSTs to /workflows/ID/cancel or /retry</p>".into(),
    )
}

fn forbidden_actions(viewer: &Viewer) -> Reply {
    let why = match viewer.signed_in_as() {
        Some(who) => format!("{} may not cancel or retry: its tenant's permission is not operate", escape(who)),
        None => {
            "actions are off: the daemon listens beyond loopback; start it with --allow-remote-actions to allow them"
                .into()
        }
    };
    html(StatusCode::FORBIDDEN, format!("<p>{why}</p>"))
}

fn not_found(id: &str) -> Reply {
    html(StatusCode::NOT_FOUND, format!("<p>no workflow {} in this journal</p>", escape(id)))
}

/// A query parameter's value, decoded; empty when absent.
fn param(query: &str, name: &str) -> String {
    query.split('&').find_map(|p| p.strip_prefix(&format!("{name}="))).map(decode).unwrap_or_default()
}

/// The list's query string for these filters (the ones given), to page with.
fn list_query(filters: &[(&str, &str)]) -> String {
    filters.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={}&", encode(v))).collect()
}

/// Whether `text` contains `needle`, ignoring case (an error searched for as remembered).
fn contains_folded(text: &str, needle: &str) -> bool {
    text.to_lowercase().contains(&needle.to_lowercase())
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Percent-decoding of a path segment or query value (`+` is a space in a query).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_survive_the_round_trip_through_a_url() {
        for id in ["p-1", "a b/c%d", "ünï"] {
            assert_eq!(decode(&encode(id)), id);
        }
        assert_eq!(decode("a+b%2"), "a b%2");
    }

    fn page(hosts: Vec<String>) -> Page {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(&dir.path().join("j.sqlite3")).unwrap();
        Page::new(journal, true, Guard::for_hosts(hosts))
    }

    #[test]
    fn a_row_draws_in_every_state_and_one_that_cannot_shows_why_in_its_place() {
        let mut p = page(vec![]);
        for state in WorkflowState::ALL {
            let w = json!({"id": "w-ü<1>", "workflow": "provision-infra", "state": state.as_str(), "cluster": "c",
                           "age": "1s", "error": "AccessDenied: <b>ünïcode</b> ".repeat(20), "currentStep": "vpc"});
            let row = p.draw_row(&w).to_string();
            assert!(row.contains(&format!(r#"data-state="{}""#, state.as_str())), "{state:?}: {row}");
            assert!(!row.contains("<b>") && !row.contains("cannot draw"), "{state:?}: {row}");
        }
        p.templates.add_template("row.html", "{{ w.id|no_such_filter }}").unwrap();
        let row = p.draw_row(&json!({"id": "bad<row>"})).to_string();
        assert!(row.contains("cannot draw this row") && row.contains("bad&lt;row&gt;"), "{row}");
    }

    /// minijinja finds an unknown filter only when a template reaches it: every filter any
    /// template names is looked up here, so one in a rarely taken branch fails the test, not the
    /// page an operator opens when something broke.
    #[test]
    fn every_filter_the_templates_use_exists() {
        let p = page(vec![]);
        let mut used = BTreeSet::new();
        for name in ["base.html", "list.html", "workflow.html", "confirm.html", "row.html"] {
            let source = p.templates.get_template(name).unwrap().source().to_string();
            for block in source.split("{{").skip(1).chain(source.split("{%").skip(1)) {
                let block = block.split(['}', '%']).next().unwrap_or_default();
                for after in block.split('|').skip(1) {
                    let filter: String =
                        after.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    used.insert(filter);
                }
            }
        }
        assert!(used.contains("truncate") && used.contains("urlencode") && used.contains("safe"), "{used:?}");
        for filter in &used {
            let r = p.templates.render_str(&format!("{{{{ 'x'|{filter} }}}}"), context! {});
            let unknown = r.as_ref().is_err_and(|e| e.kind() == minijinja::ErrorKind::UnknownFilter);
            assert!(!unknown, "filter {filter} is used by a template and unknown: {r:?}");
        }
    }
}
