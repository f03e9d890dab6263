//! Running workflows under leases: `drive` runs one (the `run` and `retry` commands, tests), and
//! `daemon` claims and runs many, renewing leases by heartbeat and stopping gracefully.
//!
//! Why claiming lists only the head of each cluster's queue (its lowest unfinished ticket) plus the
//! workflows of no cluster (`Journal::claimable`): a runnable workflow is never starved behind
//! blocked ones (tested with 1,000:
//! `a_workflow_behind_a_thousand_blocked_ones_on_another_cluster_still_runs`, in
//! `workflows/tests/engine.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::lease::BootInstant;

use infraflow_journal::{AcquireOutcome, JournalError, WorkflowState};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::context::{LeaseCell, Signals};
use crate::engine::Engine;
use crate::error::EngineError;

/// How many workflows waiting for their hold a daemon keeps beside its workers.
const MAX_WAITERS: usize = 256;
use crate::progress::Progress;

/// How a driven workflow was left.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub id: String,
    pub state: WorkflowState,
    pub output: Option<Value>,
    pub error: Option<String>,
}

/// The leases this process holds, renewed together.
#[derive(Default)]
struct Held {
    leases: Mutex<HashMap<String, (Arc<LeaseCell>, Arc<Signals>)>>,
}

impl Held {
    fn insert(&self, id: &str, lease: Arc<LeaseCell>, signals: Arc<Signals>) {
        self.leases.lock().unwrap().insert(id.to_string(), (lease, signals));
    }

    fn remove(&self, id: &str) {
        self.leases.lock().unwrap().remove(id);
    }

    fn ids(&self) -> Vec<String> {
        self.leases.lock().unwrap().keys().cloned().collect()
    }

    /// One renewal for every held lease; passes on cancel requests and lost leases.
    async fn heartbeat(&self, engine: &Engine) {
        let ids = self.ids();
        if ids.is_empty() {
            return;
        }
        let now = engine.clock.now_ms();
        let ttl = engine.config.lease_ttl.as_millis() as i64;
        let sent = BootInstant::now();
        match engine.journal.renew(&engine.owner.id, ids, now, ttl).await {
            Ok(renewals) => {
                (engine.observer)(&Progress::LeasesRenewed { ok: true });
                let leases = self.leases.lock().unwrap();
                for r in renewals {
                    let Some((lease, signals)) = leases.get(&r.id) else { continue };
                    if r.held {
                        lease.renewed(sent, now + ttl);
                        if r.cancel_requested && !signals.cancel_requested() {
                            signals.cancel();
                        }
                    } else if !signals.is_finishing() {
                        tracing::warn!(workflow = %r.id, "lease lost; abandoning the workflow here");
                        signals.lose();
                    }
                }
            }
            Err(e) => {
                (engine.observer)(&Progress::LeasesRenewed { ok: false });
                tracing::warn!(error = %e, "lease renewal failed; will try again")
            }
        }
    }
}

impl Held {
    /// Drops every held workflow whose lease has reached its self-fence without a successful
    /// renewal (see `LeaseCell`). Runs beside the heartbeat, which may be stuck in the journal.
    fn fence(&self) {
        let now = BootInstant::now();
        for (id, (lease, signals)) in self.leases.lock().unwrap().iter() {
            if now >= lease.fence_at() && !signals.is_lost() && !signals.is_finishing() {
                tracing::warn!(workflow = %id, "no lease renewal succeeded in time; dropping the workflow before its lease can expire");
                signals.lose();
            }
        }
    }
}

/// How often held leases are checked against their self-fence.
const FENCE_CHECK: Duration = Duration::from_millis(100);

