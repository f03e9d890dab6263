//! `teardown`: what it deletes (the makers' proof, in reverse dependency order, in rounds until
//! nothing is left), as a workflow (`workflow`) over what a round's discovery found
//! (`discovered`), the stops before any delete (`stops`), the deletes as a dependency graph
//! (`graph`), what it leaves and why (`left`), and `run teardown --dry-run`'s plan of all that
//! (`plan`, `planned`).

mod discovered;
mod graph;
mod left;
pub mod plan;
pub mod planned;
mod stops;
pub mod workflow;

pub use stops::{find_protection, protected_message};
pub use workflow::{Teardown, TeardownInput, TeardownOutput};
