//! Parts of blocks: the byte ranges sparse reads fetched exactly, kept so that a later read of the
//! same bytes (a parquet footer read twice, the neighbour of a random read) is not fetched again,
//! and so that a block loaded whole later fetches only what is missing.
//!
//! Memory only, bounded by a byte cap with least-recently-used blocks evicted first: a sparse
//! reader's ranges are small and its working set is the footers and column chunks it reads now.
//! A block loaded whole takes its parts over (`take`), so the same bytes are never held twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

/// Parts of one block: non-overlapping ranges by start offset within the block.
#[derive(Default)]
struct Parts {
    ranges: BTreeMap<u64, Bytes>,
    bytes: u64,
    /// When it was last used, for eviction.
    tick: u64,
}

impl Parts {
    /// The ranges not covered within `[from, to)`.
    fn gaps(&self, from: u64, to: u64) -> Vec<std::ops::Range<u64>> {
        let mut gaps = Vec::new();
        let mut at = from;
        // A range starting before `from` may cover its start.
        let before = self.ranges.range(..from).next_back();
        let after = self.ranges.range(from..to);
        for (&s, b) in before.into_iter().chain(after) {
            let e = s + b.len() as u64;
            if e <= at {
                continue;
            }
            if s > at {
                gaps.push(at..s.min(to));
            }
            at = at.max(e);
            if at >= to {
                break;
            }
        }
        if at < to {
            gaps.push(at..to);
        }
        gaps
    }

    /// `[from, to)` if the parts cover it: a slice of one range, or the ranges that meet copied
    /// into one buffer.
    fn get(&self, from: u64, to: u64) -> Option<Bytes> {
        let (&s, b) = self.ranges.range(..=from).next_back()?;
        let e = s + b.len() as u64;
        if to <= e {
            return Some(b.slice((from - s) as usize..(to - s) as usize));
        }
        if !self.gaps(from, to).is_empty() {
            return None;
        }
        let mut out = BytesMut::with_capacity((to - from) as usize);
        let mut at = from;
        for (&s, b) in self.ranges.range(s..to) {
            let e = s + b.len() as u64;
            if e <= at {
                continue;
            }
            out.extend_from_slice(&b[(at - s) as usize..(e.min(to) - s) as usize]);
            at = e.min(to);
        }
        Some(out.freeze())
    }

    /// Adds `data` at `from`, only where no part is yet; returns the bytes added.
    fn insert(&mut self, from: u64, data: &Bytes) -> u64 {
        let to = from + data.len() as u64;
        let mut added = 0;
        for g in self.gaps(from, to) {
            let piece = data.slice((g.start - from) as usize..(g.end - from) as usize);
            added += piece.len() as u64;
            self.ranges.insert(g.start, piece);
        }
        self.bytes += added;
        added
    }
}

/// The parts of many blocks, at most `cap` bytes.
/// Lock order: `inner` and `pending` are leaves, never held together.
#[derive(Clone)]
pub struct PartialBlocks {
    inner: Arc<Mutex<Inner>>,
    cap: u64,
    /// Sparse fetches in flight per block, so that a load of the block waits for them rather than
    /// fetch their bytes as well (DuckDB's threads read one file's row groups side by side).
    pending: Pending,
}

/// Per block: the sparse fetches in flight (their ranges), and what wakes those waiting for one
/// of them to end.
type Pending = Arc<Mutex<HashMap<(Arc<str>, u64), InFlight>>>;

#[derive(Default)]
struct InFlight {
    /// Each fetch's id and the range of the block it fetches.
    ranges: Vec<(u64, std::ops::Range<u64>)>,
    /// Woken whenever one of them ends.
    done: Arc<tokio::sync::Notify>,
    next_id: u64,
}

/// A sparse fetch of a block in flight, for as long as it lives.
pub struct Fetching {
    pending: Pending,
    key: (Arc<str>, u64),
    id: u64,
}

impl Drop for Fetching {
    fn drop(&mut self) {
        let mut pending = self.pending.lock();
        if let Some(e) = pending.get_mut(&self.key) {
            e.ranges.retain(|(id, _)| *id != self.id);
            e.done.notify_waiters();
            if e.ranges.is_empty() {
                pending.remove(&self.key);
            }
        }
    }
}

#[derive(Default)]
struct Inner {
    blocks: HashMap<(Arc<str>, u64), Parts>,
    /// Blocks by last use, oldest first.
    lru: BTreeMap<u64, (Arc<str>, u64)>,
    bytes: u64,
    tick: u64,
}

impl Inner {
    fn touch(&mut self, k: &(Arc<str>, u64)) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(p) = self.blocks.get_mut(k) {
            self.lru.remove(&p.tick);
            p.tick = tick;
            self.lru.insert(tick, k.clone());
        }
    }
}

impl PartialBlocks {
    pub fn new(cap: u64) -> PartialBlocks {
        PartialBlocks {
            inner: Arc::default(),
            cap,
            pending: Arc::default(),
        }
    }

