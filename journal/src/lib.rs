//! infraflow's durable memory: an append-only event log per workflow, a summary projection
//! written in the same transaction, leases with fencing, and group commit — in a SQLite file
//! (embedded) or a PostgreSQL database (shared by several hosts), behind one handle (`Journal`,
//! whose contract is `api`). It knows nothing of AWS and nothing of what any particular workflow
//! does.

mod api;
mod error;
mod event;
mod executions;
mod journal;
mod owner;
mod postgres;
mod projection;
mod rules;
mod sqlite;

pub use api::{
    AcquireOutcome, CommitObserver, Durability, Fence, NewWorkflow, Pruned, Renewal, RequestOutcome, SubmitOutcome,
    WorkflowOutcome, WorkflowRow,
};
pub use error::{JournalError, Result};
pub use event::{Event, EventRecord, Undo};
pub use executions::{ExecutionStart, Executions, UnendedExecution};
pub use journal::{Journal, Location};
pub use owner::{Owner, owner_is_gone};
pub use postgres::{PgTarget, raw_commit_ceiling as postgres_commit_ceiling};
pub use projection::{StepState, StepView, Summary, WorkflowState, WorkflowView};
pub use sqlite::archive_path;
pub use sqlite::bench::raw_insert_ceiling;
