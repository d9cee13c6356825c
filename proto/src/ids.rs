//! Id minting and checks. Call ids are RFC 4122 version 4 UUIDs (122 random bits) from a
//! cryptographically secure generator seeded by the OS (rand's thread-local ChaCha12, reseeded
//! from the OS every 64 KiB of output, so no system call per id), never counters (Security
//! MUST 6).

use uuid::Uuid;

/// A fresh call or describe id: a lowercase hyphenated UUID v4 from the OS-seeded CSPRNG.
pub fn new_call_id() -> String {
    Uuid::new_v4().hyphenated().to_string()
}

/// Whether `id` has the shape of an unguessable page id: a hyphenated UUID, version 4,
/// RFC 4122 variant (what `crypto.randomUUID()` produces). Nil, counters and other versions fail.
pub fn looks_unguessable(id: &str) -> bool {
    id.len() == 36
        && Uuid::try_parse(id)
            .is_ok_and(|u| u.get_version_num() == 4 && u.get_variant() == uuid::Variant::RFC4122)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn minted_ids_are_v4_and_distinct() {
        let ids: HashSet<String> = (0..10_000).map(|_| new_call_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| looks_unguessable(id)));
        assert!(
            ids.iter()
                .all(|id| id.chars().all(|c| !c.is_ascii_uppercase()))
        );
    }

    #[test]
    fn guessable_shapes_are_refused() {
        for bad in [
            "",
            "1",
            "00000000-0000-0000-0000-000000000000",
            "6ba7b810-9dad-11d1-80b4-00c04fd430c8", // v1
            "f47ac10b-58cc-4372-c567-0e02b2c3d479", // v4 nibble, wrong variant
            "f47ac10b58cc4372a5670e02b2c3d479",     // simple form
            "{f47ac10b-58cc-4372-a567-0e02b2c3d479}",
        ] {
            assert!(!looks_unguessable(bad), "{bad}");
        }
        assert!(looks_unguessable("f47ac10b-58cc-4372-a567-0e02b2c3d479"));
        assert!(looks_unguessable("F47AC10B-58CC-4372-A567-0E02B2C3D479"));
    }
}
