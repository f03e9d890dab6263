//! The strict-AWS layer of the test proxy, checked through the real SDK against moto: each
//! behaviour does what AWS documents, so a test that passes in strict mode passes on AWS's terms.

mod support;

use std::time::Duration;

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{Filter, InstanceType};
use aws_sdk_route53::types::{Tag, TagResourceType};
use support::moto::{Clients, Moto};
use support::proxy::Proxy;
use support::strict::Strict;

fn strict() -> (Moto, Proxy, Clients) {
    let moto = Moto::start();
    let proxy = Proxy::start(moto.port);
    proxy.set_strict(Strict::all(Duration::from_millis(1500)));
    let c = Clients::new(&proxy.endpoint());
    (moto, proxy, c)
}

/// A VPC with one subnet in `cidr` (a /16 and its first /24), each past the consistency lag.
fn vpc_with_subnet(c: &Clients, cidr16: &str) -> String {
    let vpc = c.create_vpc(&format!("{cidr16}.0.0/16"));
    std::thread::sleep(Duration::from_millis(1600));
    let subnet = c
        .block_on(
            c.ec2
                .create_subnet()
                .vpc_id(&vpc)
                .cidr_block(format!("{cidr16}.0.0/24"))
                .availability_zone("us-east-1a")
                .send(),
        )
        .unwrap()
        .subnet()
        .unwrap()
        .subnet_id()
        .unwrap()
        .to_string();
    std::thread::sleep(Duration::from_millis(1600));
    subnet
}

#[test]
fn a_client_token_gets_its_first_answer_again_and_other_parameters_are_refused() {
    let (_moto, proxy, c) = strict();
    let run = |token: &str, kind: InstanceType| {
        c.block_on(
            c.ec2
                .run_instances()
                .image_id("ami-12c6146b")
                .instance_type(kind)
                .min_count(1)
                .max_count(1)
                .client_token(token)
                .send(),
        )
    };
    let first = run("t-1", InstanceType::T3Micro).unwrap();
    let again = run("t-1", InstanceType::T3Micro).unwrap();
    let id = |o: &aws_sdk_ec2::operation::run_instances::RunInstancesOutput| {
        o.instances()[0].instance_id().unwrap().to_string()
    };
    assert_eq!(id(&first), id(&again), "the same token and parameters: the original instance");
    let err = run("t-1", InstanceType::M5Large).unwrap_err();
    assert_eq!(err.code(), Some("IdempotentParameterMismatch"));
    assert_eq!(proxy.strict_effects().get("token-replayed"), Some(&1));
}

#[test]
fn a_caller_reference_is_never_accepted_twice_even_after_the_zone_is_deleted() {
    let (_moto, _proxy, c) = strict();
    let create = |name: &str| c.block_on(c.r53.create_hosted_zone().name(name).caller_reference("ref-1").send());
    let zone = create("a.example.com").unwrap().hosted_zone().unwrap().id().to_string();
    c.block_on(c.r53.delete_hosted_zone().id(&zone).send()).unwrap();
    let err = create("a.example.com").unwrap_err();
    assert!(err.as_service_error().is_some_and(|e| e.is_hosted_zone_already_exists()), "{err:?}");
}

#[test]
fn a_new_id_is_not_found_and_unlisted_until_it_is_consistent() {
    let (_moto, _proxy, c) = strict();
    let vpc = c.create_vpc("10.1.0.0/16");
    let listed = || {
        let out = c.block_on(c.ec2.describe_vpcs().send()).unwrap();
        out.vpcs().iter().any(|v| v.vpc_id() == Some(vpc.as_str()))
    };
    let modify = || {
        let on = aws_sdk_ec2::types::AttributeBooleanValue::builder().value(true).build();
        c.block_on(c.ec2.modify_vpc_attribute().vpc_id(&vpc).enable_dns_support(on).send())
    };
    assert!(!listed(), "hidden from Describe right after the create");
    assert_eq!(modify().unwrap_err().code(), Some("InvalidVpcID.NotFound"));
    std::thread::sleep(Duration::from_millis(1600));
    assert!(listed());
    modify().unwrap();
}

#[test]
fn an_opted_in_local_zone_is_listed_first_unless_zone_types_are_filtered() {
    let (_moto, _proxy, c) = strict();
    let all = c.block_on(c.ec2.describe_availability_zones().send()).unwrap();
    let first = &all.availability_zones()[0];
    assert_eq!(first.zone_type(), Some("local-zone"));
    assert!(first.zone_name().unwrap().contains("-bos-"));
    let filter = Filter::builder().name("zone-type").values("availability-zone").build();
    let azs = c.block_on(c.ec2.describe_availability_zones().filters(filter).send()).unwrap();
    assert!(azs.availability_zones().iter().all(|z| z.zone_type() != Some("local-zone")));
}

