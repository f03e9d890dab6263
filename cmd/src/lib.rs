//! The binary edge of infraflow: argument parsing, configuration, logging and printing for the
//! `infraflow` and `workflow-status` binaries. Nothing below this crate prints or reads env.

mod admit;

mod api;

mod bench;
mod check;
mod checked;
pub mod cli;
mod execute;
mod failure;
mod graph;
mod http_client;
mod input;
mod lock;
mod metrics;
mod otlp;
mod page;
mod paths;
mod policy;
mod progress;
mod rate_waits;
mod redact;
mod registry;
mod remote;
mod render;
mod serve;
mod signals;
mod status;
mod sweep;

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

use infraflow_journal::Location;

use crate::cli::{Cli, Command, LogFormat, StatusCli};
use crate::failure::{CmdResult, Failure};

fn init_logging(default: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => fmt.init(),
        // Fields at the top level of each object (`workflow`, `step`, `attempt`), not nested; a
        // traced line's `span` holds its `trace_id` and `span_id`.
        LogFormat::Json => fmt.json().flatten_event(true).with_current_span(true).with_span_list(false).init(),
    }
}

/// The stack of every thread that polls a workflow: the command's own (`main_infraflow` runs on
/// one of this size, not on the process's main thread) and the runtime's workers. A workflow's
/// future nests every concurrent branch's SDK calls, and an unoptimized build keeps their frames
/// large: a create-cluster overflowed 8 MiB. Only what is touched is ever committed.
const WORKER_STACK: usize = 32 << 20;

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(WORKER_STACK)
        .build()
        .map_err(|e| Failure::other(format!("cannot start the async runtime: {e}")))
}

fn finish(result: CmdResult) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => f.exit(),
    }
}

/// `infraflow`, on a thread with a workflow's stack (`WORKER_STACK`): `run` drives its workflow
/// on the thread that calls it.
pub fn main_infraflow() -> ExitCode {
    let command =
        std::thread::Builder::new().name("infraflow".into()).stack_size(WORKER_STACK).spawn(infraflow_command);
    match command.map(|t| t.join()) {
        Ok(Ok(code)) => code,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(e) => {
            eprintln!("infraflow: cannot start its command thread: {e}");
            ExitCode::from(crate::failure::WORKFLOW_FAILED)
        }
    }
}

fn infraflow_command() -> ExitCode {
    let cli = Cli::parse();
    init_logging(if matches!(cli.command, Command::Daemon { .. }) { "info" } else { "warn" }, cli.log_format);
    finish((|| {
        if let Some(url) = &cli.server.server {
            let token = match &cli.server.token_file {
                Some(f) => std::fs::read_to_string(f)
                    .map_err(|e| Failure::usage(format!("--token-file {}: {e}", f.display())))?
                    .trim()
                    .to_string(),
                None => std::env::var("INFRAFLOW_TOKEN").unwrap_or_default(),
            };
            if token.is_empty() {
                return Err(Failure::usage("--server needs a token: --token-file FILE or INFRAFLOW_TOKEN"));
            }
            let server = remote::Server::new("--server", url, Some(token), cli.server.server_ca.as_deref())?;
            return runtime()?.block_on(remote::run(&server, cli.command));
        }
        let db = paths::journal_location(cli.db)?;
        if let Some(pacing) = cli.aws_rate {
            registry::set_pacing(pacing);
        }
        infraflow_workflows::quota::configure(!cli.skip_quota_check, cli.quota_recheck);
        infraflow_workflows::hold::wait_limit::configure(cli.wait_limit);
        if let Some(settle) = cli.consistency_settle {
            infraflow_workflows::set_consistency_settle(settle);
        }
        let locking = lock::configure(&cli.lock, &db)?;
        // Sends what is queued when the command ends (dropped last).
        let _tracing = otlp::install_from_env()?;
        match cli.command {
            Command::Status(args) => status::status(&db, &args),
            Command::History { id, json } => status::history(&db, &id, json),
            Command::Wait { id, timeout, json } => status::wait(&db, &id, timeout, json),
            Command::Prune { before, json } => status::prune(&db, before, json),
            Command::Policy { workflows, infra_id, trust_for: None, .. } => {
                policy::policy(&workflows, infra_id.as_deref())
            }
            Command::Policy { workflows, infra_id, trust_for: Some(principal), external_id } => {
                policy::trust(&principal, external_id.as_deref(), !workflows.is_empty() || infra_id.is_some())
            }
            Command::Graph { target, format } => graph::graph(&db, &target, format),
            command => runtime()?.block_on(async {
                // `run` and `submit` prove the store beside their reads, through the workflow's
                // role (`execute::check_aws_before_journal`); the daemon once its metrics count
                // calls.
                // A dry-run sweep only reads: the proof's conditional write is not one (G13).
                let reads_only = matches!(command, Command::Sweep { dry_run: true, .. });
                if locking
                    && command.runs_workflows()
                    && !reads_only
                    && !matches!(command, Command::Run(_) | Command::Submit(_) | Command::Daemon { .. })
                {
                    lock::self_test().await?;
                }
                match command {
                    Command::Daemon {
                        workers,
                        listen,
                        allow_remote_actions,
                        page_hosts,
                        sweep_every,
                        sweep_regions,
                        check_every,
                        allow_roles,
                        trace_link,
                        api,
                    } => {
                        let sweep = execute::SweepSchedule::new(sweep_every, sweep_regions)?;
                        let schedules = execute::Schedules::new(sweep, check_every)?;
                        let api = api::ApiConfig::from_args(api);
                        let page = execute::PageConfig { listen, allow_remote_actions, page_hosts, trace_link };
                        execute::daemon(&db, workers, page, api, schedules, allow_roles).await
                    }
                    Command::Check { infra_id, region, json } => check::check(&db, &infra_id, &region, json).await,
                    Command::Submit(args) => execute::submit(&db, &args).await,
                    Command::Sweep { regions, dry_run, json } => sweep::sweep(&db, &regions, dry_run, json).await,
                    Command::Run(args) => execute::run(&db, &args).await,
                    Command::Cancel { id, detach } => execute::cancel(&db, &id, detach).await,
                    Command::Retry { id, detach } => execute::retry(&db, &id, detach).await,
                    Command::Bench { dir, steps, rounds, json } => match (&db, dir) {
                        (Location::Postgres(target), _) => bench::bench_postgres(target, steps, rounds, json).await,
                        (_, Some(dir)) => bench::bench(&dir, steps, rounds, json).await,
                        (Location::Sqlite(path), None) => {
                            paths::prepare_dir(&db)?;
                            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                            bench::bench(dir, steps, rounds, json).await
                        }
                    },
                    Command::Status(_)
                    | Command::History { .. }
                    | Command::Wait { .. }
                    | Command::Prune { .. }
                    | Command::Policy { .. }
                    | Command::Graph { .. } => {
                        unreachable!("handled above")
                    }
                }
            }),
        }
    })())
}

/// `workflow-status`.
pub fn main_workflow_status() -> ExitCode {
    let cli = StatusCli::parse();
    init_logging("warn", LogFormat::Text);
    finish((|| {
        let db = paths::journal_location(cli.db)?;
        status::status(&db, &cli.args)
    })())
}
