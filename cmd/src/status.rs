//! `status`, `workflow-status` and `history`: read-only views of the journal; and `prune`, which
//! moves what those views no longer need to the archive.

use infraflow_journal::{Journal, Location};

use crate::cli::StatusArgs;
use crate::failure::{CmdResult, Failure, OK};
use crate::render;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

pub fn status(db: &Location, args: &StatusArgs) -> CmdResult {
    let journal = Journal::open_read_only_at(db)?;
    match &args.id {
        None => {
            let rows = journal.list()?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&render::list_json(&rows)).unwrap_or_default());
            } else {
                print!("{}", render::list_table(&rows, now_ms()));
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
