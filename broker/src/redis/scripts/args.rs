//! A script's `KEYS` and `ARGV`, each value under the name its `.lua` file gives it, and the
//! check that the two sides agree: a script reads its arguments by position, and the order is
//! written twice, in the Rust that builds them and in the Lua that reads them.
//!
//! Each `.lua` file opens with its header, one line each (continued on lines indented past
//! `--`):
//!
//! ```text
//! -- KEYS: call, pending, deadlines, sockets, outbox? (the change's, when it has one)
//! -- ARGV: id (compact), deadline (ms), live... (the live node ids)
//! ```
//!
//! names in order, a description in parentheses, `name?` one that may be left out (at the
//! end), `name...` any number of values under one name (`none` for no arguments). Three checks
//! hold the two sides together:
//!
//! - every run of a script in a debug build (every test) names its values as its header does,
//!   in order and in number ([`Args::check`], in `run.rs`): a value moved on the Rust side, or
//!   a name moved in the header, fails the suite that runs it;
//! - each script's `local x = ARGV[n]` (and `KEYS[n]`) reads the value its header names `x` at
//!   `n` (`tests::every_script_reads_its_arguments_where_its_header_puts_them`);
//! - every header parses (the same test).
//!
//! A release build sends the values without their names: the header's grammar below is read
//! only where it is checked.
#![cfg_attr(not(any(debug_assertions, test)), allow(dead_code, unused_imports))]

use super::Lua;

/// The values of one run of a script, each under its name (the names are kept only where they
/// are checked: debug builds and tests).
///
/// Short values (keys, numbers, ids) are written back to back into one buffer and sent as
/// slices of it: one allocation for all of them, and a copy for a retry costs a reference
/// count each, not an allocation each (`run.rs` keeps the values for a command sent again).
/// A long value (a page message, an outcome) is moved as it is, never copied.
#[derive(Debug)]
pub struct Args {
    short: Vec<u8>,
    keys: Vec<Part>,
    argv: Vec<Part>,
    #[cfg(any(debug_assertions, test))]
    key_names: Vec<&'static str>,
    #[cfg(any(debug_assertions, test))]
    arg_names: Vec<&'static str>,
}

/// Where one value is: in the buffer of short values, or its own.
#[derive(Debug)]
pub enum Part {
    Short(u32, u32),
    Own(bytes::Bytes),
}

/// Room made for a script's keys and arguments at once: more than any script takes but a few,
/// so that building them is one allocation each, not one per doubling.
const KEYS_ROOM: usize = 8;
const ARGV_ROOM: usize = 24;
/// Room made for the short values: a placement's keys and arguments fit.
const SHORT_ROOM: usize = 512;
/// Longer values are moved, not copied into the buffer.
pub const SHORT: usize = 256;

impl Default for Args {
    fn default() -> Self {
        Args {
            short: Vec::with_capacity(SHORT_ROOM),
            keys: Vec::with_capacity(KEYS_ROOM),
            argv: Vec::with_capacity(ARGV_ROOM),
            #[cfg(any(debug_assertions, test))]
            key_names: Vec::new(),
            #[cfg(any(debug_assertions, test))]
            arg_names: Vec::new(),
        }
    }
}

impl Args {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next key.
    pub fn key(mut self, name: &'static str, key: impl Arg) -> Self {
        #[cfg(any(debug_assertions, test))]
        self.key_names.push(name);
        let _ = name;
        let part = key.put(&mut self.short);
        self.keys.push(part);
        self
    }

    /// The next argument.
    pub fn arg(mut self, name: &'static str, value: impl Arg) -> Self {
        #[cfg(any(debug_assertions, test))]
        self.arg_names.push(name);
        let _ = name;
        let part = value.put(&mut self.short);
        self.argv.push(part);
        self
    }

    /// Any number of arguments under one name (`name...` in the header).
    pub fn args<A: Arg>(mut self, name: &'static str, values: impl IntoIterator<Item = A>) -> Self {
        let before = self.argv.len();
        for v in values {
            let part = v.put(&mut self.short);
            self.argv.push(part);
        }
        #[cfg(any(debug_assertions, test))]
        self.arg_names
            .extend(std::iter::repeat_n(name, self.argv.len() - before));
        let _ = (name, before);
        self
    }

