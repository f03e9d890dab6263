//! `LISTEN`: a daemon learns of new work the moment another process commits it (a submit, a
//! resume, a released lease, a finished workflow freeing its cluster), instead of at its next poll.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use super::pool::SharedPool;

/// Told to every daemon listening when work may have become claimable.
pub(crate) const WORK_CHANNEL: &str = "infraflow_work";

/// Listens until the journal is dropped, reconnecting after any failure. Each notification (and
/// each reconnection, which may have missed some) wakes one waiting daemon loop, or the next.
pub(crate) async fn listen(pool: SharedPool, work: Arc<Notify>) {
    let mut pause = Duration::from_millis(100);
    loop {
        match pool.connect_raw().await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let driver = tokio::spawn(async move {
                    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(Ok(m)) = messages.next().await {
                        if matches!(m, AsyncMessage::Notification(_)) && tx.send(()).is_err() {
                            break;
                        }
                    }
                });
                match client.batch_execute(&format!("LISTEN {WORK_CHANNEL}")).await {
                    Ok(()) => {
                        pause = Duration::from_millis(100);
                        work.notify_one();
                        while rx.recv().await.is_some() {
                            work.notify_one();
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot LISTEN for new work; polling meanwhile"),
                }
                driver.abort();
            }
            Err(e) => tracing::warn!(error = %e, "cannot LISTEN for new work; polling meanwhile"),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}