#[test]
fn route53_refuses_more_than_ten_tags_a_call_and_throttles_past_five_requests_a_second() {
    let (_moto, proxy, c) = strict();
    let zone = c
        .block_on(c.r53.create_hosted_zone().name("t.example.com").caller_reference("ref-t").send())
        .unwrap()
        .hosted_zone()
        .unwrap()
        .id()
        .trim_start_matches("/hostedzone/")
        .to_string();
    let tags: Vec<Tag> = (0..11).map(|i| Tag::builder().key(format!("k{i}")).value("v").build()).collect();
    let err = c
        .block_on(
            c.r53
                .change_tags_for_resource()
                .resource_type(TagResourceType::Hostedzone)
                .resource_id(&zone)
                .set_add_tags(Some(tags))
                .send(),
        )
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidInput"));
    for _ in 0..12 {
        let _ = c.block_on(c.r53.get_hosted_zone().id(&zone).send());
    }
    assert!(proxy.strict_effects().get("route53-throttled").is_some_and(|n| *n > 0), "{:?}", proxy.strict_effects());
}

#[test]
fn a_nat_gateway_comes_up_and_goes_away_slowly_and_keeps_its_address_and_subnet_meanwhile() {
    let (_moto, proxy, c) = strict();
    let subnet = vpc_with_subnet(&c, "10.2");
    let eip = c.block_on(c.ec2.allocate_address().send()).unwrap().allocation_id().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1600));
    let nat = c
        .block_on(c.ec2.create_nat_gateway().subnet_id(&subnet).allocation_id(&eip).send())
        .unwrap()
        .nat_gateway()
        .unwrap()
        .nat_gateway_id()
        .unwrap()
        .to_string();
    std::thread::sleep(Duration::from_millis(200));
    let state = || {
        let out = c.block_on(c.ec2.describe_nat_gateways().nat_gateway_ids(&nat).send());
        out.ok().and_then(|o| o.nat_gateways().first().and_then(|n| n.state()).map(|s| s.as_str().to_string()))
    };
    // Hidden at first (consistency), then pending, then available.
    let mut seen = Vec::new();
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        if let Some(s) = state() {
            if seen.last() != Some(&s) {
                seen.push(s.clone());
            }
            if s == "available" {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(seen.last().map(String::as_str), Some("available"), "{seen:?}");
    assert!(seen.contains(&"pending".to_string()), "{seen:?}");
    assert!(proxy.strict_effects().contains_key("nat-gateway-in-transition"));
    c.block_on(c.ec2.delete_nat_gateway().nat_gateway_id(&nat).send()).unwrap();
    assert_eq!(state().as_deref(), Some("deleting"));
    let release = c.block_on(c.ec2.release_address().allocation_id(&eip).send()).unwrap_err();
    assert_eq!(release.code(), Some("InvalidIPAddress.InUse"));
    let subnet_delete = c.block_on(c.ec2.delete_subnet().subnet_id(&subnet).send()).unwrap_err();
    assert_eq!(subnet_delete.code(), Some("DependencyViolation"));
    std::thread::sleep(Duration::from_millis(3100));
    assert_eq!(state().as_deref(), Some("deleted"));
    c.block_on(c.ec2.release_address().allocation_id(&eip).send()).unwrap();
    c.block_on(c.ec2.delete_subnet().subnet_id(&subnet).send()).unwrap();
}

#[test]
fn a_load_balancer_provisions_slowly_and_its_interfaces_outlive_it() {
    use aws_sdk_elasticloadbalancingv2::types::{LoadBalancerSchemeEnum, LoadBalancerStateEnum, LoadBalancerTypeEnum};
    let (_moto, proxy, c) = strict();
    let subnet = vpc_with_subnet(&c, "10.3");
    let lb = c
        .block_on(
            c.elb
                .create_load_balancer()
                .name("slow-nlb")
                .r#type(LoadBalancerTypeEnum::Network)
                .scheme(LoadBalancerSchemeEnum::Internal)
                .subnets(&subnet)
                .send(),
        )
        .unwrap();
    let arn = lb.load_balancers()[0].load_balancer_arn().unwrap().to_string();
    let state = || {
        let o = c.block_on(c.elb.describe_load_balancers().load_balancer_arns(&arn).send()).unwrap();
        o.load_balancers()[0].state().and_then(|s| s.code()).cloned()
    };
    assert_eq!(state(), Some(LoadBalancerStateEnum::Provisioning));
    std::thread::sleep(Duration::from_millis(3100));
    assert_eq!(state(), Some(LoadBalancerStateEnum::Active));
    c.block_on(c.elb.delete_load_balancer().load_balancer_arn(&arn).send()).unwrap();
    let early = c.block_on(c.ec2.delete_subnet().subnet_id(&subnet).send()).unwrap_err();
    assert_eq!(early.code(), Some("DependencyViolation"), "the load balancer's interfaces still hold it");
    assert!(proxy.strict_effects().contains_key("interfaces-linger"));
    std::thread::sleep(Duration::from_millis(6100));
    let later = c.block_on(c.ec2.delete_subnet().subnet_id(&subnet).send()).unwrap_err();
    assert_eq!(later.code(), Some("DependencyViolation"), "longer than a NAT gateway takes to go");
    std::thread::sleep(Duration::from_millis(6100));
    c.block_on(c.ec2.delete_subnet().subnet_id(&subnet).send()).unwrap();
}

#[test]
fn a_new_instance_is_pending_before_it_runs() {
    let (_moto, proxy, c) = strict();
    let out = c
        .block_on(
            c.ec2
                .run_instances()
                .image_id("ami-12c6146b")
                .instance_type(InstanceType::T3Micro)
                .min_count(1)
                .max_count(1)
                .send(),
        )
        .unwrap();
    let id = out.instances()[0].instance_id().unwrap().to_string();
    let state = || {
        let o = c.block_on(c.ec2.describe_instances().instance_ids(&id).send()).ok()?;
        let i = o.reservations().first()?.instances().first()?.clone();
        i.state().and_then(|s| s.name()).map(|n| n.as_str().to_string())
    };
    assert_eq!(state().as_deref(), Some("pending"));
    assert!(proxy.strict_effects().contains_key("instance-pending"));
    std::thread::sleep(Duration::from_millis(3100));
    assert_eq!(state().as_deref(), Some("running"));
}

/// IAM's propagation delay, as the SDK sees it: a new role and a new instance profile read as
/// the typed `NoSuchEntity` errors, and EC2 refuses to launch with the profile (an invalid
/// `iamInstanceProfile.name`), until the delay is over; then all three work.
#[test]
fn a_new_role_and_instance_profile_are_not_found_and_not_launchable_until_iam_propagates() {
    let (_moto, proxy, c) = strict();
    let lag = Duration::from_millis(4500); // Strict::all(1.5 s) gives IAM three times the EC2 lag
    let subnet = vpc_with_subnet(&c, "10.7");
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    c.block_on(c.iam.create_role().role_name("p-worker-role").assume_role_policy_document(trust).send()).unwrap();
    c.block_on(c.iam.create_instance_profile().instance_profile_name("p-worker").send()).unwrap();
    c.block_on(
        c.iam.add_role_to_instance_profile().instance_profile_name("p-worker").role_name("p-worker-role").send(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let role = c.block_on(c.iam.get_role().role_name("p-worker-role").send()).unwrap_err().into_service_error();
    assert!(role.is_no_such_entity_exception(), "{role:?}");
    let profile = c
        .block_on(c.iam.get_instance_profile().instance_profile_name("p-worker").send())
        .unwrap_err()
        .into_service_error();
    assert!(profile.is_no_such_entity_exception(), "{profile:?}");
    let launch = || {
        c.block_on(
            c.ec2
                .run_instances()
                .image_id("ami-12c6146b")
                .instance_type(InstanceType::T3Micro)
                .min_count(1)
                .max_count(1)
                .subnet_id(&subnet)
                .iam_instance_profile(
                    aws_sdk_ec2::types::IamInstanceProfileSpecification::builder().name("p-worker").build(),
                )
                .send(),
        )
    };
    // (Skipped only if this thread stalled for seconds: then the delay is over.)
    if started.elapsed() < lag - Duration::from_millis(500) {
        let refused = launch().unwrap_err();
        assert_eq!(refused.code(), Some("InvalidParameterValue"), "{refused:?}");
        assert!(refused.message().unwrap_or_default().contains("iamInstanceProfile.name"), "{refused:?}");
    }
    std::thread::sleep(lag.saturating_sub(started.elapsed()) + Duration::from_millis(200));
    assert!(c.block_on(c.iam.get_role().role_name("p-worker-role").send()).is_ok());
    assert!(c.block_on(c.iam.get_instance_profile().instance_profile_name("p-worker").send()).is_ok());
    assert!(launch().is_ok(), "launchable once IAM has propagated");
    assert!(proxy.strict_effects().get("iam-not-yet-propagated").is_some_and(|n| *n >= 2));
}
