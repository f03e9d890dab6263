//! The teardown of a cluster that ran: what its controllers made in the account — EBS volumes
//! with the CSI driver's marks (one still attached to its node), a snapshot, a network interface
//! the VPC CNI left available in its subnet, the image registry's versioned bucket full of object versions and
//! delete markers — goes with it; another cluster's volume and bucket, an untagged volume and
//! snapshot, a bucket with the registry's name but not the cluster's tag stay. A volume on an instance that is not the cluster's pauses the teardown naming
//! it. And the teardown killed at every AWS call, before and after AWS acted, converges.

mod support;

use serde_json::json;
use support::aws::{AwsEnv as Env, ok};
use support::hypershift::{self, Cut};
use support::inventory::Inventory;
use support::look_alikes::{self, LookAlikes};
use support::proxy::Proxy;
use support::sweep::Part;
use support::*;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};

fn owned_spec(kind: ResourceType, infra: &str) -> TagSpecification {
    let tag = Tag::builder().key(format!("kubernetes.io/cluster/{infra}")).value("owned").build();
    TagSpecification::builder().resource_type(kind).tags(tag).build()
}

/// What the cluster's own controllers write beside its ownership tag: the EBS CSI driver's
/// marks on its volumes and snapshots (the proof a teardown deletes them on).
fn driver_spec(kind: ResourceType, infra: &str) -> TagSpecification {
    let mark = match kind {
        ResourceType::Snapshot => ("CSIVolumeSnapshotName", "snapshot-0a1b2c"),
        _ => ("CSIVolumeName", "pvc-0a1b2c"),
    };
    let own = Tag::builder().key(format!("kubernetes.io/cluster/{infra}")).value("owned").build();
    let cluster = Tag::builder().key("ebs.csi.aws.com/cluster").value("true").build();
    let mark = Tag::builder().key(mark.0).value(mark.1).build();
    TagSpecification::builder().resource_type(kind).tags(own).tags(cluster).tags(mark).build()
}

/// What a running cluster's controllers leave, made straight on moto.
struct Ran {
    volumes: Vec<String>,
    snapshot: String,
    interfaces: Vec<String>,
    /// Bystanders: another cluster's volume, an untagged volume, an untagged snapshot; and the
    /// look-alikes (a backup snapshot, a restored volume, a volume tagged by hand).
    kept: Vec<String>,
    /// The registry's bucket (versioned, with objects).
    bucket: String,
    /// A bucket with this cluster's registry prefix but not its tag: left, and named.
    untagged_bucket: String,
    /// Bystander buckets: that one, and another cluster's registry if one was made.
    kept_buckets: Vec<String>,
    /// Look-alikes of the kinds found by the cluster's tag and its VPCs (`look_alikes`).
    outside: LookAlikes,
}

/// A registry bucket as the image registry operator makes one: versioned, tagged owned by
/// `tagged_for`, holding a layer written twice and then deleted (two versions and a delete marker).
fn registry_bucket(e: &Env, name: &str, tagged_for: Option<&str>) -> String {
    use aws_sdk_s3::types::{BucketVersioningStatus, Tag as S3Tag, Tagging, VersioningConfiguration};
    let s3 = &e.c.s3;
    empty_bucket(e, name);
    let on = VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled).build();
    e.c.block_on(s3.put_bucket_versioning().bucket(name).versioning_configuration(on).send()).unwrap();
    if let Some(infra) = tagged_for {
        let tag = S3Tag::builder().key(format!("kubernetes.io/cluster/{infra}")).value("owned").build().unwrap();
        let tagging = Tagging::builder().tag_set(tag).build().unwrap();
        e.c.block_on(s3.put_bucket_tagging().bucket(name).tagging(tagging).send()).unwrap();
    }
    let layer = "docker/registry/v2/blobs/a";
    for body in ["1", "2"] {
        let put = s3
            .put_object()
            .bucket(name)
            .key(layer)
            .body(aws_sdk_s3::primitives::ByteStream::from_static(body.as_bytes()));
        e.c.block_on(put.send()).unwrap();
    }
    e.c.block_on(s3.delete_object().bucket(name).key(layer).send()).unwrap();
    name.to_string()
}

