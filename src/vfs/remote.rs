//! Fetching file content from the Hub: Xet-stored files from the CAS (a reconstruction, then xorb
//! ranges, driven by `xet::Fetcher`), regular and plain-LFS files through HTTP Range on `/resolve/`.
//! Every fetch has a deadline, so a stalled connection fails with EIO instead of wedging a reader.

mod xet;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::try_join_all;

use super::error::{VfsError, VfsResult};
use crate::chunk_store::buffer_pool::BufferPool;
use crate::hub_client::{HubClient, RepoRef};

/// Ranges at least this long are assembled in a pooled (reused) buffer.
const POOLED_MIN: u64 = 1 << 20;

/// Smallest part a block is split into when the link is latency-bound (the memory plan's part).
pub const MIN_PART: u64 = crate::chunk_store::budget::PART;

/// Request latency (time to first byte) from which one more part per block pays off: a request
/// costs about this much before bytes flow, so splitting a block keeps more connections busy.
const LATENCY_PER_PART_US: u64 = 10_000;

/// The link's base latency: a slowly rising minimum of recent times to first byte (microseconds; 0
/// until measured). A minimum, because queueing on a busy machine inflates many samples but not
/// all, while a distant Hub makes every sample slow. It decides how many parallel parts a block is
/// fetched in: on a fast link one request per block is cheapest, on a slow one more connections for
/// the same bytes in flight is what raises throughput. The lowest sample ever seen (`floor`)
/// decides whether the prefetch window grows: more memory in flight only when the Hub has never
/// answered fast, so a mount that queues its own requests on a busy machine does not grow it.
#[derive(Default)]
struct Latency(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64);

impl Latency {
    fn record(&self, d: Duration) {
        use std::sync::atomic::Ordering;
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        let floor = self.1.load(Ordering::Relaxed);
        if floor == 0 || us < floor {
            self.1.store(us.max(1), Ordering::Relaxed);
        }
        let old = self.0.load(Ordering::Relaxed);
        let new = if old == 0 || us < old {
            us.max(1)
        } else {
            old + (us - old) / 64
        };
        self.0.store(new, Ordering::Relaxed);
    }

    /// How many times the reader's usual prefetch window to keep in flight: a distant Hub needs
    /// more bytes on the way to keep as many connections busy (two windows from 20 ms on).
    fn window_scale(&self) -> u64 {
        if self.1.load(std::sync::atomic::Ordering::Relaxed) >= 2 * LATENCY_PER_PART_US {
            2
        } else {
            1
        }
    }

    /// Whether any request was timed yet.
    fn measured(&self) -> bool {
        self.1.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Size of each part of a block of `len` bytes: the whole block, or from two parts' worth of
    /// latency on, parts of `MIN_PART`, the size of the pooled buffers their bodies are copied
    /// into. Parts in between (a third of a block at 30 ms) fit no pooled buffer, so every body
    /// took fresh memory and faulted in its pages: a quarter of the mount's CPU with 8 readers.
    fn part_size(&self, len: u64) -> u64 {
        let us = self.0.load(std::sync::atomic::Ordering::Relaxed);
        if us / LATENCY_PER_PART_US >= 2 {
            len.min(MIN_PART)
        } else {
            len
        }
    }
}

/// HTTP ranges up to this size are short enough that their duration measures latency.
const LATENCY_PROBE_MAX: u64 = 256 << 10;

/// Exact-range reads of Xet files up to this size go through the Hub's `/resolve/` redirect with an
/// HTTP Range (one request once the redirect target is cached) instead of a Xet reconstruction
/// followed by a xorb fetch (two requests every time).
const XET_HTTP_RANGE_MAX: u64 = 4 << 20;

/// Xet files up to this size are "small": read whole, many at once, through batch
/// reconstructions (`fetch_small_batch`).
pub const SMALL_FILE_MAX: u64 = 1 << 20;

/// A file of the repo (path, size, content id) and its content's address: Hub data that the
/// write layer shares, hence kept in the Hub client.
pub use crate::hub_client::{ContentId, FileMeta};

pub struct Remote {
    client: HubClient,
    repo: RepoRef,
    timeout: Duration,
    xet: xet::Fetcher,
    /// Response bodies with no other room (exact ranges, small-file batches), against the
    /// memory budget's download part.
    downloads: InFlight,
    /// Bodies of whole-block loads, which live in their blocks' room (see `BodyRoom::Block`):
    /// bounded here only so the link gets as many bytes on the way as it needs (on a fast link
    /// more loads at once only share the CPU).
    blocks_in_flight: InFlight,
    pool: BufferPool,
    latency: Latency,
    /// Set once the CAS answered the batch route with 404/405/501 (an older server): small files
    /// are then read one by one, as before batches existed.
    no_batches: std::sync::atomic::AtomicBool,
    /// Batch requests of many small files at once. A folder may start a thousand files in one go;
    /// sent all at once, its batches would share the CAS and the link and each land late, while
    /// a reader going through the folder wants the first ones first. A one-file batch (a reader
    /// waiting on a miss) does not queue here.
    batch_slots: tokio::sync::Semaphore,
}

/// Where the memory of a fetch's response bodies is counted until they are copied out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyRoom {
    /// Against the download part of the memory budget (`Remote::downloads`): an exact range or
    /// a small-file batch, whose reply has no other room.
    Downloads,
    /// In the room the load of a whole block took for its buffer when it was admitted: that
    /// buffer is taken from the pool only once the bodies are in, to decode or copy them into,
    /// and while both are alive the budget counts both (the load gives its room back only after).
    /// Counting the bodies against the download part as well counted them twice: under 256M, 16
    /// readers at 30 ms had at most 64 MiB of blocks on the way while the room taken for their
    /// blocks stood empty.
    Block,
}

