//! AWS clients, configured the standard way (profiles, env credentials, AWS_ENDPOINT_URL), one
//! set per region, created on first use.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_smithy_http_client::tls;
use tokio::sync::Mutex;

use crate::pacing::{GlobalBuckets, PaceTag, PacedHttpClient, Pacer, PacingConfig, Service};

/// The service clients of one region.
#[derive(Clone, Debug)]
pub struct Aws {
    pub region: String,
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
}

impl Aws {
    /// Clients for `region`; an empty region means the SDK's default chain (AWS_REGION, profile).
    /// Every request waits for its turn in the region's buckets (`pacing`).
    pub async fn connect(region: &str, pacing: &PacingConfig) -> Aws {
        Aws::connect_sharing(region, pacing, &crate::pacing::global_buckets(pacing)).await
    }

    /// `connect`, its global request classes (IAM, Route53) paced in `global`'s buckets.
    async fn connect_sharing(region: &str, pacing: &PacingConfig, global: &GlobalBuckets) -> Aws {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if !region.is_empty() {
            loader = loader.region(aws_config::Region::new(region.to_string()));
        }
        let pacer = Pacer::new(pacing, global);
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
        // Every client counts its calls for the daemon's metrics (`observe`) and names each
        // call's request classes for the pacer.
        use crate::observe::CallCounter;
        let tag = |service| PaceTag::new(service, &pacer);
        Aws {
            region: conf.region().map(|r| r.to_string()).unwrap_or_else(|| region.to_string()),
            ec2: aws_sdk_ec2::Client::from_conf(
                aws_sdk_ec2::config::Builder::from(&conf)
                    .interceptor(CallCounter)
                    .interceptor(tag(Service::Ec2))
                    .build(),
            ),
            elb: aws_sdk_elasticloadbalancingv2::Client::from_conf(
                aws_sdk_elasticloadbalancingv2::config::Builder::from(&conf)
                    .interceptor(CallCounter)
                    .interceptor(tag(Service::Elb))
                    .build(),
            ),
            classic_elb: aws_sdk_elasticloadbalancing::Client::from_conf(
                aws_sdk_elasticloadbalancing::config::Builder::from(&conf)
                    .interceptor(CallCounter)
                    .interceptor(tag(Service::Elb))
                    .build(),
            ),
            r53: aws_sdk_route53::Client::from_conf(
                aws_sdk_route53::config::Builder::from(&conf)
                    .interceptor(CallCounter)
                    .interceptor(tag(Service::Route53))
                    .build(),
            ),
            sts: aws_sdk_sts::Client::from_conf(
                aws_sdk_sts::config::Builder::from(&conf)
                    .interceptor(CallCounter)
                    .interceptor(tag(Service::Sts))
                    .build(),
            ),
            iam: aws_sdk_iam::Client::from_conf(
                aws_sdk_iam::config::Builder::from(&conf)
                    .interceptor(CallCounter)
                    .interceptor(tag(Service::Iam))
                    .build(),
            ),
            tagging: aws_sdk_resourcegroupstagging::Client::from_conf(
                aws_sdk_resourcegroupstagging::config::Builder::from(&conf)
                    .interceptor(CallCounter)
                    .interceptor(tag(Service::Tagging))
                    .build(),
            ),
            s3: aws_sdk_s3::Client::from_conf(
                aws_sdk_s3::config::Builder::from(&conf)
                    .interceptor(CallCounter)
                    .interceptor(tag(Service::S3))
                    // An endpoint of one's own (an emulator, a proxy) has no per-bucket host names.
                    .force_path_style(conf.endpoint_url().is_some())
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
        if self.region.is_empty() {
            return Err(crate::error::AwsError::terminal(
                "GetCallerIdentity",
                "no AWS region: set region in the input, AWS_REGION, or the profile's region".to_string(),
            ));
        }
        let out =
            self.sts.get_caller_identity().send().await.map_err(|e| crate::error::classify("GetCallerIdentity", e))?;
        let account = out.account().filter(|a| !a.is_empty()).ok_or_else(|| {
            crate::error::AwsError::not_yet("GetCallerIdentity", "the response names no account".to_string())
        })?;
        Ok(Environment { account: account.to_string(), region: self.region.clone() })
    }
}

/// Clients by region, shared by every workflow of a process — and with them each region's
/// request buckets, and the global services' (IAM, Route53) one set for all regions: the pacing
/// is account-wide as far as this process can make it.
#[derive(Clone)]
pub struct AwsPool {
    clients: Arc<Mutex<HashMap<String, Aws>>>,
    pacing: PacingConfig,
    global: Arc<GlobalBuckets>,
}

impl Default for AwsPool {
    fn default() -> Self {
        AwsPool::with_pacing(PacingConfig::default())
    }
}

impl AwsPool {
    /// Clients paced at AWS's documented default rates.
    pub fn new() -> AwsPool {
        AwsPool::default()
    }

    pub fn with_pacing(pacing: PacingConfig) -> AwsPool {
        let global = Arc::new(crate::pacing::global_buckets(&pacing));
        AwsPool { clients: Arc::default(), pacing, global }
    }

    pub async fn region(&self, region: &str) -> Aws {
        let mut map = self.clients.lock().await;
        if let Some(aws) = map.get(region) {
            return aws.clone();
        }
        let aws = Aws::connect_sharing(region, &self.pacing, &self.global).await;
        map.insert(region.to_string(), aws.clone());
        aws
    }
}
