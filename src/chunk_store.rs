//! Content-addressed block cache. Blocks are fixed-size pieces of a file's content, keyed by the
//! content's hash (Xet hash, LFS sha256 or git blob oid) and the block index, so identical bytes in
//! two revisions or two repos are held once. The memory tier is a moka cache weighed in bytes;
//! concurrent misses of one block share one fetch.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use crate::vfs::error::{VfsError, VfsResult};

/// Size of one cached block.
pub const BLOCK_SIZE: u64 = 8 << 20;

#[derive(Clone)]
pub struct ChunkStore {
    mem: moka::future::Cache<(Arc<str>, u64), Bytes>,
}

impl ChunkStore {
    /// A store holding at most `memory_bytes` of block data.
    pub fn new(memory_bytes: u64) -> Self {
        let mem = moka::future::Cache::builder()
            .weigher(|_k: &(Arc<str>, u64), v: &Bytes| v.len().min(u32::MAX as usize) as u32)
            .max_capacity(memory_bytes)
            .build();
        ChunkStore { mem }
    }

    pub async fn get(&self, key: &Arc<str>, block: u64) -> Option<Bytes> {
        self.mem.get(&(key.clone(), block)).await
    }

    /// The block, fetched by `fetch` on a miss; one fetch per block however many callers wait.
    pub async fn get_or_fetch<F>(&self, key: &Arc<str>, block: u64, fetch: F) -> VfsResult<Bytes>
    where
        F: Future<Output = VfsResult<Bytes>>,
    {
        self.mem
            .try_get_with((key.clone(), block), fetch)
            .await
            .map_err(VfsError::Shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn single_fetch_per_block() {
        let s = ChunkStore::new(64 << 20);
        let key: Arc<str> = Arc::from("xet:abc");
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (s, key, calls) = (s.clone(), key.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                s.get_or_fetch(&key, 3, async {
                    calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    Ok(Bytes::from_static(b"block"))
                })
                .await
                .unwrap()
            }));
        }
        for t in tasks {
            assert_eq!(&t.await.unwrap()[..], b"block");
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(s.get(&key, 3).await.is_some());
        assert!(s.get(&key, 4).await.is_none());
    }

    #[tokio::test]
    async fn errors_are_not_cached() {
        let s = ChunkStore::new(1 << 20);
        let key: Arc<str> = Arc::from("k");
        let r = s.get_or_fetch(&key, 0, async { Err(VfsError::NotFound) }).await;
        assert_eq!(r.unwrap_err().errno(), libc::ENOENT);
        let r = s.get_or_fetch(&key, 0, async { Ok(Bytes::from_static(b"x")) }).await;
        assert_eq!(&r.unwrap()[..], b"x");
    }
}
