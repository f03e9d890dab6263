//! The test proxy's HTTP: reading a request, naming its API action, forwarding it to moto,
//! answering in AWS's error shapes, and reading what STS's answers issued.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct Request {
    pub head: String,
    pub body: Vec<u8>,
}

pub fn read_request(conn: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte)? == 0 {
            return Ok(None);
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok()).flatten()
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body)?;
    Ok(Some(Request { head, body }))
}

/// `CreateVpc` for query-protocol services; `route53 POST /hostedzone` for Route53.
pub fn action(req: &Request) -> String {
    let body = String::from_utf8_lossy(&req.body);
    if let Some(rest) = body.split('&').find_map(|p| p.strip_prefix("Action=")) {
        return rest.to_string();
    }
    // The JSON protocol (the tagging API): `X-Amz-Target: ResourceGroupsTaggingAPI_20170126.GetResources`.
    if let Some(target) = req.head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("x-amz-target").then(|| v.trim().to_string())
    }) {
        return target.rsplit('.').next().unwrap_or_default().to_string();
    }
    if let Some(op) = s3_operation(&req.head) {
        return op;
    }
    let first = req.head.lines().next().unwrap_or_default();
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default().split('?').next().unwrap_or_default();
    // Only the API version is dropped: moto's zone ids are random uppercase and digits, and one in
    // about 1,300 begins with "20" (CI once saw a DeleteHostedZone turn into `DELETE /hostedzone`).
    let shape: Vec<&str> =
        path.split('/')
            .filter(|s| !s.is_empty() && *s != "2013-04-01")
            .map(|s| {
                if s.len() >= 10 && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()) {
                    "{id}"
                } else {
                    s
                }
            })
            .collect();
    format!("route53 {method} /{}", shape.join("/"))
}

/// The S3 operation of a REST request signed for S3 (`Credential=…/s3/aws4_request`), from its
/// method, path (`/` or `/<bucket>[/<key>]`, path-style) and sub-resource: `DeleteObjects`.
pub fn s3_operation(head: &str) -> Option<String> {
    let signed_for_s3 = head.lines().any(|l| {
        l.split_once(':')
            .is_some_and(|(k, v)| k.eq_ignore_ascii_case("authorization") && v.contains("/s3/aws4_request"))
    });
    if !signed_for_s3 {
        return None;
    }
    let (method, path, query) = super::authz::request_line(head);
    let has = |q: &str| query.split('&').any(|p| p == q || p.starts_with(&format!("{q}=")));
    let segments = path.trim_start_matches('/').splitn(2, '/').filter(|s| !s.is_empty()).count();
    let op = match (method.as_str(), segments) {
        ("GET", 0) => "ListBuckets",
        ("GET", 1) if has("location") => "GetBucketLocation",
        ("GET", 1) if has("tagging") => "GetBucketTagging",
        ("GET", 1) if has("versions") => "ListObjectVersions",
        ("GET", 1) if has("versioning") => "GetBucketVersioning",
        ("GET", 1) if has("policy") => "GetBucketPolicy",
        ("GET", 1) => "ListObjects",
        ("HEAD", 1) => "HeadBucket",
        ("POST", 1) if has("delete") => "DeleteObjects",
        ("PUT", 1) if has("tagging") => "PutBucketTagging",
        ("PUT", 1) if has("versioning") => "PutBucketVersioning",
        ("PUT", 1) if has("publicAccessBlock") => "PutPublicAccessBlock",
        ("PUT", 1) if has("policy") => "PutBucketPolicy",
        ("PUT", 1) => "CreateBucket",
        ("DELETE", 1) => "DeleteBucket",
        ("PUT", 2) => "PutObject",
        ("GET", 2) => "GetObject",
        ("DELETE", 2) => "DeleteObject",
        _ => "Unknown",
    };
    Some(if op == "Unknown" { format!("s3 Unknown({method} {path}?{query})") } else { op.to_string() })
}

/// The access key a request is signed with (SigV4's `Credential=`), "" if unsigned.
pub fn access_key(head: &str) -> &str {
    head.lines()
        .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
        .and_then(|l| l.split("Credential=").nth(1))
        .and_then(|c| c.split('/').next())
        .unwrap_or_default()
}

pub fn is_query(action: &str) -> bool {
    !action.starts_with("route53 ")
}

/// An AWS error answer in the shape the service speaks: EC2's `<Response><Errors>`, or the
/// `<ErrorResponse>` of the other query services (ELB, STS) and of Route53.
pub fn error_response(status: &str, ec2: bool, code: &str, message: &str) -> Vec<u8> {
    let body = if ec2 {
        format!(
            "<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>fault</RequestID></Response>"
        )
    } else {
        format!(
            "<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error><RequestId>fault</RequestId></ErrorResponse>"
        )
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// S3's conditional writes (`If-None-Match`, `If-Match`), one at a time: AWS checks the
/// condition and writes atomically, moto checks and then writes without a lock, so two racing
/// writers could both pass its check. Held across every proxy of the test binary.
static CONDITIONAL_WRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn is_conditional_write(req: &Request) -> bool {
    let conditional = req.head.lines().any(|l| {
        l.split_once(':')
            .is_some_and(|(k, _)| k.eq_ignore_ascii_case("if-match") || k.eq_ignore_ascii_case("if-none-match"))
    });
    conditional && matches!(s3_operation(&req.head).as_deref(), Some("PutObject" | "DeleteObject"))
}

pub fn forward(req: &Request, upstream: u16) -> std::io::Result<Vec<u8>> {
    let _one_at_a_time =
        is_conditional_write(req).then(|| CONDITIONAL_WRITES.lock().unwrap_or_else(|p| p.into_inner()));
    let mut up = TcpStream::connect(("127.0.0.1", upstream))?;
    up.set_read_timeout(Some(Duration::from_secs(60)))?;
    let head: String = req
        .head
        .trim_end()
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    up.write_all(format!("{head}Connection: close\r\n\r\n").as_bytes())?;
    up.write_all(&req.body)?;
    let mut resp = Vec::new();
    up.read_to_end(&mut resp)?;
    // One request per client connection: say so, so the client never reuses it.
    let split = resp.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4).unwrap_or(resp.len());
    let head = String::from_utf8_lossy(&resp[..split]).to_string();
    let head: String = head
        .trim_end()
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    let mut out = format!("{head}Connection: close\r\n\r\n").into_bytes();
    out.extend_from_slice(&resp[split..]);
    Ok(out)
}

/// The account of the role an AssumeRole answer is for (`arn:aws:sts::ACCOUNT:assumed-role/…`).
pub fn assumed_account(answer: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(answer);
    let rest = text.split("arn:aws:sts::").nth(1)?;
    Some(rest.split(':').next()?.to_string())
}

/// The credentials in an AssumeRole answer: access key id first.
pub fn credentials_in(answer: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(answer);
    ["AccessKeyId", "SecretAccessKey", "SessionToken"]
        .iter()
        .filter_map(|tag| {
            let start = text.find(&format!("<{tag}>"))? + tag.len() + 2;
            let end = start + text[start..].find('<')?;
            Some(text[start..end].to_string())
        })
        .collect()
}
