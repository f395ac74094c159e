//! The read path of one open file: sequential detection, adaptive prefetch of whole blocks in
//! parallel, held until the reader has read past them, exact-range fetches for random and sparse
//! reads (kept as parts of blocks, see `sparse`), and zero-copy slices of cached blocks.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::try_join_all;

use super::error::{VfsError, VfsResult};
use super::remote::{FileMeta, Remote};
use crate::chunk_store::{BLOCK_SIZE, BlockHold, ChunkStore, Claim, Reading};
use crate::hub_client::RepoKind;

/// Largest prefetch window, in blocks (8 × 8 MiB = 64 MiB ahead of the reader; twice that on a
/// slow link, see `Remote::window_scale`).
pub const MAX_WINDOW_BLOCKS: u64 = 8;

/// How far from the previous read's end a read may start and still count as sequential, at
/// least: small reads get this; reads the size of the kernel's readahead requests get two
/// readahead windows if that is more (its async windows and a page fault's read-around arrive out
/// of order by up to a window), so a random 4 KiB reader is not taken for a sequential one.
const SEQUENTIAL_SLACK: u64 = 4 << 20;

/// Reads up to this size are small (they get `SEQUENTIAL_SLACK`).
const SMALL_READ: u64 = 64 << 10;

/// Bytes a run must have read before it loads whole blocks, on a mount whose readahead is less
/// than a block (datasets, buckets): until then its reads fetch exactly what they ask for. A
/// parquet reader's column chunks lie within the slack of each other, and loading the 8 MiB blocks
/// around them cost 50-150 times the bytes a one-column query needs; the kernel reads such a chunk
/// (header, then body) in well under this. Model mounts (a block of readahead: weights are read
/// whole, and a page fault reads around by a block) load whole blocks from the first read.
const SPARSE_RUN: u64 = 1 << 20;

/// Bytes a run must have read before it prefetches past the blocks it reads, on those mounts: a
/// column chunk of a few MiB read in one go costs the rest of its block, not a window more, while
/// a stream (a row group read by a DuckDB thread, cat, dd) gets its window after its first 4 MiB.
const WINDOW_RUN: u64 = 4 << 20;

/// The most a direct handle's sparse read fetches past its end (see `Reader::read`).
const SPARSE_AHEAD: u64 = 256 << 10;

/// Runs a direct handle keeps besides the current one (see `ReadState::pick_run`): pyarrow reads
/// a file's pre-buffered ranges as two streams on one descriptor, DuckDB's threads share one per
/// file, and each stream must keep its own window.
const PARKED_RUNS: usize = 3;

/// What a read is to the reader's state (see `classify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Far from where the last read ended: exactly the bytes asked for.
    Seek,
    /// Near it, but the run has not read enough yet, or has skipped more than it read: exactly
    /// the bytes asked for, as a seek, while the run goes on.
    Sparse,
    /// A run that reads most of what it spans: whole blocks, and this many blocks of prefetch
    /// past them.
    Sequential(u64),
}

/// Per-handle reader state. Its lock is taken before the chunk store's (leaf) locks.
#[derive(Debug)]
pub struct ReadState {
    /// Where the next read starts if the reader is sequential.
    next: u64,
    /// Where the current sequential run started (the lowest offset it has read).
    run_start: u64,
    /// Bytes the run's reads asked for (reads the kernel repeats count twice, which is rare).
    run_bytes: u64,
    /// Whether the run has been sequential.
    proven: bool,
    /// Set before `classify` when the file is being scanned (see `sparse::Scans`): runs are
    /// sequential from their first read, as on a model mount.
    pub scanned: bool,
    /// The kernel sends this handle's reads as the program made them (FUSE direct I/O): a read
    /// of `SPARSE_RUN` or more is a program reading that much, a stream's read, not readahead.
    direct: bool,
    /// A direct handle whose first read was a large one at offset 0: a program reading the file
    /// through (`cp`, `cat`, a hash), not a parquet engine, which reads the footer first. Its run
    /// from the start is sequential from that read, windows included, as the kernel's readahead
    /// would make it on a buffered handle (taken for a sparse reader, `cp` of a parquet shard ran
    /// 20% slower at 30 ms, each 128 KiB of its first MiB a round trip).
    from_start: bool,
    /// Prefetch window in blocks; doubles on sequential reads past the readahead, resets on a
    /// seek.
    window: u64,
    /// What the reader holds (boxed: a handle of every open file carries a `ReadState`).
    held: Box<Held>,
}