/// A bucket with nothing in it and no tags.
fn empty_bucket(e: &Env, name: &str) -> String {
    e.c.block_on(e.c.s3.create_bucket().bucket(name).send()).unwrap();
    name.to_string()
}

/// The account's bucket names.
fn buckets(e: &Env) -> Vec<String> {
    let out = e.c.block_on(e.c.s3.list_buckets().send()).unwrap();
    out.buckets().iter().filter_map(|b| b.name().map(str::to_string)).collect()
}

/// A node of `infra` in `subnet` (tagged owned), as its node pool would run it.
fn node(e: &Env, infra: &str, subnet: &str) -> String {
    let out = e.c.block_on(
        e.c.ec2
            .run_instances()
            .image_id("ami-12c6146b")
            .instance_type(aws_sdk_ec2::types::InstanceType::M6iXlarge)
            .min_count(1)
            .max_count(1)
            .subnet_id(subnet)
            .tag_specifications(owned_spec(ResourceType::Instance, infra))
            .send(),
    );
    out.unwrap().instances()[0].instance_id().unwrap().to_string()
}

fn volume(e: &Env, tagged_for: Option<&str>) -> String {
    let mut call = e.c.ec2.create_volume().availability_zone("us-east-1a").size(10);
    if let Some(infra) = tagged_for {
        call = call.tag_specifications(driver_spec(ResourceType::Volume, infra));
    }
    e.c.block_on(call.send()).unwrap().volume_id().unwrap().to_string()
}

fn snapshot(e: &Env, volume: &str, tagged_for: Option<&str>) -> String {
    let mut call = e.c.ec2.create_snapshot().volume_id(volume);
    if let Some(infra) = tagged_for {
        call = call.tag_specifications(driver_spec(ResourceType::Snapshot, infra));
    }
    e.c.block_on(call.send()).unwrap().snapshot_id().unwrap().to_string()
}

fn interface(e: &Env, subnet: &str, tagged_for: Option<&str>) -> String {
    // Described as the AWS VPC CNI describes the interfaces it makes: a controller's proof.
    let mut call = e.c.ec2.create_network_interface().subnet_id(subnet).description("aws-K8S-i-0a1b2c3d4e5f60718");
    if let Some(infra) = tagged_for {
        call = call.tag_specifications(owned_spec(ResourceType::NetworkInterface, infra));
    }
    e.c.block_on(call.send()).unwrap().network_interface().unwrap().network_interface_id().unwrap().to_string()
}

fn attach(e: &Env, volume: &str, instance: &str) {
    e.c.block_on(e.c.ec2.attach_volume().volume_id(volume).instance_id(instance).device("/dev/sdf").send()).unwrap();
}

