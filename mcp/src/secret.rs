//! The two secrets of pairing: the 40-bit pairing code (8 Crockford base32 characters, shown
//! `XXXX-XXXX`) and the 256-bit session token (64 hex digits). Both come from a CSPRNG and are
//! compared in constant time.

use rand::RngExt;
use subtle::ConstantTimeEq;

/// Crockford's base32 alphabet: no I, L, O or U.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A pairing code: 8 canonical Crockford characters (40 random bits).
#[derive(Clone, PartialEq, Eq)]
pub struct Code([u8; 8]);

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Code(..)")
    }
}

impl Code {
    /// A fresh random code.
    pub fn random() -> Self {
        let mut bits = [0u8; 5];
        rand::rng().fill(&mut bits[..]);
        let mut value = bits.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let mut out = [0u8; 8];
        for slot in out.iter_mut().rev() {
            *slot = CROCKFORD[(value & 31) as usize];
            value >>= 5;
        }
        Code(out)
    }

    /// Normalizes what a user typed: case, `-`, spaces, `I`/`L` → `1`, `O` → `0`. `None` when
    /// the result is not 8 Crockford characters.
    pub fn normalize(input: &str) -> Option<Self> {
        let mut out = [0u8; 8];
        let mut n = 0usize;
        for c in input.chars() {
            if c == '-' || c.is_whitespace() {
                continue;
            }
            let c = match c.to_ascii_uppercase() {
                'I' | 'L' => '1',
                'O' => '0',
                other => other,
            };
            if !c.is_ascii() || !CROCKFORD.contains(&(c as u8)) || n == out.len() {
                return None;
            }
            out[n] = c as u8;
            n += 1;
        }
        (n == out.len()).then_some(Code(out))
    }

    /// Constant-time equality.
    pub fn matches(&self, other: &Code) -> bool {
        self.0.ct_eq(&other.0).into()
    }

    /// The display form, `XXXX-XXXX`.
    pub fn display(&self) -> String {
        let text = String::from_utf8_lossy(&self.0).into_owned();
        format!("{}-{}", &text[..4], &text[4..])
    }
}

/// A session token: 256 random bits.
#[derive(Clone)]
pub struct Token([u8; 32]);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// A fresh random token.
    pub fn random() -> Self {
        let mut bytes = [0u8; 32];
        rand::rng().fill(&mut bytes[..]);
        Token(bytes)
    }

    /// The wire form: 64 lowercase hex digits.
    pub fn encode(&self) -> String {
        hex::encode(self.0)
    }

    /// Constant-time comparison with what a page sent. Any length or alphabet mismatch fails,
    /// and the comparison of well-formed input takes the same time wherever it differs.
    pub fn matches(&self, presented: &str) -> bool {
        let mut bytes = [0u8; 32];
        if hex::decode_to_slice(presented, &mut bytes).is_err() {
            return false;
        }
        self.0.ct_eq(&bytes).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_crockford_and_displayed_in_two_groups() {
        let codes: HashSet<String> = (0..2000).map(|_| Code::random().display()).collect();
        assert!(codes.len() > 1990);
        for c in &codes {
            assert_eq!(c.len(), 9);
            assert_eq!(&c[4..5], "-");
            assert!(c.replace('-', "").bytes().all(|b| CROCKFORD.contains(&b)));
        }
    }

    #[test]
    fn input_is_normalized() {
        let code = Code::normalize("7K2Q-M9XD").unwrap();
        for typed in ["7k2qm9xd", " 7k2q m9xd ", "7K2Q--M9XD", "7k2q-m9xd"] {
            assert!(code.matches(&Code::normalize(typed).unwrap()), "{typed}");
        }
        let with_lookalikes = Code::normalize("1I1L-0O00").unwrap();
        assert!(with_lookalikes.matches(&Code::normalize("1111-0000").unwrap()));
        for bad in [
            "",
            "7K2Q-M9X",
            "7K2Q-M9XDD",
            "7K2Q-M9XU",
            "7K2Q-M9XÉ",
            "7K2Q_M9XD",
        ] {
            assert!(Code::normalize(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn tokens_are_256_bits_and_compared_whole() {
        let t = Token::random();
        let wire = t.encode();
        assert_eq!(wire.len(), 64);
        assert!(t.matches(&wire));
        assert!(!t.matches(&wire[..63]));
        assert!(!t.matches(&Token::random().encode()));
        assert!(!t.matches(""));
        assert!(!t.matches(&format!("{wire}00")));
    }
}
