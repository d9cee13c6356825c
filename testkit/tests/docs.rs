//! Docs that cannot drift. Reads every document a user reads (`docs/*.md`, the README, the
//! chart's README) and checks each config key, environment variable, metric, endpoint, flag and
//! close code they name against the code that defines it: the config types (through their JSON
//! Schema), the sources that read the environment, the metrics registries as rendered, the
//! OpenAPI document and a running gateway's router, the binaries' command lines, and the close-code
//! constants. Each check fails on a name the code does not have, and on one the code has that the
//! docs never name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use regex::Regex;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// One document: its path from the root and its lines.
struct Doc {
    path: String,
    text: String,
}

impl Doc {
    fn lines(&self) -> impl Iterator<Item = (usize, &str)> {
        self.text.lines().enumerate().map(|(i, l)| (i + 1, l))
    }

    /// Lines with shell continuations (`\` at the end) joined, numbered by their first line.
    fn logical_lines(&self) -> Vec<(usize, String)> {
        let mut out: Vec<(usize, String)> = Vec::new();
        let mut open = false;
        for (n, line) in self.lines() {
            let (body, cont) = match line.trim_end().strip_suffix('\\') {
                Some(b) => (b, true),
                None => (line, false),
            };
            match out.last_mut() {
                Some((_, acc)) if open => {
                    acc.push(' ');
                    acc.push_str(body);
                }
                _ => out.push((n, body.to_owned())),
            }
            open = cont;
        }
        out
    }

    /// The lines of the section under `heading` (up to the next heading of its level or above).
    fn section(&self, heading: &str) -> Vec<(usize, &str)> {
        let level = heading.chars().take_while(|c| *c == '#').count();
        let mut inside = false;
        let mut out = Vec::new();
        for (n, line) in self.lines() {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            if hashes > 0 && line[hashes..].starts_with(' ') {
                if inside && hashes <= level {
                    break;
                }
                if line.trim() == heading {
                    inside = true;
                    continue;
                }
            }
            if inside {
                out.push((n, line));
            }
        }
        assert!(!out.is_empty(), "{}: no section {heading:?}", self.path);
        out
    }
}

fn docs() -> Vec<Doc> {
    let root = root();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    paths.sort();
    paths.push(root.join("README.md"));
    paths.push(root.join("charts/toolmark/README.md"));
    paths
        .into_iter()
        .map(|p| Doc {
            path: p
                .strip_prefix(&root)
                .expect("under the root")
                .display()
                .to_string(),
            text: std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        })
        .collect()
}

fn doc(name: &str) -> Doc {
    docs()
        .into_iter()
        .find(|d| d.path == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

/// Every text file under `dir` (recursively) whose name ends with one of `exts`.
fn sources(dir: &str, exts: &[&str]) -> Vec<(String, String)> {
    fn walk(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            panic!("{}: not a directory", dir.display());
        };
        for e in entries {
            let p = e.expect("an entry").path();
            if p.is_dir() {
                walk(&p, exts, out);
            } else if exts.iter().any(|x| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with(x))
            }) {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join(dir), exts, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable");
            (p.display().to_string(), text)
        })
        .collect()
}

fn backticked(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2)
}

fn table_rows<'a>(lines: &[(usize, &'a str)]) -> Vec<(usize, Vec<&'a str>)> {
    lines
        .iter()
        .filter(|(_, l)| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| ---"))
        .skip(1) // the header
        .map(|(n, l)| {
            // `\|` inside a cell is not a separator.
            let cells = split_cells(l);
            (*n, cells)
        })
        .collect()
}

fn split_cells(line: &str) -> Vec<&str> {
    let mut cells = Vec::new();
    let bytes = line.as_bytes();
    let mut start = 1;
    for i in 1..bytes.len() {
        if bytes[i] == b'|' && bytes[i - 1] != b'\\' {
            cells.push(line[start..i].trim());
            start = i + 1;
        }
    }
    cells
}

fn report(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{what}: {} mismatch(es) between the docs and the code:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------- config keys

/// Every key path of the configuration file (`server.listen`, `tenants[].limits.max_connections`),
/// sections and arrays of tables included, and which of them are leaves.
fn config_paths() -> (BTreeSet<String>, BTreeSet<String>) {
    let schema = toolmark_config::json_schema();
    let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
    let mut all = BTreeSet::new();
    let mut leaves = BTreeSet::new();
    walk_schema(&schema, &defs, "", &mut all, &mut leaves);
    (all, leaves)
}

fn resolve<'a>(node: &'a Value, defs: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => resolve(&defs[r.trim_start_matches("#/$defs/")], defs),
        None => node,
    }
}

