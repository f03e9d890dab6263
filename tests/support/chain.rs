//! A chain of kills, the proxy's half (`sweep::chain` drives it): each process of one run is
//! killed at its first call that no process of the chain made before — before the call reaches
//! AWS, or after AWS acted — and the run is resumed, until a process finishes. A resumed run
//! repeats what the killed one asked (the killed step again, its lookups): those go through, the
//! killed call among them, and its first call past them is the next kill. So the kills walk the
//! run call by call — every call once, each kill's recovery itself killed — at the cost of about
//! one run, not a run a call.
//!
//! A chain kills at the calls of the actions it is given (`sweep::every_call_chained` shares a
//! run's actions out to chains in worlds of their own); the others go through.
//!
//! A call is known by what it asks (method, path, query and body, less pagination tokens), how
//! many times its process asked the same before, and how far the run had got: the number of
//! distinct changes (calls other than reads) that had reached AWS. The last tells a confirming
//! round's reads from the first round's, which ask the same.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

pub struct Chain {
    after_aws_acts: bool,
    /// The process being killed at; None while it starts, or once it was killed.
    pid: Option<u32>,
    /// A call met its process's death: until the chain's thread has the process dead, every call
    /// of it is held (it hears nothing after the call it was killed at).
    dying: bool,
    /// The killing call asks for the death now (before AWS, or once AWS acted): the chain's
    /// thread, which holds the process, kills it (`Proxy::chain_wait`).
    doomed: bool,
    /// A process is starting: its calls wait until the chain knows its pid.
    starting: bool,
    /// What the current process asked, and how often.
    asked: HashMap<String, u32>,
    /// Every call (what, which time, how far) a process of the chain made.
    seen: HashSet<String>,
    /// The changes that reached AWS: how far the run has got.
    changes: HashSet<String>,
    /// The actions this chain kills at (the others are other chains', in other worlds).
    actions: HashSet<String>,
    fired: bool,
    /// Which process of the chain is current (one per `expect_process`): each has a port.
    generation: u64,
    pub kills: Kills,
}

/// What a chain killed at, by action, and every action its processes called.
#[derive(Clone, Debug, Default)]
pub struct Kills {
    pub killed: BTreeMap<String, u32>,
    pub called: BTreeSet<String>,
}

impl Chain {
    /// A chain whose processes are numbered on from `generations` (the proxy's earlier chains').
    pub fn new(after_aws_acts: bool, actions: HashSet<String>, generations: u64) -> Chain {
        Chain {
            after_aws_acts,
            pid: None,
            dying: false,
            doomed: false,
            starting: false,
            asked: HashMap::new(),
            seen: HashSet::new(),
            changes: HashSet::new(),
            actions,
            fired: false,
            generation: generations,
            kills: Kills::default(),
        }
    }

