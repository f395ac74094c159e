//! A response body as it arrives, and where its bytes are kept until they are decoded.
//!
//! The HTTP client hands over each socket read as a piece cut from its read buffer, and a piece
//! keeps that whole buffer alive while it is held. Block bodies held as such pieces until the
//! whole block was in took far more memory than their bytes: 16 readers at 30 ms over NFS under
//! 256M peaked at 295–318 MiB with block bodies counted in their blocks' room, 230–248 with every
//! body copied as it came into one buffer of the length the reply states, and 283–293 with only
//! pieces under 256 KiB copied. Copying every body cost 6–30% of the loopback throughput (two
//! runs), where reads are large and bodies are not held long, so on a link measured fast only
//! small pieces are copied; until it is measured (the first burst of loads), and on a slow link,
//! everything is.
//!
//! Bodies copied whole go into buffers of a pool kept for them (`BodyBuffers`): a fresh
//! multi-MiB allocation faults in every page on first write and gives them back on free, and with
//! 8 readers at 30 ms the copy into fresh buffers was a quarter of the mount's CPU, four fifths of
//! it page faults.

use bytes::{Bytes, BytesMut};

use crate::chunk_store::buffer_pool::{BufferPool, Lease, PooledBuf};

/// On a fast link, pieces at least this long are kept as they came: the read buffer one pins is
/// at most a few times larger.
pub(super) const LARGE_PIECE: usize = 256 << 10;

const BODY_BUFFER: usize = crate::chunk_store::budget::BODY_BUFFER as usize;

/// Idle body buffers kept without a memory budget (a budget says how many, see `Plan`).
const IDLE_BODY_BUFFERS: usize = 8;

/// Reusable buffers for response bodies that are copied whole (see the module's doc).
#[derive(Clone)]
pub struct BodyBuffers(BufferPool);

impl Default for BodyBuffers {
    fn default() -> Self {
        BodyBuffers::new(IDLE_BODY_BUFFERS)
    }
}

impl BodyBuffers {
    /// A pool keeping at most `idle` buffers between bodies. Bodies on the way may take far more
    /// (the blocks' room allows 256 MiB on a slow link); the idle ones are what stays of them.
    pub fn new(idle: usize) -> Self {
        BodyBuffers(BufferPool::new(BODY_BUFFER, idle))
    }

    /// Announces the pooled buffers a load of `len` bytes in `part`-byte parts will take (none
    /// on a fast link, where bodies are not copied whole; see `Body::new`).
    pub fn lease(&self, len: u64, part: u64, fast: bool) -> Lease {
        let size = self.0.buf_size() as u64;
        let pooled = !fast && (size / 2..=size).contains(&part);
        self.0.lease(if pooled { len.div_ceil(part) as usize } else { 0 })
    }

    /// How many buffers were made and how many reused.
    #[cfg(test)]
    pub fn stats(&self) -> crate::chunk_store::buffer_pool::PoolStats {
        self.0.stats()
    }
}

/// One reply's body, collected as it arrives (see the module's doc for what is copied).
pub(super) struct Body {
    pieces: Vec<Bytes>,
    run: Run,
    /// Bytes the reply states (0: not stated).
    expect: u64,
    pub(super) got: u64,
    /// Pieces at least this long are kept as they came.
    keep_from: usize,
}

/// Where copied pieces go until the run ends.
enum Run {
    /// A plain buffer; the part left over after a run ends stays for the next one.
    Plain(BytesMut),
    /// The pooled buffer a whole body is copied into (see `Body::new`).
    Pooled(PooledBuf),
}

impl Run {
    fn spare(&self) -> usize {
        match self {
            Run::Plain(b) => b.capacity() - b.len(),
            Run::Pooled(b) => b.spare(),
        }
    }
}

impl Body {
    /// A body copied whole (`keep_from` unbounded) that states a length of half a pooled buffer
    /// to one buffer (a part of a block on a distant Hub) is copied into one pooled buffer; any
    /// other, into plain buffers. Longer bodies (a block in one request, before the link is
    /// measured) are not cut into pooled buffers: those beyond the idle ones went back to the
    /// allocator's arenas instead of the kernel, and CI's 4 readers on loopback peaked 60-90 MiB
    /// higher.
    pub(super) fn new(expect: u64, keep_from: usize, buffers: &BodyBuffers, lease: Option<&Lease>) -> Body {
        let size = buffers.0.buf_size() as u64;
        let run = if keep_from == usize::MAX && (size / 2..=size).contains(&expect) {
            Run::Pooled(match lease {
                Some(l) => l.acquire(expect as usize),
                None => buffers.0.acquire(expect as usize),
            })
        } else {
            Run::Plain(BytesMut::new())
        };
        Body {
            pieces: Vec::new(),
            run,
            expect,
            got: 0,
            keep_from,
        }
    }