fn walk_schema(
    node: &Value,
    defs: &Value,
    at: &str,
    all: &mut BTreeSet<String>,
    leaves: &mut BTreeSet<String>,
) {
    let node = resolve(node, defs);
    for alt in ["anyOf", "oneOf", "allOf"] {
        if let Some(alts) = node.get(alt).and_then(Value::as_array) {
            for a in alts {
                if a.get("type").and_then(Value::as_str) != Some("null") {
                    walk_schema(a, defs, at, all, leaves);
                }
            }
            return;
        }
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let path = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            all.insert(path.clone());
            walk_schema(v, defs, &path, all, leaves);
        }
        return;
    }
    if let Some(items) = node.get("items")
        && resolve(items, defs).get("properties").is_some()
    {
        let path = format!("{at}[]");
        all.insert(path.clone());
        walk_schema(items, defs, &path, all, leaves);
        return;
    }
    leaves.insert(at.to_owned());
}

/// A doc's spelling of a key as the schema's: `tenants[0].x` → `tenants[].x`, `api_keys[]` →
/// `api_keys` when that is a leaf array.
fn normalize_key(token: &str, leaves: &BTreeSet<String>) -> String {
    let re = Regex::new(r"\[\d+\]").expect("regex");
    let key = re.replace_all(token, "[]").into_owned();
    match key.strip_suffix("[]") {
        Some(k) if leaves.contains(k) => k.to_owned(),
        _ => key,
    }
}

fn looks_like_key(token: &str) -> bool {
    let re = Regex::new(
        r"^(server|broker|worker|mcp|admin|tenants)(\[\d*\])?(\.[a-z_]+(\[\d*\])?)+(\.\*)?$",
    )
    .expect("regex");
    let file = [
        ".rs", ".md", ".json", ".toml", ".yaml", ".py", ".js", ".sh", ".txt", ".html",
    ];
    // OpenTelemetry's MCP semantic conventions share the `mcp.` prefix with the config's
    // section: `mcp.method.name`, `mcp.session.id`, `mcp.server.operation.duration`…
    let otel = [
        "mcp.method.",
        "mcp.session.",
        "mcp.server.",
        "mcp.client.",
        "mcp.protocol.",
    ];
    re.is_match(token)
        && !file.iter().any(|x| token.ends_with(x))
        && !otel.iter().any(|p| token.starts_with(p))
}

/// `TOOLMARK_TENANTS__0__TOKEN_SECRET` → `tenants[].token_secret`.
fn env_to_key(var: &str) -> String {
    let mut key = String::new();
    for part in var.trim_start_matches("TOOLMARK_").split("__") {
        if part.bytes().all(|b| b.is_ascii_digit()) {
            key.push_str("[]");
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(&part.to_ascii_lowercase());
        }
    }
    key
}

/// The key paths of the chart's `values.yaml` (`admin.enabled`): the docs name Helm values in
/// the same dotted form, and some share a first word with a config section.
fn chart_values() -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(root().join("charts/toolmark/values.yaml")).expect("values.yaml");
    let key = Regex::new(r"^( *)([A-Za-z0-9_]+):").expect("regex");
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(c) = key.captures(line) else {
            continue;
        };
        let indent = c[1].len();
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, c[2].to_owned()));
        out.insert(
            stack
                .iter()
                .map(|(_, k)| k.as_str())
                .collect::<Vec<_>>()
                .join("."),
        );
    }
    out
}

