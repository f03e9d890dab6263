//! Kill-at-every-call sweeps spread over several worlds at once (a moto, a journal and a proxy
//! each). A kill's two runs mostly wait — a create resumed mid-step settles 5 s before it looks
//! for what the killed attempt made, as AWS's eventual consistency asks — so side by side they
//! take a fraction of the time they take one after another, for the same work.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Worlds a sweep runs in at once.
pub const WORLDS: usize = 3;

/// Calls `kill(world, call)` once for every call in `1..=calls`, on `WORLDS` threads: the first
/// in `first` (the world the clean run counted the calls in), each other in a world of its own
/// made by `world()`. Returns how many kills fired (`kill` says whether its own did) and the
/// worlds, for checks across them. A failure stops the others taking new calls and is re-raised
/// here.
pub fn every_call<W: Send>(
    calls: u32,
    first: W,
    world: impl Fn() -> W + Sync,
    kill: impl Fn(&W, u32) -> bool + Sync,
) -> (u32, Vec<W>) {
    let next = AtomicU32::new(1);
    let fired = AtomicU32::new(0);
    let failed = AtomicBool::new(false);
    let mut first = Some(first);
    let results: Vec<std::thread::Result<W>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WORLDS)
            .map(|_| {
                let given = first.take();
                let (next, fired, failed, world, kill) = (&next, &fired, &failed, &world, &kill);
                s.spawn(move || {
                    let _stop_the_others = StopOnPanic(failed);
                    let w = given.unwrap_or_else(world);
                    while !failed.load(Ordering::SeqCst) {
                        let call = next.fetch_add(1, Ordering::SeqCst);
                        if call > calls {
                            break;
                        }
                        if kill(&w, call) {
                            fired.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    w
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut worlds = Vec::new();
    for r in results {
        match r {
            Ok(w) => worlds.push(w),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    (fired.into_inner(), worlds)
}

struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}
