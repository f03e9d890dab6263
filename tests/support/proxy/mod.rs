//! A loopback HTTP proxy in front of moto that counts API calls and injects faults: throttling,
//! 5xx, connections dropped before the request reaches moto, and — the nastiest — dropped after
//! moto acted but before the client hears back. moto has no fault injection of its own.
//!
//! Why split so: `proxy/` was split at 600 lines — this file (543 lines) is the test proxy's loop:
//! read a call, decide its fault (`decide`: kill, cut-off, throttle, terminal), forward, answer,
//! whose faults share one state and one lock; `chained` is its side of a chain of kills (a port per
//! chained process, the holding of calls while a process starts or dies). The wire format is
//! `wire.rs`, the strict layer `strict.rs`, the chain's bookkeeping `chain.rs`, IAM's view of a
//! call `authz/`, Service Quotas and their enforcement `quotas.rs` (the loop only asks it, in three
//! lines, before forwarding).

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

mod chained;

use chained::{bury, chained_call, from_a_dead_process, listen, stale, wait_buried};

use super::authz::{Authz, DroppedTags, authorizations, dropped_tags};
use super::buckets::{BucketReport, Buckets, Rate, class_of};
use super::chain::{Chain, Kills, what_it_asks};
use super::moto::Clients;
use super::strict::{Strict, StrictState};
use super::wire::{
    Request, access_key, action, assumed_account, credentials_in, error_response, forward, is_query, read_request,
};

#[derive(Default)]
struct State {
    counts: BTreeMap<String, u32>,
    /// S3's conditional headers dropped before moto sees them: a store that ignores them.
    ignore_conditions: bool,
    /// S3's `If-Match` alone dropped.
    ignore_if_match: bool,
    /// Actions whose requests are dropped unanswered (a network cut between a client and them).
    cut_off: std::collections::BTreeSet<String>,
    /// Share of requests that get a fault (0.0 to 1.0).
    chaos: f64,
    /// An API action answered with a terminal error (InvalidParameterValue) every time.
    fail_action: Option<String>,
    /// API actions answered with an error code, each this many more times.
    fail_with: Vec<(String, String, u32)>,
    faults: BTreeMap<&'static str, u32>,
    rng: u64,
    latency: Duration,
    strict: StrictState,
    /// Calls seen since `kill_at` armed, and the SIGKILL it arms.
    seen: u32,
    kill_at: Option<KillAt>,
    /// A SIGKILL at the first call of this action (`kill_at_action`).
    kill_on: Option<(String, KillAt)>,
    /// A chain of kills (`chain.rs`).
    chain: Option<Chain>,
    /// Calls by IAM action (`ec2:CreateVpc`), for the policy completeness check.
    iam: BTreeMap<String, u32>,
    /// AWS's account-wide request buckets, when a test asks for them.
    buckets: Option<Buckets>,
    /// The authorizations of every call since recording started (`start_authz_at`).
    authz: Option<Vec<Authz>>,
    /// Recordings open at once: two runs of two clusters would mix their calls.
    authz_sessions: u32,
    authz_mixed: bool,
    authz_dropped: DroppedTags,
    /// A kill-at-every-call sweep runs here: its runs repeat the clean run's calls (checked), and
    /// reading every named resource's tags on each would double the sweep's time.
    authz_off: bool,
    /// The access keys, secrets and session tokens STS issued through this proxy: what must
    /// never be written down.
    issued: Vec<String>,
    /// The form bodies of the AssumeRole calls sent through (RoleArn, ExternalId, …).
    assume_role_requests: Vec<String>,
    /// The account of each access key STS issued (a role's): whose buckets its requests take.
    accounts: HashMap<String, String>,
    /// Service Quotas answered and enforced (`quotas.rs`), once a test sets them.
    quotas: Option<super::quotas::Quotas>,
    /// The port of each chained process by generation, until the next one starts.
    chain_ports: HashMap<u64, u16>,
    /// The last generation a chain of this proxy reached: the next chain counts on from it, so
    /// no port of an earlier chain's process is ever taken for a later one's.
    chain_generations: u64,
}

/// Every live proxy by port, so that a command run against one can be checked against the IAM
/// policy of its workflow (`AwsEnv::cli_at`).
fn registry() -> &'static Mutex<HashMap<u16, Weak<Mutex<State>>>> {
    static PROXIES: OnceLock<Mutex<HashMap<u16, Weak<Mutex<State>>>>> = OnceLock::new();
    PROXIES.get_or_init(Default::default)
}

