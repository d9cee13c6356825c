//! Partitions: every conversation belongs to one of [`PARTITIONS`], fixed for the life of a
//! deployment. On Redis, all keys of a conversation carry its partition's hash tag, and every
//! node listens on one channel per partition, so a node holds the same number of subscriptions
//! whether it serves ten pages or twenty thousand, and a script running on a conversation's slot
//! can publish to any node (the node's channel of that partition lives on the same slot).
//!
//! A call id is a plain version 4 UUID: all 122 random bits stay random (seed Security MUST 6),
//! so it names no partition. A call is stored in its conversation's partition; who knows the
//! conversation (the page answering it, the node that placed it, the sweep) goes there
//! directly, and a request that knows only the id (`GET /calls/{id}`, a cancel, a watch) looks
//! in every partition at once (`docs/architecture.md`, "Finding a call by its id").
//!
//! Releases up to 0.4.0 minted ids whose last six bits named the partition and looked a call up
//! there alone. While a node of such a release is live on the same Redis (a rolling upgrade or
//! a rollback), new nodes mint ids of that form ([`new_legacy_call_id`]) so that the old node
//! finds them; [`of_legacy_call`] is where such an id's call is, and where a lookup tries first.

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

/// The partition a call id of the legacy form names (its last byte's low six bits); an id that
/// is not a UUID (never one the gateway minted) gets a partition of its text, where nothing is
/// found. For an id of today's form this is one partition of 64, where its call is only by
/// chance.
pub fn of_legacy_call(id: &str) -> u16 {
    match Uuid::try_parse(id) {
        Ok(u) => u16::from(u.as_bytes()[15] & 0x3f),
        Err(_) => fred::util::redis_keyslot(id.as_bytes()) % PARTITIONS,
    }
}

/// A fresh call id: a version 4 UUID from the OS-seeded CSPRNG, its 122 random bits untouched.
pub fn new_call_id() -> String {
    Uuid::new_v4().hyphenated().to_string()
}

/// A call id of the form releases up to 0.4.0 mint and read: a version 4 UUID whose last six
/// bits name `conv`'s partition (116 bits stay random). Minted only while a node of such a
/// release is live beside this one.
pub fn new_legacy_call_id(conv: &ConvKey) -> String {
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
    fn call_ids_of_one_conversation_keep_every_random_bit_random() {
        // 400 ids: a bit that never changes across them is not random (chance 2^-399 each).
        let ids: Vec<u128> = (0..400)
            .map(|_| Uuid::parse_str(&new_call_id()).unwrap().as_u128())
            .collect();
        let (mut ones, mut zeros) = (0u128, 0u128);
        for id in &ids {
            ones |= id;
            zeros |= !id;
            assert_eq!(Uuid::from_u128(*id).get_version_num(), 4);
        }
        let varying = (ones & zeros).count_ones();
        assert_eq!(varying, 122, "bits that vary across 400 ids");
    }

    #[test]
    fn a_legacy_call_id_names_its_conversations_partition_and_stays_an_unguessable_uuid() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..2_000 {
            let conv = ConvKey::new("acme", &format!("u{i}"), "c");
            let id = new_legacy_call_id(&conv);
            assert_eq!(of_legacy_call(&id), of_conv(&conv), "{id}");
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
        assert!(of_legacy_call("not-a-uuid") < PARTITIONS);
    }
}
