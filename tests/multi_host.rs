//! Several daemons on several hosts sharing one PostgreSQL journal: three host namespaces linked
//! to a fourth holding PostgreSQL (`support::netns`), one daemon on each as a machine of its own,
//! moto behind a proxy on the test's link. A daemon killed mid-step is taken over once its lease
//! expires, with every step's effect once; a daemon cut off from the network stops its work
//! before anyone takes it over, and works again when the link returns.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::inventory::Inventory;
use support::moto::{Clients, Moto, aws_env};
use support::netns::{Net, available};
use support::postgres::{self, Server};
use support::proxy::Proxy;
use support::{infraflow, kill9};

const HOSTS: usize = 3;

struct World {
    // Dropped in this order: daemons, then the network, then the rest.
    daemons: Vec<Option<Child>>,
    net: Net,
    pg: Server,
    proxy: Proxy,
    c: Clients,
    _moto: Moto,
    dir: tempfile::TempDir,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

impl World {
    fn new() -> Option<World> {
        if let Err(why) = available() {
            eprintln!("skipped: several hosts need network namespaces ({why})");
            return None;
        }
        let net = Net::new(HOSTS);
        // TLS on, and nothing without it (pg_hba): every host speaks TLS to the journal, host 1
        // verifying the server in full (its certificate names each address hosts reach it by).
        let addrs: Vec<String> = (0..=HOSTS).map(|h| net.services_addr(h)).collect();
        let pg = postgres::start_tls_on("0.0.0.0", Some(&net.services()), &addrs);
        let moto = Moto::start();
        let c = Clients::new(&moto.endpoint());
        c.create_public_zone("example.com");
        // Slow enough that a kill lands inside an AWS call.
        let proxy = Proxy::start_on(&net.test_addr(), moto.port);
        proxy.set_latency(Duration::from_millis(120));
        let dir = tempfile::tempdir().unwrap();
        for h in 1..=HOSTS {
            std::fs::create_dir(dir.path().join(format!("h{h}"))).unwrap();
        }
        Some(World { daemons: (0..=HOSTS).map(|_| None).collect(), net, pg, proxy, c, _moto: moto, dir })
    }

    /// The journal's URL as seen from host `h` (0: the test itself). No password: PGPASSWORD.
    /// Host 1 verifies the server's certificate and name (`verify-full`); the others take TLS
    /// as libpq's default does (`prefer`: offered, so used, unverified).
    fn url(&self, h: usize) -> String {
        let base = format!("postgres://infraflow@{}:{}/postgres", self.net.services_addr(h), self.pg.port);
        match h {
            1 => format!("{base}?sslmode=verify-full&sslrootcert={}", self.pg.ca_cert().display()),
            _ => base,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = aws_env(&self.proxy.endpoint());
        env.push(("PGPASSWORD", self.pg.password.clone()));
        env
    }

    fn host_dir(&self, h: usize) -> PathBuf {
        self.dir.path().join(format!("h{h}"))
    }

    fn log(&self, h: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("h{h}.log"))).unwrap_or_default()
    }

    fn start_daemon(&mut self, h: usize) {
        let (url, env) = (self.url(h), self.env());
        let child = self.net.spawn_on(
            h,
            &self.host_dir(h),
            &self.dir.path().join(format!("h{h}.log")),
            &env,
            &infraflow(),
            &["--db", &url, "daemon", "--workers", "8"],
        );
        self.daemons[h] = Some(child);
    }

    fn kill_daemon(&mut self, h: usize) {
        if let Some(mut d) = self.daemons[h].take() {
            kill9(&mut d);
        }
    }