/// KiB of response bodies on the way at once, by all readers of the mount. A distant Hub needs
/// more bytes on the way for the same throughput, so it gets the larger bound (chosen as the
/// prefetch window is, see `Latency`).
struct InFlight {
    fast: tokio::sync::Semaphore,
    slow: tokio::sync::Semaphore,
    /// Their sizes in KiB.
    kib: (u32, u32),
}

impl InFlight {
    /// `fast_kib` on a fast link, `slow_kib` on a slow one.
    fn new(fast_kib: u32, slow_kib: u32) -> InFlight {
        let kib = (fast_kib, slow_kib);
        InFlight {
            fast: tokio::sync::Semaphore::new(kib.0 as usize),
            slow: tokio::sync::Semaphore::new(kib.1 as usize),
            kib,
        }
    }

    /// Room for `len` bytes (a larger body takes all there is, so it is never refused).
    async fn take(&self, len: u64, slow: bool) -> VfsResult<tokio::sync::SemaphorePermit<'_>> {
        let (sem, cap) = if slow {
            (&self.slow, self.kib.1)
        } else {
            (&self.fast, self.kib.0)
        };
        let kib = len.div_ceil(1024).clamp(1, cap as u64) as u32;
        sem.acquire_many(kib)
            .await
            .map_err(|_| VfsError::Xet("download budget closed".to_string()))
    }
}

/// See `Remote::batch_slots`.
const BATCHES_AT_ONCE: usize = 2;

/// Bodies on the way on a fast link (48 MiB) and on a slow one (128 MiB), in KiB; for exact
/// ranges and batches, no more than the memory budget's download part.
const BUDGET_FAST_KIB: u32 = 48 << 10;
const BUDGET_SLOW_KIB: u32 = 128 << 10;

/// Block bodies on the way on a slow link (256 MiB), in KiB: their memory is bounded by the
/// blocks' room, so this only decides how many blocks the link carries at once. 8 readers of
/// 256 MiB at 30 ms over FUSE read 403–428 MB/s with 256 MiB (1.57–1.84× one reader, three runs)
/// against 360–392 with 128 (1.36–1.47×, two runs), peak RSS 321–355 MiB (default budget 512).
const BLOCKS_SLOW_KIB: u32 = 256 << 10;