/// The IAM-action counts of the proxy serving `endpoint`, if it is one of ours.
pub fn iam_counts_at(endpoint: &str) -> Option<BTreeMap<String, u32>> {
    let state = state_at(endpoint)?;
    let counts = state.lock().unwrap().iam.clone();
    Some(counts)
}

/// Starts recording what AWS would authorize for each call through the proxy serving `endpoint`
/// (`authz.rs`): false if it is not one of ours.
pub fn start_authz_at(endpoint: &str) -> bool {
    let Some(state) = state_at(endpoint) else { return false };
    let mut s = state.lock().unwrap();
    if s.authz_off {
        return false;
    }
    s.authz_sessions += 1;
    s.authz_mixed |= s.authz_sessions > 1;
    s.authz.get_or_insert_with(Vec::new);
    true
}

/// The authorizations recorded since `start_authz_at`; None if two recordings overlapped.
pub fn finish_authz_at(endpoint: &str) -> Option<Vec<Authz>> {
    let state = state_at(endpoint)?;
    let mut s = state.lock().unwrap();
    s.authz_sessions = s.authz_sessions.saturating_sub(1);
    if s.authz_sessions > 0 {
        return None;
    }
    let calls = s.authz.take();
    s.authz_dropped.clear();
    let mixed = std::mem::take(&mut s.authz_mixed);
    calls.filter(|_| !mixed)
}

fn state_at(endpoint: &str) -> Option<Arc<Mutex<State>>> {
    let port: u16 = endpoint.rsplit(':').next()?.parse().ok()?;
    registry().lock().unwrap().get(&port)?.upgrade()
}

/// SDK clients on the moto behind one proxy, for reading what a call names before it acts; made
/// on the first recorded call, used by every handler at once. Per proxy, not per moto port: a port
/// reused by a later test's moto must not inherit clients (and their pooled connections) made for
/// an earlier one.
type Readers = OnceLock<Clients>;

/// The authorizations of one recorded call. The proxy keeps serving whatever the reading does: a
/// panic becomes an authorization no policy grants, naming it, so the run's check fails on it
/// rather than every later call meeting a closed connection.
fn record(readers: &Readers, upstream: u16, dropped: &DroppedTags, iam_act: &str, req: &Request) -> Vec<Authz> {
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let c = readers.get_or_init(|| Clients::shared(&format!("http://127.0.0.1:{upstream}")));
        authorizations(c, dropped, iam_act, &req.head, &req.body)
    }));
    read.unwrap_or_else(|panic| {
        let why =
            panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
        vec![Authz::unrecorded(iam_act, &why.unwrap_or_default())]
    })
}

/// SIGKILL the client process at its `call`-th API call (1-based, from arming): before the call
/// reaches AWS, or after AWS acted but before the answer reaches the client.
#[derive(Clone, Copy, Debug)]
pub struct KillAt {
    pub call: u32,
    pub after_aws_acts: bool,
    pub pid: u32,
}

pub struct Proxy {
    pub port: u16,
    pub addr: String,
    state: Arc<Mutex<State>>,
    upstream: u16,
    readers: Arc<Readers>,
}

impl Proxy {
    pub fn start(upstream: u16) -> Proxy {
        Proxy::start_on("127.0.0.1", upstream)
    }

