//! A real PostgreSQL server for the tests: one per test binary, started with
//! `scripts/postgres.sh` on a loopback port, stopped (and its files removed) when the test binary
//! exits; each test gets a database of its own. Shared by the journal's conformance suite and the
//! binaries' tests.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Server {
    pub port: u16,
    pub host: String,
    pub dir: PathBuf,
    pub password: String,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Starts a server on `host` (a loopback or test-namespace address); `reaper`: stop it when
/// this test process exits.
pub fn start_on(host: &str, netns: Option<&str>) -> Server {
    start_with(host, netns, None)
}

/// `start_on` with TLS on: the server's CA is `Server::ca_cert`; its certificate names `host`,
/// localhost and the addresses in `also` (how other hosts reach it).
pub fn start_tls_on(host: &str, netns: Option<&str>, also: &[String]) -> Server {
    start_with(host, netns, Some(also))
}

fn start_with(host: &str, netns: Option<&str>, tls: Option<&[String]>) -> Server {
    let script = repo().join("scripts/postgres.sh");
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&script);
            c
        }
        None => Command::new(&script),
    };
    cmd.args(["start", "--host", host]);
    if let Some(also) = tls {
        cmd.arg("--tls").env("INFRAFLOW_PG_TLS_IPS", also.join(","));
    }
    let out = cmd.output().expect("run scripts/postgres.sh");
    assert!(
        out.status.success(),
        "scripts/postgres.sh start failed (is PostgreSQL 15 installed? `scripts/postgres.sh install`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (port, dir) = (fields[1].parse().unwrap(), PathBuf::from(fields[2]));
    let password = std::fs::read_to_string(dir.join("password")).unwrap().trim().to_string();
    // Stops the server once this test process is gone, however it ends: it outlives this
    // process, so nobody here waits for it.
    #[allow(clippy::zombie_processes)]
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while kill -0 {} 2>/dev/null; do sleep 0.5; done; {} stop {}",
            std::process::id(),
            script.display(),
            dir.display()
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    Server { port, host: host.to_string(), dir, password }
}

/// The loopback server of this test binary.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| start_on("127.0.0.1", None))
}

impl Server {
    /// The CA that signed a TLS server's certificate (`start_tls_on`).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("tls/ca.crt")
    }

    /// A URL with the password in it.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://infraflow:{}@{}:{}/{db}", self.password, self.host, self.port)
    }

    /// A URL without the password (for PGPASSWORD).
    pub fn url_without_password(&self, db: &str) -> String {
        format!("postgres://infraflow@{}:{}/{db}", self.host, self.port)
    }

    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new("psql")
            .arg(self.url(db))
            .args(["-v", "ON_ERROR_STOP=1", "-tA", "-c", sql])
            .output()
            .expect("run psql");
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A new, empty database; returns its name.
    pub fn fresh_database(&self) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("t{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        name
    }
}