    /// `infraflow --db URL ARGS` from the test's side.
    fn cli(&self, args: &[&str]) -> Output {
        let mut c = Command::new(infraflow());
        c.arg("--db").arg(self.url(0)).args(args).stdin(Stdio::null());
        for (k, v) in self.env() {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.cli(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn submit(&self, workflow: &str, input: &Value, id: Option<&str>) -> String {
        let file = self.dir.path().join(format!("in-{}.json", now_ms()));
        std::fs::write(&file, input.to_string()).unwrap();
        let mut args = vec!["submit", workflow, "--input", file.to_str().unwrap()];
        if let Some(id) = id {
            args.extend(["--id", id]);
        }
        let out = self.cli(&args);
        assert!(out.status.success(), "submit: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn rows(&self) -> Vec<Value> {
        self.json(&["status", "--json"]).as_array().cloned().unwrap_or_default()
    }

    fn history(&self, id: &str) -> Vec<Value> {
        self.json(&["history", id, "--json"]).as_array().cloned().unwrap()
    }

    fn wait_all_finished(&self, limit: Duration) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let rows = self.rows();
            if rows
                .iter()
                .all(|r| ["completed", "failed", "compensated", "paused"].contains(&r["state"].as_str().unwrap()))
            {
                return rows;
            }
            assert!(start.elapsed() < limit, "not finished after {limit:?}: {rows:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Every canary effect line of every host: (host, line).
    fn effects(&self) -> Vec<(usize, String)> {
        (1..=HOSTS)
            .flat_map(|h| support::lines_of(&self.host_dir(h).join("effects.log")).into_iter().map(move |l| (h, l)))
            .collect()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for h in 1..=HOSTS {
            self.kill_daemon(h);
        }
    }
}

/// The host an owner id names: daemons run as hosts `h1`, `h2`, `h3`.
fn host_of(owner: &str) -> Option<usize> {
    owner.split('~').next()?.strip_prefix('h')?.parse().ok()
}

/// `tick KEY PID` lines counted by key.
fn ticks(effects: &[(usize, String)]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for (_, l) in effects {
        if let Some(key) = l.strip_prefix("tick ").and_then(|r| r.split(' ').next()) {
            *m.entry(key.to_string()).or_insert(0) += 1;
        }
    }
    m
}

fn canary(steps: u32, millis: u64) -> Value {
    // Relative: each daemon writes its effects in its own host's folder.
    json!({"steps": steps, "stepMillis": millis, "effectsFile": "effects.log"})
}

/// In a module of their own, so that `scripts/test.sh` can run them apart with their figures shown.
mod several_hosts {
    use super::*;

    #[test]
    fn a_daemon_killed_mid_step_on_one_host_is_taken_over_by_another_and_every_effect_happens_once() {
        let Some(mut w) = World::new() else { return };
        for h in 1..=HOSTS {
            w.start_daemon(h);
        }
        let cluster = json!({
            "infra": {"name": "cc", "infraID": "multi-abcde", "region": "us-east-1", "zones": ["us-east-1a", "us-east-1b"],
                      "baseDomain": "example.com", "endpointAccess": "PublicAndPrivate"},
            "nodePool": {"replicas": 1, "instanceType": "m6i.xlarge", "imageID": "ami-12c6146b"},
            "privateLink": {"allowedPrincipals": ["arn:aws:iam::123456789012:role/cpo"]}
        });
        for _ in 0..50 {
            w.submit("canary", &canary(5, 200), None);
        }
        w.submit("create-cluster", &cluster, Some("cc"));
        // Kill the host running create-cluster once it is well inside the run.
        let start = Instant::now();
        let holder = loop {
            let st = w.json(&["status", "cc", "--json"]);
            let done = st["steps"].as_array().map_or(0, |s| s.iter().filter(|x| x["state"] == "completed").count());
            if let Some(h) = st["owner"].as_str().and_then(host_of)
                && done >= 12
            {
                break h;
            }
            assert!(start.elapsed() < Duration::from_secs(120), "create-cluster never got going: {st}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let killed_at = Instant::now();
        w.kill_daemon(holder);
        let takeover = loop {
            let st = w.json(&["status", "cc", "--json"]);
            if let Some(h) = st["owner"].as_str().and_then(host_of)
                && h != holder
            {
                break killed_at.elapsed();
            }
            if st["state"] == "completed" {
                panic!("finished without a visible takeover: {st}");
            }
            assert!(killed_at.elapsed() < Duration::from_secs(60), "nobody took create-cluster over: {st}");
            std::thread::sleep(Duration::from_millis(100));
        };
        let rows = w.wait_all_finished(Duration::from_secs(300));
        assert!(rows.iter().all(|r| r["state"] == "completed"), "{rows:?}");
        assert_eq!(rows.len(), 51);

        // create-cluster: taken over once, every step completed once, AWS holds exactly one of each.
        let history = w.history("cc");
        let takes: Vec<&str> =
            history.iter().filter(|e| e["type"] == "lease_taken").filter_map(|e| e["owner"].as_str()).collect();
        assert!(takes.len() >= 2, "{takes:?}");
        let mut completions: HashMap<&str, usize> = HashMap::new();
        for e in history.iter().filter(|e| e["type"] == "step_completed") {
            *completions.entry(e["step"].as_str().unwrap()).or_default() += 1;
        }
        let twice: Vec<_> = completions.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "steps completed twice: {twice:?}");
        Inventory::read(&w.c, "multi-abcde").assert_provisioned_with_extras(&w.c, 2, 2, "cc", "example.com");

        // Canaries: every step's effect once, across the three hosts.
        let effects = w.effects();
        let per_key = ticks(&effects);
        assert_eq!(per_key.len(), 250, "50 canaries x 5 steps");
        let repeated: Vec<_> = per_key.iter().filter(|(_, n)| **n > 1).collect();
        assert!(repeated.is_empty(), "effects repeated: {repeated:?}");
        let hosts: std::collections::BTreeSet<usize> = effects.iter().map(|(h, _)| *h).collect();
        assert!(hosts.len() >= 2, "the work spread over hosts: {hosts:?}");
        eprintln!(
            "multi-host kill: host h{holder} killed inside create-cluster; taken over by another host after {:.1} s \
             (lease 15 s); steps run twice: 0; canary effects 250, repeated 0",
            takeover.as_secs_f64()
        );
    }

    #[test]
    fn a_host_cut_off_from_the_network_stops_its_work_before_others_take_it_and_resumes_when_the_link_returns() {
        let Some(mut w) = World::new() else { return };
        for h in 1..=HOSTS {
            w.start_daemon(h);
        }
        for _ in 0..24 {
            w.submit("canary", &canary(3, 3000), None);
        }
        // Watch every host's effects with the time each line appeared.
        let seen: Arc<Mutex<Vec<(i64, usize, String)>>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let (seen, stop) = (seen.clone(), stop.clone());
            let dirs: Vec<PathBuf> = (1..=HOSTS).map(|h| w.host_dir(h)).collect();
            std::thread::spawn(move || {
                let mut counts = vec![0; dirs.len()];
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    for (i, d) in dirs.iter().enumerate() {
                        let lines = support::lines_of(&d.join("effects.log"));
                        for l in &lines[counts[i]..] {
                            seen.lock().unwrap().push((now_ms(), i + 1, l.clone()));
                        }
                        counts[i] = lines.len();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let start = Instant::now();
        let held_by_h1 = loop {
            let held: Vec<String> = w
                .rows()
                .iter()
                .filter(|r| r["owner"].as_str().and_then(host_of) == Some(1))
                .map(|r| r["id"].as_str().unwrap().to_string())
                .collect();
            if !held.is_empty() {
                break held;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "host h1 never claimed anything");
            std::thread::sleep(Duration::from_millis(50));
        };
        let cut_at = now_ms();
        w.net.set_link(1, false);
        // Past the lease (15 s) and the others' takeover.
        std::thread::sleep(Duration::from_secs(25));
        let restored_at = now_ms();
        w.net.set_link(1, true);
        let rows = w.wait_all_finished(Duration::from_secs(300));
        assert!(rows.iter().all(|r| r["state"] == "completed"), "{rows:?}");
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        watcher.join().unwrap();

        // Self-fencing: h1 dropped its workflows (10 s after its last renewal) ...
        assert!(w.log(1).contains("dropping the workflow before its lease can expire"), "{}", w.log(1));
        let seen = seen.lock().unwrap().clone();
        let h1_last_cut_effect =
            seen.iter().filter(|(t, h, _)| *h == 1 && *t >= cut_at && *t < restored_at).map(|(t, _, _)| *t).max();
        // ... before anyone took them over.
        let mut first_takeover = i64::MAX;
        for id in &held_by_h1 {
            for e in w.history(id) {
                if e["type"] == "lease_taken"
                    && e["at"].as_i64().unwrap() >= cut_at
                    && e["owner"].as_str().and_then(host_of) != Some(1)
                {
                    first_takeover = first_takeover.min(e["at"].as_i64().unwrap());
                }
            }
        }
        assert!(first_takeover < i64::MAX, "nobody took over h1's workflows {held_by_h1:?}");
        if let Some(last) = h1_last_cut_effect {
            assert!(last < first_takeover, "h1 worked at {last} after a takeover at {first_takeover}");
            assert!(last - cut_at <= 10_500, "h1 worked {} ms into the cut, past its self-fence", last - cut_at);
        }
        // Effects: every step at least once; again only for a step h1 finished while cut off, before
        // its fence, whose completion it could not record.
        let per_key = ticks(&seen.iter().map(|(_, h, l)| (*h, l.clone())).collect::<Vec<_>>());
        assert_eq!(per_key.len(), 72, "24 canaries x 3 steps");
        let unrecorded: Vec<String> = seen
            .iter()
            .filter(|(t, h, _)| *h == 1 && *t >= cut_at && *t < restored_at)
            .filter_map(|(_, _, l)| l.strip_prefix("tick ").and_then(|r| r.split(' ').next()).map(str::to_string))
            .collect();
        for (key, n) in &per_key {
            assert!(*n == 1 || (*n == 2 && unrecorded.contains(key)), "{key} ran {n} times");
        }

        // The link is back: h1 works again. With the other hosts gone, it does all that is new.
        w.kill_daemon(2);
        w.kill_daemon(3);
        let after: Vec<String> = (0..3).map(|_| w.submit("canary", &canary(2, 100), None)).collect();
        let rows = w.wait_all_finished(Duration::from_secs(120));
        assert!(rows.iter().all(|r| r["state"] == "completed"), "{rows:?}");
        for id in &after {
            let owners: Vec<Option<usize>> = w
                .history(id)
                .iter()
                .filter(|e| e["type"] == "lease_taken")
                .map(|e| e["owner"].as_str().and_then(host_of))
                .collect();
            assert_eq!(owners, [Some(1)], "{id}");
        }
        eprintln!(
            "multi-host cut: h1 held {} workflows at the cut; its last effect {} ms into the cut; first takeover {} ms \
             into the cut; effects run again because their completion could not be recorded: {}",
            held_by_h1.len(),
            h1_last_cut_effect.map_or("(none)".to_string(), |t| (t - cut_at).to_string()),
            first_takeover - cut_at,
            per_key.values().filter(|n| **n > 1).count()
        );
    }
}
