//! The journal's conformance suite: every behaviour the engine relies on, run against both
//! backends — a real SQLite file and a real PostgreSQL server (`scripts/postgres.sh`, one per test
//! binary, a database per test) — plus what only one of them has (bad files; the database's clock).

#[path = "../../tests/support/postgres.rs"]
mod pg;

use std::time::Duration;

use infraflow_journal::{
    AcquireOutcome, Durability, Event, Journal, JournalError, Location, NewWorkflow, RequestOutcome, StepState,
    SubmitOutcome, WorkflowState,
};
use serde_json::json;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Sqlite,
    Postgres,
}

/// A fresh, empty journal location of one backend.
struct Fixture {
    kind: Kind,
    location: Location,
    _dir: tempfile::TempDir,
    /// The PostgreSQL database's name.
    db: String,
}

impl Fixture {
    fn new(kind: Kind) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let (location, db) = match kind {
            Kind::Sqlite => (Location::Sqlite(dir.path().join("j.sqlite3")), String::new()),
            Kind::Postgres => {
                let server = pg::server();
                let db = server.fresh_database();
                (Location::parse(&server.url(&db), |_| None).unwrap(), db)
            }
        };
        Fixture { kind, location, _dir: dir, db }
    }

    fn open(&self) -> Journal {
        Journal::open_at(&self.location).unwrap()
    }

    fn open_read_only(&self) -> Journal {
        Journal::open_read_only_at(&self.location).unwrap()
    }

    /// Deletes a workflow's events behind the journal's back; returns the refusal.
    fn try_delete_events(&self, id: &str) -> String {
        match self.kind {
            Kind::Sqlite => {
                let Location::Sqlite(path) = &self.location else { unreachable!() };
                let c = rusqlite::Connection::open(path).unwrap();
                c.execute("DELETE FROM events WHERE workflow_id = ?1", [id]).unwrap_err().to_string()
            }
            Kind::Postgres => {
                let out = std::process::Command::new("psql")
                    .arg(pg::server().url(&self.db))
                    .args(["-c", &format!("DELETE FROM infraflow.events WHERE workflow_id = '{id}'")])
                    .output()
                    .unwrap();
                assert!(!out.status.success());
                String::from_utf8_lossy(&out.stderr).to_string()
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Each test of the list, once per backend: `sqlite::name` and `postgres::name`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(super::Fixture::new(super::Kind::Sqlite)).await
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(super::Fixture::new(super::Kind::Postgres)).await
            })*
        }
    };
}

conformance!(
    events_round_trip_and_fold_into_the_summary,
    resubmitting_the_same_id_is_idempotent_and_a_different_input_conflicts,
    a_stale_owner_cannot_append_after_another_takes_over,
    a_refused_append_does_not_undo_others_in_the_same_batch,
    the_journal_survives_reopening_and_lazy_records_are_flushed_on_drop,
    a_reader_sees_committed_state_while_the_writer_keeps_committing,
    workflows_of_one_cluster_wait_for_the_older_one,
    cancel_and_resume_requests_follow_the_state,
    ten_thousand_finished_workflows_are_pruned_to_the_archive_and_live_ones_stay,
    of_ten_handles_claiming_one_workflow_exactly_one_gets_it,
    two_handles_claiming_two_workflows_of_one_cluster_never_both_run,
    a_retried_failed_workflow_queues_behind_one_submitted_since,
    appends_after_a_release_or_a_cancel_see_the_row_as_it_is_now,
);

fn new_wf(id: &str, cluster: &str) -> NewWorkflow {
    NewWorkflow {
        id: id.into(),
        workflow: "canary".into(),
        input: json!({"steps": 3}),
        cluster: cluster.into(),
        no_rollback: false,
        code_version: Some(1),
        at: 1_000,
    }
}

fn completed(step: &str, n: i64) -> Event {
    Event::StepCompleted {
        step: step.into(),
        attempt: 1,
        activity: "noop".into(),
        input_hash: "h".into(),
        output: json!(n),
        position: None,
    }
}