impl Engine {
    /// Runs one workflow to a resting state in this process: takes its lease (waiting while a
    /// live owner or an older workflow of the same cluster has it), executes, releases.
    /// Returns early, leaving it resumable, when `signals` asks to stop.
    pub async fn drive(&self, id: &str, signals: Arc<Signals>) -> Result<Outcome, EngineError> {
        let mut last_wait = String::new();
        loop {
            let now = self.clock.now_ms();
            let ttl = self.config.lease_ttl.as_millis() as i64;
            let sent = BootInstant::now();
            match self.journal.acquire(id, &self.owner.id, now, ttl).await {
                Ok(AcquireOutcome::Acquired { fence, .. }) => {
                    let lease = Arc::new(LeaseCell::new(fence, now + ttl, ttl, sent));
                    let result = self.execute_with_heartbeat(id, lease, signals.clone()).await;
                    // A finished workflow's lease went with its last record.
                    if !matches!(result, Ok(s) if s.is_finished()) {
                        let _ = self.journal.release(&self.owner.id, vec![id.to_string()]).await;
                    }
                    let state = match result {
                        // Another owner took over (this process stalled past its lease): it
                        // carries on, and this call waits for its result.
                        Err(EngineError::Journal(JournalError::LeaseLost { .. })) => WorkflowState::Running,
                        other => other?,
                    };
                    if state.is_runnable() && !signals.stop_requested() {
                        continue;
                    }
                    return self.outcome(id).await;
                }
                Ok(AcquireOutcome::NotRunnable(_)) => return self.outcome(id).await,
                Ok(AcquireOutcome::HeldBy(owner)) => {
                    let reason = format!("{owner}, which holds it, to finish or for its lease to expire");
                    self.report_wait(id, &mut last_wait, reason);
                }
                Ok(AcquireOutcome::WaitingFor { id: other, workflow, state }) => {
                    let reason = format!("{workflow} workflow {other} ({state}) on the same cluster");
                    self.report_wait(id, &mut last_wait, reason);
                }
                Err(e) if e.is_retryable() => {}
                Err(e) => return Err(e.into()),
            }
            if signals.stop_requested() {
                return self.outcome(id).await;
            }
            let wake = self.clock.now_ms() + self.config.poll.as_millis() as i64;
            tokio::select! {
                _ = self.clock.sleep_until(wake) => {}
                _ = signals.stopped() => {}
            }
        }
    }

