//! The house's walls, checked from the source: no import circle between the daemon's
//! top-level modules (from every `crate::` path in `server/src`), no module over 800 lines,
//! every module opens with a `//!` saying what it owns, and the library crates under
//! `server/` keep the dependencies their rooms allow (read from their `Cargo.toml`).

#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The top-level modules each `crate::` path of `text` names (`crate::a::b`, and each
/// name of `crate::{a, b::c}`).
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(',')
                .filter_map(|p| p.trim().split("::").next())
                .collect()
        } else {
            vec![
                rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or(""),
            ]
        };
        for n in names {
            if n.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && n != "self" {
                out.insert(n.to_string());
            }
        }
    }
    out
}

/// Module → the modules it imports, for the daemon's top-level modules.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = server().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy();
        let top = top.trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" {
            continue; // the roots declare and wire every module
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let deps = graph.entry(top.clone()).or_default();
        deps.extend(crate_paths(&text).into_iter().filter(|d| *d != top));
    }
    graph
}

/// A circle through `start`, if any (depth-first over `graph`).
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(g, d, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

#[test]
fn the_path_parser_sees_plain_and_grouped_imports() {
    let p =
        crate_paths("use crate::tiles::{a, b};\nuse crate::{config::X, error::{E, R}};\nlet x = crate::sampler::f();");
    assert_eq!(p, ["config", "error", "sampler", "tiles"].map(String::from).into());
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(circle(&g).unwrap().len(), 4);
    g.get_mut("c").unwrap().clear();
    assert!(circle(&g).is_none());
}

#[test]
fn no_import_circle_between_the_daemons_modules() {
    let g = module_graph();
    assert!(g.len() > 10, "found only {g:?}");
    assert!(g["pipeline"].contains("dataset"), "the parser misses imports: {g:?}");
    if let Some(c) = circle(&g) {
        panic!("import circle: {}\n{g:#?}", c.join(" -> "));
    }
}

#[test]
fn the_config_schema_is_a_leaf() {
    let g = module_graph();
    assert_eq!(
        g["config"],
        BTreeSet::from(["error".to_string()]),
        "config imports more than error"
    );
}

#[test]
fn every_module_is_small_and_says_what_it_owns() {
    let mut files = Vec::new();
    for dir in ["src", "cpu/src", "tiff/src", "geo/src", "stac/src", "render/src"] {
        rust_files(&server().join(dir), &mut files);
    }
    rust_files(&server().join("../client/src"), &mut files);
    let mut problems = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines = text.lines().count();
        if lines > 800 {
            problems.push(format!("{}: {lines} lines", f.display()));
        }
        if !text.trim_start().starts_with("//!") {
            problems.push(format!("{}: no //! doc comment at the top", f.display()));
        }
    }
    assert!(files.len() > 50);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The `[dependencies]` names of a crate's manifest (normal dependencies only).
fn normal_dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let value: toml::Table = toml::from_str(&text).unwrap();
    let mut deps: Vec<String> = value
        .get("dependencies")
        .and_then(|d| d.as_table())
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(targets) = value.get("target").and_then(|t| t.as_table()) {
        for t in targets.values() {
            if let Some(d) = t.get("dependencies").and_then(|d| d.as_table()) {
                deps.extend(d.keys().cloned());
            }
        }
    }
    deps
}

#[test]
fn library_crates_keep_to_their_rooms() {
    let io_stack = ["object_store", "tonic", "moka", "prometheus", "axum", "tokio"];
    for (krate, forbidden) in [
        (
            "tiff",
            [
                &io_stack[..],
                &["parquet", "arrow-array", "cogfeed-geo", "cogfeed-stac"],
            ]
            .concat(),
        ),
        (
            "geo",
            [&io_stack[..], &["parquet", "arrow-array", "cogfeed-stac"]].concat(),
        ),
        ("stac", io_stack.to_vec()),
        (
            "cpu",
            [
                &io_stack[..],
                &["cogfeed-tiff", "cogfeed-geo", "cogfeed-stac", "cogfeed-render"],
            ]
            .concat(),
        ),
        ("render", [&io_stack[..], &["parquet"]].concat()),
    ] {
        let deps = normal_dependencies(&server().join(krate).join("Cargo.toml"));
        for f in forbidden {
            assert!(!deps.iter().any(|d| d == f), "server/{krate} depends on {f}");
        }
    }
    // Only the stac crate reads Parquet; no crate under server/ depends on one under client/.
    let root = server().join("..");
    let workspace: toml::Table = toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let client_crates: Vec<String> = workspace["workspace"]["dependencies"]
        .as_table()
        .unwrap()
        .iter()
        .filter(|(_, v)| {
            v.get("path")
                .and_then(|p| p.as_str())
                .is_some_and(|p| p.starts_with("client"))
        })
        .map(|(k, _)| k.clone())
        .collect();
    for krate in [".", "cpu", "tiff", "geo", "stac", "render"] {
        let deps = normal_dependencies(&server().join(krate).join("Cargo.toml"));
        for c in &client_crates {
            assert!(
                !deps.contains(c),
                "server/{krate} depends on {c}, which lives under client/"
            );
        }
        if krate != "stac" {
            assert!(
                !deps.iter().any(|d| d == "parquet"),
                "server/{krate} depends on parquet"
            );
        }
    }
}
