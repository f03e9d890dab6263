//! What a workflow holds while it runs, across journals and processes: its cluster's lease
//! (`lease`), its admission beside the account's quotas (`admission`), and how long it waits for
//! either (`wait_limit`). Each is an `engine::Hold`, taken before the first step.

pub mod admission;
pub mod lease;
pub mod wait_limit;
