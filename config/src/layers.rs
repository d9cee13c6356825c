//! The layers of a configuration: defaults, then the TOML file, then `TOOLMARK_SECTION__KEY`
//! environment variables, then command-line flags. The result is parsed into [`Settings`].

use std::path::Path;

use crate::{BrokerKind, Config, ConfigError, Settings};

/// Flags that override the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`
    pub listen: Option<String>,
    /// `--redis`
    pub redis: Option<String>,
    /// `--node-id`
    pub node_id: Option<String>,
    /// `--admin-listen` (gateway only)
    pub admin_listen: Option<String>,
}

impl Settings {
    /// Reads the file at `path` (dev mode when `None`), applies `env` and the flags, and parses
    /// the result.
    pub fn from_file(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &Overrides,
    ) -> Result<Settings, ConfigError> {
        match path {
            None => Settings::dev(env, overrides),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::new("config", format!("cannot read {}: {e}", path.display()))
                })?;
                Settings::load(&text, env, overrides)
            }
        }
    }

    /// Parses a TOML document, applies `env` (`TOOLMARK_SECTION__KEY=value` pairs) and flags,
    /// and parses the result into settings.
    pub fn load(
        toml_text: &str,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &Overrides,
    ) -> Result<Settings, ConfigError> {
        let table: toml::Table = toml::from_str(toml_text)
            .map_err(|e| ConfigError::new("config", e.message().to_owned()))?;
        layered(table, env, overrides, false)?.parse()
    }

    /// Dev mode (no `--config`): loopback `127.0.0.1:8080`, memory broker; the `dev` tenant is
    /// added once the listener is bound. Environment and flags still apply.
    pub fn dev(
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &Overrides,
    ) -> Result<Settings, ConfigError> {
        let mut server = toml::Table::new();
        server.insert(
            "listen".into(),
            toml::Value::String("127.0.0.1:8080".into()),
        );
        let mut table = toml::Table::new();
        table.insert("server".into(), toml::Value::Table(server));
        layered(table, env, overrides, true)?.parse()
    }
}

/// The file's table with the environment and the flags applied, deserialized.
fn layered(
    mut table: toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
    overrides: &Overrides,
    dev_mode: bool,
) -> Result<Config, ConfigError> {
    apply_env(&mut table, env)?;
    let mut config: Config =
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let key = e.path().to_string();
            ConfigError::new(
                if key == "." { "config".into() } else { key },
                e.into_inner().message().to_owned(),
            )
        })?;
    config.dev_mode = dev_mode;
    if let Some(listen) = &overrides.listen {
        config.server.listen.clone_from(listen);
    }
    if let Some(url) = &overrides.redis {
        config.broker.kind = BrokerKind::Redis;
        config.broker.url = Some(url.clone());
    }
    if let Some(id) = &overrides.node_id {
        config.server.node_id = Some(id.clone());
    }
    config.admin_listen.clone_from(&overrides.admin_listen);
    Ok(config)
}

/// Applies `TOOLMARK_A__B__C=value` pairs: path segments are lowercased; a numeric segment
/// indexes an array (`TOOLMARK_TENANTS__0__TOKEN_SECRET`). Values parse as TOML when they can
/// (`5000`, `true`, `["a"]`), else they are strings.
fn apply_env(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    for (name, raw) in env {
        // Only TOOLMARK_SECTION__KEY names are configuration; others (e.g. TOOLMARK_LOG_FORMAT)
        // belong to the process.
        let Some(rest) = name.strip_prefix("TOOLMARK_").filter(|r| r.contains("__")) else {
            continue;
        };
        let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        let key = path.join(".");
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::new(
                name,
                "malformed variable name (use TOOLMARK_SECTION__KEY)",
            ));
        }
        let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or(toml::Value::String(raw));
        set_path(table, &path, value).map_err(|e| ConfigError::new(key, e.to_string()))?;
    }
    Ok(())
}

/// Why an environment variable's path does not fit the file's shape.
#[derive(Debug, thiserror::Error)]
enum PathError {
    #[error("empty key")]
    Empty,
    #[error("{0:?} is not an array index")]
    NotAnIndex(String),
    #[error("index {index} skips entries (the array has {len})")]
    Skips { index: usize, len: usize },
    #[error("is not a table")]
    NotATable,
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), PathError> {
    let (first, rest) = path.split_first().ok_or(PathError::Empty)?;
    if rest.is_empty() {
        table.insert(first.clone(), value);
        return Ok(());
    }
    let child = table.entry(first.clone()).or_insert_with(|| {
        if rest[0].parse::<usize>().is_ok() {
            toml::Value::Array(Vec::new())
        } else {
            toml::Value::Table(toml::Table::new())
        }
    });
    set_in_value(child, rest, value)
}

fn set_in_value(
    node: &mut toml::Value,
    path: &[String],
    value: toml::Value,
) -> Result<(), PathError> {
    match node {
        toml::Value::Table(t) => set_path(t, path, value),
        toml::Value::Array(items) => {
            let (first, rest) = path.split_first().ok_or(PathError::Empty)?;
            let index: usize = first
                .parse()
                .map_err(|_| PathError::NotAnIndex(first.clone()))?;
            if index > items.len() {
                return Err(PathError::Skips {
                    index,
                    len: items.len(),
                });
            }
            if index == items.len() {
                items.push(toml::Value::Table(toml::Table::new()));
            }
            if rest.is_empty() {
                items[index] = value;
                Ok(())
            } else {
                set_in_value(&mut items[index], rest, value)
            }
        }
        _ => Err(PathError::NotATable),
    }
}
