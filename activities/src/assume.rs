//! A role's session from STS `AssumeRole`, asked with the ExternalId and SourceIdentity the role
//! names: the SDK's own provider cannot send a SourceIdentity, which names who asked in every
//! CloudTrail record of the session.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, future};
use aws_sdk_sts::error::SdkError;

use crate::role::AssumedRole;

/// Asks STS for `role`'s session each time the SDK's identity cache needs one (before the last
/// expires), through `sts`: the process's own credentials, endpoint and pacing.
#[derive(Debug)]
pub struct AssumeRole {
    pub sts: aws_sdk_sts::Client,
    pub role: AssumedRole,
}

impl AssumeRole {
    async fn session(&self) -> Result<Credentials, CredentialsError> {
        let asked = self
            .sts
            .assume_role()
            .role_arn(&self.role.arn)
            .role_session_name(self.role.session_name())
            .set_external_id(self.role.external_id.clone())
            .set_source_identity(self.role.source_identity.clone())
            .send()
            .await;
        let out = match asked {
            Ok(out) => out,
            // STS answered and refused (a role that does not trust this principal, a wrong
            // external id, a trust without sts:SetSourceIdentity): the operator's to fix.
            Err(SdkError::ServiceError(e)) => return Err(CredentialsError::provider_error(e.into_err())),
            // No answer (a timeout, a connection refused): another try may get one.
            Err(e) => return Err(CredentialsError::unhandled(e)),
        };
        let Some(c) = out.credentials() else {
            return Err(CredentialsError::unhandled("AssumeRole answered without credentials"));
        };
        let expiry = SystemTime::try_from(*c.expiration())
            .map_err(|_| CredentialsError::unhandled("AssumeRole answered an expiration out of range"))?;
        Ok(Credentials::new(
            c.access_key_id(),
            c.secret_access_key(),
            Some(c.session_token().to_string()),
            Some(expiry),
            "infraflow-assume-role",
        ))
    }
}

impl ProvideCredentials for AssumeRole {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.session())
    }
}
