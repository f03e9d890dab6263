//! The journal's conformance suite: every behaviour the engine relies on, run against both
//! backends — a real SQLite file and a real PostgreSQL server (`scripts/postgres.sh`, one per test
//! binary, a database per test). What only one backend has is in `one_backend.rs`.

mod support;

use std::time::Duration;

use infraflow_journal::{
    AcquireOutcome, Durability, Event, Fence, Journal, JournalError, Location, RequestOutcome, StepState,
    SubmitOutcome, WorkflowState,
};
use serde_json::json;
use support::{Fixture, Kind, completed, new_wf, now_ms, pg, take};

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
    a_pruned_id_is_refused_at_submit_and_the_creator_is_kept,
    a_failed_compensation_does_not_resume_once_a_later_workflow_of_its_cluster_ran,
    a_daemons_own_expired_lease_is_claimable_again_by_it,
    an_append_left_from_an_earlier_acquisition_by_the_same_owner_is_refused,
);

async fn events_round_trip_and_fold_into_the_summary(f: Fixture) {
    let j = f.open();
    assert_eq!(j.submit(new_wf("w1", "")).await.unwrap(), SubmitOutcome::Created);
    let fence = take(&j, "w1", "me", 2_000, 10_000).await;
    assert_eq!(fence.epoch, 2, "the epoch is the sequence number of the lease_taken event");
    let started = Event::StepStarted {
        step: "a".into(),
        attempt: 1,
        activity: "noop".into(),
        input_hash: "h".into(),
        undo: None,
        position: None,
    };
    j.append("w1", &fence, vec![started.clone(), completed("a", 7)], 3_000, Durability::Durable).await.unwrap();
    j.append("w1", &fence, vec![Event::Completed { output: json!({"ok": true}) }], 4_000, Durability::Durable)
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
    let old = take(&j, "w1", "old", now_ms(), 500).await;
    // While the lease is live, another owner is refused.
    assert_eq!(j.acquire("w1", "new", now_ms(), 500).await.unwrap(), AcquireOutcome::HeldBy("old".into()));
    // After expiry it is taken over, and the old owner's writes are fenced off.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let new = match j.acquire("w1", "new", now_ms(), 60_000).await.unwrap() {
        AcquireOutcome::Acquired { previous: Some(p), fence } if p == "old" => fence,
        other => panic!("{other:?}"),
    };
    let err = j.append("w1", &old, vec![completed("a", 1)], 2_100, Durability::Durable).await.unwrap_err();
    assert!(matches!(err, JournalError::LeaseLost { ref holder, .. } if holder == "new"), "{err}");
    j.append("w1", &new, vec![completed("a", 2)], 2_200, Durability::Durable).await.unwrap();
    let view = j.load("w1").unwrap().unwrap();
    assert_eq!(view.step("a").unwrap().output, Some(json!(2)));
    assert_eq!(view.step("a").unwrap().completions, 1);
    // A renewal by the stale owner says it no longer holds the lease.
    let r = j.renew("old", vec!["w1".into()], now_ms(), 1_000).await.unwrap();
    assert!(!r[0].held);
}

