//! A moto server per test, on a loopback port of its own, emptied when dropped and kept for the
//! binary's next test; SDK clients that read the emulator's state directly (never through the
//! code under test).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

pub struct Moto {
    /// None once killed, or handed back to the idle servers.
    child: Option<Child>,
    account: Option<String>,
    pub port: u16,
}

/// Servers a test is done with, emptied (`POST /moto-api/reset`: every service's state, as at
/// boot) and kept for this binary's next test. A boot costs about 4 s of CPU — Python's imports,
/// then botocore's models at each service's first request — and an emptied server's first
/// requests 0.05 s (measured, BENCHMARKS.md): with a world a chain, six chains a sweep, boots
/// were a third of the plain pass's emulator CPU.
static IDLE: Mutex<Vec<Moto>> = Mutex::new(Vec::new());

/// Starts `command` from one thread that lives as long as the test binary: moto runs under
/// `setpriv --pdeathsig KILL`, and that signal follows the thread that made the child, so a
/// server made by a test's own thread (libtest gives each test one) would die with that test
/// instead of serving the next. The idle servers die with the binary.
fn spawn_for_the_binary(command: Command) -> std::io::Result<Child> {
    type Ask = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: Mutex<Option<mpsc::Sender<Ask>>> = Mutex::new(None);
    let (tx, rx) = mpsc::channel();
    {
        let mut spawner = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
        let asks = spawner.get_or_insert_with(|| {
            let (asks, requests) = mpsc::channel::<Ask>();
            std::thread::spawn(move || {
                for (mut command, answer) in requests {
                    let _ = answer.send(command.spawn());
                }
                // Never reached while the binary runs: the sender lives in a static.
                loop {
                    std::thread::park();
                }
            });
            asks
        });
        asks.send((command, tx)).expect("the spawner thread is gone");
    }
    rx.recv().expect("the spawner thread did not answer")
}

fn moto_server() -> PathBuf {
    if let Some(p) = std::env::var_os("INFRAFLOW_MOTO_SERVER") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/moto-server");
    assert!(p.exists(), "moto is not installed: run scripts/moto.sh install (or scripts/test.sh)");
    p
}

impl Moto {
    /// A moto server whose default account is 123456789012. Credentials of a role assumed
    /// through it act in the role's account (moto looks the account up by access key), as on
    /// AWS.
    pub fn start() -> Moto {
        Moto::start_with(None)
    }

    /// A moto server whose every request is in `account` (moto reads MOTO_ACCOUNT_ID): another AWS
    /// account, whatever the credentials.
    pub fn start_as(account: &str) -> Moto {
        Moto::start_with(Some(account))
    }

    /// An idle server of `account`, emptied, or a new one.
    fn start_with(account: Option<&str>) -> Moto {
        loop {
            let idle = {
                let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
                let at = idle.iter().position(|m| m.account.as_deref() == account);
                at.map(|i| idle.swap_remove(i))
            };
            let Some(mut moto) = idle else { break };
            // Emptied again: a process of the last test may have reached it after its reset.
            if moto.running() && http(moto.port, "POST", "/moto-api/reset") == Some(200) {
                return moto;
            }
            moto.kill();
        }
        Moto::boot(account)
    }