    fn report_wait(&self, id: &str, last: &mut String, reason: String) {
        if last.is_empty() {
            let since = (infraflow_trace::now_ns(), reason.clone());
            self.queued.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string(), since);
        }
        if *last != reason {
            (self.observer)(&Progress::Waiting { workflow: id.to_string(), reason: reason.clone() });
            *last = reason;
        }
    }

    async fn outcome(&self, id: &str) -> Result<Outcome, EngineError> {
        let (state, output, error) =
            self.journal.outcome_async(id).await?.ok_or_else(|| EngineError::NotFound(id.to_string()))?;
        Ok(Outcome { id: id.to_string(), state, output, error })
    }

    async fn execute_with_heartbeat(
        &self,
        id: &str,
        lease: Arc<LeaseCell>,
        signals: Arc<Signals>,
    ) -> Result<WorkflowState, EngineError> {
        let held = Held::default();
        held.insert(id, lease.clone(), signals.clone());
        let beat = async {
            loop {
                tokio::time::sleep(self.config.heartbeat).await;
                held.heartbeat(self).await;
            }
        };
        let fence = async {
            loop {
                tokio::time::sleep(FENCE_CHECK).await;
                held.fence();
            }
        };
        tokio::select! {
            r = self.execute_guarded(id, lease, signals.clone()) => r,
            _ = beat => unreachable!("the heartbeat loop never ends"),
            _ = fence => unreachable!("the fence loop never ends"),
            _ = signals.lost() => Ok(WorkflowState::Running),
        }
    }

    /// Claims and runs workflows until `shutdown` is signalled, at most `workers` at a time.
    /// On shutdown, in-flight steps get `shutdown_grace` to finish; then they are abandoned
    /// (their steps are idempotent and will be re-run by the next owner) and leases released.
    pub async fn daemon(self: Arc<Self>, workers: usize, shutdown: Arc<Signals>) -> Result<(), EngineError> {
        let held = Arc::new(Held::default());
        let mut running: HashMap<String, Arc<Signals>> = HashMap::new();
        let mut tasks: JoinSet<(String, Result<WorkflowState, EngineError>)> = JoinSet::new();
        // Which workflow each task runs: a task that panics past `execute_guarded`'s guard (or
        // is aborted) returns no id of its own, and must still give its workflow up.
        let mut task_of: HashMap<tokio::task::Id, String> = HashMap::new();
        let beat = {
            let (engine, held) = (self.clone(), held.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(engine.config.heartbeat).await;
                    held.heartbeat(&engine).await;
                }
            })
        };
        let fence = {
            let held = held.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(FENCE_CHECK).await;
                    held.fence();
                }
            })
        };
        tracing::info!(owner = %self.owner.id, workers, "daemon started");
        // A workflow waiting for its hold (another journal's lease, the account's quota) leaves
        // its slot: were every slot held by waiters, the teardown or rollback that ends their wait
        // would never be claimed (SAFETY-A7937A6 G6). Waiters are bounded all the same.
        // One slot a worker, held while a workflow acts, given back while it waits for its hold
        // and taken again before it acts on (`Signals::occupy_again`).
        let slots = Arc::new(tokio::sync::Semaphore::new(workers));
        let room = |running: &HashMap<String, Arc<Signals>>| {
            slots.available_permits() > 0 && running.len() < workers + MAX_WAITERS
        };
        while !shutdown.stop_requested() {
            if room(&running) {
                let now = self.clock.now_ms();
                let candidates = match self.journal.claimable(now, &self.owner.id, 1000) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list claimable workflows; will try again");
                        Vec::new()
                    }
                };
                for id in candidates {
                    if !room(&running) {
                        break;
                    }
                    if running.contains_key(&id) {
                        continue;
                    }
                    let Ok(permit) = slots.clone().try_acquire_owned() else { break };
                    let ttl = self.config.lease_ttl.as_millis() as i64;
                    // The time of this acquisition, not of the listing: on a slow disk a lease
                    // written late must not be born nearly expired.
                    let now = self.clock.now_ms();
                    let sent = BootInstant::now();
                    match self.journal.acquire(&id, &self.owner.id, now, ttl).await {
                        Ok(AcquireOutcome::Acquired { previous, fence }) => {
                            tracing::info!(workflow = %id, previous = ?previous, "claimed");
                            (self.observer)(&Progress::LeaseTaken { workflow: id.clone(), previous: previous.clone() });
                            let lease = Arc::new(LeaseCell::new(fence, now + ttl, ttl, sent));
                            let signals = Arc::new(Signals::default());
                            signals.occupy(slots.clone(), permit);
                            held.insert(&id, lease.clone(), signals.clone());
                            running.insert(id.clone(), signals.clone());
                            let engine = self.clone();
                            let workflow = id.clone();
                            let task = tasks.spawn(async move {
                                let r = tokio::select! {
                                    r = engine.execute_guarded(&id, lease, signals.clone()) => r,
                                    _ = signals.lost() => Ok(WorkflowState::Running),
                                };
                                signals.vacate();
                                (id, r)
                            });
                            task_of.insert(task.id(), workflow);
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(workflow = %id, error = %e, "cannot claim"),
                    }
                }
            }
            let wake = self.clock.now_ms() + self.config.poll.as_millis() as i64;
            tokio::select! {
                Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    self.settle(done, &held, &mut running, &mut task_of).await;
                }
                _ = self.clock.sleep_until(wake) => {}
                // PostgreSQL tells of work committed by other processes at once; SQLite never
                // resolves this, and the poll finds it.
                _ = self.journal.work_arrived(), if room(&running) => {}
                _ = shutdown.stopped() => {}
            }
        }
        tracing::info!(in_flight = running.len(), "daemon stopping");
        for s in running.values() {
            s.stop();
        }
        let grace = tokio::time::sleep(self.config.shutdown_grace);
        tokio::pin!(grace);
        while !tasks.is_empty() {
            tokio::select! {
                Some(done) = tasks.join_next_with_id() => self.settle(done, &held, &mut running, &mut task_of).await,
                _ = &mut grace => {
                    tracing::warn!(abandoned = tasks.len(), "grace period over; abandoning in-flight steps");
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
        beat.abort();
        fence.abort();
        let left = held.ids();
        if !left.is_empty() {
            self.journal.release(&self.owner.id, left).await?;
        }
        tracing::info!("daemon stopped; leases released");
        Ok(())
    }

    async fn settle(
        &self,
        done: Result<(tokio::task::Id, (String, Result<WorkflowState, EngineError>)), tokio::task::JoinError>,
        held: &Held,
        running: &mut HashMap<String, Arc<Signals>>,
        task_of: &mut HashMap<tokio::task::Id, String>,
    ) {
        let (id, result) = match done {
            Ok((task, (id, result))) => {
                task_of.remove(&task);
                (id, result)
            }
            Err(e) => {
                let Some(id) = task_of.remove(&e.id()) else { return };
                tracing::error!(workflow = %id, error = %e, "workflow task ended without a result; giving it up");
                (id, Ok(WorkflowState::Running))
            }
        };
        match &result {
            Ok(state) => tracing::info!(workflow = %id, state = %state, "workflow left"),
            Err(e) => tracing::error!(workflow = %id, error = %e, "workflow execution failed"),
        }
        held.remove(&id);
        running.remove(&id);
        if matches!(result, Ok(s) if s.is_finished()) {
            return;
        }
        if let Err(e) = self.journal.release(&self.owner.id, vec![id.clone()]).await {
            tracing::warn!(workflow = %id, error = %e, "cannot release lease; it will expire");
        }
    }
}
