//! Why an inbound message was refused. Each error maps to a stable metrics label; the
//! protocol says refused messages are dropped and never answered, so none of these reach a peer.

/// The reason label of a refused inbound message (`toolmark_inbound_rejected_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    /// Serialized size over the configured byte limit.
    TooLarge,
    /// Nesting depth over [`crate::MAX_DEPTH`].
    TooDeep,
    /// Not JSON, or not UTF-8.
    Malformed,
    /// `protocol` is not 1.
    UnsupportedProtocol,
    /// A valid message type of the other direction.
    WrongDirection,
    /// Any other shape error.
    Invalid,
}

impl RejectReason {
    /// Every reason, for pre-registering metric series.
    pub const ALL: &'static [RejectReason] = &[
        RejectReason::TooLarge,
        RejectReason::TooDeep,
        RejectReason::Malformed,
        RejectReason::UnsupportedProtocol,
        RejectReason::WrongDirection,
        RejectReason::Invalid,
    ];

    /// The metrics label.
    pub const fn as_str(self) -> &'static str {
        match self {
            RejectReason::TooLarge => "too_large",
            RejectReason::TooDeep => "too_deep",
            RejectReason::Malformed => "malformed",
            RejectReason::UnsupportedProtocol => "unsupported_protocol",
            RejectReason::WrongDirection => "wrong_direction",
            RejectReason::Invalid => "invalid",
        }
    }
}

/// Why [`crate::decode`] or [`crate::validate`] refused a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The serialized message is larger than the limit.
    #[error("message is {size} bytes, over the limit of {limit}")]
    TooLarge {
        /// Size in UTF-8 bytes.
        size: usize,
        /// The limit that applied.
        limit: usize,
    },
    /// The message nests deeper than the limit.
    #[error("message nests deeper than {limit} levels")]
    TooDeep {
        /// The limit that applied.
        limit: usize,
    },
    /// Not a JSON document.
    #[error("message is not valid JSON: {0}")]
    Malformed(String),
    /// `protocol` is missing or not 1.
    #[error("unsupported protocol (expected 1)")]
    UnsupportedProtocol,
    /// A message type that travels in the other direction.
    #[error("message type {kind:?} does not travel in this direction")]
    WrongDirection {
        /// The `type` found.
        kind: String,
    },
    /// A shape error at a JSON pointer.
    #[error("invalid message at {pointer:?}: {reason}")]
    Invalid {
        /// RFC 6901 pointer of the offending value ("" is the whole message).
        pointer: String,
        /// What is wrong there.
        reason: String,
    },
}

impl DecodeError {
    /// The metrics label of this refusal.
    pub fn reason(&self) -> RejectReason {
        match self {
            DecodeError::TooLarge { .. } => RejectReason::TooLarge,
            DecodeError::TooDeep { .. } => RejectReason::TooDeep,
            DecodeError::Malformed(_) => RejectReason::Malformed,
            DecodeError::UnsupportedProtocol => RejectReason::UnsupportedProtocol,
            DecodeError::WrongDirection { .. } => RejectReason::WrongDirection,
            DecodeError::Invalid { .. } => RejectReason::Invalid,
        }
    }

    /// The JSON pointer of the offending value, when the error has one.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            DecodeError::Invalid { pointer, .. } => Some(pointer),
            _ => None,
        }
    }
}
