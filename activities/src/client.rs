//! AWS clients, configured the standard way (profiles, env credentials, AWS_ENDPOINT_URL), one
//! set per region and role, created on first use.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_smithy_http_client::tls;
use tokio::sync::Mutex;

use crate::pacing::{GlobalBuckets, PaceTag, PacedHttpClient, Pacer, PacingConfig, Service};
use crate::role::AssumedRole;

/// The service clients of one region.
#[derive(Clone, Debug)]
pub struct Aws {
    pub region: String,
    /// The role these clients act through; None: the process's own credentials.
    pub role: Option<AssumedRole>,
    /// The role's credentials, for the environment probe to tell a role that cannot be assumed
    /// from a call that failed.
    assumed: Option<aws_credential_types::provider::SharedCredentialsProvider>,
    pub ec2: aws_sdk_ec2::Client,
    pub elb: aws_sdk_elasticloadbalancingv2::Client,
    /// Classic load balancers: only read and deleted (a cluster's cloud provider makes them).
    pub classic_elb: aws_sdk_elasticloadbalancing::Client,
    pub r53: aws_sdk_route53::Client,
    pub sts: aws_sdk_sts::Client,
    /// IAM is global: the same account-wide roles whatever the region.
    pub iam: aws_sdk_iam::Client,
    /// What still carries a tag, whatever its service (a teardown's last check).
    pub tagging: aws_sdk_resourcegroupstagging::Client,
    /// The image registry's bucket of a cluster that ran (teardown only).
    pub s3: aws_sdk_s3::Client,
    /// The account's quotas (a provision's admission: `quotas`).
    pub quotas: aws_sdk_servicequotas::Client,
    /// Why this process may not act through `role` (`RoleAllowList`): the environment probe,
    /// which every execution makes first, pauses with it.
    pub refused: Option<String>,
}

impl Aws {
    /// Clients for `region`; an empty region means the SDK's default chain (AWS_REGION, profile).
    /// Every request waits for its turn in the region's buckets (`pacing`).
    pub async fn connect(region: &str, pacing: &PacingConfig) -> Aws {
        Aws::connect_sharing(region, Pacer::new(pacing, &crate::pacing::global_buckets(pacing)), None, None).await
    }

