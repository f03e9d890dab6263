//! The audit log: every request the API accepted or refused, one line each (one JSON object
//! with `--log-format json`) under the `infraflow::audit` target — time, client, tenant,
//! subject, action, workflow, outcome. Never a token, a body or an input.

use std::net::IpAddr;

/// Who asked, as far as the API knows it when it answers.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub tenant: Option<String>,
    pub subject: Option<String>,
}

pub fn record(client: IpAddr, caller: &Caller, action: &str, workflow: Option<&str>, status: u16, detail: &str) {
    tracing::info!(
        target: "infraflow::audit",
        client = %client,
        tenant = caller.tenant.as_deref().unwrap_or("-"),
        subject = caller.subject.as_deref().unwrap_or("-"),
        action,
        workflow = workflow.unwrap_or("-"),
        status,
        outcome = if status < 400 { "accepted" } else { "refused" },
        detail,
        "api request"
    );
}
