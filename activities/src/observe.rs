//! AWS calls counted for metrics: an SDK interceptor on every client reports each call's service,
//! operation and HTTP status, and `classify` each error's AWS code, to process-wide observers
//! (none unless the binary installs them).

use std::sync::{Arc, OnceLock};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

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

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "infraflow-call-counter"
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let (Some(observe), Some(meta)) = (OBSERVER.get(), cfg.load::<Metadata>()) {
            observe(&self.0, meta.service(), meta.name(), context.response().map(|r| r.status().as_u16()));
        }
        Ok(())
    }
}
