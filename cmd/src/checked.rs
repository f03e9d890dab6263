//! The daemon's last scheduled check of each cluster: what `check` writes, the page and the
//! metrics read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use infraflow_workflows::check::CheckReport;

/// One cluster's last check on the daemon's schedule.
#[derive(Clone, Debug)]
pub struct Checked {
    pub infra_id: String,
    pub region: String,
    pub at_ms: i64,
    pub result: Result<CheckReport, String>,
}

/// The daemon's last check of every cluster, for the page and the metrics.
pub type SharedChecks = Arc<Mutex<BTreeMap<(String, String), Checked>>>;
