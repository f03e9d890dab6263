//! The command line, as clap parses it. The contract is DESIGN.md section 5.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "infraflow", version, about = "Durable, crash-safe provisioning of HyperShift AWS infrastructure")]
pub struct Cli {
    /// The journal: a SQLite file, or a postgres://USER@HOST:PORT/DATABASE URL shared by daemons
    /// on several hosts (password from the URL, PGPASSWORD or ~/.pgpass)
    /// [default: $XDG_STATE_HOME/infraflow/journal.sqlite3]
    #[arg(long, global = true, env = "INFRAFLOW_DB", value_name = "PATH|URL")]
    pub db: Option<String>,
    /// Log lines on stderr: `text` for people, `json` for log pipelines (one object a line, with
    /// the workflow id, step key and attempt as fields).
    #[arg(long, global = true, env = "INFRAFLOW_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The pace of AWS requests, shared by every workflow of this process: `off`, or
    /// `CLASS=BURST/PER_SECOND,...` over AWS's documented account defaults (ec2-mutating=50/5
    /// and ec2-describe=100/20 each API, run-instances=1000/2, route53=5/5, elb-describe=40/10,
    /// elb-mutating=20/10, classic-elb-describe=40/10, classic-elb-mutating=20/10 (`elb` sets
    /// all four), iam=10/10). Each class slows down on a throttle and creeps back.
    #[arg(long, global = true, env = "INFRAFLOW_AWS_RATE", value_name = "SPEC", value_parser = parse_aws_rate)]
    pub aws_rate: Option<infraflow_activities::pacing::PacingConfig>,
    /// How long a create interrupted mid-step (or failed after AWS may have acted) waits before
    /// its lookup, and an undo before its delete, for AWS to show what it made: `5s` by default,
    /// as EC2's eventual consistency asks. Shorten it only against an emulator that shows a new
    /// resource at once (`500ms`).
    #[arg(long, global = true, env = "INFRAFLOW_CONSISTENCY_SETTLE", value_name = "DURATION", value_parser = parse_settle)]
    pub consistency_settle: Option<std::time::Duration>,
    /// Neither check a provision (or create-cluster) against the account's quotas before
    /// journaling it, nor hold it in a daemon until it fits: for accounts whose quotas cannot be
    /// read. The variable takes `1`/`0` as well as `true`/`false`.
    #[arg(long, global = true, env = "INFRAFLOW_SKIP_QUOTA_CHECK", value_parser = clap::builder::BoolishValueParser::new())]
    pub skip_quota_check: bool,
    /// How often a provision waiting for quota (a daemon's admission, or a resumed `run`) reads
    /// the account again; sooner when a workflow of this process that it waits on ends.
    #[arg(long, global = true, env = "INFRAFLOW_QUOTA_RECHECK", value_name = "DURATION", default_value = "5s", value_parser = parse_settle)]
    pub quota_recheck: std::time::Duration,
    /// How long a workflow waits for what another holds (its cluster's lease, the account's
    /// quota) before it pauses naming it; `infraflow retry` waits again.
    #[arg(long, global = true, env = "INFRAFLOW_WAIT_LIMIT", value_name = "DURATION", default_value = "1h", value_parser = parse_settle)]
    pub wait_limit: std::time::Duration,
    #[command(flatten)]
    pub lock: LockArgs,
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The daemon's API for tenants (`daemon --api-listen`).
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// Serve the API for tenants (`/v1`, its OpenAPI at /v1/openapi.json) on this address
    /// [default: off]. Off loopback it needs --tls-cert and --tls-key.
    #[arg(long, value_name = "ADDR", requires = "tenants")]
    pub api_listen: Option<std::net::SocketAddr>,
    /// The tenants file: who may call the API, with which token or OIDC subject, and what each
    /// may do and name. Read again on SIGHUP.
    #[arg(long, value_name = "FILE", requires = "api_listen")]
    pub tenants: Option<std::path::PathBuf>,
    /// The API's certificate chain (PEM).
    #[arg(long, value_name = "FILE", requires = "api_listen")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The API certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "api_listen")]
    pub tls_key: Option<std::path::PathBuf>,
    /// The OIDC issuer (`iss`) whose tokens the API accepts.
    #[arg(long, value_name = "URL", requires = "api_listen")]
    pub oidc_issuer: Option<String>,
    /// The audience (`aud`) those tokens must name.
    #[arg(long, value_name = "NAME", requires = "api_listen")]
    pub oidc_audience: Option<String>,
    /// The issuer's signing keys: a JWKS file (read again on SIGHUP, and on a key id it lacks)
    /// or the issuer's `https://` jwks_uri (fetched again every 15 minutes and on a key id it
    /// lacks, trusting the system's roots or SSL_CERT_FILE).
    #[arg(long, value_name = "FILE|URL", requires = "api_listen")]
    pub oidc_jwks: Option<String>,
}

