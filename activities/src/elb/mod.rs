//! Internal network load balancers, target groups and listeners (ELBv2). Names are unique per
//! account and region, so lookups go by name and are confirmed by the identity tag: a same-named
//! resource that is not ours is an error, never adopted.
//!
//! Why by name: ELBv2 names are unique per account, so load balancers and target groups are looked
//! up by name (at most 32 characters, `NAME_LIMIT`; hashed when longer, `short_name`) and must
//! carry our identity tag, else the step fails rather than adopt someone else's.

use aws_sdk_elasticloadbalancingv2::types::{
    Action, ActionTypeEnum, LoadBalancerSchemeEnum, LoadBalancerStateEnum, LoadBalancerTypeEnum, ProtocolEnum, Tag,
    TargetTypeEnum,
};

use crate::client::Aws;
use crate::error::missing;
use crate::error::{AwsError, AwsResult, classify};
use crate::tags::{Identity, TagQuery};
use crate::wait::{WAIT_BUDGET, poll_until};

mod room;

pub use room::{ElbRoom, elb_room};

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &[
    "elasticloadbalancing:DescribeLoadBalancers",
    "elasticloadbalancing:DescribeTags",
    "elasticloadbalancing:DescribeTargetGroups",
    "elasticloadbalancing:DescribeListeners",
    // The account's load balancer and target group limits (`room`), for the quota check before a
    // create-privatelink is journaled.
    "elasticloadbalancing:DescribeAccountLimits",
];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
pub const IAM_WRITE: &[&str] = &[
    "elasticloadbalancing:CreateLoadBalancer",
    "elasticloadbalancing:CreateTargetGroup",
    "elasticloadbalancing:CreateListener",
    "elasticloadbalancing:AddTags",
];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] = &["elasticloadbalancing:DeleteLoadBalancer", "elasticloadbalancing:DeleteTargetGroup"];

/// AWS's limit on load balancer and target group names.
pub const NAME_LIMIT: usize = 32;

/// `base` if it fits in 32 characters, else a prefix and a stable hash suffix.
pub fn short_name(base: &str) -> String {
    if base.len() <= NAME_LIMIT {
        return base.to_string();
    }
    let mut h: u32 = 0x811c_9dc5;
    for b in base.as_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let prefix = base[..NAME_LIMIT - 9].trim_end_matches('-');
    format!("{prefix}-{h:08x}")
}

fn elb_tags(id: &Identity) -> Vec<Tag> {
    id.tags().into_iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect()
}

