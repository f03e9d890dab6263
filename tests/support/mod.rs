//! Shared helpers of the black-box tests: run the real binaries on a real journal file.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn infraflow() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_infraflow"))
}

pub fn workflow_status() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_workflow-status"))
}

/// A scratch folder with a journal path in it.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch { dir: tempfile::tempdir().unwrap() }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("journal.sqlite3")
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write_json(&self, name: &str, v: &Value) -> PathBuf {
        let p = self.file(name);
        std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
        p
    }

    /// `infraflow --db <db> ARGS...`, waited for.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_env(args, &[])
    }

    pub fn cli_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(infraflow());
        c.arg("--db").arg(self.db()).args(args).stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    pub fn spawn_daemon(&self, extra: &[&str], env: &[(&str, &str)]) -> Child {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.file("daemon.log")).unwrap();
        let mut c = Command::new(infraflow());
        c.arg("--db").arg(self.db()).arg("daemon").args(extra).stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        for (k, v) in env {
            c.env(k, v);
        }
        c.spawn().unwrap()
    }

    pub fn status(&self, id: &str) -> Value {
        let out = self.cli(&["status", id, "--json"]);
        assert!(out.status.success(), "status {id}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn history(&self, id: &str) -> Vec<Value> {
        let out = self.cli(&["history", id, "--json"]);
        assert!(out.status.success(), "history {id}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().unwrap().clone()
    }

    /// Polls `status ID --json` until the state is one of `states`, or panics after `limit`.
    pub fn wait_for_state(&self, id: &str, states: &[&str], limit: Duration) -> Value {
        let start = Instant::now();
        loop {
            let s = self.status(id);
            if states.contains(&s["state"].as_str().unwrap_or("")) {
                return s;
            }
            assert!(start.elapsed() < limit, "{id} still {} after {limit:?}: {s}", s["state"]);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until a daemon has logged that it runs (its signal handlers are installed by then).
    pub fn wait_for_daemon_start(&self, starts: usize) {
        let start = Instant::now();
        while self.daemon_log().matches("daemon started").count() < starts {
            assert!(start.elapsed() < Duration::from_secs(30), "daemon did not start: {}", self.daemon_log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.file("daemon.log")).unwrap_or_default()
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

/// Sends SIGTERM (graceful stop) and waits for the process.
pub fn terminate(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let ok = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(ok.success());
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < limit, "process did not stop within {limit:?} of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILL: no chance to clean up, as in a power cut or OOM kill.
pub fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A small deterministic generator, so a failing run can be replayed from its printed seed.
pub struct Rng(u64);

impl Rng {
    pub fn from_env_or_time() -> Rng {
        let seed = std::env::var("INFRAFLOW_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
        eprintln!("random seed: INFRAFLOW_TEST_SEED={seed}");
        Rng(seed | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

pub fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

/// `GET path` on the daemon's listener: (status code, body).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    http_get_as(port, &format!("127.0.0.1:{port}"), path)
}

/// `http_get` with the `Host` header a browser sends for `host` (a rebound name, say).
pub fn http_get_as(port: u16, host: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    let status = out.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// The value of the sample `name{labels}` in a text exposition (0 when absent).
pub fn sample(body: &str, name_and_labels: &str) -> f64 {
    body.lines().find_map(|l| l.strip_prefix(name_and_labels).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

/// A free port for a daemon's `--listen`, below the kernel's ephemeral range (32768–60999 on
/// Linux): a port bind(0) hands out could be taken, between this check and the daemon's bind,
/// by another test's proxy or moto, which bind port 0.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut tries = 0;
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let port = 20_000 + (h.finish() % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
        tries += 1;
        assert!(tries < 1000, "no free port in 20000-31999");
    }
}

pub fn wait_until(limit: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

pub mod api;
pub mod api_daemon;
pub mod authz;
pub mod aws;
pub mod buckets;
pub mod chain;
pub mod customer_vpc;
pub mod fleet;
pub mod hypershift;
pub mod iam;
pub mod iam_state;
pub mod inventory;
pub mod look_alikes;
pub mod moto;
pub mod netns;
pub mod otlp;
pub mod postgres;
pub mod proxy;
pub mod quotas;
pub mod strict;
pub mod sweep;
pub mod transitions;
pub mod wire;
pub mod xml;
