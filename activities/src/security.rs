//! Security groups and their ingress rules.

use aws_sdk_ec2::types::{IpPermission, IpRange, ResourceType};
use serde::{Deserialize, Serialize};

use crate::client::Aws;
use crate::consistency::once_consistent;
use crate::error::{AwsError, AwsResult, classify};
use crate::error::{gone_ok, missing};
use crate::inventory::Lookup;
use crate::tags::{IDENTITY_TAG, Identity, TagQuery, filter};

/// The IAM actions this file's lookups call (what `infraflow policy` grants; proven complete by
/// the AWS suites through the counting proxy).
pub const IAM_READ: &[&str] = &["ec2:DescribeSecurityGroups"];
/// The IAM actions of its creates and configuration (tag-on-create needs `CreateTags`/`AddTags`).
/// (A provision revokes the rules added to the worker group it made: `Extra`.)
pub const IAM_WRITE: &[&str] = &[
    "ec2:CreateSecurityGroup",
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:RevokeSecurityGroupIngress",
    "ec2:CreateTags",
];
/// The IAM actions of its deletes.
pub const IAM_DELETE: &[&str] =
    &["ec2:DeleteSecurityGroup", "ec2:RevokeSecurityGroupIngress", "ec2:RevokeSecurityGroupEgress"];

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

    /// Whether the group's rule `r` is this one (ICMP's ports are AWS's to spell).
    pub fn matches(&self, r: &IngressRule) -> bool {
        r.protocol == self.protocol
            && (self.protocol == "icmp" || (r.from == Some(self.from) && r.to == Some(self.to)))
            && r.source == self.cidr
    }

    pub fn describe(&self) -> String {
        format!("{} {}-{} from {}", self.protocol, self.from, self.to, self.cidr)
    }
}

/// Descriptions the cluster's controllers give the rules they add to a node group: the cloud
/// provider's for a network load balancer (`kubernetes.io/rule/nlb/{health,client,mtu}=<lb>`),
/// the AWS Load Balancer Controller's (`elbv2.k8s.aws/targetGroupBinding=shared`).
pub const CONTROLLER_RULE_PREFIXES: &[&str] = &["kubernetes.io/rule/nlb/", "elbv2.k8s.aws/"];

/// One ingress rule of a group as AWS holds it, flattened to one source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressRule {
    pub protocol: String,
    pub from: Option<i32>,
    pub to: Option<i32>,
    /// A CIDR, an IPv6 CIDR, a prefix list or a security group id.
    pub source: String,
    pub description: String,
}

impl IngressRule {
    pub fn of(permissions: &[IpPermission]) -> Vec<IngressRule> {
        let mut out = Vec::new();
        for p in permissions {
            let rule = |source: &str, description: Option<&str>| IngressRule {
                protocol: p.ip_protocol().unwrap_or_default().to_string(),
                from: p.from_port(),
                to: p.to_port(),
                source: source.to_string(),
                description: description.unwrap_or_default().to_string(),
            };
            out.extend(p.ip_ranges().iter().map(|r| rule(r.cidr_ip().unwrap_or_default(), r.description())));
            out.extend(p.ipv6_ranges().iter().map(|r| rule(r.cidr_ipv6().unwrap_or_default(), r.description())));
            out.extend(
                p.prefix_list_ids().iter().map(|r| rule(r.prefix_list_id().unwrap_or_default(), r.description())),
            );
            out.extend(p.user_id_group_pairs().iter().map(|r| rule(r.group_id().unwrap_or_default(), r.description())));
        }
        out
    }

    /// Whether one of the cluster's controllers wrote it, or it names a group (a classic load
    /// balancer's, the group itself, HyperShift's own rules): kept, never drift.
    pub fn is_controllers(&self) -> bool {
        self.source.starts_with("sg-") || CONTROLLER_RULE_PREFIXES.iter().any(|p| self.description.starts_with(p))
    }

    pub fn describe(&self) -> String {
        let ports = match (self.from, self.to) {
            (Some(f), Some(t)) if self.protocol != "icmp" && self.protocol != "-1" => format!(" {f}-{t}"),
            _ => String::new(),
        };
        format!("{}{ports} from {}", self.protocol, self.source)
    }

