//! XDR (RFC 4506) for the RPC front: a decoder over one received record and an encoder that builds a
//! whole reply, record mark included, in one buffer (so a reply leaves in one write).
//!
//! nfsserve's own types (attributes, `sattr3`, `wcc_data`, …) are encoded with its `XDR` trait. Its
//! decoders for variable-length data allocate whatever length the peer claims, so every opaque and
//! string is decoded here instead, as a slice of the record checked against the bytes present.

use nfsserve::nfs::{filename3, nfs_fh3, nfspath3};
use nfsserve::xdr::XDR;

/// Arguments that do not decode: answered GARBAGE_ARGS (or, for a broken call header, by closing
/// the connection).
#[derive(Debug, thiserror::Error)]
#[error("malformed XDR: {0}")]
pub struct Garbage(pub &'static str);

/// Largest NFSv3 file handle (RFC 1813 NFS3_FHSIZE).
const FH_MAX: usize = 64;

fn padded(len: usize) -> usize {
    len.div_ceil(4) * 4
}

pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder { buf, pos: 0 }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Garbage> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(Garbage(what))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// Whether every byte has been decoded.
    pub fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }

    pub fn u32(&mut self) -> Result<u32, Garbage> {
        let b = self.take(4, "truncated integer")?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64, Garbage> {
        Ok((u64::from(self.u32()?) << 32) | u64::from(self.u32()?))
    }

    pub fn bool(&mut self) -> Result<bool, Garbage> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Garbage("boolean neither 0 nor 1")),
        }
    }

    /// Fixed-length opaque data of `N` bytes (plus padding).
    pub fn fixed<const N: usize>(&mut self) -> Result<[u8; N], Garbage> {
        let b = self.take(padded(N), "truncated fixed opaque")?;
        let mut out = [0u8; N];
        out.copy_from_slice(&b[..N]);
        Ok(out)
    }

    /// Variable-length opaque data or a string: at most `max` bytes.
    pub fn opaque(&mut self, max: usize) -> Result<&'a [u8], Garbage> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(Garbage("opaque longer than allowed"));
        }
        let b = self.take(padded(len), "truncated opaque")?;
        Ok(&b[..len])
    }

    pub fn fh(&mut self) -> Result<nfs_fh3, Garbage> {
        Ok(nfs_fh3 {
            data: self.opaque(FH_MAX)?.to_vec(),
        })
    }

    /// A name in a directory. Its length is not limited here: the filesystem answers
    /// NFS3ERR_NAMETOOLONG, and the record's size bounds it anyway.
    pub fn name(&mut self) -> Result<filename3, Garbage> {
        Ok(self.opaque(usize::MAX)?.into())
    }

    pub fn path(&mut self) -> Result<nfspath3, Garbage> {
        Ok(self.opaque(usize::MAX)?.into())
    }

    /// A value of one of nfsserve's fixed-size types (no opaque inside, so its decoder allocates
    /// nothing the peer chose).
    pub fn fixed_size<T: XDR + Default>(&mut self) -> Result<T, Garbage> {
        let mut c = std::io::Cursor::new(&self.buf[self.pos..]);
        let mut v = T::default();
        v.deserialize(&mut c).map_err(|_| Garbage("malformed structure"))?;
        self.pos += c.position() as usize;
        Ok(v)
    }
}

/// A reply under construction: 4 bytes reserved for the record mark, then the RPC reply.
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Encoder {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&[0; 4]);
        Encoder { buf }
    }

    /// Room for `n` more bytes (a READ's data) without regrowing.
    pub fn reserve(&mut self, n: usize) {
        self.buf.reserve(n);
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Drops everything written after `len` bytes (an entry that did not fit).
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len.max(4));
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn bool(&mut self, v: bool) {
        self.u32(u32::from(v));
    }

    pub fn fixed(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        self.buf.resize(self.buf.len() + padded(b.len()) - b.len(), 0);
    }

    pub fn opaque(&mut self, b: &[u8]) {
        // Lengths are bounded by the record size (well under 4 GiB) everywhere this is called.
        self.u32(b.len() as u32);
        self.fixed(b);
    }

    /// One of nfsserve's types, through its encoder (writing to a Vec cannot fail).
    pub fn put<T: XDR>(&mut self, v: &T) {
        let _ = v.serialize(&mut self.buf);
    }

    /// The finished record: mark (last fragment, length) and reply.
    pub fn finish(mut self) -> Vec<u8> {
        let len = (self.buf.len() - 4) as u32;
        self.buf[..4].copy_from_slice(&(0x8000_0000 | len).to_be_bytes());
        self.buf
    }
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opaque_round_trips_with_padding() {
        let mut e = Encoder::new();
        e.opaque(b"abcde");
        e.u64(7);
        let rec = e.finish();
        assert_eq!(&rec[..4], &(0x8000_0000u32 | 20).to_be_bytes());
        assert_eq!(rec.len(), 4 + 4 + 8 + 8);
        let mut d = Decoder::new(&rec[4..]);
        assert_eq!(d.opaque(16).unwrap(), b"abcde");
        assert_eq!(d.u64().unwrap(), 7);
        assert!(d.u32().is_err());
    }

    #[test]
    fn claimed_lengths_past_the_record_are_garbage() {
        let mut d = Decoder::new(&[0xff, 0xff, 0xff, 0xf0, 1, 2]);
        assert!(d.opaque(usize::MAX).is_err());
        let mut d = Decoder::new(&[0, 0, 0, 65]);
        assert!(d.fh().is_err(), "handles over 64 bytes are refused");
        let mut d = Decoder::new(&[0, 0, 0, 2]);
        assert!(d.bool().is_err());
    }
}