/// `--server`: the CLI as a client of a daemon's API instead of a journal.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// A daemon's API (`https://HOST:PORT`): submit, status, wait, history, cancel, retry and
    /// check go there, as the tenant the token names, instead of to a journal.
    #[arg(long, global = true, env = "INFRAFLOW_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// A file holding the API token [default: INFRAFLOW_TOKEN].
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// The CA the API's certificate is checked against (PEM) [default: the system's].
    #[arg(long, global = true, value_name = "FILE")]
    pub server_ca: Option<std::path::PathBuf>,
}

/// One writer per cluster across journals: the cluster lease in S3.
#[derive(Debug, clap::Args)]
pub struct LockArgs {
    /// Hold each workflow's cluster with a lease in this S3 bucket, so workflows of one cluster
    /// from other journals, hosts and tools wait for each other. Without it each journal
    /// serializes only its own workflows.
    #[arg(long, global = true, env = "INFRAFLOW_LOCK_BUCKET", value_name = "BUCKET")]
    pub lock_bucket: Option<String>,
    /// The leases' key prefix in the bucket: `<prefix>/<account>/<region>/<infraID>`.
    #[arg(
        long,
        global = true,
        env = "INFRAFLOW_LOCK_PREFIX",
        value_name = "PREFIX",
        default_value = "infraflow/leases"
    )]
    pub lock_prefix: String,
    /// The bucket's region [default: AWS_REGION, else us-east-1].
    #[arg(long, global = true, env = "INFRAFLOW_LOCK_REGION", value_name = "REGION")]
    pub lock_region: Option<String>,
    /// How long a lease stands unrenewed before another journal may take it over (renewed
    /// every third of it; a holder that cannot renew stops before it runs out).
    #[arg(long, global = true, env = "INFRAFLOW_LOCK_TTL", value_name = "DURATION", default_value = "60s", value_parser = parse_settle)]
    pub lock_ttl: std::time::Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run workflows from the journal until SIGTERM/SIGINT; resumes unfinished ones at start.
    Daemon {
        /// Workflows run at once.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
        workers: u16,
        /// Serve the status page (/), GET /metrics (Prometheus), /healthz and /readyz on this
        /// address, e.g. 127.0.0.1:9464 [default: off].
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// Keep the page's cancel and retry buttons when --listen is not a loopback address
        /// (anyone who reaches the port can then use them).
        #[arg(long, requires = "listen")]
        allow_remote_actions: bool,
        /// A name the status page is reached under besides the --listen address (and, on
        /// loopback, localhost): a DNS name or a proxy's. Any other Host header is refused (421),
        /// which keeps a DNS-rebound web site from reading or driving the page. Repeatable.
        #[arg(long = "page-host", value_name = "NAME", requires = "listen")]
        page_hosts: Vec<String>,
        /// Run the account janitor (`infraflow sweep`) this often (`15m`, `1h`), submitting the
        /// teardown of every expired cluster of the --sweep-region regions [default: never].
        #[arg(long, value_name = "DURATION", value_parser = parse_age, requires = "sweep_regions")]
        sweep_every: Option<std::time::Duration>,
        /// A region the scheduled sweep covers. Repeatable.
        #[arg(long = "sweep-region", value_name = "REGION", requires = "sweep_every")]
        sweep_regions: Vec<String>,
        /// Check every cluster this journal provisioned this often (`30m`, `6h`), as `infraflow
        /// check` does, one at a time: `infraflow_cluster_drift{kind}` and the page show the
        /// result [default: never].
        #[arg(long, value_name = "DURATION", value_parser = parse_age)]
        check_every: Option<std::time::Duration>,
        /// A role ARN (`*` matches any run of characters) a workflow may name as its roleARN.
        /// Repeatable [default: the roles of the daemon's own account only].
        #[arg(long = "allow-role", value_name = "ARN-PATTERN")]
        allow_roles: Vec<String>,
        /// Link each workflow's trace id on the page to a trace viewer: a URL with `{traceId}`
        /// in it, e.g. `https://jaeger.example/trace/{traceId}` [default: the id, unlinked].
        #[arg(long, env = "INFRAFLOW_TRACE_LINK", value_name = "URL", value_parser = parse_trace_link)]
        trace_link: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// The account janitor: find every cluster of the regions by its ownership tag, class each
    /// as protected, active, expired or unexpired, and submit one teardown per expired cluster
    /// (a later sweep submits none while it runs). Exit 0; the teardowns' ids on stdout.
    Sweep {
        /// A region to sweep. Repeatable.
        #[arg(long = "region", value_name = "REGION", required = true)]
        regions: Vec<String>,
        /// Only read and print the classes; submit nothing, journal nothing.
        #[arg(long)]
        dry_run: bool,
        /// The clusters as JSON: infraID, region, class, reason, expirationDate, resources, teardown.
        #[arg(long)]
        json: bool,
    },
    /// Whether a cluster this journal provisioned is still as its provision made it: every
    /// difference (kind, id, expected, found, and the repair), what would hold its teardown up,
    /// and what leaks. Reads only. Exit 0 in sync, 1 drifted, held up or leaking, 2 no such
    /// cluster in the journal, 4 AWS could not be read.
    Check {
        /// The cluster's infraID.
        #[arg(long, value_name = "ID")]
        infra_id: String,
        /// The region it was provisioned in.
        #[arg(long, value_name = "REGION")]
        region: String,
        /// The report as JSON: drift, holdUps, leaks, inSync.
        #[arg(long)]
        json: bool,
    },
    /// Validate and journal a workflow for a daemon to run; prints its id.
    Submit(SubmitArgs),
    /// Submit and execute a workflow in this process, with progress on stderr and the output
    /// JSON on stdout. Running it again with the same --id resumes it.
    Run(SubmitArgs),
    /// One line per workflow, or one workflow's steps, attempts, errors and output.
    Status(StatusArgs),
    /// Wait until a workflow completes, ends otherwise or pauses: exit 0 completed, 1 failed or
    /// rolled back, 3 paused (an operator's turn: see `status ID`), 124 at --timeout.
    Wait {
        id: String,
        /// Give up after this long (`90s`, `30m`, `2h`) [default: wait as long as it takes].
        #[arg(long, value_name = "DURATION", value_parser = parse_age)]
        timeout: Option<std::time::Duration>,
        /// Print the workflow's final status as JSON (what `status ID --json` prints).
        #[arg(long)]
        json: bool,
    },
    /// The journal events of one workflow.
    History {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Ask a workflow to stop at its next step boundary and compensate; then see it through.
    Cancel {
        id: String,
        /// Only record the request; a daemon carries it out.
        #[arg(long)]
        detach: bool,
    },
    /// Resume a paused or failed workflow from the step that failed; then see it through.
    Retry {
        id: String,
        /// Only record the request; a daemon carries it out.
        #[arg(long)]
        detach: bool,
    },
    /// Move workflows that finished for good (completed, compensated) before a horizon to the
    /// archive journal beside this one (`<name>.archive.sqlite3`, readable with `status --db`).
    Prune {
        /// How long ago they finished: a number and a unit, s, m, h or d (`30d`, `12h`, `0s`).
        #[arg(long, value_name = "DURATION", value_parser = parse_age)]
        before: std::time::Duration,
        #[arg(long)]
        json: bool,
    },
    /// Draw one journaled run's steps (or a workflow's latest run) as a graph: state, attempts
    /// and duration of each step.
    Graph {
        /// A workflow id, or a workflow name for its latest run.
        target: String,
        #[arg(long, value_enum, default_value_t = crate::graph::GraphFormat::Mermaid)]
        format: crate::graph::GraphFormat,
    },
    /// Print the least-privilege IAM policy (JSON) that the named workflows need, compensation
    /// included [default: every workflow].
    Policy {
        /// provision-infra, create-privatelink, scale-nodepool, teardown, create-cluster; `check`
        /// for what `infraflow check` reads.
        workflows: Vec<String>,
        /// Condition every action AWS allows on this cluster's ownership tag
        /// (`kubernetes.io/cluster/ID=owned`): the role cannot touch another cluster.
        #[arg(long, value_name = "ID")]
        infra_id: Option<String>,
        /// Print instead the trust policy a role needs so that PRINCIPAL (the role or user the
        /// daemon runs as, or its account id) may assume it.
        #[arg(long, value_name = "PRINCIPAL")]
        trust_for: Option<String>,
        /// With --trust-for: the external id the role requires (sts:ExternalId).
        #[arg(long, value_name = "ID", requires = "trust_for")]
        external_id: Option<String>,
    },
    /// Measure the engine on this disk: durable no-op steps per second against SQLite's ceiling.
    Bench {
        /// Where the scratch journals go [default: beside the journal].
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Steps of the sequential workflow.
        #[arg(long, default_value_t = 1000)]
        steps: u32,
        /// Rounds; the medians are reported.
        #[arg(long, default_value_t = 5)]
        rounds: u32,
        #[arg(long)]
        json: bool,
    },
}

impl Command {
    /// The subcommand's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Daemon { .. } => "daemon",
            Command::Sweep { .. } => "sweep",
            Command::Check { .. } => "check",
            Command::Submit(_) => "submit",
            Command::Run(_) => "run",
            Command::Status(_) => "status",
            Command::Wait { .. } => "wait",
            Command::History { .. } => "history",
            Command::Cancel { .. } => "cancel",
            Command::Retry { .. } => "retry",
            Command::Prune { .. } => "prune",
            Command::Policy { .. } => "policy",
            Command::Graph { .. } => "graph",
            Command::Bench { .. } => "bench",
        }
    }

    /// Whether the command may run a workflow (and so take cluster leases).
    pub fn runs_workflows(&self) -> bool {
        matches!(
            self,
            Command::Daemon { .. }
                | Command::Run(_)
                | Command::Retry { .. }
                | Command::Cancel { .. }
                | Command::Sweep { .. }
        )
    }
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The workflow: provision-infra, create-privatelink, scale-nodepool, teardown, create-cluster, canary.
    pub workflow: String,
    /// The input JSON: a file, or - for standard input.
    #[arg(long, value_name = "FILE|-")]
    pub input: String,
    /// The workflow id [default: generated]. The same id and input never run twice.
    #[arg(long)]
    pub id: Option<String>,
    /// On a terminal failure keep what was created instead of compensating.
    #[arg(long)]
    pub no_rollback: bool,

    /// `run teardown` only: print what it would delete and leave, and why; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: the plan as JSON.
    #[arg(long, requires = "dry_run")]
    pub json: bool,
    /// `run` only: also write the output JSON to FILE once the workflow completes, as
    /// `hypershift create infra aws --output-file` does (what `--infra-json` reads).
    #[arg(long, value_name = "FILE", conflicts_with = "dry_run")]
    pub output_file: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    pub id: Option<String>,
    #[arg(long)]
    pub json: bool,
    /// Only workflows in these states (comma-separated: pending, running, paused, completed,
    /// failed, cancelling, compensating, compensated, compensation_failed).
    #[arg(long, value_delimiter = ',', value_parser = parse_state, conflicts_with = "id")]
    pub state: Vec<infraflow_journal::WorkflowState>,
    /// Only workflows of this kind (`provision-infra`, `teardown`, ...).
    #[arg(long, conflicts_with = "id")]
    pub workflow: Option<String>,
    /// Only workflows of this cluster (its infraID).
    #[arg(long, value_name = "INFRA_ID", conflicts_with = "id")]
    pub cluster: Option<String>,
    /// Only workflows that changed within this age (`30m`, `12h`, `7d`).
    #[arg(long, value_name = "DURATION", value_parser = parse_age, conflicts_with = "id")]
    pub since: Option<std::time::Duration>,
    /// At most this many workflows (after `--offset`), in the listing's order: oldest first.
    #[arg(long, conflicts_with = "id")]
    pub limit: Option<usize>,
    /// Skip this many workflows of the listing first (paging with `--limit`).
    #[arg(long, default_value_t = 0, conflicts_with = "id")]
    pub offset: usize,
}

