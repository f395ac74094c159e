//! How a block is stored in the shared tier: where (`object_path`) and as what (`encode`), and the
//! check every object read back must pass (`decode`) before its bytes are used.
//!
//! The chunk store's key names content (a Xet file hash, an LFS sha256, a git blob id) and a block
//! index within it; the object's path is derived from that key alone, so every revision and every
//! repo holding those bytes finds the same object. The bytes of one block cannot be checked against
//! a whole-file hash, so the object carries a header with the key, the block index, the length and
//! the SHA-256 of the bytes: a torn upload (short), an object of another block (renamed, or a key
//! bug) or flipped bytes all fail the check, and the caller refetches from the Hub and replaces it.

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

/// First bytes of every block object (format version 1).
const MAGIC: &[u8; 8] = b"HUBFSB01";

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
    let mut h = BytesMut::with_capacity(8 + 8 + 8 + 32 + 2 + key.len());
    h.put_slice(MAGIC);
    h.put_u64_le(block);
    h.put_u64_le(data.len() as u64);
    h.put_slice(&Sha256::digest(data));
    h.put_u16_le(key.len().min(u16::MAX as usize) as u16);
    h.put_slice(&key.as_bytes()[..key.len().min(u16::MAX as usize)]);
    [h.freeze(), data.clone()]
}

/// Why an object is not the block asked for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Invalid {
    #[error("not a block object (bad header)")]
    Header,
    #[error("object of another block")]
    OtherBlock,
    #[error("torn object: {got} bytes of {want}")]
    Length { got: u64, want: u64 },
    #[error("bytes do not match their SHA-256")]
    Hash,
}

/// The block's bytes if `obj` is the object of block `block` of `key`, `expected_len` long, whose
/// bytes hash to what its header says (a slice of `obj`, no copy).
pub fn decode(obj: &Bytes, key: &str, block: u64, expected_len: u64) -> Result<Bytes, Invalid> {
    let fixed = 8 + 8 + 8 + 32 + 2;
    if obj.len() < fixed || &obj[..8] != MAGIC {
        return Err(Invalid::Header);
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&obj[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let (got_block, len) = (u64_at(8), u64_at(16));
    let sum = &obj[24..56];
    let key_len = u16::from_le_bytes([obj[56], obj[57]]) as usize;
    if obj.len() < fixed + key_len {
        return Err(Invalid::Header);
    }
    if got_block != block || &obj[fixed..fixed + key_len] != key.as_bytes() {
        return Err(Invalid::OtherBlock);
    }
    let data = obj.slice(fixed + key_len..);
    if len != expected_len || data.len() as u64 != expected_len {
        return Err(Invalid::Length {
            got: data.len() as u64,
            want: expected_len,
        });
    }
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
    fn paths_name_content_not_repos() {
        assert_eq!(
            object_path("fleet/a", "blocks", "xet:00ff", 2).as_ref(),
            "fleet/a/blocks/xet/00ff/2"
        );
        assert_eq!(object_path("", "claims", "sha256:ab", 0).as_ref(), "claims/sha256/ab/0");
    }
}
