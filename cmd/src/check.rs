//! `infraflow check` and the daemon's `--check-every`: whether each cluster this journal
//! provisioned is still as its provision made it (`infraflow_workflows::check`), read only. The
//! journal says which clusters there are and what each should be: the newest completed
//! provision of each, unless a teardown of it completed since.

use std::collections::BTreeMap;
use std::sync::Arc;

use infraflow_journal::{Journal, Location, WorkflowState};
use infraflow_workflows::check::{self, CHECKED_WORKFLOWS, Provisioned};

use crate::checked::{Checked, SharedChecks};
use crate::failure::{CHECK_FAILED, CmdResult, DRIFTED, Failure, OK};

/// The clusters of the journal as their newest completed provision made them, by (infraID,
/// region); a cluster whose teardown completed after it is left out.
pub fn provisioned(journal: &Journal) -> Result<Vec<Provisioned>, Failure> {
    let mut rows: Vec<_> = journal.list()?.into_iter().filter(|r| r.state == WorkflowState::Completed).collect();
    rows.sort_by_key(|r| r.updated_at);
    let mut newest: BTreeMap<(String, String), Option<Provisioned>> = BTreeMap::new();
    let mut iam: BTreeMap<(String, String), check::iam::IamMade> = BTreeMap::new();
    for row in rows {
        let Some(view) = journal.load(&row.id)? else { continue };
        let region = view.input["region"].as_str().or(view.input["infra"]["region"].as_str()).unwrap_or_default();
        let infra = row.cluster.split('@').next().unwrap_or_default().to_string();
        let key = (infra, region.to_string());
        if row.workflow == "teardown" {
            iam.remove(&key);
            newest.insert(key, None);
            continue;
        }
        if matches!(row.workflow.as_str(), "create-iam" | "create-cluster")
            && let Some((_, Some(output), _)) = journal.outcome(&row.id)?
            && let Some(made) = check::iam::IamMade::from_run(
                &row.workflow,
                &row.id,
                &view.input,
                &output,
                view.code_version.unwrap_or(1),
            )
        {
            iam.insert(key.clone(), made);
        }
        if !CHECKED_WORKFLOWS.contains(&row.workflow.as_str()) {
            continue;
        }
        let Some((_, Some(output), _)) = journal.outcome(&row.id)? else { continue };
        match Provisioned::from_run(&row.workflow, &row.id, &view.input, &output) {
            Ok(p) => {
                // The account it was made in, as its environment check journaled it.
                let env = view.step(infraflow_engine::ENVIRONMENT_STEP).and_then(|s| s.output.clone());
                let account = env.as_ref().and_then(|e| e.get("account")).and_then(|a| a.as_str());
                newest.insert(key, Some(p.made_in(account)));
            }
            Err(e) => tracing::warn!(workflow = %row.id, error = %e, "a provision's journaled run cannot be checked"),
        }
    }
    Ok(newest.into_iter().filter_map(|(key, p)| Some(p?.with_iam(iam.get(&key).cloned()))).collect())
}

/// `infraflow check --infra-id ID --region R [--json]`: exit 0 in sync, 1 drifted (or held up,
/// or leaking), 2 no such cluster in this journal, 4 AWS could not be read.
pub async fn check(db: &Location, infra_id: &str, region: &str, json: bool) -> CmdResult {
    infraflow_workflows::check_region(region)
        .map_err(|_| Failure::usage(format!("--region {region:?} is not an AWS region name (like us-east-1)")))?;
    if let Location::Sqlite(path) = db
        && !path.exists()
    {
        return Err(Failure::usage(format!(
            "no journal at {}: check compares a cluster with the provision journaled there (pass --db)",
            path.display()
        )));
    }
    let journal = Journal::open_read_only_at(db)?;
    let clusters = provisioned(&journal)?;
    let Some(made) = clusters.iter().find(|p| p.infra_id() == infra_id && p.region() == region) else {
        let elsewhere: Vec<&str> = clusters.iter().filter(|p| p.infra_id() == infra_id).map(|p| p.region()).collect();
        return Err(Failure::usage(if elsewhere.is_empty() {
            format!(
                "cluster {infra_id} has no completed provision-infra or create-cluster in this journal (or was torn down since): nothing to compare it with"
            )
        } else {
            format!("cluster {infra_id} was provisioned in {} by this journal, not in {region}", elsewhere.join(", "))
        }));
    };
    let pool = crate::registry::pool();
    let report = check::check(&pool, made).await.map_err(|e| Failure { code: CHECK_FAILED, message: e.to_string() })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        print!("{}", report.render());
    }
    Ok(if report.in_sync { OK } else { DRIFTED })
}

/// The daemon's check of every cluster of its journal every `every`, one cluster at a time (a
/// check's reads share the account's rate buckets with the workflows, and one at a time they
/// never take more than a few requests of a bucket), until `stop`.
pub async fn every(
    journal: Journal,
    every: std::time::Duration,
    last: SharedChecks,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    stop: Arc<infraflow_engine::Signals>,
) {
    let pool = crate::registry::pool();
    loop {
        let clusters = match provisioned(&journal) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e.message, "cannot list the journal's clusters to check; the next turn is in {every:?}");
                Vec::new()
            }
        };
        let mut round = BTreeMap::new();
        for made in &clusters {
            let at_ms = infraflow_engine::SystemClock.now();
            let result = tokio::select! {
                r = check::check(&pool, made) => r.map_err(|e| e.to_string()),
                _ = stop.stopped() => return,
            };
            match &result {
                Ok(r) if r.in_sync => {
                    tracing::info!(cluster = %made.infra_id(), region = %made.region(), "cluster in sync")
                }
                Ok(r) => tracing::warn!(
                    cluster = %made.infra_id(),
                    region = %made.region(),
                    drift = r.drift.len(),
                    hold_ups = r.hold_ups.len(),
                    leaks = r.leaks.len(),
                    "cluster drifted: see `infraflow check --infra-id {} --region {}`",
                    made.infra_id(),
                    made.region()
                ),
                Err(e) => tracing::warn!(cluster = %made.infra_id(), error = %e, "cannot check the cluster"),
            }
            let key = (made.infra_id().to_string(), made.region().to_string());
            round.insert(key.clone(), Checked { infra_id: key.0, region: key.1, at_ms, result });
        }
        if let Some(m) = &metrics {
            m.record_checks(round.values());
        }
        *last.lock().unwrap() = round;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.stopped() => return,
        }
    }
}