impl Remote {
    /// `plan`: the memory budget's split, which gives download bodies in flight and idle body
    /// buffers their bytes (`None`: the defaults).
    pub fn new(
        client: HubClient,
        repo: RepoRef,
        timeout: Duration,
        pool: BufferPool,
        plan: Option<crate::chunk_store::budget::Plan>,
    ) -> VfsResult<Remote> {
        let downloads = plan.map(|p| p.downloads);
        let t = client.transport();
        let cap = downloads
            .map_or(u32::MAX, |b| (b >> 10).min(u32::MAX as u64) as u32)
            .max(1 << 10);
        Ok(Remote {
            xet: xet::Fetcher {
                client: t.client,
                attempt_timeout: t.timeout,
                max_retries: t.max_retries,
                patience: t.patience,
                windows: t.windows,
                pool: pool.clone(),
                bodies: plan.map_or_else(xet::BodyBuffers::default, |p| xet::BodyBuffers::new(p.idle_bodies)),
                fast_link: std::sync::atomic::AtomicBool::new(false),
            },
            downloads: InFlight::new(BUDGET_FAST_KIB.min(cap), BUDGET_SLOW_KIB.min(cap)),
            blocks_in_flight: InFlight::new(BUDGET_FAST_KIB, BLOCKS_SLOW_KIB),
            // Each attempt has its own deadline; this one backs them up, so it also covers the
            // time a request may wait for a window or through an outage.
            timeout: timeout + client.patience(),
            client,
            repo,
            pool,
            latency: Latency::default(),
            no_batches: std::sync::atomic::AtomicBool::new(false),
            batch_slots: tokio::sync::Semaphore::new(BATCHES_AT_ONCE),
        })
    }

    /// Multiplier of the reader's prefetch window for the measured link (see `Latency`).
    pub fn window_scale(&self) -> u64 {
        self.latency.window_scale()
    }

    /// Exactly the bytes `[start, start + len)` of `file` (clamped to its size), for one random
    /// read: a small range of a Xet file costs one HTTP request.
    pub async fn fetch_exact(&self, file: &FileMeta, commit: &str, start: u64, len: u64) -> VfsResult<Bytes> {
        let len = len.min(file.size.saturating_sub(start));
        if len == 0 {
            return Ok(Bytes::new());
        }
        tracing::trace!(key = %file.id.key(), start, len, "fetching an exact range from the Hub");
        // Not for a bucket: its `/resolve/` serves whatever the path holds now, while the Xet hash
        // names exactly the content this file was listed with.
        let http = len <= XET_HTTP_RANGE_MAX && !self.repo.is_bucket();
        let mut pieces = self.pieces(file, commit, start, len, http, BodyRoom::Downloads).await?;
        // One piece (an HTTP range) is returned as it came: a reply-sized buffer, not a pooled
        // block buffer (these reads are what a reader does when the memory budget is full).
        if pieces.len() == 1 {
            return Ok(pieces.pop().unwrap_or_default());
        }
        Ok(self.gather(pieces, len))
    }

    /// A whole cache block in parallel parts sized by the measured latency (see `Latency`): for a
    /// Xet file one reconstruction and its xorb ranges, decoded straight into one pooled buffer;
    /// otherwise HTTP ranges gathered with one copy into a pooled buffer.
    pub async fn fetch_block(&self, file: &FileMeta, commit: &str, start: u64, len: u64) -> VfsResult<Bytes> {
        let len = len.min(file.size.saturating_sub(start));
        if len == 0 {
            return Ok(Bytes::new());
        }
        if let ContentId::Xet(_) = file.id {
            let mut pieces = self.pieces(file, commit, start, len, false, BodyRoom::Block).await?;
            // Decoded into one buffer of the block's length (pooled from 1 MiB): it is the block.
            // Gathering it again cost a copy of every byte (7% of the mount's CPU with 8 readers
            // at 30 ms).
            if pieces.len() == 1 {
                return Ok(pieces.pop().unwrap_or_default());
            }
            return Ok(self.gather(pieces, len));
        }
        let end = start + len;
        let part = self.latency.part_size(len);
        let parts = (start..end)
            .step_by(part as usize)
            .map(|s| self.pieces(file, commit, s, part.min(end - s), false, BodyRoom::Block));
        let pieces: Vec<Bytes> = try_join_all(parts).await?.into_iter().flatten().collect();
        Ok(self.gather(pieces, len))
    }