/// What a running cluster `infra` left in `subnet`, with `instance` its node; with
/// `another_registry`, also another cluster's registry bucket beside it.
fn what_it_ran(e: &Env, infra: &str, subnet: &str, instance: &str, another_registry: bool) -> Ran {
    let free = volume(e, Some(infra));
    let held = volume(e, Some(infra));
    attach(e, &held, instance);
    let snap = snapshot(e, &free, Some(infra));
    let tagged_eni = interface(e, subnet, Some(infra));
    let other = volume(e, Some("someone-else"));
    let untagged = volume(e, None);
    let untagged_snap = snapshot(e, &untagged, None);
    // Look-alikes carrying the cluster's tag without its maker's proof: Velero's backup of the
    // driver's volume (its tags copied), the volume Velero restored from it, a volume someone
    // tagged by hand. Left, every one, named under `left`.
    let own = |extra: &[(&str, &str)]| {
        let mut spec = TagSpecification::builder()
            .tags(Tag::builder().key(format!("kubernetes.io/cluster/{infra}")).value("owned").build());
        for (k, v) in extra {
            spec = spec.tags(Tag::builder().key(*k).value(*v).build());
        }
        spec
    };
    let backup = e.c.block_on(
        e.c.ec2
            .create_snapshot()
            .volume_id(&free)
            .tag_specifications(
                own(&[("CSIVolumeName", "pvc-0a1b2c"), ("velero.io/backup", "nightly")])
                    .resource_type(ResourceType::Snapshot)
                    .build(),
            )
            .send(),
    );
    let backup = backup.unwrap().snapshot_id().unwrap().to_string();
    let restored = e.c.block_on(
        e.c.ec2
            .create_volume()
            .availability_zone("us-east-1a")
            .snapshot_id(&backup)
            .tag_specifications(
                own(&[("CSIVolumeName", "pvc-0a1b2c"), ("velero.io/restore-name", "into-b")])
                    .resource_type(ResourceType::Volume)
                    .build(),
            )
            .send(),
    );
    let restored = restored.unwrap().volume_id().unwrap().to_string();
    let by_hand = e.c.block_on(
        e.c.ec2
            .create_volume()
            .availability_zone("us-east-1a")
            .size(1)
            .tag_specifications(own(&[]).resource_type(ResourceType::Volume).build())
            .send(),
    );
    let by_hand = by_hand.unwrap().volume_id().unwrap().to_string();
    // What carries the cluster's tag where no maker of the cluster's would have put it: a group,
    // load balancers, a target group and an instance in the default VPC, a zone of another
    // region's. Left, named.
    let outside = look_alikes::make(&e.c, infra, &format!("{infra}-la"));
    let bucket = registry_bucket(e, &format!("{infra}-image-registry-us-east-1-0a1b2c"), Some(infra));
    let untagged_bucket = empty_bucket(e, &format!("{infra}-image-registry-us-east-1-notours"));
    let mut kept_buckets = vec![untagged_bucket.clone()];
    if another_registry {
        let other = format!("x{infra}");
        kept_buckets.push(registry_bucket(e, &format!("{other}-image-registry-us-east-1-0a1b2c"), Some(&other)));
    }
    Ran {
        volumes: vec![free, held],
        snapshot: snap,
        interfaces: vec![tagged_eni],
        kept: vec![other, untagged, untagged_snap, backup, restored, by_hand],
        outside,
        bucket,
        untagged_bucket,
        kept_buckets,
    }
}

/// Which of `ids` (volumes, snapshots, interfaces, security groups) still exist on moto.
fn existing(e: &Env, ids: &[String]) -> Vec<String> {
    let ec2 = &e.c.ec2;
    let groups = e.c.block_on(ec2.describe_security_groups().send()).unwrap();
    let vols = e.c.block_on(ec2.describe_volumes().send()).unwrap();
    let snaps = e.c.block_on(ec2.describe_snapshots().owner_ids("self").send()).unwrap();
    let enis = e.c.block_on(ec2.describe_network_interfaces().send()).unwrap();
    let mut all: Vec<String> = vols.volumes().iter().filter_map(|v| v.volume_id().map(str::to_string)).collect();
    all.extend(snaps.snapshots().iter().filter_map(|s| s.snapshot_id().map(str::to_string)));
    all.extend(enis.network_interfaces().iter().filter_map(|n| n.network_interface_id().map(str::to_string)));
    all.extend(groups.security_groups().iter().filter_map(|g| g.group_id().map(str::to_string)));
    ids.iter().filter(|i| all.contains(i)).cloned().collect()
}

fn assert_ran_is_gone(e: &Env, infra: &str, ran: &Ran, what: &str) {
    let mut theirs = ran.volumes.clone();
    theirs.push(ran.snapshot.clone());
    theirs.extend(ran.interfaces.clone());
    assert_eq!(existing(e, &theirs), Vec::<String>::new(), "{what}: the cluster's volumes, snapshot, interfaces");
    assert_eq!(existing(e, &ran.kept), ran.kept, "{what}: bystanders untouched");
    assert_eq!(look_alikes::touched(&e.c, &ran.outside), Vec::<String>::new(), "{what}: look-alikes untouched");
    let buckets = buckets(e);
    assert!(!buckets.contains(&ran.bucket), "{what}: the registry's bucket is gone: {buckets:?}");
    for kept in &ran.kept_buckets {
        assert!(buckets.contains(kept), "{what}: bystander bucket {kept} kept: {buckets:?}");
    }
    let inv = Inventory::read(&e.c, infra);
    let look_alikes = ran.outside.ids();
    let left: Vec<String> =
        inv.ids().into_iter().filter(|id| !ran.kept.contains(id) && !look_alikes.contains(id)).collect();
    assert!(left.is_empty(), "{what}: {left:?} of {:?}", inv.counts());
}

