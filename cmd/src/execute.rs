//! `submit`, `run`, `cancel`, `retry` and `daemon`: the commands that write to the journal.

use std::sync::Arc;

use infraflow_activities::RoleAllowList;
use infraflow_engine::{Engine, Registry, Signals, Submission, SystemClock};
use infraflow_journal::{Location, RequestOutcome, WorkflowState};

use crate::cli::SubmitArgs;
use crate::failure::{CmdResult, Failure, INTERRUPTED, OK, WORKFLOW_FAILED};
use crate::input::read_input;
use crate::progress::{stderr_printer, tracing_observer};
use crate::registry::{full_registry, open_engine};
use crate::signals::forward_interrupts;

/// Validates everything before the journal is even opened: bad input changes nothing.
fn validated_submission(args: &SubmitArgs, registry: &Registry) -> Result<Submission, Failure> {
    let def = registry.workflow(&args.workflow).ok_or_else(|| {
        Failure::usage(format!(
            "unknown workflow {:?}; known workflows: {}",
            args.workflow,
            registry.workflow_names().join(", ")
        ))
    })?;
    let input = read_input(&args.input)?;
    let id = match &args.id {
        Some(id) => id.clone(),
        None => infraflow_engine::new_id(def.name(), SystemClock.now()),
    };
    infraflow_engine::check_id(&id).map_err(Failure::usage)?;
    def.validate(&id, &input).map_err(|e| Failure::usage(e.to_string()))?;
    Ok(Submission {
        workflow: args.workflow.clone(),
        input,
        id: Some(id),
        no_rollback: args.no_rollback,
        submitter: None,
        traceparent: caller_traceparent()?,
    })
}

pub async fn submit(db: &Location, args: &SubmitArgs) -> CmdResult {
    if args.dry_run {
        return Err(Failure::usage("--dry-run is for `infraflow run teardown`: a submitted workflow acts"));
    }
    if args.output_file.is_some() {
        return Err(Failure::usage(
            "--output-file is for `infraflow run`, which waits for the output; after `submit`, `infraflow status ID --json` has it",
        ));
    }
    let registry = full_registry();
    let submission = validated_submission(args, &registry)?;
    check_aws_before_journal(db, &submission).await?;
    let engine = open_engine(db, registry, tracing_observer())?;
    let submitted = engine.submit(submission).await?;
    println!("{}", submitted.id);
    Ok(OK)
}

pub async fn run(db: &Location, args: &SubmitArgs) -> CmdResult {
    if args.dry_run {
        return dry_run(args).await;
    }
    let registry = full_registry();
    let submission = validated_submission(args, &registry)?;
    check_aws_before_journal(db, &submission).await?;
    if let Some(file) = &args.output_file {
        check_output_file(file)?;
    }
    let engine = open_engine(db, registry, stderr_printer())?;
    let lease = lease_said(&args.workflow, &submission.input);
    let submitted = engine.submit(submission).await?;
    eprintln!(
        "infraflow: {} workflow {} ({}){lease}; Ctrl-C stops it safely, the same command resumes it",
        args.workflow,
        submitted.id,
        if submitted.created { "new" } else { "resuming" },
    );
    see_through(&engine, &submitted.id, WorkflowState::Completed, args.output_file.as_deref()).await
}

/// Where the lease of the cluster a workflow acts on is kept, said by every `run`, `retry` and
/// `cancel` (and the daemon and the sweep at start): two journals that name different buckets
/// or prefixes (or one none) do not keep each other out, and nothing else can tell them
/// (SAFETY-A7937A6 G10). Empty for a workflow of no cluster (`canary`).
fn lease_said(workflow: &str, input: &serde_json::Value) -> String {
    if infraflow_workflows::cluster::of(workflow, input).is_none() {
        return String::new();
    }
    format!("; {}", crate::lock::leases_said())
}

/// The workflow name and input of `id`, for the lines `retry` and `cancel` print.
fn lease_said_of(engine: &Engine, id: &str) -> String {
    match engine.journal().load(id).ok().flatten() {
        Some(v) => lease_said(&v.workflow, &v.input),
        None => String::new(),
    }
}

