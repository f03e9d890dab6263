//! Service Quotas as AWS answers and enforces them, played by the test proxy once a test sets
//! them (`Proxy::set_quotas`): moto serves only the VPC service's default quotas (not EC2's
//! Elastic IPs: NoSuchResourceException) and enforces none (measured: seven addresses allocated
//! under a quota of five). GetServiceQuota is answered from the quotas set, or refused as a
//! policy without `servicequotas:GetServiceQuota` refuses it; a create that would pass its quota
//! is refused with AWS's error code, checked and made one at a time as AWS does.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::moto::Clients;
use super::wire::{Request, error_response};

/// The quotas a test gives the account, by Service Quotas code (`L-0263D0A3`); unset: AWS's
/// published default, 5.
#[derive(Clone, Debug, Default)]
pub struct Quotas {
    pub values: BTreeMap<String, u32>,
    /// GetServiceQuota answers AccessDeniedException.
    pub denied: bool,
}

pub const ELASTIC_IPS: &str = "L-0263D0A3";
pub const VPCS: &str = "L-F678F1CE";
pub const INTERNET_GATEWAYS: &str = "L-A4707A72";
pub const NAT_GATEWAYS_PER_ZONE: &str = "L-FE5A380F";
/// On-Demand standard instances' vCPUs (`ec2`): enforced only when a test sets it (AWS publishes
/// no default; it sets one per account).
pub const STANDARD_VCPUS: &str = "L-1216C47A";
/// Route53's hosted zones per account (`GetAccountLimit`'s type; AWS's published default, 500).
/// moto has no `GetAccountLimit`: the proxy answers it once a test sets quotas.
pub const HOSTED_ZONES: &str = "MAX_HOSTED_ZONES_BY_OWNER";
/// ELB's limits, as `DescribeAccountLimits` names them (moto answers 20 network load balancers;
/// AWS's published default, used here unless a test sets it, is 50).
pub const NLBS: &str = "network-load-balancers";
pub const TARGET_GROUPS: &str = "target-groups";

impl Quotas {
    pub fn with(values: &[(&str, u32)]) -> Quotas {
        Quotas { values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(), denied: false }
    }

    fn value(&self, code: &str) -> u32 {
        let published = match code {
            NLBS => 50,
            TARGET_GROUPS => 3000,
            HOSTED_ZONES => 500,
            _ => 5,
        };
        self.values.get(code).copied().unwrap_or(published)
    }
}

/// Creates checked against a quota are made one at a time, across every proxy of the binary.
static CREATES: Mutex<()> = Mutex::new(());

