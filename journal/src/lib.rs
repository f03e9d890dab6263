//! infraflow's durable memory: an append-only SQLite event log per workflow, a summary projection
//! written in the same transaction, leases with fencing, and group commit. It knows nothing of AWS
//! and nothing of what any particular workflow does.

mod append;
mod bench;
mod error;
mod event;
mod journal;
mod owner;
mod projection;
mod prune;
mod queue;
mod schema;
mod writer;

pub use bench::raw_insert_ceiling;
pub use error::{JournalError, Result};
pub use event::{Event, EventRecord, Undo};
pub use journal::{
    AcquireOutcome, Durability, Journal, NewWorkflow, Renewal, RequestOutcome, SubmitOutcome, WorkflowRow,
};
pub use owner::{Owner, owner_is_gone};
pub use projection::{StepState, StepView, Summary, WorkflowState, WorkflowView};
pub use prune::{Pruned, archive_path};
pub use writer::CommitObserver;
