//! Strict AWS: the parts of AWS's contract that moto does not keep, layered over it by the test
//! proxy, each switchable: idempotency tokens remembered with their answers, eventual consistency
//! of new ids, an opted-in Local Zone, Route53's tag and request-rate limits, and asynchronous
//! states (`transitions.rs`).
//!
//! What each behaviour stands for on AWS, and the tests that hold the code to it, is the table in
//! docs/testing.md ("Strict AWS: the contract the tests hold the code to").

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use super::transitions::{Refusal, Transitions};
use super::xml::{between, rewrite_elements};

/// Which strict behaviours are on.
#[derive(Clone, Debug, Default)]
pub struct Strict {
    /// EC2 `ClientToken`: the same token with the same parameters gets the first answer again
    /// (even if that resource is gone); with other parameters, `IdempotentParameterMismatch`.
    /// Route53 `CallerReference`: never accepted twice (`HostedZoneAlreadyExists`).
    pub tokens: bool,
    /// For this long after it is created, a new EC2 id is `*.NotFound` to calls that name it
    /// and missing from Describe results.
    pub lag: Option<Duration>,
    /// With `lag`: only what reads the tag index misses a new id (Describe calls filtered by a
    /// tag, and DescribeTags); calls naming it by id see it at once.
    pub lag_tag_filters_only: bool,
    /// DescribeAvailabilityZones lists an opted-in Local Zone first (unless filtered out).
    pub local_zone: bool,
    /// Route53: at most 10 tags per ChangeTagsForResource, at most `route53_rate` requests/s.
    pub route53_limits: bool,
    pub route53_rate: u32,
    /// Interface endpoints report `failed` (as a rejected or broken endpoint does on AWS, where
    /// it still sits in its VPC and must be deleted).
    pub failed_endpoints: bool,
    /// For this long, a new NAT gateway, load balancer or interface endpoint is still coming up, a
    /// deleted NAT gateway is `deleting`, and what a deleted resource's network interfaces held
    /// (subnets, security groups, its address) cannot be deleted or released yet.
    pub transitions: Option<Duration>,
    /// For this long after it is made, an IAM role or instance profile is NoSuchEntity to
    /// GetRole / GetInstanceProfile, and a profile (or one given a role) is refused by
    /// RunInstances as an invalid `iamInstanceProfile.name`: IAM's propagation delay.
    pub iam_lag: Option<Duration>,
}

impl Strict {
    /// Every behaviour, with a consistency lag of `lag`.
    pub fn all(lag: Duration) -> Strict {
        Strict {
            tokens: true,
            lag: Some(lag),
            lag_tag_filters_only: false,
            local_zone: true,
            route53_limits: true,
            route53_rate: 5,
            failed_endpoints: false,
            // Longer than the lag, so a new resource is seen pending before it is available.
            transitions: Some(lag * 2),
            // IAM propagates slower than EC2 (seconds on AWS).
            iam_lag: Some(lag * 3),
        }
    }

    /// What `INFRAFLOW_TEST_STRICT=1` turns on for every proxy of a test run (the whole AWS suite
    /// in strict mode): everything, with a short lag so the suite stays quick.
    pub fn from_env() -> Option<Strict> {
        (std::env::var("INFRAFLOW_TEST_STRICT").as_deref() == Ok("1")).then(|| Strict::all(Duration::from_millis(700)))
    }
}

#[derive(Default)]
pub struct StrictState {
    pub config: Strict,
    /// (action, token) -> (parameters without the token, first answer).
    tokens: HashMap<(String, String), (BTreeMap<String, String>, Vec<u8>)>,
    references: HashSet<String>,
    /// New ids and when they become visible.
    hidden: HashMap<String, Instant>,
    route53_times: VecDeque<Instant>,
    /// IAM names made, and when reads see them.
    iam_unread: HashMap<String, Instant>,
    /// Instance profiles made or changed, and when EC2 can launch with them.
    profiles_unusable: HashMap<String, Instant>,
    transitions: Transitions,
    /// What the strict layer did, by behaviour.
    pub effects: BTreeMap<&'static str, u32>,
}

