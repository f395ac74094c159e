//! Content-addressed block cache. Blocks are fixed-size pieces of a file's content, keyed by the
//! content's hash (Xet hash, LFS sha256 or git blob oid) and the block index, so identical bytes in
//! two revisions or two repos are held once. A bounded memory tier (moka, weighed in bytes) sits
//! above an optional bounded disk tier; concurrent misses of one block share one fetch, blocks a
//! reader holds (its prefetch window) stay loaded until it lets them go whatever the tiers evict,
//! and block buffers come from a pool of reused buffers.

pub mod budget;
pub mod buffer_pool;
mod claim;
mod direct;
mod disk;
mod error;
mod hold;
mod partial;
pub mod shared;
mod spill;
mod whole;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

pub use budget::{Admission, MemoryBudget, MemoryReport, Plan, Reading};
pub use claim::Claim;
pub use disk::DiskTier;
pub use error::ChunkStoreError;
pub use hold::BlockHold;
pub use partial::PartialBlocks;
pub use shared::{MetaKey, SharedTier};

use crate::chunk_store::buffer_pool::BufferPool;

/// Most bytes the parts of blocks (`partial`) keep.
const PARTIAL_MAX: u64 = 64 << 20;

/// Size of one cached block.
pub const BLOCK_SIZE: u64 = 8 << 20;

/// Idle block buffers kept for reuse (4 × 8 MiB).
const POOL_IDLE_BUFFERS: usize = 4;

/// Blocks written to disk at once.
const DISK_WRITERS: usize = 4;

/// Blocks queued for the disk at most (writing or waiting for a writer); beyond it a fetched block
/// is not written, so a fast reader cannot pile up memory behind a slow disk (64 MiB at most).
const MAX_PENDING_DISK_WRITES: usize = 8;

/// How long a queued block waits for a writer before it is given up.
const DISK_WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Lock order: `loading`, `writing`, `prefetched`, the claims', the spill's and the holds' locks
/// are leaves, never nested (the eviction listener and a hold's drop take the holds' lock, let it
/// go, then `prefetched`'s; the listener takes the spill's alone, after both).
#[derive(Clone)]
pub struct ChunkStore {
    mem: moka::future::Cache<(Arc<str>, u64), Bytes>,
    disk: Option<DiskTier>,
    /// The tier between disk and the Hub (`--shared-cache`).
    shared: Option<SharedTier>,
    pool: BufferPool,
    pending_writes: Arc<std::sync::atomic::AtomicUsize>,
    disk_writers: Arc<tokio::sync::Semaphore>,
    /// Blocks being loaded right now (from disk or the Hub), so a reader that seeks into one waits
    /// for it instead of asking the Hub for the same bytes again. A leaf lock: nothing else is taken
    /// while it is held.
    loading: Arc<parking_lot::Mutex<BlockSet>>,
    /// Blocks queued for the disk tier and not yet written (or given up), with their bytes: a
    /// close can tell a block on its way to disk from one that never will be, and a read of a
    /// block the memory tier let go of before its write ended is served from here rather than
    /// fetched again (on a loaded machine a full scan fetched a block twice that way). A leaf
    /// lock, like `loading`.
    writing: Arc<parking_lot::Mutex<BlockBytes>>,
    /// Blocks readers hold (see `hold`), served from here before either tier.
    holds: hold::Holds,
    /// Blocks the write queue turned away, written when the memory tier lets them go.
    spill: Arc<spill::Spill>,
    /// Room taken for blocks whose loads have not started yet (see `claim`).
    claims: claim::Claims,
    /// Admits loads against the process's memory budget (see `budget`).
    budget: MemoryBudget,
    /// Byte ranges of blocks that sparse reads fetched exactly (see `partial`), within the
    /// memory tier's share.
    partial: PartialBlocks,
    /// Blocks loaded by a prefetch and not yet used by a read (the prefetch metrics: used, or let
    /// go unused). A leaf lock, like `loading`; shared with the holds.
    prefetched: hold::Prefetched,
}