/// What is read from AWS before a workflow is journaled, so that an input AWS refuses is bad
/// input — exit 2, nothing journaled: a teardown's protection, a customer's network's rules, a
/// provision the account's quotas cannot hold. Not read again for a workflow this journal
/// already holds (`run --id` resuming it): its own steps read the same again.
/// The cluster lease store's proof (`lock::start_proof`), started beside these reads, is awaited
/// last.
async fn check_aws_before_journal(db: &Location, submission: &Submission) -> Result<(), Failure> {
    crate::lock::start_proof(infraflow_workflows::role_of(&submission.input).as_ref());
    crate::admit::refuse_before_journal(db, submission).await?;
    crate::lock::proved().await
}

/// Before anything runs: a file the output can be written to (its folder exists, it is not a
/// folder), so a finished provision never ends on "cannot write".
fn check_output_file(file: &std::path::Path) -> Result<(), Failure> {
    let parent = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !parent.is_dir() {
        return Err(Failure::usage(format!("--output-file {}: no folder {}", file.display(), parent.display())));
    }
    if file.is_dir() {
        return Err(Failure::usage(format!("--output-file {}: is a folder; name a file", file.display())));
    }
    Ok(())
}

pub async fn cancel(db: &Location, id: &str, detach: bool) -> CmdResult {
    let engine = open_engine(db, full_registry(), stderr_printer())?;
    match engine.journal().request_cancel(id, SystemClock.now()).await? {
        RequestOutcome::Done(_) => eprintln!("infraflow: cancel of {id} requested{}", lease_said_of(&engine, id)),
        RequestOutcome::AlreadyRequested(_) => {
            eprintln!("infraflow: cancel of {id} was already requested{}", lease_said_of(&engine, id))
        }
        RequestOutcome::NotApplicable(state) => {
            return Err(Failure::usage(format!(
                "workflow {id} is {state}; nothing to cancel (use `infraflow run teardown` to remove what it made)"
            )));
        }
        RequestOutcome::Superseded { .. } => unreachable!("cancel is never refused as superseded"),
    }
    if detach {
        return Ok(OK);
    }
    see_through(&engine, id, WorkflowState::Compensated, None).await
}

pub async fn retry(db: &Location, id: &str, detach: bool) -> CmdResult {
    let engine = open_engine(db, full_registry(), stderr_printer())?;
    match engine.journal().request_resume(id, SystemClock.now()).await? {
        RequestOutcome::Done(state) => eprintln!("infraflow: {id} resumed ({state}){}", lease_said_of(&engine, id)),
        RequestOutcome::AlreadyRequested(state) => {
            eprintln!("infraflow: {id} is {state}; continuing it{}", lease_said_of(&engine, id))
        }
        RequestOutcome::NotApplicable(state) => {
            return Err(Failure::usage(format!(
                "workflow {id} is {state}; only paused or failed workflows can be retried"
            )));
        }
        RequestOutcome::Superseded { by } => {
            return Err(Failure::usage(format!(
                "workflow {id} will not resume its compensation: {by}, a later workflow of its cluster, has run since and may use what {id} left; remove the cluster with `infraflow run teardown` instead"
            )));
        }
    }
    if detach {
        return Ok(OK);
    }
    see_through(&engine, id, WorkflowState::Completed, None).await
}

/// `run teardown --dry-run`: the plan, read from AWS; no journal is opened and nothing changes.
async fn dry_run(args: &SubmitArgs) -> CmdResult {
    if args.workflow != "teardown" {
        return Err(Failure::usage(format!(
            "--dry-run is for teardown only, not {:?}: other workflows look up before they create, run them",
            args.workflow
        )));
    }
    let input = read_input(&args.input)?;
    let plan =
        infraflow_workflows::teardown::plan::plan(&crate::registry::pool(), &input).await.map_err(|e| match e {
            infraflow_workflows::teardown::plan::PlanError::Input(e) => Failure::usage(e.to_string()),
            e => Failure::other(e.to_string()),
        })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan).unwrap_or_default());
    } else {
        print!("{}", plan.render());
    }
    Ok(OK)
}