/// Query-protocol parameters, decoded.
pub fn params(body: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// Percent-decoding of a query string's parts (`+` is a space).
pub fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

/// The id a create returns, by action: (XML element of the id).
fn created_id_tag(action: &str) -> Option<&'static str> {
    Some(match action {
        "CreateVpc" => "vpcId",
        "CreateSubnet" => "subnetId",
        "CreateInternetGateway" => "internetGatewayId",
        "CreateDhcpOptions" => "dhcpOptionsId",
        "CreateRouteTable" => "routeTableId",
        "CreateSecurityGroup" => "groupId",
        "AllocateAddress" => "allocationId",
        "CreateNatGateway" => "natGatewayId",
        _ => return None,
    })
}

/// Describe calls whose listed resources a lag hides: (the set element, each item's own id).
fn listing(action: &str) -> Option<(&'static str, &'static str)> {
    Some(match action {
        "DescribeVpcs" => ("vpcSet", "vpcId"),
        "DescribeSubnets" => ("subnetSet", "subnetId"),
        "DescribeInternetGateways" => ("internetGatewaySet", "internetGatewayId"),
        "DescribeDhcpOptions" => ("dhcpOptionsSet", "dhcpOptionsId"),
        "DescribeRouteTables" => ("routeTableSet", "routeTableId"),
        "DescribeSecurityGroups" => ("securityGroupInfo", "groupId"),
        "DescribeAddresses" => ("addressesSet", "allocationId"),
        "DescribeNatGateways" => ("natGatewaySet", "natGatewayId"),
        // Served from the tag index, which lags as tag filters do (SAFETY-7243D60 N10): never
        // exempt, whatever names the resource.
        "DescribeTags" => ("tagSet", "resourceId"),
        _ => return None,
    })
}

fn not_found_code(id: &str) -> &'static str {
    match id.split('-').next().unwrap_or_default() {
        "vpc" => "InvalidVpcID.NotFound",
        "subnet" => "InvalidSubnetID.NotFound",
        "igw" => "InvalidInternetGatewayID.NotFound",
        "dopt" => "InvalidDhcpOptionID.NotFound",
        "rtb" => "InvalidRouteTableID.NotFound",
        "sg" => "InvalidGroup.NotFound",
        "eipalloc" => "InvalidAllocationID.NotFound",
        "nat" => "NatGatewayNotFound",
        _ => "InvalidParameterValue",
    }
}

impl StrictState {
    fn count(&mut self, what: &'static str) {
        *self.effects.entry(what).or_insert(0) += 1;
    }

    fn is_hidden(&self, id: &str) -> bool {
        self.hidden.get(id).is_some_and(|until| Instant::now() < *until)
    }

    /// Before forwarding: a remembered answer to replay, or a refusal.
    pub fn before(&mut self, action: &str, body: &[u8]) -> Option<Result<Vec<u8>, Refusal>> {
        if action.starts_with("route53 ") {
            return self.before_route53(action, body).map(Err);
        }
        let p = params(body);
        if self.config.lag.is_some()
            && !self.config.lag_tag_filters_only
            && let Some(id) =
                p.iter().filter(|(k, _)| !k.starts_with("Filter.")).map(|(_, v)| v).find(|v| self.is_hidden(v))
        {
            let id = id.clone();
            self.count("lag-not-found");
            return Some(Err((
                "400 Bad Request",
                not_found_code(&id),
                format!("The ID '{id}' does not exist (strict: not yet consistent)"),
            )));
        }
        if let Some(refusal) = self.iam_not_yet(action, &p) {
            return Some(Err(refusal));
        }
        if self.config.transitions.is_some()
            && let Some(refusal) = self.transitions.before(action, &p)
        {
            self.count("dependency-still-held");
            return Some(Err(refusal));
        }
        if self.config.tokens
            && let Some(token) = p.get("ClientToken")
        {
            let key = (action.to_string(), token.clone());
            let mut rest = p.clone();
            rest.remove("ClientToken");
            if let Some((first, answer)) = self.tokens.get(&key).cloned() {
                if first == rest {
                    self.count("token-replayed");
                    return Some(Ok(answer));
                }
                self.count("token-mismatch");
                return Some(Err((
                    "400 Bad Request",
                    "IdempotentParameterMismatch",
                    format!("the client token {token} was used before with other parameters"),
                )));
            }
        }
        None
    }

