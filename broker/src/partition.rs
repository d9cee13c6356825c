//! Partitions: every conversation belongs to one of [`PARTITIONS`], fixed for the life of a
//! deployment. On Redis, all keys of a conversation carry its partition's hash tag, and every
//! node listens on one channel per partition, so a node holds the same number of subscriptions
//! whether it serves ten pages or twenty thousand, and a script running on a conversation's slot
//! can publish to any node (the node's channel of that partition lives on the same slot).
//!
//! A call id carries its conversation's partition in six bits of its UUID, so that a call is
//! found by its id alone (`GET /calls/{id}`, a page's result) without an index key per call.

use uuid::Uuid;

use crate::ConvKey;

/// How many partitions there are: a node holds this many subscriptions, whatever its pages.
/// Partition `k`'s keys hash by the tag `p<k>`, so where the 64 fall depends on the Cluster's
/// slot ranges: on six shards with the even ranges `redis-cli --cluster create` makes, 8 to 13
/// each (`docs/scaling.md`, "Growing the Cluster").
pub const PARTITIONS: u16 = 64;

/// The partition of a conversation: its Redis Cluster key slot (CRC16 of the conversation's
/// path, the hash Redis itself uses) modulo [`PARTITIONS`], the same on every node and version.
pub fn of_conv(c: &ConvKey) -> u16 {
    let path = format!("{}/{}/{}", c.tenant, c.user, c.conversation);
    fred::util::redis_keyslot(path.as_bytes()) % PARTITIONS
}

/// The partition a call id names (its last byte's low six bits); an id that is not a UUID
/// (never one the gateway minted) gets a partition of its text, where nothing is found.
pub fn of_call(id: &str) -> u16 {
    match Uuid::try_parse(id) {
        Ok(u) => u16::from(u.as_bytes()[15] & 0x3f),
        Err(_) => fred::util::redis_keyslot(id.as_bytes()) % PARTITIONS,
    }
}

/// A fresh call id for a call of `conv`: a version 4 UUID from the OS-seeded CSPRNG whose last
/// six bits name the conversation's partition; 116 bits stay random (Security MUST 6 asks for
/// unguessable ids, and the version and variant bits are untouched).
pub fn new_call_id(conv: &ConvKey) -> String {
    let mut bytes = *Uuid::new_v4().as_bytes();
    // `of_conv` is below 64, so it fits in the six bits.
    #[allow(clippy::cast_possible_truncation)]
    let p = of_conv(conv) as u8;
    bytes[15] = (bytes[15] & 0xc0) | p;
    Uuid::from_bytes(bytes).hyphenated().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_id_names_its_conversations_partition_and_stays_an_unguessable_uuid() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..2_000 {
            let conv = ConvKey::new("acme", &format!("u{i}"), "c");
            let id = new_call_id(&conv);
            assert_eq!(of_call(&id), of_conv(&conv), "{id}");
            assert!(toolmark_proto::ids::looks_unguessable(&id), "{id}");
            assert!(seen.insert(id));
            seen.insert(format!("p{}", of_conv(&conv)));
        }
        // 2,000 conversations reach every partition.
        assert_eq!(
            (0..PARTITIONS)
                .filter(|p| seen.contains(&format!("p{p}")))
                .count(),
            usize::from(PARTITIONS)
        );
        assert!(of_call("not-a-uuid") < PARTITIONS);
    }
}
