//! What AWS would authorize: each call the proxy sees, as IAM evaluates it (the action, the
//! request's tags, every resource it names with that resource's tags read from moto before the
//! call); `evaluate` holds it against the policy documents `infraflow policy --infra-id` prints.
//! The proof that the scoped policy lets a cluster's workflows do all they do, and nothing to
//! another cluster.
//!
//! Why split so: `authz/` was split at 600 lines — this file (490 lines) is what IAM would
//! authorize for each call the proxy sees, `evaluate` the evaluator of policy documents.

use std::collections::BTreeMap;

use super::moto::Clients;
use super::strict::params;

mod evaluate;
pub use evaluate::verdict;

const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";

/// One authorization AWS makes for a call (a call may need several: tagging on create, passing a
/// role).
#[derive(Clone, Debug)]
pub struct Authz {
    pub action: String,
    /// Request context: `aws:RequestTag/K`, `ec2:CreateAction`, ...
    pub context: BTreeMap<String, String>,
    /// Every resource authorized, with its tags (None: it does not exist, or not yet).
    pub resources: Vec<Resource>,
}

#[derive(Clone, Debug)]
pub struct Resource {
    pub arn: String,
    pub tags: Option<Vec<(String, String)>>,
    /// What the call creates (never "gone").
    pub new: bool,
}

impl Authz {
    /// A call whose authorizations could not be read (the reading panicked): no policy grants
    /// it, so the run's check fails naming the call and why.
    pub fn unrecorded(iam_action: &str, why: &str) -> Authz {
        Authz {
            action: format!("{iam_action} (its authorization could not be recorded: {why})"),
            context: BTreeMap::new(),
            resources: Vec::new(),
        }
    }
}

fn is_read(iam_action: &str) -> bool {
    let (service, name) = iam_action.split_once(':').unwrap_or_default();
    matches!(service, "sts" | "route53") || ["Describe", "List", "Get"].iter().any(|p| name.starts_with(p))
}

/// A query parameter's name without its list positions: `SecurityGroupId.1` → `SecurityGroupId`.
fn base_name(key: &str) -> String {
    key.split('.').filter(|s| !s.chars().all(|c| c.is_ascii_digit()) && *s != "member").collect::<Vec<_>>().join(".")
}

/// EC2 query parameters that name a resource IAM authorizes, by the actions' own reference pages;
/// for these actions only the listed parameter is authorized (a rejected endpoint is the
/// consumer's, a route's target is not authorized).
const EC2_ONLY: &[(&str, &[&str])] = &[
    ("RejectVpcEndpointConnections", &["ServiceId"]),
    ("AcceptVpcEndpointConnections", &["ServiceId"]),
    ("CreateRoute", &["RouteTableId"]),
    ("ReplaceRoute", &["RouteTableId"]),
    ("AuthorizeSecurityGroupIngress", &["GroupId"]),
    ("RevokeSecurityGroupIngress", &["GroupId"]),
    ("RevokeSecurityGroupEgress", &["GroupId"]),
    // Authorized on the table it associates, not on the one the association had.
    ("ReplaceRouteTableAssociation", &["RouteTableId"]),
];
const EC2_ID_PARAMS: &[&str] = &[
    "VpcId",
    "SubnetId",
    "GroupId",
    "SecurityGroupId",
    "RouteTableId",
    "InternetGatewayId",
    "NatGatewayId",
    "DhcpOptionsId",
    "VpcEndpointId",
    "ServiceId",
    "AllocationId",
    "InstanceId",
    "ResourceId",
    "ImageId",
    "AssociationId",
    "AddRouteTableId",
    "RemoveRouteTableId",
    "AddSubnetId",
    "RemoveSubnetId",
    "AddSecurityGroupId",
    "RemoveSecurityGroupId",
    "VolumeId",
    "SnapshotId",
    "NetworkInterfaceId",
    "LaunchTemplateId",
];

