//! The shape of the source tree, checked: no file imports another that imports it back
//! (except inside one actor's own folder), and the layers point one way (docs/architecture.md,
//! "Layers"). Reads `src/` as text: every `use` tree and every `crate::`, `super::` and
//! `self::` path outside comments and test modules is an edge from its file to the file that
//! declares the module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module, as the path of segments below the crate root (`["store", "writer", "task"]`).
type ModulePath = Vec<String>;

/// Folders whose files may import each other both ways: each is one actor's (or the store
/// writer's) own room, read as a unit.
const OWN_FOLDERS: &[&str] = &[
    "actors::campaign",
    "actors::device_link",
    "actors::phone",
    "actors::registry",
    "actors::webhook_endpoint",
    "store::writer",
];

/// The layers, lowest first: a module may import its own layer and the ones below, never one
/// above. Top-level modules not listed here fail the test, so a new one is placed on purpose.
const LAYERS: &[&[&str]] = &[
    &["domain", "clock"],
    &["config"],
    &["telemetry"],
    &["store"],
    &["outbound"],
    &["actors", "live_events", "cluster"],
    &["send"],
    &["error"],
    &["api"],
    &["portal"],
    &[
        "server",
        "startup",
        "change_router",
        "secrets",
        "single_node",
        "backup",
    ],
    &["tools", "loadtest", "phone_sim"],
    &["layering"],
];

/// Every module of `src/` and the file that declares it.
fn modules(root: &Path) -> BTreeMap<ModulePath, PathBuf> {
    let mut found = BTreeMap::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let Ok(relative) = path
                .with_extension("")
                .strip_prefix(root)
                .map(Path::to_path_buf)
            else {
                continue;
            };
            let mut segments: ModulePath = relative
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if segments.last().is_some_and(|s| s == "mod") {
                segments.pop();
            }
            if segments == ["lib"] || segments == ["main"] {
                segments.clear();
            }
            found.insert(segments, path);
        }
    }
    found
}

/// The text without comments, and cut before the first inline `#[cfg(test)]` module.
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else if let Some(raw) = raw_string(rest) {
            code.push_str("\"\"");
            rest = raw;
        } else if let Some(after) = char_literal(rest) {
            code.push_str("' '");
            rest = after;
        } else if rest.starts_with('"') {
            // A string literal: kept out (a URL's `//` is not a comment, a path in text is no import).
            let bytes = rest.as_bytes();
            let mut i = 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            code.push_str("\"\"");
            rest = rest.get(i + 1..).unwrap_or("");
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            code.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    if let Some(at) = code.find("#[cfg(test)]") {
        let after = code[at + "#[cfg(test)]".len()..].trim_start();
        if after.starts_with("mod ") && after.split(';').next().is_some_and(|s| s.contains('{')) {
            code.truncate(at);
        }
    }
    code
}

/// After a raw string literal (`r"…"`, `r#"…"#`) at the start of `text`, if there is one.
fn raw_string(text: &str) -> Option<&str> {
    let after_r = text.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    let body = after_r[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    body.find(&close).map(|i| &body[i + close.len()..])
}

/// After a character literal (`'"'`, `'\''`) at the start of `text`, if there is one (a
/// lifetime is not).
fn char_literal(text: &str) -> Option<&str> {
    let after = text.strip_prefix('\'')?;
    if let Some(escaped) = after.strip_prefix('\\') {
        let close = escaped.get(1..)?.find('\'')?;
        return escaped.get(close + 2..);
    }
    let c = after.chars().next()?;
    after[c.len_utf8()..].strip_prefix('\'')
}

/// The paths a `use` tree names: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![path.to_string()];
    };
    let prefix = tree[..open].trim().trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut items, mut current, mut depth) = (Vec::new(), String::new(), 0);
    for c in inner.chars() {
        match c {
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
        .iter()
        .filter(|item| !item.trim().is_empty())
        .flat_map(|item| expand(item))
        .map(|path| match (path.as_str(), prefix.is_empty()) {
            ("self", _) => prefix.to_string(),
            (_, true) => path,
            (_, false) => format!("{prefix}::{path}"),
        })
        .collect()
}

/// Every path the code names that starts at `crate`, `super` or `self`.
fn paths_in(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let boundary = at == 0
            || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if boundary {
            paths.extend(expand(&after[..end]));
        }
        rest = &after[if boundary { end } else { 0 }..];
    }
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':')
            {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |i| at + i);
            paths.push(code[at..end].trim_end_matches(':').to_string());
        }
    }
    paths
}