/// A run put aside while the handle reads elsewhere: the fields of `ReadState` it had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    next: u64,
    run_start: u64,
    run_bytes: u64,
    proven: bool,
    window: u64,
}

/// The blocks of the current run a reader is reading or has asked to prefetch, held in the chunk
/// store until it has read past them (or seeks, or closes), so the memory tier cannot evict them
/// before the reader gets there (other readers' blocks push them out of its LRU).
#[derive(Debug, Default)]
struct Held {
    /// A direct handle's other runs, the most recent first (at most [`PARKED_RUNS`]; see
    /// `ReadState::pick_run`). Here, boxed, since most handles have none.
    parked: Vec<Run>,
    /// The content the holds are of.
    key: Option<Arc<str>>,
    blocks: std::collections::BTreeMap<u64, BlockHold>,
    /// Blocks this reader started reading range by range because the memory budget was full: it
    /// goes on that way in them, even after a seek (a page fault's read-around is one), since
    /// loading one whole later would fetch again what it read. At most one entry per block.
    exact: std::collections::BTreeSet<u64>,
    /// Counted as a sequential reader in the memory budget while in a run.
    reading: Option<Reading>,
    /// Reads may arrive behind the run's front (the kernel's readahead sends several at once, out
    /// of order): under a full budget such a reader keeps the block before the one it reads.
    /// Set for every FUSE handle; an NFS handle starts without it (a client with one read in
    /// flight needs no block behind, and under a full budget that block is room another reader's
    /// own block needs) and gets it at its first read behind the front (a kernel client).
    out_of_order: bool,
}

impl Default for ReadState {
    fn default() -> Self {
        ReadState {
            next: 0,
            run_start: 0,
            run_bytes: 0,
            proven: false,
            scanned: false,
            direct: false,
            from_start: false,
            window: 1,
            held: Box::new(Held {
                out_of_order: true,
                ..Held::default()
            }),
        }
    }
}

impl ReadState {
    /// The reader is expected to read in order until a read behind its front shows otherwise.
    pub fn expect_in_order(&mut self) {
        self.held.out_of_order = false;
    }

    /// The handle's reads come without the kernel's readahead (see `direct`).
    pub fn reads_direct(&mut self) {
        self.direct = true;
    }

    fn run(&self) -> Run {
        Run {
            next: self.next,
            run_start: self.run_start,
            run_bytes: self.run_bytes,
            proven: self.proven,
            window: self.window,
        }
    }

    fn set_run(&mut self, r: Run) {
        (self.next, self.run_start, self.run_bytes, self.proven, self.window) =
            (r.next, r.run_start, r.run_bytes, r.proven, r.window);
    }

    /// On a direct handle, makes the run that a read of `[offset, end)` continues the current one:
    /// a parked run it is near, or, if none, a new one (`classify` starts it), the current run
    /// being parked. So two streams read on one descriptor each keep their window, where one run
    /// would start over at every switch and prefetch nothing. The kernel's readahead of a
    /// buffered handle already follows one stream per descriptor, and such a handle has one run.
    pub fn pick_run(&mut self, offset: u64, end: u64, readahead: u64) {
        let slack = slack(end - offset, readahead);
        if !self.direct || offset.abs_diff(self.next) <= slack {
            return;
        }
        let current = self.run();
        match self.held.parked.iter().position(|r| offset.abs_diff(r.next) <= slack) {
            Some(i) => {
                let resumed = self.held.parked.remove(i);
                self.set_run(resumed);
            }
            None if current.run_bytes == 0 => return,
            None => {}
        }
        self.held.parked.insert(0, current);
        self.held.parked.truncate(PARKED_RUNS);
    }

    /// Holds `key`'s blocks `blocks` (those not held yet) and returns the ones newly held.
    fn hold(&mut self, store: &ChunkStore, key: &Arc<str>, blocks: std::ops::Range<u64>) -> Vec<u64> {
        let mut new = Vec::new();
        for idx in blocks {
            self.held.blocks.entry(idx).or_insert_with(|| {
                new.push(idx);
                store.hold(key, idx)
            });
        }
        new
    }

