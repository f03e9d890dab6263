//! Live progress lines on stderr for `run`, `retry` and `cancel`.

use std::sync::Arc;
use std::time::Instant;

use infraflow_engine::{Observer, Progress};

pub fn stderr_printer() -> Observer {
    let t0 = Instant::now();
    Arc::new(move |p: &Progress| {
        let at = t0.elapsed().as_secs_f64();
        let line = match p {
            Progress::StepStarted { step, attempt, .. } if *attempt > 1 => {
                format!("start     {step} (attempt {attempt})")
            }
            Progress::StepStarted { step, .. } => format!("start     {step}"),
            Progress::StepCompleted { step, millis, .. } => {
                format!("done      {step} ({:.2}s)", *millis as f64 / 1000.0)
            }
            Progress::StepRetrying { step, attempt, error, delay_ms, .. } => format!(
                "retrying  {step}: attempt {attempt} failed: {error}; next in {:.1}s",
                *delay_ms as f64 / 1000.0
            ),
            Progress::StepFailed { step, error, .. } => format!("failed    {step}: {error}"),
            Progress::Compensating { reason, .. } => format!("compensating: {reason}"),
            Progress::Waiting { reason, .. } => format!("waits for: {reason}"),
            Progress::Finished { state, .. } => format!("finished: {state}"),
            Progress::LeaseTaken { .. } | Progress::LeasesRenewed { .. } => return,
        };
        eprintln!("[{at:7.2}s] {line}");
    })
}

/// Progress as log records, for the daemon.
pub fn tracing_observer() -> Observer {
    Arc::new(|p: &Progress| match p {
        Progress::StepStarted { workflow, step, activity, attempt } => {
            tracing::debug!(%workflow, %step, %activity, attempt, "step started")
        }
        Progress::StepCompleted { workflow, step, activity, attempt, millis } => {
            tracing::info!(%workflow, %step, %activity, attempt, millis, "step completed")
        }
        Progress::StepRetrying { workflow, step, activity, attempt, error, delay_ms } => {
            tracing::warn!(%workflow, %step, %activity, attempt, %error, delay_ms, "step failed; will retry")
        }
        Progress::StepFailed { workflow, step, activity, attempt, error } => {
            tracing::warn!(%workflow, %step, %activity, attempt, %error, "step failed")
        }
        Progress::Compensating { workflow, reason } => tracing::warn!(%workflow, %reason, "compensating"),
        Progress::Waiting { workflow, reason } => tracing::info!(%workflow, %reason, "waiting"),
        Progress::Finished { workflow, state } => tracing::info!(%workflow, %state, "workflow finished"),
        Progress::LeaseTaken { .. } | Progress::LeasesRenewed { .. } => {}
    })
}
