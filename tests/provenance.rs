//! Delete on proof of provenance, never on resemblance (review SAFETY-F393541, F1–F8), on moto:
//! a forged or copied expiry never expires a live cluster (only its anchor's date counts, also
//! in HyperShift CI's format); adoption never dates what it finds and a part refuses `expiresIn`;
//! a role workflow of the cluster in the daemon's own account makes it active; a sweep's teardown
//! of a cluster re-dated since deletes nothing; a teardown in the wrong region leaves the
//! cluster's private zones and a provision there refuses them; backups, restored volumes and a
//! volume without its driver's mark are left and named while the driver's go; a volume of two
//! clusters and a person's interface pause the teardown naming them, and are never deleted.

mod support;

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::hypershift::{self, Cut};
use support::inventory::Inventory;
use support::*;

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// `date -u` of `t` in `format` (an implementation that is not the one under test).
fn date(t: i64, format: &str) -> String {
    let out = Command::new("date").args(["-u", "-d", &format!("@{t}"), format]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn tags(pairs: &[(&str, &str)]) -> Vec<Tag> {
    pairs.iter().map(|(k, v)| Tag::builder().key(*k).value(*v).build()).collect()
}

fn spec(kind: ResourceType, pairs: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder().resource_type(kind).set_tags(Some(tags(pairs))).build()
}

fn provision(e: &Env, infra: &str, extra: Value) -> Value {
    let mut input = json!({"name": infra.split('-').next().unwrap(), "infraID": infra, "region": "us-east-1",
                           "zones": ["us-east-1a"], "baseDomain": "example.com"});
    for (k, v) in extra.as_object().unwrap() {
        input[k] = v.clone();
    }
    let path = e.input(&format!("{infra}-{}.json", now_nanos()), input);
    ok(&e.cli(&["run", "provision-infra", "--input", &path]))
}

fn now_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

fn sweep_dry(e: &Env) -> Vec<Value> {
    ok(&e.cli(&["sweep", "--region", "us-east-1", "--dry-run", "--json"])).as_array().unwrap().clone()
}

fn swept<'a>(all: &'a [Value], infra: &str) -> &'a Value {
    all.iter().find(|s| s["infraID"] == infra).unwrap_or_else(|| panic!("{infra} not swept: {all:#?}"))
}

fn ec2_tag_keys(e: &Env, id: &str) -> Vec<String> {
    let out =
        e.c.block_on(e.c.ec2.describe_tags().filters(Filter::builder().name("resource-id").values(id).build()).send());
    out.unwrap().tags().iter().filter_map(|t| t.key().map(str::to_string)).collect()
}