    /// The next process is starting: hold its calls until `process` names it.
    pub fn expect_process(&mut self) {
        self.pid = None;
        self.dying = false;
        self.doomed = false;
        self.starting = true;
        self.asked.clear();
        self.fired = false;
        self.generation += 1;
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn process(&mut self, pid: u32) {
        self.pid = Some(pid);
        self.starting = false;
    }

    pub fn starting(&self) -> bool {
        self.starting
    }

    /// Whether the current process was killed.
    pub fn fired(&self) -> bool {
        self.fired
    }

    /// Whether this call comes from a process the chain has killed (it may still be dying, its
    /// other branches asking): such calls are dropped before AWS, so every call a run makes is
    /// met first by a process the chain can kill at it.
    pub fn from_the_killed(&self) -> bool {
        self.pid.is_none() && !self.starting
    }

    /// Whether the killing call asks for the process's death now.
    pub fn doomed(&self) -> bool {
        self.doomed
    }

    /// Whether the process met its death at a call and is not dead yet.
    pub fn dying(&self) -> bool {
        self.dying
    }

    /// The chain's thread has the process dead (killed, or it ended first).
    pub fn buried(&mut self) {
        self.dying = false;
        self.doomed = false;
    }

    /// Whether this call meets the process's death (and whether after AWS acted), if no process
    /// of the chain made it before and it is of an action this chain kills at. The caller asks
    /// for the death (`doom`) when it is time: at once, or once AWS acted.
    pub fn kill_at(&mut self, action: &str, what: String) -> Option<bool> {
        self.pid?;
        self.kills.called.insert(action.to_string());
        let times = self.asked.entry(what.clone()).or_insert(0);
        *times += 1;
        let change = is_change(action);
        let far = self.changes.len();
        // A change is the same change however far the run got: a resumed run asking again what
        // AWS already did goes through.
        let key = if change { format!("{what}#{times}") } else { format!("{what}#{times}@{far}") };
        let kill = self.seen.insert(key) && self.actions.contains(action);
        if change && (!kill || self.after_aws_acts) {
            self.changes.insert(what);
        }
        if !kill {
            return None;
        }
        self.pid = None;
        self.fired = true;
        self.dying = true;
        *self.kills.killed.entry(action.to_string()).or_insert(0) += 1;
        Some(self.after_aws_acts)
    }

    /// The process this chain killed at a call is to die now.
    pub fn doom(&mut self) {
        self.doomed = true;
    }
}

/// Whether an action changes something in AWS (any call but a read). Route53's REST calls are
/// named by method.
pub fn is_change(action: &str) -> bool {
    !["Describe", "List", "Get", "Head", "route53 GET"].iter().any(|r| action.starts_with(r))
}

/// What a request asks, the same each time a run asks it: pagination tokens are dropped (an
/// emulator may make them anew each listing); idempotency tokens stay (a step's are its own);
/// the ids of what moto makes untagged are masked (`moto_made`).
pub fn what_it_asks(head: &str, body: &[u8]) -> String {
    const PAGING: [&str; 8] = [
        "NextToken",
        "Marker",
        "marker",
        "PaginationToken",
        "continuation-token",
        "key-marker",
        "version-id-marker",
        "StartRecordName",
    ];
    let keep = |p: &&str| !PAGING.iter().any(|k| p.starts_with(&format!("{k}=")));
    let (method, path, query) = super::authz::request_line(head);
    let (path, query, body) = (moto_made(&path), moto_made(&query), moto_made(&String::from_utf8_lossy(body)));
    // A cluster lease's writes: the record's times and serials differ every write, and the store
    // self-test's probe is named anew by each process; what is asked is the same.
    let path = match path.find("/.self-test/") {
        Some(at) => format!("{}/.self-test/*", &path[..at]),
        None => path,
    };
    let body = if body.starts_with("{\"holder\":") { "(a lease record)".to_string() } else { body };
    let body = body.as_bytes();
    let query: Vec<&str> = query.split('&').filter(keep).collect();
    let body = String::from_utf8_lossy(body);
    let body = if body.trim_start().starts_with('{') {
        match serde_json::from_str::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Object(mut m)) => {
                m.remove("PaginationToken");
                serde_json::Value::Object(m).to_string()
            }
            _ => body.to_string(),
        }
    } else if body.contains("Action=") {
        body.split('&').filter(keep).collect::<Vec<_>>().join("&")
    } else {
        body.to_string()
    };
    format!("{method} {path}?{} {body}", query.join("&"))
}

/// `text` with the ids of DHCP options sets masked (`dopt-*`). moto drops the tags a
/// CreateDhcpOptions gives (MOTO-NOTES), so a run killed before its CreateTags leaves the set
/// untagged, and its resume, finding none, makes another: that CreateTags names a new id every
/// time, and a chain keyed by it would kill at it forever (each round leaking a set AWS would
/// have tagged at creation). Masked, the resume's CreateTags is the killed call asked again.
fn moto_made(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("dopt-") {
        out.push_str(&rest[..at + 5]);
        rest = &rest[at + 5..];
        let hex = rest.bytes().take_while(u8::is_ascii_hexdigit).count();
        if hex >= 8 {
            out.push('*');
            rest = &rest[hex..];
        }
    }
    out.push_str(rest);
    out
}