    /// Holds the prefetch window `blocks` of a file of `size` bytes as far as the memory budget
    /// admits their loads, in order: a block already loaded costs nothing more, and the first one
    /// refused ends the window (the reader loads it itself when it gets there). Returns the blocks
    /// to load with the room each took.
    fn hold_window(
        &mut self,
        store: &ChunkStore,
        key: &Arc<str>,
        size: u64,
        blocks: std::ops::Range<u64>,
    ) -> Vec<(u64, Option<Claim>)> {
        let mut new = Vec::new();
        for idx in blocks {
            if self.held.blocks.contains_key(&idx) {
                continue;
            }
            let room = if store.is_loaded(key, idx) || store.is_loading(key, idx) {
                None
            } else {
                match store
                    .budget()
                    .try_prefetch(ChunkStore::load_charge(block_len(size, idx)))
                {
                    // Claimed at once, not when the prefetch's task runs: a read of the block in
                    // between joins this load instead of fetching the block's bytes exactly.
                    Some(a) => Some(store.claim(key, idx, a)),
                    None => break,
                }
            };
            self.held.blocks.insert(idx, store.hold(key, idx));
            new.push((idx, room));
        }
        new
    }

    /// Lets go of the holds on blocks wholly before `from` (every hold for `from` = `u64::MAX`);
    /// the caller drops what is returned after unlocking the state.
    fn release_before(&mut self, from: u64) -> std::collections::BTreeMap<u64, BlockHold> {
        let kept = self.held.blocks.split_off(&from);
        let mut gone = std::mem::replace(&mut self.held.blocks, kept);
        // Blocks a parked run reads or has asked for stay held: its reader comes back to them.
        for r in &self.held.parked {
            let (lo, hi) = (r.run_start / BLOCK_SIZE, r.next / BLOCK_SIZE + r.window);
            let theirs: Vec<u64> = gone.range(lo..=hi).map(|(i, _)| *i).collect();
            for i in theirs {
                if let Some(h) = gone.remove(&i) {
                    self.held.blocks.insert(i, h);
                }
            }
        }
        gone
    }
}

/// What `update_holds` decided: the read's class, the window's blocks to load (with the room each
/// took) and the holds let go of.
type HoldUpdate = (
    Option<u64>,
    Vec<(u64, Option<Claim>)>,
    std::collections::BTreeMap<u64, BlockHold>,
);

/// Everything a read needs, cheap to clone into prefetch tasks.
#[derive(Clone)]
pub struct Reader {
    pub remote: Arc<Remote>,
    pub store: ChunkStore,
    /// The mount's kernel readahead in bytes: a sequential run no longer than this gets no
    /// prefetch past the blocks it reads. One page fault in an mmap'd file makes the kernel read
    /// around it by a whole readahead window, which looks like a short sequential run, and a random
    /// reader of a mapping (numpy memmap sampling) would otherwise pull a growing window of blocks
    /// with every fault.
    pub readahead: u64,
    /// Files several runs have streamed (see `sparse::Scans`).
    pub scans: Arc<super::sparse::Scans>,
}

impl Reader {
    pub(super) async fn block(&self, file: &FileMeta, commit: &str, key: &Arc<str>, idx: u64) -> VfsResult<Bytes> {
        self.store
            .get_or_fetch(key, idx, block_len(file.size, idx), self.load(file, commit, key, idx))
            .await
            .map_err(VfsError::from)
    }

    /// Brings a file of one block at most into the cache (listing-order prefetch), if the memory
    /// budget has room for it beyond the readers' reserve.
    /// Whether background work may fetch `file` now (see `Remote::background_ok`).
    pub(super) fn background_ok(&self, file: &FileMeta) -> bool {
        self.remote.background_ok(file)
    }

    pub(super) async fn prefetch_file(&self, file: &FileMeta, commit: &str) -> VfsResult<()> {
        let key = file.id.key();
        if self.store.is_loaded(&key, 0) {
            return Ok(());
        }
        let len = block_len(file.size, 0);
        let Some(room) = self.store.budget().try_prefetch(ChunkStore::load_charge(len)) else {
            return Ok(());
        };
        let fetch = self.load(file, commit, &key, 0);
        self.store
            .get_or_fetch_admitted(&key, 0, len, Some(room), fetch)
            .await
            .map(|_| ())
            .map_err(VfsError::from)
    }

