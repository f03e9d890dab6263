//! Security groups and their ingress rules.

use aws_sdk_ec2::types::{IpPermission, IpRange, ResourceType};
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::consistency::once_consistent;
use crate::error::{AwsResult, classify};
use crate::network::{gone_ok, missing};
use crate::tags::{Identity, TagQuery, filter};

/// One ingress rule from a CIDR: protocol ("tcp", "udp", "icmp", "-1", "50") and port range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub protocol: String,
    pub from: i32,
    pub to: i32,
    pub cidr: String,
}

impl Rule {
    pub fn new(protocol: &str, from: i32, to: i32, cidr: &str) -> Rule {
        Rule { protocol: protocol.into(), from, to, cidr: cidr.into() }
    }

    fn permission(&self) -> IpPermission {
        IpPermission::builder()
            .ip_protocol(&self.protocol)
            .from_port(self.from)
            .to_port(self.to)
            .ip_ranges(IpRange::builder().cidr_ip(&self.cidr).build())
            .build()
    }
}

pub async fn find_security_groups(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    let out = aws
        .ec2
        .describe_security_groups()
        .filters(q.filter())
        .send()
        .await
        .map_err(|e| classify("DescribeSecurityGroups", e))?;
    Ok(out
        .security_groups()
        .iter()
        .filter(|g| q.matches(g.tags()))
        .filter_map(|g| g.group_id().map(str::to_string))
        .collect())
}

async fn group_named_in_vpc(aws: &Aws, name: &str, vpc_id: &str) -> AwsResult<Vec<String>> {
    let out = aws
        .ec2
        .describe_security_groups()
        .filters(filter("group-name", &[name]))
        .filters(filter("vpc-id", &[vpc_id]))
        .send()
        .await
        .map_err(|e| classify("DescribeSecurityGroups", e))?;
    Ok(out
        .security_groups()
        .iter()
        .filter(|g| g.group_name() == Some(name) && g.vpc_id() == Some(vpc_id))
        .filter_map(|g| g.group_id().map(str::to_string))
        .collect())
}

/// A security group in the VPC with at least the given ingress rules.
pub async fn ensure_security_group(
    aws: &Aws,
    id: &Identity,
    vpc_id: &str,
    group_name: &str,
    description: &str,
    rules: &[Rule],
) -> AwsResult<String> {
    let mut found = find_security_groups(aws, &id.query()).await?;
    if found.is_empty() {
        let r = once_consistent(|| async {
            aws.ec2
                .create_security_group()
                .group_name(group_name)
                .description(description)
                .vpc_id(vpc_id)
                .tag_specifications(id.tag_spec(ResourceType::SecurityGroup))
                .send()
                .await
                .map_err(|e| classify("CreateSecurityGroup", e))
        })
        .await;
        match r {
            Ok(out) => {
                found.push(out.group_id().ok_or_else(|| missing("CreateSecurityGroup", "group id"))?.to_string())
            }
            // Same name in our own VPC: made by us before its tags were visible.
            Err(e) if e.code_is("InvalidGroup.Duplicate") => {
                found = once_consistent(|| async {
                    let named = group_named_in_vpc(aws, group_name, vpc_id).await?;
                    if named.is_empty() {
                        return Err(crate::error::AwsError { code: Some("InvalidGroup.NotFound".into()), ..e.clone() });
                    }
                    Ok(named)
                })
                .await?;
            }
            Err(e) => return Err(e),
        }
    }
    let group = found.swap_remove(0);
    once_consistent(|| authorize(aws, &group, rules)).await?;
    Ok(group)
}

/// Adds ingress rules; rules already present are fine.
async fn authorize(aws: &Aws, group: &str, rules: &[Rule]) -> AwsResult<()> {
    if rules.is_empty() {
        return Ok(());
    }
    let all = aws
        .ec2
        .authorize_security_group_ingress()
        .group_id(group)
        .set_ip_permissions(Some(rules.iter().map(Rule::permission).collect()))
        .send()
        .await
        .map_err(|e| classify("AuthorizeSecurityGroupIngress", e));
    match all {
        Ok(_) => Ok(()),
        // Some were there (a re-run): add the rest one by one.
        Err(e) if e.code_is("InvalidPermission.Duplicate") => {
            for rule in rules {
                let r = aws
                    .ec2
                    .authorize_security_group_ingress()
                    .group_id(group)
                    .ip_permissions(rule.permission())
                    .send()
                    .await
                    .map_err(|e| classify("AuthorizeSecurityGroupIngress", e));
                match r {
                    Ok(_) => {}
                    Err(e) if e.code_is("InvalidPermission.Duplicate") => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

pub async fn delete_security_group(aws: &Aws, group: &str) -> AwsResult<bool> {
    gone_ok(
        aws.ec2
            .delete_security_group()
            .group_id(group)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("DeleteSecurityGroup", e)),
    )
}