    fn permission(&self) -> IpPermission {
        let mut p = IpPermission::builder().ip_protocol(&self.protocol).set_from_port(self.from).set_to_port(self.to);
        // With its description: what a restore writes back is the rule as it was.
        let said = Some(self.description.clone()).filter(|d| !d.is_empty());
        p = if self.source.contains(':') {
            let range = aws_sdk_ec2::types::Ipv6Range::builder().cidr_ipv6(&self.source).set_description(said);
            p.ipv6_ranges(range.build())
        } else if self.source.starts_with("pl-") {
            let list = aws_sdk_ec2::types::PrefixListId::builder().prefix_list_id(&self.source).set_description(said);
            p.prefix_list_ids(list.build())
        } else {
            p.ip_ranges(IpRange::builder().cidr_ip(&self.source).set_description(said).build())
        };
        p.build()
    }
}

/// The group's rules that are neither `wanted` nor a controller's: what a check reports as
/// drift, and what a provision of a group infraflow made revokes.
pub fn unwanted<'a>(ingress: &'a [IngressRule], wanted: &[Rule]) -> Vec<&'a IngressRule> {
    ingress.iter().filter(|r| !r.is_controllers() && !wanted.iter().any(|w| w.matches(r))).collect()
}

pub async fn find_security_groups(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<String>> {
    Ok(find_security_groups_with_vpcs(aws, q).await?.into_iter().map(|(id, _)| id).collect())
}

/// The groups carrying the tag `q`, each with its VPC.
pub async fn find_security_groups_with_vpcs(aws: &Aws, q: &TagQuery) -> AwsResult<Vec<(String, Option<String>)>> {
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
        .filter_map(|g| Some((g.group_id()?.to_string(), g.vpc_id().map(str::to_string))))
        .collect())
}

/// The VPC of each of `groups` that exists (by filter: a group gone is absent, not an error).
pub async fn vpcs_of_groups(aws: &Aws, groups: &[String]) -> AwsResult<std::collections::BTreeMap<String, String>> {
    let mut vpcs = std::collections::BTreeMap::new();
    // DescribeSecurityGroups takes up to 200 values in a filter.
    for chunk in groups.chunks(200) {
        let ids: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let out = aws
            .ec2
            .describe_security_groups()
            .filters(filter("group-id", &ids))
            .send()
            .await
            .map_err(|e| classify("DescribeSecurityGroups", e))?;
        for g in out.security_groups() {
            if let (Some(id), Some(vpc)) = (g.group_id(), g.vpc_id()) {
                vpcs.insert(id.to_string(), vpc.to_string());
            }
        }
    }
    Ok(vpcs)
}

/// The groups named `name` in the VPC, with their tags.
async fn group_named_in_vpc(aws: &Aws, name: &str, vpc_id: &str) -> AwsResult<Vec<(String, Vec<(String, String)>)>> {
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
        .filter_map(|g| Some((g.group_id()?.to_string(), crate::adopt::pairs(g.tags()))))
        .collect())
}

/// The group that holds this group's name in the VPC after `InvalidGroup.Duplicate`: this
/// identity's (made by an attempt whose reply was lost, or by another workflow: marked as
/// adopted then), or one HyperShift's CLI made for the cluster (ownership tag, no identity:
/// adopted). Anything else — a person's group, another cluster's — is left as it is and named:
/// its rules are not ours to widen.
async fn take_duplicate(
    aws: &Aws,
    id: &Identity,
    vpc_id: &str,
    group: &str,
    tags: &[(String, String)],
) -> AwsResult<()> {
    if id.query().matches_pairs(tags) {
        return crate::adopt::mark_adopted_given(aws, group, id, tags).await;
    }
    let owned = crate::tags::owned(&id.infra_id);
    if owned.matches_pairs(tags) && !tags.iter().any(|(k, _)| k == IDENTITY_TAG) {
        return crate::adopt::tag_as(aws, group, id).await;
    }
    Err(AwsError {
        operator: true,
        ..AwsError::terminal(
            "CreateSecurityGroup",
            format!(
                "security group {group} in VPC {vpc_id} holds the name {:?} and is not cluster {}'s (no {}=owned tag, or another role's identity): it is left untouched; delete or rename it, then `infraflow retry`",
                id.name,
                id.infra_id,
                crate::tags::ownership_key(&id.infra_id)
            ),
        )
    })
}

/// Whether a found group keeps rules it was not given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extra {
    /// Rules added by anyone stay (a group others share rules into).
    Keep,
    /// In a group infraflow made (its creator tag), a rule neither given nor a controller's
    /// (`unwanted`) is revoked: the provision converges the group to what it makes.
    RevokeInOwnGroup,
}

