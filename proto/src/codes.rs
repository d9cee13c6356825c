//! The seed's code lists (section "Codes (M1)") as enums with their exact wire strings.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Defines a closed set of wire strings: `as_str`, `ALL`, `FromStr`, `Display` and serde.
macro_rules! wire_strings {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in the seed's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The exact string on the wire.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),+ }
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownCode;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s { $($wire => Ok($name::$variant),)+ _ => Err(UnknownCode) }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(|_| serde::de::Error::custom(format!(
                    concat!("unknown ", stringify!($name), " {:?}"), s)))
            }
        }
    };
}

/// A string that is not one of the enum's wire strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown code")]
pub struct UnknownCode;

wire_strings! {
    /// `code` of a `refused` tool result.
    RefusedCode {
        /// No such tool, or not visible (carries the current rev).
        UnknownTool => "unknown_tool",
        /// The call's rev is out of date and the tool is gone, or a form changed before approval.
        Stale => "stale",
        /// The caller's policy does not allow this tool.
        NotAllowed => "not_allowed",
        /// The tool's scope already has 32 pending calls.
        Busy => "busy",
        /// `tm.undo(callId)` found no restorer.
        UndoUnavailable => "undo_unavailable",
        /// The confirmId expired, was already used, or was evicted.
        ConfirmationExpired => "confirmation_expired",
    }
}

impl RefusedCode {
    /// Whether a `refused` result with this code may carry `rev` (only `unknown_tool`, `stale`).
    pub const fn carries_rev(self) -> bool {
        matches!(self, RefusedCode::UnknownTool | RefusedCode::Stale)
    }
}

wire_strings! {
    /// `by` of a `cancelled` tool result.
    CancelledBy {
        /// A human rejected.
        Operator => "operator",
        /// Aborted: a protocol `cancel`, or the abort grace period elapsed.
        Signal => "signal",
        /// Cancelled by policy.
        Policy => "policy",
    }
}

wire_strings! {
    /// Page-side error event codes (`tm.events.on('error')`); never on the wire, listed so that
    /// logs and docs use the same strings.
    ErrorEventCode {
        DuplicateName => "duplicate_name",
        InvalidName => "invalid_name",
        InvalidScope => "invalid_scope",
        MissingConfirmHandler => "missing_confirm_handler",
        SchemaConversionFailed => "schema_conversion_failed",
        ToolThrew => "tool_threw",
        OutputInvalid => "output_invalid",
        TransportFailed => "transport_failed",
        ToolBudgetExceeded => "tool_budget_exceeded",
        CtxConfirmUnavailable => "ctx_confirm_unavailable",
        InvalidConfirmMode => "invalid_confirm_mode",
        InvalidPolicy => "invalid_policy",
        LateResult => "late_result",
        InvalidMessage => "invalid_message",
        ScopeDisposed => "scope_disposed",
    }
}

wire_strings! {
    /// `ToolmarkError` codes, thrown page-side only.
    ToolmarkErrorCode {
        InvalidPath => "invalid_path",
        FilesNotConfigured => "files_not_configured",
    }
}

wire_strings! {
    /// The bridge's generic `error` result messages.
    BridgeErrorMessage {
        /// Answer to a message whose `protocol` is not 1 (rule 4).
        UnsupportedProtocol => "unsupported protocol",
        /// A tool's run, validator, summary or snapshot threw.
        ToolFailed => "Tool failed",
        /// The result was not JSON-safe.
        ResultNotSerializable => "Result not serializable",
    }
}

/// Message of `refused confirmation_expired` in a `confirmed`.
pub const CONFIRMATION_EXPIRED_MESSAGE: &str = "The confirmation expired or was already used";
/// Message of `refused stale` for a form submit approved after the form changed.
pub const FORM_CHANGED_MESSAGE: &str = "Form changed since confirmation was requested";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_round_trip_and_unknowns_fail() {
        for code in RefusedCode::ALL {
            assert_eq!(code.as_str().parse::<RefusedCode>(), Ok(*code));
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(serde_json::from_str::<RefusedCode>(&json).unwrap(), *code);
        }
        assert_eq!(RefusedCode::ALL.len(), 6);
        assert_eq!(ErrorEventCode::ALL.len(), 15);
        assert!("Unknown_Tool".parse::<RefusedCode>().is_err());
        assert!(serde_json::from_str::<CancelledBy>("\"human\"").is_err());
        assert_eq!(
            BridgeErrorMessage::UnsupportedProtocol.as_str(),
            "unsupported protocol"
        );
    }

    #[test]
    fn only_unknown_tool_and_stale_carry_rev() {
        let carrying: Vec<_> = RefusedCode::ALL
            .iter()
            .filter(|c| c.carries_rev())
            .collect();
        assert_eq!(carrying, [&RefusedCode::UnknownTool, &RefusedCode::Stale]);
    }
}