#[test]
fn every_config_key_the_docs_name_exists_and_the_reference_lists_every_key() {
    let (all, leaves) = config_paths();
    let values = chart_values();
    assert!(values.contains("admin.enabled"), "values.yaml not read");
    let mut problems = Vec::new();
    for d in docs() {
        for (n, line) in d.lines() {
            for t in backticked(line) {
                if !looks_like_key(t) {
                    continue;
                }
                let key = normalize_key(t.trim_end_matches(".*"), &leaves);
                if !all.contains(&key) && !values.contains(t) {
                    problems.push(format!("{}:{n}: `{t}` is not a configuration key", d.path));
                }
            }
        }
    }
    // The reference table of docs/configuration.md: every key, once per row's first cell.
    let config = doc("docs/configuration.md");
    let mut listed = BTreeSet::new();
    for (n, cells) in table_rows(&config.section("## Keys")) {
        let Some(first) = cells.first() else { continue };
        for t in backticked(first) {
            let key = normalize_key(t, &leaves);
            if !all.contains(&key) {
                problems.push(format!(
                    "docs/configuration.md:{n}: `{t}` is listed but is not a configuration key"
                ));
            }
            listed.insert(key);
        }
    }
    for key in &leaves {
        if !listed.contains(key) {
            problems.push(format!(
                "docs/configuration.md: `{key}` is a configuration key the Keys table does not list"
            ));
        }
    }
    report("config keys", &problems);
}

#[test]
fn the_committed_config_schema_is_the_one_the_types_give() {
    let path = root().join("docs/config.schema.json");
    let want =
        serde_json::to_string_pretty(&toolmark_config::json_schema()).expect("serializable") + "\n";
    if std::env::var_os("UPDATE_CONFIG_SCHEMA").is_some() {
        std::fs::write(&path, &want).expect("writable");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/config.schema.json is not the schema of the config types; regenerate it with \
         UPDATE_CONFIG_SCHEMA=1 cargo test -p toolmark-testkit --test docs"
    );
}

// ---------------------------------------------------------------- environment

/// The product's own sources, where the environment it reads is named.
const PRODUCT_SOURCES: [&str; 10] = [
    "proto/src",
    "config/src",
    "broker/src",
    "store/src",
    "process/src",
    "worker/src",
    "gateway/src",
    "mcp/src",
    "mcp-tools/src",
    "load-tests/loadgen/src",
];

