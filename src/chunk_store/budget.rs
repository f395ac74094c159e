//! One memory budget for a mount process (`--memory-limit`). Without one, memory grows with the
//! number of readers: every sequential reader holds a prefetch window of blocks, and 16 readers on
//! a slow link held about a GiB. The budget is split once, at start, into a fixed part (the
//! process itself, listings and inodes, reply bodies with no block's room to live in, idle
//! pooled buffers) and the block part: every block buffer on loan from the pool (in the memory
//! tier, held for a reader, being filled, queued for the disk) counts against it. Loads are
//! admitted against the block part instead of growing it:
//! - a prefetch is admitted only while room is left beyond a reserve kept for readers' own
//!   blocks (two per sequential reader), so under pressure windows shrink;
//! - a reader's own block takes room if there is some (the store sheds memory-tier blocks nobody
//!   holds first); if there is none the read takes just its bytes (`vfs::read`), since waiting
//!   for readers who all hold a block while waiting for their next one deadlocks;
//! - other loads wait for room (buffers come back as readers pass their blocks, the memory tier
//!   evicts, and disk writes finish) and go ahead after `DEMAND_WAIT` whatever the budget says,
//!   counted as an overrun: the budget never fails or hangs a read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::BLOCK_SIZE;

/// The process's own memory before any block: code, the async runtime and its threads, the HTTP
/// client, inode table and listings (an idle release mount of a small repo is 17 MiB resident;
/// the rest is for large repos' listings and the allocator's slack).
pub const FIXED_OVERHEAD: u64 = 40 << 20;

/// Smallest budget accepted: the fixed part, a little for downloads and a few blocks.
pub const MIN_LIMIT: u64 = 96 << 20;

/// Budget when no limit is given and the process's cgroup sets none.
pub const DEFAULT_LIMIT: u64 = 512 << 20;

/// How long a reader's own block waits for room before it is loaded anyway.
const DEMAND_WAIT: Duration = Duration::from_secs(5);

/// A waiting reader tries again at least this often.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// A block fetched from a distant Hub is split into parts of this size (`vfs::remote::MIN_PART`
/// re-exports it): defined here because the memory plan counts the bodies of a block's parts.
pub const PART: u64 = 2 << 20;

/// Size of a pooled response-body buffer: one part of a block fetched from a distant Hub
/// ([`PART`]) with room for its chunk headers and an even split's share of the
/// remainder (up to a sixteenth), so a part's body fits one (see `vfs::remote::xet::body`).
pub const BODY_BUFFER: u64 = PART + (128 << 10);

/// Parts a block of a distant Hub is fetched in.
const PARTS_PER_BLOCK: usize = (BLOCK_SIZE / PART) as usize;

/// How a budget is split. Every field is bytes but `idle_buffers` and `idle_bodies`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The whole process.
    pub limit: u64,
    /// See [`FIXED_OVERHEAD`].
    pub fixed: u64,
    /// Response bodies in flight that have no block's room (exact ranges, small-file batches);
    /// a block's load keeps its bodies in the room it took for the block.
    pub downloads: u64,
    /// Pooled block buffers kept idle for reuse.
    pub idle_buffers: usize,
    /// Pooled response-body buffers (`BODY_BUFFER` each) kept idle for reuse: a block's parts
    /// for each idle block buffer beyond the first (none under 256M, which leaves a 96M budget
    /// its four blocks).
    #[serde(default)]
    pub idle_bodies: usize,
    /// Block buffers on loan: memory tier, held windows, loads, disk writes queued.
    pub blocks: u64,
    /// The memory tier's capacity (within `blocks`).
    pub memory_tier: u64,
}

/// Bytes of download bodies in flight for a budget of `limit`: an eighth of a budget up to
/// 128 MiB, three eighths of every further byte, at most 128 MiB (256M: 64 MiB, 512M: 128).
/// Sized when block bodies were counted here too (one reader at 30 ms: 197 MB/s with 64 MiB in
/// flight, 210–261 with 128; 16 readers under 256M: 288–299 MB/s with 48 MiB, 387–404 with 64);
/// since 2026-11-27 only exact ranges and small-file batches use it, and block bodies live in
/// their blocks' room (see `vfs::remote::BodyRoom`).
fn downloads_for(limit: u64) -> u64 {
    const SMALL: u64 = 128 << 20;
    let d = if limit <= SMALL {
        limit / 8
    } else {
        SMALL / 8 + (limit - SMALL) / 8 * 3
    };
    d.clamp(16 << 20, 128 << 20)
}