/// Tags of ELBv2 resources, by ARN; an ARN deleted meanwhile is left out.
pub(crate) async fn tags_of(aws: &Aws, arns: &[String]) -> AwsResult<Vec<(String, Vec<(String, String)>)>> {
    let mut out = Vec::new();
    for chunk in arns.chunks(20) {
        match tags_of_chunk(aws, chunk).await {
            Ok(t) => out.extend(t),
            // One of the chunk was deleted since it was listed (twelve teardowns in one account
            // delete load balancers all the time): AWS then answers for none of the chunk, so
            // each is asked alone. Without this a teardown's whole discovery starts over.
            Err(e) if e.is_not_found() => {
                for arn in chunk {
                    match tags_of_chunk(aws, std::slice::from_ref(arn)).await {
                        Ok(t) => out.extend(t),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

async fn tags_of_chunk(aws: &Aws, arns: &[String]) -> AwsResult<Vec<(String, Vec<(String, String)>)>> {
    let r = aws
        .elb
        .describe_tags()
        .set_resource_arns(Some(arns.to_vec()))
        .send()
        .await
        .map_err(|e| classify("DescribeTags", e))?;
    Ok(r.tag_descriptions()
        .iter()
        .map(|d| {
            let tags = d.tags().iter().filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string()))).collect();
            (d.resource_arn().unwrap_or_default().to_string(), tags)
        })
        .collect())
}

async fn filter_by_tag(aws: &Aws, arns: Vec<String>, q: &TagQuery) -> AwsResult<Vec<String>> {
    let tagged = tags_of(aws, &arns).await?;
    Ok(arns.into_iter().filter(|a| tagged.iter().any(|(arn, tags)| arn == a && q.matches_pairs(tags))).collect())
}

/// The existing `arn` named `name`, if it carries `id`'s identity (marked as adopted when another
/// workflow made it); else an error naming it.
async fn claim_named(aws: &Aws, arn: String, id: &Identity, what: &str, name: &str) -> AwsResult<String> {
    let tagged = tags_of(aws, std::slice::from_ref(&arn)).await?;
    let Some((_, tags)) = tagged.iter().find(|(a, tags)| *a == arn && id.query().matches_pairs(tags)) else {
        return Err(not_ours(what, name));
    };
    if let Some((k, v)) = id.adoption_mark(tags) {
        let tag = aws_sdk_elasticloadbalancingv2::types::Tag::builder().key(k).value(v).build();
        aws.elb.add_tags().resource_arns(&arn).tags(tag).send().await.map_err(|e| classify("AddTags", e))?;
    }
    Ok(arn)
}

fn not_ours(what: &str, name: &str) -> AwsError {
    AwsError::terminal(
        "DescribeTags",
        format!("a {what} named {name} exists but is not infraflow's for this cluster; remove or rename it"),
    )
}

/// The ARN of the load balancer `name`, if one exists.
async fn load_balancer_named(aws: &Aws, name: &str) -> AwsResult<Option<(String, Option<LoadBalancerStateEnum>)>> {
    let r = aws.elb.describe_load_balancers().names(name).send().await;
    match r.map_err(|e| classify("DescribeLoadBalancers", e)) {
        Ok(o) => Ok(o
            .load_balancers()
            .iter()
            .find(|l| l.load_balancer_name() == Some(name))
            .and_then(|l| Some((l.load_balancer_arn()?.to_string(), l.state().and_then(|s| s.code()).cloned())))),
        Err(e) if e.code_is("LoadBalancerNotFound") || e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// An internal network load balancer in `subnets`.
pub async fn ensure_load_balancer(aws: &Aws, id: &Identity, name: &str, subnets: &[String]) -> AwsResult<String> {
    if let Some((arn, _)) = load_balancer_named(aws, name).await? {
        return claim_named(aws, arn, id, "load balancer", name).await;
    }
    let out = aws
        .elb
        .create_load_balancer()
        .name(name)
        .r#type(LoadBalancerTypeEnum::Network)
        .scheme(LoadBalancerSchemeEnum::Internal)
        .set_subnets(Some(subnets.to_vec()))
        .set_tags(Some(elb_tags(id)))
        .send()
        .await
        .map_err(|e| classify("CreateLoadBalancer", e))?;
    Ok(out
        .load_balancers()
        .first()
        .and_then(|l| l.load_balancer_arn())
        .ok_or_else(|| missing("CreateLoadBalancer", "load balancer ARN"))?
        .to_string())
}

pub async fn wait_load_balancer_active(aws: &Aws, arn: &str) -> AwsResult<()> {
    poll_until("DescribeLoadBalancers", &format!("load balancer {arn} not active"), WAIT_BUDGET, || async {
        let o = aws
            .elb
            .describe_load_balancers()
            .load_balancer_arns(arn)
            .send()
            .await
            .map_err(|e| classify("DescribeLoadBalancers", e))?;
        let state = o.load_balancers().first().and_then(|l| l.state()).and_then(|s| s.code()).cloned();
        match state {
            Some(LoadBalancerStateEnum::Active) => Ok(Some(())),
            Some(LoadBalancerStateEnum::Failed) => {
                Err(AwsError::terminal("DescribeLoadBalancers", format!("load balancer {arn} failed to provision")))
            }
            _ => Ok(None),
        }
    })
    .await
}

/// A TCP target group `name` on `port` in the VPC (IP targets, as HyperShift's services use).
pub async fn ensure_target_group(aws: &Aws, id: &Identity, name: &str, vpc_id: &str, port: i32) -> AwsResult<String> {
    let r = aws.elb.describe_target_groups().names(name).send().await;
    let existing = match r.map_err(|e| classify("DescribeTargetGroups", e)) {
        Ok(o) => o
            .target_groups()
            .iter()
            .find(|t| t.target_group_name() == Some(name))
            .and_then(|t| t.target_group_arn())
            .map(str::to_string),
        Err(e) if e.code_is("TargetGroupNotFound") || e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    if let Some(arn) = existing {
        return claim_named(aws, arn, id, "target group", name).await;
    }
    let out = aws
        .elb
        .create_target_group()
        .name(name)
        .protocol(ProtocolEnum::Tcp)
        .port(port)
        .vpc_id(vpc_id)
        .target_type(TargetTypeEnum::Ip)
        .set_tags(Some(elb_tags(id)))
        .send()
        .await
        .map_err(|e| classify("CreateTargetGroup", e))?;
    Ok(out
        .target_groups()
        .first()
        .and_then(|t| t.target_group_arn())
        .ok_or_else(|| missing("CreateTargetGroup", "target group ARN"))?
        .to_string())
}

/// A TCP listener on `port` forwarding to the target group.
pub async fn ensure_listener(aws: &Aws, lb_arn: &str, port: i32, tg_arn: &str) -> AwsResult<String> {
    let o = aws
        .elb
        .describe_listeners()
        .load_balancer_arn(lb_arn)
        .send()
        .await
        .map_err(|e| classify("DescribeListeners", e))?;
    if let Some(l) = o.listeners().iter().find(|l| l.port() == Some(port)) {
        return Ok(l.listener_arn().unwrap_or_default().to_string());
    }
    let action = Action::builder().r#type(ActionTypeEnum::Forward).target_group_arn(tg_arn).build();
    let out = aws
        .elb
        .create_listener()
        .load_balancer_arn(lb_arn)
        .protocol(ProtocolEnum::Tcp)
        .port(port)
        .default_actions(action)
        .send()
        .await
        .map_err(|e| classify("CreateListener", e))?;
    Ok(out
        .listeners()
        .first()
        .and_then(|l| l.listener_arn())
        .ok_or_else(|| missing("CreateListener", "listener ARN"))?
        .to_string())
}

/// Load balancers carrying the tag `q`.
pub async fn find_load_balancers(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    Ok(find_with_dns_names(aws, q).await?.into_iter().map(|(arn, _)| arn).collect())
}

/// Load balancers carrying the tag `q`: (ARN, DNS name).
pub async fn find_with_dns_names(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, String)>> {
    Ok(find_described(aws, q).await?.into_iter().map(|(arn, dns, _)| (arn, dns)).collect())
}

/// Load balancers carrying the tag `q`, each with its VPC.
pub async fn find_load_balancers_with_vpcs(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, Option<String>)>> {
    Ok(find_described(aws, q).await?.into_iter().map(|(arn, _, vpc)| (arn, vpc)).collect())
}

/// Load balancers carrying the tag `q`: (ARN, DNS name, VPC).
async fn find_described(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, String, Option<String>)>> {
    let all = describe_load_balancers(aws).await?;
    let ours = filter_by_tag(aws, all.iter().map(|(a, _, _)| a.clone()).collect(), q).await?;
    Ok(all.into_iter().filter(|(a, _, _)| ours.contains(a)).collect())
}

/// Every load balancer of the region: (ARN, DNS name).
pub(crate) async fn list_load_balancers(aws: &Aws) -> AwsResult<Vec<(String, String)>> {
    Ok(describe_load_balancers(aws).await?.into_iter().map(|(arn, dns, _)| (arn, dns)).collect())
}

/// Every load balancer of the region: (ARN, DNS name, VPC).
async fn describe_load_balancers(aws: &Aws) -> AwsResult<Vec<(String, String, Option<String>)>> {
    let mut all: Vec<(String, String, Option<String>)> = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let o = aws
            .elb
            .describe_load_balancers()
            .set_marker(marker.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeLoadBalancers", e))?;
        all.extend(o.load_balancers().iter().filter_map(|l| {
            let vpc = l.vpc_id().map(str::to_string);
            Some((l.load_balancer_arn()?.to_string(), l.dns_name().unwrap_or_default().to_string(), vpc))
        }));
        marker = o.next_marker().map(str::to_string);
        if marker.is_none() {
            return Ok(all);
        }
    }
}

/// Target groups carrying the tag `q`.
pub async fn find_target_groups(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    Ok(find_target_groups_with_vpcs(aws, q).await?.into_iter().map(|(arn, _)| arn).collect())
}

/// Target groups carrying the tag `q`, each with its VPC.
pub async fn find_target_groups_with_vpcs(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, Option<String>)>> {
    let mut arns: Vec<(String, Option<String>)> = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let o = aws
            .elb
            .describe_target_groups()
            .set_marker(marker.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeTargetGroups", e))?;
        arns.extend(
            o.target_groups()
                .iter()
                .filter_map(|t| Some((t.target_group_arn()?.to_string(), t.vpc_id().map(str::to_string)))),
        );
        marker = o.next_marker().map(str::to_string);
        if marker.is_none() {
            break;
        }
    }
    let ours = filter_by_tag(aws, arns.iter().map(|(a, _)| a.clone()).collect(), q).await?;
    Ok(arns.into_iter().filter(|(a, _)| ours.contains(a)).collect())
}

/// Deletes a load balancer (its listeners go with it).
pub async fn delete_load_balancer(aws: &Aws, arn: &str) -> AwsResult<bool> {
    let r = aws.elb.delete_load_balancer().load_balancer_arn(arn).send().await;
    match r.map(|_| ()).map_err(|e| classify("DeleteLoadBalancer", e)) {
        Err(e) if e.code_is("LoadBalancerNotFound") => Ok(false),
        r => crate::error::gone_ok(r),
    }
}

pub async fn delete_target_group(aws: &Aws, arn: &str) -> AwsResult<bool> {
    let r = aws.elb.delete_target_group().target_group_arn(arn).send().await;
    match r.map(|_| ()).map_err(|e| classify("DeleteTargetGroup", e)) {
        Err(e) if e.code_is("TargetGroupNotFound") => Ok(false),
        r => crate::error::gone_ok(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_aws_limit_and_stay_stable() {
        assert_eq!(short_name("short-name"), "short-name");
        let long = short_name("a-very-long-infra-id-x1y2z-kube-apiserver-private");
        assert!(long.len() <= NAME_LIMIT, "{long}");
        assert_eq!(long, short_name("a-very-long-infra-id-x1y2z-kube-apiserver-private"));
        assert_ne!(long, short_name("a-very-long-infra-id-x1y2z-kube-apiserver-privatf"));
    }
}
