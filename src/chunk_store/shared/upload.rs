//! Write-behind: blocks fetched from the Hub go to the store in the background, on two lanes of
//! uploaders, one for blocks this node claimed (other nodes may be waiting for them) and one for
//! the rest, so a backlog of the second never delays the first.
//!
//! A block keeps its bytes only while an uploader is free for it (or, without a disk tier, up to
//! a bound): bytes held in a queue are memory the budget counts, and a reader short of it reads its
//! next blocks as exact ranges, which the tier never sees. Otherwise a block waits as its key and
//! is read back from the disk tier when an uploader gets to it; a claimed one keeps its claim
//! while it waits, as long as the lane's backlog drains within [`CLAIM_WAIT`] at the uploads'
//! measured pace (past that, its claim goes so that waiters fetch it themselves, and it waits on
//! the other lane). A small block (a small file's, at most [`KEEP_SMALL_MAX`]) waits with a copy of
//! its bytes instead, up to [`KEPT_BYTES_MAX`] per lane: a burst of small files outruns the disk
//! tier's write queue, and a block the queue turned away is on disk only once memory lets it go,
//! so read back from disk it was dropped (246 of 303 files of a batched folder were).
//!
//! Uploads yield to reads: while a read waits on the tier, one upload runs at a time across both
//! lanes ([`UPLOADS_BESIDE_READS`]); the rest wait for their turn, and blocks fetched meanwhile
//! wait as keys: the first node of a fleet fills the tier partly during its read, the rest after.
//! Claimed blocks do not yield while other nodes are seen reading the same content: those nodes
//! are waiting for them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::{ObjectStoreExt, PutPayload};

use super::{CLAIM_WAIT, Claim, SharedTier, UPLOAD_DEADLINE, format};

/// Uploads at once, per lane.
pub(super) const UPLOADERS: usize = 4;

/// Uploads at once, both lanes together, while a read waits on the tier (a lookup, a claim, the
/// Hub fetch after them): the store and the node's CPU go to the read first. With four uploads a
/// lane beside it, a store on one core answered a first node's lookups in 0.3–0.7 s instead of
/// 30 ms, and the node read at 52–61% of its speed without the tier; with one, at 82–92%.
/// Blocks this node claimed do not yield while other nodes are seen reading the same content
/// (see [`OTHERS_READING`]): those nodes wait for them.
pub(super) const UPLOADS_BESIDE_READS: usize = 1;

/// How long a claimed block waits for its turn beside reads at most: another node may be waiting
/// for it unseen (a node that stays ahead of the others never finds their claims). With claimed
/// blocks yielding like the rest, two nodes reading one file at once made the Hub send 1.39× the
/// file (Azurite, fake-gcs-server).
pub(super) const CLAIMED_YIELD_MAX: Duration = Duration::from_secs(1);

/// How long after finding another node's claim this node counts others as reading beside it
/// (and its claimed blocks stop yielding: those nodes wait for them).
pub(super) const OTHERS_READING: Duration = Duration::from_secs(30);

/// A read waiting on the tier, for as long as it waits: uploads hold back meanwhile (see
/// [`UPLOADS_BESIDE_READS`]).
pub(super) struct Reading<'a>(&'a SharedTier);

