//! Idempotent AWS operations for infraflow: every create finds its resource by identity tag before
//! creating it, every delete treats "not found" as done, and waits are bounded and resumable.
//! Knows nothing of the journal or the engine.

pub mod adopt;
pub mod anchor;
mod assume;
pub mod census;
pub mod classic_elb;
mod client;
pub mod cluster_lease;
pub mod compute;
pub mod consistency;
pub mod customer_network;
pub mod dns;
pub mod ebs;
pub mod elb;
pub mod endpoints;
mod error;
pub mod iam;
pub mod interfaces;
pub mod inventory;
pub mod look_alikes;
pub mod marks;
pub mod nat;
pub mod network;
pub mod observe;
pub mod oidc_bucket;
pub mod pacing;
pub mod privatelink;
pub mod provenance;
pub mod quotas;
pub mod resources;
pub mod role;
pub mod routing;
pub mod s3;
pub mod security;
pub mod tagging;
pub mod tags;
pub mod throttle;
pub mod vpc_state;
pub mod wait;

pub use client::{Aws, AwsPool, Environment, IAM_ENVIRONMENT};
pub use error::{AwsError, AwsResult, classify};
pub use inventory::{Inventory, Lookup};
pub use resources::{Kind, Scope};
pub use role::{AssumedRole, RoleAllowList};
pub use tags::Identity;
