//! The benchmark's OTLP/HTTP sink (`scripts/bench-traces.sh`): what a collector's receiver does
//! at least (read each request whole, answer 200, connections kept), compiled, so that on a
//! small machine its CPU takes as little from the engine as a collector elsewhere would.
//! Build: `rustc -O scripts/otlp-sink.rs -o target/otlp-sink`; run: `otlp-sink PORT-FILE`
//! (it writes the loopback port it listens on there).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

fn serve(mut conn: TcpStream) {
    let mut buf = vec![0u8; 1 << 20];
    let (mut start, mut end) = (0, 0);
    loop {
        // The head: up to its blank line.
        let head_end = loop {
            if let Some(i) = buf[start..end].windows(4).position(|w| w == b"\r\n\r\n") {
                break start + i + 4;
            }
            if start > 0 {
                buf.copy_within(start..end, 0);
                (start, end) = (0, end - start);
            }
            match conn.read(&mut buf[end..]) {
                Ok(n) if n > 0 => end += n,
                _ => return,
            }
        };
        let head = String::from_utf8_lossy(&buf[start..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        // The body: what is buffered, then the rest read and let go.
        let buffered = (end - head_end).min(length);
        start = head_end + buffered;
        let mut left = length - buffered;
        while left > 0 {
            match conn.read(&mut buf[..left.min(1 << 20)]) {
                Ok(n) if n > 0 => left -= n,
                _ => return,
            }
            (start, end) = (0, 0);
        }
        if start == end {
            (start, end) = (0, 0);
        }
        if conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_err() {
            return;
        }
    }
}

fn main() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let file = std::env::args().nth(1).expect("give the file to write the port to");
    std::fs::write(file, port.to_string()).expect("the port file written");
    for conn in listener.incoming().flatten() {
        std::thread::spawn(move || serve(conn));
    }
}