    /// Marks a sparse fetch of all of block `idx` in flight until the guard is dropped.
    pub fn fetching(&self, key: &Arc<str>, idx: u64) -> Fetching {
        self.register(&(key.clone(), idx), 0..u64::MAX)
    }

    fn register(&self, k: &(Arc<str>, u64), range: std::ops::Range<u64>) -> Fetching {
        let mut pending = self.pending.lock();
        let e = pending.entry(k.clone()).or_default();
        e.next_id += 1;
        e.ranges.push((e.next_id, range));
        Fetching {
            pending: self.pending.clone(),
            key: k.clone(),
            id: e.next_id,
        }
    }

    /// For a sparse read of `[from, to)` of block `idx`: the kept parts that overlap it, the
    /// ranges none covers, and, if there are some, the mark of their fetch. A read of bytes
    /// another read is fetching now waits for that fetch and takes its bytes: pyarrow's threads
    /// read one column chunk through two descriptors at once, and each fetched it.
    pub async fn claim(
        &self,
        key: &Arc<str>,
        idx: u64,
        from: u64,
        to: u64,
    ) -> (Vec<(u64, Bytes)>, Vec<std::ops::Range<u64>>, Option<Fetching>) {
        let k = (key.clone(), idx);
        loop {
            let (parts, gaps) = self.covering(key, idx, from, to);
            if gaps.is_empty() {
                return (parts, gaps, None);
            }
            let wait = {
                let pending = self.pending.lock();
                let busy = pending.get(&k).filter(|e| {
                    e.ranges
                        .iter()
                        .any(|(_, r)| gaps.iter().any(|g| g.start < r.end && r.start < g.end))
                });
                match busy {
                    Some(e) => e.done.clone(),
                    None => {
                        drop(pending);
                        let (lo, hi) = (gaps[0].start, gaps[gaps.len() - 1].end);
                        return (parts, gaps, Some(self.register(&k, lo..hi)));
                    }
                }
            };
            let woken = wait.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            // Ended between the look and the wait: look again at once.
            let still = self.pending.lock().get(&k).is_some_and(|e| {
                e.ranges
                    .iter()
                    .any(|(_, r)| gaps.iter().any(|g| g.start < r.end && r.start < g.end))
            });
            if still {
                woken.await;
            }
        }
    }

    /// Waits until the sparse fetches of block `idx` in flight now have ended (each has its
    /// deadline).
    pub async fn settled(&self, key: &Arc<str>, idx: u64) {
        let k = (key.clone(), idx);
        loop {
            let Some(done) = self.pending.lock().get(&k).map(|e| e.done.clone()) else {
                return;
            };
            let wait = done.notified();
            tokio::pin!(wait);
            wait.as_mut().enable();
            if !self.pending.lock().contains_key(&k) {
                return;
            }
            wait.await;
        }
    }

    /// Bytes `[from, to)` of block `idx` of `key` if its parts cover them.
    pub fn get(&self, key: &Arc<str>, idx: u64, from: u64, to: u64) -> Option<Bytes> {
        let mut inner = self.inner.lock();
        let k = (key.clone(), idx);
        let got = inner.blocks.get(&k)?.get(from, to)?;
        inner.touch(&k);
        Some(got)
    }

    /// Keeps `data`, the bytes of block `idx` from `from` on (whatever is not kept yet), evicting
    /// the least recently used blocks' parts past the cap.
    pub fn insert(&self, key: &Arc<str>, idx: u64, from: u64, data: &Bytes) {
        if data.is_empty() || data.len() as u64 > self.cap {
            return;
        }
        let mut inner = self.inner.lock();
        let k = (key.clone(), idx);
        let added = inner.blocks.entry(k.clone()).or_default().insert(from, data);
        inner.bytes += added;
        inner.touch(&k);
        while inner.bytes > self.cap {
            let Some((_, old)) = inner.lru.pop_first() else { break };
            if let Some(p) = inner.blocks.remove(&old) {
                inner.bytes -= p.bytes;
            }
        }
    }

    /// The ranges of `[0, len)` of block `idx` not kept (all of it when nothing is).
    pub fn gaps(&self, key: &Arc<str>, idx: u64, len: u64) -> Vec<std::ops::Range<u64>> {
        self.covering(key, idx, 0, len).1
    }

    /// For `[from, to)` of block `idx`: the kept parts that overlap it (whole, by start) and the
    /// ranges in it that none covers, read at one instant.
    pub fn covering(
        &self,
        key: &Arc<str>,
        idx: u64,
        from: u64,
        to: u64,
    ) -> (Vec<(u64, Bytes)>, Vec<std::ops::Range<u64>>) {
        let inner = self.inner.lock();
        let Some(p) = inner.blocks.get(&(key.clone(), idx)) else {
            return (Vec::new(), std::iter::once(from..to).collect());
        };
        let start = p.ranges.range(..=from).next_back().map_or(from, |(&s, _)| s);
        let parts = p
            .ranges
            .range(start..to)
            .filter(|(s, b)| **s + b.len() as u64 > from)
            .map(|(s, b)| (*s, b.clone()))
            .collect();
        (parts, p.gaps(from, to))
    }

