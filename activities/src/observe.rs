//! AWS calls counted for metrics and traced: an SDK interceptor on every client reports each
//! call's service, operation and HTTP status, and `classify` each error's AWS code, to
//! process-wide observers (none unless the binary installs them); under a sampled span (a step's
//! attempt) each call is a client span of its own, its SDK retries events on it.

use std::sync::{Arc, OnceLock};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use infraflow_trace::{Attr, Kind, Span, SpanCtx, Status};

/// Called once per AWS call: (account, service, operation, HTTP status; None when no response
/// came back). The account is the role's the call went through, "" for the process's own.
pub type CallObserver = Arc<dyn Fn(&str, &str, &str, Option<u16>) + Send + Sync>;

static OBSERVER: OnceLock<CallObserver> = OnceLock::new();

/// Installs the process's call observer; false if one was installed already.
pub fn observe_calls(f: CallObserver) -> bool {
    OBSERVER.set(f).is_ok()
}

/// Called once per AWS error: (operation, AWS error code, or `Transport` when none came back).
pub type ErrorObserver = Arc<dyn Fn(&str, &str) + Send + Sync>;

static ERRORS: OnceLock<ErrorObserver> = OnceLock::new();

/// Installs the process's error observer; false if one was installed already.
pub fn observe_errors(f: ErrorObserver) -> bool {
    ERRORS.set(f).is_ok()
}

pub(crate) fn error_seen(operation: &str, code: &str) {
    if let Some(observe) = ERRORS.get() {
        observe(operation, code);
    }
}

#[derive(Debug)]
pub(crate) struct CallCounter(pub(crate) Arc<str>);

/// The span of one AWS call, kept in the call's config bag from its start to its end.
#[derive(Clone, Debug)]
struct CallSpan {
    span: Span,
    attempts: u32,
}

impl Storable for CallSpan {
    type Storer = StoreReplace<Self>;
}

/// A wait inside an AWS call (the pacer's), as a span of the call's attempt, if it is traced.
pub(crate) fn traced_wait(name: &'static str, class: &str, waited: std::time::Duration) {
    let Some(SpanCtx { trace_id, span_id, sampled: true }) = infraflow_trace::current() else { return };
    let mut s = Span::start(trace_id, Some(span_id), name).attr("infraflow.rate_class", class);
    s.start_ns = s.start_ns.saturating_sub(waited.as_nanos() as u64);
    s.end(Status::Ok);
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "infraflow-call-counter"
    }

    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(SpanCtx { trace_id, span_id, sampled: true }) = infraflow_trace::current() {
            let mut span = Span::start(trace_id, Some(span_id), "aws");
            span.kind = Kind::Client;
            cfg.interceptor_state().store_put(CallSpan { span, attempts: 0 });
        }
        Ok(())
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(mut call) = cfg.load::<CallSpan>().cloned() {
            call.attempts += 1;
            if call.attempts > 1 {
                // The SDK tries again (a throttle, a 5xx, a dropped connection): an event each.
                let _ = context;
                call.span.event("retry", vec![("infraflow.attempt", Attr::Int(i64::from(call.attempts)))]);
            }
            cfg.interceptor_state().store_put(call);
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let status = context.response().map(|r| r.status().as_u16());
        if let (Some(observe), Some(meta)) = (OBSERVER.get(), cfg.load::<Metadata>()) {
            observe(&self.0, meta.service(), meta.name(), status);
        }
        if let (Some(call), Some(meta)) = (cfg.load::<CallSpan>().cloned(), cfg.load::<Metadata>()) {
            end_call_span(call, meta, context, status, &self.0);
        }
        Ok(())
    }
}

/// Ends an AWS call's span with OpenTelemetry's attributes for AWS SDK calls.
fn end_call_span(
    call: CallSpan,
    meta: &Metadata,
    context: &FinalizerInterceptorContextRef<'_>,
    status: Option<u16>,
    account: &str,
) {
    let mut span = call.span;
    span.name = format!("{}.{}", meta.service(), meta.name()).into();
    span.set("rpc.system", "aws-api");
    span.set("rpc.service", meta.service());
    span.set("rpc.method", meta.name());
    if !account.is_empty() {
        span.set("infraflow.account", account);
    }
    let headers = context.response().map(|r| r.headers());
    let request_id = headers.and_then(|h| h.get("x-amzn-requestid").or_else(|| h.get("x-amz-request-id")));
    if let Some(id) = request_id {
        span.set("aws.request_id", id);
    }
    if let Some(code) = status {
        span.set("http.response.status_code", i64::from(code));
        // 429/503, or a 400 whose code says so (STS, IAM, Route 53, ELB: `Throttling`; EC2:
        // `RequestLimitExceeded`).
        let body = context.response().and_then(|r| r.body().bytes()).unwrap_or_default();
        let says = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
        if code == 429 || code == 503 || (code == 400 && (says(b"Throttl") || says(b"RequestLimitExceeded"))) {
            span.event("throttled", vec![("http.response.status_code", Attr::Int(i64::from(code)))]);
        }
    }
    if call.attempts > 1 {
        span.set("infraflow.sdk_attempts", i64::from(call.attempts));
    }
    let failed = status.is_none_or(|c| c >= 400);
    span.end(if failed {
        Status::Error(status.map_or_else(|| "no response".to_string(), |c| format!("HTTP {c}")))
    } else {
        Status::Ok
    });
}
