//! Where pacing meets the SDK: an interceptor on each client names the classes of each call and
//! hears the throttles, and an HTTP client around the SDK's default one waits for the classes'
//! tokens before a request leaves.
//!
//! Why the HTTP client: it is the one async hook every call passes through (interceptors are
//! synchronous, and the retry strategy, where the SDK's own adaptive limiter waits, cannot be
//! replaced through a service's config). The wait counts against the attempt timeout, which
//! `client.rs` sets well above the longest wait a class's backlog makes.

use std::sync::Arc;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeTransmitInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, Metadata};
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction, RetryReason};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::retry::ErrorKind;

use super::{Pacer, RateClass, Service, classes_of};

/// The classes of one request, carried from the interceptor to the HTTP client.
#[derive(Clone, Debug)]
struct Classes {
    operation: String,
    classes: &'static [RateClass],
}

/// Names each request's classes, and reports the throttles the SDK's classifiers recognise.
#[derive(Debug)]
pub(crate) struct PaceTag {
    service: Service,
    pacer: Arc<Pacer>,
}

impl PaceTag {
    pub(crate) fn new(service: Service, pacer: &Arc<Pacer>) -> PaceTag {
        PaceTag { service, pacer: pacer.clone() }
    }

    fn classes<'a>(&self, cfg: &'a ConfigBag) -> Option<(&'a str, &'static [RateClass])> {
        let meta = cfg.load::<Metadata>()?;
        Some((meta.name(), classes_of(self.service, meta.name())))
    }
}

impl Intercept for PaceTag {
    fn name(&self) -> &'static str {
        "infraflow-pace-tag"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some((operation, classes)) = self.classes(cfg) {
            let operation = operation.to_string();
            context.request_mut().add_extension(Classes { operation, classes });
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // The SDK's own classifiers decide what is a throttle (its list of throttling codes per
        // protocol), so pacing and the SDK agree on the same answers.
        let throttled = runtime_components.retry_classifiers().any(|c| {
            matches!(
                c.classify_retry(context.inner()),
                RetryAction::RetryIndicated(RetryReason::RetryableError { kind: ErrorKind::ThrottlingError, .. })
            )
        });
        let Some((operation, classes)) = self.classes(cfg) else { return Ok(()) };
        if throttled {
            tracing::debug!(operation, "AWS throttled the request");
            self.pacer.throttled(operation, classes);
        } else if context.response().is_some() {
            self.pacer.admitted(operation, classes);
        }
        Ok(())
    }
}

/// The SDK's default HTTP client, with each request waiting for its classes' tokens first.
#[derive(Debug)]
pub(crate) struct PacedHttpClient {
    inner: SharedHttpClient,
    pacer: Arc<Pacer>,
}

impl PacedHttpClient {
    pub(crate) fn new(inner: SharedHttpClient, pacer: &Arc<Pacer>) -> PacedHttpClient {
        PacedHttpClient { inner, pacer: pacer.clone() }
    }
}

impl HttpClient for PacedHttpClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        SharedHttpConnector::new(PacedConnector {
            inner: self.inner.http_connector(settings, components),
            pacer: self.pacer.clone(),
        })
    }
}

#[derive(Debug)]
struct PacedConnector {
    inner: SharedHttpConnector,
    pacer: Arc<Pacer>,
}

impl HttpConnector for PacedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let Some(classes) = request.extension::<Classes>().cloned() else {
            return self.inner.call(request);
        };
        let (inner, pacer) = (self.inner.clone(), self.pacer.clone());
        HttpConnectorFuture::new(async move {
            pacer.admit(&classes.operation, classes.classes).await;
            inner.call(request).await
        })
    }
}
