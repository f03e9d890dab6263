//! Every kind of resource infraflow creates or deletes, in the order a teardown deletes them, with
//! what each waits for and how its ARN is written.

use serde::{Deserialize, Serialize};

/// Resource kinds: dependents before what they depend on (`TEARDOWN_ORDER` is the order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Instance,
    /// Karpenter's, of an AutoNode cluster (teardown only; infraflow creates none).
    LaunchTemplate,
    /// EBS volumes and snapshots, network interfaces: what a running cluster's controllers made
    /// (teardown only; infraflow creates none).
    Volume,
    Snapshot,
    /// The image registry's S3 bucket(s), by name prefix and ownership tag (teardown only).
    RegistryBucket,
    ClassicLoadBalancer,
    VpcEndpoint,
    EndpointService,
    LoadBalancer,
    TargetGroup,
    NatGateway,
    NetworkInterface,
    HostedZone,
    ElasticIp,
    RouteTable,
    SecurityGroup,
    Subnet,
    InternetGateway,
    Vpc,
    DhcpOptions,
    InstanceProfile,
    IamRole,
    OidcProvider,
}

impl Kind {
    pub const TEARDOWN_ORDER: [Kind; 23] = [
        Kind::Instance,
        // Nothing waits on a template, and AWS deletes one whatever it launched.
        Kind::LaunchTemplate,
        // After the instances that held them (their own volumes detached as they terminate).
        Kind::Volume,
        Kind::Snapshot,
        // Needs nothing else gone first, and nothing waits on it.
        Kind::RegistryBucket,
        Kind::ClassicLoadBalancer,
        Kind::VpcEndpoint,
        Kind::EndpointService,
        Kind::LoadBalancer,
        Kind::TargetGroup,
        Kind::NatGateway,
        // Left available by what used them (instances, the gateway); before subnets and groups.
        Kind::NetworkInterface,
        Kind::HostedZone,
        Kind::ElasticIp,
        Kind::RouteTable,
        Kind::SecurityGroup,
        Kind::Subnet,
        Kind::InternetGateway,
        // Before the VPC: its delete re-points the cluster's own VPC to the default options
        // first (moto also deletes a set with the VPC that used it, which AWS never does).
        Kind::DhcpOptions,
        Kind::Vpc,
        // IAM last, after the instances that used the profile: a profile loses its role before
        // it goes, a role its policies, and the provider outlives the roles that trust it.
        Kind::InstanceProfile,
        Kind::IamRole,
        Kind::OidcProvider,
    ];

