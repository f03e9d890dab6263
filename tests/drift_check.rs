//! Drift, black box: `infraflow check` on clusters provisioned on moto, then changed behind
//! infraflow's back as people and tools do (straight on moto), read with no write at the proxy;
//! `run provision-infra` repairing what it owns; the daemon's schedule on its metrics and page.

mod support;

use serde_json::{Value, json};
use support::aws::{AwsEnv as Env, ok};
use support::chain::is_change;
use support::*;

fn input(name: &str, infra: &str, public_only: bool) -> Value {
    json!({"name": name, "infraID": infra, "region": "us-east-1", "baseDomain": "example.com",
           "zones": ["us-east-1a"], "publicOnly": public_only})
}

/// The reads a command made at the proxy, and whether it made any write.
fn reads_and_writes(e: &Env) -> (u32, Vec<String>) {
    let counts = e.proxy.counts();
    let writes: Vec<String> = counts.keys().filter(|a| is_change(a)).cloned().collect();
    let reads = counts.iter().filter(|(a, _)| !is_change(a)).map(|(_, n)| n).sum();
    (reads, writes)
}

/// `infraflow check` of `infra`: its exit code and JSON report, with the calls it made.
fn check(e: &Env, infra: &str) -> (i32, Value, u32, Vec<String>) {
    e.proxy.reset_counts();
    let settle = format!("{}ms", e.proxy.consistency_settle().as_millis());
    let out =
        e.cli(&["--consistency-settle", &settle, "check", "--infra-id", infra, "--region", "us-east-1", "--json"]);
    let (reads, writes) = reads_and_writes(e);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("a report: {}", stderr(&out)));
    (out.status.code().unwrap(), report, reads, writes)
}

/// (kind, id) of each finding of a report's list.
fn listed(report: &Value, list: &str) -> Vec<(String, String)> {
    report[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["kind"].as_str().unwrap().to_string(), f["id"].as_str().unwrap().to_string()))
        .collect()
}

fn tagged(filter_value: &str) -> aws_sdk_ec2::types::Filter {
    aws_sdk_ec2::types::Filter::builder().name("tag:infraflow.io/identity").values(filter_value).build()
}