    /// Whether anything of block `idx` is kept.
    pub fn has(&self, key: &Arc<str>, idx: u64) -> bool {
        self.inner.lock().blocks.contains_key(&(key.clone(), idx))
    }

    /// Takes block `idx`'s parts out (the block was loaded whole: it holds them now).
    pub fn take(&self, key: &Arc<str>, idx: u64) -> Vec<(u64, Bytes)> {
        let mut inner = self.inner.lock();
        let Some(p) = inner.blocks.remove(&(key.clone(), idx)) else {
            return Vec::new();
        };
        inner.lru.remove(&p.tick);
        inner.bytes -= p.bytes;
        p.ranges.into_iter().collect()
    }

    /// Bytes kept.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: u8, n: usize) -> Bytes {
        Bytes::from(vec![v; n])
    }

    #[test]
    fn parts_answer_what_they_cover_and_name_the_gaps() {
        let p = PartialBlocks::new(1 << 20);
        let k: Arc<str> = Arc::from("k");
        p.insert(&k, 0, 100, &b(1, 100));
        p.insert(&k, 0, 300, &b(2, 100));
        assert_eq!(p.get(&k, 0, 120, 180).as_deref(), Some(&[1u8; 60][..]));
        assert!(p.get(&k, 0, 150, 350).is_none(), "a gap at 200..300");
        assert_eq!(p.gaps(&k, 0, 500), vec![0..100, 200..300, 400..500]);
        // Filling the gap joins the three: a read across them is answered, copied once.
        p.insert(&k, 0, 150, &b(3, 200));
        assert_eq!(p.gaps(&k, 0, 500), vec![0..100, 400..500]);
        let got = p.get(&k, 0, 190, 310).unwrap();
        assert_eq!(&got[..10], &[1u8; 10]);
        assert_eq!(
            &got[10..110],
            &[3u8; 100],
            "only the missing part of a new range is kept"
        );
        assert_eq!(&got[110..], &[2u8; 10]);
        assert_eq!(p.bytes(), 300);
        assert!(p.get(&k, 1, 0, 10).is_none(), "another block");
        let parts = p.take(&k, 0);
        assert_eq!(
            parts.iter().map(|(s, b)| (*s, b.len())).collect::<Vec<_>>(),
            vec![(100, 100), (200, 100), (300, 100)]
        );
        assert_eq!(p.bytes(), 0);
        assert!(!p.has(&k, 0));
    }

    #[tokio::test]
    async fn a_load_waits_for_the_sparse_fetches_of_its_block() {
        let p = PartialBlocks::new(1 << 20);
        let k: Arc<str> = Arc::from("k");
        p.settled(&k, 0).await;
        let f = p.fetching(&k, 0);
        let waiter = tokio::spawn({
            let (p, k) = (p.clone(), k.clone());
            async move { p.settled(&k, 0).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a fetch is in flight");
        p.settled(&k, 1).await;
        drop(f);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken when the fetch ends")
            .unwrap();
    }

    #[tokio::test]
    async fn a_read_of_bytes_being_fetched_waits_for_them_and_fetches_only_the_rest() {
        let p = PartialBlocks::new(1 << 20);
        let k: Arc<str> = Arc::from("k");
        let (_, gaps, first) = p.claim(&k, 0, 0, 100).await;
        assert_eq!(gaps, std::iter::once(0..100).collect::<Vec<_>>());
        let (_, gaps, other) = p.claim(&k, 0, 200, 300).await;
        assert_eq!(
            gaps,
            std::iter::once(200..300).collect::<Vec<_>>(),
            "apart from the first: not held up"
        );
        drop(other);
        let second = tokio::spawn({
            let (p, k) = (p.clone(), k.clone());
            async move {
                let (parts, gaps, f) = p.claim(&k, 0, 50, 150).await;
                drop(f);
                (parts.len(), gaps)
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "waits for the fetch of its first half");
        p.insert(&k, 0, 0, &b(1, 100));
        drop(first);
        let (parts, gaps) = tokio::time::timeout(std::time::Duration::from_secs(5), second)
            .await
            .expect("woken when the fetch ends")
            .unwrap();
        assert_eq!(parts, 1);
        assert_eq!(
            gaps,
            std::iter::once(100..150).collect::<Vec<_>>(),
            "only what the first did not fetch"
        );
    }

    #[test]
    fn the_least_recently_used_block_goes_first() {
        let p = PartialBlocks::new(250);
        let k: Arc<str> = Arc::from("k");
        p.insert(&k, 0, 0, &b(0, 100));
        p.insert(&k, 1, 0, &b(1, 100));
        assert!(p.get(&k, 0, 0, 10).is_some(), "block 0 used last");
        p.insert(&k, 2, 0, &b(2, 100));
        assert!(p.has(&k, 0) && p.has(&k, 2));
        assert!(!p.has(&k, 1), "evicted");
        assert_eq!(p.bytes(), 200);
        p.insert(&k, 3, 0, &b(3, 300));
        assert!(!p.has(&k, 3), "larger than the cap: not kept");
    }
}
