//! The layering, checked (`CONTRIBUTING.md`, "Layering"): which workspace crate may depend on
//! which, and which of the gateway's doors may use which module. Each rule is written once,
//! here, and in prose in `CONTRIBUTING.md`. A new edge the rules do not allow fails `make lint`;
//! so does a known exception that is gone and still listed (the list only shrinks).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// What each workspace crate may depend on (normal and build dependencies), from the bottom
/// up: the protocol and the tool policy, the configuration, the broker, the stores (with the
/// follower of the tenant catalog), the process plumbing, the jobs, the gateway; the MCP
/// crates beside them, knowing only the protocol. `toolmark-testkit` (test support) and
/// `toolmark-loadgen` (a load client) stand outside the product. The gateway runs the jobs
/// in its own process (memory broker, `server.run_jobs`): only its assembly names them
/// ([`only_the_assembly_names_the_jobs`]).
const ALLOWED: &[(&str, &[&str])] = &[
    ("toolmark-proto", &[]),
    ("toolmark-policy", &[]),
    ("toolmark-config", &["toolmark-proto", "toolmark-policy"]),
    ("toolmark-broker", &["toolmark-proto", "toolmark-policy"]),
    ("toolmark-store", &["toolmark-broker", "toolmark-config"]),
    ("toolmark-process", &["toolmark-config"]),
    (
        "toolmark-worker",
        &[
            "toolmark-broker",
            "toolmark-store",
            "toolmark-config",
            "toolmark-process",
        ],
    ),
    (
        "toolmark-gateway",
        &[
            "toolmark-proto",
            "toolmark-broker",
            "toolmark-config",
            "toolmark-process",
            "toolmark-store",
            "toolmark-worker",
            "toolmark-mcp-tools",
        ],
    ),
    ("toolmark-mcp-tools", &["toolmark-proto"]),
    ("toolmark-mcp", &["toolmark-proto", "toolmark-mcp-tools"]),
    (
        "toolmark-testkit",
        &[
            "toolmark-config",
            "toolmark-process",
            "toolmark-gateway",
            "toolmark-worker",
            "toolmark-mcp",
        ],
    ),
    ("toolmark-loadgen", &["toolmark-config"]),
];

/// Edges the rules do not allow that the code still has, each to be removed. None today: the
/// list only shrinks, and a new exception needs a reason written beside it.
const KNOWN_CRATE_EDGES: &[(&str, &str)] = &[];

/// The gateway's modules that may name the jobs' crate (`toolmark_worker`): the assembly that
/// runs them in the gateway's process. Their metrics reach `/metrics` through
/// `toolmark_process::metrics::Exposed`, the egress clients are `toolmark_process::egress`.
const NAME_THE_JOBS: &[&str] = &["serve"];

/// The gateway's doors: what faces agents (`api`, `hosted_mcp`), operators (`admin`) and the
/// demo (`demo`); and its page transports (`page`, the WebSocket; `pusher`, the Echo
/// endpoint). A door never uses another door; a page transport may use the page session
/// (`page`), and `api::inbound` is a page transport too (frames over HTTP), as is the demo's
/// stand-in for an app's bridge endpoint; `page` uses no door and no other transport. Modules outside these (the call engine, `http`, the state…)
/// use none of them, except the few that assemble or document all of them.
const DOORS: &[&str] = &["api", "hosted_mcp", "admin", "demo"];
const TRANSPORTS: &[&str] = &["page", "pusher"];
const ASSEMBLERS: &[&str] = &["lib", "main", "serve", "openapi", "admin_doc", "state"];

/// Module edges the rules do not allow that the code still has, each to be removed.
const KNOWN_MODULE_EDGES: &[(&str, &str)] = &[];

/// The workspace's crates and their dependencies on each other (normal and build).
fn crate_edges() -> BTreeSet<(String, String)> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut edges = BTreeSet::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap();
            let dev = d["kind"].as_str() == Some("dev");
            if dep.starts_with("toolmark-") && !dev {
                edges.insert((name.to_owned(), dep.to_owned()));
            }
        }
    }
    edges
}

