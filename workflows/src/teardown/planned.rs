//! One resource a teardown would delete, leave or wait on, and why: the line of a plan, of what
//! a teardown left, and of a check's holdups.

use serde::{Deserialize, Serialize};

/// One resource of the plan (and of what a teardown left).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Planned {
    pub kind: String,
    pub id: String,
    /// Why it is left, or what may hold the delete up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