/// A security group in the VPC with at least the given ingress rules (and, with
/// `Extra::RevokeInOwnGroup`, no other but its controllers').
#[allow(clippy::too_many_arguments)]
pub async fn ensure_security_group(
    aws: &Aws,
    id: &Identity,
    vpc_id: &str,
    group_name: &str,
    description: &str,
    rules: &[Rule],
    extra: Extra,
    lookup: Lookup,
) -> AwsResult<String> {
    let mut found = if lookup.first() { find_security_groups(aws, &id.query()).await? } else { Vec::new() };
    if let Some(group) = found.first() {
        crate::adopt::mark_if_adopted(aws, group, id).await?;
    }
    // A group this call created has no ingress rules yet: nothing to read before authorizing.
    let mut created = false;
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
                created = true;
                found.push(out.group_id().ok_or_else(|| missing("CreateSecurityGroup", "group id"))?.to_string())
            }
            // Same name in our own VPC: made by us before its tags were visible.
            Err(e) if e.code_is("InvalidGroup.Duplicate") => {
                let named = once_consistent(|| async {
                    let named = group_named_in_vpc(aws, group_name, vpc_id).await?;
                    if named.is_empty() {
                        return Err(AwsError { code: Some("InvalidGroup.NotFound".into()), ..e.clone() });
                    }
                    Ok(named)
                })
                .await?;
                let (group, tags) = &named[0];
                take_duplicate(aws, id, vpc_id, group, tags).await?;
                found.push(group.clone());
            }
            Err(e) => return Err(e),
        }
    }
    let group = found.swap_remove(0);
    once_consistent(|| authorize(aws, &group, rules, created, extra)).await?;
    Ok(group)
}

