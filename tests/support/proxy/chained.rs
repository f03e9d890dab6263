//! The proxy's side of a chain of kills (`chain.rs`, driven by `sweep::chain`): the chain's
//! state through the proxy, a port per chained process (so a dead process's late request is
//! known for its own), and the holding of calls while a process starts or dies.

use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Chain, Kills, Proxy, Readers, State, serve};

impl Proxy {
    /// Starts a chain of kills (`sweep::chain`) at the calls of `actions`.
    pub fn chain_start(&self, after_aws_acts: bool, actions: &[String]) {
        let mut s = self.state.lock().unwrap();
        s.authz_off = true;
        let after = s.chain_generations;
        s.chain = Some(Chain::new(after_aws_acts, actions.iter().cloned().collect(), after));
    }

    /// The chain's next process is starting: its calls wait for `chain_process`. Returns the
    /// endpoint it is to call: a port of its own, so that a request the killed process had sent,
    /// read after this one started, is known for the dead process's (`listen`).
    pub fn chain_expect(&self) -> String {
        let generation = {
            let mut s = self.state.lock().unwrap();
            let chain = s.chain.as_mut().expect("a chain started");
            chain.expect_process();
            chain.generation()
        };
        let port = listen(&self.addr, self.upstream, &self.state, &self.readers, Some(generation));
        format!("http://{}:{port}", self.addr)
    }

    pub fn chain_process(&self, pid: u32) {
        self.state.lock().unwrap().chain.as_mut().expect("a chain started").process(pid);
    }

    /// Waits for the chain's process `child` to end, killing it (SIGKILL) when one of its calls
    /// asks (`bury`). The chain's own thread kills it, through the handle it holds: a process
    /// named by pid could have ended and its pid gone to another.
    pub fn chain_wait(&self, child: &mut std::process::Child) -> std::process::ExitStatus {
        loop {
            let ended = child.try_wait().expect("waiting for a chain's process");
            let doomed = self.state.lock().unwrap().chain.as_ref().is_some_and(Chain::doomed);
            if doomed || ended.is_some() {
                let status = match ended {
                    Some(status) => status,
                    None => {
                        child.kill().expect("killing a chain's process");
                        child.wait().expect("waiting for a killed chain's process")
                    }
                };
                if let Some(chain) = self.state.lock().unwrap().chain.as_mut() {
                    chain.buried();
                }
                return status;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether the chain killed its current process.
    pub fn chain_fired(&self) -> bool {
        self.state.lock().unwrap().chain.as_ref().is_some_and(Chain::fired)
    }

    /// Ends the chain: its kills.
    pub fn chain_finish(&self) -> Kills {
        let (chain, ports) = {
            let mut s = self.state.lock().unwrap();
            s.chain_generations = s.chain.as_ref().map_or(s.chain_generations, Chain::generation);
            (s.chain.take(), std::mem::take(&mut s.chain_ports))
        };
        for port in ports.into_values() {
            let _ = TcpStream::connect((self.addr.as_str(), port));
        }
        chain.map(|c| c.kills).unwrap_or_default()
    }
}

/// Asks the chain's thread for its doomed process's death and holds the call until it is dead.
pub(super) fn bury(st: &Mutex<State>) {
    if let Some(chain) = st.lock().unwrap().chain.as_mut() {
        chain.doom();
    }
    wait_buried(st);
}

/// Waits until the chain's doomed process, if any, is dead.
pub(super) fn wait_buried(st: &Mutex<State>) {
    let start = std::time::Instant::now();
    while st.lock().unwrap().chain.as_ref().is_some_and(Chain::dying) {
        assert!(start.elapsed() < Duration::from_secs(180), "a chain's process was not killed within three minutes");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether a chain of kills is on; a call made while its process starts waits until the chain
/// knows the process (its pid), so the process's first call can be killed at too.
pub(super) fn chained_call(st: &Mutex<State>) -> bool {
    let start = std::time::Instant::now();
    loop {
        let (on, starting) = {
            let s = st.lock().unwrap();
            (s.chain.is_some(), s.chain.as_ref().is_some_and(Chain::starting))
        };
        if !starting || start.elapsed() > Duration::from_secs(30) {
            return on;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Serves a new port on `addr`: the proxy's own, or (`generation`) one chained process's. A
/// process's port closes once the chain has moved on to the next (its accept is woken by a
/// connection of the chain's, then finds itself stale), and what it read before is dropped
/// (`decide`): a dead process's request can reach AWS only as its own, never the next one's.
pub(super) fn listen(
    addr: &str,
    upstream: u16,
    state: &Arc<Mutex<State>>,
    readers: &Arc<Readers>,
    generation: Option<u64>,
) -> u16 {
    let listener = TcpListener::bind((addr, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (st, readers) = (state.clone(), readers.clone());
    if let Some(prior) =
        generation.and_then(|g| g.checked_sub(1)).and_then(|g| st.lock().unwrap().chain_ports.remove(&g))
    {
        let _ = TcpStream::connect((addr, prior));
    }
    if let Some(g) = generation {
        st.lock().unwrap().chain_ports.insert(g, port);
    }
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if generation.is_some_and(|g| stale(&st, g)) {
                return;
            }
            let Ok(conn) = conn else { continue };
            let (st, readers) = (st.clone(), readers.clone());
            std::thread::spawn(move || {
                // Shown with a failing test's output: why a client met a closed connection.
                if let Err(e) = serve(conn, upstream, &st, &readers, generation) {
                    eprintln!("test proxy :{port} -> moto :{upstream}: {e}");
                }
            });
        }
    });
    port
}

/// Whether a call came from a chained process that is dead or dying: its port is stale, or the
/// chain has killed the process it belongs to.
pub(super) fn from_a_dead_process(st: &Mutex<State>, generation: Option<u64>) -> bool {
    let Some(g) = generation else { return false };
    let s = st.lock().unwrap();
    s.chain.as_ref().is_none_or(|c| c.generation() != g || c.from_the_killed())
}

/// Whether a chained process's port belongs to a process the chain has moved on from.
pub(super) fn stale(st: &Mutex<State>, generation: u64) -> bool {
    st.lock().unwrap().chain.as_ref().is_none_or(|c| c.generation() != generation)
}