/// The SOA minimum of `zone` set to Route53's default day, as a person's edit would.
fn set_soa_minimum(e: &Env, zone: &str, name: &str, minimum: u64) {
    use aws_sdk_route53::types::{Change, ChangeAction, ChangeBatch, ResourceRecord, ResourceRecordSet, RrType};
    let out = e.c.block_on(e.c.r53.list_resource_record_sets().hosted_zone_id(zone).send()).unwrap();
    let soa = out.resource_record_sets().iter().find(|r| r.r#type().as_str() == "SOA").unwrap().clone();
    let value = soa.resource_records()[0].value();
    let mut fields: Vec<String> =
        value.trim_start_matches("{'Value': '").trim_end_matches("'}").split_whitespace().map(str::to_string).collect();
    fields[6] = minimum.to_string();
    let set = ResourceRecordSet::builder()
        .name(format!("{name}."))
        .r#type(RrType::Soa)
        .ttl(soa.ttl().unwrap_or(900))
        .resource_records(ResourceRecord::builder().value(fields.join(" ")).build().unwrap())
        .build()
        .unwrap();
    let change = Change::builder().action(ChangeAction::Upsert).resource_record_set(set).build().unwrap();
    e.c.block_on(
        e.c.r53
            .change_resource_record_sets()
            .hosted_zone_id(zone)
            .change_batch(ChangeBatch::builder().changes(change).build().unwrap())
            .send(),
    )
    .unwrap();
}

/// What `drift` changed.
struct Drifted {
    vpc: String,
    private_table: String,
    private_zone: String,
    group: String,
    foreign: String,
}

/// Changes a provisioned 1-zone cluster behind infraflow's back, straight on moto: a private
/// route deleted, the DHCP association undone, the private zone's SOA minimum set to a day, a
/// rule added to the worker group, someone else's subnet put in the VPC.
fn drift(e: &Env, infra: &str, made: &Value) -> Drifted {
    let vpc = made["vpcID"].as_str().unwrap().to_string();
    let tables = e.c.block_on(
        e.c.ec2.describe_route_tables().filters(tagged(&format!("{infra}/private-route-table/us-east-1a"))).send(),
    );
    let private_table = tables.unwrap().route_tables()[0].route_table_id().unwrap().to_string();
    e.c.block_on(e.c.ec2.delete_route().route_table_id(&private_table).destination_cidr_block("0.0.0.0/0").send())
        .unwrap();
    e.c.block_on(e.c.ec2.associate_dhcp_options().dhcp_options_id("default").vpc_id(&vpc).send()).unwrap();
    let private_zone = made["privateZoneID"].as_str().unwrap().to_string();
    let name = made["Name"].as_str().unwrap();
    set_soa_minimum(e, &private_zone, &format!("{name}.example.com"), 86400);
    let group = made["securityGroupID"].as_str().unwrap().to_string();
    let rule = aws_sdk_ec2::types::IpPermission::builder()
        .ip_protocol("tcp")
        .from_port(8080)
        .to_port(8080)
        .ip_ranges(aws_sdk_ec2::types::IpRange::builder().cidr_ip("192.168.0.0/16").build())
        .build();
    e.c.block_on(e.c.ec2.authorize_security_group_ingress().group_id(&group).ip_permissions(rule).send()).unwrap();
    let foreign = e.c.block_on(e.c.ec2.create_subnet().vpc_id(&vpc).cidr_block("10.0.64.0/20").send()).unwrap();
    let foreign = foreign.subnet().unwrap().subnet_id().unwrap().to_string();
    Drifted { vpc, private_table, private_zone, group, foreign }
}

#[test]
fn a_check_lists_exactly_what_changed_with_no_write_and_a_provision_repairs_the_four_it_owns() {
    let e = Env::new();
    let infra = "drift-abcde";
    let p = e.input("p.json", input("drift", infra, false));
    e.proxy.reset_counts();
    let made = ok(&e.cli(&["run", "provision-infra", "--input", &p, "--id", "made"]));
    let (fresh_reads, _) = reads_and_writes(&e);

    // In sync: exit 0, nothing listed, reads only, fewer than the provision made.
    let (code, report, reads, writes) = check(&e, infra);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["inSync"], true);
    for list in ["drift", "holdUps", "leaks"] {
        assert_eq!(report[list], json!([]), "{list}: {report:#}");
    }
    assert!(writes.is_empty(), "a check writes nothing: {writes:?}");
    let check_reads = reads;

    let d = drift(&e, infra, &made);
    let Drifted { vpc, private_table, private_zone, group, foreign } = d;

    let (code, report, _, writes) = check(&e, infra);
    assert_eq!(code, 1, "drifted: {report:#}");
    assert!(writes.is_empty(), "a check writes nothing: {writes:?}");
    let dhcp = e.c.block_on(e.c.ec2.describe_dhcp_options().filters(tagged(&format!("{infra}/dhcp-options"))).send());
    let dhcp = dhcp.unwrap().dhcp_options()[0].dhcp_options_id().unwrap().to_string();
    let drift = report["drift"].as_array().unwrap();
    let mut found: Vec<(String, String, String, String)> = drift
        .iter()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap().to_string();
            (s("kind"), s("id"), s("expected"), s("found"))
        })
        .collect();
    found.sort();
    let nat = e.c.block_on(e.c.ec2.describe_nat_gateways().filter(tagged(&format!("{infra}/nat/us-east-1a"))).send());
    let nat = nat.unwrap().nat_gateways()[0].nat_gateway_id().unwrap().to_string();
    let mut want = vec![
        ("dhcp-association".to_string(), vpc.clone(), format!("DHCP options {dhcp}"), "default".to_string()),
        ("route".into(), private_table.clone(), format!("0.0.0.0/0 to {nat}"), "no route".into()),
        (
            "security-group-rule".into(),
            group.clone(),
            "no such rule".into(),
            "tcp 8080-8080 from 192.168.0.0/16 added".into(),
        ),
        ("soa-minimum".into(), private_zone.clone(), "60".into(), "86400".into()),
    ];
    want.sort();
    assert_eq!(found, want, "{report:#}");
    for d in drift {
        assert_eq!(d["repair"], "run provision-infra with the cluster's input", "{d:#}");
    }
    assert_eq!(listed(&report, "holdUps"), vec![("subnet".to_string(), foreign.clone())], "{report:#}");
    assert_eq!(report["leaks"], json!([]));
    let text = stdout(&e.cli(&["check", "--infra-id", infra, "--region", "us-east-1"]));
    assert!(text.contains("hold-up  subnet") && text.contains(&foreign), "{text}");
    assert!(
        text.contains("4 drifted (4 repaired by running provision-infra again), 1 holding a teardown up"),
        "{text}"
    );

    // The repair: the same input, run again; a second check lists only the foreign subnet.
    e.proxy.reset_counts();
    ok(&e.cli(&["run", "provision-infra", "--input", &p, "--id", "repair"]));
    // What a check costs beside the other way to learn the same: a provision run again over the
    // cluster, which looks every part up (a fresh provision reads less: its census finds nothing
    // and it reads nothing back of what it makes).
    let (repair_reads, _) = reads_and_writes(&e);
    assert!(check_reads < repair_reads, "the check read {check_reads} times, a provision run again {repair_reads}");
    eprintln!(
        "reads: a fresh 1-zone provision {fresh_reads}, its check {check_reads}, the provision run again {repair_reads}"
    );
    let (code, report, _, _) = check(&e, infra);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["drift"], json!([]), "{report:#}");
    assert_eq!(listed(&report, "holdUps"), vec![("subnet".to_string(), foreign)], "{report:#}");
    // What a teardown would find in the way, it still leaves (it is not the cluster's).
    assert_eq!(support::inventory::soa_minimum(&e.c, &private_zone), 60);
}

