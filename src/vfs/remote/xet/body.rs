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

use crate::chunk_store::buffer_pool::{BufferPool, PooledBuf};

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

    /// How many buffers were made and how many reused.
    #[cfg(test)]
    pub fn stats(&self) -> crate::chunk_store::buffer_pool::PoolStats {
        self.0.stats()
    }
}

/// One reply's body, collected as it arrives (see the module's doc for what is copied).
pub(super) struct Body<'b> {
    pieces: Vec<Bytes>,
    run: Run,
    /// Bytes the reply states (0: not stated).
    expect: u64,
    pub(super) got: u64,
    /// Pieces at least this long are kept as they came.
    keep_from: usize,
    buffers: &'b BodyBuffers,
}

/// Where copied pieces go until the run ends.
enum Run {
    /// A plain buffer; the part left over after a run ends stays for the next one.
    Plain(BytesMut),
    /// A pooled buffer, frozen whole when the run ends.
    Pooled(PooledBuf),
}

impl Run {
    fn is_empty(&self) -> bool {
        match self {
            Run::Plain(b) => b.is_empty(),
            Run::Pooled(b) => b.is_empty(),
        }
    }

    fn spare(&self) -> usize {
        match self {
            Run::Plain(b) => b.capacity() - b.len(),
            // The buffer's size, not its capacity: the slack kept for alignment varies with the
            // allocation, and how a body splits over buffers should not.
            Run::Pooled(b) => BODY_BUFFER.saturating_sub(b.len()).min(b.spare()),
        }
    }
}

impl<'b> Body<'b> {
    pub(super) fn new(expect: u64, keep_from: usize, buffers: &'b BodyBuffers) -> Body<'b> {
        Body {
            pieces: Vec::new(),
            run: Run::Plain(BytesMut::new()),
            expect,
            got: 0,
            keep_from,
            buffers,
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
            self.start_run(room, c.len());
        }
        match &mut self.run {
            Run::Plain(b) => b.extend_from_slice(&c),
            Run::Pooled(b) => b.extend_from_slice(&c),
        }
    }

    /// A new run with room for `room` bytes (`need` at least). Pooled when the body is copied
    /// whole (a pooled buffer is frozen whole, so it must fill), fits in one buffer (a part of a
    /// block on a distant Hub) and at least half a buffer is owed; otherwise plain, reusing what
    /// the last plain run left over. Larger bodies (a whole block in one request, before the link
    /// is measured) stay plain: cut into pooled buffers, those beyond the idle ones went back to
    /// the allocator's arenas instead of the kernel, and CI's 4 readers on loopback peaked
    /// 60-90 MiB higher.
    fn start_run(&mut self, room: usize, need: usize) {
        let pool = &self.buffers.0;
        let whole = self.keep_from == usize::MAX && self.expect > 0 && self.expect <= pool.buf_size() as u64;
        if whole && room >= pool.buf_size() / 2 && need <= pool.buf_size() {
            self.run = Run::Pooled(pool.acquire(room.min(pool.buf_size())));
            return;
        }
        if let Run::Pooled(_) = self.run {
            self.run = Run::Plain(BytesMut::new());
        }
        if let Run::Plain(b) = &mut self.run {
            b.reserve(room);
        }
    }

    /// Moves the copied pieces into `pieces` (a plain run's spare room stays for the next).
    fn end_run(&mut self) {
        if self.run.is_empty() {
            return;
        }
        match &mut self.run {
            Run::Plain(b) => self.pieces.push(b.split().freeze()),
            Run::Pooled(_) => {
                if let Run::Pooled(b) = std::mem::replace(&mut self.run, Run::Plain(BytesMut::new())) {
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

    #[test]
    fn small_pieces_are_copied_into_one_buffer_of_the_stated_length() {
        let buffers = BodyBuffers::default();
        let mut b = Body::new(3000, usize::MAX, &buffers);
        for i in 0..3u8 {
            b.push(Bytes::from(vec![i; 1000]));
        }
        let pieces = b.pieces();
        assert_eq!(pieces.len(), 1, "one buffer, not the client's pieces");
        let want: Vec<u8> = (0..3u8).flat_map(|i| vec![i; 1000]).collect();
        assert_eq!(&pieces[0][..], &want[..]);
    }

    #[test]
    fn on_a_fast_link_large_pieces_are_kept_as_they_came() {
        let buffers = BodyBuffers::default();
        let large = Bytes::from(vec![7u8; LARGE_PIECE]);
        let total = (LARGE_PIECE + 20) as u64;
        let mut b = Body::new(total, LARGE_PIECE, &buffers);
        b.push(Bytes::from(vec![1u8; 10]));
        b.push(large.clone());
        b.push(Bytes::from(vec![2u8; 10]));
        let pieces = b.pieces();
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces[1].as_ptr(), large.as_ptr(), "not copied");
        let all: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        let mut want = vec![1u8; 10];
        want.extend(vec![7u8; LARGE_PIECE]);
        want.extend([2u8; 10]);
        assert_eq!(all, want, "in order");
        // Unmeasured or slow: the large piece is copied too.
        let mut b = Body::new(total, usize::MAX, &buffers);
        b.push(large.clone());
        assert_ne!(b.pieces()[0].as_ptr(), large.as_ptr());
        assert_eq!(buffers.stats().created, 0, "bodies under half a buffer are not pooled");
    }

    #[test]
    fn a_body_of_no_stated_length_is_still_whole() {
        let buffers = BodyBuffers::default();
        let mut b = Body::new(0, usize::MAX, &buffers);
        for i in 0..50u8 {
            b.push(Bytes::from(vec![i; 333]));
        }
        let all: Vec<u8> = b.pieces().iter().flat_map(|p| p.iter().copied()).collect();
        let want: Vec<u8> = (0..50u8).flat_map(|i| vec![i; 333]).collect();
        assert_eq!(all, want);
    }

    /// Bodies of one part, copied whole, fill a pooled buffer, and the buffer serves the next
    /// body once its pieces are dropped: no fresh allocation per body. A longer body stays plain.
    #[test]
    fn whole_bodies_reuse_pooled_buffers() {
        let buffers = BodyBuffers::default();
        let data: Vec<u8> = (0..BODY_BUFFER).map(|i| (i % 251) as u8).collect();
        for round in 0..3 {
            let mut b = Body::new(data.len() as u64, usize::MAX, &buffers);
            for c in data.chunks(16 << 10 | 7) {
                b.push(Bytes::copy_from_slice(c));
            }
            let pieces = b.pieces();
            assert_eq!(pieces.len(), 1, "one full buffer");
            assert!(pieces[0][..] == data[..], "round {round}: the bytes as sent");
            drop(pieces);
            let s = buffers.stats();
            assert_eq!(s.created, 1, "round {round}: the first body's buffer, reused after");
            assert_eq!(s.reused, round, "round {round}");
        }
        let long: Vec<u8> = (0..BODY_BUFFER + 4096).map(|i| (i % 13) as u8).collect();
        let mut b = Body::new(long.len() as u64, usize::MAX, &buffers);
        for c in long.chunks(16 << 10) {
            b.push(Bytes::copy_from_slice(c));
        }
        let all: Vec<u8> = b.pieces().iter().flat_map(|p| p.iter().copied()).collect();
        assert!(all == long);
        let s = buffers.stats();
        assert_eq!((s.created, s.reused), (1, 2), "a body over one buffer is not pooled");
    }
}
