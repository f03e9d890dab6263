//! What only one journal backend has: SQLite's refusal of bad files; PostgreSQL's database clock,
//! LISTEN/NOTIFY wake-ups, password redaction, killed connections and query plans.

mod support;

use std::time::Duration;

use infraflow_journal::{AcquireOutcome, Durability, Journal, JournalError, Location};
use support::{Fixture, Kind, completed, new_wf, now_ms, pg, take};

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

/// cannot take a live lease (with SQLite, which trusts its callers' clocks, it could).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_leases_follow_the_database_clock_not_the_callers() {
    let f = Fixture::new(Kind::Postgres);
    let j = f.open();
    j.submit(new_wf("w", "")).await.unwrap();
    let _ = take(&j, "w", "honest", now_ms(), 60_000).await;
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
    let fence = take(&j, "w", "me", now_ms(), 600_000).await;
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
        match j.append("w", &fence, vec![completed(&format!("s{i}"), i)], i, Durability::Durable).await {
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
    // A COMMIT answered by a shutting-down backend (57P01) may have committed: run again, it
    // would record the step a second time.
    let twice: Vec<_> = view.steps.iter().filter(|s| s.completions > 1).map(|s| s.key.clone()).collect();
    assert!(twice.is_empty(), "recorded twice: {twice:?}");
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
    let fence = take(&j, "w0", "me", now_ms(), 600_000).await;
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
        j.append("w0", &fence, vec![completed(&format!("s{i}"), i)], i, Durability::Durable).await.unwrap();
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

/// A ticket is taken under its cluster's lock: one submit whose COMMIT is late (a slow link, a
/// busy server; here a trigger that sleeps) can never take a lower ticket than a submit that
/// committed and started meanwhile, and so never jump in while that one is interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_late_submit_never_jumps_the_cluster_queue_over_one_that_started() {
    let f = Fixture::new(Kind::Postgres);
    let (ja, jb) = (f.open(), f.open());
    pg::server().psql(
        &f.db,
        "CREATE FUNCTION infraflow.slow_submit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.id = 'late' THEN PERFORM pg_sleep(1.5); END IF; RETURN NEW; END $$;
         CREATE TRIGGER slow_submit AFTER INSERT ON infraflow.workflows
             FOR EACH ROW EXECUTE FUNCTION infraflow.slow_submit();",
    );
    let late = tokio::spawn(async move { ja.submit(new_wf("late", "c")).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    jb.submit(new_wf("quick", "c")).await.unwrap();
    // What a daemon polling right now starts, then loses (a restart, a crash, a pause).
    let first = jb.claimable(now_ms(), "d", 10).unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(matches!(jb.acquire(&first[0], "d", now_ms(), 60_000).await.unwrap(), AcquireOutcome::Acquired { .. }));
    late.await.unwrap();
    jb.release("d", vec![first[0].clone()]).await.unwrap();
    assert_eq!(jb.claimable(now_ms(), "d2", 10).unwrap(), first, "the workflow that started keeps the cluster");
}
