//! infraflow's durable memory: an append-only event log per workflow, a summary projection
//! written in the same transaction, leases with fencing, and group commit — in a SQLite file
//! (embedded) or a PostgreSQL database (shared by several hosts), behind one API (`journal`). It
//! knows nothing of AWS and nothing of what any particular workflow does.

mod error;
mod event;
mod journal;
mod owner;
mod postgres;
mod projection;
mod rules;
mod sqlite;

pub use error::{JournalError, Result};
pub use event::{Event, EventRecord, Undo};
pub use journal::{
    AcquireOutcome, CommitObserver, Durability, Fence, Journal, Location, NewWorkflow, Pruned, Renewal, RequestOutcome,
    SubmitOutcome, WorkflowOutcome, WorkflowRow,
};
pub use owner::{Owner, owner_is_gone};
pub use postgres::{PgTarget, raw_commit_ceiling as postgres_commit_ceiling};
pub use projection::{StepState, StepView, Summary, WorkflowState, WorkflowView};
pub use sqlite::archive_path;
pub use sqlite::bench::raw_insert_ceiling;