/// What a create makes, as the ARN IAM authorizes before it exists (the test's own reading of the
/// Service Authorization Reference, not the policy generator's table).
fn created(action: &str, p: &BTreeMap<String, String>) -> Vec<String> {
    let ec2 = |t: &str| format!("arn:aws:ec2:{REGION}:{ACCOUNT}:{t}/*");
    let elb = |t: &str| format!("arn:aws:elasticloadbalancing:{REGION}:{ACCOUNT}:{t}/*");
    match action {
        "ec2:AllocateAddress" => vec![ec2("elastic-ip")],
        "ec2:CreateDhcpOptions" => vec![ec2("dhcp-options")],
        "ec2:CreateInternetGateway" => vec![ec2("internet-gateway")],
        "ec2:CreateNatGateway" => vec![ec2("natgateway")],
        "ec2:CreateRouteTable" => vec![ec2("route-table")],
        "ec2:CreateSecurityGroup" => vec![ec2("security-group")],
        "ec2:CreateSubnet" => vec![ec2("subnet")],
        "ec2:CreateVpc" => vec![ec2("vpc")],
        "ec2:CreateVpcEndpoint" => vec![ec2("vpc-endpoint")],
        "ec2:CreateVpcEndpointServiceConfiguration" => vec![ec2("vpc-endpoint-service")],
        "ec2:RunInstances" => vec![ec2("instance"), ec2("volume"), ec2("network-interface")],
        "elasticloadbalancing:CreateLoadBalancer" => vec![elb("loadbalancer")],
        "elasticloadbalancing:CreateTargetGroup" => vec![elb("targetgroup")],
        "iam:CreateOpenIDConnectProvider" => {
            let url = p.get("Url").map(String::as_str).unwrap_or_default();
            vec![format!("arn:aws:iam::{ACCOUNT}:oidc-provider/{}", url.trim_start_matches("https://"))]
        }
        _ => Vec::new(),
    }
}

/// The request's tags: EC2's `TagSpecification.N.Tag.M.Key`, ELB's and IAM's `Tags.member.N.Key`.
fn request_tags(p: &BTreeMap<String, String>) -> Vec<(String, String)> {
    p.iter()
        .filter(|(k, _)| {
            // `Tag.N.Key`: EC2's CreateTags, whose request tags AWS also offers to conditions.
            (k.starts_with("TagSpecification.") || k.starts_with("Tags.member.") || k.starts_with("Tag."))
                && k.ends_with(".Key")
        })
        .map(|(k, v)| (v.clone(), p.get(&format!("{}.Value", &k[..k.len() - 4])).cloned().unwrap_or_default()))
        .collect()
}

/// Tags AWS would have on a resource whose create moto answered without applying them (moto drops
/// the tags of CreateDhcpOptions: MOTO-NOTES.md), by id.
pub type DroppedTags = BTreeMap<String, Vec<(String, String)>>;

/// What `DroppedTags` learns from a create's answer: the new id and the request's tags.
pub fn dropped_tags(action: &str, body: &[u8], answer: &[u8]) -> Option<(String, Vec<(String, String)>)> {
    if action != "CreateDhcpOptions" {
        return None;
    }
    let text = String::from_utf8_lossy(answer);
    let id = text.split("<dhcpOptionsId>").nth(1)?.split('<').next()?.to_string();
    Some((id, request_tags(&params(body))))
}