/// Drives a workflow here until it rests, then reports: output JSON on stdout when completed.
async fn see_through(
    engine: &Engine,
    id: &str,
    success: WorkflowState,
    output_file: Option<&std::path::Path>,
) -> CmdResult {
    let signals = Arc::new(Signals::default());
    forward_interrupts(signals.clone(), "the workflow");
    let out = engine.drive(id, signals.clone()).await?;
    if let Some(output) = &out.output {
        let text = serde_json::to_string_pretty(output).unwrap_or_default();
        println!("{text}");
        if let Some(file) = output_file.filter(|_| out.state == success) {
            std::fs::write(file, format!("{text}\n")).map_err(|e| {
                Failure::other(format!(
                    "{id} completed, but its output could not be written to {}: {e}; `infraflow status {id} --json` has it",
                    file.display()
                ))
            })?;
        }
    }
    if out.state == success {
        return Ok(OK);
    }
    if out.state.is_runnable() {
        eprintln!("infraflow: {id} stopped while {}; resume it with `infraflow retry {id}` or a daemon", out.state);
        return Ok(INTERRUPTED);
    }
    let error = out.error.unwrap_or_default();
    eprintln!("infraflow: {id} is {}: {error}", out.state);
    Ok(WORKFLOW_FAILED)
}

/// The daemon's sweep: how often, which regions.
pub struct SweepSchedule {
    every: std::time::Duration,
    regions: Vec<String>,
}

impl SweepSchedule {
    pub fn new(every: Option<std::time::Duration>, regions: Vec<String>) -> Result<Option<SweepSchedule>, Failure> {
        let Some(every) = every else { return Ok(None) };
        if every < std::time::Duration::from_secs(1) {
            return Err(Failure::usage("--sweep-every must be at least 1s"));
        }
        for r in &regions {
            infraflow_workflows::check_region(r).map_err(|_| {
                Failure::usage(format!("--sweep-region {r:?} is not an AWS region name (like us-east-1)"))
            })?;
        }
        Ok(Some(SweepSchedule { every, regions }))
    }
}

/// What the daemon does on a schedule besides running workflows: the sweep, the drift check.
pub struct Schedules {
    sweep: Option<SweepSchedule>,
    check_every: Option<std::time::Duration>,
}

impl Schedules {
    pub fn new(sweep: Option<SweepSchedule>, check_every: Option<std::time::Duration>) -> Result<Schedules, Failure> {
        if check_every.is_some_and(|e| e < std::time::Duration::from_secs(1)) {
            return Err(Failure::usage("--check-every must be at least 1s"));
        }
        Ok(Schedules { sweep, check_every })
    }
}

/// Which roles the daemon acts through: `--allow-role`'s patterns, or the roles of its own
/// account (read once, here: a daemon that cannot read it acts through no role), said at startup.
pub async fn allow_roles(patterns: Vec<String>, tenants: crate::api::TenantRoles) {
    let mut list = if patterns.is_empty() {
        let region = std::env::var("AWS_REGION").ok().filter(|r| !r.is_empty()).unwrap_or_else(|| "us-east-1".into());
        match crate::registry::pool().region(&region).await.environment().await {
            Ok(env) => RoleAllowList {
                external_ids: Vec::new(),
                patterns: vec![format!("arn:aws:iam::{}:role/*", env.account)],
                said: format!("no --allow-role was given: roles of this daemon's own account {} only", env.account),
            },
            Err(e) => RoleAllowList {
                external_ids: Vec::new(),
                patterns: Vec::new(),
                said: format!("no --allow-role was given, and this daemon's own account could not be read ({e})"),
            },
        }
    } else {
        RoleAllowList { said: format!("--allow-role {}", patterns.join(", ")), patterns, external_ids: Vec::new() }
    };
    // The tenants' roles are theirs to name through the API (their fences hold them to these),
    // with the ExternalId the tenants file gives.
    if !tenants.patterns.is_empty() {
        list.said = format!("{}, and the tenants' roles", list.said);
        list.patterns.extend(tenants.patterns);
    }
    list.external_ids = tenants.external_ids;
    tracing::info!(allowed = ?list.patterns, "roles a workflow may act through ({})", list.said);
    crate::registry::set_allowed_roles(list);
}