/// The module a path leads into: its longest prefix that is a module of the crate.
fn target(
    modules: &BTreeMap<ModulePath, PathBuf>,
    from: &ModulePath,
    path: &str,
) -> Option<ModulePath> {
    let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut base: ModulePath = match segments.peek().copied() {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        Some("super") | Some("self") => from.clone(),
        _ => return None,
    };
    while let Some(step) = segments.peek().copied() {
        match step {
            "super" => {
                base.pop();
            }
            "self" => {}
            _ => break,
        }
        segments.next();
    }
    base.extend(segments.map(str::to_string));
    (0..=base.len())
        .rev()
        .map(|n| base[..n].to_vec())
        .find(|m| modules.contains_key(m))
}

/// The import graph between files: module → the modules it names.
fn graph(root: &Path) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let modules = modules(root);
    modules
        .iter()
        .map(|(module, file)| {
            let code = code_of(&std::fs::read_to_string(file).unwrap_or_default());
            let edges = paths_in(&code)
                .iter()
                .filter_map(|path| target(&modules, module, path))
                .filter(|to| to != module && !to.is_empty())
                .collect();
            (module.clone(), edges)
        })
        .collect()
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Vec<Vec<ModulePath>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<ModulePath, BTreeSet<ModulePath>>,
        index: BTreeMap<&'g ModulePath, (usize, usize)>,
        stack: Vec<&'g ModulePath>,
        found: Vec<Vec<ModulePath>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g ModulePath) -> usize {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            let mut low = n;
            for w in self.graph.get(v).into_iter().flatten() {
                match self.index.get(w) {
                    None => low = low.min(self.visit(w)),
                    Some(&(i, _)) if self.stack.contains(&w) => low = low.min(i),
                    Some(_) => {}
                }
            }
            self.index.insert(v, (n, low));
            if low == n {
                let at = self.stack.iter().rposition(|m| *m == v).unwrap_or(0);
                let component: Vec<ModulePath> = self.stack.drain(at..).cloned().collect();
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
            low
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

fn name(module: &ModulePath) -> String {
    module.join("::")
}

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_file_imports_one_that_imports_it_back() {
    let graph = graph(&source_root());
    let offending: Vec<Vec<String>> = circles(&graph)
        .into_iter()
        .filter(|component| {
            !OWN_FOLDERS.iter().any(|folder| {
                component
                    .iter()
                    .all(|m| name(m) == *folder || name(m).starts_with(&format!("{folder}::")))
            })
        })
        .map(|component| component.iter().map(name).collect())
        .collect();
    assert!(
        offending.is_empty(),
        "circles between files: {offending:#?}"
    );
}

#[test]
fn layers_point_one_way() {
    let graph = graph(&source_root());
    let rank = |module: &ModulePath| {
        let top = module.first().map(String::as_str).unwrap_or("lib");
        LAYERS.iter().position(|layer| layer.contains(&top))
    };
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    for (from, tos) in &graph {
        if from.is_empty() {
            continue;
        }
        let Some(from_rank) = rank(from) else {
            unplaced.insert(from[0].clone());
            continue;
        };
        for to in tos {
            match rank(to) {
                Some(to_rank) if to_rank > from_rank => {
                    upward.push(format!("{} -> {}", name(from), name(to)))
                }
                Some(_) => {}
                None => {
                    unplaced.insert(to[0].clone());
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "top-level modules in no layer of LAYERS: {unplaced:?}"
    );
    assert!(
        upward.is_empty(),
        "imports that run up a layer: {upward:#?}"
    );
}

#[test]
fn the_checker_sees_a_circle_and_a_use_tree() {
    assert_eq!(
        expand("crate::store::{self, messages::{Message, Position}, scoped::Scope as S}"),
        vec![
            "crate::store",
            "crate::store::messages::Message",
            "crate::store::messages::Position",
            "crate::store::scoped::Scope",
        ]
    );
    let module = |s: &str| s.split("::").map(str::to_string).collect::<ModulePath>();
    let graph: BTreeMap<ModulePath, BTreeSet<ModulePath>> = [
        (module("a"), [module("b")].into()),
        (module("b"), [module("a"), module("c")].into()),
        (module("c"), BTreeSet::new()),
    ]
    .into();
    assert_eq!(circles(&graph).len(), 1);
    assert_eq!(
        code_of("let a = \"http://x\"; // crate::b\nuse crate::c;"),
        "let a = \"\"; \nuse crate::c;"
    );
}