/// The authorizations of one call (`iam_action` as `support::iam::iam_action` names it; `body`
/// the query parameters), reading the tags of what it names from moto.
pub fn authorizations(c: &Clients, dropped: &DroppedTags, iam_action: &str, head: &str, body: &[u8]) -> Vec<Authz> {
    if iam_action.starts_with("s3:") {
        return s3_authorizations(c, iam_action, head, body);
    }
    if is_read(iam_action) {
        return vec![Authz { action: iam_action.to_string(), context: BTreeMap::new(), resources: Vec::new() }];
    }
    let p = params(body);
    let (service, name) = iam_action.split_once(':').unwrap_or_default();
    let tags = request_tags(&p);
    let mut context: BTreeMap<String, String> =
        tags.iter().map(|(k, v)| (format!("aws:RequestTag/{k}"), v.clone())).collect();
    let mut resources: Vec<Resource> =
        created(iam_action, &p).into_iter().map(|arn| Resource { arn, tags: None, new: true }).collect();
    let mut extra = Vec::new();
    match service {
        "ec2" => {
            let only = EC2_ONLY.iter().find(|(a, _)| *a == name).map(|(_, ps)| *ps);
            for (k, v) in &p {
                let base = base_name(k);
                let named = match only {
                    Some(ps) => ps.contains(&k.as_str()),
                    None => EC2_ID_PARAMS.contains(&base.rsplit('.').next().unwrap_or_default()),
                };
                if named && let Some(mut r) = ec2_resource(c, v) {
                    if r.tags.as_ref().is_some_and(Vec::is_empty)
                        && let Some(t) = dropped.get(v)
                    {
                        r.tags = Some(t.clone());
                    }
                    resources.push(r);
                }
            }
            if name == "RunInstances"
                && let Some(profile) = p.get("IamInstanceProfile.Name")
            {
                let roles = c.block_on(c.iam.get_instance_profile().instance_profile_name(profile).send());
                for role in roles.iter().flat_map(|o| o.instance_profile().map(|ip| ip.roles().to_vec())).flatten() {
                    extra.push(Authz {
                        action: "iam:PassRole".into(),
                        context: BTreeMap::new(),
                        resources: vec![iam_resource(c, "role", role.role_name())],
                    });
                }
            }
            if !tags.is_empty() && name != "CreateTags" && name != "DeleteTags" {
                let mut ctx = context.clone();
                ctx.insert("ec2:CreateAction".into(), name.to_string());
                extra.push(Authz { action: "ec2:CreateTags".into(), context: ctx, resources: Vec::new() });
            }
        }
        "elasticloadbalancing" => {
            let classic = String::from_utf8_lossy(body).contains("Version=2012-06-01");
            for (k, v) in &p {
                match base_name(k).as_str() {
                    "LoadBalancerArn"
                    | "TargetGroupArn"
                    | "ResourceArns"
                    | "ListenerArn"
                    | "DefaultActions.TargetGroupArn" => resources.push(elb_resource(c, v)),
                    "LoadBalancerName" | "LoadBalancerNames" if classic => resources.push(classic_resource(c, v)),
                    _ => {}
                }
            }
            if !tags.is_empty() && name != "AddTags" {
                let mut ctx = context.clone();
                ctx.insert("elasticloadbalancing:CreateAction".into(), name.to_string());
                extra.push(Authz {
                    action: "elasticloadbalancing:AddTags".into(),
                    context: ctx,
                    resources: Vec::new(),
                });
            }
        }
        "iam" => {
            for (k, v) in &p {
                match k.as_str() {
                    "RoleName" => resources.push(iam_resource(c, "role", v)),
                    "InstanceProfileName" => resources.push(iam_resource(c, "instance-profile", v)),
                    "OpenIDConnectProviderArn" => resources.push(iam_resource(c, "oidc-provider", v)),
                    _ => {}
                }
            }
            if name.starts_with("Create") {
                resources.iter_mut().for_each(|r| r.new = true);
            }
            let tag_action = match name {
                "CreateRole" => Some("iam:TagRole"),
                "CreateInstanceProfile" => Some("iam:TagInstanceProfile"),
                "CreateOpenIDConnectProvider" => Some("iam:TagOpenIDConnectProvider"),
                _ => None,
            };
            if let Some(t) = tag_action.filter(|_| !tags.is_empty()) {
                extra.push(Authz { action: t.into(), context: context.clone(), resources: resources.clone() });
            }
        }
        _ => {}
    }
    context.retain(|k, _| k.starts_with("aws:RequestTag/"));
    let mut out = vec![Authz { action: iam_action.to_string(), context, resources }];
    out.extend(extra);
    out
}

/// The method, the path and the query of a request's first line.
pub fn request_line(head: &str) -> (String, String, String) {
    let first = head.lines().next().unwrap_or_default();
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    (method, path.to_string(), query.to_string())
}

/// S3 authorizes a bucket's calls on the bucket (`arn:aws:s3:::<bucket>`, read here with its
/// tags), an object's on `arn:aws:s3:::<bucket>/<key>`, DeleteObjects once per object it names
/// (`s3:DeleteObject`, and `s3:DeleteObjectVersion` for a version), and ListBuckets on none.
fn s3_authorizations(c: &Clients, iam_action: &str, head: &str, body: &[u8]) -> Vec<Authz> {
    let (_, path, _) = request_line(head);
    let path = path.trim_start_matches('/');
    let (bucket, key) = path.split_once('/').map_or((path, None), |(b, k)| (b, Some(k)));
    let one =
        |action: &str, resources: Vec<Resource>| Authz { action: action.into(), context: BTreeMap::new(), resources };
    let object =
        |key: &str| Resource { arn: format!("arn:aws:s3:::{bucket}/{key}"), tags: Some(Vec::new()), new: false };
    if bucket.is_empty() {
        return vec![one(iam_action, Vec::new())];
    }
    if let Some(key) = key {
        return vec![one(iam_action, vec![object(key)])];
    }
    if iam_action == "s3:DeleteObject" {
        // DeleteObjects: `<Object><Key>k</Key>[<VersionId>v</VersionId>]</Object>` each.
        let text = String::from_utf8_lossy(body);
        let mut out = Vec::new();
        for named in text.split("<Object>").skip(1) {
            let field =
                |f: &str| named.split(&format!("<{f}>")).nth(1).and_then(|r| r.split('<').next()).map(str::to_string);
            let Some(key) = field("Key") else { continue };
            out.push(one("s3:DeleteObject", vec![object(&key)]));
            if field("VersionId").is_some() {
                out.push(one("s3:DeleteObjectVersion", vec![object(&key)]));
            }
        }
        return out;
    }
    use aws_sdk_s3::error::ProvideErrorMetadata;
    let tags = match c.block_on(c.s3.get_bucket_tagging().bucket(bucket).send()) {
        Ok(o) => Some(o.tag_set().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()),
        Err(e) if e.code() == Some("NoSuchTagSet") => Some(Vec::new()),
        Err(_) => None,
    };
    let arn = format!("arn:aws:s3:::{bucket}");
    vec![one(iam_action, vec![Resource { arn, tags, new: iam_action == "s3:CreateBucket" }])]
}

