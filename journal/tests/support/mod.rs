//! What the journal's test binaries share: a fresh journal of either backend (`Fixture`), and
//! the workflows and events they write.
#![allow(dead_code)] // each binary uses its own part

#[path = "../../../tests/support/postgres.rs"]
pub mod pg;

use infraflow_journal::{AcquireOutcome, Event, Fence, Journal, Location, NewWorkflow};
use serde_json::json;

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A fresh, empty journal location of one backend.
pub struct Fixture {
    pub kind: Kind,
    pub location: Location,
    _dir: tempfile::TempDir,
    /// The PostgreSQL database's name.
    pub db: String,
}

impl Fixture {
    pub fn new(kind: Kind) -> Fixture {
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

    pub fn open(&self) -> Journal {
        Journal::open_at(&self.location).unwrap()
    }

    pub fn open_read_only(&self) -> Journal {
        Journal::open_read_only_at(&self.location).unwrap()
    }

    /// Deletes a workflow's events behind the journal's back; returns the refusal.
    pub fn try_delete_events(&self, id: &str) -> String {
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

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

pub fn new_wf(id: &str, cluster: &str) -> NewWorkflow {
    NewWorkflow {
        id: id.into(),
        workflow: "canary".into(),
        input: json!({"steps": 3}),
        cluster: cluster.into(),
        no_rollback: false,
        code_version: Some(1),
        creator: None,
        submitter: None,
        traceparent: None,
        at: 1_000,
    }
}

pub fn completed(step: &str, n: i64) -> Event {
    Event::StepCompleted {
        step: step.into(),
        attempt: 1,
        activity: "noop".into(),
        input_hash: "h".into(),
        output: json!(n),
        position: None,
    }
}

/// Takes the lease of `id` for `owner`, which must be free: the fence its appends go under.
pub async fn take(j: &Journal, id: &str, owner: &str, now: i64, ttl_ms: i64) -> Fence {
    match j.acquire(id, owner, now, ttl_ms).await.unwrap() {
        AcquireOutcome::Acquired { fence, .. } => fence,
        other => panic!("{owner} could not take {id}: {other:?}"),
    }
}
