//! Small helpers for walking an untrusted `serde_json::Value` into typed values, moving
//! sub-values out instead of cloning them and building a JSON pointer only when refusing.

use serde_json::{Map, Number, Value};

use crate::DecodeError;

/// Longest id (`clientId`, call `id`, `confirmId`) in characters.
pub(crate) const MAX_ID_CHARS: usize = 128;
/// Largest `rev`: the largest integer a JavaScript page can represent exactly.
pub(crate) const MAX_REV: u64 = 9_007_199_254_740_991;

#[derive(Clone, Copy)]
enum Seg<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

/// A position in the message being validated, as a linked list up to the root.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    parent: Option<&'a At<'a>>,
    seg: Seg<'a>,
}

pub(crate) const ROOT: At<'static> = At {
    parent: None,
    seg: Seg::Root,
};

impl<'a> At<'a> {
    pub(crate) fn key(&'a self, key: &'a str) -> At<'a> {
        At {
            parent: Some(self),
            seg: Seg::Key(key),
        }
    }

    pub(crate) fn index(&'a self, index: usize) -> At<'a> {
        At {
            parent: Some(self),
            seg: Seg::Index(index),
        }
    }

    /// The RFC 6901 pointer of this position.
    pub(crate) fn pointer(&self) -> String {
        let mut segs = Vec::new();
        let mut at = Some(self);
        while let Some(a) = at {
            segs.push(a.seg);
            at = a.parent;
        }
        let mut out = String::new();
        for seg in segs.iter().rev() {
            match seg {
                Seg::Root => {}
                Seg::Key(k) => {
                    out.push('/');
                    out.push_str(&k.replace('~', "~0").replace('/', "~1"));
                }
                Seg::Index(i) => {
                    out.push('/');
                    out.push_str(&i.to_string());
                }
            }
        }
        out
    }

    pub(crate) fn err(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError::Invalid {
            pointer: self.pointer(),
            reason: reason.into(),
        }
    }
}

/// A JSON integer in `0..=MAX_REV`; like JSON Schema's `integer`, `7.0` counts.
pub(crate) fn as_rev(v: &Value) -> Option<u64> {
    let n = v.as_number()?;
    if let Some(u) = n.as_u64() {
        return (u <= MAX_REV).then_some(u);
    }
    let f = n.as_f64()?;
    // Exact integer-valued floats in range convert losslessly; the cast cannot truncate here.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    ((f.fract() == 0.0) && (0.0..=MAX_REV as f64).contains(&f)).then_some(f as u64)
}

/// Whether `s` is an id: 1 to 128 characters.
pub(crate) fn is_id(s: &str) -> bool {
    !s.is_empty() && (s.len() <= MAX_ID_CHARS || s.chars().count() <= MAX_ID_CHARS)
}

/// Whether `v` is the number 1 (`1` or `1.0`, as JSON Schema's `const: 1` compares).
pub(crate) fn is_one(v: &Value) -> bool {
    v.as_number().is_some_and(number_is_one)
}

/// [`is_one`] for a number already read.
pub(crate) fn number_is_one(n: &Number) -> bool {
    n.as_u64() == Some(1) || n.as_f64() == Some(1.0)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An object being taken apart field by field.
pub(crate) struct Obj<'a> {
    map: Map<String, Value>,
    at: &'a At<'a>,
}

impl<'a> Obj<'a> {
    pub(crate) fn new(v: Value, at: &'a At<'a>) -> Result<Self, DecodeError> {
        match v {
            Value::Object(map) => Ok(Obj { map, at }),
            other => Err(at.err(format!("expected object, found {}", kind(&other)))),
        }
    }

    pub(crate) fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    pub(crate) fn required(&mut self, key: &'static str) -> Result<Value, DecodeError> {
        self.take(key)
            .ok_or_else(|| self.at.key(key).err("missing required property"))
    }

    pub(crate) fn string(&mut self, key: &'static str) -> Result<String, DecodeError> {
        let v = self.required(key)?;
        into_string(v, &self.at.key(key))
    }

    pub(crate) fn opt_string(&mut self, key: &'static str) -> Result<Option<String>, DecodeError> {
        self.take(key)
            .map(|v| into_string(v, &self.at.key(key)))
            .transpose()
    }

    /// A required id: a string of 1 to 128 characters.
    pub(crate) fn id(&mut self, key: &'static str) -> Result<String, DecodeError> {
        let s = self.string(key)?;
        if !is_id(&s) {
            return Err(self
                .at
                .key(key)
                .err("expected a string of 1 to 128 characters"));
        }
        Ok(s)
    }

    pub(crate) fn rev(&mut self, key: &'static str) -> Result<u64, DecodeError> {
        let v = self.required(key)?;
        as_rev(&v).ok_or_else(|| self.at.key(key).err("expected an integer from 0 to 2^53-1"))
    }

    pub(crate) fn opt_rev(&mut self, key: &'static str) -> Result<Option<u64>, DecodeError> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => as_rev(&v)
                .map(Some)
                .ok_or_else(|| self.at.key(key).err("expected an integer from 0 to 2^53-1")),
        }
    }

    pub(crate) fn opt_bool(&mut self, key: &'static str) -> Result<Option<bool>, DecodeError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => Err(self
                .at
                .key(key)
                .err(format!("expected boolean, found {}", kind(&other)))),
        }
    }

    /// A required array, handed out with the position of each element.
    pub(crate) fn array(&mut self, key: &'static str) -> Result<Vec<Value>, DecodeError> {
        match self.required(key)? {
            Value::Array(items) => Ok(items),
            other => Err(self
                .at
                .key(key)
                .err(format!("expected array, found {}", kind(&other)))),
        }
    }

    pub(crate) fn opt_array(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Vec<Value>>, DecodeError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(self
                .at
                .key(key)
                .err(format!("expected array, found {}", kind(&other)))),
        }
    }

    /// Ends a strict object: any property left over is refused.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(k) => Err(self.at.key(k).err("unknown property")),
        }
    }

    /// Ends an open object: properties left over are kept for forward compatibility.
    pub(crate) fn rest(self) -> Map<String, Value> {
        self.map
    }
}

pub(crate) fn into_string(v: Value, at: &At<'_>) -> Result<String, DecodeError> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(at.err(format!("expected string, found {}", kind(&other)))),
    }
}

/// Serde helper: keeps an explicit `null` as `Some(Value::Null)`, so that absent ("no value")
/// and `null` stay distinct through a round trip.
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_escape_per_rfc_6901() {
        let a = ROOT.key("tools");
        let b = a.index(3);
        let c = b.key("a/b~c");
        assert_eq!(c.pointer(), "/tools/3/a~1b~0c");
        assert_eq!(ROOT.pointer(), "");
    }

    #[test]
    fn revs_follow_json_schema_integers() {
        assert_eq!(as_rev(&json!(7)), Some(7));
        assert_eq!(as_rev(&json!(7.0)), Some(7));
        assert_eq!(as_rev(&json!(7.5)), None);
        assert_eq!(as_rev(&json!(-1)), None);
        assert_eq!(as_rev(&json!(MAX_REV)), Some(MAX_REV));
        assert_eq!(as_rev(&json!(MAX_REV + 1)), None);
        assert_eq!(as_rev(&json!("7")), None);
    }
}