    /// A proxy listening on `addr` (a test network's address, for daemons in other network
    /// namespaces), forwarding to moto on loopback.
    pub fn start_on(addr: &str, upstream: u16) -> Proxy {
        let state = Arc::new(Mutex::new(State { rng: 0x9e37_79b9_7f4a_7c15, ..State::default() }));
        if let Some(strict) = Strict::from_env() {
            state.lock().unwrap().strict.config = strict;
        }
        let readers: Arc<Readers> = Arc::default();
        let port = listen(addr, upstream, &state, &readers, None);
        registry().lock().unwrap().insert(port, Arc::downgrade(&state));
        Proxy { port, addr: addr.to_string(), state, upstream, readers }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.addr, self.port)
    }

    /// Answers Service Quotas with these quotas and refuses the creates that would pass them.
    pub fn set_quotas(&self, quotas: super::quotas::Quotas) {
        self.state.lock().unwrap().quotas = Some(quotas);
    }

    pub fn set_chaos(&self, rate: f64, seed: u64) {
        let mut s = self.state.lock().unwrap();
        s.chaos = rate;
        s.rng = seed | 1;
    }

    /// Answers like AWS's account-wide request token buckets (`buckets.rs`), fresh and full.
    pub fn set_buckets(&self, rates: BTreeMap<&'static str, Rate>) {
        self.state.lock().unwrap().buckets = Some(Buckets::new(rates));
    }

    /// What the buckets admitted and throttled since `set_buckets`, and the floor of that run.
    pub fn bucket_report(&self) -> BucketReport {
        self.state.lock().unwrap().buckets.as_ref().map(Buckets::report).unwrap_or_default()
    }

    /// Delays every request, so a run lasts long enough to be interrupted many times.
    pub fn set_latency(&self, latency: Duration) {
        self.state.lock().unwrap().latency = latency;
    }

    /// Layers these parts of AWS's contract over moto (see `strict.rs`).
    pub fn set_strict(&self, strict: Strict) {
        self.state.lock().unwrap().strict.config = strict;
    }

    /// How long a create interrupted behind this proxy must wait for its lookup to see what it
    /// made: twice the longest lag the proxy adds (the CLI's `--consistency-settle`), 100 ms
    /// when it adds none (moto shows a new resource at once).
    pub fn consistency_settle(&self) -> Duration {
        let strict = &self.state.lock().unwrap().strict.config;
        let lag = [strict.lag, strict.iam_lag, strict.transitions].into_iter().flatten().max();
        lag.map_or(Duration::from_millis(100), |l| l * 2)
    }

    /// Cuts the client off from these actions (their requests go unanswered); empty restores.
    pub fn cut_off(&self, actions: &[&str]) {
        self.state.lock().unwrap().cut_off = actions.iter().map(|a| a.to_string()).collect();
    }

    /// Plays a store that ignores S3's conditions (`If-None-Match`, `If-Match`): they are
    /// dropped on the way.
    pub fn ignore_conditions(&self, on: bool) {
        self.state.lock().unwrap().ignore_conditions = on;
    }

    /// Plays a store that honours `If-None-Match` but ignores `If-Match` (dropped before moto
    /// sees it): what the store's proof must refuse as well.
    pub fn ignore_if_match(&self, on: bool) {
        self.state.lock().unwrap().ignore_if_match = on;
    }

    /// What the strict layer did, by behaviour: proof that a strict test met the behaviour.
    pub fn strict_effects(&self) -> BTreeMap<&'static str, u32> {
        self.state.lock().unwrap().strict.effects.clone()
    }

    /// Answers the next `times` calls of `action` with AWS error `code` (HTTP 400).
    pub fn fail_with(&self, action: &str, code: &str, times: u32) {
        self.state.lock().unwrap().fail_with.push((action.to_string(), code.to_string(), times));
    }

    /// Disarms every `fail_with` still armed.
    pub fn clear_fail_with(&self) {
        self.state.lock().unwrap().fail_with.clear();
    }

    pub fn fail_action(&self, action: Option<&str>) {
        self.state.lock().unwrap().fail_action = action.map(str::to_string);
    }

    /// Arms one SIGKILL of the process `at.pid` at its `at.call`-th API call from now.
    /// Arms one SIGKILL of the process `at.pid` at its next call of `action` (`at.call` unused).
    pub fn kill_at_action(&self, action: &str, at: KillAt) {
        self.state.lock().unwrap().kill_on = Some((action.to_string(), at));
    }

    /// Every access key id, secret access key and session token STS issued through this proxy.
    pub fn issued_credentials(&self) -> Vec<String> {
        self.state.lock().unwrap().issued.clone()
    }

    /// The form bodies of the AssumeRole calls sent through this proxy, as sent.
    pub fn assume_role_requests(&self) -> Vec<String> {
        self.state.lock().unwrap().assume_role_requests.clone()
    }

    /// Whether the kill armed by `kill_at_action` fired.
    pub fn action_kill_fired(&self) -> bool {
        self.state.lock().unwrap().kill_on.is_none()
    }

    pub fn kill_at(&self, at: KillAt) {
        let mut s = self.state.lock().unwrap();
        s.authz_off = true;
        s.seen = 0;
        s.kill_at = Some(at);
    }

    /// Whether the armed kill fired (and disarms it either way).
    pub fn kill_fired(&self) -> bool {
        let mut s = self.state.lock().unwrap();
        s.kill_at.take().is_none()
    }

    /// API calls seen, by action, since the last reset (faulted ones included).
    pub fn counts(&self) -> BTreeMap<String, u32> {
        self.state.lock().unwrap().counts.clone()
    }

    pub fn faults(&self) -> BTreeMap<&'static str, u32> {
        self.state.lock().unwrap().faults.clone()
    }

    pub fn reset_counts(&self) {
        self.state.lock().unwrap().counts.clear();
    }

    pub fn total(&self) -> u32 {
        self.counts().values().sum()
    }
}

