//! `canary`: a workflow that exercises the engine end to end without touching AWS — a health check
//! for a daemon and journal, and the load of `infraflow bench`.

use std::io::Write;
use std::time::Duration;

use infraflow_journal::Undo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use infraflow_engine::{ActivityError, InputError, StepError};
use infraflow_engine::{BoxFuture, Registry, Validated, WorkflowDef};
use infraflow_engine::{StepOptions, WfCtx, join_branches};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryInput {
    /// Steps per branch.
    pub steps: u32,
    #[serde(default = "one")]
    pub branches: u32,
    /// How long each step takes.
    #[serde(default)]
    pub step_millis: u64,
    /// The step (1-based, first branch) that fails for good, to exercise compensation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_at: Option<u32>,
    /// A file each step appends `tick KEY PID` to (and each compensation `untick KEY PID`), so a
    /// test can see what ran where. With it, every step registers a compensation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effects_file: Option<String>,
    /// Canaries with the same cluster key run one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

fn one() -> u32 {
    1
}

pub struct Canary;

pub const TICK: &str = "canary.tick";
pub const UNTICK: &str = "canary.untick";

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Tick {
    key: String,
    millis: u64,
    effects_file: Option<String>,
}

pub fn register(r: &mut Registry) {
    r.add_workflow(Canary);
    r.add_undo(UNTICK, |input: Value| async move {
        let tick: Tick = serde_json::from_value(input).map_err(|e| ActivityError::terminal(e.to_string()))?;
        if let Some(path) = &tick.effects_file {
            append_effect(path, "untick", &tick.key)?;
        }
        Ok(Value::Null)
    });
}

fn append_effect(path: &str, what: &str, key: &str) -> Result<(), ActivityError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| ActivityError::terminal(format!("cannot open effects file {path}: {e}")))?;
    // One write per line: O_APPEND keeps concurrent writers' lines whole.
    f.write_all(format!("{what} {key} {}\n", std::process::id()).as_bytes())
        .map_err(|e| ActivityError::retryable(format!("cannot append to {path}: {e}")))
}

impl WorkflowDef for Canary {
    fn name(&self) -> &'static str {
        "canary"
    }

    fn summary(&self) -> &'static str {
        "durable no-op steps: checks a daemon and its journal without touching AWS"
    }

    fn validate(&self, _id: &str, input: &Value) -> Result<Validated, InputError> {
        let c: CanaryInput =
            serde_json::from_value(input.clone()).map_err(|e| InputError(format!("invalid input: {e}")))?;
        if !(1..=100_000).contains(&c.steps) {
            return Err(InputError::field("steps", "must be between 1 and 100000"));
        }
        if !(1..=64).contains(&c.branches) {
            return Err(InputError::field("branches", "must be between 1 and 64"));
        }
        if c.step_millis > 60_000 {
            return Err(InputError::field("stepMillis", "must be at most 60000"));
        }
        if c.fail_at.is_some_and(|f| f == 0 || f > c.steps) {
            return Err(InputError::field("failAt", format!("must be between 1 and steps ({})", c.steps)));
        }
        let cluster = c.cluster.clone().unwrap_or_default();
        Ok(Validated { input: serde_json::to_value(&c).map_err(|e| InputError(e.to_string()))?, cluster })
    }

    fn run(&self, ctx: WfCtx, input: Value) -> BoxFuture<Result<Value, StepError>> {
        Box::pin(async move {
            let c: CanaryInput = serde_json::from_value(input)
                .map_err(|e| StepError::Decode { step: "input".into(), detail: e.to_string() })?;
            let branches = (0..c.branches).map(|b| {
                let ctx = if c.branches == 1 { ctx.clone() } else { ctx.scoped(&format!("b{b}")) };
                let c = c.clone();
                async move { run_branch(&ctx, &c, b == 0).await }
            });
            join_branches(branches).await?;
            Ok(json!({ "steps": c.steps * c.branches, "branches": c.branches }))
        })
    }
}

async fn run_branch(ctx: &WfCtx, c: &CanaryInput, first: bool) -> Result<(), StepError> {
    for i in 1..=c.steps {
        let key = format!("s{i}");
        // The effect names the workflow and the scoped step, so tests can match ticks and unticks.
        let effect_key = format!("{}/{}", ctx.workflow_id(), ctx.key(&key));
        let tick = Tick { key: effect_key, millis: c.step_millis, effects_file: c.effects_file.clone() };
        let undo = c
            .effects_file
            .as_ref()
            .map(|_| Undo { activity: UNTICK.into(), input: serde_json::to_value(&tick).unwrap_or(Value::Null) });
        let fail = first && c.fail_at == Some(i);
        ctx.step_with(&key, TICK, &tick, StepOptions { retry: None, undo, settle: None }, || {
            let tick = tick.clone();
            async move {
                if tick.millis > 0 {
                    tokio::time::sleep(Duration::from_millis(tick.millis)).await;
                }
                if fail {
                    return Err(ActivityError::terminal(format!("injected failure at {}", tick.key)));
                }
                if let Some(path) = &tick.effects_file {
                    append_effect(path, "tick", &tick.key)?;
                }
                Ok(i)
            }
        })
        .await?;
    }
    Ok(())
}