/// Adds the ingress rules the group lacks, in one call: a re-run (after a lost reply, a crash)
/// reads what is there instead of re-sending every rule; a group just created has none. With
/// `Extra::RevokeInOwnGroup`, the unwanted rules of a group infraflow made are revoked first.
async fn authorize(aws: &Aws, group: &str, rules: &[Rule], created: bool, extra: Extra) -> AwsResult<()> {
    let out = if created {
        None
    } else {
        Some(
            aws.ec2
                .describe_security_groups()
                .group_ids(group)
                .send()
                .await
                .map_err(|e| classify("DescribeSecurityGroups", e))?,
        )
    };
    let present = |r: &Rule| {
        out.iter().flat_map(|o| o.security_groups()).flat_map(|g| g.ip_permissions()).any(|p| {
            p.ip_protocol() == Some(r.protocol.as_str())
                && (r.protocol == "icmp" || (p.from_port() == Some(r.from) && p.to_port() == Some(r.to)))
                && p.ip_ranges().iter().any(|ip| ip.cidr_ip() == Some(r.cidr.as_str()))
        })
    };
    if extra == Extra::RevokeInOwnGroup {
        for g in out.iter().flat_map(|o| o.security_groups()) {
            let made_here = g.tags().iter().any(|t| t.key() == Some(crate::tags::CREATED_BY_TAG));
            let ingress = IngressRule::of(g.ip_permissions());
            let revoke: Vec<IpPermission> = unwanted(&ingress, rules).iter().map(|r| r.permission()).collect();
            if made_here && !revoke.is_empty() {
                let r = aws
                    .ec2
                    .revoke_security_group_ingress()
                    .group_id(group)
                    .set_ip_permissions(Some(revoke))
                    .send()
                    .await
                    .map_err(|e| classify("RevokeSecurityGroupIngress", e));
                match r {
                    // Revoked by a lost reply's call: the rule is gone, as wanted.
                    Err(e) if e.code_is("InvalidPermission.NotFound") => {}
                    r => {
                        r?;
                    }
                }
            }
        }
    }
    let missing: Vec<&Rule> = rules.iter().filter(|r| !present(r)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let r = aws
        .ec2
        .authorize_security_group_ingress()
        .group_id(group)
        .set_ip_permissions(Some(missing.iter().map(|r| r.permission()).collect()))
        .send()
        .await
        .map_err(|e| classify("AuthorizeSecurityGroupIngress", e));
    match r {
        // Added by a lost reply's call meanwhile: the next attempt reads them as present.
        Err(e) if e.code_is("InvalidPermission.Duplicate") => Err(AwsError { retryable: true, ..e }),
        r => r.map(|_| ()),
    }
}

/// The ingress rules of group `group` a provision would revoke (`unwanted`), when infraflow made
/// the group (its creator tag): read, so that the revoke is journaled before it acts, and undone
/// by putting them back (SAFETY-A7937A6 G7: a person's rules went, named nowhere).
pub async fn unwanted_ingress(aws: &Aws, group: &str, wanted: &[Rule]) -> AwsResult<Vec<IngressRule>> {
    let out = aws.ec2.describe_security_groups().group_ids(group).send().await;
    let out = match out.map_err(|e| classify("DescribeSecurityGroups", e)) {
        Ok(o) => o,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for g in out.security_groups().iter().filter(|g| g.group_id() == Some(group)) {
        let made_here = g.tags().iter().any(|t| t.key() == Some(crate::tags::CREATED_BY_TAG));
        let ingress = IngressRule::of(g.ip_permissions());
        if made_here {
            found.extend(unwanted(&ingress, wanted).into_iter().cloned());
        }
    }
    Ok(found)
}

/// Revokes `rules` (as `unwanted_ingress` read them) from group `group`; each one at a time, so
/// that one gone already (a lost reply's call) leaves the others to go.
pub async fn revoke_ingress(aws: &Aws, group: &str, rules: &[IngressRule]) -> AwsResult<()> {
    for r in rules {
        let call = aws.ec2.revoke_security_group_ingress().group_id(group).ip_permissions(r.permission());
        match call.send().await.map_err(|e| classify("RevokeSecurityGroupIngress", e)) {
            Err(e) if e.code_is("InvalidPermission.NotFound") => {}
            r => {
                gone_ok(r.map(|_| ()))?;
            }
        }
    }
    Ok(())
}

/// Authorizes `rules` on group `group` again, as they were (the undo of `revoke_ingress`); one
/// there already, or a group gone, is no error.
pub async fn restore_ingress(aws: &Aws, group: &str, rules: &[IngressRule]) -> AwsResult<()> {
    for r in rules {
        let call = aws.ec2.authorize_security_group_ingress().group_id(group).ip_permissions(r.permission());
        match call.send().await.map_err(|e| classify("AuthorizeSecurityGroupIngress", e)) {
            Err(e) if e.code_is("InvalidPermission.Duplicate") => {}
            r => {
                gone_ok(r.map(|_| ()))?;
            }
        }
    }
    Ok(())
}

/// Revokes the group's own rules, then deletes it: rules naming other groups (a `k8s-elb-*`
/// group of the cluster's cloud provider, say) keep each other alive until revoked.
pub async fn delete_security_group(aws: &Aws, group: &str) -> AwsResult<bool> {
    let out = aws.ec2.describe_security_groups().group_ids(group).send().await;
    let described = match out.map_err(|e| classify("DescribeSecurityGroups", e)) {
        Ok(o) => o,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e),
    };
    for g in described.security_groups() {
        if !g.ip_permissions().is_empty() {
            let r = aws
                .ec2
                .revoke_security_group_ingress()
                .group_id(group)
                .set_ip_permissions(Some(g.ip_permissions().to_vec()))
                .send()
                .await;
            gone_ok(r.map(|_| ()).map_err(|e| classify("RevokeSecurityGroupIngress", e)))?;
        }
        if !g.ip_permissions_egress().is_empty() {
            let r = aws
                .ec2
                .revoke_security_group_egress()
                .group_id(group)
                .set_ip_permissions(Some(g.ip_permissions_egress().to_vec()))
                .send()
                .await;
            gone_ok(r.map(|_| ()).map_err(|e| classify("RevokeSecurityGroupEgress", e)))?;
        }
    }
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

#[cfg(test)]
mod unwanted_tests {
    use super::*;

    fn rule(source: &str, description: &str) -> IngressRule {
        IngressRule {
            protocol: "tcp".into(),
            from: Some(30080),
            to: Some(30080),
            source: source.into(),
            description: description.into(),
        }
    }

    #[test]
    fn only_a_rule_nobody_marked_and_nobody_wants_is_unwanted() {
        let wanted = [Rule::new("tcp", 22, 22, "10.0.0.0/16")];
        let ssh = IngressRule { from: Some(22), to: Some(22), ..rule("10.0.0.0/16", "") };
        let nlb = rule("0.0.0.0/0", "kubernetes.io/rule/nlb/client=a1b2");
        let lbc = rule("10.0.0.0/16", "elbv2.k8s.aws/targetGroupBinding=shared");
        let elb_group = rule("sg-0123456789abcdef0", "");
        let added = rule("192.168.0.0/16", "opened by hand");
        let ingress = vec![ssh, nlb, lbc, elb_group, added.clone()];
        assert_eq!(unwanted(&ingress, &wanted), vec![&added]);
    }
}