/// Every variable the product reads (outside the config layer's `TOOLMARK_<SECTION>__<KEY>`),
/// or the chart sets, by where it is read.
fn code_env() -> BTreeMap<String, String> {
    let reads = Regex::new(r#"(?:env::var(?:_os)?\(|env = )"([A-Z][A-Z0-9_]+)""#).expect("regex");
    let mut out = BTreeMap::new();
    for dir in PRODUCT_SOURCES {
        for (file, text) in sources(dir, &[".rs"]) {
            for c in reads.captures_iter(&text) {
                out.entry(c[1].to_owned()).or_insert_with(|| file.clone());
            }
            if text.contains("EnvFilter::try_from_default_env") {
                out.entry(tracing_subscriber::EnvFilter::DEFAULT_ENV.to_owned())
                    .or_insert_with(|| file.clone());
            }
        }
    }
    // Build scripts read the build's environment (`TOOLMARK_REVISION`).
    for dir in PRODUCT_SOURCES {
        let script = root().join(dir).with_file_name("build.rs");
        if let Ok(text) = std::fs::read_to_string(&script) {
            for c in reads.captures_iter(&text) {
                out.entry(c[1].to_owned())
                    .or_insert_with(|| script.display().to_string());
            }
        }
    }
    let set = Regex::new(r"(?m)^\s*- name: ([A-Z][A-Z0-9_]+)\s*$").expect("regex");
    for (file, text) in sources("charts/toolmark/templates", &[".yaml", ".tpl"]) {
        for c in set.captures_iter(&text) {
            if !c[1].contains("__") {
                out.entry(c[1].to_owned()).or_insert_with(|| file.clone());
            }
        }
    }
    out
}

#[test]
fn every_environment_variable_the_docs_name_is_read_and_every_one_read_is_documented() {
    let (all, _) = config_paths();
    let code = code_env();
    let named = Regex::new(r"\b((?:TOOLMARK|OTEL|RUST)_[A-Z0-9_]+)").expect("regex");
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for d in docs() {
        for (n, line) in d.lines() {
            for c in named.captures_iter(line) {
                let var = &c[1];
                if var.contains("__") {
                    // A config key: `TOOLMARK_TENANTS__` (a prefix) or a whole key.
                    let key = env_to_key(var.trim_end_matches('_'));
                    if !all.contains(&key) {
                        problems.push(format!(
                            "{}:{n}: `{var}` names no configuration key ({key})",
                            d.path
                        ));
                    }
                } else if code.contains_key(var) {
                    documented.insert(var.to_owned());
                } else {
                    problems.push(format!(
                        "{}:{n}: `{var}` is read by no part of the product",
                        d.path
                    ));
                }
            }
        }
    }
    for (var, file) in &code {
        if !documented.contains(var) {
            problems.push(format!("{file} reads `{var}`, which no document names"));
        }
    }
    report("environment variables", &problems);
}

// ---------------------------------------------------------------- metrics

/// Metric families the processes register, with their types (the gateway's and the jobs').
fn metric_families() -> BTreeMap<String, String> {
    let jobs = toolmark_worker::jobs::JobMetrics::default();
    toolmark_gateway::metrics::Metrics::new()
        .families()
        .into_iter()
        .chain(jobs.families().iter().copied())
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect()
}

/// The sample names a family of that type exposes.
fn sample_names(family: &str, kind: &str) -> Vec<String> {
    let suffixes: &[&str] = match kind {
        "counter" => &["", "_total", "_created"],
        "histogram" => &["", "_bucket", "_sum", "_count", "_created"],
        "info" => &["", "_info"],
        _ => &[""],
    };
    suffixes.iter().map(|s| format!("{family}{s}")).collect()
}

const CRATES: [&str; 11] = [
    "toolmark_gateway",
    "toolmark_store",
    "toolmark_proto",
    "toolmark_config",
    "toolmark_broker",
    "toolmark_process",
    "toolmark_worker",
    "toolmark_mcp",
    "toolmark_mcp_tools",
    "toolmark_testkit",
    "toolmark_loadgen",
];

#[test]
fn every_metric_the_docs_and_the_chart_name_is_registered_and_every_one_registered_is_documented() {
    let families = metric_families();
    assert!(
        families.len() > 10,
        "too few families rendered: {families:?}"
    );
    let exposed: BTreeMap<String, String> = families
        .iter()
        .flat_map(|(f, k)| sample_names(f, k).into_iter().map(move |s| (s, f.clone())))
        .collect();
    let named = Regex::new(r"\b(toolmark_[a-z0-9_]+)\b(::)?").expect("regex");
    // Names that are not the processes' metrics but are the product's: the k6 scripts' own
    // metrics, MCP tool names, functions.
    let mut others = BTreeSet::new();
    for dir in PRODUCT_SOURCES.iter().chain(&["load-tests/k6"]) {
        for (_, text) in sources(dir, &[".rs", ".js"]) {
            others.extend(named.captures_iter(&text).map(|c| c[1].to_owned()));
        }
    }
    let mut problems = Vec::new();
    let mut texts: Vec<(String, String)> = docs().into_iter().map(|d| (d.path, d.text)).collect();
    texts.extend(sources("charts/toolmark", &[".yaml", ".json", ".tpl"]));
    for (path, text) in &texts {
        for (i, line) in text.lines().enumerate() {
            for c in named.captures_iter(line) {
                let name = &c[1];
                if c.get(2).is_some() || CRATES.contains(&name) {
                    continue;
                }
                if !exposed.contains_key(name) && !others.contains(name) {
                    problems.push(format!(
                        "{path}:{}: `{name}` is neither a metric any process registers nor a name in the code",
                        i + 1
                    ));
                }
            }
        }
    }
    let ops = doc("docs/operations.md");
    for (family, kind) in &families {
        if !sample_names(family, kind).iter().any(|s| {
            Regex::new(&format!(r"\b{s}\b"))
                .expect("regex")
                .is_match(&ops.text)
        }) {
            problems.push(format!(
                "docs/operations.md does not document the metric `{family}` ({kind})"
            ));
        }
    }
    report("metrics", &problems);
}

// ---------------------------------------------------------------- endpoints

/// `/v1/tenants/{tenant}/calls/{id}` → `/v1/tenants/{}/calls/{}`.
fn normalize_path(path: &str) -> String {
    let re = Regex::new(r"\{[^}/]*\}|<[^>/]*>|:[a-z_]+").expect("regex");
    re.replace_all(path, "{}").into_owned()
}

/// The endpoints the docs name: `(file:line, METHOD, path)`, from `METHOD /path` in prose and
/// tables, and from `curl -X METHOD "$BASE/path"` in examples.
fn documented_endpoints() -> Vec<(String, String, String)> {
    let prose = Regex::new(
        r"\b(GET|POST|PUT|PATCH|DELETE) +`?((?:https?://[^/\s`]+)?(?:…)?/[^\s`|),\](]*)",
    )
    .expect("regex");
    let curl = Regex::new(r#"-X (GET|POST|PUT|PATCH|DELETE) +"?(?:\$[A-Z_]+|\$\{[A-Z_]+\}|https?://[^/\s"]+)(/[^\s"?]*)"#)
        .expect("regex");
    let mut out = Vec::new();
    for d in docs() {
        for (n, line) in d.lines() {
            for c in prose.captures_iter(line).chain(curl.captures_iter(line)) {
                let mut path = c[2].to_owned();
                if let Some(rest) = path
                    .strip_prefix("http://")
                    .or(path.strip_prefix("https://"))
                {
                    path = rest[rest.find('/').unwrap_or(rest.len())..].to_owned();
                }
                let path = path
                    .split(['?', '#'])
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches(['.', ':', ';', '\''])
                    .to_owned();
                if path.is_empty() || path == "/" {
                    continue;
                }
                out.push((format!("{}:{n}", d.path), c[1].to_owned(), path));
            }
        }
    }
    out
}

/// Whether a documented path (concrete, templated or relative to the agent API's base
/// `/v1/tenants/{tenant}`) names the operation path `op` (templated).
fn names_operation(doc: &str, op: &str) -> bool {
    let same = |doc: &str| {
        let (a, b): (Vec<&str>, Vec<&str>) = (doc.split('/').collect(), op.split('/').collect());
        a.len() == b.len()
            && a.iter()
                .zip(&b)
                .all(|(x, y)| x == y || *x == "{}" || *y == "{}")
    };
    match doc.strip_prefix('…') {
        // `POST …/calls`: some operation's path ends with it.
        Some(suffix) => op.ends_with(suffix) || same(&format!("/v1/tenants/{{}}{suffix}")),
        None => same(doc) || same(&format!("/v1/tenants/{{}}{doc}")),
    }
}

fn openapi_operations() -> BTreeSet<(String, String)> {
    let text =
        std::fs::read_to_string(root().join("docs/openapi.json")).expect("docs/openapi.json");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            out.insert((method.to_ascii_uppercase(), normalize_path(path)));
        }
    }
    out
}