async fn events_round_trip_and_fold_into_the_summary(f: Fixture) {
    let j = f.open();
    assert_eq!(j.submit(new_wf("w1", "")).await.unwrap(), SubmitOutcome::Created);
    assert!(matches!(j.acquire("w1", "me", 2_000, 10_000).await.unwrap(), AcquireOutcome::Acquired { previous: None }));
    let started = Event::StepStarted {
        step: "a".into(),
        attempt: 1,
        activity: "noop".into(),
        input_hash: "h".into(),
        undo: None,
        position: None,
    };
    j.append("w1", "me", vec![started.clone(), completed("a", 7)], 3_000, Durability::Durable).await.unwrap();
    j.append("w1", "me", vec![Event::Completed { output: json!({"ok": true}) }], 4_000, Durability::Durable)
        .await
        .unwrap();

    let events = j.events("w1").unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.event.kind()).collect();
    assert_eq!(kinds, ["submitted", "lease_taken", "step_started", "step_completed", "completed"]);
    assert_eq!(events[2].event, started);
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);

    let row = j.row("w1").unwrap().unwrap();
    assert_eq!(row.state, WorkflowState::Completed);
    let view = j.load("w1").unwrap().unwrap();
    assert_eq!(view.summary.output, Some(json!({"ok": true})));
    assert_eq!(view.steps.len(), 1);
    assert_eq!(view.steps[0].state, StepState::Completed);
    assert_eq!(view.steps[0].output, Some(json!(7)));
}

async fn resubmitting_the_same_id_is_idempotent_and_a_different_input_conflicts(f: Fixture) {
    let j = f.open();
    assert_eq!(j.submit(new_wf("w1", "")).await.unwrap(), SubmitOutcome::Created);
    assert_eq!(j.submit(new_wf("w1", "")).await.unwrap(), SubmitOutcome::AlreadyExists);
    let mut other = new_wf("w1", "");
    other.input = json!({"steps": 4});
    assert!(matches!(j.submit(other).await.unwrap(), SubmitOutcome::Conflict { .. }));
    assert_eq!(j.events("w1").unwrap().len(), 1);
}

async fn a_stale_owner_cannot_append_after_another_takes_over(f: Fixture) {
    let j = f.open();
    j.submit(new_wf("w1", "")).await.unwrap();
    assert!(matches!(j.acquire("w1", "old", now_ms(), 500).await.unwrap(), AcquireOutcome::Acquired { .. }));
    // While the lease is live, another owner is refused.
    assert_eq!(j.acquire("w1", "new", now_ms(), 500).await.unwrap(), AcquireOutcome::HeldBy("old".into()));
    // After expiry it is taken over, and the old owner's writes are fenced off.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(matches!(
        j.acquire("w1", "new", now_ms(), 60_000).await.unwrap(),
        AcquireOutcome::Acquired { previous: Some(p) } if p == "old"
    ));
    let err = j.append("w1", "old", vec![completed("a", 1)], 2_100, Durability::Durable).await.unwrap_err();
    assert!(matches!(err, JournalError::LeaseLost { ref holder, .. } if holder == "new"), "{err}");
    j.append("w1", "new", vec![completed("a", 2)], 2_200, Durability::Durable).await.unwrap();
    let view = j.load("w1").unwrap().unwrap();
    assert_eq!(view.step("a").unwrap().output, Some(json!(2)));
    assert_eq!(view.step("a").unwrap().completions, 1);
    // A renewal by the stale owner says it no longer holds the lease.
    let r = j.renew("old", vec!["w1".into()], now_ms(), 1_000).await.unwrap();
    assert!(!r[0].held);
}

