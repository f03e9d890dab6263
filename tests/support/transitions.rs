//! Strict AWS, asynchronous states: what moto makes instant and AWS does not. For one span, a new
//! NAT gateway, load balancer, interface endpoint or instance is `pending`/`provisioning`, and a deleted NAT
//! gateway is `deleting` and keeps its address and subnet; for four spans, the network interfaces
//! of a deleted load balancer, endpoint or instance keep its subnets and security groups busy
//! (DependencyViolation): AWS releases them minutes after a NAT gateway is gone.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::xml::{between, rewrite_elements};

/// An answer the strict layer gives instead of forwarding: (HTTP status, error code, message).
pub type Refusal = (&'static str, &'static str, String);

#[derive(Default)]
pub struct Transitions {
    /// Resource (id or ARN) -> until when it is still coming up.
    starting: HashMap<String, Instant>,
    /// NAT gateway -> until when it is `deleting` (moto says `deleted` at once).
    deleting: HashMap<String, Instant>,
    /// Resource -> the subnets, security groups and addresses its network interfaces hold.
    holds: HashMap<String, Vec<String>>,
    /// Subnet, group or address -> until when a deleted resource's interfaces still hold it.
    busy: HashMap<String, Instant>,
}

/// Values of the list parameter `prefix` (`Subnets.member.1`, `SubnetId.1`, ...).
fn list(p: &BTreeMap<String, String>, prefixes: &[&str]) -> Vec<String> {
    p.iter()
        .filter(|(k, _)| prefixes.iter().any(|pre| k.strip_prefix(pre).is_some_and(|n| n.parse::<u32>().is_ok())))
        .map(|(_, v)| v.clone())
        .collect()
}

fn live(map: &HashMap<String, Instant>, id: &str) -> bool {
    map.get(id).is_some_and(|until| Instant::now() < *until)
}

impl Transitions {
    /// Before forwarding: a delete of something a gone resource's interfaces still hold.
    pub fn before(&self, action: &str, p: &BTreeMap<String, String>) -> Option<Refusal> {
        let (param, code, message): (&str, &'static str, fn(&str) -> String) = match action {
            "DeleteSubnet" => ("SubnetId", "DependencyViolation", |id| {
                format!("The subnet '{id}' has dependencies and cannot be deleted.")
            }),
            "DeleteSecurityGroup" => {
                ("GroupId", "DependencyViolation", |id| format!("resource {id} has a dependent object"))
            }
            "ReleaseAddress" => ("AllocationId", "InvalidIPAddress.InUse", |id| format!("Address {id} is in use.")),
            _ => return None,
        };
        let id = p.get(param)?;
        live(&self.busy, id).then(|| ("400 Bad Request", code, message(id)))
    }

