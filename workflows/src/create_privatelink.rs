//! `create-privatelink`: the PrivateLink path of a private hosted cluster — internal NLBs with
//! endpoint services on the management side, a security group, an interface endpoint and CNAME
//! records on the guest side (seeds/003).
//!
//! Why a zone check before the endpoint: guest subnets are mapped to zone IDs and compared with the
//! zone IDs of the zones the endpoint service offers, before the endpoint is created (seeds/000;
//! the `zone-check` step: zone names are per-account aliases). Zone names are resolved with the
//! workflow's credentials: both sides are assumed to be reachable with them.

use infraflow_activities::dns::WrittenCname;
use infraflow_activities::elb::{self, short_name};
use infraflow_activities::network::{self, SubnetInfo};
use infraflow_activities::privatelink::{self, EndpointService};
use infraflow_activities::security::{self, Rule};
use infraflow_activities::{AwsPool, Identity, Kind, Lookup, dns};
use infraflow_journal::Undo;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aws_steps::{
    RESTORE_RECORDS, RestoreRecords, aws_retry, create_opts, from_aws, probe_environment, read_opts,
};
use crate::validate;
use infraflow_engine::{ActivityError, InputError, StepError};
use infraflow_engine::{BoxFuture, Validated, WorkflowDef};
use infraflow_engine::{StepOptions, WfCtx, join_branches, join_pair};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagementSide {
    #[serde(rename = "vpcID")]
    pub vpc_id: String,
    #[serde(rename = "subnetIDs")]
    pub subnet_ids: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GuestSide {
    #[serde(rename = "vpcID")]
    pub vpc_id: String,
    #[serde(rename = "subnetIDs")]
    pub subnet_ids: Vec<String>,
    #[serde(rename = "machineCIDR")]
    pub machine_cidr: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrivateLinkInput {
    pub name: String,
    #[serde(rename = "infraID")]
    pub infra_id: String,
    pub region: String,
    /// The role its AWS calls go through, with STS's `externalID` and `sessionName` (read by
    /// `validate::role`); left out, the process's own credentials.
    #[serde(rename = "roleARN", default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
    #[serde(rename = "externalID", default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    /// STS's `SourceIdentity`: who asked, as CloudTrail shows it on every call of the session
    /// (the daemon's API sets it to the tenant and subject; a tenant may not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_identity: Option<String>,
    pub management: ManagementSide,
    pub guest: GuestSide,
    #[serde(default)]
    pub allowed_principals: Vec<String>,
    #[serde(rename = "exposeAPIServer", default)]
    pub expose_api_server: bool,
    #[serde(rename = "localZoneID", default, skip_serializing_if = "Option::is_none")]
    pub local_zone_id: Option<String>,
    /// `expirationDate` on what this workflow creates: submission + this (`6h`, `3d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkOutput {
    pub load_balancer_arn: String,
    pub target_group_arn: String,
    pub endpoint_service_id: String,
    pub endpoint_service_name: String,
    #[serde(rename = "vpcEndpointID")]
    pub vpc_endpoint_id: String,
    pub dns_name: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrivateLinkOutput {
    pub router: LinkOutput,
    #[serde(rename = "apiServer", default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<LinkOutput>,
    #[serde(rename = "securityGroupID")]
    pub security_group_id: String,
    #[serde(rename = "zoneID")]
    pub zone_id: String,
    pub records: Vec<String>,
}

fn ids(field: &str, list: &[String], prefix: &str) -> Result<(), InputError> {
    if list.is_empty() {
        return Err(InputError::field(field, "must name at least one"));
    }
    for (i, v) in list.iter().enumerate() {
        if !v.starts_with(prefix) || v.len() <= prefix.len() {
            return Err(InputError::field(
                &format!("{field}[{i}]"),
                format!("{v:?} is not an id like {prefix}0123abcd"),
            ));
        }
    }
    Ok(())
}

impl PrivateLinkInput {
    pub fn check(&self) -> Result<(), InputError> {
        validate::dns_label("name", &self.name, 40)?;
        validate::dns_label("infraID", &self.infra_id, 60)?;
        validate::region("region", &self.region)?;
        crate::expiry::refuse_on_a_part(self.expires_in.as_deref(), "a private link")?;
        ids("management.vpcID", std::slice::from_ref(&self.management.vpc_id), "vpc-")?;
        ids("management.subnetIDs", &self.management.subnet_ids, "subnet-")?;
        ids("guest.vpcID", std::slice::from_ref(&self.guest.vpc_id), "vpc-")?;
        ids("guest.subnetIDs", &self.guest.subnet_ids, "subnet-")?;
        validate::cidr("guest.machineCIDR", &self.guest.machine_cidr)?;
        for (i, p) in self.allowed_principals.iter().enumerate() {
            if !p.starts_with("arn:") && p != "*" {
                return Err(InputError::field(&format!("allowedPrincipals[{i}]"), format!("{p:?} is not an ARN")));
            }
        }
        Ok(())
    }
}

pub struct CreatePrivateLink {
    pub pool: AwsPool,
}

impl WorkflowDef for CreatePrivateLink {
    fn hold(&self, request: infraflow_engine::HoldRequest, input: &Value) -> Option<infraflow_engine::TakeHold> {
        crate::hold::lease::for_input(&self.pool, request, self.name(), input)
    }

    fn name(&self) -> &'static str {
        "create-privatelink"
    }

    fn summary(&self) -> &'static str {
        "NLBs, endpoint services, an interface endpoint and DNS records for a private cluster"
    }

    fn validate(&self, id: &str, input: &Value) -> Result<Validated, InputError> {
        let p: PrivateLinkInput = validate::decode(input)?;
        p.check()?;
        let cluster = validate::cluster_key(&p.infra_id, validate::role(input)?.as_ref());
        let input = serde_json::to_value(&p).map_err(|e| InputError(e.to_string()))?;
        Ok(Validated { input: validate::session_named(id, input), cluster })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        let pool = self.pool.assuming(crate::aws_steps::role_of(&input).as_ref());
        Box::pin(async move {
            let p: PrivateLinkInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let out = create_privatelink(&ctx, &pool, &p).await?;
            serde_json::to_value(out).map_err(|e| StepError::Decode { step: "output".into(), detail: e.to_string() })
        })
    }

    fn iam_actions(&self) -> std::collections::BTreeSet<&'static str> {
        use crate::policy::*;
        actions(&[
            (NETWORK, Use::Read),
            (SECURITY, Use::Manage),
            (ELB, Use::Manage),
            (PRIVATELINK, Use::Manage),
            (ENDPOINTS, Use::Manage),
            (DNS, Use::Manage),
            (RESOURCES, Use::Read),
        ])
    }

    fn undo_context(&self, input: &Value) -> serde_json::Map<String, Value> {
        crate::aws_steps::role_context(input)
    }

    fn environment(&self, input: &Value) -> Option<BoxFuture<Result<Value, ActivityError>>> {
        let region = serde_json::from_value::<PrivateLinkInput>(input.clone()).map(|p| p.region).unwrap_or_default();
        Some(probe_environment(&self.pool.assuming(crate::aws_steps::role_of(input).as_ref()), &region))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preflight {
    zone_id: String,
    /// At most one guest subnet per availability zone.
    endpoint_subnets: Vec<SubnetInfo>,
}

struct ServiceSide {
    lb: String,
    tg: String,
    service: EndpointService,
}

/// The services a link exposes, each one NLB, target group and endpoint service of this name
/// (after the infraID): the router's always, the API server's with `exposeAPIServer`.
pub(crate) const ROUTER: &str = "private-router";
pub(crate) const API_SERVER: &str = "kube-apiserver-private";

/// The name of the load balancer and target group of the link of `infra` to `service`.
pub(crate) fn service_name(infra: &str, service: &str) -> String {
    short_name(&format!("{infra}-{service}"))
}

/// One internal NLB with target group, listener and endpoint service.
async fn service_side(
    ctx: &WfCtx,
    pool: &AwsPool,
    p: &PrivateLinkInput,
    role: &str,
    port: i32,
) -> Result<ServiceSide, StepError> {
    let region = &p.region;
    let sctx = ctx.scoped(role);
    let name = service_name(&p.infra_id, role);
    let ident = |r: &str| {
        Identity::new(&p.infra_id, r, None, name.clone())
            .with_tags(&[], ctx.creator())
            .with_hypershift_tags(Some(&p.name))
            .with_expiration(crate::expiry::date(ctx, p.expires_in.as_deref()).as_deref())
    };
    let tg_id = ident(&format!("{role}-tg"));
    // One after the other although neither needs the other: the listener links them, and only
    // deleting the load balancer removes it, so compensation (newest first) must meet the load
    // balancer before the target group.
    let tg: String = sctx
        .step_with(
            "target-group",
            "elbv2.ensure-target-group",
            &(&tg_id, port),
            create_opts(region, Kind::TargetGroup, &tg_id),
            || async {
                let aws = pool.region(region).await;
                elb::ensure_target_group(&aws, &tg_id, &name, &p.management.vpc_id, port).await.map_err(from_aws)
            },
        )
        .await?;
    let lb_id = ident(&format!("{role}-nlb"));
    let lb: String = sctx
        .step_with(
            "load-balancer",
            "elbv2.ensure-load-balancer",
            &(&lb_id, &p.management.subnet_ids),
            create_opts(region, Kind::LoadBalancer, &lb_id),
            || async {
                let aws = pool.region(region).await;
                elb::ensure_load_balancer(&aws, &lb_id, &name, &p.management.subnet_ids).await.map_err(from_aws)
            },
        )
        .await?;
    sctx.step_with("load-balancer-active", "elbv2.wait-active", &lb, read_opts(), || async {
        let aws = pool.region(region).await;
        elb::wait_load_balancer_active(&aws, &lb).await.map_err(from_aws)
    })
    .await?;
    sctx.step_with("listener", "elbv2.ensure-listener", &(&lb, port, &tg), read_opts(), || async {
        let aws = pool.region(region).await;
        elb::ensure_listener(&aws, &lb, port, &tg).await.map_err(from_aws)
    })
    .await
    .map(|_: String| ())?;
    let svc_id = ident(&format!("{role}-endpoint-service"));
    let service: EndpointService = sctx
        .step_with(
            "endpoint-service",
            "ec2.ensure-endpoint-service",
            &(&svc_id, &lb, &p.allowed_principals),
            create_opts(region, Kind::EndpointService, &svc_id),
            || async {
                let aws = pool.region(region).await;
                privatelink::ensure_endpoint_service(&aws, &svc_id, &lb, &p.allowed_principals).await.map_err(from_aws)
            },
        )
        .await?;
    Ok(ServiceSide { lb, tg, service })
}

/// The create-privatelink body, callable from create-cluster.
pub async fn create_privatelink(
    ctx: &WfCtx,
    pool: &AwsPool,
    p: &PrivateLinkInput,
) -> Result<PrivateLinkOutput, StepError> {
    let region = &p.region;
    let local_name = format!("{}.hypershift.local", p.name);
    let pre: Preflight = ctx
        .step_with("preflight", "privatelink.preflight", &(&local_name, &p.guest.subnet_ids, &p.local_zone_id), read_opts(), || async {
            let aws = pool.region(region).await;
            let zone_id = match &p.local_zone_id {
                Some(z) => z.clone(),
                None => dns::find_private_zone(&aws, &local_name).await.map_err(from_aws)?.ok_or_else(|| {
                    ActivityError::terminal(format!("localZoneID: no single private zone named {local_name}; run provision-infra first or pass localZoneID"))
                })?,
            };
            let subnets = network::describe_subnets(&aws, &p.guest.subnet_ids).await.map_err(from_aws)?;
            let mut per_zone: Vec<SubnetInfo> = Vec::new();
            for id in &p.guest.subnet_ids {
                let s = subnets.iter().find(|s| &s.subnet_id == id).ok_or_else(|| ActivityError::terminal(format!("guest.subnetIDs: {id} does not exist")))?;
                if !per_zone.iter().any(|o| o.zone_id == s.zone_id) {
                    per_zone.push(s.clone());
                }
            }
            Ok(Preflight { zone_id, endpoint_subnets: per_zone })
        })
        .await?;

    let mut rules = vec![Rule::new("tcp", 443, 443, &p.guest.machine_cidr)];
    if p.expose_api_server {
        rules.push(Rule::new("tcp", 6443, 6443, &p.guest.machine_cidr));
    }
    let sg_ident = Identity::new(&p.infra_id, "vpce-sg", None, format!("{}-vpce-private-router", p.infra_id))
        .with_tags(&[], ctx.creator())
        .with_hypershift_tags(Some(&p.name))
        .with_expiration(crate::expiry::date(ctx, p.expires_in.as_deref()).as_deref());
    let sg_name = format!("{}-vpce-private-router", p.infra_id);
    let sg = ctx.step_with(
        "security-group",
        "ec2.ensure-security-group",
        &(&sg_ident, &rules),
        create_opts(region, Kind::SecurityGroup, &sg_ident),
        || async {
            let aws = pool.region(region).await;
            security::ensure_security_group(
                &aws,
                &sg_ident,
                &p.guest.vpc_id,
                &sg_name,
                "PrivateLink endpoint",
                &rules,
                security::Extra::Keep,
                Lookup::First,
            )
            .await
            .map_err(from_aws)
        },
    );

    let router = service_side(ctx, pool, p, ROUTER, 443);
    let api = async {
        if p.expose_api_server { service_side(ctx, pool, p, API_SERVER, 6443).await.map(Some) } else { Ok(None) }
    };
    // The endpoint's security group needs only the guest VPC: beside the services. (Created
    // first, it keeps its place among the steps: positions are counted at the call.)
    let (sg, (router, api)): (String, _) = join_pair(sg, join_pair(router, api)).await?;

    // Zone names are per-account aliases: compare zone IDs (seeds/000).
    let services: Vec<&EndpointService> =
        std::iter::once(&router.service).chain(api.as_ref().map(|a| &a.service)).collect();
    let offered: Vec<String> = services.iter().flat_map(|s| s.zones.clone()).collect();
    let offered_ids: Vec<(String, String)> = ctx
        .step_with("zone-check", "ec2.zone-ids", &offered, read_opts(), || async {
            let aws = pool.region(region).await;
            privatelink::zone_ids(&aws, &offered).await.map_err(from_aws)
        })
        .await?;
    for s in &services {
        for sub in &pre.endpoint_subnets {
            let ok = s.zones.is_empty() || offered_ids.iter().any(|(n, id)| s.zones.contains(n) && *id == sub.zone_id);
            if !ok {
                return Err(StepError::Failed {
                    step: ctx.key("zone-check"),
                    error: ActivityError::terminal(format!(
                        "guest subnet {} is in zone {} ({}), which endpoint service {} does not offer ({}); give the management side a subnet in that zone",
                        sub.subnet_id,
                        sub.zone,
                        sub.zone_id,
                        s.service_id,
                        s.zones.join(", ")
                    )),
                });
            }
        }
    }

    let subnets: Vec<String> = pre.endpoint_subnets.iter().map(|s| s.subnet_id.clone()).collect();
    let endpoint = |role: &'static str, service: EndpointService| {
        let id = Identity::new(&p.infra_id, &format!("{role}-vpce"), None, format!("{}-{role}", p.infra_id))
            .with_tags(&[], ctx.creator())
            .with_hypershift_tags(Some(&p.name))
            .with_expiration(crate::expiry::date(ctx, p.expires_in.as_deref()).as_deref());
        let (subnets, sg) = (subnets.clone(), sg.clone());
        async move {
            let ectx = ctx.scoped(role);
            let vpce: String = ectx
                .step_with(
                    "endpoint",
                    "ec2.ensure-interface-endpoint",
                    &(&id, &service.service_name, &subnets),
                    create_opts(region, Kind::VpcEndpoint, &id),
                    || async {
                        let aws = pool.region(region).await;
                        privatelink::ensure_interface_endpoint(
                            &aws,
                            &id,
                            &p.guest.vpc_id,
                            &service.service_name,
                            &subnets,
                            std::slice::from_ref(&sg),
                        )
                        .await
                        .map_err(from_aws)
                    },
                )
                .await?;
            let dns_name: String = ectx
                .step_with("endpoint-available", "ec2.wait-endpoint-available", &vpce, read_opts(), || async {
                    let aws = pool.region(region).await;
                    privatelink::wait_endpoint_available(&aws, &vpce).await.map_err(from_aws)
                })
                .await?;
            Ok::<_, StepError>((vpce, dns_name))
        }
    };
    let mut wanted = vec![endpoint(ROUTER, router.service.clone())];
    if let Some(a) = &api {
        wanted.push(endpoint(API_SERVER, a.service.clone()));
    }
    let eps = join_branches(wanted).await?;
    let (router_vpce, router_dns) = eps[0].clone();
    let api_ep = eps.get(1).cloned();

    let api_target = api_ep.as_ref().map(|(_, d)| d.clone()).unwrap_or_else(|| router_dns.clone());
    let records = [(format!("api.{local_name}"), api_target), (format!("*.apps.{local_name}"), router_dns.clone())];
    let names: Vec<String> = records.iter().map(|(n, _)| n.clone()).collect();
    // What the names hold now is journaled before anything is written, so the undo restores
    // exactly that: a record this workflow found in place (a live cluster's) is never removed.
    let before: Vec<(String, Option<String>)> = ctx
        .step_with("records-before", "route53.read-cnames", &(&pre.zone_id, &names), read_opts(), || async {
            let aws = pool.region(region).await;
            dns::cname_values(&aws, &pre.zone_id, &names).await.map_err(from_aws)
        })
        .await?;
    let written: Vec<WrittenCname> = records
        .iter()
        .zip(&before)
        .filter(|((_, value), (_, prev))| prev.as_deref() != Some(value.as_str()))
        .map(|((name, value), (_, prev))| WrittenCname {
            name: name.clone(),
            wrote: value.clone(),
            previous: prev.clone(),
        })
        .collect();
    if !written.is_empty() {
        let undo = RestoreRecords {
            region: region.clone(),
            zone_id: pre.zone_id.clone(),
            written: written.clone(),
            role: None,
        };
        let options = StepOptions {
            retry: Some(aws_retry()),
            undo: Some(Undo {
                activity: RESTORE_RECORDS.into(),
                input: serde_json::to_value(&undo).unwrap_or(Value::Null),
            }),
            settle: None,
        };
        let changes: Vec<(String, String)> = written.iter().map(|w| (w.name.clone(), w.wrote.clone())).collect();
        ctx.step_with("records", "route53.upsert-cnames", &(&pre.zone_id, &changes), options, || async {
            let aws = pool.region(region).await;
            dns::upsert_cnames(&aws, &pre.zone_id, &changes).await.map_err(from_aws)
        })
        .await?;
    }

    let link = |side: &ServiceSide, (vpce, dns_name): (String, String)| LinkOutput {
        load_balancer_arn: side.lb.clone(),
        target_group_arn: side.tg.clone(),
        endpoint_service_id: side.service.service_id.clone(),
        endpoint_service_name: side.service.service_name.clone(),
        vpc_endpoint_id: vpce,
        dns_name,
    };
    Ok(PrivateLinkOutput {
        router: link(&router, (router_vpce, router_dns)),
        api_server: api.as_ref().zip(api_ep).map(|(a, e)| link(a, e)),
        security_group_id: sg,
        zone_id: pre.zone_id,
        records: names,
    })
}
