//! The journal's modules import only downwards, as ARCHITECTURE.md draws them: the contract
//! (`api`) and the shared rules below both backends, the backends below the dispatcher
//! (`journal.rs`), neither backend importing the other, and `error` naming no backend. Read from
//! the sources, so a new upward `use crate::…` fails here rather than in a reviewer's eye.

use std::collections::BTreeSet;
use std::path::Path;

/// Each module's layer: a module may import only modules of a lower layer.
const LAYERS: &[(&str, u32)] = &[
    ("error", 0),
    ("owner", 0),
    ("event", 1),
    ("executions", 2),
    ("projection", 3),
    ("api", 4),
    ("rules", 5),
    ("sqlite", 6),
    ("postgres", 6),
    ("journal", 7),
];

fn layer(module: &str) -> u32 {
    LAYERS.iter().find(|(m, _)| *m == module).unwrap_or_else(|| panic!("module {module} has no layer here")).1
}

/// The `crate::<module>` names a source file uses.
fn imports(text: &str) -> BTreeSet<String> {
    text.match_indices("crate::")
        .map(|(i, _)| {
            text[i + "crate::".len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
        })
        .filter(|m: &String| !m.is_empty())
        .collect()
}

fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

#[test]
fn journal_modules_import_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut upward = Vec::new();
    let mut seen = BTreeSet::new();
    for path in files(&src) {
        let rel = path.strip_prefix(&src).unwrap();
        let module = rel.iter().next().unwrap().to_str().unwrap().trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        seen.insert(module.clone());
        for target in imports(&std::fs::read_to_string(&path).unwrap()) {
            if target != module && layer(&target) >= layer(&module) {
                upward.push(format!("{} imports crate::{target}", rel.display()));
            }
        }
    }
    assert!(upward.is_empty(), "imports that go up or sideways: {upward:#?}");
    let drawn: BTreeSet<String> = LAYERS.iter().map(|(m, _)| m.to_string()).collect();
    assert_eq!(seen, drawn, "every module has a layer, and every layer a module");
}