async fn a_refused_append_does_not_undo_others_in_the_same_batch(f: Fixture) {
    let j = f.open();
    for id in ["a", "b"] {
        j.submit(new_wf(id, "")).await.unwrap();
        j.acquire(id, "me", 0, 60_000).await.unwrap();
    }
    let (good, bad) = tokio::join!(
        j.append("a", "me", vec![completed("s", 1)], 10, Durability::Durable),
        j.append("b", "intruder", vec![completed("s", 1)], 10, Durability::Durable),
    );
    good.unwrap();
    assert!(bad.is_err());
    assert_eq!(j.load("a").unwrap().unwrap().steps.len(), 1);
    assert_eq!(j.load("b").unwrap().unwrap().steps.len(), 0);
}

async fn the_journal_survives_reopening_and_lazy_records_are_flushed_on_drop(f: Fixture) {
    {
        let j = f.open();
        j.submit(new_wf("w1", "")).await.unwrap();
        j.acquire("w1", "me", 0, 60_000).await.unwrap();
        j.append("w1", "me", vec![completed("a", 1)], 5, Durability::Lazy).await.unwrap();
    }
    let j = f.open();
    let view = j.load("w1").unwrap().unwrap();
    assert_eq!(view.step("a").unwrap().state, StepState::Completed);
    if let Location::Sqlite(path) = &f.location {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}

async fn a_reader_sees_committed_state_while_the_writer_keeps_committing(f: Fixture) {
    let j = f.open();
    j.submit(new_wf("w1", "")).await.unwrap();
    j.acquire("w1", "me", 0, 60_000).await.unwrap();
    let reader = f.open_read_only();
    let writer = {
        let j = j.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                j.append("w1", "me", vec![completed(&format!("s{i}"), i)], i, Durability::Durable).await.unwrap();
            }
        })
    };
    let mut last = 0;
    while !writer.is_finished() {
        let n = reader.load("w1").unwrap().unwrap().steps.len();
        assert!(n >= last, "a reader never sees the log shrink");
        last = n;
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
    assert_eq!(reader.load("w1").unwrap().unwrap().steps.len(), 200);
    assert!(matches!(reader.submit(new_wf("w2", "")).await, Err(JournalError::ReadOnly)));
}

#[tokio::test]
async fn sqlite_a_corrupt_or_foreign_file_is_refused_with_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.sqlite3");
    std::fs::write(&garbage, b"this is not a database at all, just some text").unwrap();
    let err = Journal::open(&garbage).err().unwrap();
    assert!(matches!(err, JournalError::NotAJournal { .. }));
    assert!(err.to_string().contains("garbage.sqlite3"), "{err}");

    let foreign = dir.path().join("foreign.sqlite3");
    {
        let c = rusqlite_free_foreign_db(&foreign);
        drop(c);
    }
    let err = Journal::open(&foreign).err().unwrap();
    assert!(err.to_string().contains("another program"), "{err}");

    // A real journal whose pages were overwritten in the middle.
    let broken = dir.path().join("broken.sqlite3");
    {
        let j = Journal::open(&broken).unwrap();
        for i in 0..50 {
            j.submit(new_wf(&format!("w{i}"), "")).await.unwrap();
        }
    }
    let mut bytes = std::fs::read(&broken).unwrap();
    let len = bytes.len();
    for b in &mut bytes[4096..len] {
        *b = 0xA5;
    }
    std::fs::write(&broken, bytes).unwrap();
    let err = Journal::open(&broken).and_then(|j| j.verify()).err().unwrap();
    assert!(matches!(err, JournalError::Corrupt { .. } | JournalError::NotAJournal { .. }), "{err}");
    assert!(err.to_string().contains("broken.sqlite3"), "{err}");

    let err = Journal::open_read_only(&dir.path().join("absent.sqlite3")).err().unwrap();
    assert!(matches!(err, JournalError::Missing { .. }));
}

/// A SQLite file made by "another program": a table but no infraflow application id.
fn rusqlite_free_foreign_db(path: &std::path::Path) -> std::process::Output {
    std::process::Command::new("sqlite3")
        .arg(path)
        .arg("CREATE TABLE customers (id INTEGER PRIMARY KEY);")
        .output()
        .unwrap()
}

