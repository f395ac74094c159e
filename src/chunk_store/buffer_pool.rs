//! A pool of reusable buffers for cache blocks.
//!
//! A fresh 8 MiB allocation is an `mmap` whose every page faults on first write and is returned to
//! the kernel on free; on a read path that fills one block after another this costs more than the
//! copy itself (the page-fault profile of a peer's read path). Blocks are therefore filled into
//! buffers that are reused: a buffer goes back to the pool when the last `Bytes` slice of its block
//! is dropped (evicted from the cache, reply sent). A new buffer is not written before use (a fill
//! pass costs the same faults plus a pass over the memory): its pages are mapped in with one
//! `madvise(MADV_POPULATE_WRITE)` instead, which spares the per-page trap (see `populate`).
//! (Transparent huge pages were tried: fewer faults on an idle machine, but with the page cache
//! full the kernel compacts memory on every huge fault and the mount's CPU per GiB doubled.)
//!
//! Every buffer's content starts at a 4 KiB-aligned address (a few bytes of padding in front), so
//! the disk tier can move a block to and from its file with `O_DIRECT`, without a bounce copy.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use super::budget::Usage;

/// Alignment of every buffer's first content byte (`O_DIRECT` on 512-byte and 4 KiB devices).
pub const ALIGN: usize = 4096;

struct PoolInner {
    buf_size: usize,
    max_free: usize,
    /// Bytes of buffers on loan, which the memory budget admits loads against.
    usage: Arc<Usage>,
    free: Mutex<Vec<Vec<u8>>>,
    created: AtomicU64,
    reused: AtomicU64,
    /// Buffers that admitted loads will still take (see [`Lease`]).
    pending: AtomicUsize,
}

impl PoolInner {
    /// Idle buffers worth keeping: `max_free`, and as many again while leases announce buffers
    /// not yet taken. A buffer given back while other admitted loads are about to take one goes
    /// to them instead of back to the kernel (and a fresh one's pages faulting in again): with 8
    /// readers at 30 ms that churn was a third of the mount's CPU. Not one for every buffer
    /// announced: a load waits for its first byte a while, and 16 NFS readers at 30 ms under
    /// `--memory-limit 128M` (where the plan keeps no body buffer) peaked at 153–156 MiB that way
    /// against 120–124.
    fn keep(&self) -> usize {
        self.max_free + self.pending.load(Ordering::Relaxed).min(self.max_free)
    }

    /// Frees idle buffers beyond what is worth keeping.
    fn trim(&self) {
        let extra: Vec<Vec<u8>> = {
            let mut free = self.free.lock();
            let at = self.keep().min(free.len());
            free.split_off(at)
        };
        drop(extra);
    }
}

/// Buffers an admitted load will take from the pool (a block's parts): until
/// it has taken them through the lease, buffers given back are kept for it (see
/// `PoolInner::keep`).
pub struct Lease {
    pool: Arc<PoolInner>,
    /// Buffers announced and not taken yet.
    left: AtomicUsize,
}

impl Lease {
    /// A buffer as [`BufferPool::acquire`], one of those announced if it is of the pool's size.
    pub fn acquire(&self, len: usize) -> PooledBuf {
        if len <= self.pool.buf_size
            && self
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
        {
            self.pool.pending.fetch_sub(1, Ordering::Relaxed);
        }
        BufferPool {
            inner: self.pool.clone(),
        }
        .acquire(len)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let left = self.left.swap(0, Ordering::Relaxed);
        self.pool.pending.fetch_sub(left, Ordering::Relaxed);
        self.pool.trim();
    }
}

