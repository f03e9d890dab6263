//! `infraflow --server URL`: the CLI as a client of a daemon's API — `submit`, `status`, `wait`,
//! `history`, `cancel`, `retry` and `check` send their request to `/v1` with the token of
//! `--token-file` (or `INFRAFLOW_TOKEN`), and print and exit as they do against a journal.
//! Refusals (a problem document) are one line with the exit code of the same refusal on the
//! journal path: 2 for what the caller asked wrong, 1 otherwise.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cli::{Command, StatusArgs, SubmitArgs};
use crate::failure::{CHECK_FAILED, CmdResult, DRIFTED, Failure, OK, PAUSED, TIMED_OUT, USAGE, WORKFLOW_FAILED};
pub use crate::http_client::Server;

/// Runs `command` against the API.
pub async fn run(server: &Server, command: Command) -> CmdResult {
    match command {
        Command::Submit(args) => submit(server, &args).await,
        Command::Status(args) => status(server, &args).await,
        Command::Wait { id, timeout, json } => wait(server, &id, timeout, json).await,
        Command::History { id, .. } => {
            let r = expect(server.call("GET", &format!("/v1/workflows/{}/history", enc(&id)), None).await?, 200)?;
            println!("{}", pretty(&r));
            Ok(OK)
        }
        Command::Cancel { id, detach } => operate(server, &id, "cancel", detach, "compensated").await,
        Command::Retry { id, detach } => operate(server, &id, "retry", detach, "completed").await,
        Command::Check { infra_id, region, json } => {
            let path = format!("/v1/clusters/{}/check?region={}", enc(&infra_id), enc(&region));
            let reply = server.call("GET", &path, None).await?;
            if reply.status == 502 {
                return Err(Failure { code: CHECK_FAILED, message: detail(&reply.body) });
            }
            let report = expect(reply, 200)?;
            if json {
                println!("{}", pretty(&report));
            } else {
                println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            }
            Ok(if report["inSync"] == true || report["in_sync"] == true { OK } else { DRIFTED })
        }
        other => Err(Failure::usage(format!(
            "{} is not served by the API; run it against the journal (--db) on the daemon's host",
            other.name()
        ))),
    }
}

async fn submit(server: &Server, args: &SubmitArgs) -> CmdResult {
    if args.dry_run || args.output_file.is_some() {
        return Err(Failure::usage("--dry-run and --output-file are not for submit"));
    }
    let input = crate::input::read_input(&args.input)?;
    let mut body = json!({ "workflow": args.workflow, "input": input, "noRollback": args.no_rollback });
    if let Some(id) = &args.id {
        body["id"] = json!(id);
    }
    let traceparent = crate::execute::caller_traceparent()?;
    let r = server.call_with("POST", "/v1/workflows", Some(&body), traceparent.as_deref()).await?;
    let r = if r.status == 200 { Ok(r.body) } else { expect(r, 201) }?;
    println!("{}", r["id"].as_str().unwrap_or_default());
    Ok(OK)
}

async fn status(server: &Server, args: &StatusArgs) -> CmdResult {
    let body = match &args.id {
        Some(id) => expect(server.call("GET", &format!("/v1/workflows/{}", enc(id)), None).await?, 200)?,
        None => {
            let mut q = Vec::new();
            if let Some(s) = args.state.first() {
                q.push(format!("state={}", s.as_str()));
            }
            if let Some(w) = &args.workflow {
                q.push(format!("workflow={}", enc(w)));
            }
            if let Some(c) = &args.cluster {
                q.push(format!("cluster={}", enc(c)));
            }
            expect(server.call("GET", &format!("/v1/workflows?{}", q.join("&")), None).await?, 200)?
        }
    };
    if args.json {
        println!("{}", pretty(&body));
    } else {
        print!("{}", text(&body));
    }
    Ok(OK)
}

/// As `wait` on the journal: 0 completed, 1 failed or compensated, 3 paused, 124 timed out.
async fn wait(server: &Server, id: &str, timeout: Option<Duration>, json: bool) -> CmdResult {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let ask = left.map_or(60, |l| l.as_secs().clamp(1, 60));
        let path = format!("/v1/workflows/{}/wait?timeout={ask}s", enc(id));
        let st = expect(server.call("GET", &path, None).await?, 200)?;
        if st["rests"] == true {
            let state = st["state"].as_str().unwrap_or_default().to_string();
            if json {
                let mut st = st;
                if let Some(o) = st.as_object_mut() {
                    o.remove("rests");
                }
                println!("{}", pretty(&st));
            } else {
                let why = st["error"].as_str().map(|e| format!(": {e}")).unwrap_or_default();
                println!("{id} {state}{why}");
            }
            return Ok(match state.as_str() {
                "completed" => OK,
                "paused" => PAUSED,
                _ => WORKFLOW_FAILED,
            });
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Failure {
                code: TIMED_OUT,
                message: format!(
                    "{id} is still {} after the timeout; it goes on",
                    st["state"].as_str().unwrap_or("running")
                ),
            });
        }
    }
}

async fn operate(server: &Server, id: &str, action: &str, detach: bool, success: &str) -> CmdResult {
    let r = server.call("POST", &format!("/v1/workflows/{}/{action}", enc(id)), Some(&json!({}))).await?;
    let r = expect(r, 202)?;
    eprintln!("infraflow: {action} of {id} requested ({})", r["state"].as_str().unwrap_or_default());
    if detach {
        return Ok(OK);
    }
    let code = wait(server, id, None, false).await?;
    let st = expect(server.call("GET", &format!("/v1/workflows/{}", enc(id)), None).await?, 200)?;
    Ok(if st["state"] == success {
        OK
    } else if code == PAUSED {
        PAUSED
    } else {
        WORKFLOW_FAILED
    })
}

/// The body of an answer of `want`; a problem document as one line, with the journal path's
/// exit code for the same refusal.
fn expect(r: crate::http_client::Reply, want: u16) -> Result<Value, Failure> {
    if r.status == want {
        return Ok(r.body);
    }
    let code = match r.status {
        400 | 401 | 403 | 404 | 409 | 413 | 422 => USAGE,
        _ => WORKFLOW_FAILED,
    };
    Err(Failure { code, message: detail(&r.body) })
}

fn detail(body: &Value) -> String {
    body["detail"].as_str().map(str::to_string).unwrap_or_else(|| format!("the API answered {body}"))
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A short text of a status or a list, for the eye (`--json` has everything).
fn text(v: &Value) -> String {
    let line = |w: &Value| {
        let err = w["error"].as_str().map(|e| format!("  {e}")).unwrap_or_default();
        format!(
            "{}  {}  {}{err}\n",
            w["id"].as_str().unwrap_or("?"),
            w["workflow"].as_str().unwrap_or("?"),
            w["state"].as_str().unwrap_or("?")
        )
    };
    match v {
        Value::Array(list) => list.iter().map(line).collect(),
        one => line(one),
    }
}

/// A path segment or query value: what an id or infraID may hold (letters, digits, `-`, `_`,
/// `.`) as it is, anything else percent-encoded.
fn enc(s: &str) -> String {
    const KEEP: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');
    percent_encoding::utf8_percent_encode(s, KEEP).to_string()
}