    /// moto binds a port of the kernel's choosing and says which: a port picked here and handed
    /// over could be taken in between by another test's proxy, which would then serve this
    /// test's calls while its own moto never started.
    fn boot(account: Option<&str>) -> Moto {
        // One moto boots at a time in a test binary: a boot is a second or two of Python imports
        // at full CPU, and a sweep starting six worlds at once, beside other sweeps, starved the
        // other tests' processes long enough to miss their lease renewals (CI of ff1fe46).
        static BOOTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _booting = BOOTING.lock().unwrap_or_else(|e| e.into_inner());
        let mut command = Command::new("setpriv");
        command.args(["--pdeathsig", "KILL", "--"]).arg(moto_server());
        // moto's default images (1,300 in us-east-1, each with a snapshot) make every filtered
        // DescribeSnapshots a scan of them all, their tags looked up one by one: most of a
        // teardown's emulator CPU. The one image the tests launch is enough.
        command.env("MOTO_AMIS_PATH", concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/moto-amis.json"));
        match account {
            Some(account) => command.env("MOTO_ACCOUNT_ID", account),
            None => command.env_remove("MOTO_ACCOUNT_ID"),
        };
        command.args(["-H", "127.0.0.1", "-p", "0"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = spawn_for_the_binary(command).expect("cannot start moto_server (under setpriv)");
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        // moto logs every request on stderr: read it to the end whatever it writes (a reader
        // that stopped would close the pipe, and moto's next log line would fail the request it
        // serves). What is not a request's log line (a traceback) is shown with the test's
        // output, a few hundred lines at most.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            let mut reader = std::io::BufReader::new(stderr);
            let (mut buf, mut shown) = (Vec::new(), 0);
            loop {
                buf.clear();
                match std::io::BufRead::read_until(&mut reader, b'\n', &mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
                let line = String::from_utf8_lossy(&buf);
                if let Some(port) = line.split("Running on http://127.0.0.1:").nth(1)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(port.trim().parse::<u16>().ok());
                } else if tx.is_none()
                    && !line.starts_with("127.0.0.1 - - [")
                    && !line.contains("CTRL+C")
                    && shown < 300
                {
                    shown += 1;
                    eprint!("moto: {line}");
                }
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(port)) => port,
            other => {
                let _ = child.kill();
                panic!("moto did not say which port it serves on: {other:?}");
            }
        };
        let moto = Moto { child: Some(child), account: account.map(str::to_string), port };
        let start = Instant::now();
        while http(port, "GET", "/moto-api/").is_none() {
            assert!(start.elapsed() < Duration::from_secs(30), "moto did not come up on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Moto {
    fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // A failing test's server is not reused: what it holds may explain the failure, and
        // is gone with it either way.
        if self.child.is_some()
            && !std::thread::panicking()
            && self.running()
            && http(self.port, "POST", "/moto-api/reset") == Some(200)
        {
            let moto = Moto { child: self.child.take(), account: self.account.take(), port: self.port };
            IDLE.lock().unwrap_or_else(|e| e.into_inner()).push(moto);
            return;
        }
        self.kill();
    }
}

/// A bare HTTP/1.0 request; the status line's code, or None if nothing answers.
pub fn http(port: u16, method: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    buf.split_whitespace().nth(1)?.parse().ok()
}

/// Environment that points the binaries (and the SDK) at `endpoint` with throwaway credentials,
/// and away from any real AWS configuration on the machine.
pub fn aws_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint.to_string()),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_CONFIG_FILE", "/dev/null".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        // moto has no request limits: pacing at AWS's would only slow the suites (a crash sweep
        // starts a fresh process, with a fresh bucket, a hundred times). `tests/aws_pacing.rs`
        // and the fleet benchmark pace at AWS's defaults (`fleet::command`).
        ("INFRAFLOW_AWS_RATE", "off".into()),
        // moto enforces no quota (and answers Service Quotas for VPCs only): the quota check
        // before a provision is journaled is tested where the proxy plays AWS's quotas
        // (`tests/quotas.rs`), not read again before every provision of the suites.
        ("INFRAFLOW_SKIP_QUOTA_CHECK", "true".into()),
    ]
}

/// SDK clients on the emulator, for reading back state.
pub struct Clients {
    pub rt: tokio::runtime::Runtime,
    pub ec2: aws_sdk_ec2::Client,
    pub elb: aws_sdk_elasticloadbalancingv2::Client,
    pub classic: aws_sdk_elasticloadbalancing::Client,
    pub r53: aws_sdk_route53::Client,
    pub iam: aws_sdk_iam::Client,
    pub s3: aws_sdk_s3::Client,
}

async fn own_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_ec2::config::Credentials::new("testing", "testing", None, None, "test"))
        .load()
        .await
}

impl Clients {
    pub fn new(endpoint: &str) -> Clients {
        Clients::on(endpoint, tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap())
    }

    /// Clients several threads use at once (the proxy's handlers): their calls run side by side
    /// on a runtime of its own rather than one at a time.
    pub fn shared(endpoint: &str) -> Clients {
        Clients::on(
            endpoint,
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap(),
        )
    }

    /// Clients acting through `role_arn` (moto: in the role's account), assumed with the test's
    /// own credentials: what a test reads of another account.
    pub fn as_role(endpoint: &str, role_arn: &str) -> Clients {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let conf = rt.block_on(async {
            let own = own_config(endpoint).await;
            let role = aws_config::sts::AssumeRoleProvider::builder(role_arn)
                .session_name("test")
                .configure(&own)
                .build()
                .await;
            aws_config::defaults(aws_config::BehaviorVersion::latest())
                .region(aws_config::Region::new("us-east-1"))
                .endpoint_url(endpoint)
                .credentials_provider(role)
                .load()
                .await
        });
        Clients::of(conf, rt)
    }

    fn on(endpoint: &str, rt: tokio::runtime::Runtime) -> Clients {
        let conf = rt.block_on(own_config(endpoint));
        Clients::of(conf, rt)
    }

    fn of(conf: aws_config::SdkConfig, rt: tokio::runtime::Runtime) -> Clients {
        Clients {
            ec2: aws_sdk_ec2::Client::new(&conf),
            elb: aws_sdk_elasticloadbalancingv2::Client::new(&conf),
            classic: aws_sdk_elasticloadbalancing::Client::new(&conf),
            r53: aws_sdk_route53::Client::new(&conf),
            iam: aws_sdk_iam::Client::new(&conf),
            s3: aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&conf).force_path_style(true).build()),
            rt,
        }
    }

    /// A bare VPC, as a user or another tool makes one: its id.
    pub fn create_vpc(&self, cidr: &str) -> String {
        let out = self.block_on(self.ec2.create_vpc().cidr_block(cidr).send()).unwrap();
        out.vpc().unwrap().vpc_id().unwrap().to_string()
    }

    /// Names of the classic load balancers left in the account.
    pub fn classic_load_balancers(&self) -> Vec<String> {
        let out = self.block_on(self.classic.describe_load_balancers().send()).unwrap();
        out.load_balancer_descriptions().iter().filter_map(|l| l.load_balancer_name().map(str::to_string)).collect()
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Creates the public zone a provision needs (infraflow never creates it).
    pub fn create_public_zone(&self, name: &str) -> String {
        let out = self
            .block_on(self.r53.create_hosted_zone().name(name).caller_reference(format!("test-{name}")).send())
            .unwrap();
        out.hosted_zone().unwrap().id().trim_start_matches("/hostedzone/").to_string()
    }
}