/// Faults in the pages under the first `len` bytes of `buf`'s capacity with one
/// `MADV_POPULATE_WRITE` (Linux 5.14): the kernel maps them in a batch instead of taking one
/// fault per page as the first copy writes them (8 readers of 256 MiB at 30 ms: 292k-371k
/// page-fault traps in the mount, 41k-50k with it). Only whole pages inside the allocation are
/// advised. Returns false where the kernel refuses (the pages then fault in on first write).
fn populate(buf: &Vec<u8>, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        let page = rustix::param::page_size();
        let len = len.min(buf.capacity());
        let base = buf.as_ptr() as usize;
        let start = base.next_multiple_of(page);
        let end = (base + len) / page * page;
        if end <= start {
            return true;
        }
        // SAFETY: [start, end) lies inside `buf`'s allocation (page-rounded inwards), which is
        // mapped and owned by `buf`; MADV_POPULATE_WRITE only faults pages in as a write would,
        // without changing their content (fresh capacity is uninitialised anyway).
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_WRITE) };
        if rc != 0 {
            tracing::trace!(error = %std::io::Error::last_os_error(), "pages not populated");
        }
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (buf, len);
        false
    }
}

/// Cheap to clone; all clones share one free list.
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<PoolInner>,
}

/// How the pool has been used, for benchmarks and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub created: u64,
    pub reused: u64,
    pub free: usize,
}

impl BufferPool {
    /// A pool of `buf_size`-byte buffers that keeps at most `max_free` idle ones.
    pub fn new(buf_size: usize, max_free: usize) -> BufferPool {
        BufferPool {
            inner: Arc::new(PoolInner {
                buf_size,
                max_free,
                usage: Arc::default(),
                free: Mutex::new(Vec::new()),
                created: AtomicU64::new(0),
                reused: AtomicU64::new(0),
                pending: AtomicUsize::new(0),
            }),
        }
    }

    /// Creates idle buffers up front (up to `count`, at most `max_free`), their pages faulted in,
    /// so the first reads fault nothing.
    pub fn prefill(&self, count: usize) {
        let want = count.min(self.inner.max_free);
        let mut fresh = Vec::new();
        let have = self.inner.free.lock().len();
        for _ in have..want {
            let (mut b, populated) = self.fresh(self.inner.buf_size);
            if !populated {
                // A non-zero fill writes every page (zero pages may be mapped lazily).
                b.resize(b.capacity(), 0xA5);
                b.clear();
            }
            fresh.push(b);
        }
        self.inner.free.lock().extend(fresh);
    }

    /// A new buffer whose first `len` bytes (and the alignment padding) have their pages in,
    /// and whether the kernel mapped them (see [`populate`]).
    fn fresh(&self, len: usize) -> (Vec<u8>, bool) {
        self.inner.created.fetch_add(1, Ordering::Relaxed);
        let buf = Vec::with_capacity(self.inner.buf_size + ALIGN);
        let populated = populate(&buf, len + ALIGN);
        (buf, populated)
    }

    /// Announces `n` buffers a load admitted with room for them will take (see [`Lease`]).
    pub fn lease(&self, n: usize) -> Lease {
        self.inner.pending.fetch_add(n, Ordering::Relaxed);
        Lease {
            pool: self.inner.clone(),
            left: AtomicUsize::new(n),
        }
    }

    /// An empty buffer with room for `len` bytes. Requests larger than the pool's size get a
    /// one-off allocation that is not kept.
    pub fn acquire(&self, len: usize) -> PooledBuf {
        let reused = if len <= self.inner.buf_size {
            self.inner.free.lock().pop()
        } else {
            None
        };
        let mut buf = match reused {
            Some(b) => {
                self.inner.reused.fetch_add(1, Ordering::Relaxed);
                b
            }
            None if len <= self.inner.buf_size => self.fresh(len).0,
            None => Vec::with_capacity(len + ALIGN),
        };
        buf.clear();
        let base = buf.as_ptr() as usize;
        let start = base.next_multiple_of(ALIGN) - base;
        buf.resize(start, 0);
        let charged = buf.capacity() as u64;
        self.inner.usage.lend(charged);
        PooledBuf {
            buf,
            start,
            charged,
            pool: Some(self.inner.clone()),
        }
    }

    /// What is on loan, shared with the memory budget.
    pub fn usage(&self) -> &Arc<Usage> {
        &self.inner.usage
    }

    /// Size of each pooled buffer.
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            created: self.inner.created.load(Ordering::Relaxed),
            reused: self.inner.reused.load(Ordering::Relaxed),
            free: self.inner.free.lock().len(),
        }
    }
}