async fn a_refused_append_does_not_undo_others_in_the_same_batch(f: Fixture) {
    let j = f.open();
    let mut fences = Vec::new();
    for id in ["a", "b"] {
        j.submit(new_wf(id, "")).await.unwrap();
        fences.push(take(&j, id, "me", 0, 60_000).await);
    }
    let intruder = Fence { owner: "intruder".into(), epoch: fences[1].epoch };
    let (good, bad) = tokio::join!(
        j.append("a", &fences[0], vec![completed("s", 1)], 10, Durability::Durable),
        j.append("b", &intruder, vec![completed("s", 1)], 10, Durability::Durable),
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
        let fence = take(&j, "w1", "me", 0, 60_000).await;
        j.append("w1", &fence, vec![completed("a", 1)], 5, Durability::Lazy).await.unwrap();
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
    let fence = take(&j, "w1", "me", 0, 60_000).await;
    let reader = f.open_read_only();
    let writer = {
        let (j, fence) = (j.clone(), fence.clone());
        tokio::spawn(async move {
            for i in 0..200 {
                j.append("w1", &fence, vec![completed(&format!("s{i}"), i)], i, Durability::Durable).await.unwrap();
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
    let fence = take(&j, "first", "me", 0, 1_000).await;
    j.append("first", &fence, vec![Event::Completed { output: json!(null) }], 1, Durability::Durable).await.unwrap();
    assert!(matches!(j.acquire("second", "me", 0, 1_000).await.unwrap(), AcquireOutcome::Acquired { .. }));
}

async fn cancel_and_resume_requests_follow_the_state(f: Fixture) {
    let j = f.open();
    j.submit(new_wf("w", "")).await.unwrap();
    let fence = take(&j, "w", "me", 0, 60_000).await;
    j.append(
        "w",
        &fence,
        vec![Event::Paused { step: Some("a".into()), reason: "boom".into() }],
        1,
        Durability::Durable,
    )
    .await
    .unwrap();
    assert_eq!(j.request_resume("w", 2).await.unwrap(), RequestOutcome::Done(WorkflowState::Pending));
    assert_eq!(j.request_cancel("w", 3).await.unwrap(), RequestOutcome::Done(WorkflowState::Cancelling));
    assert_eq!(j.request_cancel("w", 4).await.unwrap(), RequestOutcome::AlreadyRequested(WorkflowState::Cancelling));
    let r = j.renew("me", vec!["w".into()], 5, 1_000).await.unwrap();
    assert!(r[0].held && r[0].cancel_requested);
    j.append("w", &fence, vec![Event::Compensated], 6, Durability::Durable).await.unwrap();
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
            let fence = take(&j, &id, "me", 2_000, 10_000).await;
            let end = if i.is_multiple_of(2) { Event::Completed { output: json!(i) } } else { Event::Compensated };
            j.append(&id, &fence, vec![completed("a", 1), end], 3_000, Durability::Durable).await.unwrap();
        }
    };
    for chunk in (0..10_000).collect::<Vec<_>>().chunks(2_000) {
        futures::future::join_all(chunk.iter().map(|&i| finish(i))).await;
    }
    j.submit(new_wf("live", "")).await.unwrap();
    j.submit(new_wf("failed", "")).await.unwrap();
    let fence = take(&j, "failed", "me", 2_000, 10_000).await;
    j.append("failed", &fence, vec![Event::Failed { error: "kept".into() }], 3_000, Durability::Durable).await.unwrap();

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
    let fence = take(&j, "old", "me", now_ms(), 60_000).await;
    j.append("old", &fence, vec![Event::Failed { error: "boom".into() }], 1, Durability::Durable).await.unwrap();
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
    let fence = take(&daemon, "w", "me", now_ms(), 60_000).await;
    for i in 0..3 {
        daemon.append("w", &fence, vec![completed(&format!("s{i}"), i)], 10, Durability::Durable).await.unwrap();
    }
    assert_eq!(operator.request_cancel("w", 11).await.unwrap(), RequestOutcome::Done(WorkflowState::Cancelling));
    daemon.append("w", &fence, vec![completed("s3", 3)], 12, Durability::Durable).await.unwrap();
    let row = operator.row("w").unwrap().unwrap();
    assert_eq!(row.state, WorkflowState::Cancelling, "the cancel is not folded away");
    assert_eq!(daemon.events("w").unwrap().iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=7).collect::<Vec<_>>());
    // A release appends no event: the next append by the old owner is still refused.
    operator.release("me", vec!["w".into()]).await.unwrap();
    let err = daemon.append("w", &fence, vec![completed("s4", 4)], 13, Durability::Durable).await.unwrap_err();
    assert!(matches!(err, JournalError::LeaseLost { .. }), "{err}");
    assert!(daemon.load("w").unwrap().unwrap().step("s4").is_none());
}

/// A workflow id is never used twice in one journal: reused after a prune it would be a new
/// workflow under the name of one whose history the archive keeps (and the archive would drop
/// the second one's events at the next prune).
async fn a_pruned_id_is_refused_at_submit_and_the_creator_is_kept(f: Fixture) {
    let j = f.open();
    let mut first = new_wf("x", "c");
    first.creator = Some("x@first".into());
    j.submit(first).await.unwrap();
    assert_eq!(j.load("x").unwrap().unwrap().creator, "x@first");
    let fence = take(&j, "x", "me", now_ms(), 60_000).await;
    j.append("x", &fence, vec![Event::Completed { output: json!({}) }], 1, Durability::Durable).await.unwrap();
    assert_eq!(j.prune(now_ms()).unwrap().workflows, 1);
    assert_eq!(j.submit(new_wf("x", "c")).await.unwrap(), SubmitOutcome::Archived);
    assert!(j.row("x").unwrap().is_none(), "a refused submit writes nothing");
    drop(j);
    let reopened = f.open();
    assert_eq!(reopened.submit(new_wf("x", "c")).await.unwrap(), SubmitOutcome::Archived, "after reopening too");
    // A record without a creator (older versions) is its own id's creator.
    reopened.submit(new_wf("y", "")).await.unwrap();
    assert_eq!(reopened.load("y").unwrap().unwrap().creator, "y");
}

/// A compensation that ended `compensation_failed` gave its cluster up; a later workflow of the
/// cluster that ran since may have adopted what it left, so resuming it is refused (and prune
/// keeps that later workflow, the evidence, while the failed compensation is there).
async fn a_failed_compensation_does_not_resume_once_a_later_workflow_of_its_cluster_ran(f: Fixture) {
    let j = f.open();
    j.submit(new_wf("old", "c")).await.unwrap();
    let fence = take(&j, "old", "me", now_ms(), 60_000).await;
    let ended = vec![
        Event::CompensationStarted { reason: "boom".into() },
        Event::CompensationFailed { error: "still there".into(), remaining: vec!["a".into()] },
    ];
    j.append("old", &fence, ended, 1, Durability::Durable).await.unwrap();
    j.submit(new_wf("queued", "c")).await.unwrap();
    assert_eq!(
        j.request_resume("old", 2).await.unwrap(),
        RequestOutcome::Done(WorkflowState::Compensating),
        "a later workflow that never started adopted nothing"
    );
    assert!(
        matches!(j.acquire("queued", "me", now_ms(), 60_000).await.unwrap(), AcquireOutcome::WaitingFor { ref id, .. } if id == "old"),
        "the resumed compensation keeps its place ahead of what was queued meanwhile"
    );
    let fence = take(&j, "old", "me", now_ms(), 60_000).await;
    let failed_again = vec![Event::CompensationFailed { error: "still there".into(), remaining: vec!["a".into()] }];
    j.append("old", &fence, failed_again, 4, Durability::Durable).await.unwrap();
    let fence = take(&j, "queued", "me", now_ms(), 60_000).await;
    j.append("queued", &fence, vec![Event::Completed { output: json!({}) }], 5, Durability::Durable).await.unwrap();
    assert_eq!(j.request_resume("old", 6).await.unwrap(), RequestOutcome::Superseded { by: "queued".into() });
    assert_eq!(j.row("old").unwrap().unwrap().state, WorkflowState::CompensationFailed, "nothing was written");
    assert_eq!(j.prune(now_ms()).unwrap().workflows, 0, "the later workflow is kept as evidence");
    assert_eq!(j.request_resume("old", 7).await.unwrap(), RequestOutcome::Superseded { by: "queued".into() });
}

/// A lease that still names this daemon after it stopped running the workflow (a release that
/// failed after a self-fence, a claim whose COMMIT was reported unknown) must not strand the
/// workflow until a restart: once expired, the daemon lists it again. Its live leases it runs.
async fn a_daemons_own_expired_lease_is_claimable_again_by_it(f: Fixture) {
    let j = f.open();
    j.submit(new_wf("w", "")).await.unwrap();
    assert!(matches!(j.acquire("w", "me", now_ms(), 400).await.unwrap(), AcquireOutcome::Acquired { .. }));
    assert!(j.claimable(now_ms(), "me", 10).unwrap().is_empty(), "a live lease of its own: it runs it");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(j.claimable(now_ms(), "me", 10).unwrap(), ["w"]);
    assert!(matches!(j.acquire("w", "me", now_ms(), 60_000).await.unwrap(), AcquireOutcome::Acquired { .. }));
}

/// Finding 10 of the safety review: a daemon fences itself, releases, and claims the workflow
/// again under the same owner id while an append of the dropped execution still waits in its
/// writer. That append must not land after the new execution read the journal: every
/// acquisition is an epoch of its own, and appends are fenced on it.
async fn an_append_left_from_an_earlier_acquisition_by_the_same_owner_is_refused(f: Fixture) {
    let j = f.open();
    j.submit(new_wf("w", "")).await.unwrap();
    let first = take(&j, "w", "me", now_ms(), 60_000).await;
    j.append("w", &first, vec![completed("a", 1)], 1, Durability::Durable).await.unwrap();
    j.release("me", vec!["w".into()]).await.unwrap();
    let second = take(&j, "w", "me", now_ms(), 60_000).await;
    assert_eq!(second.owner, first.owner);
    assert!(second.epoch > first.epoch, "{first:?} then {second:?}");
    let stale = vec![
        Event::StepFailed {
            step: "b".into(),
            attempt: 1,
            activity: "noop".into(),
            error: "gave up".into(),
            retryable: false,
            next_attempt_at: None,
        },
        Event::Failed { error: "gave up".into() },
    ];
    let err = j.append("w", &first, stale, 2, Durability::Durable).await.unwrap_err();
    assert!(matches!(err, JournalError::LeaseLost { ref holder, .. } if holder.contains("later acquisition")), "{err}");
    j.append("w", &second, vec![completed("b", 2)], 3, Durability::Durable).await.unwrap();
    let view = j.load("w").unwrap().unwrap();
    assert_eq!(view.step("b").unwrap().state, StepState::Completed, "the stale failure never landed");
    assert_eq!(view.summary.state, WorkflowState::Running);
}