async fn workflows_of_one_cluster_wait_for_the_older_one(f: Fixture) {
    let j = f.open();
    j.submit(new_wf("first", "c1")).await.unwrap();
    j.submit(new_wf("second", "c1")).await.unwrap();
    j.submit(new_wf("other", "c2")).await.unwrap();
    assert!(matches!(
        j.acquire("second", "me", 0, 1_000).await.unwrap(),
        AcquireOutcome::WaitingFor { ref id, .. } if id == "first"
    ));
    assert!(matches!(j.acquire("other", "me", 0, 1_000).await.unwrap(), AcquireOutcome::Acquired { .. }));
    j.acquire("first", "me", 0, 1_000).await.unwrap();
    j.append("first", "me", vec![Event::Completed { output: json!(null) }], 1, Durability::Durable).await.unwrap();
    assert!(matches!(j.acquire("second", "me", 0, 1_000).await.unwrap(), AcquireOutcome::Acquired { .. }));
}

async fn cancel_and_resume_requests_follow_the_state(f: Fixture) {
    let j = f.open();
    j.submit(new_wf("w", "")).await.unwrap();
    j.acquire("w", "me", 0, 60_000).await.unwrap();
    j.append("w", "me", vec![Event::Paused { step: Some("a".into()), reason: "boom".into() }], 1, Durability::Durable)
        .await
        .unwrap();
    assert_eq!(j.request_resume("w", 2).await.unwrap(), RequestOutcome::Done(WorkflowState::Pending));
    assert_eq!(j.request_cancel("w", 3).await.unwrap(), RequestOutcome::Done(WorkflowState::Cancelling));
    assert_eq!(j.request_cancel("w", 4).await.unwrap(), RequestOutcome::AlreadyRequested(WorkflowState::Cancelling));
    let r = j.renew("me", vec!["w".into()], 5, 1_000).await.unwrap();
    assert!(r[0].held && r[0].cancel_requested);
    j.append("w", "me", vec![Event::Compensated], 6, Durability::Durable).await.unwrap();
    assert_eq!(j.request_cancel("w", 7).await.unwrap(), RequestOutcome::NotApplicable(WorkflowState::Compensated));
    assert_eq!(j.request_resume("w", 8).await.unwrap(), RequestOutcome::NotApplicable(WorkflowState::Compensated));
}

async fn ten_thousand_finished_workflows_are_pruned_to_the_archive_and_live_ones_stay(f: Fixture) {
    let j = f.open();
    let finish = |i: usize| {
        let j = j.clone();
        async move {
            let id = format!("done{i}");
            j.submit(new_wf(&id, "")).await.unwrap();
            j.acquire(&id, "me", 2_000, 10_000).await.unwrap();
            let end = if i % 2 == 0 { Event::Completed { output: json!(i) } } else { Event::Compensated };
            j.append(&id, "me", vec![completed("a", 1), end], 3_000, Durability::Durable).await.unwrap();
        }
    };
    for chunk in (0..10_000).collect::<Vec<_>>().chunks(2_000) {
        futures::future::join_all(chunk.iter().map(|&i| finish(i))).await;
    }
    j.submit(new_wf("live", "")).await.unwrap();
    j.submit(new_wf("failed", "")).await.unwrap();
    j.acquire("failed", "me", 2_000, 10_000).await.unwrap();
    j.append("failed", "me", vec![Event::Failed { error: "kept".into() }], 3_000, Durability::Durable).await.unwrap();

    let pruned = j.prune(5_000).unwrap();
    assert_eq!((pruned.workflows, pruned.events), (10_000, 40_000), "submitted, lease, step, end each");
    let left: Vec<String> = j.list().unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(left, ["live", "failed"], "what may still change is never pruned");
    assert_eq!(j.events("live").unwrap().len(), 1);
    assert_eq!(j.prune(5_000).unwrap().workflows, 0, "a second prune finds nothing");

    match f.kind {
        Kind::Sqlite => {
            let archive = Journal::open_read_only(std::path::Path::new(&pruned.archive)).unwrap();
            assert_eq!(archive.list().unwrap().len(), 10_000);
            let view = archive.load("done7").unwrap().unwrap();
            assert_eq!(view.summary.state, WorkflowState::Compensated);
            assert_eq!(view.steps.len(), 1);
        }
        Kind::Postgres => {
            let server = pg::server();
            assert_eq!(server.psql(&f.db, "SELECT count(*) FROM infraflow.archived_workflows"), "10000");
            assert_eq!(
                server.psql(&f.db, "SELECT state FROM infraflow.archived_workflows WHERE id = 'done7'"),
                "compensated"
            );
        }
    }

    // The append-only rule still holds for everything not archived.
    let refused = f.try_delete_events("failed");
    assert!(refused.contains("append-only"), "{refused}");
}

