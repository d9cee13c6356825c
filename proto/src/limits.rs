//! Inbound limits of the seed, checked on the raw bytes before any value tree is built, so a
//! huge or deeply nested frame costs at most one bounded scan.

use crate::DecodeError;

/// Default `maxMessageBytes`: serialized size of one message in UTF-8 bytes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_048_576;
/// Maximum nesting depth of arrays and objects (the message object itself is level 1).
pub const MAX_DEPTH: usize = 64;

/// The limits applied to every inbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted message in bytes.
    pub max_bytes: usize,
    /// Deepest accepted nesting of arrays and objects.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_depth: MAX_DEPTH,
        }
    }
}

impl Limits {
    /// Limits with a custom byte limit and the protocol's depth limit.
    pub const fn with_max_bytes(max_bytes: usize) -> Self {
        Limits {
            max_bytes,
            max_depth: MAX_DEPTH,
        }
    }
}

/// Refuses `raw` if it is larger than `limits.max_bytes` or nests deeper than
/// `limits.max_depth`. The size check is O(1); the depth scan stops at the first level past the
/// limit and allocates nothing. Brackets inside strings do not count. The scan does not check
/// that `raw` is JSON; the parser that follows does.
pub fn check_limits(raw: &[u8], limits: &Limits) -> Result<(), DecodeError> {
    if raw.len() > limits.max_bytes {
        return Err(DecodeError::TooLarge {
            size: raw.len(),
            limit: limits.max_bytes,
        });
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in raw {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limits.max_depth {
                    return Err(DecodeError::TooDeep {
                        limit: limits.max_depth,
                    });
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn depth_at_the_limit_passes_and_one_more_fails() {
        let limits = Limits::default();
        assert_eq!(check_limits(nested(64).as_bytes(), &limits), Ok(()));
        assert_eq!(
            check_limits(nested(65).as_bytes(), &limits),
            Err(DecodeError::TooDeep { limit: 64 })
        );
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        let s = format!(r#"{{"a":"{}\"{}"}}"#, "[".repeat(100), "{".repeat(100));
        assert_eq!(check_limits(s.as_bytes(), &Limits::default()), Ok(()));
    }

    #[test]
    fn size_is_checked_in_bytes_not_characters() {
        let limits = Limits::with_max_bytes(10);
        assert!(check_limits("\"ééééé\"".as_bytes(), &limits).is_err()); // 12 bytes, 7 chars
        assert!(check_limits(b"\"abcdefgh\"", &limits).is_ok()); // exactly 10 bytes
    }
}