impl<'a> Reading<'a> {
    pub(super) fn new(tier: &'a SharedTier) -> Reading<'a> {
        tier.0.reading.fetch_add(1, Ordering::AcqRel);
        Reading(tier)
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.0.0.reading.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Tasks per lane at most: uploads of blocks with their bytes and drainers of the backlog.
/// Without a disk tier to read blocks back from, it bounds the blocks queued with their bytes;
/// past it a claimed block loses its claim and goes to the other lane, an unclaimed one is dropped.
const MAX_PENDING: usize = 16;

/// Blocks waiting as keys at most on the unclaimed lane: 8 GiB of content. Past it a block is
/// dropped.
const MAX_BACKLOG: usize = 1024;

/// Blocks up to this size wait for an uploader with a copy of their bytes (see the module doc),
/// as long as a lane's copies stay within [`KEPT_BYTES_MAX`].
pub(super) const KEEP_SMALL_MAX: u64 = 1 << 20;
const KEPT_BYTES_MAX: u64 = 16 << 20;

/// A deferred block not on disk yet is tried again after this, twice as long each time up to
/// [`DEFERRED_RETRY_MAX`], [`DEFERRED_TRIES`] times in all (about 40 s), then dropped. Its disk
/// write may still be queued, or the full disk queue turned it away and it is written only when
/// the memory tier lets it go (`chunk_store::spill`).
const DEFERRED_RETRY: Duration = Duration::from_millis(500);
const DEFERRED_RETRY_MAX: Duration = Duration::from_secs(8);
const DEFERRED_TRIES: u8 = 8;

/// Which lane.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum LaneId {
    Claimed,
    Unclaimed,
}

/// One lane: its uploaders, its blocks queued with their bytes, its blocks waiting as keys.
/// Lock order: `backlog` is a leaf.
pub(super) struct Lane {
    uploaders: tokio::sync::Semaphore,
    /// Tasks of the lane: uploads of blocks with their bytes, and drainers of the backlog.
    pending: AtomicUsize,
    /// Blocks with their bytes: queued, read back, or uploading.
    in_flight: AtomicUsize,
    backlog: parking_lot::Mutex<VecDeque<Deferred>>,
    /// Bytes of the small blocks waiting in the backlog with their bytes.
    kept: AtomicU64,
}

impl Lane {
    pub(super) fn new() -> Lane {
        Lane {
            uploaders: tokio::sync::Semaphore::new(UPLOADERS),
            pending: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            backlog: Default::default(),
            kept: AtomicU64::new(0),
        }
    }

    /// Room for a copy of a small block of `len` bytes in the backlog (taken if `true`).
    fn keep(&self, len: u64) -> bool {
        if len > KEEP_SMALL_MAX {
            return false;
        }
        if self.kept.fetch_add(len, Ordering::AcqRel) + len <= KEPT_BYTES_MAX {
            return true;
        }
        self.kept.fetch_sub(len, Ordering::AcqRel);
        false
    }

    fn waiting(&self) -> usize {
        let backlog = self.backlog.lock();
        self.in_flight.load(Ordering::Acquire) + backlog.len()
    }
}

/// A block waiting for an uploader, to be read back from the disk tier.
struct Deferred {
    key: Arc<str>,
    block: u64,
    len: u64,
    /// A small block's bytes (a copy: a slice could keep a whole reply alive); `None`: read
    /// back from the disk tier.
    data: Option<Bytes>,
    /// Released once the block is written or given up.
    claim: Option<Claim>,
    /// Times its disk read missed (see [`DEFERRED_RETRY`]), and when to read it next.
    tries: u8,
    not_before: Option<Instant>,
}

/// Upload time of one block, smoothed (milliseconds; 0 until the first upload).
#[derive(Default)]
pub(super) struct Pace(AtomicU64);

impl Pace {
    fn record(&self, took: Duration) {
        let ms = took.as_millis().max(1) as u64;
        let old = self.0.load(Ordering::Relaxed);
        let new = if old == 0 { ms } else { (old * 7 + ms) / 8 };
        self.0.store(new, Ordering::Relaxed);
    }

    /// Claimed blocks that may wait as keys: as many as the lane uploads within [`CLAIM_WAIT`] at
    /// this pace (the uploaders' share before the first upload is timed), so that the last of
    /// them lands about when a node that found its claim stops waiting. Half of it let claims go
    /// that waiters would have had in time: two nodes at once on Azurite fetched 1.24–1.79× a
    /// 1 GiB file from the Hub, against 1.011–1.019× with the whole wait. (A claimed upload
    /// yields to reads for [`CLAIMED_YIELD_MAX`] at most, so the lane keeps its uploaders.)
    fn claimed_backlog(&self) -> usize {
        match self.0.load(Ordering::Relaxed) {
            0 => UPLOADERS,
            ms => ((CLAIM_WAIT.as_millis() as u64 / ms) as usize * UPLOADERS).min(MAX_BACKLOG),
        }
    }
}

impl SharedTier {
    fn lane(&self, id: LaneId) -> &Lane {
        match id {
            LaneId::Claimed => &self.0.claimed,
            LaneId::Unclaimed => &self.0.unclaimed,
        }
    }

    /// Queues `data` for upload as the block's object; `claim` is released once the object is
    /// there or given up. A read never waits for this.
    pub fn write_behind(&self, key: &Arc<str>, block: u64, data: &Bytes, claim: Option<Claim>) {
        if self.paused() {
            drop(claim);
            return;
        }
        let id = match claim {
            Some(_) => LaneId::Claimed,
            None => LaneId::Unclaimed,
        };
        let lane = self.lane(id);
        let disk = self.0.disk.get().is_some();
        let busy = disk && lane.uploaders.available_permits() == 0;
        if !busy {
            if lane.pending.fetch_add(1, Ordering::AcqRel) < MAX_PENDING {
                lane.in_flight.fetch_add(1, Ordering::AcqRel);
                let (this, key, data) = (self.clone(), key.clone(), data.clone());
                tokio::spawn(async move {
                    let lane = this.lane(id);
                    if let Ok(permit) = lane.uploaders.acquire().await {
                        let turn = this.turn(id).await;
                        this.upload(permit, turn, &key, block, data).await;
                    }
                    drop(claim);
                    lane.in_flight.fetch_sub(1, Ordering::AcqRel);
                    this.drain(id).await;
                });
                return;
            }
            lane.pending.fetch_sub(1, Ordering::AcqRel);
        }
        let len = data.len() as u64;
        let keep = lane.keep(len);
        if disk || keep {
            let mut backlog = lane.backlog.lock();
            let room = match id {
                LaneId::Claimed => self.0.pace.claimed_backlog(),
                LaneId::Unclaimed => MAX_BACKLOG,
            };
            if backlog.len() >= room && keep {
                lane.kept.fetch_sub(len, Ordering::AcqRel);
            }
            if backlog.len() < room {
                backlog.push_back(Deferred {
                    key: key.clone(),
                    block,
                    len,
                    data: keep.then(|| Bytes::copy_from_slice(data)),
                    claim,
                    tries: 0,
                    not_before: None,
                });
                drop(backlog);
                // Someone must take it up: the uploaders' own tasks drain the backlog when
                // done, but they may have looked at it just before this push.
                if lane.pending.fetch_add(1, Ordering::AcqRel) < MAX_PENDING {
                    let this = self.clone();
                    tokio::spawn(async move { this.drain(id).await });
                } else {
                    lane.pending.fetch_sub(1, Ordering::AcqRel);
                }
                return;
            }
        }
        match claim {
            // Others stop waiting for it (they fetch it themselves); it goes the unclaimed way.
            Some(claim) => {
                drop(claim);
                self.write_behind(key, block, data, None);
            }
            None => {
                self.event("dropped");
                tracing::trace!(block, "shared cache upload queue full; block not written");
            }
        }
    }

    /// Uploads the lane's deferred blocks until none is left; the caller counts as pending.
    async fn drain(&self, id: LaneId) {
        let lane = self.lane(id);
        loop {
            self.drain_once(id).await;
            lane.pending.fetch_sub(1, Ordering::AcqRel);
            // A block deferred after the drain and before the line above would wait for the
            // next upload: take it up again unless other uploads are at it.
            if lane.backlog.lock().is_empty() {
                return;
            }
            if lane.pending.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING {
                lane.pending.fetch_sub(1, Ordering::AcqRel);
                return;
            }
        }
    }

    /// Uploads deferred blocks until none is left. A block leaves the backlog, and its bytes are
    /// read back, only once an uploader is free for it: drainers waiting hold no memory.
    async fn drain_once(&self, id: LaneId) {
        let lane = self.lane(id);
        loop {
            // A block tried again later waits for its time without holding up those behind it.
            let ready_in = {
                let backlog = lane.backlog.lock();
                let now = Instant::now();
                let waits = backlog
                    .iter()
                    .map(|d| d.not_before.map_or(Duration::ZERO, |t| t - now.min(t)));
                match waits.min() {
                    Some(w) => w,
                    None => return,
                }
            };
            if !ready_in.is_zero() {
                tokio::time::sleep(ready_in).await;
            }
            let Ok(permit) = lane.uploaders.acquire().await else {
                return;
            };
            // Counted in flight as it leaves the backlog, so that no moment shows it in neither.
            let popped = {
                let mut backlog = lane.backlog.lock();
                let now = Instant::now();
                let ready = backlog.iter().position(|d| d.not_before.is_none_or(|t| t <= now));
                let d = ready.and_then(|i| backlog.remove(i));
                if d.is_some() {
                    lane.in_flight.fetch_add(1, Ordering::AcqRel);
                }
                d
            };
            let Some(mut d) = popped else {
                // Taken by another drainer, or the backlog is empty: look again.
                continue;
            };
            let kept = d.data.take();
            if kept.is_some() {
                lane.kept.fetch_sub(d.len, Ordering::AcqRel);
            }
            let done = || lane.in_flight.fetch_sub(1, Ordering::AcqRel);
            if self.paused() {
                self.event("dropped");
                done();
                continue;
            }
            // The turn beside reads comes before the block is read back: a read-back is disk
            // and memory the reads want, and four of them a lane, each then waiting for its
            // turn with its bytes, slowed a first node whose cache is on disk.
            let turn = self.turn(id).await;
            let data = match (kept, self.0.disk.get().cloned()) {
                (Some(data), _) => Some(data),
                (None, Some((disk, pool))) => {
                    let k = (d.key.clone(), d.block);
                    let len = d.len;
                    tokio::task::spawn_blocking(move || disk.read(&k, len, &pool))
                        .await
                        .ok()
                        .flatten()
                }
                (None, None) => {
                    self.event("dropped");
                    done();
                    continue;
                }
            };
            match data {
                Some(data) => {
                    self.upload(permit, turn, &d.key, d.block, data).await;
                    drop(d.claim);
                }
                // Not on disk yet: its disk write is most often still queued (it was deferred as
                // soon as it was fetched). Past the second miss its claim goes, so that nodes
                // waiting for it fetch it themselves rather than wait for a block that may be late.
                None if d.tries < DEFERRED_TRIES => {
                    let wait = DEFERRED_RETRY.saturating_mul(1 << d.tries).min(DEFERRED_RETRY_MAX);
                    let claim = if d.tries >= 1 { None } else { d.claim };
                    lane.backlog.lock().push_back(Deferred {
                        tries: d.tries + 1,
                        not_before: Some(Instant::now() + wait),
                        claim,
                        ..d
                    })
                }
                None => self.event("dropped"),
            }
            done();
        }
    }

    /// Whether the lane's uploads yield to reads now: while one waits on the tier, unless the
    /// lane's blocks are claimed and other nodes were seen reading the same content lately.
    fn yields(&self, id: LaneId) -> bool {
        self.0.reading.load(Ordering::Acquire) > 0 && (id == LaneId::Unclaimed || !self.others_reading())
    }

    /// A turn among the [`UPLOADS_BESIDE_READS`] if lane `id` yields to reads now (a claimed
    /// block waits for it [`CLAIMED_YIELD_MAX`] at most); `None` if it does not yield, or a
    /// claimed block's wait ran out.
    async fn turn(&self, id: LaneId) -> Option<tokio::sync::SemaphorePermit<'_>> {
        match (self.yields(id), id) {
            (false, _) => None,
            (true, LaneId::Unclaimed) => self.0.beside_reads.acquire().await.ok(),
            (true, LaneId::Claimed) => tokio::time::timeout(CLAIMED_YIELD_MAX, self.0.beside_reads.acquire())
                .await
                .ok()
                .and_then(Result::ok),
        }
    }

    /// Uploads one block on the uploader `_permit` holds, in the turn `_turn` holds if it had to
    /// take one (see [`Self::turn`]), within [`UPLOAD_DEADLINE`]; a failure pauses the tier.
    async fn upload(
        &self,
        _permit: tokio::sync::SemaphorePermit<'_>,
        _turn: Option<tokio::sync::SemaphorePermit<'_>>,
        key: &str,
        block: u64,
        data: Bytes,
    ) {
        let t = Instant::now();
        let payload: PutPayload = format::encode(key, block, &data).into_iter().collect();
        let path = self.block_path(key, block);
        let put = self.0.store.put(&path, payload);
        match tokio::time::timeout(UPLOAD_DEADLINE, put).await {
            Ok(Ok(_)) => {
                self.0.pace.record(t.elapsed());
                self.event("written");
            }
            Ok(Err(e)) => {
                self.event("upload_failed");
                self.pause("upload", &e);
            }
            Err(_) => {
                self.event("upload_failed");
                self.pause("upload", &format!("not written within {UPLOAD_DEADLINE:?}"));
            }
        }
    }

    /// Blocks waiting as keys: claimed, unclaimed.
    #[cfg(test)]
    pub(super) fn waiting_as_keys(&self) -> (usize, usize) {
        (
            self.0.claimed.backlog.lock().len(),
            self.0.unclaimed.backlog.lock().len(),
        )
    }

    /// Uploads queued, in flight or deferred, metadata objects included (status; tests wait
    /// for 0).
    pub fn pending_uploads(&self) -> usize {
        self.0.claimed.waiting() + self.0.unclaimed.waiting() + self.0.meta_uploads.pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimed_blocks_wait_as_keys_only_as_long_as_waiters_would() {
        let pace = Pace::default();
        assert_eq!(pace.claimed_backlog(), UPLOADERS, "before the first upload is timed");
        pace.record(Duration::from_millis(100));
        // 10 s at 100 ms a block on 4 uploaders.
        assert_eq!(pace.claimed_backlog(), 400);
        for _ in 0..64 {
            pace.record(Duration::from_secs(2));
        }
        assert_eq!(pace.claimed_backlog(), 20, "a slow store keeps few claims waiting");
        for _ in 0..64 {
            pace.record(Duration::from_secs(20));
        }
        assert_eq!(pace.claimed_backlog(), 0, "a store slower than the wait keeps none");
    }
}