    /// Reads `[offset, offset + size)` of `file`; short only at end of file. The handle's state is
    /// locked only to classify the read, so the kernel's parallel reads of one file overlap.
    pub async fn read(
        &self,
        file: &FileMeta,
        commit: &str,
        state: &parking_lot::Mutex<ReadState>,
        offset: u64,
        size: u32,
    ) -> VfsResult<Bytes> {
        let end = (offset + size as u64).min(file.size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let key = file.id.key();
        let (first, last) = (offset / BLOCK_SIZE, (end - 1) / BLOCK_SIZE);
        let (class, prefetch, released, front, ahead) = {
            let mut st = state.lock();
            st.pick_run(offset, end, self.readahead);
            // Overlapping the last read's end: a reader's buffered reads restart inside the bytes
            // it has (a page header, then the body from where the header ended).
            let continues = st.direct && offset <= st.next && end > st.next && offset + SPARSE_AHEAD >= st.next;
            // The block the run had reached: a read behind it is a late one (the kernel's reads
            // arrive out of order), and must not load again a block the reader has read.
            let front = st.next / BLOCK_SIZE;
            let folder = super::sparse::folder_of(&file.remote_path);
            st.scanned = self.scans.scanned(&key, folder);
            let was_proven = st.proven;
            let access = classify(&mut st, offset, end, self.readahead);
            if st.proven && !was_proven {
                self.scans.proven(&key, folder);
            }
            tracing::trace!(path = %file.remote_path, offset, len = end - offset, ?access, direct = st.direct, "read");
            let class = match access {
                Access::Sequential(window) => Some(window),
                Access::Seek | Access::Sparse => None,
            };
            // A direct handle's sparse read that continues the last one fetches ahead as much as
            // its run has read (at most `SPARSE_AHEAD`): a column chunk read as a page header, then
            // its body, then the rest cost a round trip each without.
            let ahead = match access {
                Access::Sparse if continues => st.run_bytes.min(SPARSE_AHEAD),
                _ => 0,
            };
            let (class, prefetch, released) = self.update_holds(&mut st, file, &key, first, last, class);
            (class, prefetch, released, front, ahead)
        };
        drop(released);
        let Some(_) = class else {
            // A seek or a sparse read: only the bytes asked for, from a cache tier that has them (no whole-block
            // load off disk), from the blocks already on their way or that a sequential reader
            // holds (a page fault's read-around and the kernel's out-of-order readahead land in
            // blocks a prefetch is loading; a reader of a file others read too skips what the page
            // cache has, into blocks they hold), or else from the Hub (no read amplification).
            if let Some(b) = self.cached_range(file, &key, offset, end).await {
                (first..=last).for_each(|idx| self.store.used(&key, idx));
                return Ok(b);
            }
            // Not a block this reader is reading range by range (the budget was full): its hold
            // waits for no load, and loading it whole would fetch again what was read of it.
            let exact = |idx| state.lock().held.exact.contains(&idx);
            let wanted = |idx| self.store.is_loading(&key, idx) || (self.store.is_held(&key, idx) && !exact(idx));
            return self
                .fetch_sparse(file, commit, &key, (offset, end), ahead, &wanted)
                .await;
        };

        // Whole blocks from a hold, memory, else disk, else the Hub: `get_or_fetch` loads a block
        // once however many reads want it (the kernel's readahead sends several reads of one block
        // at once, and each reading an 8 MiB block off disk for itself multiplied the disk reads).
        self.prefetch(file, commit, &key, prefetch);
        // Room for the blocks not loaded yet; with the memory budget full of blocks other readers
        // hold, this read takes just its bytes instead of waiting for room (see `budget`).
        let mut rooms = Vec::with_capacity((last - first + 1) as usize);
        for idx in first..=last {
            if self.store.is_loaded(&key, idx) || self.store.is_loading(&key, idx) {
                rooms.push(None);
                continue;
            }
            let started_exact = idx < front || state.lock().held.exact.contains(&idx);
            let room = match started_exact {
                true => None,
                false => {
                    self.store
                        .try_room(ChunkStore::load_charge(block_len(file.size, idx)))
                        .await
                }
            };
            // Decided under the handle's lock, as a read that goes exact marks its blocks: of two
            // reads of one block that looked for room at once, either the exact one joins the
            // other's load or the other drops its room and goes exact too, never both.
            let joined = {
                let mut st = state.lock();
                match room {
                    // A prefetch or another read may have started the block while this read looked
                    // for room: join it rather than fetch its bytes again.
                    None if self.store.is_loaded(&key, idx) || self.store.is_loading(&key, idx) => Some(None),
                    Some(room) if !st.held.exact.contains(&idx) => Some(Some(self.store.claim(&key, idx, room))),
                    // Room found too late is given back now, not held through the exact fetch.
                    unused => {
                        drop(unused);
                        st.held.exact.extend(first..=last);
                        None
                    }
                }
            };
            match joined {
                Some(claim) => rooms.push(claim),
                None => {
                    drop(rooms);
                    tracing::trace!(key = %key, offset, "memory budget full: exact range from the Hub");
                    return self.exact_parts(file, commit, &key, offset, end).await;
                }
            }
        }
        // The claims stay until the loads end: whichever caller starts a load takes its room.
        let loads = (first..=last).map(|idx| {
            let fetch = self.load(file, commit, &key, idx);
            let len = block_len(file.size, idx);
            self.store.get_or_fetch(&key, idx, len, fetch)
        });
        let blocks = try_join_all(loads).await;
        drop(rooms);
        let blocks = blocks?;
        for idx in first..=last {
            self.store.used(&key, idx);
        }
        Ok(assemble(&blocks, first * BLOCK_SIZE, offset, end))
    }

    /// `[offset, end)` block by block: each part from a cache tier or a hold that has it, the
    /// others exactly from the Hub (a read under a full memory budget: what is cached is not
    /// fetched again).
    async fn exact_parts(
        &self,
        file: &FileMeta,
        commit: &str,
        key: &Arc<str>,
        offset: u64,
        end: u64,
    ) -> VfsResult<Bytes> {
        let (first, last) = (offset / BLOCK_SIZE, (end - 1) / BLOCK_SIZE);
        let mut parts = Vec::with_capacity((last - first + 1) as usize);
        for idx in first..=last {
            let base = idx * BLOCK_SIZE;
            let (from, to) = (offset.max(base), end.min(base + BLOCK_SIZE));
            let cached = self
                .store
                .get_range(key, idx, block_len(file.size, idx), from - base, to - base)
                .await;
            parts.push(match cached {
                Some(b) => {
                    self.store.used(key, idx);
                    b
                }
                None => self.remote.fetch_exact(file, commit, from, to - from).await?,
            });
        }
        Ok(assemble(&parts, offset, offset, end))
    }

    /// `[offset, end)` if every block it touches is cached in some tier, read range by range.
    async fn cached_range(&self, file: &FileMeta, key: &Arc<str>, offset: u64, end: u64) -> Option<Bytes> {
        let (first, last) = (offset / BLOCK_SIZE, (end - 1) / BLOCK_SIZE);
        let mut parts = Vec::with_capacity((last - first + 1) as usize);
        for idx in first..=last {
            let base = idx * BLOCK_SIZE;
            let (from, to) = (offset.max(base) - base, end.min(base + BLOCK_SIZE) - base);
            parts.push(
                self.store
                    .get_range(key, idx, block_len(file.size, idx), from, to)
                    .await?,
            );
        }
        Some(assemble(&parts, offset, offset, end))
    }

    /// After `classify` said `class` for a read of blocks `first..=last`: a sequential read lets go
    /// of the blocks the run has passed and holds the blocks it reads and its prefetch window
    /// (`window` blocks past it, scaled up on a slow link), returning the window's blocks newly
    /// held, to prefetch; a seek lets go of every hold. Returns the released holds too, for the
    /// caller to drop once the state is unlocked.
    fn update_holds(
        &self,
        st: &mut ReadState,
        file: &FileMeta,
        key: &Arc<str>,
        first: u64,
        last: u64,
        class: Option<u64>,
    ) -> HoldUpdate {
        let Some(window) = class else {
            // A new run starts wherever this seek goes.
            st.held.reading = None;
            return (class, Vec::new(), st.release_before(u64::MAX));
        };
        if st.held.reading.is_none() {
            st.held.reading = Some(self.store.budget().reading());
        }
        let released = if st.held.key.as_ref() != Some(key) {
            st.held.key = Some(key.clone());
            st.held.exact.clear();
            st.release_before(u64::MAX)
        } else {
            // Reads up to the slack behind the run's end are still this run (out of order), and
            // keep their blocks; when the memory budget is short, only the block before this
            // read's is kept: the kernel's readahead has reads in flight over two windows at most
            // (the one the program reads and the next), and one window is a block on model
            // mounts, less elsewhere. A reader whose reads all came in order keeps none behind.
            let behind = if self.store.budget().under_pressure() {
                if st.held.out_of_order {
                    first.saturating_sub(1)
                } else {
                    first
                }
            } else {
                st.next.saturating_sub(SEQUENTIAL_SLACK.max(2 * self.readahead)) / BLOCK_SIZE
            };
            st.release_before(behind.min(first))
        };
        st.hold(&self.store, key, first..last + 1);
        let count = window * self.remote.window_scale();
        let mut prefetch = st.hold_window(&self.store, key, file.size, prefetch_blocks(file.size, last + 1, count));
        // A block the kernel's readahead already reads range by range (the budget was full) is
        // not loaded whole as well; its room goes back.
        prefetch.retain(|(idx, _)| !st.held.exact.contains(idx));
        (class, prefetch, released)
    }

    /// Starts background fetches of blocks `blocks` (the reader holds them), each with the room
    /// the budget gave it, claimed (none: the block was loaded or loading when admitted).
    fn prefetch(&self, file: &FileMeta, commit: &str, key: &Arc<str>, blocks: Vec<(u64, Option<Claim>)>) {
        for (idx, room) in blocks {
            let (this, file, commit, key) = (self.clone(), file.clone(), commit.to_string(), key.clone());
            tokio::spawn(async move {
                // Loaded or on its way when admitted: no load, its hold keeps the bytes (or takes
                // them when that load ends).
                let Some(claim) = room else {
                    this.store.keep_held(&key, idx).await;
                    return;
                };
                let fetch = this.load(&file, &commit, &key, idx);
                let len = block_len(file.size, idx);
                this.store.prefetching(&key, idx, len);
                // The load takes the claim's room, unless a read started it first.
                let got = this.store.get_or_fetch(&key, idx, len, fetch).await;
                drop(claim);
                this.store.prefetched(&key, idx, got.is_ok());
                if let Err(e) = got {
                    tracing::debug!(path = %file.remote_path, block = idx, error = %e, "prefetch failed");
                }
            });
        }
    }
}

/// Classifies a read of `[offset, end)` and advances the handle's state (see `Access`). A run
/// is sequential once it has read `SPARSE_RUN` bytes (from its first read where the readahead is
/// a block; with a prefetch window from `WINDOW_RUN` on) and at least half of what it spans;
/// a run that has skipped more than it read starts again at this read. A proven run that did not
/// start at offset 0 gets no prefetch past its blocks while it is no longer than the mount's
/// `readahead` (one page fault's read-around looks like that). Pure, so the policy is tested and
/// benchmarked without I/O.
pub fn classify(st: &mut ReadState, offset: u64, end: u64, readahead: u64) -> Access {
    // Kernel readahead sends several reads at once and they may arrive out of order: a read near
    // where the last one ended still counts as sequential.
    let len = end - offset;
    let slack = slack(len, readahead);
    // A program's own read of a MiB or more (a full scan's column chunk) wants whole blocks:
    // fetched exactly, its pieces cost a request each and the block that loads after them more.
    let large = st.direct && len >= SPARSE_RUN;
    if st.direct && offset == 0 && st.next == 0 && st.run_bytes == 0 && len >= SMALL_READ {
        st.from_start = true;
    }
    if offset.abs_diff(st.next) > slack {
        st.next = end;
        st.run_start = offset;
        st.run_bytes = len;
        st.window = 1;
        st.proven = large;
        return match (large, st.scanned) {
            // A scan's next row group: its blocks and the next ones, as a stream's.
            (true, true) => {
                st.window = 2;
                Access::Sequential(2)
            }
            (true, false) => Access::Sequential(0),
            (false, _) => Access::Seek,
        };
    }
    // A read behind the front of its run: reads arrive out of order.
    if offset < st.next {
        st.held.out_of_order = true;
    }
    st.next = st.next.max(end);
    st.run_start = st.run_start.min(offset);
    st.run_bytes += len;
    if st.run_bytes * 2 < st.next - st.run_start {
        // More skipped than read (column chunks of a parquet file): a run starts here.
        st.next = end;
        st.run_start = offset;
        st.run_bytes = len;
        st.window = 1;
        st.proven = false;
    }
    if readahead < BLOCK_SIZE && !st.scanned && st.run_bytes < WINDOW_RUN && !(st.from_start && st.run_start == 0) {
        if st.run_bytes < SPARSE_RUN && !large {
            return Access::Sparse;
        }
        st.proven = true;
        return Access::Sequential(0);
    }
    st.proven = true;
    // A run from the start of the file is a reader of the file (cat, cp, a loader reading the
    // header on), not one fault's read-around: it gets its prefetch at once.
    if st.run_start > 0 && st.next - st.run_start <= readahead {
        return Access::Sequential(0);
    }
    st.window = (st.window * 2).min(MAX_WINDOW_BLOCKS);
    Access::Sequential(st.window)
}

/// How far from where the last read ended a read of `len` bytes may start and still continue
/// its run (see `SEQUENTIAL_SLACK`).
fn slack(len: u64, readahead: u64) -> u64 {
    if len <= SMALL_READ {
        SEQUENTIAL_SLACK
    } else {
        SEQUENTIAL_SLACK.max(2 * readahead)
    }
}

/// The blocks a prefetch of `count` blocks from block `from` covers in a file of `size` bytes.
pub fn prefetch_blocks(size: u64, from: u64, count: u64) -> std::ops::Range<u64> {
    from..(from + count).min(size.div_ceil(BLOCK_SIZE))
}

/// Length of block `idx` of a file of `size` bytes (the last one is short).
fn block_len(size: u64, idx: u64) -> u64 {
    size.saturating_sub(idx * BLOCK_SIZE).min(BLOCK_SIZE)
}

/// The bytes `[offset, end)` out of consecutive blocks starting at file offset `base`.
fn assemble(blocks: &[Bytes], base: u64, offset: u64, end: u64) -> Bytes {
    let from = (offset - base) as usize;
    let to = (end - base) as usize;
    if blocks.len() == 1 {
        return blocks[0].slice(from..to);
    }
    let mut out = BytesMut::with_capacity(to - from);
    let mut pos = 0usize;
    for b in blocks {
        let (bs, be) = (pos, pos + b.len());
        let (s, e) = (from.max(bs), to.min(be));
        if s < e {
            out.extend_from_slice(&b[s - bs..e - bs]);
        }
        pos = be;
    }
    out.freeze()
}

/// Kernel readahead of a model repo's mount, in bytes: one cache block. A page fault in an mmap'd
/// file reads around it by the readahead, and the in-order safetensors load of a 512 MiB file went
/// from 74-79% of `dd`'s rate at 1 MiB to 87-91% at 8 MiB (`ci/bench-mmap.sh`).
pub const READAHEAD_MODEL: u64 = crate::chunk_store::BLOCK_SIZE;

/// Kernel readahead of every other mount (datasets, spaces, buckets): 1 MiB, the largest FUSE
/// read. A random reader of a mapping (numpy memmap sampling a dataset) pays a whole readahead
/// window per page fault; at 8 MiB, 30 random 4 KiB reads of a 512 MiB file cost 346 MiB from the
/// Hub instead of 47 MiB.
pub const READAHEAD_OTHER: u64 = 1 << 20;

/// The readahead a mount of `kind` gets unless `--readahead-kib` says otherwise.
pub fn default_readahead(kind: RepoKind) -> u64 {
    match kind {
        RepoKind::Model => READAHEAD_MODEL,
        _ => READAHEAD_OTHER,
    }
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