impl Plan {
    /// The split of `limit` (at least [`MIN_LIMIT`]) for a memory tier of at most `memory_tier`.
    pub fn new(limit: u64, memory_tier: u64) -> Plan {
        let limit = limit.max(MIN_LIMIT);
        let fixed = FIXED_OVERHEAD;
        let downloads = downloads_for(limit);
        let idle_buffers = ((limit / 16) / BLOCK_SIZE).clamp(1, 4) as usize;
        let idle_bodies = (idle_buffers - 1) * PARTS_PER_BLOCK;
        let blocks = limit - fixed - downloads - idle_buffers as u64 * BLOCK_SIZE - idle_bodies as u64 * BODY_BUFFER;
        // A quarter at most for blocks nobody holds, so windows keep most of the room.
        let memory_tier = memory_tier.min(blocks / 4);
        Plan {
            limit,
            fixed,
            downloads,
            idle_buffers,
            idle_bodies,
            blocks,
            memory_tier,
        }
    }

    /// Room kept for the own blocks of `readers` sequential readers (the block each reads and the
    /// next): prefetches stop short of it. At least an eighth of the room, at most half.
    fn reserve(&self, readers: u64) -> u64 {
        (2 * BLOCK_SIZE * readers)
            .max(self.blocks / 8)
            .max(2 * BLOCK_SIZE)
            .min(self.blocks / 2)
    }
}

/// What the budget's block part holds now, for `hubfs status` and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryReport {
    pub plan: Option<Plan>,
    /// Where the limit came from: `--memory-limit`, the cgroup, or the default.
    pub source: String,
    /// Block buffers on loan (all of memory tier, held, loading, queued for disk).
    pub blocks_on_loan: u64,
    /// Of those, held for readers that will read them.
    pub held: u64,
    /// In the memory tier (some of it may be held too).
    pub memory_tier: u64,
    /// Idle pooled buffers.
    pub idle_buffers: u64,
    /// Room admitted loads have taken and not yet filled.
    pub reserved: u64,
    /// Prefetches not started for want of room.
    pub prefetches_refused: u64,
    /// Reads that waited for room.
    pub waits: u64,
    /// Reads that went ahead past the budget after waiting `DEMAND_WAIT`.
    pub overruns: u64,
    /// The process's resident memory now and at its peak (Linux `VmRSS`, `VmHWM`).
    pub rss: u64,
    pub peak_rss: u64,
    /// The shared cache tier, if the mount has one.
    #[serde(default)]
    pub shared: Option<super::shared::SharedReport>,
}

/// Bytes of pooled buffers on loan and a wake-up for readers waiting for room. Shared by the pool
/// (which counts buffers out and back) and the budget (which admits against it).
#[derive(Default)]
pub struct Usage {
    pub(super) on_loan: AtomicU64,
    pub(super) returned: tokio::sync::Notify,
}

impl Usage {
    pub(super) fn lend(&self, bytes: u64) {
        self.on_loan.fetch_add(bytes, Ordering::AcqRel);
    }

    pub(super) fn give_back(&self, bytes: u64) {
        self.on_loan.fetch_sub(bytes, Ordering::AcqRel);
        self.returned.notify_waiters();
    }

    pub fn on_loan(&self) -> u64 {
        self.on_loan.load(Ordering::Acquire)
    }
}