fn pairs<'a>(it: impl Iterator<Item = (Option<&'a str>, Option<&'a str>)>) -> Vec<(String, String)> {
    it.filter_map(|(k, v)| Some((k?.to_string(), v.unwrap_or_default().to_string()))).collect()
}

/// An EC2 resource by id, with its tags read by id (an error: it does not exist).
fn ec2_resource(c: &Clients, id: &str) -> Option<Resource> {
    let ec2 = &c.ec2;
    let kind = match id.split('-').next().unwrap_or_default() {
        "vpc" => "vpc",
        "subnet" => "subnet",
        "sg" => "security-group",
        "rtb" => "route-table",
        "rtbassoc" => "route-table",
        "igw" => "internet-gateway",
        "nat" => "natgateway",
        "dopt" => "dhcp-options",
        "vpce" if id.starts_with("vpce-svc-") => "vpc-endpoint-service",
        "vpce" => "vpc-endpoint",
        "eipalloc" => "elastic-ip",
        "i" => "instance",
        "vol" => "volume",
        // Snapshots are regional resources with no account in their ARN.
        "snap" => "snapshot",
        "eni" => "network-interface",
        "lt" => "launch-template",
        "ami" => {
            return Some(Resource {
                arn: format!("arn:aws:ec2:{REGION}::image/{id}"),
                tags: Some(Vec::new()),
                new: false,
            });
        }
        _ => return None,
    };
    let t = |tags: &[aws_sdk_ec2::types::Tag]| pairs(tags.iter().map(|t| (t.key(), t.value())));
    let f = |name: &str| aws_sdk_ec2::types::Filter::builder().name(name).values(id).build();
    let (id, tags): (String, Option<Vec<(String, String)>>) = match kind {
        "vpc" => (
            id.into(),
            c.block_on(ec2.describe_vpcs().vpc_ids(id).send()).ok().and_then(|o| o.vpcs().first().map(|r| t(r.tags()))),
        ),
        "subnet" => (
            id.into(),
            c.block_on(ec2.describe_subnets().subnet_ids(id).send())
                .ok()
                .and_then(|o| o.subnets().first().map(|r| t(r.tags()))),
        ),
        "security-group" => (
            id.into(),
            c.block_on(ec2.describe_security_groups().group_ids(id).send())
                .ok()
                .and_then(|o| o.security_groups().first().map(|r| t(r.tags()))),
        ),
        "route-table" if id.starts_with("rtbassoc-") => {
            // An association is authorized on its route table.
            let o = c
                .block_on(ec2.describe_route_tables().filters(f("association.route-table-association-id")).send())
                .ok();
            let table = o.as_ref().and_then(|o| o.route_tables().first());
            (table.and_then(|r| r.route_table_id()).unwrap_or(id).to_string(), table.map(|r| t(r.tags())))
        }
        "route-table" => (
            id.into(),
            c.block_on(ec2.describe_route_tables().route_table_ids(id).send())
                .ok()
                .and_then(|o| o.route_tables().first().map(|r| t(r.tags()))),
        ),
        "internet-gateway" => (
            id.into(),
            c.block_on(ec2.describe_internet_gateways().internet_gateway_ids(id).send())
                .ok()
                .and_then(|o| o.internet_gateways().first().map(|r| t(r.tags()))),
        ),
        "natgateway" => (
            id.into(),
            c.block_on(ec2.describe_nat_gateways().nat_gateway_ids(id).send()).ok().and_then(|o| {
                o.nat_gateways()
                    .first()
                    .filter(|n| n.state().is_some_and(|s| s.as_str() != "deleted"))
                    .map(|r| t(r.tags()))
            }),
        ),
        "dhcp-options" => (
            id.into(),
            c.block_on(ec2.describe_dhcp_options().dhcp_options_ids(id).send())
                .ok()
                .and_then(|o| o.dhcp_options().first().map(|r| t(r.tags()))),
        ),
        "vpc-endpoint-service" => (
            id.into(),
            c.block_on(ec2.describe_vpc_endpoint_service_configurations().service_ids(id).send())
                .ok()
                .and_then(|o| o.service_configurations().first().map(|r| t(r.tags()))),
        ),
        "vpc-endpoint" => (
            id.into(),
            c.block_on(ec2.describe_vpc_endpoints().vpc_endpoint_ids(id).send()).ok().and_then(|o| {
                o.vpc_endpoints()
                    .first()
                    .filter(|e| e.state().is_none_or(|s| s.as_str() != "deleted"))
                    .map(|r| t(r.tags()))
            }),
        ),
        "elastic-ip" => (
            id.into(),
            c.block_on(ec2.describe_addresses().allocation_ids(id).send())
                .ok()
                .and_then(|o| o.addresses().first().map(|r| t(r.tags()))),
        ),
        "volume" => (
            id.into(),
            c.block_on(ec2.describe_volumes().volume_ids(id).send())
                .ok()
                .and_then(|o| o.volumes().first().map(|r| t(r.tags()))),
        ),
        "snapshot" => (
            id.into(),
            c.block_on(ec2.describe_snapshots().snapshot_ids(id).send())
                .ok()
                .and_then(|o| o.snapshots().first().map(|r| t(r.tags()))),
        ),
        "network-interface" => (
            id.into(),
            c.block_on(ec2.describe_network_interfaces().network_interface_ids(id).send())
                .ok()
                .and_then(|o| o.network_interfaces().first().map(|r| t(r.tag_set()))),
        ),
        "launch-template" => (
            id.into(),
            c.block_on(ec2.describe_launch_templates().launch_template_ids(id).send())
                .ok()
                .and_then(|o| o.launch_templates().first().map(|r| t(r.tags()))),
        ),
        _ => (
            id.into(),
            c.block_on(ec2.describe_instances().instance_ids(id).send()).ok().and_then(|o| {
                o.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .next()
                    .filter(|i| i.state().and_then(|s| s.name()).is_none_or(|n| n.as_str() != "terminated"))
                    .map(|r| t(r.tags()))
            }),
        ),
    };
    let account = if kind == "snapshot" { "" } else { ACCOUNT };
    Some(Resource { arn: format!("arn:aws:ec2:{REGION}:{account}:{kind}/{id}"), tags, new: false })
}

