//! Pinned tool definitions (contract, fourth wave, "Only the tools the tenant shipped"): a
//! tenant lists the `{name, digest}` of the tools it ships (`toolmark_proto::pin::digest`),
//! and a mode says what happens to a tool a page presents that is not in the list: `off`
//! (nothing), `report` (shown, marked `"pinned": false`, announced by `tool.unpinned`) or
//! `enforce` (hidden from every listing, a call or describe of it refused with 403
//! `tool_not_pinned` before the page receives anything). The same shape in the config file
//! (`tenants[].tools`), the admin API (`PUT /admin/v1/tenants/{id}/tools`) and the stored
//! record.

use std::collections::{BTreeMap, BTreeSet};

use toolmark_proto::pin::Digest;

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// What happens to a tool whose definition is not pinned.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PinMode {
    /// Nothing: every tool a page presents is served.
    #[default]
    Off,
    /// Served, marked and announced.
    Report,
    /// Hidden and refused.
    Enforce,
}

/// One pinned definition.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct PinnedTool {
    /// The tool's name.
    pub name: String,
    /// `sha256:` + 64 lower-case hex digits.
    pub digest: String,
}

/// A tenant's pins as written (config file, admin API, stored record).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PinsConfig {
    /// `off` (default), `report` or `enforce`.
    #[serde(default)]
    pub mode: PinMode,
    /// The pinned definitions; a name may be pinned with several digests (two releases of
    /// the app during its own deploy).
    #[serde(default)]
    pub tools: Vec<PinnedTool>,
}

/// At most this many pinned definitions per tenant.
pub const MAX_PINS: usize = 1_000;

impl PinsConfig {
    /// Whether nothing is pinned and nothing checked (what a record omits).
    pub fn is_off(&self) -> bool {
        self.mode == PinMode::Off && self.tools.is_empty()
    }

    /// Checks every entry; errors name `at.tools[j].digest` and the like.
    pub fn parse(&self, at: &str) -> Result<Pins, ConfigError> {
        if self.tools.len() > MAX_PINS {
            return Err(ConfigError::new(
                format!("{at}.tools"),
                format!("at most {MAX_PINS} pinned definitions"),
            ));
        }
        let mut pinned: BTreeMap<String, BTreeSet<Digest>> = BTreeMap::new();
        for (j, t) in self.tools.iter().enumerate() {
            if !toolmark_proto::is_valid_tool_name(&t.name) {
                return Err(ConfigError::new(
                    format!("{at}.tools[{j}].name"),
                    "a tool name: ^[A-Za-z0-9_.-]{1,128}$",
                ));
            }
            let Some(digest) = Digest::parse(&t.digest) else {
                return Err(ConfigError::new(
                    format!("{at}.tools[{j}].digest"),
                    "\"sha256:\" followed by 64 lower-case hex digits",
                ));
            };
            pinned.entry(t.name.clone()).or_default().insert(digest);
        }
        Ok(Pins {
            mode: self.mode,
            pinned,
        })
    }
}

/// A tenant's pins, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    /// The mode.
    pub mode: PinMode,
    /// The digests pinned for each name.
    pub pinned: BTreeMap<String, BTreeSet<Digest>>,
}

impl Pins {
    /// Whether the definition `digest` of `name` is pinned.
    pub fn holds(&self, name: &str, digest: Digest) -> bool {
        self.pinned.get(name).is_some_and(|d| d.contains(&digest))
    }

    /// Whether a tool of this definition is served: always, but in `enforce` only pinned.
    pub fn admits(&self, name: &str, digest: Option<Digest>) -> bool {
        self.mode != PinMode::Enforce || digest.is_some_and(|d| self.holds(name, d))
    }

    /// As written (the admin API's answer).
    pub fn config(&self) -> PinsConfig {
        PinsConfig {
            mode: self.mode,
            tools: self
                .pinned
                .iter()
                .flat_map(|(name, digests)| {
                    digests.iter().map(|d| PinnedTool {
                        name: name.clone(),
                        digest: d.to_string(),
                    })
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn pins_are_checked_and_enforce_admits_only_what_is_pinned() {
        let c = PinsConfig {
            mode: PinMode::Enforce,
            tools: vec![PinnedTool {
                name: "cart.add".into(),
                digest: D.into(),
            }],
        };
        let p = c.parse("tenants[0].tools").unwrap();
        let d = Digest::parse(D).unwrap();
        assert!(p.admits("cart.add", Some(d)));
        assert!(!p.admits("cart.add", Digest::parse(&D.replace('0', "1"))));
        assert!(!p.admits("debug.exfiltrate", Some(d)));
        assert!(!p.admits("cart.add", None));
        assert_eq!(p.config(), c, "written back as given");
        let report = PinsConfig {
            mode: PinMode::Report,
            ..c.clone()
        }
        .parse("t")
        .unwrap();
        assert!(
            report.admits("debug.exfiltrate", None),
            "report serves everything"
        );
        let bad = PinsConfig {
            tools: vec![PinnedTool {
                name: "cart.add".into(),
                digest: "sha256:ABC".into(),
            }],
            ..c
        };
        assert_eq!(
            bad.parse("tenants[0].tools").unwrap_err().key,
            "tenants[0].tools.tools[0].digest"
        );
    }
}