    pub(super) fn push(&mut self, c: Bytes) {
        let owed = self.expect.saturating_sub(self.got) as usize;
        self.got += c.len() as u64;
        if c.len() >= self.keep_from {
            self.end_run();
            self.pieces.push(c);
            return;
        }
        if self.run.spare() < c.len() {
            self.end_run();
            // What the reply still owes; without a stated length, buffers of 64 KiB at least.
            let room = match self.expect {
                0 => c.len().max(64 << 10),
                _ => owed.max(c.len()),
            };
            if let Run::Plain(b) = &mut self.run {
                b.reserve(room);
            }
        }
        match &mut self.run {
            Run::Plain(b) => b.extend_from_slice(&c),
            Run::Pooled(b) => b.extend_from_slice(&c),
        }
    }

    /// Moves the copied pieces into `pieces`; the body goes on in a plain buffer (a plain run's
    /// spare room stays for the next).
    fn end_run(&mut self) {
        match &mut self.run {
            Run::Plain(b) if !b.is_empty() => self.pieces.push(b.split().freeze()),
            Run::Plain(_) => {}
            Run::Pooled(_) => {
                if let Run::Pooled(b) = std::mem::replace(&mut self.run, Run::Plain(BytesMut::new()))
                    && !b.is_empty()
                {
                    self.pieces.push(b.freeze());
                }
            }
        }
    }

    pub(super) fn pieces(mut self) -> Vec<Bytes> {
        self.end_run();
        self.pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pieces of a body of `expect` bytes fed `sent` (`keep_from` as `Body::new`).
    fn received(
        buffers: &BodyBuffers,
        expect: u64,
        keep_from: usize,
        sent: impl IntoIterator<Item = Bytes>,
    ) -> Vec<Bytes> {
        let mut b = Body::new(expect, keep_from, buffers, None);
        for c in sent {
            b.push(c);
        }
        b.pieces()
    }

    fn joined(pieces: &[Bytes]) -> Vec<u8> {
        pieces.iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn small_pieces_are_copied_into_one_buffer_of_the_stated_length() {
        let buffers = BodyBuffers::default();
        let pieces = received(&buffers, 3000, usize::MAX, (0..3u8).map(|i| Bytes::from(vec![i; 1000])));
        assert_eq!(pieces.len(), 1, "one buffer, not the client's pieces");
        let want: Vec<u8> = (0..3u8).flat_map(|i| vec![i; 1000]).collect();
        assert_eq!(&pieces[0][..], &want[..]);
    }

    #[test]
    fn on_a_fast_link_large_pieces_are_kept_as_they_came() {
        let buffers = BodyBuffers::default();
        let large = Bytes::from(vec![7u8; LARGE_PIECE]);
        let total = (LARGE_PIECE + 20) as u64;
        let sent = [Bytes::from(vec![1u8; 10]), large.clone(), Bytes::from(vec![2u8; 10])];
        let pieces = received(&buffers, total, LARGE_PIECE, sent);
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces[1].as_ptr(), large.as_ptr(), "not copied");
        let mut want = vec![1u8; 10];
        want.extend(vec![7u8; LARGE_PIECE]);
        want.extend([2u8; 10]);
        assert_eq!(joined(&pieces), want, "in order");
        // Unmeasured or slow: the large piece is copied too.
        let pieces = received(&buffers, total, usize::MAX, [large.clone()]);
        assert_ne!(pieces[0].as_ptr(), large.as_ptr());
        assert_eq!(buffers.stats().created, 0, "bodies under half a buffer are not pooled");
    }

    #[test]
    fn a_body_of_no_stated_length_is_still_whole() {
        let buffers = BodyBuffers::default();
        let pieces = received(&buffers, 0, usize::MAX, (0..50u8).map(|i| Bytes::from(vec![i; 333])));
        let want: Vec<u8> = (0..50u8).flat_map(|i| vec![i; 333]).collect();
        assert_eq!(joined(&pieces), want);
    }

    /// Bodies of one part, copied whole, fill a pooled buffer, and the buffer serves the next
    /// body once its pieces are dropped: no fresh allocation per body. A longer body stays plain.
    #[test]
    fn whole_bodies_reuse_pooled_buffers() {
        let buffers = BodyBuffers::default();
        let data: Vec<u8> = (0..BODY_BUFFER).map(|i| (i % 251) as u8).collect();
        for round in 0..3 {
            let sent = data.chunks(16 << 10 | 7).map(Bytes::copy_from_slice);
            let pieces = received(&buffers, data.len() as u64, usize::MAX, sent);
            assert_eq!(pieces.len(), 1, "one full buffer");
            assert!(pieces[0][..] == data[..], "round {round}: the bytes as sent");
            drop(pieces);
            let s = buffers.stats();
            assert_eq!(s.created, 1, "round {round}: the first body's buffer, reused after");
            assert_eq!(s.reused, round, "round {round}");
        }
        let long: Vec<u8> = (0..BODY_BUFFER + 4096).map(|i| (i % 13) as u8).collect();
        let sent = long.chunks(16 << 10).map(Bytes::copy_from_slice);
        assert!(joined(&received(&buffers, long.len() as u64, usize::MAX, sent)) == long);
        let s = buffers.stats();
        assert_eq!((s.created, s.reused), (1, 2), "a body over one buffer is not pooled");
    }
}
