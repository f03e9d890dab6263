//! Look-alikes a teardown must leave: resources carrying a cluster's ownership tag where none of
//! its makers would have put them — a security group, a network load balancer, a target group, a
//! classic load balancer and an instance in the account's default VPC (copied tags, a tool that
//! tags everything), and a private zone infraflow made for the infraID in another region. Made straight on
//! moto; `intact` says which of them a teardown touched.

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use aws_sdk_elasticloadbalancingv2::types::{LoadBalancerTypeEnum, ProtocolEnum, Tag as ElbTag};

use super::moto::Clients;

pub struct LookAlikes {
    pub group: String,
    pub load_balancer: String,
    pub target_group: String,
    pub classic: String,
    pub instance: String,
    pub zone: String,
}

impl LookAlikes {
    /// Every id (ARNs for the ELB kinds, the classic's name), as `left` and `leave` name them.
    pub fn ids(&self) -> Vec<String> {
        [&self.group, &self.load_balancer, &self.target_group, &self.classic, &self.instance, &self.zone]
            .into_iter()
            .cloned()
            .collect()
    }
}

pub fn default_vpc(c: &Clients) -> String {
    let f = Filter::builder().name("isDefault").values("true").build();
    c.block_on(c.ec2.describe_vpcs().filters(f).send()).unwrap().vpcs()[0].vpc_id().unwrap().to_string()
}

fn default_subnet(c: &Clients, vpc: &str) -> String {
    let f = Filter::builder().name("vpc-id").values(vpc).build();
    c.block_on(c.ec2.describe_subnets().filters(f).send()).unwrap().subnets()[0].subnet_id().unwrap().to_string()
}

/// A network load balancer named `name` in `subnet`, tagged `tags`.
pub fn nlb(c: &Clients, name: &str, subnet: &str, tags: &[(&str, &str)]) -> String {
    let tags = tags.iter().map(|(k, v)| ElbTag::builder().key(*k).value(*v).build()).collect();
    let made = c.block_on(
        c.elb
            .create_load_balancer()
            .name(name)
            .r#type(LoadBalancerTypeEnum::Network)
            .subnets(subnet)
            .set_tags(Some(tags))
            .send(),
    );
    made.unwrap().load_balancers()[0].load_balancer_arn().unwrap().to_string()
}

/// One of each look-alike kind for `infra`, its names prefixed `prefix` (several may share an
/// account).
pub fn make(c: &Clients, infra: &str, prefix: &str) -> LookAlikes {
    let own = (format!("kubernetes.io/cluster/{infra}"), "owned".to_string());
    let owned = |kind: ResourceType| {
        let tag = Tag::builder().key(&own.0).value(&own.1).build();
        TagSpecification::builder().resource_type(kind).tags(tag).build()
    };
    let default = default_vpc(c);
    let subnet = default_subnet(c, &default);
    let group = c.block_on(
        c.ec2
            .create_security_group()
            .group_name(format!("{prefix}-copied-tags"))
            .description("tags copied from the cluster's")
            .vpc_id(&default)
            .tag_specifications(owned(ResourceType::SecurityGroup))
            .send(),
    );
    let group = group.unwrap().group_id().unwrap().to_string();
    let load_balancer = nlb(c, &format!("{prefix}-nlb"), &subnet, &[(&own.0, &own.1)]);
    let target_group = c.block_on(
        c.elb
            .create_target_group()
            .name(format!("{prefix}-tg"))
            .protocol(ProtocolEnum::Tcp)
            .port(443)
            .vpc_id(&default)
            .tags(ElbTag::builder().key(&own.0).value(&own.1).build())
            .send(),
    );
    let target_group = target_group.unwrap().target_groups()[0].target_group_arn().unwrap().to_string();
    let classic = format!("{prefix}-classic");
    let listener = aws_sdk_elasticloadbalancing::types::Listener::builder()
        .protocol("TCP")
        .load_balancer_port(443)
        .instance_port(30443)
        .build()
        .unwrap();
    let classic_tag = aws_sdk_elasticloadbalancing::types::Tag::builder().key(&own.0).value(&own.1).build().unwrap();
    c.block_on(
        c.classic
            .create_load_balancer()
            .load_balancer_name(&classic)
            .listeners(listener)
            .subnets(&subnet)
            .tags(classic_tag)
            .send(),
    )
    .unwrap();
    let instance = c.block_on(
        c.ec2
            .run_instances()
            .image_id("ami-12c6146b")
            .min_count(1)
            .max_count(1)
            .subnet_id(&subnet)
            .tag_specifications(owned(ResourceType::Instance))
            .send(),
    );
    let instance = instance.unwrap().instances()[0].instance_id().unwrap().to_string();
    let zone = zone_elsewhere(c, infra, prefix, &own);
    LookAlikes { group, load_balancer, target_group, classic, instance, zone }
}

