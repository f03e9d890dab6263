//! A connection kept between calls (the OTLP exporter's batches, one handshake for many): what
//! decides it may be used again — its idle time, and a look at its socket for what the server
//! sent while it sat idle — and the rule that a request once written is never sent twice.

use bytes::Bytes;

use super::{Answer, Connection, Request, Server, read};
use crate::failure::Failure;

impl Server {
    /// POSTs `body` on `kept`, the connection the previous call left open (a new one when there
    /// is none): the OTLP exporter's batches, one handshake for many. A server may close an idle
    /// connection as the request leaves: a request hyper gives back unwritten is sent on a new
    /// connection; one that was written is never sent twice (the server may have read it), its
    /// failure is the caller's (the exporter counts the batch as dropped).
    pub async fn post_bytes(
        &self,
        kept: &mut Kept,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<Answer, Failure> {
        let request = self.request("POST", path, content_type, Bytes::from(body), None)?;
        if kept.last_answer.is_some_and(|at| at.elapsed() > KEPT_IDLE) {
            // A server's keep-alive timeout may fire just as this request is written.
            kept.close();
        }
        let answered = self.limited(self.on_kept(kept, request)).await;
        match &answered {
            Ok(_) => kept.last_answer = Some(std::time::Instant::now()),
            // Whatever state it was left in, a connection that failed is not used again.
            Err(_) => kept.close(),
        }
        answered
    }

    async fn on_kept(&self, kept: &mut Kept, mut request: Request) -> Result<Answer, Failure> {
        if let Some(connection) = kept.connection.as_mut() {
            // The connection's driver runs only while the caller waits on a call (the exporter's
            // runtime has one thread, its own), so what the server sent while the connection sat
            // idle is unread: a close is replaced at once; anything else (a GOAWAY, a TLS alert)
            // is left to the driver for a moment, so that `ready` fails on a closing connection
            // and the request goes on a new one, not into it.
            let closed_while_idle = match connection.waiting() {
                Waiting::Nothing => false,
                Waiting::Bytes => {
                    tokio::time::sleep(SETTLE).await;
                    false
                }
                Waiting::Close => true,
            };
            // An error from `ready`: the driver saw the connection close.
            if !closed_while_idle && connection.sender.ready().await.is_ok() {
                match connection.sender.try_send(request).await {
                    Ok(response) => return read(response).await.map_err(|e| self.unreachable(&e)),
                    Err(mut failed) => match failed.take_message() {
                        Some(unwritten) => request = unwritten,
                        None => return Err(self.unreachable(&failed.into_error())),
                    },
                }
            }
            kept.close();
        }
        let connection = kept.connection.insert(self.connect().await?);
        let response = connection.sender.send(request).await.map_err(|e| self.unreachable(&e))?;
        read(response).await.map_err(|e| self.unreachable(&e))
    }
}

/// The longest a kept connection is left idle and used again. Servers close idle connections
/// after their own timeout (seconds: Node's 5 s; a test collector's 0.5 s); one that fires as a
/// request is written loses it, so a connection idle longer than this is replaced first. Exports
/// at a full batch's pace come far sooner and keep their connection.
const KEPT_IDLE: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a kept connection's driver is run when the server sent something while it was idle:
/// one pass of the runtime's I/O driver is all it needs; the timer makes it about 2 ms.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(1);

/// What a kept connection's server sent while it was idle, unread.
enum Waiting {
    Nothing,
    /// Frames or records (a GOAWAY, a TLS alert): for the driver to read.
    Bytes,
    /// The end of the stream, or a reset.
    Close,
}

impl Connection {
    /// Looks at the socket without reading or waiting (`MSG_PEEK | MSG_DONTWAIT`): one system
    /// call, so a busy exporter's reuse costs nothing.
    fn waiting(&self) -> Waiting {
        let mut byte = 0u8;
        // SAFETY: `recv` writes at most one byte into `byte`, which outlives the call, on a
        // descriptor this connection owns.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::recv(
                std::os::fd::AsRawFd::as_raw_fd(&self.socket),
                (&raw mut byte).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => Waiting::Close,
            1.. => Waiting::Bytes,
            _ => match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::WouldBlock => Waiting::Nothing,
                std::io::ErrorKind::Interrupted => Waiting::Bytes,
                _ => Waiting::Close,
            },
        }
    }
}

/// A connection kept between calls (`post_bytes`); closed when dropped.
#[derive(Default)]
pub struct Kept {
    connection: Option<Connection>,
    /// When it last answered.
    last_answer: Option<std::time::Instant>,
}

impl Kept {
    fn close(&mut self) {
        self.last_answer = None;
        if let Some(connection) = self.connection.take() {
            connection.driving.abort();
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.close();
    }
}
