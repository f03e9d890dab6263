//! AWS errors, classified from the error code and transport outcome into retryable or terminal.

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};

/// A failed AWS call: which operation, the AWS code and message, and whether retrying can help.
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
#[error("{operation}: {}{message}", code.as_deref().map(|c| format!("{c}: ")).unwrap_or_default())]
pub struct AwsError {
    pub operation: &'static str,
    pub code: Option<String>,
    pub message: String,
    pub retryable: bool,
    /// AWS may have acted although the call failed (a lost reply, a timeout, a 5xx): what it
    /// made may not be visible yet (eventual consistency), so a retry must wait before it looks.
    pub outcome_unknown: bool,
    /// Only the operator can fix it (expired or missing credentials, a missing permission): the
    /// workflow pauses for them instead of failing, and `retry` carries on once they have.
    pub operator: bool,
}

impl AwsError {
    /// A terminal error raised by our own checks (not by AWS).
    pub fn terminal(operation: &'static str, message: impl Into<String>) -> AwsError {
        AwsError { operation, message: message.into(), ..AwsError::default() }
    }

    /// A retryable condition found by our own checks (an asynchronous state not reached yet).
    pub fn not_yet(operation: &'static str, message: impl Into<String>) -> AwsError {
        AwsError { operation, message: message.into(), retryable: true, ..AwsError::default() }
    }

    /// A condition only the operator can fix, found by our own checks: the workflow pauses.
    pub fn operator(operation: &'static str, message: impl Into<String>) -> AwsError {
        AwsError { operation, message: message.into(), operator: true, ..AwsError::default() }
    }

    pub fn code_is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }

    pub fn is_not_found(&self) -> bool {
        self.code.as_deref().is_some_and(is_not_found_code)
    }

    /// What a call naming a just-created id may get while AWS is not yet consistent.
    pub fn is_not_yet_consistent(&self) -> bool {
        self.is_not_found() || self.code_is("InvalidSubnet")
    }

    pub fn is_dependency_violation(&self) -> bool {
        self.code.as_deref().is_some_and(|c| {
            matches!(
                c,
                "DependencyViolation"
                    | "ResourceInUse"
                    | "HostedZoneNotEmpty"
                    | "InvalidRouteTableID.HasDependencies"
                    | "DeleteConflict"
            )
        })
    }

    /// While deleting, a dependency that is still going away is worth waiting for.
    pub fn retry_dependency(mut self) -> AwsError {
        if self.is_dependency_violation() {
            self.retryable = true;
        }
        self
    }
}

fn is_not_found_code(c: &str) -> bool {
    c.ends_with(".NotFound")
        || c.ends_with("NotFound")
        // EC2's launch templates: `InvalidLaunchTemplateName.NotFoundException`.
        || c.ends_with("NotFoundException")
        || c.starts_with("NoSuch")
        || matches!(c, "InvalidAllocationID.NotFound" | "InvalidGroup.NotFound" | "HostedZoneNotFound")
}

/// Credentials and permissions: the operator's to fix (`aws sso login`, a policy change).
fn operator_code(c: &str) -> bool {
    matches!(
        c,
        "ExpiredToken"
            | "ExpiredTokenException"
            | "RequestExpired"
            | "AuthFailure"
            | "InvalidClientTokenId"
            | "UnrecognizedClientException"
            | "SignatureDoesNotMatch"
            | "UnauthorizedOperation"
            | "AccessDenied"
            | "AccessDeniedException"
            | "OptInRequired"
            | "NoCredentials"
    )
}

/// Not-found codes of references a user typed (an image, a key pair): no wait will make them
/// appear, so they fail at once instead of being retried as eventual consistency.
fn user_reference_code(c: &str) -> bool {
    c.starts_with("InvalidAMIID.") || c == "InvalidKeyPair.NotFound"
}

/// Codes that a later attempt may get past.
fn retryable_code(c: &str) -> bool {
    matches!(
        c,
        "Throttling"
            | "ThrottlingException"
            | "RequestLimitExceeded"
            | "RequestThrottled"
            | "RequestThrottledException"
            | "TooManyRequestsException"
            | "PriorRequestNotComplete"
            | "InternalError"
            | "InternalFailure"
            | "ServiceUnavailable"
            | "Unavailable"
            | "SlowDown"
            | "IncorrectState"
            | "IncorrectInstanceState"
            | "InvalidChangeBatch.ConcurrentModification"
            | "ConcurrentModification"
    ) || (is_not_found_code(c) && !user_reference_code(c))
}

/// The SDK's error chains run to kilobytes; the first sentence or so says what happened.
fn shorten(detail: &str) -> String {
    const MAX: usize = 240;
    if detail.chars().count() <= MAX {
        return detail.to_string();
    }
    format!("{}…", detail.chars().take(MAX).collect::<String>())
}

/// An error and its causes on one line, shortened.
pub(crate) fn sources(e: &(dyn std::error::Error + 'static)) -> String {
    shorten(&aws_smithy_types::error::display::DisplayErrorContext(e).to_string())
}

/// Classifies an SDK error. NotFound counts as retryable: right after a create, AWS is
/// eventually consistent; deletes treat NotFound as success before calling this.
pub fn classify<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let e = classify_unobserved(operation, err);
    crate::observe::error_seen(
        operation,
        e.code.as_deref().unwrap_or(if e.retryable { "Transport" } else { "Unknown" }),
    );
    e
}

fn classify_unobserved<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    match &err {
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            let detail = aws_sdk_ec2::error::DisplayErrorContext(&err).to_string();
            if detail.contains("credentials") {
                // Retrying cannot conjure credentials: say what to set, once.
                return AwsError {
                    operation,
                    code: Some("NoCredentials".into()),
                    operator: true,
                    message: format!(
                        "no usable AWS credentials: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY ({})",
                        shorten(&detail)
                    ),
                    ..AwsError::default()
                };
            }
            AwsError {
                operation,
                message: format!("transport: {}", shorten(&detail)),
                retryable: true,
                outcome_unknown: true,
                ..AwsError::default()
            }
        }
        SdkError::ConstructionFailure(_) => AwsError {
            operation,
            code: None,
            message: format!("request not built: {}", aws_sdk_ec2::error::DisplayErrorContext(&err)),
            ..AwsError::default()
        },
        _ => {
            let code = err.code().map(str::to_string);
            let message = err.message().map(str::to_string).unwrap_or_else(|| match status {
                Some(s) => format!("HTTP {s} with no error message"),
                None => shorten(&aws_sdk_ec2::error::DisplayErrorContext(&err).to_string()),
            });
            let retryable = code.as_deref().is_some_and(retryable_code) || status.is_some_and(|s| s >= 500 || s == 429);
            let outcome_unknown = status.is_some_and(|s| s >= 500);
            let operator = code.as_deref().is_some_and(operator_code);
            AwsError { operation, code, message, retryable, outcome_unknown, operator }
        }
    }
}

pub type AwsResult<T> = Result<T, AwsError>;

/// Ignores "not found": for deletes, a resource already gone is the goal reached.
pub(crate) fn gone_ok(r: Result<(), AwsError>) -> AwsResult<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e.retry_dependency()),
    }
}

/// A response that lacks what AWS always sends: asked again (the SDK's model makes it optional).
pub(crate) fn missing(operation: &'static str, what: &str) -> AwsError {
    AwsError::not_yet(operation, format!("the response has no {what}"))
}