#[test]
fn a_check_refuses_a_cluster_this_journal_did_not_provision_and_changes_nothing() {
    let e = Env::new();
    e.proxy.reset_counts();
    let out = e.cli(&["check", "--infra-id", "nowhere-abcde", "--region", "us-east-1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("no journal at") || err.contains("has no completed provision-infra"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let out = e.cli(&["check", "--infra-id", "x", "--region", "mars-1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not an AWS region"), "{}", stderr(&out));
    assert_eq!(e.proxy.total(), 0, "nothing asked of AWS");
}

#[test]
fn the_daemons_schedule_checks_every_cluster_and_its_metrics_and_page_say_which_drifted() {
    let e = Env::new();
    ok(&e.cli(&[
        "run",
        "provision-infra",
        "--input",
        &e.input("a.json", input("stay", "stay-abcde", true)),
        "--id",
        "a",
    ]));
    let b = ok(&e.cli(&[
        "run",
        "provision-infra",
        "--input",
        &e.input("b.json", input("moved", "moved-abcde", true)),
        "--id",
        "b",
    ]));
    let group = b["securityGroupID"].as_str().unwrap();
    let rule = aws_sdk_ec2::types::IpPermission::builder()
        .ip_protocol("tcp")
        .from_port(3306)
        .to_port(3306)
        .ip_ranges(aws_sdk_ec2::types::IpRange::builder().cidr_ip("0.0.0.0/0").build())
        .build();
    e.c.block_on(e.c.ec2.authorize_security_group_ingress().group_id(group).ip_permissions(rule).send()).unwrap();

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let settle = format!("{}ms", e.proxy.consistency_settle().as_millis());
    let mut daemon = e.daemon_with(
        &e.proxy.endpoint(),
        &["--listen", &listen, "--check-every", "1s", "--consistency-settle", &settle],
    );
    let seen = wait_until(std::time::Duration::from_secs(60), || {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            return false;
        }
        let (code, body) = http_get(port, "/metrics");
        code == 200
            && sample(&body, "infraflow_clusters_checked{result=\"drifted\"}") == 1.0
            && sample(&body, "infraflow_clusters_checked{result=\"in_sync\"}") == 1.0
    });
    let (_, metrics) = http_get(port, "/metrics");
    let (_, page) = http_get(port, "/");
    terminate(&mut daemon, std::time::Duration::from_secs(20));
    assert!(seen, "one cluster drifted, one in sync: {metrics}");
    assert_eq!(sample(&metrics, "infraflow_cluster_drift{kind=\"security-group-rule\"}"), 1.0, "{metrics}");
    assert!(page.contains("drift checks"), "{page}");
    let row = |infra: &str| {
        let cells = format!("<td>{infra}</td><td>us-east-1</td>");
        page.lines().find(|l| l.contains(&cells)).unwrap_or_default().to_string()
    };
    assert!(row("moved-abcde").contains("drifted") && row("moved-abcde").contains("1 security-group-rule"), "{page}");
    assert!(row("stay-abcde").contains("in sync"), "{page}");
}

/// SIGKILL at every change of a repairing provision after AWS acted but before the answer
/// arrives (the route, the association, the revoke, the SOA, the adoption marks), each kill's
/// resume killed at its next: the cluster ends in sync but for the foreign subnet.
#[test]
fn a_repair_killed_at_every_aws_call_after_aws_acted_ends_in_sync() {
    let world = || {
        let e = Env::new();
        let proxy = support::proxy::Proxy::start(e.moto.port);
        (e, proxy)
    };
    let run = |(e, proxy): &(Env, support::proxy::Proxy), name: &str, part: Option<&support::sweep::Part>| {
        let infra = format!("{name}-abcde");
        let p = e.input(&format!("{name}.json"), input(name, &infra, false));
        let made = ok(&e.cli(&["run", "provision-infra", "--input", &p, "--id", name]));
        let d = drift(e, &infra, &made);
        proxy.reset_counts();
        let id = format!("{name}-repair");
        let repair = ["run", "provision-infra", "--input", p.as_str(), "--id", id.as_str()];
        let killed = part.map(|part| support::sweep::chain(e, proxy, part, &repair));
        let out = e.cli_at(&proxy.endpoint(), &repair);
        assert!(out.status.success(), "{part:?}: {}", stderr(&out));
        let (_, report, _, _) = check(e, &infra);
        assert_eq!(report["drift"], json!([]), "{part:?}: {report:#}");
        assert_eq!(listed(&report, "holdUps"), vec![("subnet".to_string(), d.foreign)], "{part:?}: {report:#}");
        killed.unwrap_or_default()
    };
    let first = world();
    run(&first, "clean", None);
    let clean = first.1.counts();
    support::sweep::every_call_chained(&clean, true, first, world, |w, part| {
        run(w, &format!("k{}", part.index), Some(part))
    });
}