enum Fault {
    None,
    Code(String),
    Throttle,
    /// The account's bucket for the request's class is empty.
    Bucket,
    ServerError,
    DropBefore,
    DropAfter,
    Terminal,
    Kill {
        pid: u32,
        after_aws_acts: bool,
    },
    /// A chain's kill: its thread, which holds the process, kills it (`Proxy::chain_wait`).
    ChainKill {
        after_aws_acts: bool,
    },
    /// A call of a process a chain killed (its other branches): held until it is dead, then
    /// dropped, so that the process hears nothing after the call it was killed at.
    FromTheKilled,
}

fn decide(st: &Mutex<State>, action: &str, class: Option<(&str, &str)>, asks: Option<String>) -> Fault {
    let mut s = st.lock().unwrap();
    *s.counts.entry(action.to_string()).or_insert(0) += 1;
    s.seen += 1;
    if let (Some(chain), Some(asks)) = (s.chain.as_mut(), asks) {
        if chain.from_the_killed() {
            return Fault::FromTheKilled;
        }
        if let Some(after_aws_acts) = chain.kill_at(action, asks) {
            return Fault::ChainKill { after_aws_acts };
        }
    }
    if let Some((a, k)) = &s.kill_on
        && a == action
    {
        let (pid, after_aws_acts) = (k.pid, k.after_aws_acts);
        s.kill_on = None;
        return Fault::Kill { pid, after_aws_acts };
    }
    if let Some(k) = s.kill_at
        && k.call == s.seen
    {
        s.kill_at = None;
        return Fault::Kill { pid: k.pid, after_aws_acts: k.after_aws_acts };
    }
    if s.cut_off.contains(action) {
        return Fault::DropBefore;
    }
    if s.fail_action.as_deref() == Some(action) {
        *s.faults.entry("terminal").or_insert(0) += 1;
        return Fault::Terminal;
    }
    if let Some((_, code, left)) = s.fail_with.iter_mut().find(|(a, _, left)| a == action && *left > 0) {
        *left -= 1;
        let code = code.clone();
        *s.faults.entry("coded").or_insert(0) += 1;
        return Fault::Code(code);
    }
    if let (Some(buckets), Some((account, class))) = (s.buckets.as_mut(), class)
        && !buckets.admit(account, class, action)
    {
        return Fault::Bucket;
    }
    if s.chaos <= 0.0 {
        return Fault::None;
    }
    // xorshift64*
    s.rng ^= s.rng >> 12;
    s.rng ^= s.rng << 25;
    s.rng ^= s.rng >> 27;
    let r = s.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let unit = (r >> 11) as f64 / (1u64 << 53) as f64;
    if unit >= s.chaos {
        return Fault::None;
    }
    let (fault, name) = match (r >> 3) % 4 {
        0 => (Fault::Throttle, "throttle"),
        1 => (Fault::ServerError, "5xx"),
        2 => (Fault::DropBefore, "drop-before"),
        _ => (Fault::DropAfter, "drop-after"),
    };
    *s.faults.entry(name).or_insert(0) += 1;
    fault
}

/// The account a request acts in, by its access key: a role's, as STS issued it through this
/// proxy; "" for the process's own.
fn account_of(st: &Mutex<State>, head: &str) -> String {
    st.lock().unwrap().accounts.get(access_key(head)).cloned().unwrap_or_default()
}