    /// The bytes `[start, start + len)` in pieces (not gathered into one buffer), within the
    /// deadline.
    async fn pieces(
        &self,
        file: &FileMeta,
        commit: &str,
        start: u64,
        len: u64,
        http: bool,
        room: BodyRoom,
    ) -> VfsResult<Vec<Bytes>> {
        let work = async {
            match &file.id {
                ContentId::Xet(hash) if !http => self.xet_pieces(hash, commit, start, len, room).await,
                ContentId::Xet(_) | ContentId::Lfs(_) | ContentId::Git(_) => {
                    let _held = self.body_room(len, room).await?;
                    let t = std::time::Instant::now();
                    let b = self
                        .client
                        .read_range(&self.repo, &file.commit, &file.remote_path, start, len)
                        .await?;
                    if len <= LATENCY_PROBE_MAX {
                        self.latency.record(t.elapsed());
                    }
                    Ok(vec![b])
                }
            }
        };
        let pieces = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| VfsError::Timeout(self.timeout))??;
        let got: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        if got != len {
            return Err(VfsError::ShortRead {
                offset: start,
                wanted: len,
                got,
            });
        }
        Ok(pieces)
    }

    /// One `Bytes` out of pieces totalling `len`: a lone small piece as it is, anything else copied
    /// once into a pooled (reused) buffer.
    fn gather(&self, mut pieces: Vec<Bytes>, len: u64) -> Bytes {
        if pieces.len() == 1 && len < POOLED_MIN {
            return pieces.pop().unwrap_or_default();
        }
        let mut buf = self.pool.acquire(len as usize);
        for p in &pieces {
            buf.extend_from_slice(p);
        }
        buf.freeze()
    }

    /// Whether background work (prefetch) may fetch `file` now: every request window its fetch
    /// spends is open with more than its last tenth left (Xet: the Xet token's `api` and the
    /// CAS's; else a `/resolve/`).
    pub fn background_ok(&self, file: &FileMeta) -> bool {
        use crate::hub_client::windows::Bucket;
        let w = self.client.windows();
        match file.id {
            ContentId::Xet(_) => w.background_ok(Bucket::Api) && w.background_ok(Bucket::Cas),
            ContentId::Lfs(_) | ContentId::Git(_) => w.background_ok(Bucket::Resolvers),
        }
    }

    /// Whether `file` can go in a batch: a small Xet file, and the CAS has not refused batches.
    pub fn batchable(&self, file: &FileMeta) -> bool {
        matches!(file.id, ContentId::Xet(_))
            && file.size > 0
            && file.size <= SMALL_FILE_MAX
            && !self.no_batches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The whole content of each of `files` (small Xet files of one repo revision), by content key,
    /// from one batch reconstruction and one fetch per joined xorb range. Files the answer leaves
    /// out, or whose bytes do not match their size, are missing from the map: the caller reads
    /// them one by one. A CAS without the batch route answers an empty map from then on.
    pub async fn fetch_small_batch(&self, files: &[FileMeta], commit: &str) -> VfsResult<HashMap<Arc<str>, Bytes>> {
        let list: Vec<(String, u64)> = files
            .iter()
            .filter_map(|f| match &f.id {
                ContentId::Xet(h) if self.batchable(f) => Some((h.clone(), f.size)),
                _ => None,
            })
            .collect();
        if list.is_empty() {
            return Ok(HashMap::new());
        }
        let _slot = if list.len() > 1 {
            Some(
                self.batch_slots
                    .acquire()
                    .await
                    .map_err(|_| VfsError::Xet("batch slots closed".to_string()))?,
            )
        } else {
            None
        };
        let token = self.client.xet_read_token(&self.repo, commit).await?;
        let cas = xet::Cas {
            url: token.cas_url,
            token: token.access_token,
        };
        let total: u64 = list.iter().map(|(_, s)| s).sum();
        let _held = self.body_room(total, BodyRoom::Downloads).await?;
        let record = |d| self.latency.record(d);
        let work = self.xet.batch(&cas, &list, &record);
        let answer = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| VfsError::Timeout(self.timeout))??;
        let got = match answer {
            xet::Batch::Files(m) => m,
            xet::Batch::Unsupported => {
                if !self.no_batches.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::info!("the CAS has no batch reconstruction route; small files are read one by one");
                }
                return Ok(HashMap::new());
            }
            xet::Batch::Unreachable(why) => {
                tracing::info!(error = %why, "the CAS cannot be reached; asking the Hub where it is now");
                self.client.forget_xet_token(&self.repo);
                return Ok(HashMap::new());
            }
        };
        let mut out = HashMap::with_capacity(got.len());
        for (hash, size) in &list {
            match got.get(hash) {
                Some(b) if b.len() as u64 == *size => {
                    out.insert(ContentId::Xet(hash.clone()).key(), b.clone());
                }
                Some(b) => tracing::debug!(hash, size, got = b.len(), "batch answer of the wrong size"),
                None => {}
            }
        }
        Ok(out)
    }

    /// Room for `len` bytes of response bodies where `room` says they are counted (the larger
    /// bound once the link is known to be slow; at most the whole bound, so one large fetch never
    /// waits forever). Also tells the Xet fetcher whether the link measures fast, which decides
    /// how it holds bodies (see `xet::Body`).
    async fn body_room(&self, len: u64, room: BodyRoom) -> VfsResult<tokio::sync::SemaphorePermit<'_>> {
        let slow = self.latency.window_scale() > 1;
        let fast = !slow && self.latency.measured();
        self.xet.fast_link.store(fast, std::sync::atomic::Ordering::Relaxed);
        match room {
            BodyRoom::Downloads => self.downloads.take(len, slow).await,
            BodyRoom::Block => self.blocks_in_flight.take(len, slow).await,
        }
    }

    /// `[start, start + len)` of a Xet file as one buffer: a reconstruction of exactly that range,
    /// its xorb ranges fetched in parts sized by the measured latency.
    async fn xet_pieces(
        &self,
        hash: &str,
        commit: &str,
        start: u64,
        len: u64,
        room: BodyRoom,
    ) -> VfsResult<Vec<Bytes>> {
        let started = std::time::Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let token = self.client.xet_read_token(&self.repo, commit).await?;
            let cas = xet::Cas {
                url: token.cas_url,
                token: token.access_token,
            };
            let _held = self.body_room(len, room).await?;
            let got = self
                .xet
                .range(
                    &cas,
                    hash,
                    start..start + len,
                    &|len| self.latency.part_size(len),
                    len,
                    &|d| self.latency.record(d),
                )
                .await;
            match got {
                Ok(v) => return Ok(v),
                // The CAS may have moved (a restarted local Hub, a new CAS deployment): its address
                // comes with a fresh token, so the next try asks the Hub, within the patience.
                Err(xet::FetchError::Unreachable(why))
                    if started.elapsed() + Duration::from_secs(1) < self.client.patience() =>
                {
                    tracing::info!(error = %why, attempt, "the CAS cannot be reached; asking the Hub where it is now");
                    self.client.forget_xet_token(&self.repo);
                    tokio::time::sleep(crate::hub_client::backoff_for(attempt)).await;
                }
                Err(e) => return Err(e.into_vfs()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_follow_latency() {
        let l = Latency::default();
        assert_eq!(l.part_size(8 << 20), 8 << 20, "unmeasured: one request per block");
        l.record(Duration::from_millis(2));
        assert_eq!(l.part_size(8 << 20), 8 << 20, "loopback: one request per block");
        let l = Latency::default();
        l.record(Duration::from_millis(60));
        assert_eq!(
            l.part_size(8 << 20),
            MIN_PART,
            "30 ms per hop: as many parts as allowed"
        );
        let l = Latency::default();
        l.record(Duration::from_millis(25));
        assert_eq!(
            l.part_size(8 << 20),
            MIN_PART,
            "two parts' worth: parts of a body buffer"
        );
        assert_eq!(l.part_size(1 << 20), 1 << 20, "a small block stays whole");
        let l = Latency::default();
        l.record(Duration::from_millis(15));
        assert_eq!(l.part_size(8 << 20), 8 << 20, "one part's worth: whole");
        let l = Latency::default();
        l.record(Duration::from_millis(1));
        for _ in 0..10 {
            l.record(Duration::from_millis(40));
        }
        assert_eq!(l.part_size(8 << 20), 8 << 20, "queueing spikes do not hide a fast link");
        for _ in 0..1000 {
            l.record(Duration::from_millis(50));
        }
        assert_eq!(l.part_size(8 << 20), MIN_PART, "a lasting change is followed");
        assert_eq!(
            l.window_scale(),
            1,
            "but the window grows only if the Hub was never fast"
        );
        let l = Latency::default();
        l.record(Duration::from_millis(30));
        assert_eq!(l.window_scale(), 2, "30 ms per request: twice the window");
    }
}