    /// What Redis is sent: the keys, the arguments.
    pub fn into_parts(self) -> (Vec<bytes::Bytes>, Vec<bytes::Bytes>) {
        let short = bytes::Bytes::from(self.short);
        let whole = |parts: Vec<Part>| -> Vec<bytes::Bytes> {
            parts
                .into_iter()
                .map(|p| match p {
                    Part::Short(from, to) => short.slice(from as usize..to as usize),
                    Part::Own(b) => b,
                })
                .collect()
        };
        (whole(self.keys), whole(self.argv))
    }

    /// Whether the names agree with `lua`'s header, in order and in number.
    #[cfg(any(debug_assertions, test))]
    pub fn check(&self, lua: &Lua) -> Result<(), String> {
        let header = header(lua.code).map_err(|e| format!("{}.lua: {e}", lua.name))?;
        for (what, items, given) in [
            ("KEYS", &header.keys, &self.key_names),
            ("ARGV", &header.argv, &self.arg_names),
        ] {
            let names: &[&str] = given;
            if !fits(items, names) {
                return Err(format!(
                    "{}.lua: its {what} are {}; the Rust sends {}",
                    lua.name,
                    items
                        .iter()
                        .map(Item::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    names.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// A value a script is sent: a short one written into the buffer of short values, a long
/// string moved as it is (a page message is not copied), a number written in decimal.
pub trait Arg {
    /// Writes the value into `short` or keeps it apart, and says where it is.
    fn put(self, short: &mut Vec<u8>) -> Part;
}

/// `text` written at the end of `short`.
fn copied(short: &mut Vec<u8>, text: &[u8]) -> Part {
    let from = short.len();
    short.extend_from_slice(text);
    span(from, short.len())
}

fn span(from: usize, to: usize) -> Part {
    // A script's short values are a few hundred bytes: never past u32.
    Part::Short(
        u32::try_from(from).unwrap_or(u32::MAX),
        u32::try_from(to).unwrap_or(u32::MAX),
    )
}

impl Arg for String {
    fn put(self, short: &mut Vec<u8>) -> Part {
        if self.len() > SHORT {
            Part::Own(bytes::Bytes::from(self))
        } else {
            copied(short, self.as_bytes())
        }
    }
}

impl Arg for &str {
    fn put(self, short: &mut Vec<u8>) -> Part {
        copied(short, self.as_bytes())
    }
}

impl Arg for &String {
    fn put(self, short: &mut Vec<u8>) -> Part {
        copied(short, self.as_bytes())
    }
}

macro_rules! decimal {
    ($($t:ty),*) => {$(
        impl Arg for $t {
            fn put(self, short: &mut Vec<u8>) -> Part {
                copied(short, itoa::Buffer::new().format(self).as_bytes())
            }
        }
    )*};
}
decimal!(u32, u64, usize, i32, i64);

/// One name of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub name: String,
    pub times: Times,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Times {
    One,
    /// `name?`
    Maybe,
    /// `name...`
    Any,
}

impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = match self.times {
            Times::One => "",
            Times::Maybe => "?",
            Times::Any => "...",
        };
        write!(f, "{}{mark}", self.name)
    }
}

/// A script's header: its `KEYS` and `ARGV` by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub keys: Vec<Item>,
    pub argv: Vec<Item>,
}

/// The header of a script's code (the prelude, which has none, before it).
pub fn header(code: &str) -> Result<Header, String> {
    Ok(Header {
        keys: items(code, "KEYS")?,
        argv: items(code, "ARGV")?,
    })
}

/// The names of the header line `-- <what>:` and its continuation lines.
fn items(code: &str, what: &str) -> Result<Vec<Item>, String> {
    let open = format!("-- {what}:");
    let mut lines = code.lines().skip_while(|l| !l.starts_with(&open));
    let first = lines
        .next()
        .ok_or_else(|| format!("no `{open}` line"))?
        .trim_start_matches(&open)
        .to_owned();
    let mut text = first;
    for l in lines {
        match l.strip_prefix("--  ") {
            Some(more) if !more.trim().is_empty() => {
                text.push(' ');
                text.push_str(more.trim());
            }
            _ => break,
        }
    }
    // Descriptions (in parentheses, nested ones too) are not names.
    let mut plain = String::new();
    let mut depth = 0u32;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    if plain.trim() == "none" {
        return Ok(Vec::new());
    }
    plain
        .split(',')
        .map(|item| {
            let item = item.trim();
            let (name, times) = if let Some(n) = item.strip_suffix("...") {
                (n, Times::Any)
            } else if let Some(n) = item.strip_suffix('?') {
                (n, Times::Maybe)
            } else {
                (item, Times::One)
            };
            let ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if ok {
                Ok(Item {
                    name: name.to_owned(),
                    times,
                })
            } else {
                Err(format!("{what}: `{item}` is not a name"))
            }
        })
        .collect()
}

/// Whether `names`, in order, are what `items` allow.
fn fits(items: &[Item], names: &[&str]) -> bool {
    let mut at = 0;
    for item in items {
        match item.times {
            Times::One => {
                if names.get(at) != Some(&item.name.as_str()) {
                    return false;
                }
                at += 1;
            }
            Times::Maybe => {
                if names.get(at) == Some(&item.name.as_str()) {
                    at += 1;
                }
            }
            Times::Any => {
                while names.get(at) == Some(&item.name.as_str()) {
                    at += 1;
                }
            }
        }
    }
    at == names.len()
}

#[cfg(test)]
mod tests {
    use super::super::ALL;
    use super::*;

    fn code(keys: &str, argv: &str) -> String {
        format!("-- What it does.\n--\n-- KEYS: {keys}\n-- ARGV: {argv}\nreturn 1\n")
    }

    #[test]
    fn a_header_names_its_values_and_leaves_descriptions_out() {
        let h = header(&code(
            "call, outbox? (the change's,\n--       when it has one)",
            "id (compact, as (nested) kept), live... (the live node ids)",
        ))
        .unwrap();
        let names: Vec<String> = h.keys.iter().map(Item::to_string).collect();
        assert_eq!(names, ["call", "outbox?"]);
        let names: Vec<String> = h.argv.iter().map(Item::to_string).collect();
        assert_eq!(names, ["id", "live..."]);
        assert_eq!(header(&code("call", "none")).unwrap().argv, Vec::new());
        assert!(header(&code("call", "the live node ids")).is_err());
        assert!(header("return 1").is_err());
    }

    #[test]
    fn values_keep_their_order_short_ones_share_one_buffer_and_long_ones_are_moved() {
        let long = "m".repeat(SHORT + 1);
        let at = long.as_ptr();
        let borrowed = "k2".to_owned();
        let (keys, argv) = Args::new()
            .key("a", "k1")
            .key("b", &borrowed)
            .arg("x", 42_u64)
            .arg("y", long)
            .arg("z", "")
            .args("w", ["-7".to_owned(), "v".to_owned()])
            .into_parts();
        let text = |v: &[bytes::Bytes]| -> Vec<String> {
            v.iter()
                .map(|b| String::from_utf8(b.to_vec()).unwrap())
                .collect()
        };
        assert_eq!(text(&keys), ["k1", "k2"]);
        let got = text(&argv);
        assert_eq!(got[0], "42");
        assert_eq!(got[1].len(), SHORT + 1);
        assert_eq!(&got[2..], ["", "-7", "v"]);
        // The long value is the string it was given, not a copy.
        assert_eq!(argv[1].as_ptr(), at);
        // The short ones are back to back in one buffer.
        let start = keys[0].as_ptr() as usize;
        assert_eq!(keys[1].as_ptr() as usize, start + 2);
        assert_eq!(argv[0].as_ptr() as usize, start + 4);
        assert_eq!(argv[4].as_ptr() as usize, start + 8);
    }

    #[test]
    fn values_out_of_order_or_too_many_or_too_few_fail_the_check() {
        let lua = Lua::new("t", "-- KEYS: a, b\n-- ARGV: x, y?, z...\nreturn 1\n");
        let ok = |a: Args| a.check(&lua);
        assert!(ok(Args::new().key("a", "1").key("b", "2").arg("x", 1)).is_ok());
        assert!(
            ok(Args::new()
                .key("a", "1")
                .key("b", "2")
                .arg("x", 1)
                .arg("y", 2)
                .args("z", ["3".to_owned(), "4".to_owned()]))
            .is_ok()
        );
        let moved = Args::new().key("b", "2").key("a", "1").arg("x", 1);
        let err = ok(moved).unwrap_err();
        assert!(err.contains("KEYS are a, b; the Rust sends b, a"), "{err}");
        assert!(ok(Args::new().key("a", "1").key("b", "2")).is_err());
        assert!(
            ok(Args::new()
                .key("a", "1")
                .key("b", "2")
                .arg("x", 1)
                .arg("w", 0))
            .is_err()
        );
        assert!(
            ok(Args::new()
                .key("a", "1")
                .key("b", "2")
                .arg("x", 1)
                .args("z", ["3".to_owned()])
                .arg("y", 2))
            .is_err()
        );
    }

    /// `local a, b = ARGV[1], tonumber(ARGV[2])`: (name, table, position) of each.
    fn bindings(code: &str) -> Vec<(String, &'static str, usize)> {
        let mut out = Vec::new();
        for line in code.lines() {
            let Some(rest) = line.trim_start().strip_prefix("local ") else {
                continue;
            };
            let Some((names, values)) = rest.split_once(" = ") else {
                continue;
            };
            let names: Vec<&str> = names.split(',').map(str::trim).collect();
            // The values, split at the commas outside parentheses and brackets.
            let mut values_at = Vec::new();
            let (mut depth, mut start) = (0i32, 0);
            for (i, c) in values.char_indices() {
                match c {
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' => depth -= 1,
                    ',' if depth == 0 => {
                        values_at.push(&values[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            values_at.push(&values[start..]);
            if names.len() != values_at.len() {
                continue;
            }
            for (name, value) in names.iter().zip(values_at) {
                // Only a plain read: `ARGV[n]`, `tonumber(ARGV[n])` or `ARGV[n] == '1'`.
                let mut v = value.trim();
                if let Some((read, _)) = v.split_once(" == ") {
                    v = read.trim();
                }
                if let Some(inner) = v
                    .strip_prefix("tonumber(")
                    .and_then(|i| i.strip_suffix(')'))
                {
                    v = inner;
                }
                for table in ["KEYS", "ARGV"] {
                    if let Some(n) = v
                        .strip_prefix(table)
                        .and_then(|r| r.strip_prefix('['))
                        .and_then(|r| r.strip_suffix(']'))
                        .and_then(|n| n.parse().ok())
                    {
                        out.push(((*name).to_owned(), table, n));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_script_reads_its_arguments_where_its_header_puts_them() {
        let mut read = 0;
        for lua in ALL {
            let h = header(lua.code).unwrap_or_else(|e| panic!("{}.lua: {e}", lua.name));
            // The script's own code: the prelude's functions take their values as parameters.
            let own = lua.code.rsplit("-- KEYS:").next().unwrap_or_default();
            for (name, table, n) in bindings(own) {
                let items = if table == "KEYS" { &h.keys } else { &h.argv };
                // Positions are fixed up to the first name that may be left out or repeated.
                let fixed = items.iter().take_while(|i| i.times == Times::One).count();
                if n == 0 || n > fixed {
                    continue;
                }
                let named = &items[n - 1].name;
                assert!(
                    name == *named || name == format!("{named}_key"),
                    "{}.lua reads {table}[{n}] as `{name}`, which its header names `{named}`",
                    lua.name
                );
                read += 1;
            }
        }
        assert!(
            read >= 30,
            "only {read} named reads found: is the parser right?"
        );
    }
}