/// A buffer on loan from a [`BufferPool`]; it returns there when dropped.
pub struct PooledBuf {
    /// Padding up to the aligned start, then the content.
    buf: Vec<u8>,
    /// Where the content starts in `buf` (its address is a multiple of [`ALIGN`]).
    start: usize,
    /// Bytes counted on loan for it.
    charged: u64,
    pool: Option<Arc<PoolInner>>,
}

impl PooledBuf {
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes that can be appended without moving the buffer (which would lose its alignment).
    pub fn spare(&self) -> usize {
        self.buf.capacity() - self.buf.len()
    }

    /// Appends `len` bytes of `file` from offset `offset` with `pread`, straight into the buffer.
    /// `room` (at least `len`) is what one read may fill: an `O_DIRECT` descriptor needs a length
    /// rounded up to the device block, whose excess past the end of file stays unused. Errors
    /// with `UnexpectedEof` if the file ends before `len` bytes.
    pub fn pread_from(&mut self, file: &std::fs::File, offset: u64, len: usize, room: usize) -> std::io::Result<()> {
        let room = room.max(len);
        self.buf.reserve(room);
        let mut done = 0usize;
        while done < len {
            let at = self.buf.len();
            // The read lands in the spare capacity, in place (the buffer keeps its alignment); one
            // read may fill `room - done` bytes, of which the first `len - done` are kept.
            let spare = &mut self.buf.spare_capacity_mut()[..room - done];
            let n = match rustix::io::pread(file, spare, offset + done as u64) {
                Ok((filled, _)) => filled.len(),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            let keep = n.min(len - done);
            // SAFETY: `pread` initialised `n >= keep` bytes of the spare capacity starting at `at`
            // (it returned them as a filled slice), and `at + keep <= at + room - done` lies within the
            // capacity `reserve` made, so the first `at + keep` bytes are initialised.
            unsafe { self.buf.set_len(at + keep) };
            done += keep;
        }
        Ok(())
    }

    /// The filled bytes as a `Bytes` that keeps the buffer out of the pool until the last slice of
    /// it is dropped.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else { return };
        if self.buf.capacity() == pool.buf_size + ALIGN {
            let keep = pool.keep();
            let mut free = pool.free.lock();
            if free.len() < keep {
                free.push(std::mem::take(&mut self.buf));
            }
        }
        // Freed (or idle) before waiting readers are told there is room.
        drop(std::mem::take(&mut self.buf));
        pool.usage.give_back(self.charged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_when_the_last_slice_drops() {
        let pool = BufferPool::new(1024, 4);
        let mut b = pool.acquire(100);
        b.extend_from_slice(&[7u8; 100]);
        let bytes = b.freeze();
        let slice = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(pool.stats().free, 0, "a slice still holds the buffer");
        assert_eq!(&slice[..], &[7u8; 10]);
        drop(slice);
        assert_eq!(pool.stats().free, 1);
        assert_eq!(pool.usage().on_loan(), 0, "nothing on loan once it is back");
        let b = pool.acquire(1024);
        assert_eq!(pool.usage().on_loan(), 1024 + ALIGN as u64);
        assert!(b.is_empty(), "a reused buffer starts empty");
        assert_eq!(
            pool.stats(),
            PoolStats {
                created: 1,
                reused: 1,
                free: 0
            }
        );
    }

    #[test]
    fn content_starts_aligned_and_reads_in_place() {
        let pool = BufferPool::new(8192, 2);
        for len in [1usize, 8192, 20_000] {
            let b = pool.acquire(len);
            assert_eq!(b.as_ref().as_ptr() as usize % ALIGN, 0, "{len}-byte buffer");
            assert!(b.is_empty());
            assert!(b.spare() >= len);
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let mut b = pool.acquire(16);
        b.pread_from(&f, 2, 5, 5).unwrap();
        assert_eq!(b.as_ref(), b"23456");
        let mut b = pool.acquire(16);
        let e = b.pread_from(&f, 4, 10, 10).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "the file ends first");
    }

    #[test]
    fn idle_buffers_are_bounded_and_oversize_requests_are_not_kept() {
        let pool = BufferPool::new(64, 2);
        let held: Vec<PooledBuf> = (0..5).map(|_| pool.acquire(64)).collect();
        drop(held);
        assert_eq!(pool.stats().free, 2);
        let mut big = pool.acquire(1000);
        big.extend_from_slice(&[1u8; 1000]);
        assert_eq!(big.len(), 1000);
        drop(big);
        assert_eq!(pool.stats().free, 2);
        pool.prefill(10);
        assert_eq!(pool.stats().free, 2);
    }

    /// Resident pages under the `len` bytes at `at`, by `mincore` (from the page `at` is in).
    #[cfg(target_os = "linux")]
    fn resident_pages(at: *const u8, len: usize) -> usize {
        let page = rustix::param::page_size();
        let start = at as usize / page * page;
        let len = len + (at as usize - start);
        let mut v = vec![0u8; len.div_ceil(page)];
        // SAFETY: the caller's range lies in one live allocation; from the start of its first
        // page the range is mapped, and `v` has a byte per page of it.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        v.iter().filter(|b| **b & 1 == 1).count()
    }

    /// A fresh buffer comes with the pages it was asked for mapped in, so the copy that fills it
    /// takes no page faults; a prefilled one has all of its pages in.
    #[cfg(target_os = "linux")]
    #[test]
    fn fresh_buffers_come_with_their_pages_in() {
        const MIB: usize = 1 << 20;
        let pool = BufferPool::new(4 * MIB, 2);
        let b = pool.acquire(2 * MIB);
        let at = b.as_ref().as_ptr();
        let page = rustix::param::page_size();
        assert_eq!(at as usize % ALIGN, 0);
        assert_eq!(
            resident_pages(at, 2 * MIB),
            2 * MIB / page,
            "the asked-for 2 MiB are in"
        );
        let pool = BufferPool::new(4 * MIB, 2);
        pool.prefill(2);
        let whole: Vec<PooledBuf> = (0..2).map(|_| pool.acquire(4 * MIB)).collect();
        assert_eq!(pool.stats().created, 2, "both prefilled, none made on acquire");
        for b in &whole {
            assert_eq!(resident_pages(b.as_ref().as_ptr(), 4 * MIB), 4 * MIB / page);
        }
    }

    /// Buffers given back while leases announce buffers not yet taken stay idle for them, up to
    /// twice `max_free`, and go back to the allocator once taken or once the lease ends.
    #[test]
    fn leases_keep_buffers_for_loads_about_to_take_them() {
        let pool = BufferPool::new(64, 2);
        let lease = pool.lease(3);
        let held: Vec<PooledBuf> = (0..6).map(|_| pool.acquire(64)).collect();
        drop(held);
        assert_eq!(pool.stats().free, 4, "three announced, none taken: twice max_free kept");
        let taken: Vec<PooledBuf> = (0..2).map(|_| lease.acquire(64)).collect();
        let s = pool.stats();
        assert_eq!((s.created, s.reused, s.free), (6, 2, 2), "the kept ones were taken");
        let other: Vec<PooledBuf> = (0..4).map(|_| pool.acquire(64)).collect();
        drop(other);
        assert_eq!(pool.stats().free, 3, "one still to be taken through the lease");
        let oversize = lease.acquire(1000);
        drop(oversize);
        assert_eq!(pool.stats().free, 3, "an oversize buffer is not one of those announced");
        drop(taken);
        assert_eq!(pool.stats().free, 3);
        drop(lease);
        assert_eq!(pool.stats().free, 2, "the lease ended: back to max_free");
        let lease = pool.lease(1);
        drop(lease.acquire(64));
        let held: Vec<PooledBuf> = (0..4).map(|_| pool.acquire(64)).collect();
        drop(held);
        assert_eq!(pool.stats().free, 2, "all announced were taken");
        // A pool that keeps none idle keeps none for leases either (a small memory budget).
        let pool = BufferPool::new(64, 0);
        let _lease = pool.lease(4);
        drop(pool.acquire(64));
        assert_eq!(pool.stats().free, 0);
    }
}
