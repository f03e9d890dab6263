//! A journaled run drawn as SVG on the server (no JavaScript, no CDN): the steps of `graph`'s
//! shape, placed in rows by the longest path from the first step, arrows between them.

use std::collections::VecDeque;
use std::fmt::Write;

use crate::graph::Node;

const W: usize = 230;
const H: usize = 58;
const GAP_X: usize = 24;
const GAP_Y: usize = 34;
const MARGIN: usize = 12;
/// Rows wider than this wrap: a 3-zone provision has rows of a dozen steps.
const PER_ROW: usize = 5;

fn fill(state: &str) -> (&'static str, &'static str) {
    match state {
        "completed" => ("#d9f2d9", "#2e7d32"),
        "failed" => ("#f8d7da", "#c62828"),
        "running" | "retrying" => ("#fff3cd", "#f9a825"),
        _ => ("#eceff1", "#607d8b"),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// Each node's layer: the longest path to it from a node without predecessors (edges that
/// would close a cycle are ignored: a malformed journal still draws).
fn layers(n: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut indegree = vec![0usize; n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in edges {
        if a < n && b < n && a != b {
            out[a].push(b);
            indegree[b] += 1;
        }
    }
    let mut layer = vec![0usize; n];
    let mut queue: VecDeque<usize> = (0..n).filter(|i| indegree[*i] == 0).collect();
    let mut seen = vec![false; n];
    while let Some(a) = queue.pop_front() {
        seen[a] = true;
        for &b in &out[a] {
            layer[b] = layer[b].max(layer[a] + 1);
            indegree[b] -= 1;
            if indegree[b] == 0 {
                queue.push_back(b);
            }
        }
    }
    // Nodes on a cycle: after everything else.
    let last = layer.iter().copied().max().unwrap_or(0);
    for (i, s) in seen.iter().enumerate() {
        if !s {
            layer[i] = last + 1;
        }
    }
    layer
}

/// The SVG of a run: one `<g class="node" data-key=… data-state=…>` per step.
pub fn draw(nodes: &[Node], edges: &[(usize, usize)]) -> String {
    let layer = layers(nodes.len(), edges);
    // Rows: each layer, wrapped at PER_ROW.
    let mut rows: Vec<Vec<usize>> = Vec::new();
    for l in 0..=layer.iter().copied().max().unwrap_or(0) {
        let members: Vec<usize> = (0..nodes.len()).filter(|i| layer[*i] == l).collect();
        rows.extend(members.chunks(PER_ROW).map(<[usize]>::to_vec));
    }
    let mut at = vec![(0usize, 0usize); nodes.len()];
    for (r, row) in rows.iter().enumerate() {
        for (c, &i) in row.iter().enumerate() {
            at[i] = (MARGIN + c * (W + GAP_X), MARGIN + r * (H + GAP_Y));
        }
    }
    let width = 2 * MARGIN + PER_ROW.min(rows.iter().map(Vec::len).max().unwrap_or(1)) * (W + GAP_X);
    let height = 2 * MARGIN + rows.len().max(1) * (H + GAP_Y);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="run-graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11"><defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#78909c"/></marker></defs>"##
    );
    for &(a, b) in edges {
        if a >= nodes.len() || b >= nodes.len() {
            continue;
        }
        let (x1, y1) = (at[a].0 + W / 2, at[a].1 + H);
        let (x2, y2) = (at[b].0 + W / 2, at[b].1);
        let _ = write!(
            svg,
            r##"<line class="edge" x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#78909c" marker-end="url(#arrow)"/>"##
        );
    }
    for (i, n) in nodes.iter().enumerate() {
        let (x, y) = at[i];
        let (bg, border) = fill(&n.state);
        let mut lines = n.label.lines();
        let key = lines.next().unwrap_or_default();
        let _ = write!(
            svg,
            r#"<g class="node" data-key="{}" data-state="{}"><title>{}</title><rect x="{x}" y="{y}" width="{W}" height="{H}" rx="6" fill="{bg}" stroke="{border}"/><text x="{}" y="{}" font-weight="bold">{}</text>"#,
            escape(key),
            escape(&n.state),
            escape(&n.label),
            x + 8,
            y + 17,
            escape(&clip(key, 34)),
        );
        for (k, line) in lines.take(2).enumerate() {
            let _ = write!(svg, r#"<text x="{}" y="{}">{}</text>"#, x + 8, y + 33 + 15 * k, escape(&clip(line, 38)));
        }
        svg.push_str("</g>");
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(key: &str, state: &str) -> Node {
        Node { label: format!("{key}\nactivity\n{state} · 1 attempt"), state: state.to_string() }
    }

    #[test]
    fn a_branch_sits_a_row_below_its_parent_and_every_step_is_a_node() {
        let nodes = vec![node("vpc", "completed"), node("zone/a/subnet", "running"), node("zone/b/subnet", "pending")];
        let svg = draw(&nodes, &[(0, 1), (0, 2)]);
        assert_eq!(svg.matches(r#"class="node""#).count(), 3);
        assert_eq!(svg.matches(r#"class="edge""#).count(), 2);
        assert_eq!(layers(3, &[(0, 1), (0, 2)]), vec![0, 1, 1]);
        assert!(svg.contains(r#"data-key="zone/a/subnet" data-state="running""#));
    }

    #[test]
    fn a_cycle_or_a_stray_edge_still_draws() {
        assert_eq!(layers(2, &[(0, 1), (1, 0)]), vec![1, 1]);
        let svg = draw(&[node("<a>", "failed")], &[(0, 5)]);
        assert!(svg.contains("&lt;a&gt;") && !svg.contains("<a>"));
    }
}
