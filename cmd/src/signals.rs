//! SIGINT/SIGTERM: the first asks for a graceful stop, a second ends the process at once.

use std::sync::Arc;

use infraflow_engine::Signals;

/// Watches for SIGINT and SIGTERM in the background and forwards them to `signals`. The daemon
/// says so in its log (which may be JSON); a command run by a person says so on stderr.
pub fn forward_interrupts(signals: Arc<Signals>, what: &'static str) {
    let daemon = what == "the daemon";
    let say = move |line: &str| {
        if daemon {
            tracing::warn!("{line}");
        } else {
            eprintln!("infraflow: {line}");
        }
    };
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
                say(&format!("stopping {what} at the next step boundary (interrupt again to quit at once)"));
                signals.stop();
            } else {
                say("quitting at once; the journal is consistent and the work resumable");
                std::process::exit(i32::from(crate::failure::INTERRUPTED));
            }
        }
    });
}