#[test]
fn teardown_of_a_cluster_that_ran_removes_its_volumes_snapshots_interfaces_and_registry_bucket_and_nothing_else() {
    let e = Env::new();
    let p = e.input(
        "p.json",
        json!({"name": "ran", "infraID": "ran-abcde", "region": "us-east-1", "zones": ["us-east-1a"], "baseDomain": "example.com"}),
    );
    let infra = ok(&e.cli(&["run", "provision-infra", "--input", &p, "--id", "p"]));
    let subnet = infra["zones"][0]["subnetID"].as_str().unwrap().to_string();
    let n = e.input(
        "n.json",
        json!({"infraID": "ran-abcde", "nodePool": "ran-a", "replicas": 1, "subnetID": subnet, "instanceType": "m6i.xlarge",
               "imageID": "ami-12c6146b", "securityGroupIDs": [infra["securityGroupID"]], "region": "us-east-1"}),
    );
    let nodes = ok(&e.cli(&["run", "scale-nodepool", "--input", &n, "--id", "n"]));
    let instance = nodes["instanceIDs"][0].as_str().unwrap().to_string();
    let ran = what_it_ran(&e, "ran-abcde", &subnet, &instance, true);

    // A check of the cluster that ran: its node pool, its controllers' rules and what they made
    // are not drift; the volume and interface they left attached to nothing are leaks; nothing
    // of the look-alikes' is named.
    let check = e.cli(&["check", "--infra-id", "ran-abcde", "--region", "us-east-1", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(check.status.code(), Some(1), "{report:#}");
    assert_eq!(report["drift"], json!([]), "{report:#}");
    assert_eq!(report["holdUps"], json!([]), "{report:#}");
    let leaks: Vec<(&str, &str)> = report["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["kind"].as_str().unwrap(), l["id"].as_str().unwrap()))
        .collect();
    let want = vec![("network-interface", ran.interfaces[0].as_str()), ("volume", ran.volumes[0].as_str())];
    assert_eq!(leaks, want, "{report:#}");

    let td = e.input("td.json", json!({"infraID": "ran-abcde", "region": "us-east-1"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &td, "--dry-run", "--json"]));
    let planned: Vec<&str> = plan["delete"].as_array().unwrap().iter().filter_map(|d| d["id"].as_str()).collect();
    for id in ran.volumes.iter().chain(&ran.interfaces).chain([&ran.snapshot, &ran.bucket]) {
        assert!(planned.contains(&id.as_str()), "--dry-run lists {id}: {plan:#}");
    }
    let left: Vec<&str> = plan["leave"].as_array().unwrap().iter().filter_map(|l| l["id"].as_str()).collect();
    assert_eq!(left[0], ran.untagged_bucket.as_str(), "--dry-run names the untagged bucket it leaves: {plan:#}");
    let mut look_alikes = ran.kept[3..].to_vec();
    look_alikes.extend(ran.outside.ids());
    for id in &look_alikes {
        assert!(left.contains(&id.as_str()), "--dry-run names the look-alike {id} it leaves: {plan:#}");
    }
    assert_eq!(left.len(), 1 + look_alikes.len(), "{plan:#}");
    let out = ok(&e.cli(&["run", "teardown", "--input", &td, "--id", "down"]));
    let deleted = |kind: &str| -> Vec<String> {
        out["deleted"][kind].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect()
    };
    // The node's own interface (tagged at launch) may still be there when its turn comes: it
    // goes too. Every one of what the controllers made is named.
    for (kind, ids) in [("volume", &ran.volumes), ("network-interface", &ran.interfaces)] {
        for id in ids {
            assert!(deleted(kind).contains(id), "{kind} {id} deleted: {out:#}");
        }
    }
    assert_eq!(deleted("snapshot"), vec![ran.snapshot.clone()], "{out:#}");
    assert_eq!(deleted("registry-bucket"), vec![ran.bucket.clone()], "{out:#}");
    assert_eq!(out["left"][0]["id"], ran.untagged_bucket.as_str(), "the output names the bucket it left: {out:#}");
    assert!(out["left"][0]["reason"].as_str().unwrap().contains("not tagged"), "{out:#}");
    for id in &look_alikes {
        assert!(out["left"].to_string().contains(id.as_str()), "the output names the look-alike {id}: {out:#}");
    }
    assert_ran_is_gone(&e, "ran-abcde", &ran, "after teardown");
}

#[test]
fn a_volume_on_an_instance_that_is_not_the_clusters_pauses_the_teardown_naming_it() {
    let e = Env::new();
    let made = hypershift::make(&e.c, "vf-abcde", &["us-east-1a"], Cut::AfterFirstZoneSubnets);
    let vpc = e.c.create_vpc("10.7.0.0/16");
    let subnet = e.c.block_on(
        e.c.ec2.create_subnet().vpc_id(&vpc).cidr_block("10.7.0.0/24").availability_zone("us-east-1a").send(),
    );
    let subnet = subnet.unwrap().subnet().unwrap().subnet_id().unwrap().to_string();
    let theirs = node(&e, "someone-else", &subnet);
    let vol = volume(&e, Some("vf-abcde"));
    attach(&e, &vol, &theirs);
    let td = e.input("td.json", json!({"infraID": "vf-abcde", "region": "us-east-1"}));
    let out = e.cli(&["run", "teardown", "--input", &td, "--id", "down"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("down");
    assert_eq!(st["state"], "paused", "{st:#}");
    let why = st.to_string();
    assert!(why.contains(&vol) && why.contains(&theirs), "{st:#}");
    assert_eq!(existing(&e, std::slice::from_ref(&vol)), vec![vol.clone()], "the volume is left");
    let described = e.c.block_on(e.c.ec2.describe_volumes().volume_ids(&vol).send()).unwrap();
    let attached: Vec<&str> = described.volumes()[0].attachments().iter().filter_map(|a| a.instance_id()).collect();
    assert_eq!(attached, vec![theirs.as_str()], "still on their instance");
    assert_eq!(Inventory::read(&e.c, "vf-abcde").vpcs.len(), 1, "nothing after it deleted: {made:?}");
}

#[test]
fn a_tagged_resource_of_a_kind_teardown_does_not_delete_pauses_it_naming_its_arn() {
    let e = Env::new();
    hypershift::make(&e.c, "lc-abcde", &["us-east-1a"], Cut::AfterVpc);
    let cgw = e.c.block_on(
        e.c.ec2
            .create_customer_gateway()
            .r#type(aws_sdk_ec2::types::GatewayType::Ipsec1)
            .public_ip("192.0.2.10")
            .bgp_asn(65000)
            .tag_specifications(owned_spec(ResourceType::CustomerGateway, "lc-abcde"))
            .send(),
    );
    let cgw = cgw.unwrap().customer_gateway().unwrap().customer_gateway_id().unwrap().to_string();
    // A bucket of the cluster's that is not its registry's: teardown deletes buckets by name and tag.
    let logs = registry_bucket(&e, "lc-abcde-logs", Some("lc-abcde"));
    let td = e.input("td.json", json!({"infraID": "lc-abcde", "region": "us-east-1"}));
    let plan = ok(&e.cli(&["run", "teardown", "--input", &td, "--dry-run", "--json"]));
    let left: Vec<&str> = plan["leave"].as_array().unwrap().iter().filter_map(|l| l["id"].as_str()).collect();
    assert!(left.iter().any(|l| l.ends_with(&format!("customer-gateway/{cgw}"))), "{plan:#}");
    assert!(left.contains(&format!("arn:aws:s3:::{logs}").as_str()), "{plan:#}");
    let out = e.cli(&["run", "teardown", "--input", &td, "--id", "down"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let st = e.s.status("down");
    assert_eq!(st["state"], "paused", "{st:#}");
    assert!(st.to_string().contains(&format!("customer-gateway/{cgw}")), "names the ARN: {st:#}");
    assert!(st.to_string().contains(&format!("arn:aws:s3:::{logs}")), "names the bucket's ARN: {st:#}");
    assert!(buckets(&e).contains(&logs), "the bucket is left");
    assert_eq!(Inventory::read(&e.c, "lc-abcde").total(), 0, "what it knows is deleted before it pauses");
    // The operator takes them out of the cluster (deleted or untagged): the retry completes.
    let key = Tag::builder().key("kubernetes.io/cluster/lc-abcde").build();
    e.c.block_on(e.c.ec2.delete_tags().resources(&cgw).tags(key).send()).unwrap();
    e.c.block_on(e.c.s3.delete_bucket_tagging().bucket(&logs).send()).unwrap();
    let again = e.cli(&["retry", "down"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(e.s.status("down")["state"], "completed");
}

/// SIGKILL at every AWS call of the teardown of a cluster that ran (before the call reaches AWS,
/// or after AWS acted), each kill's resume killed at the next call (`sweep::chain`), until a run
/// finishes: nothing of the cluster left, bystanders kept.
fn ran_teardown_sweep(after_aws_acts: bool) {
    let tag = if after_aws_acts { "a" } else { "b" };
    let world = || {
        let e = Env::new();
        let proxy = Proxy::start(e.moto.port);
        (e, proxy)
    };
    let run = |(e, proxy): &(Env, Proxy), name: &str, part: Option<&Part>| {
        let infra = format!("{name}-abcde");
        // The least of a cluster that can run a node (a VPC and a subnet of its own): the sweep's
        // kills are spent on what a running cluster leaves, which the other sweeps do not meet.
        let made = hypershift::make(&e.c, &infra, &["us-east-1a"], Cut::AfterVpc);
        let subnet = e.c.block_on(
            e.c.ec2
                .create_subnet()
                .vpc_id(&made["vpc"])
                .cidr_block("10.0.0.0/24")
                .availability_zone("us-east-1a")
                .tag_specifications(owned_spec(ResourceType::Subnet, &infra))
                .send(),
        );
        let subnet = subnet.unwrap().subnet().unwrap().subnet_id().unwrap().to_string();
        let instance = node(e, &infra, &subnet);
        let ran = what_it_ran(e, &infra, &subnet, &instance, false);
        let td = e.input(&format!("{name}-td.json"), json!({"infraID": infra, "region": "us-east-1"}));
        let args = ["run", "teardown", "--input", td.as_str(), "--id", name];
        let killed = part.map(|part| support::sweep::chain(e, proxy, part, &args));
        // The clean run's calls are held to the teardown's policies (`cli_at`); after a chain, the
        // same command reads the finished run's output.
        let out = ok(&e.cli_at(&proxy.endpoint(), &args));
        assert_eq!(out["infraID"], infra.as_str());
        assert_ran_is_gone(e, &infra, &ran, &format!("{part:?}"));
        killed.unwrap_or_default()
    };
    let first = world();
    first.1.reset_counts();
    run(&first, &format!("clean{tag}"), None);
    let clean = first.1.counts();
    let calls: u32 = clean.values().sum();
    assert!(calls > 20, "a teardown of a cluster that ran makes dozens of calls, counted {calls}");
    support::sweep::every_call_chained(&clean, after_aws_acts, first, world, |w, part| {
        run(w, &format!("k{}{tag}", part.index), Some(part))
    });
    eprintln!("teardown of a cluster that ran: killed at each of {calls} calls ({tag}): nothing left, bystanders kept");
}

#[test]
fn a_teardown_of_a_cluster_that_ran_killed_at_every_aws_call_before_it_reaches_aws_converges() {
    ran_teardown_sweep(false);
}

#[test]
fn a_teardown_of_a_cluster_that_ran_killed_at_every_aws_call_after_aws_acted_converges() {
    ran_teardown_sweep(true);
}
