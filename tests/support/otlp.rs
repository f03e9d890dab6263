//! A test collector: an OTLP/HTTP receiver on a loopback port that decodes what it is sent with
//! a protobuf reader of its own (not the exporter's encoder); or one that is silent, slow, or
//! closes a connection without answering; or an OTLP/gRPC receiver (HTTP/2, hyper's server).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// One span as received.
#[derive(Clone, Debug)]
pub struct Got {
    pub trace_id: String,
    pub span_id: String,
    pub parent: Option<String>,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attrs: BTreeMap<String, String>,
    /// 0 unset, 1 ok, 2 error.
    pub status: u64,
    pub message: String,
    pub events: Vec<String>,
}

pub struct Collector {
    pub port: u16,
    spans: Arc<Mutex<Vec<Got>>>,
    /// Each export's request header fields, names lowercased.
    heads: Heads,
}

type Heads = Arc<Mutex<Vec<BTreeMap<String, String>>>>;

enum Field<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

fn varint(b: &[u8], i: &mut usize) -> u64 {
    let (mut n, mut shift) = (0u64, 0);
    loop {
        let byte = b[*i];
        *i += 1;
        n |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return n;
        }
        shift += 7;
    }
}

fn fields(b: &[u8]) -> Vec<(u64, Field<'_>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i);
        let (field, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => Field::Int(varint(b, &mut i)),
            1 => {
                let v = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
                i += 8;
                Field::Int(v)
            }
            2 => {
                let len = varint(b, &mut i) as usize;
                let v = &b[i..i + len];
                i += len;
                Field::Bytes(v)
            }
            5 => {
                let v = u64::from(u32::from_le_bytes(b[i..i + 4].try_into().unwrap()));
                i += 4;
                Field::Int(v)
            }
            other => panic!("wire type {other} in an OTLP message"),
        };
        out.push((field, value));
    }
    out
}

fn sub<'a>(b: &'a [u8], n: u64) -> Vec<&'a [u8]> {
    fields(b)
        .into_iter()
        .filter_map(|(f, v)| matches!(v, Field::Bytes(_)).then_some((f, v)))
        .filter(|(f, _)| *f == n)
        .map(|(_, v)| match v {
            Field::Bytes(b) => b,
            Field::Int(_) => unreachable!(),
        })
        .collect()
}

fn int(b: &[u8], n: u64) -> u64 {
    fields(b)
        .into_iter()
        .find_map(|(f, v)| match v {
            Field::Int(x) if f == n => Some(x),
            _ => None,
        })
        .unwrap_or(0)
}

fn text(b: &[u8], n: u64) -> String {
    sub(b, n).first().map(|s| String::from_utf8_lossy(s).into_owned()).unwrap_or_default()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `KeyValue`s (field `n`) as strings.
fn attrs(b: &[u8], n: u64) -> BTreeMap<String, String> {
    sub(b, n)
        .into_iter()
        .map(|kv| {
            let value = sub(kv, 2).first().map(|any| {
                fields(any)
                    .into_iter()
                    .map(|(f, v)| match (f, v) {
                        (1, Field::Bytes(s)) => String::from_utf8_lossy(s).into_owned(),
                        (_, Field::Int(x)) => x.to_string(),
                        _ => String::new(),
                    })
                    .collect::<String>()
            });
            (text(kv, 1), value.unwrap_or_default())
        })
        .collect()
}

/// The spans of one `ExportTraceServiceRequest`.
pub fn decode(body: &[u8]) -> Vec<Got> {
    let mut out = Vec::new();
    for rs in sub(body, 1) {
        for ss in sub(rs, 2) {
            for s in sub(ss, 2) {
                let status = sub(s, 15).first().copied();
                out.push(Got {
                    trace_id: hex(sub(s, 1)[0]),
                    span_id: hex(sub(s, 2)[0]),
                    parent: sub(s, 4).first().map(|p| hex(p)),
                    name: text(s, 5),
                    start_ns: int(s, 7),
                    end_ns: int(s, 8),
                    attrs: attrs(s, 9),
                    status: status.map_or(0, |st| int(st, 3)),
                    message: status.map(|st| text(st, 2)).unwrap_or_default(),
                    events: sub(s, 11).into_iter().map(|e| text(e, 2)).collect(),
                });
            }
        }
    }
    out
}

/// How a test collector answers an export.
#[derive(Clone, Copy)]
enum Answering {
    /// 200, on a kept connection; every third request on one is answered `connection: close`
    /// and the connection closed (the exporter's reconnect runs in every test).
    Always,
    /// Takes connections and never answers.
    Never,
    /// 200 after the given time.
    Slowly(std::time::Duration),
    /// Reads every request whole; every second one is kept and its connection closed unanswered.
    EverySecondUnanswered,
    /// 200, and a connection idle this long closed (a keep-alive timeout).
    ClosingIdleAfter(std::time::Duration),
}

impl Collector {
    /// A collector that answers every export 200 and keeps what it decoded.
    pub fn start() -> Collector {
        Self::serve(Answering::Always)
    }

    /// A collector that takes connections and never answers.
    pub fn silent() -> Collector {
        Self::serve(Answering::Never)
    }

    /// A collector that answers every export 200 after `delay`.
    pub fn slow(delay: std::time::Duration) -> Collector {
        Self::serve(Answering::Slowly(delay))
    }

    /// A collector that answers every export 200 and closes a connection idle for `idle`.
    pub fn closing_idle_after(idle: std::time::Duration) -> Collector {
        Self::serve(Answering::ClosingIdleAfter(idle))
    }

    /// A collector that reads every export whole, and closes the connection without answering
    /// every second one (what it read is kept: a batch sent again would be counted twice).
    pub fn closing_unanswered() -> Collector {
        Self::serve(Answering::EverySecondUnanswered)
    }

    fn serve(answering: Answering) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let heads = Heads::default();
        let heads_kept = heads.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                if let Answering::Never = answering {
                    held.push(conn);
                    continue;
                }
                let (kept, requests, heads) = (kept.clone(), requests.clone(), heads_kept.clone());
                std::thread::spawn(move || answer_exports(conn, answering, &kept, &requests, &heads));
            }
        });
        Collector { port, spans, heads }
    }

    /// An OTLP/gRPC collector (HTTP/2 from the first byte, as on loopback): takes each
    /// `TraceService/Export` whose framing is right, answers `grpc-status` 0 in the trailers.
    pub fn grpc() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let (spans, heads) = (Arc::new(Mutex::new(Vec::new())), Heads::default());
        let (kept, heads_kept) = (spans.clone(), heads.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((tcp, _)) = listener.accept().await {
                    let (kept, heads) = (kept.clone(), heads_kept.clone());
                    let service = hyper::service::service_fn(move |request| {
                        let (kept, heads) = (kept.clone(), heads.clone());
                        async move { Ok::<_, std::convert::Infallible>(grpc_export(request, &kept, &heads).await) }
                    });
                    tokio::spawn(async move {
                        let io = hyper_util::rt::TokioIo::new(tcp);
                        let executor = hyper_util::rt::TokioExecutor::new();
                        let _ = hyper::server::conn::http2::Builder::new(executor).serve_connection(io, service).await;
                    });
                }
            });
        });
        Collector { port, spans, heads }
    }

    /// The header fields of every export received.
    pub fn heads(&self) -> Vec<BTreeMap<String, String>> {
        self.heads.lock().unwrap().clone()
    }

    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), format!("http://127.0.0.1:{}", self.port)),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "0".into()),
        ]
    }

    pub fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }
}

