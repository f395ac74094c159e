//! Blocks held for the readers that want them. The memory tier is an LRU bounded in bytes, and
//! several sequential readers each prefetching a window of blocks want more than it holds: a
//! block fetched for one reader was evicted by the others' before that reader got to it, and the
//! reader fetched it again (8 readers of 256 MiB shards: 1.5–1.65 × the bytes read from the Hub
//! on loopback, 2.4–2.7 × at 30 ms per request). A reader takes a hold on each block of its window
//! when it asks for it and drops it once it has read past it; a held block, once loaded, is kept
//! here whatever the memory tier evicts, so it is fetched once while it is wanted.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

/// (content key, block index).
type BlockKey = (Arc<str>, u64);

/// One held block: how many holds want it, and its bytes once some load delivered them.
#[derive(Default)]
struct Held {
    holds: usize,
    data: Option<Bytes>,
}

/// Blocks a prefetch is loading or loaded that no read has used yet. For the prefetch metrics. A
/// leaf lock.
pub(super) type Prefetched = Arc<parking_lot::Mutex<HashMap<BlockKey, PrefetchEntry>>>;

/// One prefetched block in [`Prefetched`].
#[derive(Clone, Copy)]
pub(super) struct PrefetchEntry {
    pub(super) len: usize,
    /// The memory tier has let it go already (it then lives only in a hold).
    pub(super) left_memory: bool,
    /// Counted as fetched. A read that joins the prefetch's load can use the block before the
    /// prefetch's task reports: whoever removes the entry first counts it then.
    pub(super) counted: bool,
}

impl PrefetchEntry {
    /// Counts the entry as fetched if its prefetch has not yet, when it leaves the map.
    pub(super) fn settle(self) {
        if !self.counted {
            crate::metrics::prefetch("fetched", self.len);
        }
    }
}

/// The held blocks of one chunk store. Its lock is a leaf: nothing else is taken while it is held,
/// and no `Bytes` is dropped under it (a block buffer's drop returns it to the pool).
#[derive(Clone, Default)]
pub(super) struct Holds(Arc<parking_lot::Mutex<HashMap<BlockKey, Held>>>, pub(super) Prefetched);

impl Holds {
    pub(super) fn hold(&self, key: &Arc<str>, block: u64) -> BlockHold {
        self.0.lock().entry((key.clone(), block)).or_default().holds += 1;
        BlockHold {
            holds: self.clone(),
            key: (key.clone(), block),
        }
    }

    /// The block's bytes if it is held and loaded.
    pub(super) fn get(&self, key: &Arc<str>, block: u64) -> Option<Bytes> {
        self.0.lock().get(&(key.clone(), block))?.data.clone()
    }

    pub(super) fn contains(&self, key: &Arc<str>, block: u64) -> bool {
        self.0.lock().contains_key(&(key.clone(), block))
    }

    /// Keeps `data` for a held block that has none yet (a block nobody holds is left alone).
    pub(super) fn fill(&self, key: &Arc<str>, block: u64, data: &Bytes) {
        if let Some(h) = self.0.lock().get_mut(&(key.clone(), block))
            && h.data.is_none()
        {
            h.data = Some(data.clone());
        }
    }

    /// Bytes of held blocks that are loaded (for tests and figures).
    pub(super) fn bytes(&self) -> u64 {
        self.0
            .lock()
            .values()
            .filter_map(|h| h.data.as_ref())
            .map(|d| d.len() as u64)
            .sum()
    }
}

/// A hold on one block for as long as it lives; the block is let go with its last hold.
pub struct BlockHold {
    holds: Holds,
    key: BlockKey,
}

impl std::fmt::Debug for BlockHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockHold({}, {})", self.key.0, self.key.1)
    }
}

impl Drop for BlockHold {
    fn drop(&mut self) {
        let released = {
            let mut map = self.holds.0.lock();
            match map.get_mut(&self.key) {
                Some(h) if h.holds > 1 => {
                    h.holds -= 1;
                    None
                }
                Some(_) => map.remove(&self.key),
                None => None,
            }
        };
        // A prefetched block the memory tier had let go of is gone with its last hold, unused.
        if released.is_some() {
            let mut p = self.holds.1.lock();
            if let Some(&e) = p.get(&self.key)
                && e.left_memory
            {
                p.remove(&self.key);
                drop(p);
                e.settle();
                crate::metrics::prefetch("evicted_unused", e.len);
            }
        }
        // The block's bytes are dropped here, outside the lock.
        drop(released);
    }
}