    /// After a successful answer: remember what was created or deleted, and report states as AWS
    /// would. Returns what it did, for the proxy's effect counts.
    pub fn after(
        &mut self,
        span: Duration,
        action: &str,
        p: &BTreeMap<String, String>,
        payload: &mut String,
    ) -> Option<&'static str> {
        let until = Instant::now() + span;
        let created = |tag: &str| between(payload, &format!("<{tag}>"), &format!("</{tag}>")).map(str::to_string);
        match action {
            "CreateNatGateway" => {
                let id = created("natGatewayId")?;
                self.holds.insert(id.clone(), list_and(p, &[], &["SubnetId", "AllocationId"]));
                self.starting.insert(id, until);
                None
            }
            "CreateLoadBalancer" => {
                // ELBv2 answers an ARN; a classic load balancer is known by its name.
                let id = created("LoadBalancerArn").or_else(|| p.get("LoadBalancerName").cloned())?;
                self.holds.insert(id.clone(), list(p, &["Subnets.member.", "SecurityGroups.member."]));
                self.starting.insert(id, until);
                None
            }
            "CreateVpcEndpoint" => {
                let id = created("vpcEndpointId")?;
                self.holds.insert(id.clone(), list(p, &["SubnetId.", "SecurityGroupId."]));
                self.starting.insert(id, until);
                None
            }
            "RunInstances" => {
                let ids: Vec<String> = payload
                    .split("<instanceId>")
                    .skip(1)
                    .filter_map(|s| s.split_once("</instanceId>").map(|(id, _)| id.to_string()))
                    .collect();
                for id in ids {
                    self.holds.insert(id.clone(), list_and(p, &[], &["SubnetId"]));
                    self.starting.insert(id, until);
                }
                None
            }
            "DescribeInstances" => {
                let before = payload.clone();
                let starting: Vec<String> =
                    self.starting.keys().filter(|id| live(&self.starting, id)).cloned().collect();
                for id in starting.iter().filter(|id| id.starts_with("i-")) {
                    *payload = instance_pending(payload, id);
                }
                (*payload != before).then_some("instance-pending")
            }
            "DeleteNatGateway" => {
                let id = p.get("NatGatewayId")?;
                self.deleting.insert(id.clone(), until);
                self.release(id, until)
            }
            // These interfaces outlive a NAT gateway's deletion: AWS takes minutes to release them.
            "DeleteLoadBalancer" => {
                let id = p.get("LoadBalancerArn").or_else(|| p.get("LoadBalancerName"))?.clone();
                self.release(&id, until + 3 * span)
            }
            "DeleteVpcEndpoints" => {
                let ids = list(p, &["VpcEndpointId."]);
                ids.iter().filter_map(|id| self.release(id, until + 3 * span)).last()
            }
            "TerminateInstances" => {
                let ids = list(p, &["InstanceId."]);
                ids.iter().filter_map(|id| self.release(id, until + 3 * span)).last()
            }
            "DescribeNatGateways" => self
                .report(payload, ("natGatewaySet", "item", "natGatewayId"), |id, item| {
                    if live(&self.starting, id) {
                        item.replace("<state>available</state>", "<state>pending</state>")
                    } else if live(&self.deleting, id) {
                        item.replace("<state>deleted</state>", "<state>deleting</state>")
                    } else {
                        item.to_string()
                    }
                })
                .then_some("nat-gateway-in-transition"),
            "DescribeLoadBalancers" => self
                .report(payload, ("LoadBalancers", "member", "LoadBalancerArn"), |id, item| {
                    if live(&self.starting, id) {
                        item.replace("<Code>active</Code>", "<Code>provisioning</Code>")
                    } else {
                        item.to_string()
                    }
                })
                .then_some("load-balancer-provisioning"),
            "DescribeVpcEndpoints" => self
                .report(payload, ("vpcEndpointSet", "item", "vpcEndpointId"), |id, item| {
                    if live(&self.starting, id) {
                        item.replace("<state>available</state>", "<state>pending</state>")
                    } else {
                        item.to_string()
                    }
                })
                .then_some("endpoint-pending"),
            _ => None,
        }
    }

    /// Rewrites each listed item (`set`, `elem`, the element of its own id) with `f(id, item)`;
    /// true if anything changed.
    fn report(
        &self,
        payload: &mut String,
        (set, elem, own): (&str, &str, &str),
        f: impl Fn(&str, &str) -> String,
    ) -> bool {
        let before = payload.clone();
        *payload = rewrite_elements(payload, set, elem, |item| {
            let id = between(item, &format!("<{own}>"), &format!("</{own}>")).unwrap_or_default();
            Some(f(id, item))
        });
        *payload != before
    }

    /// A resource is gone, its network interfaces not yet: what they held stays busy.
    fn release(&mut self, id: &str, until: Instant) -> Option<&'static str> {
        let held = self.holds.remove(id)?;
        for h in held {
            self.busy.insert(h, until);
        }
        Some("interfaces-linger")
    }
}

/// The answer with instance `id` reported `pending` instead of `running`.
fn instance_pending(xml: &str, id: &str) -> String {
    let Some(at) = xml.find(&format!("<instanceId>{id}</instanceId>")) else { return xml.to_string() };
    let Some(end) = xml[at..].find("</instanceState>").map(|e| at + e) else { return xml.to_string() };
    let state = xml[at..end]
        .replace("<code>16</code>", "<code>0</code>")
        .replace("<name>running</name>", "<name>pending</name>");
    format!("{}{state}{}", &xml[..at], &xml[end..])
}

/// `list(p, prefixes)` plus the single-valued parameters `names`.
fn list_and(p: &BTreeMap<String, String>, prefixes: &[&str], names: &[&str]) -> Vec<String> {
    let mut out = list(p, prefixes);
    out.extend(names.iter().filter_map(|n| p.get(*n).cloned()));
    out
}