    /// `connect` through `role` (None: the process's own credentials), every request paced by
    /// `pacer`: its account's buckets in the region.
    async fn connect_sharing(
        region: &str,
        pacer: Arc<Pacer>,
        role: Option<&AssumedRole>,
        refused: Option<&str>,
    ) -> Aws {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if !region.is_empty() {
            loader = loader.region(aws_config::Region::new(region.to_string()));
        }
        let https = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::AwsLc))
            .build_https();
        let conf = loader
            .http_client(PacedHttpClient::new(https, &pacer))
            // No blind retries inside the SDK: a create retried after a lost response would
            // create twice. The engine retries instead, and every create looks up first.
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    // A hung AWS: no answer begins within a minute.
                    .read_timeout(Duration::from_secs(60))
                    // An attempt includes its wait for the request rate, which a fleet's backlog
                    // can make minutes long; past this the engine's durable retry takes over.
                    .operation_attempt_timeout(Duration::from_secs(600))
                    .build(),
            )
            .load()
            .await;
        // The role's session comes from STS with the process's own credentials (through the same
        // endpoint and pacing); the SDK's identity cache renews it before it expires, so a run
        // longer than a session goes on.
        let assumed = match role {
            // A role the process may not act through gets no session at all: every client of
            // it fails before anything is sent, not only the environment check (SAFETY-A7937A6
            // G11: the hold and the admission run beside that check).
            Some(_) if refused.is_some() => Some(aws_credential_types::provider::SharedCredentialsProvider::new(
                RefusedRole(refused.unwrap_or_default().to_string()),
            )),
            Some(role) => {
                let provider = crate::assume::AssumeRole { sts: aws_sdk_sts::Client::new(&conf), role: role.clone() };
                Some(aws_credential_types::provider::SharedCredentialsProvider::new(provider))
            }
            None => None,
        };
        let conf = match &assumed {
            Some(p) => conf.into_builder().credentials_provider(p.clone()).build(),
            None => conf,
        };
        // Every client counts its calls for the daemon's metrics (`observe`) and names each
        // call's request classes for the pacer.
        use crate::observe::CallCounter;
        let account: Arc<str> = role.map(|r| r.account()).unwrap_or_default().into();
        let tag = |service| PaceTag::new(service, &pacer);
        Aws {
            region: conf.region().map(|r| r.to_string()).unwrap_or_else(|| region.to_string()),
            role: role.cloned(),
            assumed,
            refused: None,
            ec2: aws_sdk_ec2::Client::from_conf(
                aws_sdk_ec2::config::Builder::from(&conf)
                    .interceptor(CallCounter(account.clone()))
                    .interceptor(tag(Service::Ec2))
                    .build(),
            ),
            elb: aws_sdk_elasticloadbalancingv2::Client::from_conf(
                aws_sdk_elasticloadbalancingv2::config::Builder::from(&conf)
                    .interceptor(CallCounter(account.clone()))
                    .interceptor(tag(Service::Elb))
                    .build(),
            ),
            classic_elb: aws_sdk_elasticloadbalancing::Client::from_conf(
                aws_sdk_elasticloadbalancing::config::Builder::from(&conf)
                    .interceptor(CallCounter(account.clone()))
                    .interceptor(tag(Service::ClassicElb))
                    .build(),
            ),
            r53: aws_sdk_route53::Client::from_conf(
                aws_sdk_route53::config::Builder::from(&conf)
                    .interceptor(CallCounter(account.clone()))
                    .interceptor(tag(Service::Route53))
                    .build(),
            ),
            sts: aws_sdk_sts::Client::from_conf(
                aws_sdk_sts::config::Builder::from(&conf)
                    .interceptor(CallCounter(account.clone()))
                    .interceptor(tag(Service::Sts))
                    .build(),
            ),
            iam: aws_sdk_iam::Client::from_conf(
                aws_sdk_iam::config::Builder::from(&conf)
                    .interceptor(CallCounter(account.clone()))
                    .interceptor(tag(Service::Iam))
                    .build(),
            ),
            tagging: aws_sdk_resourcegroupstagging::Client::from_conf(
                aws_sdk_resourcegroupstagging::config::Builder::from(&conf)
                    .interceptor(CallCounter(account.clone()))
                    .interceptor(tag(Service::Tagging))
                    .build(),
            ),
            s3: aws_sdk_s3::Client::from_conf(
                aws_sdk_s3::config::Builder::from(&conf)
                    .interceptor(CallCounter(account.clone()))
                    .interceptor(tag(Service::S3))
                    // An endpoint of one's own (an emulator, a proxy) has no per-bucket host names.
                    .force_path_style(conf.endpoint_url().is_some())
                    .build(),
            ),
            quotas: aws_sdk_servicequotas::Client::from_conf(
                aws_sdk_servicequotas::config::Builder::from(&conf)
                    .interceptor(CallCounter(account.clone()))
                    .interceptor(tag(Service::Quotas))
                    .build(),
            ),
        }
    }
}

/// The IAM action of the environment probe. (STS answers GetCallerIdentity whatever the policy
/// says; it is listed so that the policy names every call infraflow makes.)
pub const IAM_ENVIRONMENT: &[&str] = &["sts:GetCallerIdentity"];

/// The AWS account and region a workflow acts in.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Environment {
    pub account: String,
    pub region: String,
}

impl Aws {
    /// Who these clients act as (STS GetCallerIdentity, through the SDK's standard chain) and
    /// where: what a workflow journals at its start and checks on every resume.
    pub async fn environment(&self) -> crate::error::AwsResult<Environment> {
        if let Some(why) = &self.refused {
            return Err(crate::error::AwsError {
                operator: true,
                ..crate::error::AwsError::terminal("AssumeRole", why.clone())
            });
        }
        if self.region.is_empty() {
            return Err(crate::error::AwsError::terminal(
                "GetCallerIdentity",
                "no AWS region: set region in the input, AWS_REGION, or the profile's region".to_string(),
            ));
        }
        if let (Some(role), Some(assumed)) = (&self.role, &self.assumed) {
            use aws_credential_types::provider::ProvideCredentials;
            use aws_credential_types::provider::error::CredentialsError;
            match assumed.provide_credentials().await {
                Ok(_) => {}
                // STS answered and refused (AccessDenied, a role that does not exist or does not
                // trust this principal, a wrong external id): the operator's to fix.
                Err(e @ CredentialsError::ProviderError(_)) => {
                    let why = crate::error::sources(&e);
                    return Err(crate::error::AwsError::operator(
                        "AssumeRole",
                        format!(
                            "cannot assume role {} ({why}): check that it exists, that its trust policy admits this process's principal (`infraflow policy --trust-for`) and the external id",
                            role.arn
                        ),
                    ));
                }
                Err(e) => {
                    let why = crate::error::sources(&e);
                    return Err(crate::error::AwsError::not_yet(
                        "AssumeRole",
                        format!("cannot assume role {} yet ({why})", role.arn),
                    ));
                }
            }
        }
        let out =
            self.sts.get_caller_identity().send().await.map_err(|e| crate::error::classify("GetCallerIdentity", e))?;
        let account = out.account().filter(|a| !a.is_empty()).ok_or_else(|| {
            crate::error::AwsError::not_yet("GetCallerIdentity", "the response names no account".to_string())
        })?;
        Ok(Environment { account: account.to_string(), region: self.region.clone() })
    }
}

