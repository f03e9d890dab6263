//! Journal tests on real SQLite files: round trip, fencing, reopening, concurrent readers, bad files.

use infraflow_journal::{
    AcquireOutcome, Durability, Event, Journal, JournalError, NewWorkflow, RequestOutcome, StepState, SubmitOutcome,
    WorkflowState,
};
use serde_json::json;

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

#[tokio::test]
async fn events_round_trip_and_fold_into_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&dir.path().join("j.sqlite3")).unwrap();
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

#[tokio::test]
async fn resubmitting_the_same_id_is_idempotent_and_a_different_input_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&dir.path().join("j.sqlite3")).unwrap();
    assert_eq!(j.submit(new_wf("w1", "")).await.unwrap(), SubmitOutcome::Created);
    assert_eq!(j.submit(new_wf("w1", "")).await.unwrap(), SubmitOutcome::AlreadyExists);
    let mut other = new_wf("w1", "");
    other.input = json!({"steps": 4});
    assert!(matches!(j.submit(other).await.unwrap(), SubmitOutcome::Conflict { .. }));
    assert_eq!(j.events("w1").unwrap().len(), 1);
}

#[tokio::test]
async fn a_stale_owner_cannot_append_after_another_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&dir.path().join("j.sqlite3")).unwrap();
    j.submit(new_wf("w1", "")).await.unwrap();
    assert!(matches!(j.acquire("w1", "old", 0, 1_000).await.unwrap(), AcquireOutcome::Acquired { .. }));
    // While the lease is live, another owner is refused.
    assert_eq!(j.acquire("w1", "new", 500, 1_000).await.unwrap(), AcquireOutcome::HeldBy("old".into()));
    // After expiry it is taken over, and the old owner's writes are fenced off.
    assert!(matches!(
        j.acquire("w1", "new", 2_000, 1_000).await.unwrap(),
        AcquireOutcome::Acquired { previous: Some(p) } if p == "old"
    ));
    let err = j.append("w1", "old", vec![completed("a", 1)], 2_100, Durability::Durable).await.unwrap_err();
    assert!(matches!(err, JournalError::LeaseLost { ref holder, .. } if holder == "new"), "{err}");
    j.append("w1", "new", vec![completed("a", 2)], 2_200, Durability::Durable).await.unwrap();
    let view = j.load("w1").unwrap().unwrap();
    assert_eq!(view.step("a").unwrap().output, Some(json!(2)));
    assert_eq!(view.step("a").unwrap().completions, 1);
    // A renewal by the stale owner says it no longer holds the lease.
    let r = j.renew("old", vec!["w1".into()], 2_300, 1_000).await.unwrap();
    assert!(!r[0].held);
}

#[tokio::test]
async fn a_refused_append_does_not_undo_others_in_the_same_batch() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&dir.path().join("j.sqlite3")).unwrap();
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

#[tokio::test]
async fn the_journal_survives_reopening_and_lazy_records_are_flushed_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite3");
    {
        let j = Journal::open(&path).unwrap();
        j.submit(new_wf("w1", "")).await.unwrap();
        j.acquire("w1", "me", 0, 60_000).await.unwrap();
        j.append("w1", "me", vec![completed("a", 1)], 5, Durability::Lazy).await.unwrap();
    }
    let j = Journal::open(&path).unwrap();
    let view = j.load("w1").unwrap().unwrap();
    assert_eq!(view.step("a").unwrap().state, StepState::Completed);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[tokio::test]
async fn a_reader_sees_committed_state_while_the_writer_keeps_committing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite3");
    let j = Journal::open(&path).unwrap();
    j.submit(new_wf("w1", "")).await.unwrap();
    j.acquire("w1", "me", 0, 60_000).await.unwrap();
    let reader = Journal::open_read_only(&path).unwrap();
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
async fn a_corrupt_or_foreign_file_is_refused_with_an_error_naming_it() {
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

#[tokio::test]
async fn workflows_of_one_cluster_wait_for_the_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&dir.path().join("j.sqlite3")).unwrap();
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

#[tokio::test]
async fn cancel_and_resume_requests_follow_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&dir.path().join("j.sqlite3")).unwrap();
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

#[tokio::test]
async fn ten_thousand_finished_workflows_are_pruned_to_the_archive_and_live_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.sqlite3");
    let j = Journal::open(&path).unwrap();
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

    let archive = Journal::open_read_only(&pruned.archive).unwrap();
    assert_eq!(archive.list().unwrap().len(), 10_000);
    let view = archive.load("done7").unwrap().unwrap();
    assert_eq!(view.summary.state, WorkflowState::Compensated);
    assert_eq!(view.steps.len(), 1);

    // The append-only rule still holds for everything not archived.
    let c = rusqlite::Connection::open(&path).unwrap();
    let refused = c.execute("DELETE FROM events WHERE workflow_id = 'failed'", []).unwrap_err();
    assert!(refused.to_string().contains("append-only"), "{refused}");
}
