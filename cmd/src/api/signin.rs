//! The status page on the API's listener, behind a sign-in: `GET /login` asks for a tenant's
//! token, `POST /login` exchanges it for a session cookie (`session`), `POST /logout` ends it;
//! every other path is the page (`crate::page`) as the signed-in tenant may see it — its own
//! workflows, cancel and retry with `operate` — each request in the audit log.

use std::net::IpAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use super::audit::{self, Caller};
use super::auth::Authenticated;
use super::session::{self, COOKIE};
use super::tenants::Permission;
use super::{Api, fences};
use crate::page::Viewer;
use crate::page::escape;

/// A sign-in's or an action's form: a token (an OIDC token is a few KB) or the page's.
const FORM_LIMIT: usize = 16 * 1024;

type Reply = Response<Full<Bytes>>;

impl Api {
    /// The answer to a request outside `/v1`: the sign-in, or the page behind it.
    pub(super) async fn page_door(&self, client: IpAddr, req: Request<Incoming>) -> Reply {
        let (parts, body) = req.into_parts();
        let form = if parts.method == Method::POST {
            match Limited::new(body, FORM_LIMIT).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return page(StatusCode::PAYLOAD_TOO_LARGE, "<p>the form is too large</p>".into()),
            }
        } else {
            Bytes::new()
        };
        let req = Request::from_parts(parts, ());
        match (req.method(), req.uri().path()) {
            (&Method::GET, "/login") => sign_in_form(StatusCode::OK, ""),
            (&Method::POST, "/login") => self.sign_in(client, &req, &form).await,
            (&Method::POST, "/logout") => {
                // Another site's form must not sign the browser out either.
                if !self.page.guard().same_origin(&req) {
                    audit::record(client, &Caller::default(), "sign-out", None, 403, "not from this page");
                    return page(
                        StatusCode::FORBIDDEN,
                        "<p>refused: the sign-out does not come from this page</p>".into(),
                    );
                }
                if let Some(cookie) = session::cookie_of(req.headers()) {
                    self.sessions.close(&cookie);
                }
                audit::record(client, &Caller::default(), "sign-out", None, 303, "");
                with_cookie(redirect("/login"), &session::clear_cookie())
            }
            _ => self.behind_sign_in(client, &req, &form).await,
        }
    }

    async fn sign_in(&self, client: IpAddr, req: &Request<()>, form: &[u8]) -> Reply {
        // A sign-in posted from another site would sign the browser in as someone else.
        if !self.page.guard().same_origin(req) {
            return page(StatusCode::FORBIDDEN, "<p>refused: the sign-in does not come from this page</p>".into());
        }
        let token = form_value(form, "token").unwrap_or_default();
        let authorization = format!("Bearer {}", token.trim());
        match self.auth.authenticate(client, Some(&authorization)).await {
            Ok(who) => {
                audit::record(client, &caller(&who), "sign-in", None, 303, "");
                let cookie = self.sessions.open(authorization);
                with_cookie(redirect("/"), &session::set_cookie(&cookie))
            }
            Err(p) => {
                audit::record(client, &Caller::default(), "sign-in", None, p.status.as_u16(), &p.detail);
                sign_in_form(p.status, &p.detail)
            }
        }
    }

    async fn behind_sign_in(&self, client: IpAddr, req: &Request<()>, form: &[u8]) -> Reply {
        let path = req.uri().path();
        let action = match (req.method(), path.rsplit('/').next()) {
            (&Method::POST, Some("cancel")) => "page-cancel",
            (&Method::POST, Some("retry")) => "page-retry",
            _ => "page-view",
        };
        let workflow = workflow_of(path);
        let cookie = session::cookie_of(req.headers());
        let who = match cookie.as_deref().and_then(|c| self.sessions.authorization(c)) {
            Some(authorization) => match self.auth.identify(Some(&authorization)).await {
                Ok(who) => Some(who),
                Err(_) => {
                    // Its token was taken out of the tenants file, or has expired: the session
                    // ends for good, whatever the file says later.
                    self.sessions.close(cookie.as_deref().unwrap_or_default());
                    None
                }
            },
            None => None,
        };
        let Some(who) = who else {
            let answer = if req.method() == Method::GET {
                redirect("/login")
            } else {
                sign_in_form(StatusCode::UNAUTHORIZED, "sign in first")
            };
            let why = if cookie.is_some() { "no such session" } else { "not signed in" };
            audit::record(client, &Caller::default(), action, workflow.as_deref(), answer.status().as_u16(), why);
            return answer;
        };
        let own = match self.routes.ownership.own_rows(self.routes.engine.journal(), &who) {
            Ok(rows) => rows.into_iter().map(|r| r.id).collect(),
            Err(p) => return page(p.status, format!("<p>{}</p>", escape(&p.detail))),
        };
        let viewer = Viewer::Tenant {
            signed_in_as: who.submitter(),
            own,
            may_act: fences::permits(&who, Permission::Operate, "cancel or retry").is_ok(),
            csrf: session::form_token(&self.page.guard().csrf, cookie.as_deref().unwrap_or_default()),
        };
        let answer = self.page.respond(req, form, &viewer).await.unwrap_or_else(|| {
            page(StatusCode::NOT_FOUND, "<p>not found; the page is at /, the API under /v1</p>".into())
        });
        audit::record(client, &caller(&who), action, workflow.as_deref(), answer.status().as_u16(), "");
        answer
    }
}

/// The workflow a page path is about, decoded as the page routes it (`/workflows/ID[/action]`).
fn workflow_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/workflows/")?;
    let id = match rest.rsplit_once('/') {
        Some((id, "cancel" | "retry")) => id,
        _ => rest,
    };
    Some(percent_encoding::percent_decode_str(id).decode_utf8_lossy().into_owned())
}

fn caller(who: &Authenticated) -> Caller {
    Caller { tenant: Some(who.tenant.name.clone()), subject: Some(who.subject.clone()) }
}

/// A form field's value, percent-decoded.
fn form_value(form: &[u8], name: &str) -> Option<String> {
    let form = String::from_utf8_lossy(form);
    let raw = form.split('&').find_map(|p| p.strip_prefix(name)?.strip_prefix('='))?;
    Some(percent_encoding::percent_decode_str(&raw.replace('+', " ")).decode_utf8_lossy().into_owned())
}

fn sign_in_form(status: StatusCode, why: &str) -> Reply {
    let why = if why.is_empty() { String::new() } else { format!("<p class=\"error\">{}</p>", escape(why)) };
    page(
        status,
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>sign in · infraflow</title></head><body>\
             <h1>infraflow</h1>{why}<form method=\"post\" action=\"/login\"><label>your tenant's token \
             <input type=\"password\" name=\"token\" autocomplete=\"off\" required></label> <button>sign in</button></form>\
             <p>The session lasts eight hours; it is held in a cookie ({COOKIE}) this site alone can read.</p></body></html>"
        ),
    )
}

/// The page's own answer (its content type and policy), never kept by a cache: what a signed-in
/// tenant sees is its own.
fn page(status: StatusCode, body: String) -> Reply {
    let mut r = crate::page::html(status, body);
    r.headers_mut().insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
    r
}

fn redirect(to: &'static str) -> Reply {
    let mut r = page(StatusCode::SEE_OTHER, String::new());
    r.headers_mut().insert(hyper::header::LOCATION, hyper::header::HeaderValue::from_static(to));
    r
}

fn with_cookie(mut r: Reply, cookie: &str) -> Reply {
    if let Ok(v) = cookie.parse() {
        r.headers_mut().insert(hyper::header::SET_COOKIE, v);
    }
    r
}