fn parse_aws_rate(s: &str) -> Result<infraflow_activities::pacing::PacingConfig, String> {
    infraflow_activities::pacing::PacingConfig::parse(s)
}

/// `5s`, `500ms`: the consistency settle.
fn parse_settle(s: &str) -> Result<std::time::Duration, String> {
    match s.strip_suffix("ms").map(str::parse::<u64>) {
        Some(Ok(ms)) => Ok(std::time::Duration::from_millis(ms)),
        Some(Err(_)) => Err(format!("{s:?} is not a duration: write e.g. 500ms or 5s")),
        None => parse_age(s).map_err(|_| format!("{s:?} is not a duration: write e.g. 500ms or 5s")),
    }
}

pub(crate) fn parse_state(s: &str) -> Result<infraflow_journal::WorkflowState, String> {
    infraflow_journal::WorkflowState::parse(s).ok_or_else(|| {
        let all: Vec<&str> = infraflow_journal::WorkflowState::ALL.iter().map(|st| st.as_str()).collect();
        format!("{s:?} is not a state: one of {}", all.join(", "))
    })
}

/// `workflow-status`: the same view as `infraflow status`.
#[derive(Debug, Parser)]
#[command(name = "workflow-status", version, about = "Where each infraflow workflow stands")]
pub struct StatusCli {
    #[arg(long, env = "INFRAFLOW_DB", value_name = "PATH|URL")]
    pub db: Option<String>,
    #[command(flatten)]
    pub args: StatusArgs,
}

/// `--trace-link`: an http(s) URL with `{traceId}` where the id goes.
fn parse_trace_link(s: &str) -> Result<String, String> {
    let lower = s.to_ascii_lowercase();
    if !(lower.starts_with("https://") || lower.starts_with("http://")) || !s.contains("{traceId}") {
        return Err("give an http(s) URL with {traceId} in it, e.g. https://jaeger.example/trace/{traceId}".into());
    }
    if s.contains(['"', '<', '>', ' ', '\'']) {
        return Err("a URL has no quotes, angle brackets or spaces".into());
    }
    Ok(s.to_string())
}

/// `30d`, `12h`, `90m`, `45s`: an age for `prune --before`, `status --since`, `wait --timeout`.
pub(crate) fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("{s:?} is not a duration: write a number and a unit, e.g. 30d"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(format!("{s:?} has no known unit: use s, m, h or d (e.g. 30d)")),
    };
    Ok(std::time::Duration::from_secs(n.saturating_mul(secs)))
}