/// `daemon --listen`'s status page, metrics and health.
pub struct PageConfig {
    pub listen: Option<std::net::SocketAddr>,
    pub allow_remote_actions: bool,
    pub page_hosts: Vec<String>,
    /// `--trace-link`: a trace viewer's URL with `{traceId}`.
    pub trace_link: Option<String>,
}

pub async fn daemon(
    db: &Location,
    workers: u16,
    page: PageConfig,
    api: Option<crate::api::ApiConfig>,
    schedules: Schedules,
    allowed_roles: Vec<String>,
) -> CmdResult {
    let PageConfig { listen, allow_remote_actions, page_hosts, trace_link } = page;
    let api = match api {
        Some(config) => Some(crate::api::prepare(config).await?),
        None => None,
    };
    let shutdown = Arc::new(Signals::default());
    forward_interrupts(shutdown.clone(), "the daemon");
    let metrics = crate::metrics::Metrics::new();
    if listen.is_some() {
        metrics.count_calls();
    }
    crate::lock::self_test().await?;
    // Before the registry's pool is made: its clients refuse what the list does not allow.
    allow_roles(allowed_roles, api.as_ref().map(|a| a.tenant_roles()).unwrap_or_default()).await;
    let last_sweep = crate::sweep::SharedSweep::default();
    let last_checks = crate::checked::SharedChecks::default();
    let engine = Arc::new(open_engine(db, full_registry(), metrics.observer(tracing_observer()))?);
    engine.journal().verify()?;
    tracing::info!(journal = %db, "journal opened and verified");
    tracing::info!("{}", crate::lock::leases_said());
    if let Some(addr) = listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Failure::usage(format!("cannot listen on {addr} for metrics: {e}; pick a free port")))?;
        metrics.watch(engine.journal());
        crate::rate_waits::install();
        let actions = addr.ip().is_loopback() || allow_remote_actions;
        tracing::info!(address = %addr, actions, "serving the status page at /, /metrics, /healthz and /readyz");
        let bound = listener.local_addr().unwrap_or(addr);
        let hosts = crate::page::allowed_hosts(bound, &page_hosts);
        let page = Arc::new(
            crate::page::Page::new(engine.journal().clone(), actions, crate::page::Guard::for_hosts(hosts))
                .with_sweep(last_sweep.clone())
                .with_checks(last_checks.clone())
                .with_trace_link(trace_link.clone()),
        );
        tokio::spawn(crate::serve::serve(listener, metrics.clone(), engine.journal().clone(), page));
    }
    if let Some(api) = api {
        api.start(engine.clone(), trace_link).await?;
    }
    if let Some(every) = schedules.check_every {
        tracing::info!(every = ?every, "checking every cluster of the journal for drift");
        tokio::spawn(crate::check::every(
            engine.journal().clone(),
            every,
            last_checks,
            Some(metrics.clone()),
            shutdown.clone(),
        ));
    }
    if let Some(s) = schedules.sweep {
        tracing::info!(every = ?s.every, regions = ?s.regions, "sweeping the account for expired clusters");
        tokio::spawn(crate::sweep::every(
            engine.clone(),
            s.regions,
            s.every,
            last_sweep,
            Some(metrics.clone()),
            shutdown.clone(),
        ));
    }
    engine.daemon(usize::from(workers), shutdown).await?;
    Ok(OK)
}

/// `TRACEPARENT`, the caller's W3C trace context the submission continues; one that is set but
/// is not a traceparent is refused, naming it (an explicit input, unlike a forwarded header).
pub(crate) fn caller_traceparent() -> Result<Option<String>, Failure> {
    match std::env::var("TRACEPARENT") {
        Ok(v) if !v.trim().is_empty() => {
            infraflow_trace::TraceParent::parse(&v).map(|t| Some(t.to_string())).ok_or_else(|| {
                Failure::usage(format!("TRACEPARENT {v:?} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"))
            })
        }
        _ => Ok(None),
    }
}