/// The budget's admission side; cheap to clone.
#[derive(Clone)]
pub struct MemoryBudget {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None`: no budget (tests, and stores built without one): everything is admitted.
    plan: Option<Plan>,
    /// Sequential readers now (see `Reading`), whose own blocks the reserve is kept for.
    readers: AtomicU64,
    source: String,
    usage: Arc<Usage>,
    reserved: AtomicU64,
    refused: AtomicU64,
    waits: AtomicU64,
    overruns: AtomicU64,
}

/// One sequential reader counted for the reserve, for as long as it lives.
pub struct Reading(Arc<Inner>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reading")
    }
}

/// Room taken for one load until it is filled (or fails); given back when dropped.
pub struct Admission {
    inner: Option<Arc<Inner>>,
    bytes: u64,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(i) = self.inner.take() {
            i.reserved.fetch_sub(self.bytes, Ordering::AcqRel);
            i.usage.returned.notify_waiters();
        }
    }
}

impl MemoryBudget {
    /// A budget for `plan` (`None`: unlimited) over the buffers `usage` counts.
    pub fn new(plan: Option<Plan>, source: &str, usage: Arc<Usage>) -> MemoryBudget {
        MemoryBudget {
            inner: Arc::new(Inner {
                plan,
                readers: AtomicU64::new(0),
                source: source.to_string(),
                usage,
                reserved: AtomicU64::new(0),
                refused: AtomicU64::new(0),
                waits: AtomicU64::new(0),
                overruns: AtomicU64::new(0),
            }),
        }
    }

    pub fn plan(&self) -> Option<Plan> {
        self.inner.plan
    }

    /// Takes `bytes` if they fit under `cap` with what is on loan and reserved.
    fn take(&self, bytes: u64, cap: u64) -> bool {
        let i = &self.inner;
        let mut reserved = i.reserved.load(Ordering::Acquire);
        loop {
            if i.usage.on_loan() + reserved + bytes > cap {
                return false;
            }
            match i
                .reserved
                .compare_exchange_weak(reserved, reserved + bytes, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => reserved = now,
            }
        }
    }

    fn admission(&self, bytes: u64) -> Admission {
        Admission {
            inner: Some(self.inner.clone()),
            bytes,
        }
    }

    /// Sequential readers now.
    pub fn readers(&self) -> u64 {
        self.inner.readers.load(Ordering::Relaxed)
    }

    /// Counts a sequential reader until the returned guard is dropped.
    pub fn reading(&self) -> Reading {
        self.inner.readers.fetch_add(1, Ordering::Relaxed);
        Reading(self.inner.clone())
    }

    /// Whether prefetches are being refused now: readers should keep no more than they must.
    pub fn under_pressure(&self) -> bool {
        let Some(plan) = self.inner.plan else { return false };
        let used = self.inner.usage.on_loan() + self.inner.reserved.load(Ordering::Acquire);
        used + BLOCK_SIZE > plan.blocks.saturating_sub(plan.reserve(self.readers()))
    }

    /// Room for a reader's own load of `bytes` if there is some now.
    pub fn try_admit(&self, bytes: u64) -> Option<Admission> {
        let Some(plan) = self.inner.plan else {
            return Some(Admission { inner: None, bytes });
        };
        self.take(bytes, plan.blocks).then(|| self.admission(bytes))
    }

    /// Blocks that may wait for the disk tier at once: a few under a small budget, since each
    /// holds its buffer until written.
    pub fn disk_queue(&self, most: usize) -> usize {
        match self.inner.plan {
            Some(p) => ((p.blocks / BLOCK_SIZE / 8) as usize).clamp(1, most),
            None => most,
        }
    }

    /// Room for a prefetch of `bytes`, if there is some beyond the readers' reserve.
    pub fn try_prefetch(&self, bytes: u64) -> Option<Admission> {
        let Some(plan) = self.inner.plan else {
            return Some(Admission { inner: None, bytes });
        };
        if self.take(bytes, plan.blocks.saturating_sub(plan.reserve(self.readers()))) {
            Some(self.admission(bytes))
        } else {
            self.inner.refused.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    /// Room for a reader's own load of `bytes`: waits until there is some, for `DEMAND_WAIT` at
    /// most, then goes ahead anyway (an overrun, logged). `make_room` runs before every try (the
    /// store lets go of blocks nobody holds); waits are in short slices, so room made by it (or
    /// a wake-up missed between a try and a wait) is seen soon.
    pub async fn admit_with<F, Fut>(&self, bytes: u64, make_room: F) -> Admission
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        if let Some(a) = self.try_admit(bytes) {
            return a;
        }
        self.inner.waits.fetch_add(1, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + DEMAND_WAIT;
        loop {
            let returned = self.inner.usage.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            make_room().await;
            if let Some(a) = self.try_admit(bytes) {
                return a;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            let slice = deadline.min(now + WAIT_SLICE);
            let _ = tokio::time::timeout_at(slice, returned).await;
        }
        self.inner.overruns.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            limit_mib = self.inner.plan.map_or(0, |p| p.limit >> 20),
            on_loan_mib = self.inner.usage.on_loan() >> 20,
            "memory budget full for {DEMAND_WAIT:?}; loading a block past it (raise --memory-limit)"
        );
        self.inner.reserved.fetch_add(bytes, Ordering::AcqRel);
        self.admission(bytes)
    }

    /// `admit_with` nothing to make room with.
    pub async fn admit(&self, bytes: u64) -> Admission {
        self.admit_with(bytes, || async {}).await
    }

    /// The counters of `MemoryReport` this side knows.
    pub fn report(&self) -> MemoryReport {
        let i = &self.inner;
        let (rss, peak_rss) = process_rss();
        MemoryReport {
            plan: i.plan,
            source: i.source.clone(),
            blocks_on_loan: i.usage.on_loan(),
            reserved: i.reserved.load(Ordering::Relaxed),
            prefetches_refused: i.refused.load(Ordering::Relaxed),
            waits: i.waits.load(Ordering::Relaxed),
            overruns: i.overruns.load(Ordering::Relaxed),
            rss,
            peak_rss,
            ..MemoryReport::default()
        }
    }
}

/// `VmRSS` and `VmHWM` of this process in bytes (0 where /proc does not say).
fn process_rss() -> (u64, u64) {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return (0, 0);
    };
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib << 10)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The limit a mount gets without `--memory-limit`, and where it came from: half the memory its
/// cgroup may use (`memory.max`, the lowest on the way up the cgroup tree, so a container's limit
/// counts), at most [`DEFAULT_LIMIT`] and at least [`MIN_LIMIT`]; [`DEFAULT_LIMIT`] where no
/// cgroup sets one. Half, because the programs reading through the mount usually share the
/// container's limit with it.
pub fn default_limit() -> (u64, String) {
    match cgroup_memory_max() {
        Some((max, _)) => (
            (max / 2).clamp(MIN_LIMIT, DEFAULT_LIMIT),
            format!("half the cgroup's memory.max of {} MiB", max >> 20),
        ),
        None => (DEFAULT_LIMIT, "default".to_string()),
    }
}

/// `asked` (named `what` in the status report) if given, else [`default_limit`].
pub fn limit_or_default(asked: Option<u64>, what: &str) -> (u64, String) {
    match asked {
        Some(v) => (v, what.to_string()),
        None => default_limit(),
    }
}

/// The lowest memory limit set on this process's cgroup or any of its ancestors, and the file
/// that sets it: `memory.max` (cgroup v2), else `memory.limit_in_bytes` of the memory controller
/// (v1, where "no limit" reads as a number near 2^63). `hubfs doctor` shows the file.
pub fn cgroup_memory_max() -> Option<(u64, std::path::PathBuf)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let root = std::path::Path::new("/sys/fs/cgroup");
    let v2 = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .and_then(|rel| lowest_memory_max(root, rel.trim(), "memory.max"));
    v2.or_else(|| {
        let rel = own.lines().find_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let (controllers, path) = rest.split_once(':')?;
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.trim().to_string())
        })?;
        lowest_memory_max(&root.join("memory"), &rel, "memory.limit_in_bytes")
    })
}

/// The lowest numeric `file` from `root/rel` up to `root` (`max`, or 2^60 and more, sets none),
/// and where.
fn lowest_memory_max(root: &std::path::Path, rel: &str, file: &str) -> Option<(u64, std::path::PathBuf)> {
    let mut dir = root.join(rel.trim_start_matches('/'));
    let mut lowest: Option<(u64, std::path::PathBuf)> = None;
    loop {
        let f = dir.join(file);
        if let Ok(v) = std::fs::read_to_string(&f)
            && let Ok(n) = v.trim().parse::<u64>()
            && n < 1 << 60
            && lowest.as_ref().is_none_or(|(l, _)| n < *l)
        {
            lowest = Some((n, f));
        }
        if dir == root || !dir.pop() || !dir.starts_with(root) {
            return lowest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn plans_split_the_limit() {
        let p = Plan::new(256 * MIB, 64 * MIB);
        assert_eq!(p.downloads, 64 * MIB);
        assert_eq!(p.idle_buffers, 2);
        assert_eq!(p.idle_bodies, 4);
        assert_eq!(
            Plan::new(512 * MIB, 0).idle_bodies,
            12,
            "the default: every part of three blocks"
        );
        assert_eq!(Plan::new(128 * MIB, 0).idle_bodies, 0);
        assert_eq!(
            p.fixed + p.downloads + p.idle_buffers as u64 * BLOCK_SIZE + p.idle_bodies as u64 * BODY_BUFFER + p.blocks,
            256 * MIB
        );
        assert_eq!(
            p.memory_tier,
            p.blocks / 4,
            "the tier is cut to a quarter of the blocks"
        );
        assert_eq!(
            Plan::new(512 * MIB, 0).downloads,
            128 * MIB,
            "the default: 128 MiB in flight"
        );
        assert_eq!(Plan::new(384 * MIB, 0).downloads, 112 * MIB);
        assert_eq!(Plan::new(192 * MIB, 0).downloads, 40 * MIB);
        assert_eq!(Plan::new(128 * MIB, 0).downloads, 16 * MIB);
        let p = Plan::new(4 << 30, 64 * MIB);
        assert_eq!((p.downloads, p.idle_buffers, p.memory_tier), (128 * MIB, 4, 64 * MIB));
        assert_eq!(Plan::new(1, 0).limit, MIN_LIMIT, "too small a limit is raised");
        assert!(Plan::new(MIN_LIMIT, 0).blocks >= 4 * BLOCK_SIZE);
    }

    #[test]
    fn the_cgroup_limit_is_the_lowest_on_the_way_up() {
        let root = tempfile::tempdir().unwrap();
        let leaf = root.path().join("kubepods/pod1/ctr");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(leaf.join("memory.max"), "max\n").unwrap();
        let lowest = |rel: &str, file: &str| lowest_memory_max(root.path(), rel, file).map(|l| l.0);
        assert_eq!(lowest("/kubepods/pod1/ctr", "memory.max"), None);
        std::fs::write(root.path().join("kubepods/pod1/memory.max"), "1073741824\n").unwrap();
        std::fs::write(root.path().join("kubepods/memory.max"), "8589934592\n").unwrap();
        assert_eq!(lowest("/kubepods/pod1/ctr", "memory.max"), Some(1 << 30));
        assert_eq!(
            lowest_memory_max(root.path(), "/kubepods/pod1/ctr", "memory.max").map(|l| l.1),
            Some(root.path().join("kubepods/pod1/memory.max")),
            "and where"
        );
        assert_eq!(lowest("/", "memory.max"), None);
        // cgroup v1 says "no limit" with a number near 2^63.
        std::fs::write(leaf.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        assert_eq!(lowest("/kubepods/pod1/ctr", "memory.limit_in_bytes"), None);
    }

    fn budget(limit: u64) -> (MemoryBudget, Arc<Usage>) {
        let usage = Arc::new(Usage::default());
        (
            MemoryBudget::new(Some(Plan::new(limit, 0)), "test", usage.clone()),
            usage,
        )
    }

    #[tokio::test]
    async fn prefetches_stop_short_of_the_reserve_and_readers_wait_for_room() {
        let (b, usage) = budget(MIN_LIMIT);
        let plan = b.plan().unwrap();
        let mut prefetched = Vec::new();
        while let Some(a) = b.try_prefetch(BLOCK_SIZE) {
            prefetched.push(a);
        }
        assert_eq!(
            prefetched.len() as u64,
            (plan.blocks - plan.reserve(0)) / BLOCK_SIZE,
            "prefetches take all but the reserve"
        );
        assert_eq!(b.report().prefetches_refused, 1);
        // Readers' own loads take the reserve, then wait.
        let mut own = Vec::new();
        while (prefetched.len() + own.len()) as u64 * BLOCK_SIZE + BLOCK_SIZE <= plan.blocks {
            own.push(b.admit(BLOCK_SIZE).await);
        }
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.admit(BLOCK_SIZE).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "no room: the reader waits");
        // A load fills its buffer (on loan) and gives its admission back: still no room.
        usage.lend(BLOCK_SIZE);
        drop(prefetched.pop());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "the buffer took the admission's place");
        // The buffer comes back (evicted, read past): the reader goes on.
        usage.give_back(BLOCK_SIZE);
        let a = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(b.report().waits, 1);
        assert_eq!(b.report().overruns, 0);
        drop(a);
    }

    #[test]
    fn the_reserve_grows_with_readers() {
        let (b, _usage) = budget(512 * MIB);
        let plan = b.plan().unwrap();
        let alone = plan.reserve(b.readers());
        let readers: Vec<_> = (0..8).map(|_| b.reading()).collect();
        assert_eq!(plan.reserve(b.readers()), 16 * BLOCK_SIZE, "two blocks per reader");
        assert!(alone < 16 * BLOCK_SIZE);
        let more: Vec<_> = (0..100).map(|_| b.reading()).collect();
        assert_eq!(plan.reserve(b.readers()), plan.blocks / 2, "at most half the room");
        drop((readers, more));
        assert_eq!(b.readers(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_goes_ahead_after_waiting_long_enough() {
        let (b, usage) = budget(MIN_LIMIT);
        usage.lend(b.plan().unwrap().blocks);
        let a = b.admit(BLOCK_SIZE).await;
        assert_eq!(b.report().overruns, 1, "went ahead past the budget");
        assert_eq!(b.report().reserved, BLOCK_SIZE);
        drop(a);
        assert_eq!(b.report().reserved, 0);
    }

    #[tokio::test]
    async fn no_plan_admits_everything() {
        let b = MemoryBudget::new(None, "none", Arc::default());
        let all: Vec<_> = (0..1000).filter_map(|_| b.try_prefetch(BLOCK_SIZE)).collect();
        assert_eq!(all.len(), 1000);
        let _ = b.admit(u64::MAX / 2).await;
        assert_eq!(b.report().reserved, 0);
    }
}