fn zone_tag_keys(e: &Env, zone: &str) -> Vec<String> {
    use aws_sdk_route53::types::TagResourceType;
    let out = e
        .c
        .block_on(e.c.r53.list_tags_for_resource().resource_type(TagResourceType::Hostedzone).resource_id(zone).send());
    let out = out.unwrap();
    out.resource_tag_set()
        .map(|s| s.tags().iter().filter_map(|t| t.key().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn zone_exists(e: &Env, zone: &str) -> bool {
    e.c.block_on(e.c.r53.get_hosted_zone().id(zone).send()).is_ok()
}

fn default_vpc(e: &Env) -> String {
    look_alikes::default_vpc(&e.c)
}

#[test]
fn a_forged_expiry_a_part_and_a_second_run_never_expire_a_live_cluster_and_hypershift_cis_date_is_read() {
    let e = Env::new();
    let out = provision(&e, "vic-abcde", json!({}));
    let vpc = out["vpcID"].as_str().unwrap().to_string();
    let private_zone = out["privateZoneID"].as_str().unwrap().to_string();
    // F1: one group anywhere in the region with the cluster's tag and a past date.
    let past = date(now() - 3_600, "+%Y-%m-%dT%H:%M:%SZ");
    let dv = default_vpc(&e);
    let sg = e.c.block_on(e.c.ec2.create_security_group().group_name("innocent").description("x").vpc_id(&dv).send());
    let sg = sg.unwrap().group_id().unwrap().to_string();
    let forged = tags(&[("kubernetes.io/cluster/vic-abcde", "owned"), ("expirationDate", &past)]);
    e.c.block_on(e.c.ec2.create_tags().resources(&sg).set_tags(Some(forged)).send()).unwrap();

    // F2: the cluster's own input run again with expiresIn adopts everything and dates nothing.
    provision(&e, "vic-abcde", json!({"expiresIn": "1m"}));
    assert!(!ec2_tag_keys(&e, &vpc).contains(&"expirationDate".to_string()), "the VPC was dated by an adopter");
    assert!(!zone_tag_keys(&e, &private_zone).contains(&"expirationDate".to_string()), "the zone was dated");
    // ... and a part (a node pool) refuses expiresIn: a cluster expires as a whole.
    let s = e.input(
        "pool.json",
        json!({"infraID": "vic-abcde", "nodePool": "burst", "replicas": 1, "subnetID": out["zones"][0]["subnetID"],
               "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b", "securityGroupIDs": [out["securityGroupID"]],
               "region": "us-east-1", "expiresIn": "6h"}),
    );
    let refused = e.cli(&["run", "scale-nodepool", "--input", &s, "--id", "burst"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("expiresIn"), "{}", stderr(&refused));
    assert!(e.s.cli(&["status", "burst"]).status.code() != Some(0), "nothing journaled");

    // HyperShift CI's cluster, dated as its CI dates it (`date --iso=minutes --utc`), expired.
    let ci = hypershift::make(&e.c, "ci-abcde", &["us-east-1a"], Cut::AfterFirstZoneSubnets);
    let ci_date = date(now() - 7_200, "+%Y-%m-%dT%H:%M+00:00");
    e.c.block_on(
        e.c.ec2.create_tags().resources(&ci["vpc"]).set_tags(Some(tags(&[("expirationDate", &ci_date)]))).send(),
    )
    .unwrap();

    let all = sweep_dry(&e);
    let vic = swept(&all, "vic-abcde");
    assert_eq!(vic["class"], "unexpired", "{vic:#}");
    assert!(vic["ignored"].to_string().contains(&sg), "the forged date is named as ignored: {vic:#}");
    let ci_swept = swept(&all, "ci-abcde");
    assert_eq!(ci_swept["class"], "expired", "{ci_swept:#}");
    assert!(ci_swept["reason"].as_str().unwrap().contains(&ci["vpc"]), "{ci_swept:#}");

    // F6: a workflow of ci-abcde under a role of this very account (123456789012), queued.
    let role = "arn:aws:iam::123456789012:role/infraflow";
    let r = e.input(
        "role.json",
        json!({"name": "ci", "infraID": "ci-abcde", "region": "us-east-1", "zones": ["us-east-1a"],
               "baseDomain": "example.com", "roleARN": role}),
    );
    ok_text(&e.cli(&["submit", "provision-infra", "--input", &r, "--id", "queued-under-role"]));
    let all = sweep_dry(&e);
    assert_eq!(swept(&all, "ci-abcde")["class"], "active", "{all:#?}");
    let real = e.cli(&["sweep", "--region", "us-east-1"]);
    assert!(real.status.success(), "{}", stderr(&real));
    assert_eq!(stdout(&real).trim(), "", "no teardown submitted: {}", stderr(&real));
    assert_eq!(Inventory::read(&e.c, "vic-abcde").counts().get("vpc"), Some(&1));
}

#[test]
fn a_sweeps_teardown_of_a_cluster_re_dated_since_the_sweep_deletes_nothing() {
    let e = Env::new();
    let made = hypershift::make(&e.c, "ext-abcde", &["us-east-1a"], Cut::AfterFirstZoneSubnets);
    let past = date(now() - 3_600, "+%Y-%m-%dT%H:%M:%SZ");
    e.c.block_on(
        e.c.ec2.create_tags().resources(&made["vpc"]).set_tags(Some(tags(&[("expirationDate", &past)]))).send(),
    )
    .unwrap();
    let before = Inventory::read(&e.c, "ext-abcde").total();
    let submitted = ok_text(&e.cli(&["sweep", "--region", "us-east-1"]));
    let id = submitted.trim().to_string();
    assert!(id.starts_with("sweep-ext-abcde-"), "{submitted}");
    let input = e.s.status(&id)["input"].clone();
    assert_eq!(input["sweptExpired"]["anchorId"], made["vpc"], "the evidence travels: {input:#}");
    // The owner extends the cluster before any daemon ran the teardown.
    let later = tags(&[("expirationDate", "2099-01-01T00:00:00Z")]);
    e.c.block_on(e.c.ec2.create_tags().resources(&made["vpc"]).set_tags(Some(later)).send()).unwrap();
    let path = e.input("t.json", input);
    let out = ok(&e.cli(&["run", "teardown", "--input", &path, "--id", &id]));
    assert!(out["stopped"].as_str().unwrap_or_default().contains("2099"), "{out:#}");
    assert!(out["deleted"].as_object().unwrap().is_empty(), "{out:#}");
    assert_eq!(Inventory::read(&e.c, "ext-abcde").total(), before, "the cluster is whole");
}

fn ok_text(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", stderr(o));
    stdout(o)
}

#[test]
fn a_teardown_naming_another_region_leaves_the_clusters_zones_and_a_provision_there_refuses_them() {
    let e = Env::new();
    let out = provision(&e, "rg-abcde", json!({}));
    let zones = [out["privateZoneID"].as_str().unwrap().to_string(), out["localZoneID"].as_str().unwrap().to_string()];
    let t = e.input("t.json", json!({"infraID": "rg-abcde", "region": "us-west-2"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &t, "--dry-run", "--json"]));
    for z in &zones {
        assert!(!plan["delete"].to_string().contains(z.as_str()), "{plan:#}");
        assert!(plan["leave"].to_string().contains(z.as_str()), "named under leave: {plan:#}");
    }
    let done = ok(&e.cli(&["run", "teardown", "--input", &t, "--id", "wrong-region"]));
    for z in &zones {
        assert!(zone_exists(&e, z), "zone {z} deleted from another region: {done:#}");
        assert!(done["left"].to_string().contains(z.as_str()), "{done:#}");
    }
    // The same infraID provisioned in us-west-2 never takes us-east-1's zones.
    let w = e.input(
        "w.json",
        json!({"name": "rg", "infraID": "rg-abcde", "region": "us-west-2", "zones": ["us-west-2a"], "baseDomain": "example.com"}),
    );
    let paused = e.cli(&["run", "provision-infra", "--input", &w, "--id", "west", "--no-rollback"]);
    assert!(!paused.status.success(), "{}", stdout(&paused));
    assert!(stderr(&paused).contains("serves"), "{}", stderr(&paused));
    for z in &zones {
        assert!(!zone_tag_keys(&e, z).iter().any(|k| k.starts_with("infraflow.io/adopted-by")), "zone {z} was taken");
    }
    assert_eq!(Inventory::read(&e.c, "rg-abcde").counts().get("vpc"), Some(&1), "east's VPC is whole");
}

/// A volume made as `tags` say, in us-east-1a.
fn volume(e: &Env, pairs: &[(&str, &str)], snapshot: Option<&str>) -> String {
    let mut call = e.c.ec2.create_volume().availability_zone("us-east-1a").size(1);
    call = call.tag_specifications(spec(ResourceType::Volume, pairs));
    if let Some(s) = snapshot {
        call = call.snapshot_id(s);
    }
    e.c.block_on(call.send()).unwrap().volume_id().unwrap().to_string()
}

fn snapshot(e: &Env, volume: &str, pairs: &[(&str, &str)]) -> String {
    let call = e.c.ec2.create_snapshot().volume_id(volume).tag_specifications(spec(ResourceType::Snapshot, pairs));
    e.c.block_on(call.send()).unwrap().snapshot_id().unwrap().to_string()
}

fn exists_volume(e: &Env, id: &str) -> bool {
    let out = e.c.block_on(e.c.ec2.describe_volumes().volume_ids(id).send());
    out.is_ok_and(|o| !o.volumes().is_empty())
}

fn exists_snapshot(e: &Env, id: &str) -> bool {
    let out = e.c.block_on(e.c.ec2.describe_snapshots().snapshot_ids(id).send());
    out.is_ok_and(|o| !o.snapshots().is_empty())
}

#[test]
fn backups_restored_volumes_and_unmarked_volumes_are_left_and_named_while_the_drivers_go() {
    let e = Env::new();
    let out = provision(&e, "bk-abcde", json!({}));
    let subnet = out["zones"][0]["subnetID"].as_str().unwrap().to_string();
    let group = out["securityGroupID"].as_str().unwrap().to_string();
    let own = ("kubernetes.io/cluster/bk-abcde", "owned");
    let csi = volume(&e, &[own, ("CSIVolumeName", "pvc-1"), ("ebs.csi.aws.com/cluster", "true")], None);
    let csi_snap =
        snapshot(&e, &csi, &[own, ("CSIVolumeSnapshotName", "snapshot-1"), ("ebs.csi.aws.com/cluster", "true")]);
    // Velero's backup of the CSI volume (its tags copied) and the volume restored from it.
    let backup = snapshot(&e, &csi, &[own, ("CSIVolumeName", "pvc-1"), ("velero.io/backup", "nightly")]);
    let restored = volume(&e, &[own, ("CSIVolumeName", "pvc-1"), ("velero.io/restore-name", "into-b")], Some(&backup));
    let unmarked = volume(&e, &[own], None);
    // The VPC CNI's interface, left available and tagged as the cluster's.
    let eni = e.c.block_on(
        e.c.ec2
            .create_network_interface()
            .subnet_id(&subnet)
            .groups(&group)
            .description("aws-K8S-i-0123456789abcdef0")
            .tag_specifications(spec(ResourceType::NetworkInterface, &[own]))
            .send(),
    );
    let eni = eni.unwrap().network_interface().unwrap().network_interface_id().unwrap().to_string();

    let t = e.input("t.json", json!({"infraID": "bk-abcde", "region": "us-east-1"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &t, "--dry-run", "--json"]));
    for kept in [&backup, &restored, &unmarked] {
        assert!(plan["leave"].to_string().contains(kept.as_str()), "{kept} not under leave: {plan:#}");
        assert!(!plan["delete"].to_string().contains(kept.as_str()), "{plan:#}");
    }
    let done = ok(&e.cli(&["run", "teardown", "--input", &t, "--id", "down"]));
    for kept in [&restored, &unmarked] {
        assert!(exists_volume(&e, kept), "volume {kept} deleted: {done:#}");
    }
    assert!(exists_snapshot(&e, &backup), "the backup was deleted: {done:#}");
    let left = done["left"].to_string();
    assert!(left.contains(&backup) && left.contains("velero.io/backup"), "{done:#}");
    assert!(left.contains(&restored) && left.contains(&unmarked), "{done:#}");
    assert!(!exists_volume(&e, &csi), "the driver's volume is the cluster's: {done:#}");
    assert!(!exists_snapshot(&e, &csi_snap), "the driver's snapshot is the cluster's: {done:#}");
    assert!(done["deleted"]["network-interface"].to_string().contains(&eni), "{done:#}");
    assert_eq!(Inventory::read(&e.c, "bk-abcde").total(), 0, "{done:#}");
}

#[test]
fn a_volume_of_two_clusters_and_a_persons_interface_pause_the_teardown_naming_them_and_survive() {
    let e = Env::new();
    let out = provision(&e, "da-abcde", json!({}));
    let subnet = out["zones"][0]["subnetID"].as_str().unwrap().to_string();
    let f = Filter::builder().name("vpc-id").values(default_vpc(&e)).build();
    let dsubnets = e.c.block_on(e.c.ec2.describe_subnets().filters(f).send()).unwrap();
    let other_subnet = dsubnets.subnets()[0].subnet_id().unwrap().to_string();
    let b = ("kubernetes.io/cluster/db-abcde", "owned");
    let node = e.c.block_on(
        e.c.ec2
            .run_instances()
            .image_id("ami-12c6146b")
            .min_count(1)
            .max_count(1)
            .subnet_id(&other_subnet)
            .tag_specifications(spec(ResourceType::Instance, &[b]))
            .send(),
    );
    let node = node.unwrap().instances()[0].instance_id().unwrap().to_string();
    let shared = volume(&e, &[("kubernetes.io/cluster/da-abcde", "owned"), b, ("CSIVolumeName", "pvc-moved")], None);
    e.c.block_on(e.c.ec2.attach_volume().volume_id(&shared).instance_id(&node).device("/dev/sdf").send()).unwrap();
    let person = e.c.block_on(
        e.c.ec2.create_network_interface().subnet_id(&subnet).description("licence server standby: keep").send(),
    );
    let person = person.unwrap().network_interface().unwrap().network_interface_id().unwrap().to_string();

    let t = e.input("t.json", json!({"infraID": "da-abcde", "region": "us-east-1", "maxDeleteAttempts": 2}));
    let first = e.cli(&["run", "teardown", "--input", &t, "--id", "down-a"]);
    assert!(!first.status.success());
    let said = e.s.status("down-a").to_string();
    assert_eq!(e.s.status("down-a")["state"], "paused", "{said}");
    assert!(said.contains(&person) && said.contains("licence server standby"), "names the interface: {said}");
    let n = e.c.block_on(e.c.ec2.describe_network_interfaces().network_interface_ids(&person).send()).unwrap();
    assert_eq!(n.network_interfaces().len(), 1, "the person's interface was deleted");
    assert_eq!(Inventory::read(&e.c, "da-abcde").counts().get("vpc"), Some(&1), "stopped before deleting: {said}");

    // Its owner removes it; the teardown goes on, and stops at the volume of two clusters.
    e.c.block_on(e.c.ec2.delete_network_interface().network_interface_id(&person).send()).unwrap();
    let second = e.cli(&["retry", "down-a"]);
    assert!(!second.status.success());
    let said = e.s.status("down-a").to_string();
    assert_eq!(e.s.status("down-a")["state"], "paused", "{said}");
    assert!(said.contains(&shared) && said.contains("da-abcde and db-abcde"), "{said}");
    let v = e.c.block_on(e.c.ec2.describe_volumes().volume_ids(&shared).send()).unwrap();
    assert_eq!(v.volumes()[0].attachments().len(), 1, "never detached from the other cluster's node");

    // The operator settles whose it is (B's): A's teardown completes and leaves it on B's node.
    let untag = Tag::builder().key("kubernetes.io/cluster/da-abcde").build();
    e.c.block_on(e.c.ec2.delete_tags().resources(&shared).tags(untag).send()).unwrap();
    let third = e.cli(&["retry", "down-a"]);
    assert!(third.status.success(), "{}", e.s.status("down-a"));
    let v = e.c.block_on(e.c.ec2.describe_volumes().volume_ids(&shared).send()).unwrap();
    assert_eq!(v.volumes()[0].attachments().len(), 1, "B's volume, still on B's node");
    assert_eq!(Inventory::read(&e.c, "da-abcde").total(), 0);
}

/// The rule's last rows: an instance, a security group, a load balancer and its target group and
/// a classic load balancer carry the cluster's ownership tag in the account's default VPC (copied
/// tags, a tool that tags everything), and a private zone of its name and tag serves only another
/// region's VPC. What the cloud provider, the NodePool machines and
/// infraflow make for a cluster lives in its VPCs, and HyperShift's destroy deletes by that
/// membership: these are left and named, the cluster's own load balancer in its VPC goes.
#[test]
fn what_carries_the_clusters_tag_outside_its_vpcs_is_left_and_named_while_its_own_load_balancer_goes() {
    let e = Env::new();
    let out = provision(&e, "lb-abcde", json!({}));
    let subnet = out["zones"][0]["subnetID"].as_str().unwrap().to_string();
    let default = default_vpc(&e);
    // The cloud provider's load balancer for a Service, in the cluster's subnet: the cluster's.
    let service = ("kubernetes.io/service-name", "openshift-ingress/router-default");
    let mine =
        look_alikes::nlb(&e.c, "a0123456789abcdef", &subnet, &[("kubernetes.io/cluster/lb-abcde", "owned"), service]);
    // The look-alikes: in the default VPC, and a zone of another region's.
    let made = look_alikes::make(&e.c, "lb-abcde", "theirs");
    let kept = made.ids();

    let t = e.input("t.json", json!({"infraID": "lb-abcde", "region": "us-east-1"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &t, "--dry-run", "--json"]));
    assert!(plan["delete"].to_string().contains(&mine), "{plan:#}");
    for id in &kept {
        assert!(plan["leave"].to_string().contains(id.as_str()), "{id} not under leave: {plan:#}");
        assert!(!plan["delete"].to_string().contains(id.as_str()), "{id} under delete: {plan:#}");
    }
    let done = ok(&e.cli(&["run", "teardown", "--input", &t, "--id", "down"]));
    let left = done["left"].to_string();
    for id in &kept {
        assert!(left.contains(id.as_str()), "{id} not named under left: {done:#}");
    }
    assert!(left.contains(&format!("is in {default}")), "{done:#}");
    assert_eq!(look_alikes::touched(&e.c, &made), Vec::<String>::new(), "look-alikes deleted or stopped");
    let lbs = e.c.block_on(e.c.elb.describe_load_balancers().send()).unwrap();
    let arns: Vec<&str> = lbs.load_balancers().iter().filter_map(|l| l.load_balancer_arn()).collect();
    assert!(!arns.contains(&mine.as_str()), "the cluster's own load balancer is gone: {arns:?}");
    let vpc = out["vpcID"].as_str().unwrap();
    let vpcs =
        e.c.block_on(e.c.ec2.describe_vpcs().filters(Filter::builder().name("vpc-id").values(vpc).build()).send());
    assert!(vpcs.unwrap().vpcs().is_empty(), "the cluster's VPC is gone: {done:#}");
}