/// Reads the exports of one connection, keeping what each decodes to, answering as `answering`
/// says.
fn answer_exports(
    mut conn: std::net::TcpStream,
    answering: Answering,
    kept: &Mutex<Vec<Got>>,
    requests: &std::sync::atomic::AtomicUsize,
    heads: &Heads,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    if let Answering::ClosingIdleAfter(idle) = answering {
        // A read that times out waiting for the next request ends the connection.
        conn.set_read_timeout(Some(idle)).unwrap();
    }
    for on_this in 1.. {
        let (head_end, len) = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..i]).to_lowercase();
                assert!(head.starts_with("post /v1/traces "), "{head}");
                assert!(head.contains("content-type: application/x-protobuf"), "{head}");
                let fields = head.lines().skip(1).filter_map(|l| l.split_once(':'));
                heads.lock().unwrap().push(fields.map(|(k, v)| (k.trim().into(), v.trim().into())).collect());
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                break (i + 4, len);
            }
            match conn.read(&mut chunk) {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        };
        while buf.len() < head_end + len {
            match conn.read(&mut chunk) {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        }
        kept.lock().unwrap().extend(decode(&buf[head_end..head_end + len]));
        buf.drain(..head_end + len);
        let nth = requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let closing = match answering {
            Answering::EverySecondUnanswered if nth % 2 == 0 => return,
            Answering::Slowly(delay) => {
                std::thread::sleep(delay);
                false
            }
            Answering::Always => on_this % 3 == 0,
            _ => false,
        };
        let connection = if closing { "connection: close\r\n" } else { "" };
        let answer =
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n{connection}content-length: 0\r\n\r\n");
        if conn.write_all(answer.as_bytes()).is_err() || closing {
            return;
        }
    }
}

/// One gRPC export: checks its method, content type and framing, keeps its spans; answers an
/// empty `ExportTraceServiceResponse` and `grpc-status` 0.
async fn grpc_export(
    request: hyper::Request<hyper::body::Incoming>,
    kept: &Mutex<Vec<Got>>,
    heads: &Heads,
) -> hyper::Response<http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>> {
    use http_body_util::BodyExt;
    let (parts, body) = request.into_parts();
    assert_eq!(parts.uri.path(), "/opentelemetry.proto.collector.trace.v1.TraceService/Export");
    assert_eq!(parts.headers["content-type"], "application/grpc");
    assert_eq!(parts.headers["te"], "trailers");
    let fields = parts.headers.iter().map(|(k, v)| (k.as_str().into(), v.to_str().unwrap_or_default().into()));
    heads.lock().unwrap().push(fields.collect());
    let body = body.collect().await.unwrap().to_bytes();
    assert_eq!(body[0], 0, "not compressed");
    assert_eq!(u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize, body.len() - 5, "one message, framed");
    kept.lock().unwrap().extend(decode(&body[5..]));
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    let answer = http_body_util::Full::new(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]))
        .with_trailers(async move { Some(Ok(trailers)) })
        .boxed();
    hyper::Response::builder().header("content-type", "application/grpc").body(answer).unwrap()
}