#[tokio::test]
async fn every_endpoint_the_docs_name_is_served_and_every_api_operation_is_documented() {
    let ops = openapi_operations();
    let documented = documented_endpoints();
    assert!(
        documented.len() > 20,
        "too few endpoints found: {documented:?}"
    );

    // A dev-mode gateway for the routes outside the OpenAPI document (ops, sockets, demo).
    let overrides = toolmark_config::Overrides {
        listen: Some("127.0.0.1:0".into()),
        ..Default::default()
    };
    let settings = toolmark_config::Settings::from_file(
        None,
        std::iter::empty::<(String, String)>(),
        &overrides,
    )
    .expect("dev settings");
    let life = toolmark_process::Lifecycle::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(toolmark_gateway::bind_and_run(
        settings,
        life.clone(),
        move |a| {
            let _ = tx.send(a);
        },
    ));
    let addr = tokio::time::timeout(std::time::Duration::from_secs(30), rx)
        .await
        .expect("the gateway listens within 30 s")
        .expect("the gateway listens");
    let http = reqwest::Client::new();

    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (at, method, path) in &documented {
        let norm = normalize_path(path);
        let named: Vec<_> = ops
            .iter()
            .filter(|(m, p)| m == method && names_operation(&norm, p))
            .cloned()
            .collect();
        if !named.is_empty() {
            seen.extend(named);
            continue;
        }
        if norm.starts_with('…') {
            problems.push(format!("{at}: `{method} {path}` matches no operation"));
            continue;
        }
        if norm.starts_with("/admin/") {
            problems.push(format!(
                "{at}: `{method} {path}` is not an admin API operation"
            ));
            continue;
        }
        // Not in the document: the router must know it (not the fallback's 404, not a 405).
        let concrete = norm
            .replacen("/tenants/{}", "/tenants/dev", 1)
            .replace("{}", "x");
        let url = format!("http://{addr}{concrete}");
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let answer = http
            .request(m, &url)
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await;
        let Ok(answer) = answer else {
            problems.push(format!("{at}: `{method} {path}`: no answer"));
            continue;
        };
        let status = answer.status().as_u16();
        let body = answer.text().await.unwrap_or_default();
        if status == 405 || (status == 404 && body.contains("Route not found.")) {
            problems.push(format!(
                "{at}: `{method} {path}` is served by no route ({status})"
            ));
        }
    }
    for (method, path) in &ops {
        if !seen.contains(&(method.clone(), path.clone())) {
            problems.push(format!(
                "the operation `{method} {path}` of docs/openapi.json is named by no document"
            ));
        }
    }
    life.stop();
    let _ = server.await;
    report("endpoints", &problems);
}