fn serve(
    mut conn: TcpStream,
    upstream: u16,
    st: &Mutex<State>,
    readers: &Readers,
    generation: Option<u64>,
) -> std::io::Result<()> {
    let Some(mut req) = read_request(&mut conn)? else { return Ok(()) };
    let (all, if_match) = {
        let s = st.lock().unwrap();
        (s.ignore_conditions, s.ignore_if_match)
    };
    if all || if_match {
        let kept: Vec<&str> = req
            .head
            .split("\r\n")
            .filter(|l| {
                let name = l.split_once(':').map(|(k, _)| k.trim().to_ascii_lowercase()).unwrap_or_default();
                name != "if-match" && (name != "if-none-match" || !all)
            })
            .collect();
        req.head = kept.join("\r\n");
    }
    let act = action(&req);
    let ec2 = is_query(&act) && String::from_utf8_lossy(&req.body).contains("Version=2016-11-15");
    let iam_act = super::iam::iam_action(&req.head, &act);
    let recording = {
        let mut s = st.lock().unwrap();
        *s.iam.entry(iam_act.clone()).or_insert(0) += 1;
        s.authz.is_some()
    };
    if recording {
        // Read before the call acts: a delete's target has its tags only until then.
        let dropped = st.lock().unwrap().authz_dropped.clone();
        let found = record(readers, upstream, &dropped, &iam_act, &req);
        if let Some(calls) = st.lock().unwrap().authz.as_mut() {
            calls.extend(found);
        }
    }
    let latency = st.lock().unwrap().latency;
    std::thread::sleep(latency);
    let class = class_of(&act, &String::from_utf8_lossy(&req.body));
    let asks = chained_call(st).then(|| what_it_asks(&req.head, &req.body));
    let account = account_of(st, &req.head);
    if generation.is_some_and(|g| stale(st, g)) {
        return Ok(());
    }
    let reply = match decide(st, &act, class.map(|c| (account.as_str(), c)), asks) {
        Fault::None => {
            let quotas = st.lock().unwrap().quotas.clone();
            let (refused, _within_quota) = super::quotas::admit(quotas.as_ref(), &act, &req, readers, upstream);
            // A call of a chained process that the chain killed while the call was on its way
            // (decided, then waiting for the quota's lock or simply not yet sent) never left that
            // process: sent now, it would reach AWS after a resumed run had looked it up.
            if from_a_dead_process(st, generation) {
                return Ok(());
            }
            let early = refused.map(Ok).or_else(|| st.lock().unwrap().strict.before(&act, &req.body));
            match early {
                Some(Ok(remembered)) => remembered,
                Some(Err((status, code, message))) => error_response(status, ec2, code, &message),
                None => {
                    let answer = forward(&req, upstream)?;
                    if act == "AssumeRole" {
                        let issued = credentials_in(&answer);
                        let mut s = st.lock().unwrap();
                        s.assume_role_requests.push(String::from_utf8_lossy(&req.body).into_owned());
                        if let (Some(key), Some(account)) = (issued.first(), assumed_account(&answer)) {
                            s.accounts.insert(key.clone(), account);
                        }
                        s.issued.extend(issued);
                    }
                    if recording && let Some((id, tags)) = dropped_tags(&act, &req.body, &answer) {
                        st.lock().unwrap().authz_dropped.insert(id, tags);
                    }
                    st.lock().unwrap().strict.after(&act, &req.body, answer)
                }
            }
        }
        Fault::Throttle => {
            let code = if ec2 { "RequestLimitExceeded" } else { "Throttling" };
            error_response("503 Service Unavailable", ec2, code, "Rate exceeded (injected)")
        }
        // What AWS answers when the account's bucket is empty: EC2 on HTTP 503, ELB and Route53
        // on HTTP 400 (Route53 also says `PriorRequestNotComplete` for a change in flight, which
        // is not a rate).
        Fault::Bucket if ec2 => {
            error_response("503 Service Unavailable", true, "RequestLimitExceeded", "Request limit exceeded.")
        }
        Fault::Bucket => error_response("400 Bad Request", false, "Throttling", "Rate exceeded"),
        Fault::ServerError => error_response("500 Internal Server Error", ec2, "InternalError", "injected"),
        Fault::Code(code) => error_response("400 Bad Request", ec2, &code, "injected"),
        Fault::Terminal => {
            let code = if is_query(&act) { "InvalidParameterValue" } else { "InvalidInput" };
            error_response("400 Bad Request", ec2, code, "injected terminal failure")
        }
        Fault::DropBefore => return Ok(()),
        Fault::DropAfter => {
            // AWS acted: what it remembers (tokens, new ids) it remembers, though nobody hears.
            let answer = forward(&req, upstream)?;
            st.lock().unwrap().strict.after(&act, &req.body, answer);
            return Ok(());
        }
        Fault::Kill { pid, after_aws_acts } => {
            if after_aws_acts {
                let answer = forward(&req, upstream)?;
                st.lock().unwrap().strict.after(&act, &req.body, answer);
            }
            let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
            return Ok(());
        }
        Fault::FromTheKilled => {
            wait_buried(st);
            return Ok(());
        }
        Fault::ChainKill { after_aws_acts } => {
            // Whatever happens to the call (AWS unreachable), its process dies before the caller
            // hears anything: a process the chain took for killed, living on, would have every
            // later call dropped as a dead process's.
            let forwarded = if after_aws_acts { Some(forward(&req, upstream)) } else { None };
            let failed = match forwarded {
                Some(Ok(answer)) => {
                    st.lock().unwrap().strict.after(&act, &req.body, answer);
                    None
                }
                Some(Err(e)) => Some(e),
                None => None,
            };
            bury(st);
            return failed.map_or(Ok(()), Err);
        }
    };
    conn.write_all(&reply)?;
    conn.flush()
}
