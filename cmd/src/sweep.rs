//! `infraflow sweep` and the daemon's `--sweep-every`: the account janitor. Reads every region's
//! clusters from AWS (`census`), classifies them (`janitor`), and submits one teardown per
//! expired cluster, under an id derived from the cluster and its expiry so that no sweep —
//! killed anywhere, run twice, or beside another — submits a second.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use infraflow_activities::{AwsError, AwsPool, census};
use infraflow_engine::{Engine, Submission};
use infraflow_journal::{Journal, Location};
use infraflow_workflows::hold::lease;
use infraflow_workflows::janitor::{self, Class, Swept};

use crate::failure::{CmdResult, Failure, OK};

/// The last sweep the daemon made, for the page and metrics.
#[derive(Clone, Debug, Default)]
pub struct LastSweep {
    pub at_ms: i64,
    pub clusters: Vec<Swept>,
    pub error: Option<String>,
}

pub type SharedSweep = Arc<Mutex<Option<LastSweep>>>;

/// Reads and classifies the clusters of `regions`; `journal` says which are busy (none without).
pub async fn classify(pool: &AwsPool, journal: Option<&Journal>, regions: &[String]) -> Result<Vec<Swept>, Failure> {
    // By infraID, whatever the account in the cluster key (`<infraID>@<account>` under a role):
    // a workflow of the cluster under a role in this very account is as busy as one without.
    let busy: BTreeSet<String> = match journal {
        Some(j) => j
            .list()?
            .into_iter()
            .filter(|r| !r.state.is_finished())
            .map(|r| r.cluster.split('@').next().unwrap_or_default().to_string())
            .collect(),
        None => BTreeSet::new(),
    };
    let now = infraflow_engine::SystemClock.now() / 1000;
    let mut out = Vec::new();
    for region in regions {
        let cannot = |e: AwsError| Failure::other(format!("cannot read the clusters of {region}: {e}"));
        let found = read_census(pool, region).await.map_err(cannot)?;
        let mut swept = janitor::classify(region, &found, &busy, now);
        // A cluster whose lease another journal (or this one) holds is as busy as one with an
        // unfinished workflow here.
        for s in swept.iter_mut().filter(|s| matches!(s.class, Class::Expired | Class::Unexpired)) {
            // A lease that cannot be read may be held: the cluster is left this round, the
            // sweep goes on with the others (G13).
            match lease::live_holder(pool, region, &s.infra_id).await {
                Ok(Some(holder)) => {
                    s.class = Class::Active;
                    s.reason = format!("its cluster lease is held by {holder}");
                    s.evidence = None;
                }
                Ok(None) => {}
                Err(e) => {
                    s.class = Class::Active;
                    s.reason = format!("its cluster lease could not be read ({e}): left until a sweep can read it");
                    s.evidence = None;
                }
            }
        }
        if swept.iter().any(|s| s.evidence.is_some()) {
            // The account the census was read in travels with the evidence: a teardown that
            // runs elsewhere deletes nothing.
            let account = pool.region(region).await.environment().await.map_err(cannot)?.account;
            for e in swept.iter_mut().filter_map(|s| s.evidence.as_mut()) {
                e.account = Some(account.clone());
            }
        }
        out.extend(swept);
    }
    Ok(out)
}

/// The census, read again on a retryable error (throttling above all) as a step would be.
async fn read_census(pool: &AwsPool, region: &str) -> Result<Vec<census::Tagged>, AwsError> {
    let aws = pool.region(region).await;
    infraflow_workflows::read_retrying(|e: &AwsError| e.retryable, || census::owned_resources(&aws)).await
}

/// Submits the teardown of every expired cluster of `swept` (and notes it there); the ids of
/// the teardowns journaled now (an expiry whose teardown was journaled before gets none).
pub async fn submit_teardowns(engine: &Engine, swept: &mut [Swept]) -> Result<Vec<String>, Failure> {
    let mut submitted = Vec::new();
    for s in swept.iter_mut().filter(|s| s.class == Class::Expired) {
        let id = janitor::teardown_id(s);
        let submission = Submission {
            workflow: "teardown".into(),
            input: janitor::teardown_input(s),
            id: Some(id.clone()),
            no_rollback: false,
            submitter: None,
            traceparent: None,
        };
        // One cluster's refusal (an id pruned and refused, a protection met at submit) is said
        // on its row; the other expired clusters are still submitted.
        let done = match engine.submit(submission).await {
            Ok(done) => done,
            Err(e) => {
                s.reason = format!("{}; its teardown {id} was refused: {e}", s.reason);
                continue;
            }
        };
        if done.created {
            submitted.push(id.clone());
        } else if let Some(row) = engine.journal().row(&id)? {
            // Only a finished teardown can be met here (an unfinished one makes the cluster
            // active): say so rather than submit again under a new id, round after round.
            s.reason = format!("{}; its teardown {id} is {}: see `infraflow status {id}`", s.reason, row.state);
        }
        s.teardown = Some(id);
    }
    Ok(submitted)
}

