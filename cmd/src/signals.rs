//! SIGINT/SIGTERM: the first asks for a graceful stop, a second ends the process at once.

use std::sync::Arc;

use infraflow_workflows::Signals;

/// Watches for SIGINT and SIGTERM in the background and forwards them to `signals`.
pub fn forward_interrupts(signals: Arc<Signals>, what: &'static str) {
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM");
                return;
            }
        };
        let mut seen = 0;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            seen += 1;
            if seen == 1 {
                eprintln!("infraflow: stopping {what} at the next step boundary (interrupt again to quit at once)");
                signals.stop();
            } else {
                eprintln!("infraflow: quitting at once; the journal is consistent and the work resumable");
                std::process::exit(i32::from(crate::failure::INTERRUPTED));
            }
        }
    });
}
