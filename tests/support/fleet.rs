//! A fleet on one account: many workflows submitted to one journal at once, run by daemons
//! through a proxy that answers like AWS's account-wide request buckets.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::aws::AwsEnv;
use super::buckets::BucketReport;

/// The input of a 3-zone create-cluster (PrivateLink, a node per zone) for cluster `i`.
pub fn create_cluster_input(i: usize) -> Value {
    json!({
        "infra": {"name": format!("fleet{i}"), "infraID": format!("fleet{i}-abcde"), "region": "us-east-1",
                  "zones": ["us-east-1a", "us-east-1b", "us-east-1c"], "baseDomain": "example.com",
                  "endpointAccess": "PublicAndPrivate"},
        "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"},
        "privateLink": {"allowedPrincipals": ["arn:aws:iam::123456789012:role/cpo"]}
    })
}

/// `bin --db <the env's journal> ARGS`, its AWS through the env's proxy, paced at AWS's default
/// rates unless ARGS say otherwise.
pub fn command(e: &AwsEnv, bin: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    c.arg("--db").arg(e.s.db()).args(args).stdin(Stdio::null());
    for (k, v) in super::moto::aws_env(&e.proxy.endpoint()) {
        c.env(k, v);
    }
    c.env_remove("INFRAFLOW_AWS_RATE");
    c
}

/// Journals one workflow per input (`submit`), with ids `<prefix><i>`.
pub fn submit_all(e: &AwsEnv, bin: &Path, workflow: &str, prefix: &str, inputs: &[Value]) -> Vec<String> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let id = format!("{prefix}{i}");
            let file = e.input(&format!("{id}.json"), input.clone());
            let out = command(e, bin, &["submit", workflow, "--input", &file, "--id", &id]).output().unwrap();
            assert!(out.status.success(), "submit {id}: {}", super::stderr(&out));
            id
        })
        .collect()
}

/// A daemon of `bin` on the env's journal, logging to `daemon.log`.
pub fn daemon(e: &AwsEnv, bin: &Path, extra: &[&str]) -> Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(e.s.file("daemon.log")).unwrap();
    command(e, bin, &[&["daemon"], extra].concat()).stdout(Stdio::null()).stderr(log).spawn().unwrap()
}

/// Waits until every workflow has ended (completed, or stopped otherwise), and returns their
/// final states.
pub fn wait_all(e: &AwsEnv, ids: &[String], limit: Duration) -> Vec<Value> {
    let start = Instant::now();
    ids.iter()
        .map(|id| {
            let left = limit.saturating_sub(start.elapsed());
            e.s.wait_for_state(id, &["completed", "paused", "compensated", "failed", "cancelled"], left)
        })
        .collect()
}

/// One phase of a fleet run, as the buckets saw it.
pub struct Phase {
    pub wall: Duration,
    pub report: BucketReport,
    /// Requests by action (throttled ones included), most first.
    pub actions: Vec<(String, u32)>,
}

impl Phase {
    /// Throttled requests as a share of every request that reached the buckets.
    pub fn throttled_share(&self) -> f64 {
        let all = self.report.admitted() + self.report.throttled();
        if all == 0 { 0.0 } else { self.report.throttled() as f64 / all as f64 }
    }

    /// Wall time over the buckets' floor for the requests they admitted.
    pub fn over_floor(&self) -> f64 {
        self.wall.as_secs_f64() / self.report.floor.as_secs_f64().max(1e-9)
    }

    /// The `n` most requested actions, `Action×count`.
    pub fn top_actions(&self, n: usize) -> String {
        self.actions.iter().take(n).map(|(a, c)| format!("{a}×{c}")).collect::<Vec<_>>().join(", ")
    }

    pub fn line(&self) -> String {
        format!(
            "wall {:.1} s, floor {:.1} s ({:.2}x), {} requests, {} throttled ({:.1}%); (admitted, throttled) by class {:?}, first to last admitted by class {:?}",
            self.wall.as_secs_f64(),
            self.report.floor.as_secs_f64(),
            self.over_floor(),
            self.report.admitted() + self.report.throttled(),
            self.report.throttled(),
            100.0 * self.throttled_share(),
            self.report.by_class,
            self.report.spans
        )
    }
}