/// A block left the memory tier: a prefetched one no read used is gone unused, unless a hold
/// keeps it (then it is, with its last hold).
fn left_memory(holds: &hold::Holds, k: &(Arc<str>, u64)) {
    let held = holds.contains(&k.0, k.1);
    let mut p = holds.1.lock();
    match p.get_mut(k) {
        Some(e) if held => e.left_memory = true,
        Some(&mut e) => {
            p.remove(k);
            drop(p);
            e.settle();
            crate::metrics::prefetch("evicted_unused", e.len);
        }
        None => {}
    }
}

/// A set of (content key, block index).
type BlockSet = std::collections::HashSet<(Arc<str>, u64)>;

/// Blocks by (content key, block index), with their bytes.
type BlockBytes = std::collections::HashMap<(Arc<str>, u64), Bytes>;

/// Marks a block as loading from when its load starts (`arm`) until it is dropped, which the
/// caller does once the loaded block is in the memory tier: a reader that looks between the two
/// (the load's future done, the tier not yet holding its block) would find the block neither
/// loading nor loaded and fetch its bytes again.
struct Loading<'a> {
    set: &'a parking_lot::Mutex<BlockSet>,
    key: (Arc<str>, u64),
    armed: std::sync::atomic::AtomicBool,
}

impl Loading<'_> {
    /// The load is this caller's: mark the block.
    fn arm(&self) {
        self.set.lock().insert(self.key.clone());
        self.armed.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        if *self.armed.get_mut() {
            self.set.lock().remove(&self.key);
        }
    }
}

impl ChunkStore {
    /// A store holding at most `memory_bytes` of block data, in memory only, with no budget.
    pub fn new(memory_bytes: u64) -> Self {
        Self::build(memory_bytes, POOL_IDLE_BUFFERS, None, "none")
    }

    /// A store within the memory budget `plan` (`source` says where its limit came from); its
    /// memory tier and idle buffers are the plan's.
    pub fn budgeted(plan: Plan, source: &str) -> Self {
        Self::build(plan.memory_tier, plan.idle_buffers, Some(plan), source)
    }

    fn build(memory_bytes: u64, idle_buffers: usize, plan: Option<Plan>, source: &str) -> Self {
        let holds = hold::Holds::default();
        let spill = Arc::new(spill::Spill::default());
        // Half of the memory tier for parts of blocks, at most 64 MiB: readers that read a file
        // in scattered pieces (pyarrow's threads through one descriptor) keep their parts until
        // the blocks load (with a quarter, a full scan fetched 4-9% twice). Within a budget it is
        // taken from the tier; a store with no budget (tests, tools) keeps its tier whole.
        let partial_cap = (memory_bytes / 2).min(PARTIAL_MAX);
        let memory_bytes = match plan {
            Some(_) => memory_bytes - partial_cap,
            None => memory_bytes,
        };
        // LRU, not moka's default TinyLFU: a block read once by a sequential reader is exactly the
        // one a re-read or the reader's next pass wants, and TinyLFU would refuse to admit it.
        let mem = moka::future::Cache::builder()
            .weigher(|_k: &(Arc<str>, u64), v: &Bytes| v.len().min(u32::MAX as usize) as u32)
            .max_capacity(memory_bytes)
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .async_eviction_listener({
                let (holds, spill) = (holds.clone(), spill.clone());
                move |k: Arc<(Arc<str>, u64)>, v: Bytes, cause| {
                    crate::metrics::evicted("memory", cause.was_evicted());
                    let (holds, spill) = (holds.clone(), spill.clone());
                    Box::pin(async move {
                        if cause != moka::notification::RemovalCause::Replaced {
                            left_memory(&holds, &k);
                            spill.left_memory(&k, v).await;
                        }
                    })
                }
            })
            .build();
        let pool = BufferPool::new(BLOCK_SIZE as usize, idle_buffers);
        let budget = MemoryBudget::new(plan, source, pool.usage().clone());
        ChunkStore {
            mem,
            disk: None,
            shared: None,
            pool,
            budget,
            pending_writes: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            disk_writers: Arc::new(tokio::sync::Semaphore::new(DISK_WRITERS)),
            loading: Arc::default(),
            writing: Arc::default(),
            prefetched: holds.1.clone(),
            holds,
            spill,
            claims: claim::Claims::default(),
            partial: PartialBlocks::new(partial_cap),
        }
    }