/// Clients by region and role, shared by every workflow of a process — and with them each
/// account's request buckets: per region, and the global services' (IAM, Route53) one set for
/// all regions. The pacing is account-wide as far as this process can make it; clusters in two
/// accounts never wait for each other. A pool scoped to a role (`assuming`) hands out that role's
/// clients.
#[derive(Clone)]
pub struct AwsPool {
    shared: Arc<Shared>,
    role: Option<AssumedRole>,
    /// The roles it may assume (None: any, as `run` does with the operator's own credentials).
    allowed: Option<Arc<crate::role::RoleAllowList>>,
}

struct Shared {
    pacing: PacingConfig,
    clients: Mutex<HashMap<(String, Option<AssumedRole>), Aws>>,
    /// Pacers by (account, region); the process's own account is "".
    pacers: Mutex<HashMap<(String, String), Arc<Pacer>>>,
    global: Mutex<HashMap<String, Arc<GlobalBuckets>>>,
}

impl Default for AwsPool {
    fn default() -> Self {
        AwsPool::with_pacing(PacingConfig::default())
    }
}

/// The credentials of a role this process may not act through: none, ever, and why.
#[derive(Debug)]
struct RefusedRole(String);

impl aws_credential_types::provider::ProvideCredentials for RefusedRole {
    fn provide_credentials<'a>(&'a self) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        aws_credential_types::provider::future::ProvideCredentials::ready(Err(
            aws_credential_types::provider::error::CredentialsError::provider_error(self.0.clone()),
        ))
    }
}

impl AwsPool {
    /// Clients paced at AWS's documented default rates.
    pub fn new() -> AwsPool {
        AwsPool::default()
    }

    pub fn with_pacing(pacing: PacingConfig) -> AwsPool {
        let shared = Shared { pacing, clients: Mutex::default(), pacers: Mutex::default(), global: Mutex::default() };
        AwsPool { shared: Arc::new(shared), role: None, allowed: None }
    }

    /// This pool, assuming only the roles `list` allows (a daemon's `--allow-role`).
    pub fn allowing(self, list: Option<crate::role::RoleAllowList>) -> AwsPool {
        AwsPool { allowed: list.map(Arc::new), ..self }
    }

    /// This pool's clients acting through `role` (None: the process's own credentials), sharing
    /// every client and bucket with it.
    pub fn assuming(&self, role: Option<&AssumedRole>) -> AwsPool {
        AwsPool { shared: self.shared.clone(), role: role.cloned(), allowed: self.allowed.clone() }
    }

    /// The role this pool's clients act through.
    pub fn role(&self) -> Option<&AssumedRole> {
        self.role.as_ref()
    }

    pub async fn region(&self, region: &str) -> Aws {
        let key = (region.to_string(), self.role.clone());
        let mut map = self.shared.clients.lock().await;
        if let Some(aws) = map.get(&key) {
            return aws.clone();
        }
        let account = self.role.as_ref().map(|r| r.account().to_string()).unwrap_or_default();
        let pacer = self.pacer(&account, region).await;
        let refused = match (&self.role, &self.allowed) {
            (Some(r), Some(list)) if !list.allows(&r.arn) => Some(list.refusal(&r.arn)),
            _ => None,
        };
        // A role the daemon's configuration gives an ExternalId (a tenant's) is assumed with that
        // one, never the input's: the input is the tenant's to write, the ExternalId is not.
        let role = self.role.as_ref().map(|r| match self.allowed.as_ref().and_then(|l| l.external_id_for(&r.arn)) {
            Some(id) => AssumedRole { external_id: Some(id.to_string()), ..r.clone() },
            None => r.clone(),
        });
        let mut aws = Aws::connect_sharing(region, pacer, role.as_ref(), refused.as_deref()).await;
        aws.refused = refused;
        map.insert(key, aws.clone());
        aws
    }

    /// The buckets of `account` in `region`: two roles of one account share them.
    async fn pacer(&self, account: &str, region: &str) -> Arc<Pacer> {
        let global = {
            let mut global = self.shared.global.lock().await;
            global
                .entry(account.to_string())
                .or_insert_with(|| Arc::new(crate::pacing::global_buckets(&self.shared.pacing)))
                .clone()
        };
        let mut pacers = self.shared.pacers.lock().await;
        pacers
            .entry((account.to_string(), region.to_string()))
            .or_insert_with(|| Pacer::of_account(account, &self.shared.pacing, &global))
            .clone()
    }
}
