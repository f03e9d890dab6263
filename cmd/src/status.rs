//! `status`, `workflow-status`, `wait` and `history`: read-only views of the journal; and `prune`,
//! which moves what those views no longer need to the archive.

use infraflow_journal::{Journal, Location, WorkflowRow, WorkflowState};

use crate::cli::StatusArgs;
use crate::failure::{CmdResult, Failure, OK, PAUSED, TIMED_OUT, WORKFLOW_FAILED};
use crate::render;

/// What each workflow of `rows` that is queued or running waits for: the workflow ahead of it in
/// this journal's queue, else what its hold journaled (another journal's lease, the account's
/// quota). One read of the queue, and of the workflow's events only when the queue says nothing.
pub(crate) fn waits(journal: &Journal, rows: &[WorkflowRow]) -> Result<render::Waits, Failure> {
    let mut out = render::Waits::new();
    for r in rows.iter().filter(|r| matches!(r.state, WorkflowState::Pending | WorkflowState::Running)) {
        let queued = render::waiting_text(&journal.waiting_for(&r.id, now_ms())?);
        let said = match queued {
            Some(q) => Some(q),
            None => journal.load(&r.id)?.and_then(|v| v.summary.waiting),
        };
        if let Some(w) = said {
            out.insert(r.id.clone(), w);
        }
    }
    Ok(out)
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

pub fn status(db: &Location, args: &StatusArgs) -> CmdResult {
    let journal = Journal::open_read_only_at(db)?;
    match &args.id {
        None => {
            let rows = filtered(journal.list()?, args);
            let waits = waits(&journal, &rows)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&render::list_json(&rows, &waits)).unwrap_or_default());
            } else if rows.is_empty() && filtering(args) {
                println!("no workflow matches these filters");
            } else {
                print!("{}", render::list_table(&rows, now_ms(), &waits));
            }
        }
        Some(id) => {
            let not_found = || Failure::usage(format!("no workflow with id {id} in {db}"));
            let row = journal.row(id)?.ok_or_else(not_found)?;
            let view = journal.load(id)?.ok_or_else(not_found)?;
            let waiting = journal.waiting_for(id, now_ms())?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&render::view_json(&row, &view, &waiting)).unwrap_or_default()
                );
            } else {
                print!("{}", render::view_text(&row, &view, &waiting, now_ms()));
            }
        }
    }
    Ok(OK)
}

fn filtering(args: &StatusArgs) -> bool {
    !args.state.is_empty()
        || args.workflow.is_some()
        || args.cluster.is_some()
        || args.since.is_some()
        || args.offset > 0
}

/// The listing as `status`'s filters and paging narrow it, in its order (oldest first).
fn filtered(mut rows: Vec<WorkflowRow>, args: &StatusArgs) -> Vec<WorkflowRow> {
    let horizon = args.since.map(|age| now_ms() - age.as_millis() as i64);
    rows.retain(|r| {
        crate::render::row_matches(r, &args.state, args.workflow.as_deref(), args.cluster.as_deref())
            && horizon.is_none_or(|h| r.updated_at >= h)
    });
    rows.into_iter().skip(args.offset).take(args.limit.unwrap_or(usize::MAX)).collect()
}

/// `wait ID`: polls the journal (read-only, as `status` does) until the workflow finishes or
/// pauses, or `timeout` passes.
pub fn wait(db: &Location, id: &str, timeout: Option<std::time::Duration>, json: bool) -> CmdResult {
    let journal = Journal::open_read_only_at(db)?;
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    let not_found = || Failure::usage(format!("no workflow with id {id} in {db}"));
    let mut pause = std::time::Duration::from_millis(100);
    loop {
        let row = journal.row(id)?.ok_or_else(not_found)?;
        if row.state.is_finished() || row.state == WorkflowState::Paused {
            if json {
                let view = journal.load(id)?.ok_or_else(not_found)?;
                let waiting = journal.waiting_for(id, now_ms())?;
                println!(
                    "{}",
                    serde_json::to_string_pretty(&render::view_json(&row, &view, &waiting)).unwrap_or_default()
                );
            } else {
                let why = row.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
                println!("{id} {}{why}", row.state.as_str());
            }
            return Ok(match row.state {
                WorkflowState::Completed => OK,
                WorkflowState::Paused => PAUSED,
                _ => WORKFLOW_FAILED,
            });
        }
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(Failure {
                code: TIMED_OUT,
                message: format!(
                    "{id} is still {} after {}; it goes on (see `infraflow status {id}`)",
                    row.state.as_str(),
                    render::age(timeout.unwrap_or_default().as_millis() as i64)
                ),
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_secs(1));
    }
}

pub fn history(db: &Location, id: &str, json: bool) -> CmdResult {
    let journal = Journal::open_read_only_at(db)?;
    if journal.row(id)?.is_none() {
        return Err(Failure::usage(format!("no workflow with id {id} in {db}")));
    }
    let events = journal.events(id)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&render::history_json(&events)).unwrap_or_default());
    } else {
        print!("{}", render::history_text(&events));
    }
    Ok(OK)
}

pub fn prune(db: &Location, before: std::time::Duration, json: bool) -> CmdResult {
    if let Location::Sqlite(path) = db
        && !path.exists()
    {
        return Err(Failure::usage(format!("{db}: no journal there; pass the right --db")));
    }
    let journal = Journal::open_at(db)?;
    let horizon = now_ms() - before.as_millis() as i64;
    let pruned = journal.prune(horizon)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&pruned).unwrap_or_default());
    } else {
        println!(
            "archived {} workflows ({} events) that finished before {} to {}",
            pruned.workflows,
            pruned.events,
            render::iso_time(horizon),
            pruned.archive
        );
    }
    Ok(OK)
}