/// Several daemons (here: handles of their own, each with its writer) race for one workflow.
async fn of_ten_handles_claiming_one_workflow_exactly_one_gets_it(f: Fixture) {
    let first = f.open();
    first.submit(new_wf("w", "")).await.unwrap();
    let handles: Vec<Journal> = (0..10).map(|_| f.open()).collect();
    let claims = handles.iter().enumerate().map(|(i, j)| async move {
        let owner = format!("daemon{i}");
        (owner.clone(), j.acquire("w", &owner, now_ms(), 60_000).await.unwrap())
    });
    let outcomes = futures::future::join_all(claims).await;
    let winners: Vec<&String> =
        outcomes.iter().filter(|(_, o)| matches!(o, AcquireOutcome::Acquired { .. })).map(|(w, _)| w).collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    let taken = first.events("w").unwrap().iter().filter(|e| e.event.kind() == "lease_taken").count();
    assert_eq!(taken, 1);
    assert_eq!(first.row("w").unwrap().unwrap().lease_owner.as_ref(), Some(winners[0]));
}

/// The per-cluster rule holds across handles: two workflows of one cluster claimed at the same
/// moment by two daemons — the older one may run, the younger waits.
async fn two_handles_claiming_two_workflows_of_one_cluster_never_both_run(f: Fixture) {
    for round in 0..10 {
        let (a, b) = (f.open(), f.open());
        let (older, younger) = (format!("older{round}"), format!("younger{round}"));
        let cluster = format!("c{round}");
        a.submit(new_wf(&older, &cluster)).await.unwrap();
        a.submit(new_wf(&younger, &cluster)).await.unwrap();
        let (x, y) = tokio::join!(
            a.acquire(&younger, "daemon-a", now_ms(), 60_000),
            b.acquire(&older, "daemon-b", now_ms(), 60_000),
        );
        assert!(matches!(x.unwrap(), AcquireOutcome::WaitingFor { ref id, .. } if *id == older));
        assert!(matches!(y.unwrap(), AcquireOutcome::Acquired { .. }));
        // And when the older one is held, the younger is refused even though it is its own turn
        // by nobody's reckoning but its cluster's.
        assert!(matches!(
            a.acquire(&younger, "daemon-a", now_ms(), 60_000).await.unwrap(),
            AcquireOutcome::WaitingFor { .. }
        ));
    }
}

async fn a_retried_failed_workflow_queues_behind_one_submitted_since(f: Fixture) {
    let j = f.open();
    j.submit(new_wf("old", "c")).await.unwrap();
    j.acquire("old", "me", now_ms(), 60_000).await.unwrap();
    j.append("old", "me", vec![Event::Failed { error: "boom".into() }], 1, Durability::Durable).await.unwrap();
    j.submit(new_wf("new", "c")).await.unwrap();
    assert_eq!(j.request_resume("old", 2).await.unwrap(), RequestOutcome::Done(WorkflowState::Pending));
    assert!(matches!(
        j.acquire("old", "me", now_ms(), 60_000).await.unwrap(),
        AcquireOutcome::WaitingFor { ref id, .. } if id == "new"
    ));
    assert_eq!(j.claimable(now_ms(), "someone", 10).unwrap(), ["new"]);
}

