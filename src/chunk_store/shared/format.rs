//! How a block is stored in the shared tier: where (`object_path`) and as what (`encode`), and the
//! check every object read back must pass (`decode`) before its bytes are used.
//!
//! The chunk store's key names content (a Xet file hash, an LFS sha256, a git blob id) and a block
//! index within it; the object's path is derived from that key alone, so every revision and every
//! repo holding those bytes finds the same object. The bytes of one block cannot be checked against
//! a whole-file hash, so the object carries a header with the key, the block index, the length and
//! the SHA-256 of the bytes: a torn upload (short), an object of another block (renamed, or a key
//! bug) or flipped bytes all fail the check, and the caller refetches from the Hub and replaces it.
//!
//! Metadata objects (`encode_meta`, `decode_meta`: a listing or a point lookup at one commit) carry
//! the same header under a magic of their own, with the metadata key in place of the block's.

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

/// First bytes of every block object (format version 1).
const MAGIC: &[u8; 8] = b"HUBFSB01";

/// First bytes of every metadata object (format version 1): a block object is never taken for
/// one, nor the other way round.
const META_MAGIC: &[u8; 8] = b"HUBFSM01";

/// Magic, index, length, SHA-256, key length.
const FIXED: usize = 8 + 8 + 8 + 32 + 2;

/// The object path of a block under `prefix` (`xet:HASH` block 3 is `PREFIX/blocks/xet/HASH/3`).
/// Claims live beside, under `claims/`, with the same tail.
pub fn object_path(prefix: &str, kind: &str, key: &str, block: u64) -> object_store::path::Path {
    let key = key.replace(':', "/");
    let p = if prefix.is_empty() {
        format!("{kind}/{key}/{block}")
    } else {
        format!("{prefix}/{kind}/{key}/{block}")
    };
    object_store::path::Path::from(p)
}

/// The header and `data` of a block object, as parts (no copy of the block).
pub fn encode(key: &str, block: u64, data: &Bytes) -> [Bytes; 2] {
    [header(MAGIC, key, block, data), data.clone()]
}

/// The header and `data` of the metadata object named `key` (see `meta`).
pub fn encode_meta(key: &str, data: &Bytes) -> [Bytes; 2] {
    [header(META_MAGIC, key, 0, data), data.clone()]
}

fn header(magic: &[u8; 8], key: &str, index: u64, data: &Bytes) -> Bytes {
    let key = &key.as_bytes()[..key.len().min(u16::MAX as usize)];
    let mut h = BytesMut::with_capacity(FIXED + key.len());
    h.put_slice(magic);
    h.put_u64_le(index);
    h.put_u64_le(data.len() as u64);
    h.put_slice(&Sha256::digest(data));
    h.put_u16_le(key.len() as u16);
    h.put_slice(key);
    h.freeze()
}

/// Why an object is not the block asked for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Invalid {
    #[error("not a block object (bad header)")]
    Header,
    /// Of another block, or another metadata key.
    #[error("object of another block or key")]
    OtherBlock,
    #[error("torn object: {got} bytes of {want}")]
    Length { got: u64, want: u64 },
    #[error("bytes do not match their SHA-256")]
    Hash,
}

/// The block's bytes if `obj` is the object of block `block` of `key`, `expected_len` long, whose
/// bytes hash to what its header says (a slice of `obj`, no copy).
pub fn decode(obj: &Bytes, key: &str, block: u64, expected_len: u64) -> Result<Bytes, Invalid> {
    let (data, len, sum) = parse(obj, MAGIC, key, block)?;
    if len != expected_len || data.len() as u64 != expected_len {
        return Err(Invalid::Length {
            got: data.len() as u64,
            want: expected_len,
        });
    }
    check_sum(data, sum)
}

/// The payload if `obj` is the metadata object named `key`, whole, its bytes hashing to what its
/// header says (a slice of `obj`, no copy).
pub fn decode_meta(obj: &Bytes, key: &str) -> Result<Bytes, Invalid> {
    let (data, len, sum) = parse(obj, META_MAGIC, key, 0)?;
    if data.len() as u64 != len {
        return Err(Invalid::Length {
            got: data.len() as u64,
            want: len,
        });
    }
    check_sum(data, sum)
}

