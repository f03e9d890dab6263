//! `teardown-management`: the explicit teardown of what `create-management`
//! made — the operator's roles, the OIDC bucket while it holds no cluster's documents, the public
//! zone while it holds no cluster's records — each only when its identity tag (or zone mark)
//! says it is this management side's. Nothing a cluster's teardown or sweep ever does.

use infraflow_activities::oidc_bucket::Removal;
use infraflow_activities::tags::{CREATED_BY_TAG, IDENTITY_TAG};
use infraflow_activities::{AwsPool, Identity, dns, iam, oidc_bucket};
use infraflow_engine::{ActivityError, BoxFuture, InputError, StepError, Validated, WfCtx, WorkflowDef};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aws_steps::{aws_retry, from_aws};
use crate::create_management::ManagementInput;

/// What it deleted, and what it left because it was not this management side's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagementTeardownOutput {
    pub deleted: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<String>,
}

impl ManagementTeardownOutput {
    fn record(&mut self, kind: &str, name: &str, removal: Removal, id: &Identity) {
        match removal {
            Removal::Deleted => self.deleted.push(format!("{kind} {name}")),
            Removal::Gone => {}
            Removal::NotOurs => self
                .left
                .push(format!("{kind} {name}: not this management side's (no mark of {} with a creator)", id.key())),
        }
    }
}

pub struct TeardownManagement {
    pub pool: AwsPool,
}

const ROLES: [&str; 3] = ["operator-ec2", "operator-oidc-s3", "external-dns"];

impl WorkflowDef for TeardownManagement {
    fn hold(&self, request: infraflow_engine::HoldRequest, input: &Value) -> Option<infraflow_engine::TakeHold> {
        crate::hold::lease::for_input(&self.pool, request, self.name(), input)
    }

    fn name(&self) -> &'static str {
        "teardown-management"
    }

    fn summary(&self) -> &'static str {
        "delete what create-management made, once no cluster uses it"
    }

    fn version(&self) -> u32 {
        1
    }

    fn oldest_version(&self) -> u32 {
        1
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        // The same input as create-management's: what it names is what goes.
        let v = crate::create_management::CreateManagement { pool: self.pool.clone() }.validate(id, input)?;
        Ok(v)
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.assuming(crate::aws_steps::role_of(&input).as_ref());
        Box::pin(async move {
            let p: ManagementInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let out = teardown_management(&ctx, &pool, &p).await?;
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        use crate::policy::*;
        let mut all = actions(&[(IAM, Use::Remove), (DNS, Use::Remove)]);
        all.extend(infraflow_activities::s3::IAM_READ);
        all.extend(oidc_bucket::IAM_DELETE);
        all
    }

    fn undo_context(&self, input: &Value) -> serde_json::Map<String, Value> {
        crate::aws_steps::role_context(input)
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        // The same account and region as the side it tears down: create-management's probe.
        crate::create_management::CreateManagement { pool: self.pool.clone() }.environment(input)
    }
}

async fn teardown_management(
    ctx: &WfCtx,
    pool: &AwsPool,
    p: &ManagementInput,
) -> Result<ManagementTeardownOutput, StepError> {
    let region = crate::aws_steps::acting_region(ctx, &p.region);
    let owner = p.owner();
    let opts = || infraflow_engine::StepOptions { retry: Some(aws_retry()), undo: None, settle: None };
    let mut out = ManagementTeardownOutput::default();
    let prefix = p.name_prefix.as_deref().unwrap_or("hypershift");
    let bucket_id = Identity::new(&owner, "oidc-bucket", None, p.oidc_bucket.clone());
    let zone_id = p.base_domain.as_ref().map(|base| Identity::new(&owner, "public-zone", None, base.clone()));
    // Nothing goes while a cluster uses the management side: its documents in the bucket, its
    // records in the zone (the operator's roles are what would remove them).
    let _: () = ctx
        .step_with("unused", "management.refuse-while-used", &(&p.oidc_bucket, &p.base_domain), opts(), || async {
            let aws = pool.region(&region).await;
            oidc_bucket::refuse_while_used(&aws, &bucket_id, &p.oidc_bucket).await.map_err(from_aws)?;
            if let (Some(base), Some(zone_id)) = (&p.base_domain, &zone_id) {
                dns::public::refuse_while_used(&aws, zone_id, base).await.map_err(from_aws)?;
            }
            Ok(())
        })
        .await?;
    for file in ROLES {
        let name = format!("{prefix}-{file}");
        let key = format!("{owner}/role/{file}");
        let gone: Option<bool> = ctx
            .step_with(&format!("delete/role/{file}"), "iam.delete-management-role", &(&name, &key), opts(), || async {
                let aws = pool.region(&region).await;
                let Some(tags) = iam::role_tags(&aws, &name).await.map_err(from_aws)? else { return Ok(Some(false)) };
                let made_here = tags.iter().any(|(k, v)| k == CREATED_BY_TAG && !v.is_empty());
                if !made_here || !tags.iter().any(|(k, v)| k == IDENTITY_TAG && *v == key) {
                    return Ok(None);
                }
                iam::delete_role(&aws, &name).await.map(Some).map_err(from_aws)
            })
            .await?;
        match gone {
            Some(true) => out.deleted.push(format!("iam-role {name}")),
            Some(false) => {}
            None => out.left.push(format!(
                "iam-role {name}: not this management side's (no {IDENTITY_TAG}={key} with a {CREATED_BY_TAG})"
            )),
        }
    }
    let removal: Removal = ctx
        .step_with(
            "delete/oidc-bucket",
            "s3.delete-oidc-bucket",
            &(&p.oidc_bucket, bucket_id.key()),
            opts(),
            || async {
                let aws = pool.region(&region).await;
                oidc_bucket::delete_oidc_bucket_if_empty(&aws, &bucket_id, &p.oidc_bucket).await.map_err(from_aws)
            },
        )
        .await?;
    out.record("oidc-bucket", &p.oidc_bucket, removal, &bucket_id);
    if let (Some(base), Some(zone_id)) = (&p.base_domain, &zone_id) {
        let removal: Removal = ctx
            .step_with("delete/public-zone", "route53.delete-public-zone", &(base, zone_id.key()), opts(), || async {
                let aws = pool.region(&region).await;
                dns::public::delete_public_zone_if_empty(&aws, zone_id, base).await.map_err(from_aws)
            })
            .await?;
        out.record("public-zone", base, removal, zone_id);
    }
    Ok(out)
}