/// The PostgreSQL writer folds from what it last wrote; a row changed by anyone else since (a
/// release that appends nothing, a cancel from another process) must be seen anyway.
async fn appends_after_a_release_or_a_cancel_see_the_row_as_it_is_now(f: Fixture) {
    let (daemon, operator) = (f.open(), f.open());
    daemon.submit(new_wf("w", "")).await.unwrap();
    daemon.acquire("w", "me", now_ms(), 60_000).await.unwrap();
    for i in 0..3 {
        daemon.append("w", "me", vec![completed(&format!("s{i}"), i)], 10, Durability::Durable).await.unwrap();
    }
    assert_eq!(operator.request_cancel("w", 11).await.unwrap(), RequestOutcome::Done(WorkflowState::Cancelling));
    daemon.append("w", "me", vec![completed("s3", 3)], 12, Durability::Durable).await.unwrap();
    let row = operator.row("w").unwrap().unwrap();
    assert_eq!(row.state, WorkflowState::Cancelling, "the cancel is not folded away");
    assert_eq!(daemon.events("w").unwrap().iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=7).collect::<Vec<_>>());
    // A release appends no event: the next append by the old owner is still refused.
    operator.release("me", vec!["w".into()]).await.unwrap();
    let err = daemon.append("w", "me", vec![completed("s4", 4)], 13, Durability::Durable).await.unwrap_err();
    assert!(matches!(err, JournalError::LeaseLost { .. }), "{err}");
    assert!(daemon.load("w").unwrap().unwrap().step("s4").is_none());
}

/// PostgreSQL keeps leases by the database's clock: a daemon whose clock runs ten minutes ahead
/// cannot take a live lease (with SQLite, which trusts its callers' clocks, it could).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_leases_follow_the_database_clock_not_the_callers() {
    let f = Fixture::new(Kind::Postgres);
    let j = f.open();
    j.submit(new_wf("w", "")).await.unwrap();
    j.acquire("w", "honest", now_ms(), 60_000).await.unwrap();
    let skewed = now_ms() + 600_000;
    assert_eq!(j.acquire("w", "skewed", skewed, 60_000).await.unwrap(), AcquireOutcome::HeldBy("honest".into()));
    assert!(j.claimable(skewed, "skewed", 10).unwrap().is_empty());
}