#[test]
fn crates_depend_only_downwards() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let edges = crate_edges();
    let mut wrong = Vec::new();
    for (from, to) in &edges {
        let Some(may) = allowed.get(from.as_str()) else {
            wrong.push(format!("{from} is not in the layering: add it to ALLOWED"));
            continue;
        };
        let known = KNOWN_CRATE_EDGES.contains(&(from.as_str(), to.as_str()));
        if !may.contains(&to.as_str()) && !known {
            wrong.push(format!("{from} -> {to}"));
        }
    }
    for (from, to) in KNOWN_CRATE_EDGES {
        if !edges.contains(&((*from).to_owned(), (*to).to_owned())) {
            wrong.push(format!(
                "{from} -> {to} is gone: take it out of KNOWN_CRATE_EDGES"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "crate edges the layering does not allow (CONTRIBUTING.md, \"Layering\"): {wrong:#?}"
    );
}

/// The top module a source file of the gateway belongs to (`api/calls.rs` → `api`,
/// `serve.rs` → `serve`).
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

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

/// Every `(module, module it uses)` of the gateway's sources, comments left out.
fn module_edges() -> BTreeMap<(String, String), String> {
    let src = root().join("gateway/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let uses = Regex::new(r"crate::([a-z_]+)").unwrap();
    let mut edges = BTreeMap::new();
    for f in files {
        let from = top_module(&src, &f);
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for c in uses.captures_iter(code) {
                let to = c[1].to_owned();
                if to != from {
                    edges
                        .entry((from.clone(), to))
                        .or_insert_with(|| f.strip_prefix(root()).unwrap().display().to_string());
                }
            }
        }
    }
    edges
}

/// Whether the rules allow module `from` to use module `to`.
fn allowed_module_edge(from: &str, to: &str) -> bool {
    let door = |m: &str| DOORS.contains(&m);
    let transport = |m: &str| TRANSPORTS.contains(&m);
    if ASSEMBLERS.contains(&from) {
        return true;
    }
    match (door(from) || transport(from), door(to) || transport(to)) {
        // A page transport over the page session; `/inbound` (in `api`) is one too, and the
        // demo's bridge stand-in.
        (true, true) => to == "page" && matches!(from, "pusher" | "api" | "demo"),
        // The call engine and the shared parts use no door.
        (false, true) => false,
        _ => true,
    }
}

#[test]
fn the_gateways_doors_use_no_other_door() {
    let edges = module_edges();
    let mut wrong = Vec::new();
    for ((from, to), file) in &edges {
        let known = KNOWN_MODULE_EDGES.contains(&(from.as_str(), to.as_str()));
        if !allowed_module_edge(from, to) && !known {
            wrong.push(format!("{from} -> {to} ({file})"));
        }
    }
    for (from, to) in KNOWN_MODULE_EDGES {
        if !edges.contains_key(&((*from).to_owned(), (*to).to_owned())) {
            wrong.push(format!(
                "{from} -> {to} is gone: take it out of KNOWN_MODULE_EDGES"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "module edges the layering does not allow (CONTRIBUTING.md, \"Layering\"): {wrong:#?}"
    );
}

#[test]
fn only_the_assembly_names_the_jobs() {
    let src = root().join("gateway/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for f in files {
        let module = top_module(&src, &f);
        let text = std::fs::read_to_string(&f).unwrap();
        let names = text.lines().any(|l| {
            l.split("//")
                .next()
                .unwrap_or_default()
                .contains("toolmark_worker")
        });
        if names && !NAME_THE_JOBS.contains(&module.as_str()) {
            wrong.push(f.strip_prefix(root()).unwrap().display().to_string());
        }
    }
    assert!(
        wrong.is_empty(),
        "only {NAME_THE_JOBS:?} may name the jobs' crate (CONTRIBUTING.md, \"Layering\"): {wrong:#?}"
    );
}

/// Whether a module of the gateway may name the node's whole state (`AppState`): the assembly
/// and the node's own routes may, and the demo; a door or a page transport takes its own
/// state (`ApiState`, `PageState`, `McpState`, `AdminState`).
fn may_name_the_nodes_state(module: &str) -> bool {
    !(DOORS.contains(&module) || TRANSPORTS.contains(&module)) || module == "demo"
}

#[test]
fn each_door_takes_its_own_state() {
    let src = root().join("gateway/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let word = Regex::new(r"\bAppState\b").unwrap();
    let mut wrong = Vec::new();
    for f in files {
        let module = top_module(&src, &f);
        let text = std::fs::read_to_string(&f).unwrap();
        let names = text
            .lines()
            .any(|l| word.is_match(l.split("//").next().unwrap_or_default()));
        if names && !may_name_the_nodes_state(&module) {
            wrong.push(f.strip_prefix(root()).unwrap().display().to_string());
        }
    }
    assert!(
        wrong.is_empty(),
        "a door takes its own state, not the node's AppState (CONTRIBUTING.md, \"Layering\"): {wrong:#?}"
    );
}

#[test]
fn the_rules_catch_an_edge_they_forbid() {
    // The checks themselves: an edge the rules forbid is refused, one they allow is not.
    assert!(!allowed_module_edge("calls", "api"));
    assert!(!allowed_module_edge("hosted_mcp", "api"));
    assert!(!allowed_module_edge("page", "pusher"));
    assert!(allowed_module_edge("pusher", "page"));
    assert!(allowed_module_edge("api", "calls"));
    assert!(allowed_module_edge("serve", "admin"));
    assert!(!may_name_the_nodes_state("api"));
    assert!(!may_name_the_nodes_state("page"));
    assert!(may_name_the_nodes_state("ops"));
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    assert!(!allowed["toolmark-proto"].contains(&"toolmark-broker"));
    assert!(!allowed["toolmark-broker"].contains(&"toolmark-gateway"));
    assert!(!allowed["toolmark-mcp"].contains(&"toolmark-broker"));
    assert!(!allowed["toolmark-broker"].contains(&"toolmark-config"));
    assert!(!allowed["toolmark-process"].contains(&"toolmark-broker"));
    assert!(!allowed["toolmark-policy"].contains(&"toolmark-config"));
}