// ---------------------------------------------------------------- flags

fn clap_flags(cmd: &clap::Command, out: &mut BTreeSet<String>) {
    for a in cmd.get_arguments() {
        if let Some(l) = a.get_long() {
            out.insert(format!("--{l}"));
        }
    }
    for s in cmd.get_subcommands() {
        clap_flags(s, out);
    }
    out.insert("--help".into());
    if cmd.get_version().is_some() {
        out.insert("--version".into());
    }
}

/// The programs the project ships and the flags each takes.
fn programs() -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let mut f = BTreeSet::new();
    clap_flags(&toolmark_process::cli::GatewayArgs::command(), &mut f);
    out.insert("toolmark-gateway", f);
    let mut f = BTreeSet::new();
    clap_flags(&toolmark_process::cli::WorkerArgs::command(), &mut f);
    out.insert("toolmark-worker", f);
    let mut f = BTreeSet::new();
    clap_flags(&toolmark_loadgen::cli::Cli::command(), &mut f);
    out.insert("toolmark-loadgen", f);
    let flag = Regex::new(r"--[a-z][a-z0-9-]*").expect("regex");
    let help = format!(
        "{}\n{} --help --version",
        toolmark_mcp::cli::USAGE,
        toolmark_mcp::cli::HELP_DETAILS
    );
    out.insert(
        "toolmark-mcp",
        flag.find_iter(&help)
            .map(|m| m.as_str().to_owned())
            .collect(),
    );
    out
}

/// Programs of others that the docs show with their own flags.
const OTHER_PROGRAMS: [&str; 18] = [
    "cargo",
    "helm",
    "kubectl",
    "docker",
    "podman",
    "redis-server",
    "redis-cli",
    "curl",
    "npx",
    "npm",
    "pip",
    "python3",
    "k6",
    "git",
    "openssl",
    "buildah",
    "make",
    "perf",
];