    /// IAM's propagation delay, as AWS answers it (`iam_lag`).
    fn iam_not_yet(&mut self, action: &str, p: &BTreeMap<String, String>) -> Option<Refusal> {
        self.config.iam_lag?;
        let now = Instant::now();
        let pending =
            |m: &HashMap<String, Instant>, key: &str| p.get(key).filter(|n| m.get(*n).is_some_and(|t| now < *t));
        let refusal = match action {
            "GetRole" => pending(&self.iam_unread, "RoleName").map(|n| {
                ("404 Not Found", "NoSuchEntity", format!("The role with name {n} cannot be found."))
            }),
            "GetInstanceProfile" => pending(&self.iam_unread, "InstanceProfileName").map(|n| {
                ("404 Not Found", "NoSuchEntity", format!("Instance Profile {n} cannot be found."))
            }),
            "RunInstances" => pending(&self.profiles_unusable, "IamInstanceProfile.Name").map(|n| {
                (
                    "400 Bad Request",
                    "InvalidParameterValue",
                    format!("Value ({n}) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name"),
                )
            }),
            _ => None,
        };
        if refusal.is_some() {
            self.count("iam-not-yet-propagated");
        }
        refusal
    }

    fn before_route53(&mut self, action: &str, body: &[u8]) -> Option<Refusal> {
        let text = String::from_utf8_lossy(body);
        if self.config.route53_limits {
            let now = Instant::now();
            while self.route53_times.front().is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1)) {
                self.route53_times.pop_front();
            }
            if self.route53_times.len() as u32 >= self.config.route53_rate.max(1) {
                self.count("route53-throttled");
                return Some(("400 Bad Request", "Throttling", "Rate exceeded".into()));
            }
            self.route53_times.push_back(now);
            if action.contains("/tags/") && text.matches("<Tag>").count() > 10 {
                self.count("route53-too-many-tags");
                return Some(("400 Bad Request", "InvalidInput", "at most 10 tags per request".into()));
            }
        }
        if self.config.tokens && action == "route53 POST /hostedzone" {
            self.count("caller-reference-seen");
        }
        if self.config.tokens
            && action == "route53 POST /hostedzone"
            && let Some(reference) = between(&text, "<CallerReference>", "</CallerReference>")
            && !self.references.insert(reference.to_string())
        {
            self.count("caller-reference-reused");
            return Some((
                "409 Conflict",
                "HostedZoneAlreadyExists",
                format!("a hosted zone has already been created with the caller reference {reference}"),
            ));
        }
        None
    }

    /// After forwarding: remember tokens and new ids, and make the answer what AWS would say.
    pub fn after(&mut self, action: &str, body: &[u8], answer: Vec<u8>) -> Vec<u8> {
        if action.starts_with("route53 ") {
            return answer;
        }
        let ok = answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200");
        let p = params(body);
        if ok
            && self.config.tokens
            && let Some(token) = p.get("ClientToken")
        {
            let mut rest = p.clone();
            rest.remove("ClientToken");
            self.tokens.insert((action.to_string(), token.clone()), (rest, answer.clone()));
            self.count("token-remembered");
        }
        if ok && let Some(lag) = self.config.iam_lag {
            let until = Instant::now() + lag;
            match action {
                "CreateRole" => {
                    self.iam_unread.extend(p.get("RoleName").map(|n| (n.clone(), until)));
                }
                "CreateInstanceProfile" => {
                    let name = p.get("InstanceProfileName").cloned();
                    self.iam_unread.extend(name.clone().map(|n| (n, until)));
                    self.profiles_unusable.extend(name.map(|n| (n, until)));
                }
                "AddRoleToInstanceProfile" => {
                    self.profiles_unusable.extend(p.get("InstanceProfileName").map(|n| (n.clone(), until)));
                }
                _ => {}
            }
        }
        let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4) else { return answer };
        let (head, payload) = (
            String::from_utf8_lossy(&answer[..split]).to_string(),
            String::from_utf8_lossy(&answer[split..]).to_string(),
        );
        let mut payload = payload;
        if ok && let Some(lag) = self.config.lag {
            if let Some(tag) = created_id_tag(action)
                && let Some(id) = between(&payload, &format!("<{tag}>"), &format!("</{tag}>"))
            {
                self.hidden.insert(id.to_string(), Instant::now() + lag);
            }
            let by_tag =
                p.iter().any(|(k, v)| k.starts_with("Filter.") && k.ends_with(".Name") && v.starts_with("tag:"));
            let tag_index = by_tag || action == "DescribeTags";
            if let Some((set, own)) = listing(action).filter(|_| tag_index || !self.config.lag_tag_filters_only) {
                let hidden: Vec<String> = self.hidden.keys().filter(|id| self.is_hidden(id)).cloned().collect();
                let before = payload.len();
                payload = drop_items(&payload, set, own, &hidden);
                if payload.len() != before {
                    self.count("lag-hidden-from-describe");
                }
            }
        }
        if ok
            && let Some(span) = self.config.transitions
            && let Some(effect) = self.transitions.after(span, action, &p, &mut payload)
        {
            self.count(effect);
        }
        if ok && self.config.failed_endpoints && action == "DescribeVpcEndpoints" {
            payload = rewrite_items(&payload, "vpcEndpointSet", |item| {
                Some(if item.contains(">Interface<") {
                    item.replace("<state>available</state>", "<state>failed</state>")
                } else {
                    item.to_string()
                })
            });
            self.count("endpoint-reported-failed");
        }
        if ok && self.config.local_zone && action == "DescribeAvailabilityZones" && !excludes_local_zones(&p) {
            let region = between(&payload, "<regionName>", "</regionName>").unwrap_or("us-east-1").to_string();
            let item = format!(
                "<item><zoneName>{region}-bos-1a</zoneName><zoneState>available</zoneState><regionName>{region}</regionName><zoneId>use1-bos1-az1</zoneId><zoneType>local-zone</zoneType><optInStatus>opted-in</optInStatus><messageSet/></item>"
            );
            if let Some(at) = payload.find("<availabilityZoneInfo>") {
                payload.insert_str(at + "<availabilityZoneInfo>".len(), &item);
                self.count("local-zone-listed");
            }
        }
        with_body(&head, &payload)
    }
}