/// What the proxy does with a call under `quotas`: answer it here (a quota read, a refused
/// create), or let it go on — holding, for a create within its quota, the lock its check took
/// until the create is made.
pub fn admit<'a>(
    quotas: Option<&Quotas>,
    action: &str,
    req: &Request,
    readers: &'a OnceLock<Clients>,
    upstream: u16,
) -> (Option<Vec<u8>>, Option<MutexGuard<'a, ()>>) {
    let Some(q) = quotas else { return (None, None) };
    if action == "GetServiceQuota" {
        return (Some(quota_answer(q, &req.body)), None);
    }
    if action == "GetAccountSummary" && q.values.keys().any(|k| IAM_SUMMARY_QUOTAS.contains(&k.as_str())) {
        return (super::wire::forward(req, upstream).ok().map(|answer| iam_summary(q, answer)), None);
    }
    if action == "route53 GET /accountlimit/MAX_HOSTED_ZONES_BY_OWNER" {
        let c = readers.get_or_init(|| Clients::shared(&format!("http://127.0.0.1:{upstream}")));
        return (Some(zone_limit(q, hosted_zones(c))), None);
    }
    if action == "DescribeAccountLimits" {
        return (super::wire::forward(req, upstream).ok().map(|answer| elb_limits(q, answer)), None);
    }
    let body = String::from_utf8_lossy(&req.body).to_string();
    let elbv2 = body.contains("Version=2015-12-01");
    let enforced = ["AllocateAddress", "CreateVpc", "CreateInternetGateway", "CreateNatGateway"];
    let nlb = elbv2 && action == "CreateLoadBalancer" && body.contains("Type=network");
    let target_group = elbv2 && action == "CreateTargetGroup";
    let vcpus = action == "RunInstances" && q.values.contains_key(STANDARD_VCPUS);
    // Enforced only where a test sets the limit: every provision makes two zones, and a test
    // of other quotas need not serialise them.
    let zone = action == "route53 POST /hostedzone" && q.values.contains_key(HOSTED_ZONES);
    if !enforced.contains(&action) && !nlb && !target_group && !vcpus && !zone {
        return (None, None);
    }
    let held = CREATES.lock().unwrap_or_else(|p| p.into_inner());
    let c = readers.get_or_init(|| Clients::shared(&format!("http://127.0.0.1:{upstream}")));
    if zone {
        if hosted_zones(c) >= q.value(HOSTED_ZONES) {
            let message = "This operation would exceed the limit on the number of hosted zones for the account.";
            return (Some(error_response("400 Bad Request", false, "TooManyHostedZones", message)), None);
        }
        return (None, Some(held));
    }
    if vcpus {
        let param = |k: &str| body.split('&').find_map(|p| p.strip_prefix(&format!("{k}="))).unwrap_or_default();
        let (kind, count) = (param("InstanceType").to_string(), param("MaxCount").parse::<u32>().unwrap_or(1));
        let (in_use, each) = standard_vcpus(c, &kind);
        let quota = q.value(STANDARD_VCPUS);
        if in_use + count * each > quota {
            let message = format!(
                "You have requested more vCPU capacity than your current vCPU limit of {quota} allows for the instance bucket that the specified instance type belongs to."
            );
            return (Some(error_response("400 Bad Request", true, "VcpuLimitExceeded", &message)), None);
        }
        return (None, Some(held));
    }
    if nlb || target_group {
        // A name that exists is answered as AWS answers it (the same load balancer, or a
        // duplicate name): only a new one counts against the limit.
        let name = body.split('&').find_map(|p| p.strip_prefix("Name=")).unwrap_or_default().to_string();
        let (names, code, error, message) = if nlb {
            let out = c.block_on(c.elb.describe_load_balancers().send()).unwrap();
            let names: Vec<String> = out
                .load_balancers()
                .iter()
                .filter(|l| l.r#type().map(|t| t.as_str()) == Some("network"))
                .filter_map(|l| l.load_balancer_name().map(str::to_string))
                .collect();
            (names, NLBS, "TooManyLoadBalancers", "The quota for the number of load balancers has been reached.")
        } else {
            let out = c.block_on(c.elb.describe_target_groups().send()).unwrap();
            let names = out.target_groups().iter().filter_map(|t| t.target_group_name().map(str::to_string)).collect();
            (
                names,
                TARGET_GROUPS,
                "TooManyTargetGroups",
                "You've reached the limit on the number of target groups for your AWS account.",
            )
        };
        if !names.contains(&name) && names.len() as u32 >= q.value(code) {
            return (Some(error_response("400 Bad Request", false, error, message)), None);
        }
        return (None, Some(held));
    }
    let (code, in_use, error, message) = match action {
        "AllocateAddress" => {
            let n = c.block_on(c.ec2.describe_addresses().send()).unwrap().addresses().len();
            (ELASTIC_IPS, n, "AddressLimitExceeded", "The maximum number of addresses has been reached.")
        }
        "CreateVpc" => {
            let n = c.block_on(c.ec2.describe_vpcs().send()).unwrap().vpcs().len();
            (VPCS, n, "VpcLimitExceeded", "The maximum number of VPCs has been reached.")
        }
        "CreateInternetGateway" => {
            let n = c.block_on(c.ec2.describe_internet_gateways().send()).unwrap().internet_gateways().len();
            (
                INTERNET_GATEWAYS,
                n,
                "InternetGatewayLimitExceeded",
                "The maximum number of internet gateways has been reached.",
            )
        }
        _ => {
            let subnet = body.split('&').find_map(|p| p.strip_prefix("SubnetId=")).unwrap_or_default().to_string();
            (
                NAT_GATEWAYS_PER_ZONE,
                nats_in_zone_of(c, &subnet),
                "NatGatewayLimitExceeded",
                "The maximum number of NAT gateways in this Availability Zone has been reached.",
            )
        }
    };
    if in_use as u32 >= q.value(code) {
        return (Some(error_response("400 Bad Request", true, error, message)), None);
    }
    (None, Some(held))
}

/// The account's hosted zones, as moto lists them.
fn hosted_zones(c: &Clients) -> u32 {
    let mut count = 0;
    let mut marker: Option<String> = None;
    loop {
        let out = c.block_on(c.r53.list_hosted_zones().set_marker(marker.take()).send()).unwrap();
        count += out.hosted_zones().len() as u32;
        match out.next_marker() {
            Some(m) if out.is_truncated() => marker = Some(m.to_string()),
            _ => return count,
        }
    }
}

/// Route53's answer to `GetAccountLimit` for hosted zones: the limit set (or 500) and the count.
fn zone_limit(q: &Quotas, count: u32) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><GetAccountLimitResponse xmlns=\"https://route53.amazonaws.com/doc/2013-04-01/\"><Limit><Type>{HOSTED_ZONES}</Type><Value>{}</Value></Limit><Count>{count}</Count></GetAccountLimitResponse>",
        q.value(HOSTED_ZONES)
    );
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The vCPUs the standard families' pending and running instances use, and one `kind`'s (0 for
/// a type of another family: not counted against this quota).
fn standard_vcpus(c: &Clients, kind: &str) -> (u32, u32) {
    let standard = |t: &str| {
        let family = t.split('.').next().unwrap_or_default();
        family.starts_with(['a', 'c', 'd', 'h', 'i', 'm', 'r', 't', 'z'])
            && !["inf", "dl", "trn", "hpc", "mac"].iter().any(|p| family.starts_with(p))
    };
    let states =
        aws_sdk_ec2::types::Filter::builder().name("instance-state-name").values("pending").values("running").build();
    let out = c.block_on(c.ec2.describe_instances().filters(states).send()).unwrap();
    let kinds: Vec<String> = out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| i.instance_type().map(|t| t.as_str().to_string()))
        .collect();
    let vcpus = |t: &str| -> u32 {
        let asked = c.ec2.describe_instance_types().instance_types(aws_sdk_ec2::types::InstanceType::from(t));
        let out = c.block_on(asked.send()).unwrap();
        out.instance_types().first().and_then(|t| t.v_cpu_info()?.default_v_cpus()).unwrap_or(0) as u32
    };
    let in_use = kinds.iter().filter(|t| standard(t)).map(|t| vcpus(t)).sum();
    (in_use, if standard(kind) { vcpus(kind) } else { 0 })
}