/// Whose flag follows `prefix` (the line up to the flag): the first program named in the last
/// command of the line (after `|`, `&&`, `;`); after ` -- `, the program `cargo run` runs,
/// while `cargo test -- …` flags are the test harness's (another's).
fn program_of(prefix: &str, programs: &BTreeMap<&'static str, BTreeSet<String>>) -> Option<String> {
    let word = Regex::new(r"[A-Za-z0-9_.-]+").expect("regex");
    let known = |w: &str| programs.contains_key(w) || OTHER_PROGRAMS.contains(&w);
    // A command substitution (`$(printf … | sha256sum)`) is part of its command's argument.
    let prefix = Regex::new(r"\$\([^()]*\)")
        .expect("regex")
        .replace_all(prefix, "x");
    let prefix = prefix.as_ref();
    let command = prefix.rsplit(['|', ';']).next().unwrap_or(prefix);
    let command = command.rsplit("&&").next().unwrap_or(command);
    let mut parts = command.splitn(2, " -- ");
    let before = parts.next().unwrap_or_default();
    let first = word
        .find_iter(before)
        .map(|w| w.as_str())
        .find(|w| known(w))?;
    if parts.next().is_some() && first == "cargo" && before.contains("cargo run") {
        let run = Regex::new(r"(?:-p|--package|--bin) +([A-Za-z0-9_-]+)").expect("regex");
        return run
            .captures_iter(before)
            .map(|c| c[1].to_owned())
            .find(|p| programs.contains_key(p.as_str()));
    }
    Some(first.to_owned())
}

#[test]
fn every_flag_the_docs_give_our_programs_exists_and_every_flag_is_documented() {
    let programs = programs();
    let any: BTreeSet<&String> = programs.values().flatten().collect();
    let flag = Regex::new(r"(?:^|[\s`\[(|])(--[a-z][a-z0-9-]*)").expect("regex");
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for d in docs() {
        for (n, line) in d.logical_lines() {
            for c in flag.captures_iter(&line) {
                let m = c.get(1).expect("group");
                let program = program_of(&line[..m.start()], &programs);
                let name = m.as_str().to_owned();
                match program {
                    Some(p) if OTHER_PROGRAMS.contains(&p.as_str()) => {}
                    Some(p) => {
                        if programs[p.as_str()].contains(&name) {
                            documented.insert((p, name));
                        } else {
                            problems.push(format!("{}:{n}: {p} has no flag `{name}`", d.path));
                        }
                    }
                    None => {
                        if any.contains(&name) {
                            for (p, flags) in &programs {
                                if flags.contains(&name) {
                                    documented.insert(((*p).to_owned(), name.clone()));
                                }
                            }
                        } else {
                            problems.push(format!(
                                "{}:{n}: `{name}` is a flag of none of our programs (name the program on the line if it is another's)",
                                d.path
                            ));
                        }
                    }
                }
            }
        }
    }
    // The shipped programs' flags are all documented; the load generator documents itself
    // through `--help` (each scenario's flags with their defaults).
    for (p, flags) in &programs {
        if *p == "toolmark-loadgen" {
            continue;
        }
        for f in flags {
            if !documented.contains(&((*p).to_owned(), f.clone())) {
                problems.push(format!("{p} takes `{f}`, which no document names"));
            }
        }
    }
    report("flags", &problems);
}

// ---------------------------------------------------------------- close codes

fn codes_of_table(file: &str, heading: &str) -> (BTreeSet<u16>, Vec<String>) {
    let d = doc(file);
    let mut codes = BTreeSet::new();
    let mut problems = Vec::new();
    for (n, cells) in table_rows(&d.section(heading)) {
        let cell = cells.first().copied().unwrap_or_default().trim_matches('`');
        match cell.parse::<u16>() {
            Ok(c) => {
                codes.insert(c);
            }
            Err(_) => problems.push(format!("{file}:{n}: `{cell}` is not a close code")),
        }
    }
    (codes, problems)
}

