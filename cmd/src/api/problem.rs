//! The API's errors as RFC 9457 problem documents (`application/problem+json`): a status, a
//! title, one line of detail saying what to do, and for a bad body the field it names.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

/// A request the API answers with an error.
#[derive(Debug)]
pub struct Problem {
    pub status: StatusCode,
    pub detail: String,
    /// The body's field a 400 is about (`input.infraID`), when one is.
    pub field: Option<String>,
    /// Seconds until a 429 may be tried again.
    pub retry_after: Option<u64>,
}

impl Problem {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem { status, detail: detail.into(), field: None, retry_after: None }
    }

    pub fn bad(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, detail)
    }

    pub fn field(field: &str, detail: impl Into<String>) -> Problem {
        Problem { field: Some(field.to_string()), ..Problem::bad(detail) }
    }

    /// Unknown, or another tenant's: the same answer, so a tenant learns nothing of others.
    pub fn not_found(what: impl Into<String>) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, what)
    }

    pub fn forbidden(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::FORBIDDEN, detail)
    }

    pub fn unauthorized(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::UNAUTHORIZED, detail)
    }

    pub fn internal(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::INTERNAL_SERVER_ERROR, detail)
    }

    pub fn body(&self) -> Value {
        let mut v = json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Some(f) = &self.field {
            v["field"] = json!(f);
        }
        v
    }

    pub fn response(&self) -> Response<Full<Bytes>> {
        let mut r = Response::new(Full::new(Bytes::from(self.body().to_string())));
        *r.status_mut() = self.status;
        let h = r.headers_mut();
        h.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/problem+json"));
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
        }
        if let Some(s) = self.retry_after
            && let Ok(v) = s.to_string().parse()
        {
            h.insert(hyper::header::RETRY_AFTER, v);
        }
        r
    }
}

/// A JSON answer.
pub fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(serde_json::to_string_pretty(body).unwrap_or_default())));
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}