/// Whether the request filters zone types to exclude Local Zones.
fn excludes_local_zones(p: &BTreeMap<String, String>) -> bool {
    p.iter().any(|(k, v)| {
        if v != "zone-type" || !k.ends_with(".Name") {
            return false;
        }
        let prefix = k.trim_end_matches("Name");
        !p.iter().any(|(k2, v2)| k2.starts_with(&format!("{prefix}Value")) && v2 == "local-zone")
    })
}

/// Removes the top-level `<item>`s of `<set>` whose own id (`<own>`) is in `ids`.
fn drop_items(xml: &str, set: &str, own: &str, ids: &[String]) -> String {
    rewrite_items(xml, set, |item| {
        let own_id = between(item, &format!("<{own}>"), &format!("</{own}>")).unwrap_or_default();
        (!ids.iter().any(|id| id == own_id)).then(|| item.to_string())
    })
}

/// Rewrites each top-level `<item>` of `<set>` with `f` (None drops it).
fn rewrite_items(xml: &str, set: &str, f: impl Fn(&str) -> Option<String>) -> String {
    rewrite_elements(xml, set, "item", f)
}

/// The response with `payload` as its body and a matching Content-Length.
fn with_body(head: &str, payload: &str) -> Vec<u8> {
    let head: String = head
        .trim_end()
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("content-length:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    let mut out = format!("{head}Content-Length: {}\r\n\r\n", payload.len()).into_bytes();
    out.extend_from_slice(payload.as_bytes());
    out
}