    /// A store with a memory tier of `memory_bytes` above a disk tier of `disk_bytes` under `dir`.
    pub fn with_disk(memory_bytes: u64, dir: &Path, disk_bytes: u64) -> std::io::Result<Self> {
        ChunkStore::new(memory_bytes).add_disk(dir, disk_bytes)
    }

    /// This store above a disk tier of `disk_bytes` under `dir`.
    pub fn add_disk(mut self, dir: &Path, disk_bytes: u64) -> std::io::Result<Self> {
        let disk = DiskTier::open(dir, disk_bytes)?;
        // A store is given one disk tier, right after it is built.
        self.spill.set_disk(disk.clone());
        self.disk = Some(disk);
        Ok(self)
    }

    /// This store above the shared tier `tier` (below memory and disk, above the Hub).
    pub fn add_shared(mut self, tier: SharedTier) -> Self {
        if let Some(disk) = &self.disk {
            tier.set_disk(disk.clone(), self.pool.clone());
        }
        self.shared = Some(tier);
        self
    }

    pub fn shared(&self) -> Option<&SharedTier> {
        self.shared.as_ref()
    }

    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Room a load of a block of `len` bytes takes: a pooled buffer from 1 MiB on (what the
    /// fetchers assemble such blocks in), its own length below.
    pub fn load_charge(len: u64) -> u64 {
        if len >= 1 << 20 {
            BLOCK_SIZE + buffer_pool::ALIGN as u64
        } else {
            len
        }
    }

    /// Whether the memory tier has the block or a reader holds it loaded: holding it more takes
    /// no new memory.
    pub fn is_loaded(&self, key: &Arc<str>, block: u64) -> bool {
        self.mem.contains_key(&(key.clone(), block)) || self.holds.get(key, block).is_some()
    }

    /// Where the memory is now (`hubfs status`).
    pub fn memory_report(&self) -> MemoryReport {
        let mut r = self.budget.report();
        r.held = self.holds.bytes();
        r.memory_tier = self.mem.weighted_size();
        r.idle_buffers = self.pool.stats().free as u64 * (self.pool.buf_size() + buffer_pool::ALIGN) as u64;
        r.shared = self.shared.as_ref().map(SharedTier::report);
        r
    }

    /// Keeps `data`, block `block` of `key` assembled whole from its parts by sparse reads, as a
    /// loaded block: in the memory tier, for the holds waiting on it, and written to disk in the
    /// background (parts are memory only, and a block whose parts were let go would be fetched
    /// again when loaded).
    pub async fn adopt(&self, key: &Arc<str>, block: u64, data: Bytes) {
        self.write_behind(key, block, &data);
        self.holds.fill(key, block, &data);
        self.mem.insert((key.clone(), block), data).await;
    }

    /// Parts of blocks fetched by sparse reads.
    pub fn partial(&self) -> &PartialBlocks {
        &self.partial
    }

    /// The pool block buffers come from; fetchers fill blocks into it.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Bytes and blocks in the memory tier, and its capacity (for metrics).
    pub fn memory_usage(&self) -> (u64, u64, u64) {
        let cap = self.mem.policy().max_capacity().unwrap_or(0);
        (self.mem.weighted_size(), self.mem.entry_count(), cap)
    }

    pub fn disk(&self) -> Option<&DiskTier> {
        self.disk.as_ref()
    }

    async fn read_disk(&self, key: &Arc<str>, block: u64, expected_len: u64) -> Option<Bytes> {
        if let Some(b) = self.unwritten(key, block) {
            return Some(b);
        }
        let disk = self.disk.clone()?;
        let (k, pool) = ((key.clone(), block), self.pool.clone());
        tokio::task::spawn_blocking(move || disk.read(&k, expected_len, &pool))
            .await
            .ok()
            .flatten()
    }

    /// A block on its way to disk whose write has not ended: its bytes are still in hand.
    fn unwritten(&self, key: &Arc<str>, block: u64) -> Option<Bytes> {
        let k = (key.clone(), block);
        let queued = self.writing.lock().get(&k).cloned();
        queued.or_else(|| self.spill.writing(&k))
    }

    /// Queues a fetched block for the disk tier, unless too many writes are already waiting.
    fn write_behind(&self, key: &Arc<str>, block: u64, data: &Bytes) {
        use std::sync::atomic::Ordering;
        let Some(disk) = self.disk.clone() else { return };
        if self.pending_writes.fetch_add(1, Ordering::AcqRel) >= self.budget.disk_queue(MAX_PENDING_DISK_WRITES) {
            self.pending_writes.fetch_sub(1, Ordering::AcqRel);
            tracing::trace!(block, "disk cache busy; block written when memory lets it go");
            self.spill.turned_away(key, block);
            return;
        }
        let (k, data, pending) = ((key.clone(), block), data.clone(), self.pending_writes.clone());
        let (writers, writing) = (self.disk_writers.clone(), self.writing.clone());
        writing.lock().insert(k.clone(), data.clone());
        tokio::spawn(async move {
            let queued = k.clone();
            // A busy disk (a burst of prefetched blocks, a loaded machine) makes a block wait for a
            // writer rather than be dropped; only a disk stuck for DISK_WRITE_WAIT loses it.
            match tokio::time::timeout(DISK_WRITE_WAIT, writers.acquire_owned()).await {
                Ok(Ok(permit)) => {
                    let _ = tokio::task::spawn_blocking(move || {
                        disk.write(k, &data);
                        drop(permit);
                    })
                    .await;
                }
                _ => tracing::debug!(block = k.1, "disk cache stuck; block not written"),
            }
            writing.lock().remove(&queued);
            pending.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Holds a block for a reader that will want it: once some load of it succeeds its bytes stay
    /// here, whatever the tiers evict, until the last hold is dropped. A reader holds its prefetch
    /// window, so a block fetched for it is not fetched again before it gets there.
    pub fn hold(&self, key: &Arc<str>, block: u64) -> BlockHold {
        self.holds.hold(key, block)
    }

    /// Whether some reader holds the block: it wants all of it, so it is loaded whole anyway.
    pub fn is_held(&self, key: &Arc<str>, block: u64) -> bool {
        self.holds.contains(key, block)
    }

    /// Room for a reader's own load: at once if there is some, else after the memory tier has
    /// let go of blocks nobody holds (they are on disk, or cheap to fetch again), waiting for
    /// readers to pass theirs if that was not enough.
    async fn admit(&self, charge: u64) -> Admission {
        self.budget.admit_with(charge, || self.shed(charge)).await
    }

    /// Room for a reader's own load if there is some now or once the memory tier has let go of
    /// blocks nobody holds; `None` if the budget is full of blocks readers hold.
    pub async fn try_room(&self, charge: u64) -> Option<Admission> {
        if let Some(a) = self.budget.try_admit(charge) {
            return Some(a);
        }
        self.shed(charge).await;
        self.budget.try_admit(charge)
    }

    /// Evicts memory-tier blocks no reader holds, about `bytes` of them.
    async fn shed(&self, bytes: u64) {
        let mut freed = 0u64;
        let mut victims = Vec::new();
        for (k, v) in self.mem.iter() {
            if freed >= bytes {
                break;
            }
            if !self.holds.contains(&k.0, k.1) {
                freed += v.len() as u64;
                victims.push(k);
            }
        }
        if victims.is_empty() {
            return;
        }
        for k in victims {
            self.mem.invalidate(&*k).await;
        }
        // Evicted values are dropped (their buffers returned) by the cache's housekeeping.
        self.mem.run_pending_tasks().await;
    }

    /// A prefetch of the block is about to load `len` bytes (the prefetch metrics).
    pub fn prefetching(&self, key: &Arc<str>, block: u64, len: u64) {
        let e = hold::PrefetchEntry {
            len: len as usize,
            left_memory: false,
            counted: false,
        };
        self.prefetched.lock().insert((key.clone(), block), e);
    }

    /// A prefetch of the block ended: counted as fetched if it loaded, forgotten if it failed.
    pub fn prefetched(&self, key: &Arc<str>, block: u64, ok: bool) {
        let mut p = self.prefetched.lock();
        let k = (key.clone(), block);
        match p.get_mut(&k) {
            Some(e) if ok && !e.counted => {
                e.counted = true;
                let len = e.len;
                drop(p);
                crate::metrics::prefetch("fetched", len);
            }
            Some(_) if !ok => {
                p.remove(&k);
            }
            // Counted already, or used (and counted) before this report.
            _ => {}
        }
    }

    /// A read used the block: if a prefetch brought it, that prefetch was of use.
    pub fn used(&self, key: &Arc<str>, block: u64) {
        let mut p = self.prefetched.lock();
        if p.is_empty() {
            return;
        }
        if let Some(e) = p.remove(&(key.clone(), block)) {
            drop(p);
            e.settle();
            crate::metrics::prefetch("used", e.len);
        }
    }

    /// Gives a held block its bytes if the memory tier has them, so they outlive its eviction.
    pub async fn keep_held(&self, key: &Arc<str>, block: u64) {
        if let Some(b) = self.mem.get(&(key.clone(), block)).await {
            self.holds.fill(key, block, &b);
        }
    }

    /// Bytes of loaded blocks that readers hold.
    pub fn held_bytes(&self) -> u64 {
        self.holds.bytes()
    }

    /// The block if either tier has it or a reader holds it (a disk hit is promoted to memory).
    /// Memory is asked first: its reads are what drives its evictions.
    pub async fn get(&self, key: &Arc<str>, block: u64, expected_len: u64) -> Option<Bytes> {
        if let Some(b) = self.mem.get(&(key.clone(), block)).await {
            crate::metrics::block(crate::metrics::BlockSource::Memory, b.len());
            return Some(b);
        }
        if let Some(b) = self.holds.get(key, block) {
            crate::metrics::block(crate::metrics::BlockSource::Held, b.len());
            return Some(b);
        }
        let b = self.read_disk(key, block, expected_len).await?;
        crate::metrics::block(crate::metrics::BlockSource::Disk, b.len());
        self.mem.insert((key.clone(), block), b.clone()).await;
        Some(b)
    }

    /// Bytes `[from, to)` of a block if either tier (or the block's parts) has it, without promoting a disk block to
    /// memory: a random reader must not pull 8 MiB off disk for every 4 KiB it reads.
    pub async fn get_range(&self, key: &Arc<str>, block: u64, expected_len: u64, from: u64, to: u64) -> Option<Bytes> {
        let b = match self.mem.get(&(key.clone(), block)).await {
            Some(b) => Some(b),
            None => self.holds.get(key, block),
        };
        if let Some(b) = b {
            crate::metrics::block(crate::metrics::BlockSource::Memory, to.saturating_sub(from) as usize);
            return (to as usize <= b.len() && from < to).then(|| b.slice(from as usize..to as usize));
        }
        if let Some(b) = self.partial.get(key, block, from, to) {
            crate::metrics::block(crate::metrics::BlockSource::Memory, b.len());
            return Some(b);
        }
        if let Some(b) = self.unwritten(key, block) {
            return (to as usize <= b.len() && from < to).then(|| b.slice(from as usize..to as usize));
        }
        let disk = self.disk.clone()?;
        let k = (key.clone(), block);
        let got = tokio::task::spawn_blocking(move || disk.read_range(&k, expected_len, from, to))
            .await
            .ok()
            .flatten();
        got.inspect(|b| crate::metrics::block(crate::metrics::BlockSource::Disk, b.len()))
    }

    /// Whether the block is on its way to the disk tier: loading, or queued for its write. (A
    /// block only in memory is not: the write queue may have been full when it was fetched.)
    pub fn on_its_way_to_disk(&self, key: &Arc<str>, block: u64) -> bool {
        let k = (key.clone(), block);
        self.writing.lock().contains_key(&k) || self.loading.lock().contains(&k) || self.spill.writing(&k).is_some()
    }

    /// Whether the block is being loaded by some caller of `get_or_fetch` right now, or is about
    /// to be (claimed).
    pub fn is_loading(&self, key: &Arc<str>, block: u64) -> bool {
        let k = (key.clone(), block);
        self.loading.lock().contains(&k) || self.claims.contains(&k)
    }

    /// Claims the block's load with `room` (see `Claim`).
    pub fn claim(&self, key: &Arc<str>, block: u64, room: Admission) -> Claim {
        self.claims.claim(key, block, room)
    }

    /// The block, from a hold, memory, disk, the shared tier, or `fetch` on a miss of all; one load per block however
    /// many callers wait. Fetched blocks are written to disk in the background, and kept for the
    /// holds on them. A failed fetch's error `E` comes back to every caller waiting on the load.
    pub async fn get_or_fetch<F, E>(
        &self,
        key: &Arc<str>,
        block: u64,
        expected_len: u64,
        fetch: F,
    ) -> Result<Bytes, ChunkStoreError<E>>
    where
        F: Future<Output = Result<Bytes, E>>,
        E: Send + Sync + 'static,
    {
        self.get_or_fetch_admitted(key, block, expected_len, None, fetch).await
    }

    /// `get_or_fetch` for a load already admitted (a prefetch): `admission` is the room it took.
    /// Without one, a load waits for room in the memory budget first.
    pub async fn get_or_fetch_admitted<F, E>(
        &self,
        key: &Arc<str>,
        block: u64,
        expected_len: u64,
        admission: Option<Admission>,
        fetch: F,
    ) -> Result<Bytes, ChunkStoreError<E>>
    where
        F: Future<Output = Result<Bytes, E>>,
        E: Send + Sync + 'static,
    {
        // Memory first, as `get`: a hold is for what memory let go of.
        if let Some(b) = self.mem.get(&(key.clone(), block)).await {
            crate::metrics::block(crate::metrics::BlockSource::Memory, b.len());
            return Ok(b);
        }
        if let Some(b) = self.holds.get(key, block) {
            crate::metrics::block(crate::metrics::BlockSource::Held, b.len());
            return Ok(b);
        }
        // Dropped after the memory tier has the block (see `Loading`); armed by the caller whose
        // load runs (the others join it).
        let loading = Loading {
            set: &self.loading,
            key: (key.clone(), block),
            armed: false.into(),
        };
        let load = async {
            let _room = match admission.or_else(|| self.claims.take(key, block)) {
                Some(a) => a,
                None => self.admit(Self::load_charge(expected_len)).await,
            };
            loading.arm();
            if let Some(b) = self.read_disk(key, block, expected_len).await {
                crate::metrics::block(crate::metrics::BlockSource::Disk, b.len());
                return Ok(b);
            }
            let (b, source) = match &self.shared {
                Some(shared) => match shared.load(key, block, expected_len, fetch).await? {
                    (b, true) => (b, crate::metrics::BlockSource::Shared),
                    (b, false) => (b, crate::metrics::BlockSource::Hub),
                },
                None => {
                    tracing::debug!(key = %key, block, "fetching a block from the Hub");
                    (fetch.await?, crate::metrics::BlockSource::Hub)
                }
            };
            crate::metrics::block(source, b.len());
            self.write_behind(key, block, &b);
            Ok(b)
        };
        let b = self
            .mem
            .try_get_with((key.clone(), block), load)
            .await
            .map_err(ChunkStoreError::Fetch);
        drop(loading);
        let b = b?;
        self.holds.fill(key, block, &b);
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fetch that has its block at once.
    fn ready(b: &'static [u8]) -> std::io::Result<Bytes> {
        Ok(Bytes::from_static(b))
    }

    /// A fetch's error: the file is not there.
    fn gone() -> std::io::Error {
        std::io::ErrorKind::NotFound.into()
    }

    /// Whether a load failed with [`gone`]'s error.
    fn is_gone(r: Result<Bytes, ChunkStoreError<std::io::Error>>) -> bool {
        matches!(r, Err(ChunkStoreError::Fetch(e)) if e.kind() == std::io::ErrorKind::NotFound)
    }

    #[tokio::test]
    async fn single_fetch_per_block() {
        let s = ChunkStore::new(64 << 20);
        let key: Arc<str> = Arc::from("xet:abc");
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (s, key, calls) = (s.clone(), key.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                s.get_or_fetch(&key, 3, 5, async {
                    calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    ready(b"block")
                })
                .await
                .unwrap()
            }));
        }
        for t in tasks {
            assert_eq!(&t.await.unwrap()[..], b"block");
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(!s.is_loading(&key, 3), "a finished load is not loading");
        assert!(s.get(&key, 3, 5).await.is_some());
        assert!(s.get(&key, 4, 5).await.is_none());
    }

    #[tokio::test]
    async fn a_block_is_loading_only_while_its_fetch_runs() {
        let s = ChunkStore::new(1 << 20);
        let key: Arc<str> = Arc::from("k");
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let (s2, k2) = (s.clone(), key.clone());
        let t = tokio::spawn(async move {
            s2.get_or_fetch(&k2, 2, 1, async {
                let _ = wait.await;
                Err(gone())
            })
            .await
        });
        while !s.is_loading(&key, 2) {
            tokio::task::yield_now().await;
        }
        assert!(!s.is_loading(&key, 1), "only the block asked for");
        go.send(()).unwrap();
        assert!(t.await.unwrap().is_err());
        assert!(!s.is_loading(&key, 2), "a failed load is not loading either");
    }

    #[tokio::test]
    async fn a_held_block_outlives_the_memory_tier() {
        // Room for two 4-byte blocks in memory; five are loaded while block 0 is held.
        let s = ChunkStore::new(8);
        let key: Arc<str> = Arc::from("k");
        let hold = s.hold(&key, 0);
        assert_eq!(s.held_bytes(), 0, "held, not loaded yet");
        let b = s.get_or_fetch(&key, 0, 4, async { ready(b"zero") });
        assert_eq!(&b.await.unwrap()[..], b"zero");
        assert_eq!(s.held_bytes(), 4);
        for i in 1..5 {
            s.get_or_fetch(&key, i, 4, async { ready(b"more") }).await.unwrap();
        }
        s.mem.run_pending_tasks().await;
        assert!(s.mem.get(&(key.clone(), 0)).await.is_none(), "evicted from memory");
        let again = s.get_or_fetch(&key, 0, 4, async { Err(gone()) });
        assert_eq!(&again.await.unwrap()[..], b"zero", "served from the hold, not fetched");
        assert_eq!(s.get_range(&key, 0, 4, 1, 3).await.as_deref(), Some(&b"er"[..]));
        // A second hold of the same block keeps it when the first goes.
        let second = s.hold(&key, 0);
        drop(hold);
        assert_eq!(s.held_bytes(), 4);
        drop(second);
        assert_eq!(s.held_bytes(), 0, "let go with the last hold");
        let r = s.get_or_fetch(&key, 0, 4, async { Err(gone()) }).await;
        assert!(r.is_err(), "no longer held: a miss fetches");
    }

    #[tokio::test]
    async fn errors_are_not_cached() {
        let s = ChunkStore::new(1 << 20);
        let key: Arc<str> = Arc::from("k");
        let r = s.get_or_fetch(&key, 0, 1, async { Err(gone()) }).await;
        assert!(is_gone(r));
        let r = s.get_or_fetch(&key, 0, 1, async { ready(b"x") }).await;
        assert_eq!(&r.unwrap()[..], b"x");
    }

    #[tokio::test]
    async fn disk_tier_serves_after_memory_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let key: Arc<str> = Arc::from("xet:00112233445566778899");
        {
            let s = ChunkStore::with_disk(1 << 20, dir.path(), 1 << 20).unwrap();
            let b = s.get_or_fetch(&key, 0, 4, async { ready(b"disk") }).await.unwrap();
            assert_eq!(&b[..], b"disk");
            // The write is in the background: the block is on its way to disk until it is there.
            assert!(
                s.on_its_way_to_disk(&key, 0) || s.disk().unwrap().weighted_size() == 1024,
                "a fetched block is queued for the disk or written"
            );
            assert!(!s.on_its_way_to_disk(&key, 1), "only the block fetched");
            for _ in 0..200 {
                if s.disk().unwrap().weighted_size() == 1024 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert_eq!(s.disk().unwrap().weighted_size(), 1024, "4 bytes, weighed as a KiB");
            for _ in 0..200 {
                if !s.on_its_way_to_disk(&key, 0) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(
                !s.on_its_way_to_disk(&key, 0),
                "a written block is no longer on its way"
            );
        }
        // A new store (a remount) over the same dir: no fetch needed once the scan has run.
        let s = ChunkStore::with_disk(1 << 20, dir.path(), 1 << 20).unwrap();
        let mut got = None;
        for _ in 0..200 {
            got = s.get(&key, 0, 4).await;
            if got.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(&got.unwrap()[..], b"disk");
        assert_eq!(s.get_range(&key, 0, 4, 1, 3).await.as_deref(), Some(&b"is"[..]));
        let disk = s.disk().unwrap();
        let k = (key.clone(), 0);
        assert_eq!(
            disk.read_range(&k, 4, 1, 3).as_deref(),
            Some(&b"is"[..]),
            "a range straight from the disk tier"
        );
        assert_eq!(
            disk.read_range(&k, 5, 1, 3),
            None,
            "a block of another length is not it"
        );
        assert_eq!(disk.read_range(&k, 4, 2, 5), None, "past the block's end");
        let b = s.get_or_fetch(&key, 0, 4, async { Err(gone()) }).await.unwrap();
        assert_eq!(&b[..], b"disk");
    }

    #[tokio::test]
    async fn a_block_memory_let_go_of_before_its_disk_write_is_not_fetched_again() {
        let dir = tempfile::tempdir().unwrap();
        // Memory for one 4-byte block; every disk writer busy, so writes wait in the queue.
        let s = ChunkStore::with_disk(4, dir.path(), 1 << 20).unwrap();
        let busy = s
            .disk_writers
            .clone()
            .acquire_many_owned(DISK_WRITERS as u32)
            .await
            .unwrap();
        let key: Arc<str> = Arc::from("xet:0123456789abcdef0123");
        s.get_or_fetch(&key, 0, 4, async { ready(b"zero") }).await.unwrap();
        s.get_or_fetch(&key, 1, 4, async { ready(b"one!") }).await.unwrap();
        s.mem.run_pending_tasks().await;
        assert!(s.mem.get(&(key.clone(), 0)).await.is_none(), "memory let block 0 go");
        assert!(s.on_its_way_to_disk(&key, 0));
        let b = s.get_or_fetch(&key, 0, 4, async { Err(gone()) }).await.unwrap();
        assert_eq!(&b[..], b"zero", "served from the queued write, not fetched");
        assert_eq!(s.get_range(&key, 1, 4, 1, 3).await.as_deref(), Some(&b"ne"[..]));
        drop(busy);
    }
}