/// A submit through one handle wakes a daemon loop waiting on another at once (LISTEN/NOTIFY),
/// instead of at its next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_submit_wakes_a_waiting_daemon() {
    let f = Fixture::new(Kind::Postgres);
    let (daemon, client) = (f.open(), f.open());
    // The first wake-up is the listener's own (it may have missed something while connecting).
    tokio::time::timeout(Duration::from_secs(10), daemon.work_arrived()).await.unwrap();
    let quiet = tokio::time::timeout(Duration::from_millis(300), daemon.work_arrived()).await;
    assert!(quiet.is_err(), "no work, no wake-up");
    // Nothing but a notification wakes it (no poll here). Measured: ~0.1 s after the submit
    // began; the bound leaves room for the load of the suite's other tests.
    let waiter = tokio::spawn(async move { tokio::time::timeout(Duration::from_secs(5), daemon.work_arrived()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let submitted = std::time::Instant::now();
    client.submit(new_wf("w", "")).await.unwrap();
    assert!(waiter.await.unwrap().is_ok(), "the submit woke the waiting daemon");
    eprintln!("woken {} ms after the submit began", submitted.elapsed().as_millis());
}

/// The password of a URL never reaches an error message.
#[tokio::test]
async fn postgres_errors_name_the_database_without_its_password() {
    let server = pg::server();
    let url = format!("postgres://infraflow:wrong-secret@127.0.0.1:{}/postgres", server.port);
    let err = Journal::open_at(&Location::parse(&url, |_| None).unwrap()).err().unwrap().to_string();
    assert!(err.contains("cannot reach PostgreSQL"), "{err}");
    assert!(!err.contains("wrong-secret"), "{err}");
    assert!(err.contains("infraflow:***@127.0.0.1"), "{err}");
}

/// Connections killed by the server while appends are in flight (as in a failover): an append is
/// either acknowledged and in the journal, or reported failed — never acknowledged and lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_killed_mid_append_never_acknowledge_a_lost_record() {
    let f = Fixture::new(Kind::Postgres);
    let j = f.open();
    j.submit(new_wf("w", "")).await.unwrap();
    j.acquire("w", "me", now_ms(), 600_000).await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (stop, db) = (stop.clone(), f.db.clone());
        std::thread::spawn(move || {
            let mut kills = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                pg::server().psql(
                    &db,
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE application_name = 'infraflow' AND datname = current_database()
                       AND pid <> pg_backend_pid()",
                );
                kills += 1;
                std::thread::sleep(Duration::from_millis(30));
            }
            kills
        })
    };
    let (mut acknowledged, mut refused) = (Vec::new(), 0);
    for i in 0..300 {
        match j.append("w", "me", vec![completed(&format!("s{i}"), i)], i, Durability::Durable).await {
            Ok(()) => acknowledged.push(format!("s{i}")),
            Err(_) => refused += 1,
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let kills = killer.join().unwrap();
    let view = f.open().load("w").unwrap().unwrap();
    for key in &acknowledged {
        assert!(view.step(key).is_some(), "{key} was acknowledged but is not in the journal");
    }
    assert!(acknowledged.len() > 150, "most appends survive the kills by running again: {}", acknowledged.len());
    eprintln!("{kills} rounds of connection kills: {} appends acknowledged, {refused} refused", acknowledged.len());
}

/// A step's append finds its workflow's summary through the primary key whatever the table holds.
/// A prepared statement's generic plan joining on `unnest` alone scanned every summary each step
/// from a few hundred workflows up to about a thousand (0.5 ms a step at 800, measured); counted
/// here by the server's own statistics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_appends_never_scan_every_workflow_summary() {
    let f = Fixture::new(Kind::Postgres);
    let j = f.open();
    for i in 0..700 {
        j.submit(new_wf(&format!("w{i}"), "")).await.unwrap();
    }
    j.acquire("w0", "me", now_ms(), 600_000).await.unwrap();
    // The planner judges by the table's statistics, as autovacuum keeps them; and the plan every
    // connection uses is the generic one, as PostgreSQL picks for a prepared statement once it
    // looks no dearer than the custom ones (or as a DBA may force).
    pg::server().psql(&f.db, "ANALYZE infraflow.workflows");
    pg::server().psql(&f.db, &format!("ALTER DATABASE {} SET plan_cache_mode = force_generic_plan", f.db));
    let stats = || {
        let out = pg::server().psql(
            &f.db,
            "SELECT seq_scan, n_tup_upd FROM pg_stat_user_tables WHERE relid = 'infraflow.workflows'::regclass",
        );
        let (scans, updates) = out.trim().split_once('|').unwrap();
        (scans.parse::<i64>().unwrap(), updates.parse::<i64>().unwrap())
    };
    // A backend reports its statistics when it exits: close the journal's connections first.
    drop(j);
    let (scans_before, updates_before) = settled(stats, |_| true).await;
    let j = f.open();
    for i in 0..50 {
        j.append("w0", "me", vec![completed(&format!("s{i}"), i)], i, Durability::Durable).await.unwrap();
    }
    drop(j);
    let (scans, updates) = settled(stats, |(_, u)| u >= updates_before + 50).await;
    assert!(updates >= updates_before + 50, "the appends' updates are counted: {updates_before} -> {updates}");
    eprintln!("scans {scans_before} -> {scans}, updates {updates_before} -> {updates}");
    assert_eq!(scans, scans_before, "appends scanned the whole workflows table {} times", scans - scans_before);
}

/// The statistics once they satisfy `done` and stop changing (they arrive when backends exit),
/// or after 20 s.
async fn settled(read: impl Fn() -> (i64, i64), done: impl Fn((i64, i64)) -> bool) -> (i64, i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut last = read();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = read();
        if (now == last && done(now)) || std::time::Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}
