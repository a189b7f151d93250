//! Redis Cluster's key slots: which of the 16384 slots a key (or a sharded channel) hashes to.
//!
//! The rule is the cluster specification's: CRC16 (XModem) of the key modulo 16384, where a
//! key with a non-empty `{hash tag}` hashes by the tag only. Redisson's layout gives every key
//! and channel of one lock the same tag (`redisson_lock__channel:{name}` and the name), so
//! every script of a lock runs on one node. redis-rs computes slots too, but only with its
//! `cluster` feature, which brings its whole cluster client along.

/// How many slots a cluster has.
pub(crate) const SLOTS: usize = 16384;

/// The slot `key` hashes to.
pub(crate) fn of(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOTS as u16
}

/// The part of `key` between the first `{` and the first `}` after it, when not empty.
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// CRC16-CCITT (XModem): polynomial 0x1021, initial value 0, no reflection.
fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ TABLE[usize::from(((crc >> 8) as u8) ^ byte)]
    })
}

const TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_cluster_specification() {
        // The specification's check value, and slots Redis itself reports (CLUSTER KEYSLOT).
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(of(b"foo"), 12182);
        assert_eq!(of(b"bar"), 5061);
        assert_eq!(of(b""), 0);
    }

    #[test]
    fn hash_tags_decide_the_slot() {
        assert_eq!(of(b"{user1000}.following"), of(b"user1000"));
        assert_eq!(of(b"redisson_lock__channel:{order}"), of(b"order"));
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(of(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        // Only the first tag counts.
        assert_eq!(of(b"foo{{bar}}zap"), of(b"{bar"));
        assert_eq!(of(b"foo{bar}{zap}"), of(b"bar"));
    }
}