/// The header of `obj` checked against `magic`, `key` and `index`: the bytes after it, the length
/// and the SHA-256 it states.
fn parse(obj: &Bytes, magic: &[u8; 8], key: &str, index: u64) -> Result<(Bytes, u64, [u8; 32]), Invalid> {
    if obj.len() < FIXED || &obj[..8] != magic {
        return Err(Invalid::Header);
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&obj[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let (got_index, len) = (u64_at(8), u64_at(16));
    let mut sum = [0u8; 32];
    sum.copy_from_slice(&obj[24..56]);
    let key_len = u16::from_le_bytes([obj[56], obj[57]]) as usize;
    if obj.len() < FIXED + key_len {
        return Err(Invalid::Header);
    }
    let want_key = &key.as_bytes()[..key.len().min(u16::MAX as usize)];
    if got_index != index || &obj[FIXED..FIXED + key_len] != want_key {
        return Err(Invalid::OtherBlock);
    }
    Ok((obj.slice(FIXED + key_len..), len, sum))
}

fn check_sum(data: Bytes, sum: [u8; 32]) -> Result<Bytes, Invalid> {
    if Sha256::digest(&data)[..] != sum[..] {
        return Err(Invalid::Hash);
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(parts: [Bytes; 2]) -> Bytes {
        let mut b = BytesMut::new();
        parts.iter().for_each(|p| b.put_slice(p));
        b.freeze()
    }

    #[test]
    fn a_block_round_trips_and_every_kind_of_damage_is_caught() {
        let data = Bytes::from(vec![7u8; 1000]);
        let obj = joined(encode("xet:abc", 3, &data));
        assert_eq!(decode(&obj, "xet:abc", 3, 1000).unwrap(), data);
        assert_eq!(decode(&obj, "xet:abd", 3, 1000), Err(Invalid::OtherBlock));
        assert_eq!(decode(&obj, "xet:abc", 4, 1000), Err(Invalid::OtherBlock));
        let torn = obj.slice(..obj.len() - 10);
        assert_eq!(
            decode(&torn, "xet:abc", 3, 1000),
            Err(Invalid::Length { got: 990, want: 1000 })
        );
        let mut flipped = obj.to_vec();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(decode(&Bytes::from(flipped), "xet:abc", 3, 1000), Err(Invalid::Hash));
        assert_eq!(
            decode(&Bytes::from_static(b"junk"), "xet:abc", 3, 4),
            Err(Invalid::Header)
        );
    }

    #[test]
    fn a_metadata_object_round_trips_and_damage_or_a_foreign_object_is_caught() {
        let key = "v1/model/demo/tiny-model@0123:tree:sub";
        let data = Bytes::from_static(br#"[{"File":{"path":"sub/a"}}]"#);
        let obj = joined(encode_meta(key, &data));
        assert_eq!(decode_meta(&obj, key).unwrap(), data);
        // Another directory's listing, or another commit's, copied over this one's name.
        assert_eq!(
            decode_meta(&obj, "v1/model/demo/tiny-model@0123:tree:other"),
            Err(Invalid::OtherBlock)
        );
        let torn = obj.slice(..obj.len() - 3);
        assert_eq!(
            decode_meta(&torn, key),
            Err(Invalid::Length {
                got: data.len() as u64 - 3,
                want: data.len() as u64
            })
        );
        let mut flipped = obj.to_vec();
        let at = flipped.len() - 5;
        flipped[at] ^= 0x20;
        assert_eq!(decode_meta(&Bytes::from(flipped), key), Err(Invalid::Hash));
        // A block object is not a metadata object, whatever its key, nor the other way round.
        let block = joined(encode(key, 0, &data));
        assert_eq!(decode_meta(&block, key), Err(Invalid::Header));
        assert_eq!(decode(&obj, key, 0, data.len() as u64), Err(Invalid::Header));
        assert_eq!(decode_meta(&Bytes::new(), key), Err(Invalid::Header));
    }

    #[test]
    fn paths_name_content_not_repos() {
        assert_eq!(
            object_path("fleet/a", "blocks", "xet:00ff", 2).as_ref(),
            "fleet/a/blocks/xet/00ff/2"
        );
        assert_eq!(object_path("", "claims", "sha256:ab", 0).as_ref(), "claims/sha256/ab/0");
    }
}
