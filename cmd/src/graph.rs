//! `infraflow graph ID|WORKFLOW [--format mermaid|dot]`: the steps of one journaled run as a graph
//! (a workflow name means its latest run). Each scope's steps form a chain in the order the code
//! called them; a branch (`zone/us-east-1a`) hangs off the parent step recorded just before it
//! and joins the parent step recorded just after it. Nodes carry state, attempts and duration.

use std::collections::{BTreeMap, HashMap};

use infraflow_journal::{Event, Journal, Location, StepView};

use crate::failure::{CmdResult, Failure, OK};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    Mermaid,
    Dot,
}

pub(crate) struct Node {
    pub(crate) label: String,
    pub(crate) state: String,
}

pub fn graph(db: &Location, target: &str, format: GraphFormat) -> CmdResult {
    let journal = Journal::open_read_only_at(db)?;
    let id = match journal.row(target)? {
        Some(_) => target.to_string(),
        None => journal
            .list()?
            .into_iter()
            .filter(|r| r.workflow == target)
            .max_by_key(|r| r.created_at)
            .map(|r| r.id)
            .ok_or_else(|| {
                Failure::usage(format!(
                    "no workflow with id {target} and no run of a workflow named {target} in {}; run one first",
                    db
                ))
            })?,
    };
    let view = journal.load(&id)?.ok_or_else(|| Failure::usage(format!("no workflow with id {id}")))?;
    let durations = durations(&journal.events(&id)?);
    let (nodes, edges) = shape(&view.steps, &durations);
    print!("{}", render(format, &format!("{} {id}", view.workflow), &nodes, &edges));
    Ok(OK)
}

/// Milliseconds from a step's first recorded start (or, where starts are elided, the record
/// before its completion) to its completion.
pub(crate) fn durations(events: &[infraflow_journal::EventRecord]) -> HashMap<String, i64> {
    let mut started: HashMap<&str, i64> = HashMap::new();
    let mut out = HashMap::new();
    let mut previous_at = events.first().map_or(0, |e| e.at);
    for e in events {
        match &e.event {
            Event::StepStarted { step, .. } => {
                started.entry(step.as_str()).or_insert(e.at);
            }
            Event::StepCompleted { step, .. } => {
                let from = started.get(step.as_str()).copied().unwrap_or(previous_at);
                out.insert(step.clone(), e.at - from);
            }
            _ => {}
        }
        previous_at = e.at;
    }
    out
}

/// (scope, n) of a step from its recorded position; the environment probe goes first, other
/// steps without one (compensations, journals older than positions) last in the root scope.
fn place(s: &StepView) -> (String, u64) {
    if s.key == "environment" {
        // The environment probe runs before the body.
        return (String::new(), 0);
    }
    s.position
        .as_deref()
        .and_then(|p| p.rsplit_once('#'))
        .and_then(|(scope, n)| Some((scope.to_string(), n.parse().ok()?)))
        .unwrap_or_else(|| (String::new(), u64::MAX / 2 + s.order.max(0) as u64))
}

pub(crate) fn shape(steps: &[StepView], durations: &HashMap<String, i64>) -> (Vec<Node>, Vec<(usize, usize)>) {
    let mut scopes: BTreeMap<String, Vec<(u64, usize)>> = BTreeMap::new();
    let nodes: Vec<Node> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (scope, n) = place(s);
            scopes.entry(scope).or_default().push((n, i));
            let attempts = if s.attempts == 1 { "1 attempt".to_string() } else { format!("{} attempts", s.attempts) };
            let took = durations.get(&s.key).map(|ms| format!(" · {:.2} s", *ms as f64 / 1000.0)).unwrap_or_default();
            let state = format!("{:?}", s.state).to_lowercase();
            Node { label: format!("{}\n{}\n{state} · {attempts}{took}", s.key, s.activity), state }
        })
        .collect();
    for chain in scopes.values_mut() {
        chain.sort();
    }
    let mut edges = Vec::new();
    // Parent steps a branch sits between: their direct edge is drawn through the branch instead.
    let mut bridged = Vec::new();
    for (scope, chain) in &scopes {
        edges.extend(chain.windows(2).map(|w| (w[0].1, w[1].1)));
        if scope.is_empty() {
            continue;
        }
        // The parent: the longest other scope that contains this one, else the root.
        let parent = scopes
            .keys()
            .filter(|p| p.as_str() != scope && (p.is_empty() || scope.starts_with(&format!("{p}/"))))
            .max_by_key(|p| p.len())
            .cloned()
            .unwrap_or_default();
        let Some(parent_chain) = scopes.get(&parent) else { continue };
        let (first, last) = (chain[0].1, chain[chain.len() - 1].1);
        let order = |i: usize| steps[i].order;
        let before = parent_chain.iter().filter(|(_, p)| order(*p) < order(first)).max_by_key(|(_, p)| order(*p));
        let after = parent_chain.iter().filter(|(_, p)| order(*p) > order(last)).min_by_key(|(_, p)| order(*p));
        if let Some(&(_, b)) = before {
            edges.push((b, first));
        }
        if let Some(&(_, a)) = after {
            edges.push((last, a));
        }
        if let (Some(&(_, b)), Some(&(_, a))) = (before, after) {
            bridged.push((b, a));
        }
    }
    edges.retain(|e| !bridged.contains(e));
    edges.sort();
    edges.dedup();
    (nodes, edges)
}

fn render(format: GraphFormat, title: &str, nodes: &[Node], edges: &[(usize, usize)]) -> String {
    let mut out = String::new();
    match format {
        GraphFormat::Mermaid => {
            out.push_str(&format!("---\ntitle: {title}\n---\nflowchart TD\n"));
            for (i, n) in nodes.iter().enumerate() {
                let label = n.label.replace('"', "'").replace('\n', "<br/>");
                out.push_str(&format!("  s{i}[\"{label}\"]:::{}\n", n.state));
            }
            for (a, b) in edges {
                out.push_str(&format!("  s{a} --> s{b}\n"));
            }
            out.push_str("  classDef completed fill:#d9f2d9,stroke:#2e7d32\n");
            out.push_str("  classDef failed fill:#f8d7da,stroke:#c62828\n");
            out.push_str("  classDef running fill:#fff3cd,stroke:#f9a825\n");
            out.push_str("  classDef retrying fill:#fff3cd,stroke:#f9a825\n");
        }
        GraphFormat::Dot => {
            out.push_str(&format!("digraph \"{}\" {{\n  rankdir=TB;\n  node [shape=box];\n", title.replace('"', "'")));
            for (i, n) in nodes.iter().enumerate() {
                let label = n.label.replace('"', "'").replace('\n', "\\n");
                let color = match n.state.as_str() {
                    "completed" => "palegreen",
                    "failed" => "lightpink",
                    "running" | "retrying" => "khaki",
                    _ => "lightgrey",
                };
                out.push_str(&format!("  s{i} [label=\"{label}\", style=filled, fillcolor={color}];\n"));
            }
            for (a, b) in edges {
                out.push_str(&format!("  s{a} -> s{b};\n"));
            }
            out.push_str("}\n");
        }
    }
    out
}