fn elb_resource(c: &Clients, arn: &str) -> Resource {
    let o = c.block_on(c.elb.describe_tags().resource_arns(arn).send()).ok();
    let tags =
        o.and_then(|o| o.tag_descriptions().first().map(|d| pairs(d.tags().iter().map(|t| (t.key(), t.value())))));
    Resource { arn: arn.to_string(), tags, new: false }
}

fn classic_resource(c: &Clients, name: &str) -> Resource {
    let o = c.block_on(c.classic.describe_tags().load_balancer_names(name).send()).ok();
    let tags = o
        .and_then(|o| o.tag_descriptions().first().map(|d| pairs(d.tags().iter().map(|t| (Some(t.key()), t.value())))));
    Resource { arn: format!("arn:aws:elasticloadbalancing:{REGION}:{ACCOUNT}:loadbalancer/{name}"), tags, new: false }
}

fn iam_resource(c: &Clients, kind: &str, name: &str) -> Resource {
    let iam = &c.iam;
    let t = |tags: &[aws_sdk_iam::types::Tag]| pairs(tags.iter().map(|t| (Some(t.key()), Some(t.value()))));
    let (arn, tags) = match kind {
        "role" => (
            format!("arn:aws:iam::{ACCOUNT}:role/{name}"),
            c.block_on(iam.list_role_tags().role_name(name).send()).ok().map(|o| t(o.tags())),
        ),
        "instance-profile" => (
            format!("arn:aws:iam::{ACCOUNT}:instance-profile/{name}"),
            c.block_on(iam.list_instance_profile_tags().instance_profile_name(name).send()).ok().map(|o| t(o.tags())),
        ),
        _ => (
            name.to_string(),
            c.block_on(iam.list_open_id_connect_provider_tags().open_id_connect_provider_arn(name).send())
                .ok()
                .map(|o| t(o.tags())),
        ),
    };
    Resource { arn, tags, new: false }
}
