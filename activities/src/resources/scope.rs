//! Which resources of a kind a lookup reads: one identity, one creator's, or a whole cluster's.

use serde::{Deserialize, Serialize};

/// Which resources of a kind to find.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    /// The one resource with this identity tag value (`<infraID>/<role>[/<zone>]`).
    Identity(String),
    /// The resource with this identity that workflow `created_by` made (never one it adopted).
    CreatedBy { identity: String, created_by: String },
    /// Everything tagged `kubernetes.io/cluster/<infraID>=owned`.
    Owned(String),
}