/// `infraflow sweep`.
pub async fn sweep(db: &Location, regions: &[String], dry_run: bool, json: bool) -> CmdResult {
    let regions = checked_regions(regions)?;
    let pool = crate::registry::pool();
    // Which leases the sweep reads to class a cluster active: another journal's under another
    // bucket or prefix are not seen (SAFETY-A7937A6 G10).
    eprintln!("infraflow: {}", crate::lock::leases_said());
    let (mut swept, submitted) = if dry_run {
        // Reads only: a journal that does not exist yet has no busy cluster, and is not made.
        let journal = match db {
            Location::Sqlite(path) if !path.exists() => None,
            _ => Some(Journal::open_read_only_at(db)?),
        };
        (classify(&pool, journal.as_ref(), &regions).await?, Vec::new())
    } else {
        let engine = crate::registry::open_engine_quiet(db)?;
        let mut swept = classify(&pool, Some(engine.journal()), &regions).await?;
        let submitted = submit_teardowns(&engine, &mut swept).await?;
        (swept, submitted)
    };
    swept.sort_by(|a, b| (a.class, &a.infra_id).cmp(&(b.class, &b.infra_id)));
    if json {
        println!("{}", serde_json::to_string_pretty(&swept).unwrap_or_default());
    } else if dry_run {
        print!("{}", render(&swept));
    } else {
        eprint!("{}", render(&swept));
        for id in &submitted {
            println!("{id}");
        }
    }
    Ok(OK)
}

fn checked_regions(regions: &[String]) -> Result<Vec<String>, Failure> {
    if regions.is_empty() {
        return Err(Failure::usage("sweep needs --region REGION (repeatable): the regions whose clusters to sweep"));
    }
    for r in regions {
        infraflow_workflows::check_region(r)
            .map_err(|_| Failure::usage(format!("--region {r:?} is not an AWS region name (like us-east-1)")))?;
    }
    let mut seen = BTreeSet::new();
    Ok(regions.iter().filter(|r| seen.insert(r.as_str())).cloned().collect())
}

/// The sweep as a table, for people.
pub fn render(swept: &[Swept]) -> String {
    if swept.is_empty() {
        return "no cluster found (nothing carries a kubernetes.io/cluster/<infraID>=owned tag)\n".into();
    }
    let mut out = format!(
        "{:<28} {:<14} {:<10} {:<21} {:>9}  REASON\n",
        "INFRA_ID", "REGION", "CLASS", "EXPIRATION", "RESOURCES"
    );
    for s in swept {
        let count: usize = s.resources.values().sum();
        out.push_str(&format!(
            "{:<28} {:<14} {:<10} {:<21} {:>9}  {}{}\n",
            s.infra_id,
            s.region,
            s.class.as_str(),
            s.expiration_date.as_deref().unwrap_or("-"),
            count,
            s.reason,
            s.teardown.as_deref().map(|t| format!(" → teardown {t}")).unwrap_or_default(),
        ));
    }
    out
}

/// The daemon's sweep every `every`, until `stop`: submits as `sweep` does, keeps the last
/// result for the page and the metrics, and logs each result (an error waits for the next turn).
pub async fn every(
    engine: Arc<Engine>,
    regions: Vec<String>,
    every: std::time::Duration,
    last: SharedSweep,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    stop: Arc<infraflow_engine::Signals>,
) {
    let pool = crate::registry::pool();
    loop {
        let at_ms = infraflow_engine::SystemClock.now();
        let result = match classify(&pool, Some(engine.journal()), &regions).await {
            Ok(mut swept) => submit_teardowns(&engine, &mut swept).await.map(|ids| (swept, ids)),
            Err(e) => Err(e),
        };
        let record = match result {
            Ok((swept, ids)) => {
                for id in &ids {
                    tracing::info!(teardown = %id, "sweep submitted the teardown of an expired cluster");
                }
                if let Some(m) = &metrics {
                    m.record_sweep(&swept, ids.len());
                }
                tracing::info!(clusters = swept.len(), submitted = ids.len(), "sweep done");
                LastSweep { at_ms, clusters: swept, error: None }
            }
            Err(e) => {
                tracing::warn!(error = %e.message, "sweep failed; the next one is in {every:?}");
                LastSweep { at_ms, clusters: Vec::new(), error: Some(e.message) }
            }
        };
        *last.lock().unwrap() = Some(record);
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.stopped() => return,
        }
    }
}
