//! The environment of AWS black-box tests: moto with the public zone `example.com`, a scratch
//! journal, SDK clients, and the binaries pointed at moto (or at a proxy in front of it).

use std::time::Duration;

use serde_json::Value;

use super::moto::{Clients, Moto, aws_env};
use super::proxy::Proxy;
use super::{Rng, Scratch, kill9, terminate};

pub struct AwsEnv {
    pub moto: Moto,
    pub s: Scratch,
    /// SDK clients on moto itself: what the tests read back, never through the proxy.
    pub c: Clients,
    /// What `cli` goes through: transparent, or strict AWS when INFRAFLOW_TEST_STRICT=1 runs the
    /// whole suite under AWS's contract.
    pub proxy: Proxy,
}

impl AwsEnv {
    pub fn new() -> AwsEnv {
        let moto = Moto::start();
        let c = Clients::new(&moto.endpoint());
        c.create_public_zone("example.com");
        let proxy = Proxy::start(moto.port);
        AwsEnv { moto, s: Scratch::new(), c, proxy }
    }

    /// `infraflow ARGS` against `endpoint` (moto, or a proxy in front of it).
    /// A `run` through one of the test proxies is also checked against the IAM policy of its
    /// workflow: every AWS call it made must be granted by `infraflow policy WORKFLOW`.
    pub fn cli_at(&self, endpoint: &str, args: &[&str]) -> std::process::Output {
        let env = aws_env(endpoint);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let workflow = match args {
            ["run", workflow, ..] => Some(*workflow),
            // `infraflow policy check` grants what the check reads.
            ["check", ..] => Some("check"),
            _ => None,
        };
        let before = workflow.and_then(|_| super::proxy::iam_counts_at(endpoint));
        // The cluster's scoped policy too, when the input names one.
        let infra_id = workflow.and(input_infra_id(args));
        let recording = infra_id.is_some() && super::proxy::start_authz_at(endpoint);
        let out = self.s.cli_env(args, &env);
        if let (Some(workflow), Some(before)) = (workflow, before)
            && let Some(after) = super::proxy::iam_counts_at(endpoint)
        {
            super::iam::assert_policy_with_lock_covers(workflow, lock_bucket(args), &before, &after);
        }
        if recording
            && let (Some(workflow), Some(infra_id)) = (workflow, &infra_id)
            && let Some(calls) = super::proxy::finish_authz_at(endpoint)
        {
            super::iam::assert_scoped_policy_allows(workflow, infra_id, lock_bucket(args), &calls);
        }
        out
    }

    /// `infraflow ARGS` through the world's proxy with more environment (no policy check).
    pub fn cli_with(&self, args: &[&str], extra: &[(&str, &str)]) -> std::process::Output {
        let env = aws_env(&self.proxy.endpoint());
        let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.extend_from_slice(extra);
        self.s.cli_env(args, &env)
    }

    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        self.cli_at(&self.proxy.endpoint(), args)
    }

    /// Writes `v` to a scratch file and returns its path.
    pub fn input(&self, name: &str, v: Value) -> String {
        self.s.write_json(name, &v).to_str().unwrap().to_string()
    }

    /// `infraflow ARGS` against `endpoint`, in the background.
    pub fn spawn_cli_at(&self, endpoint: &str, args: &[&str]) -> std::process::Child {
        self.spawn_cli_with(endpoint, args, &[])
    }

    /// `spawn_cli_at` with more environment.
    pub fn spawn_cli_with(&self, endpoint: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
        let mut c = std::process::Command::new(super::infraflow());
        c.arg("--db").arg(self.s.db()).args(args).stdin(std::process::Stdio::null());
        c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        for (k, v) in aws_env(endpoint) {
            c.env(k, v);
        }
        c.envs(env.iter().copied());
        c.spawn().unwrap()
    }

    /// Polls until step `key` of workflow `id` has completed.
    pub fn wait_for_step(&self, id: &str, key: &str, limit: Duration) {
        let start = std::time::Instant::now();
        loop {
            let out = self.s.cli(&["status", id, "--json"]);
            if out.status.success() {
                let st: Value = serde_json::from_slice(&out.stdout).unwrap();
                let done = st["steps"]
                    .as_array()
                    .is_some_and(|steps| steps.iter().any(|s| s["key"] == key && s["state"] == "completed"));
                if done {
                    return;
                }
            }
            assert!(start.elapsed() < limit, "step {key} of {id} not completed after {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `infraflow ARGS` through `proxy`, SIGKILLed at its `call`-th AWS call (before the call
    /// reaches AWS, or after AWS acted): whether the kill fired (a fired kill must fail the run).
    pub fn run_killed_at(&self, proxy: &Proxy, args: &[&str], call: u32, after_aws_acts: bool) -> bool {
        let mut child = self.spawn_cli_at(&proxy.endpoint(), args);
        proxy.kill_at(super::proxy::KillAt { call, after_aws_acts, pid: child.id() });
        let status = child.wait().unwrap();
        let fired = proxy.kill_fired();
        assert!(!fired || !status.success(), "killed at call {call}, yet it exited {status:?}");
        fired
    }

    pub fn daemon_at(&self, endpoint: &str) -> std::process::Child {
        self.daemon_with(endpoint, &[])
    }

    /// A daemon against `endpoint` with extra arguments (`--listen ADDR`).
    pub fn daemon_with(&self, endpoint: &str, extra: &[&str]) -> std::process::Child {
        let env = aws_env(endpoint);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.s.spawn_daemon(extra, &env)
    }

    /// Kills daemons (SIGKILL) at random moments while `id` runs, then lets one finish it.
    /// Returns how many kills landed while the workflow was still running, and its status.
    pub fn kill_daemons_until_done(&self, endpoint: &str, id: &str, kills: usize, rng: &mut Rng) -> (usize, Value) {
        let mut landed = 0;
        let mut starts = self.s.daemon_log().matches("daemon started").count();
        for _ in 0..kills {
            let mut d = self.daemon_at(endpoint);
            starts += 1;
            self.s.wait_for_daemon_start(starts);
            std::thread::sleep(Duration::from_millis(50 + rng.below(350)));
            kill9(&mut d);
            if matches!(self.s.status(id)["state"].as_str(), Some("running") | Some("pending")) {
                landed += 1;
            }
        }
        let mut d = self.daemon_at(endpoint);
        self.s.wait_for_daemon_start(starts + 1);
        let st = self.s.wait_for_state(id, &["completed", "paused", "compensated", "failed"], Duration::from_secs(240));
        let code = terminate(&mut d, Duration::from_secs(30));
        assert_eq!(code.code(), Some(0), "{code:?}: {}", self.s.daemon_log());
        (landed, st)
    }
}

/// The `infraID` of a `run`'s `--input` file, if it has one.
fn input_infra_id(args: &[&str]) -> Option<String> {
    if let Some(i) = args.iter().position(|a| *a == "--infra-id") {
        return args.get(i + 1).map(|s| s.to_string());
    }
    let file = args.iter().position(|a| *a == "--input").and_then(|i| args.get(i + 1))?;
    let v: Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    v["infraID"].as_str().map(str::to_string)
}

/// The output JSON of a command that must have succeeded.
pub fn ok(o: &std::process::Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "{}", super::stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The cluster lease bucket a command names (`--lock-bucket B`), whose statement its policy has.
fn lock_bucket<'a>(args: &[&'a str]) -> Option<&'a str> {
    args.iter().position(|a| *a == "--lock-bucket").and_then(|i| args.get(i + 1)).copied()
}