/// A private zone infraflow made for the same infraID in us-west-2 (its marker, its tag),
/// serving a VPC there only: another region's cluster; a us-east-1 teardown never deletes it.
fn zone_elsewhere(c: &Clients, infra: &str, prefix: &str, own: &(String, String)) -> String {
    use aws_sdk_route53::types::{HostedZoneConfig, Tag as R53Tag, TagResourceType, Vpc, VpcRegion};
    let west = aws_sdk_ec2::Client::from_conf(
        c.ec2.config().to_builder().region(aws_sdk_ec2::config::Region::new("us-west-2")).build(),
    );
    let vpc = c.block_on(west.create_vpc().cidr_block("10.99.0.0/16").send()).unwrap();
    let vpc = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
    let made = c.block_on(
        c.r53
            .create_hosted_zone()
            .name(format!("{infra}.hypershift.local"))
            .caller_reference(format!("{prefix}-elsewhere"))
            .hosted_zone_config(
                HostedZoneConfig::builder()
                    .private_zone(true)
                    .comment(format!("infraflow:{infra}/private-zone created-by:west@0192"))
                    .build(),
            )
            .vpc(Vpc::builder().vpc_id(vpc).vpc_region(VpcRegion::UsWest2).build())
            .send(),
    );
    let zone = made.unwrap().hosted_zone().unwrap().id().trim_start_matches("/hostedzone/").to_string();
    c.block_on(
        c.r53
            .change_tags_for_resource()
            .resource_type(TagResourceType::Hostedzone)
            .resource_id(&zone)
            .add_tags(R53Tag::builder().key(&own.0).value(&own.1).build())
            .send(),
    )
    .unwrap();
    zone
}

/// Which of `made` a teardown took away or changed: deleted, or the instance no longer running.
pub fn touched(c: &Clients, made: &LookAlikes) -> Vec<String> {
    let mut gone = Vec::new();
    let groups = c.block_on(c.ec2.describe_security_groups().send()).unwrap();
    if !groups.security_groups().iter().any(|g| g.group_id() == Some(made.group.as_str())) {
        gone.push(made.group.clone());
    }
    let lbs = c.block_on(c.elb.describe_load_balancers().send()).unwrap();
    if !lbs.load_balancers().iter().any(|l| l.load_balancer_arn() == Some(made.load_balancer.as_str())) {
        gone.push(made.load_balancer.clone());
    }
    let tgs = c.block_on(c.elb.describe_target_groups().send()).unwrap();
    if !tgs.target_groups().iter().any(|g| g.target_group_arn() == Some(made.target_group.as_str())) {
        gone.push(made.target_group.clone());
    }
    if c.block_on(c.classic.describe_load_balancers().load_balancer_names(&made.classic).send()).is_err() {
        gone.push(made.classic.clone());
    }
    let reservations = c.block_on(c.ec2.describe_instances().instance_ids(&made.instance).send()).unwrap();
    let state = reservations.reservations()[0].instances()[0].state().and_then(|s| s.name()).cloned();
    if state != Some(aws_sdk_ec2::types::InstanceStateName::Running) {
        gone.push(made.instance.clone());
    }
    if c.block_on(c.r53.get_hosted_zone().id(&made.zone).send()).is_err() {
        gone.push(made.zone.clone());
    }
    gone
}
