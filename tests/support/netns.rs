//! Several "hosts" on one machine for the multi-host tests: network namespaces of the test's own,
//! with addresses of their own. A services namespace holds PostgreSQL and routes for the hosts;
//! each host namespace has one veth link to it, and the test itself (root namespace: moto and its
//! proxy) one more. A daemon runs on a host in its own pid and UTS namespaces too, so to the others
//! it is another machine (another hostname, pids that mean nothing to them). Everything is removed
//! when the `Net` is dropped.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};

pub struct Net {
    tag: String,
    /// The second octet of every address: 10.N.H.x, H = host number (0: the test's link).
    octet: u8,
    pub hosts: usize,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// Whether this machine lets the test make namespaces (root, iproute2, unshare).
pub fn available() -> Result<(), String> {
    if !Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0")) {
        return Err("not root".into());
    }
    for tool in [["ip", "-V"], ["unshare", "--version"]] {
        if !Command::new(tool[0]).arg(tool[1]).output().is_ok_and(|o| o.status.success()) {
            return Err(format!("{} is not installed", tool[0]));
        }
    }
    Ok(())
}

impl Net {
    pub fn new(hosts: usize) -> Net {
        // Tests of one binary run side by side: names and addresses of their own.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let (pid, n) = (std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
        // An address block no namespace holds: one left by a run that was killed before it
        // cleaned up would make `ip route add` fail.
        let routes = std::process::Command::new("ip").args(["-o", "route"]).output().unwrap().stdout;
        let routes = String::from_utf8_lossy(&routes);
        let octet = (0..150)
            .map(|i| 100 + ((pid * 7 + n * 13 + i * 11) % 150) as u8)
            .find(|o| !routes.contains(&format!("10.{o}.")))
            .expect("a free 10.x block");
        let net = Net { tag: format!("{}{n}", pid % 10_000), octet, hosts };
        let svc = net.services();
        ip(&["netns", "add", &svc]);
        ip(&["netns", "exec", &svc, "ip", "link", "set", "lo", "up"]);
        ip(&["netns", "exec", &svc, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        // The test's own link (root namespace ↔ services).
        let (root_end, svc_end) = (format!("ifr{}", net.tag), format!("ifs0{}", net.tag));
        ip(&["link", "add", &root_end, "type", "veth", "peer", "name", &svc_end]);
        ip(&["link", "set", &svc_end, "netns", &svc]);
        ip(&["addr", "add", &format!("{}/24", net.test_addr()), "dev", &root_end]);
        ip(&["link", "set", &root_end, "up"]);
        ip(&["netns", "exec", &svc, "ip", "addr", "add", &format!("{}/24", net.services_addr(0)), "dev", &svc_end]);
        ip(&["netns", "exec", &svc, "ip", "link", "set", &svc_end, "up"]);
        for h in 1..=hosts {
            let ns = net.host(h);
            let (host_end, svc_end) = (format!("ifh{h}{}", net.tag), format!("ifs{h}{}", net.tag));
            ip(&["netns", "add", &ns]);
            ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
            ip(&["link", "add", &host_end, "type", "veth", "peer", "name", &svc_end]);
            ip(&["link", "set", &host_end, "netns", &ns]);
            ip(&["link", "set", &svc_end, "netns", &svc]);
            ip(&["netns", "exec", &svc, "ip", "addr", "add", &format!("{}/24", net.services_addr(h)), "dev", &svc_end]);
            ip(&["netns", "exec", &svc, "ip", "link", "set", &svc_end, "up"]);
            ip(&["netns", "exec", &ns, "ip", "addr", "add", &format!("{}/24", net.host_addr(h)), "dev", &host_end]);
            ip(&["netns", "exec", &ns, "ip", "link", "set", &host_end, "up"]);
            ip(&["netns", "exec", &ns, "ip", "route", "add", "default", "via", &net.services_addr(h)]);
            // Replies from the test's side find the host through the services namespace.
            ip(&["route", "add", &format!("10.{}.{h}.0/24", net.octet), "via", &net.services_addr(0)]);
        }
        net
    }

    pub fn services(&self) -> String {
        format!("ifsvc{}", self.tag)
    }

    pub fn host(&self, h: usize) -> String {
        format!("ifhost{h}-{}", self.tag)
    }

    /// The services namespace's address on link `h` (0: the test's link).
    pub fn services_addr(&self, h: usize) -> String {
        format!("10.{}.{h}.1", self.octet)
    }

    pub fn host_addr(&self, h: usize) -> String {
        format!("10.{}.{h}.2", self.octet)
    }

    /// The root namespace's address, where the test's proxy listens.
    pub fn test_addr(&self) -> String {
        self.host_addr(0)
    }

    /// Cuts (or restores) host `h`'s only link, at the services end.
    pub fn set_link(&self, h: usize, up: bool) {
        let svc_end = format!("ifs{h}{}", self.tag);
        ip(&["netns", "exec", &self.services(), "ip", "link", "set", &svc_end, if up { "up" } else { "down" }]);
    }

    /// Runs `program args` on host `h`, as host `h<N>` (its own hostname and pid namespace),
    /// in `cwd`, with `env`; its stderr goes to `log`. Killing the child kills the program.
    pub fn spawn_on(
        &self,
        h: usize,
        cwd: &Path,
        log: &Path,
        env: &[(&str, String)],
        program: &Path,
        args: &[&str],
    ) -> Child {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.host(h), "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--uts"])
            .args(["sh", "-c", &format!("hostname h{h} && exec \"$0\" \"$@\"")])
            .arg(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in env {
            c.env(k, v);
        }
        c.spawn().unwrap()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends, their peers and the routes through them.
        for h in 1..=self.hosts {
            let _ = Command::new("ip").args(["netns", "pids", &self.host(h)]).output().map(|o| {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            });
            let _ = Command::new("ip").args(["netns", "delete", &self.host(h)]).status();
        }
        let _ = Command::new("ip").args(["netns", "delete", &self.services()]).status();
        let _ = Command::new("ip").args(["link", "delete", &format!("ifr{}", self.tag)]).status();
    }
}