/// NAT gateways pending or available in the zone of `subnet`.
fn nats_in_zone_of(c: &Clients, subnet: &str) -> usize {
    let zone_of = |id: &str| {
        let out = c.block_on(c.ec2.describe_subnets().subnet_ids(id).send()).ok()?;
        out.subnets().first().and_then(|s| s.availability_zone()).map(str::to_string)
    };
    let Some(zone) = zone_of(subnet) else { return 0 };
    let nats = c.block_on(c.ec2.describe_nat_gateways().send()).unwrap();
    nats.nat_gateways()
        .iter()
        .filter(|n| matches!(n.state().map(|s| s.as_str()), Some("pending" | "available")))
        .filter(|n| n.subnet_id().and_then(zone_of).as_deref() == Some(zone.as_str()))
        .count()
}

/// Service Quotas' JSON answer to GetServiceQuota (or its refusal).
fn quota_answer(q: &Quotas, body: &[u8]) -> Vec<u8> {
    let asked: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let (service, code) =
        (asked["ServiceCode"].as_str().unwrap_or_default(), asked["QuotaCode"].as_str().unwrap_or_default());
    let (status, body) = if q.denied {
        (
            "400 Bad Request",
            serde_json::json!({"__type": "AccessDeniedException", "message": "User is not authorized to perform: servicequotas:GetServiceQuota"}),
        )
    } else {
        (
            "200 OK",
            serde_json::json!({"Quota": {"ServiceCode": service, "QuotaCode": code, "QuotaName": code,
                                         "Value": f64::from(q.value(code)), "Unit": "None", "Adjustable": true}}),
        )
    };
    let body = body.to_string();
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// IAM's quotas, as `GetAccountSummary` names them (moto answers 1,000 roles and instance
/// profiles, AWS's defaults): a test that sets one has moto's answer say it instead.
pub const IAM_SUMMARY_QUOTAS: [&str; 2] = ["RolesQuota", "InstanceProfilesQuota"];

fn iam_summary(q: &Quotas, answer: Vec<u8>) -> Vec<u8> {
    let mut text = String::from_utf8_lossy(&answer).to_string();
    for key in IAM_SUMMARY_QUOTAS {
        let (Some(value), Some(at)) = (q.values.get(key), text.find(&format!("<key>{key}</key>"))) else { continue };
        let (Some(open), Some(close)) = (text[at..].find("<value>"), text[at..].find("</value>")) else { continue };
        text.replace_range(at + open + "<value>".len()..at + close, &value.to_string());
    }
    with_length(text)
}

/// ELB's limits as a test sets them (or AWS's published defaults) in moto's answer.
fn elb_limits(q: &Quotas, answer: Vec<u8>) -> Vec<u8> {
    let mut text = String::from_utf8_lossy(&answer).to_string();
    for key in [NLBS, TARGET_GROUPS] {
        let Some(at) = text.find(&format!("<Name>{key}</Name>")) else { continue };
        let (Some(open), Some(close)) = (text[at..].find("<Max>"), text[at..].find("</Max>")) else { continue };
        text.replace_range(at + open + "<Max>".len()..at + close, &q.value(key).to_string());
    }
    with_length(text)
}

/// An HTTP/1.1 answer whose body was rewritten, its Content-Length with it.
fn with_length(text: String) -> Vec<u8> {
    match text.split_once("\r\n\r\n") {
        Some((head, body)) => {
            let head: Vec<String> = head
                .split("\r\n")
                .map(|l| {
                    if l.to_ascii_lowercase().starts_with("content-length:") {
                        format!("Content-Length: {}", body.len())
                    } else {
                        l.to_string()
                    }
                })
                .collect();
            format!("{}\r\n\r\n{body}", head.join("\r\n")).into_bytes()
        }
        None => text.into_bytes(),
    }
}