#[test]
fn every_close_code_the_docs_name_is_sent_and_each_table_lists_exactly_the_codes_sent() {
    let page: BTreeSet<u16> = toolmark_gateway::close::ALL.into_iter().collect();
    let pusher: BTreeSet<u16> = toolmark_gateway::pusher::protocol::code::ALL
        .into_iter()
        .collect();
    let pairing: BTreeSet<u16> = toolmark_mcp::close::ALL.into_iter().collect();
    let mut problems = Vec::new();
    for (file, heading, want) in [
        ("docs/operations.md", "### Close codes", &page),
        ("docs/laravel.md", "## `pusher:error` codes", &pusher),
        (
            "docs/desktop-mcp.md",
            "### Close codes (server → page)",
            &pairing,
        ),
    ] {
        let (have, mut p) = codes_of_table(file, heading);
        problems.append(&mut p);
        for c in want.difference(&have) {
            problems.push(format!(
                "{file} {heading:?}: the code sends {c}, the table lacks it"
            ));
        }
        for c in have.difference(want) {
            problems.push(format!("{file} {heading:?}: {c} is listed but never sent"));
        }
    }
    // Anywhere else: a close code named in a sentence about closing is one of them.
    let known: BTreeSet<u16> = page
        .iter()
        .chain(&pusher)
        .chain(&pairing)
        .copied()
        .collect();
    let near = Regex::new(
        r"(?i)\bclos(?:e|es|ed|ing)\b[^.|;]{0,40}?`?\b(10[01][0-9]|4[0-9]{3})\b|\b(10[01][0-9]|4[0-9]{3})\b`?\s+close",
    )
    .expect("regex");
    for d in docs() {
        for (n, line) in d.lines() {
            for c in near.captures_iter(line) {
                let code: u16 = c
                    .get(1)
                    .or(c.get(2))
                    .expect("a group")
                    .as_str()
                    .parse()
                    .expect("digits");
                // 1000 (normal closure) is the WebSocket's own, answered, never chosen.
                if code != 1000 && !known.contains(&code) {
                    problems.push(format!(
                        "{}:{n}: close code {code} is sent by nothing",
                        d.path
                    ));
                }
            }
        }
    }
    report("close codes", &problems);
}

// ---------------------------------------------------------------- tests named by the security map

#[test]
fn every_test_the_security_map_names_exists() {
    let named = Regex::new(r"^[a-z][a-z0-9_]*(::[a-z][a-z0-9_]*)+$").expect("regex");
    let mut functions = BTreeSet::new();
    let def = Regex::new(r"\b(?:fn|mod) ([a-z][a-z0-9_]*)").expect("regex");
    for dir in [
        "proto",
        "policy",
        "config",
        "broker",
        "store",
        "process",
        "worker",
        "gateway",
        "mcp",
        "mcp-tools",
        "testkit",
        "load-tests/loadgen",
        "fuzz",
    ] {
        for (file, text) in sources(dir, &[".rs"]) {
            if file.contains("/target/") {
                continue;
            }
            functions.extend(def.captures_iter(&text).map(|c| c[1].to_owned()));
        }
    }
    let security = doc("docs/security.md");
    let mut problems = Vec::new();
    let mut checked = 0;
    for (n, line) in security.lines() {
        for t in backticked(line) {
            if !named.is_match(t) {
                continue;
            }
            checked += 1;
            let name = t.rsplit("::").next().unwrap_or(t);
            if !functions.contains(name) {
                problems.push(format!(
                    "docs/security.md:{n}: `{t}` names no function or module of the code"
                ));
            }
        }
    }
    assert!(checked > 40, "too few test names found: {checked}");
    report("tests named by docs/security.md", &problems);
}

// ---------------------------------------------------------------- versions

#[test]
fn the_chart_and_the_changelog_follow_the_workspace_version() {
    let version = toolmark_process::VERSION;
    let chart =
        std::fs::read_to_string(root().join("charts/toolmark/Chart.yaml")).expect("Chart.yaml");
    let field = |name: &str| {
        chart
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().trim_matches('"').to_owned())
            .unwrap_or_default()
    };
    assert_eq!(field("appVersion"), version, "Chart.yaml appVersion");
    assert_eq!(field("version"), version, "Chart.yaml version");
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).expect("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("\n## [{version}]")),
        "CHANGELOG.md has no section for {version}"
    );
}