    /// The service and resource type of this kind's ARNs (`ec2:vpc`), as the tagging API lists them.
    pub fn arn_type(self) -> &'static str {
        match self {
            Kind::Instance => "ec2:instance",
            Kind::LaunchTemplate => "ec2:launch-template",
            Kind::Volume => "ec2:volume",
            Kind::Snapshot => "ec2:snapshot",
            // `arn:aws:s3:::<bucket>`: S3's bucket ARNs name no resource type.
            Kind::RegistryBucket => "s3:",
            Kind::NetworkInterface => "ec2:network-interface",
            Kind::VpcEndpoint => "ec2:vpc-endpoint",
            Kind::EndpointService => "ec2:vpc-endpoint-service",
            Kind::NatGateway => "ec2:natgateway",
            Kind::ElasticIp => "ec2:elastic-ip",
            Kind::RouteTable => "ec2:route-table",
            Kind::SecurityGroup => "ec2:security-group",
            Kind::Subnet => "ec2:subnet",
            Kind::InternetGateway => "ec2:internet-gateway",
            Kind::DhcpOptions => "ec2:dhcp-options",
            Kind::Vpc => "ec2:vpc",
            Kind::ClassicLoadBalancer | Kind::LoadBalancer => "elasticloadbalancing:loadbalancer",
            Kind::TargetGroup => "elasticloadbalancing:targetgroup",
            Kind::HostedZone => "route53:hostedzone",
            Kind::InstanceProfile => "iam:instance-profile",
            Kind::IamRole => "iam:role",
            Kind::OidcProvider => "iam:oidc-provider",
        }
    }

    /// The kinds whose resources must be gone before one of this kind can be deleted (what holds
    /// it, or what AWS refuses to delete it under): a teardown deletes each kind as soon as these
    /// are done, everything else side by side. Each named kind comes earlier in `TEARDOWN_ORDER`.
    pub fn deleted_after(self) -> &'static [Kind] {
        use Kind::*;
        match self {
            // Nothing holds a hosted zone: records that point at a load balancer do not, and its
            // VPC association goes with it (Route53's 5 requests a second are a fleet's teardown
            // floor: its deletes start at once).
            Instance | LaunchTemplate | Snapshot | RegistryBucket | ClassicLoadBalancer | VpcEndpoint | DhcpOptions
            | HostedZone => &[],
            // Detached from the cluster's instances as they go (a root volume goes with its instance).
            Volume => &[Instance],
            // A service cannot go while endpoints are connected to it.
            EndpointService => &[VpcEndpoint],
            // A load balancer behind an endpoint service cannot go while the service exists.
            LoadBalancer => &[EndpointService],
            // In use by a load balancer's listener until the load balancer goes.
            TargetGroup => &[LoadBalancer],
            NatGateway => &[Instance],
            // Left available by what used them: instances, load balancers, endpoints, the NAT gateway.
            NetworkInterface => &[Instance, ClassicLoadBalancer, LoadBalancer, VpcEndpoint, NatGateway],
            // Released once the NAT gateway that held it is gone.
            ElasticIp => &[NatGateway, Instance],
            // A gateway endpoint holds routes in it.
            RouteTable => &[VpcEndpoint, NatGateway],
            SecurityGroup => &[Instance, ClassicLoadBalancer, LoadBalancer, VpcEndpoint, NetworkInterface],
            Subnet => {
                &[Instance, ClassicLoadBalancer, LoadBalancer, VpcEndpoint, NatGateway, NetworkInterface, RouteTable]
            }
            // A gateway cannot be detached while the VPC maps public addresses (a NAT gateway's).
            InternetGateway => &[NatGateway, ElasticIp, Instance, ClassicLoadBalancer, LoadBalancer, NetworkInterface],
            Vpc => &[
                Instance,
                ClassicLoadBalancer,
                VpcEndpoint,
                LoadBalancer,
                TargetGroup,
                NatGateway,
                NetworkInterface,
                HostedZone,
                RouteTable,
                SecurityGroup,
                Subnet,
                InternetGateway,
                DhcpOptions,
            ],
            // After the instances that used the profile; a role after the profiles holding it;
            // the provider outlives the roles that trust it.
            InstanceProfile => &[Instance],
            IamRole => &[Instance, InstanceProfile],
            OidcProvider => &[IamRole],
        }
    }

    /// What a running cluster's controllers make, and infraflow never does.
    pub fn left_by_a_running_cluster(self) -> bool {
        matches!(
            self,
            Kind::Volume | Kind::Snapshot | Kind::NetworkInterface | Kind::RegistryBucket | Kind::LaunchTemplate
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Instance => "instance",
            Kind::LaunchTemplate => "launch-template",
            Kind::Volume => "volume",
            Kind::Snapshot => "snapshot",
            Kind::RegistryBucket => "registry-bucket",
            Kind::NetworkInterface => "network-interface",
            Kind::ClassicLoadBalancer => "classic-load-balancer",
            Kind::VpcEndpoint => "vpc-endpoint",
            Kind::EndpointService => "endpoint-service",
            Kind::LoadBalancer => "load-balancer",
            Kind::TargetGroup => "target-group",
            Kind::NatGateway => "nat-gateway",
            Kind::HostedZone => "hosted-zone",
            Kind::ElasticIp => "elastic-ip",
            Kind::RouteTable => "route-table",
            Kind::SecurityGroup => "security-group",
            Kind::Subnet => "subnet",
            Kind::InternetGateway => "internet-gateway",
            Kind::Vpc => "vpc",
            Kind::DhcpOptions => "dhcp-options",
            Kind::InstanceProfile => "instance-profile",
            Kind::IamRole => "iam-role",
            Kind::OidcProvider => "oidc-provider",
        }
    }
}
