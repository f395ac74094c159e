//! A pool of reusable buffers for cache blocks.
//!
//! A fresh 8 MiB allocation is an `mmap` whose every page faults on first write and is returned to
//! the kernel on free; on a read path that fills one block after another this costs more than the
//! copy itself (the page-fault profile of a peer's read path). Blocks are therefore filled into
//! buffers that are reused: a buffer goes back to the pool when the last `Bytes` slice of its block
//! is dropped (evicted from the cache, reply sent). A new buffer is not written before use: a fill
//! pass costs the same faults plus a pass over the memory, so the first copy into it faults its
//! pages instead. (Transparent huge pages were tried: fewer faults on an idle machine, but with the
//! page cache full the kernel compacts memory on every huge fault and the mount's CPU per GiB
//! doubled.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

struct PoolInner {
    buf_size: usize,
    max_free: usize,
    free: Mutex<Vec<Vec<u8>>>,
    created: AtomicU64,
    reused: AtomicU64,
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
                free: Mutex::new(Vec::new()),
                created: AtomicU64::new(0),
                reused: AtomicU64::new(0),
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
            let mut b = self.fresh();
            // A non-zero fill writes every page (zero pages may be mapped lazily).
            b.resize(self.inner.buf_size, 0xA5);
            b.clear();
            fresh.push(b);
        }
        self.inner.free.lock().extend(fresh);
    }

    fn fresh(&self) -> Vec<u8> {
        self.inner.created.fetch_add(1, Ordering::Relaxed);
        Vec::with_capacity(self.inner.buf_size)
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
            None if len <= self.inner.buf_size => self.fresh(),
            None => Vec::with_capacity(len),
        };
        buf.clear();
        PooledBuf {
            buf,
            pool: Some(self.inner.clone()),
        }
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
    buf: Vec<u8>,
    pool: Option<Arc<PoolInner>>,
}

impl PooledBuf {
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The mutable spare room, for readers that fill the buffer in place.
    pub fn as_mut_vec(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// The filled bytes as a `Bytes` that keeps the buffer out of the pool until the last slice of
    /// it is dropped.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else { return };
        if self.buf.capacity() != pool.buf_size {
            return;
        }
        let mut free = pool.free.lock();
        if free.len() < pool.max_free {
            free.push(std::mem::take(&mut self.buf));
        }
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
        let b = pool.acquire(1024);
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
}
