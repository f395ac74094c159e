//! What the kernel's page cache of each inode holds, as far as the session can tell: the byte
//! ranges it sent through READ since the kernel last dropped that inode's pages (an open without
//! `FOPEN_KEEP_CACHE`, a passthrough open, or the inode's eviction, which the FORGET shows).
//!
//! Why: passthrough (`fuse::passthrough`) reads the disk tier's cache file, and that file is
//! rarely in the page cache (its blocks and the join's copy of them are written with
//! `O_DIRECT`), so a passthrough open reads from the disk, and drops the FUSE inode's own pages as
//! well. Right after this mount served a file through READs, those pages hold it: a plain open
//! that keeps them re-reads it from memory, several times faster than the disk, and without a
//! second copy of the file in the page cache. The kernel does not say when it drops pages
//! (memory pressure, `drop_caches` of the page cache alone); READs for ranges already sent show
//! it did. A page now and then is asked for again even so (seen here: one 4 KiB READ after a
//! 64 MiB re-read), so the record starts over only once such READs add up to a quarter of it.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Ranges kept per inode; a reader scattering more than this (random 4 KiB reads) starts the
/// record over, which at worst sends its next open through passthrough, as before.
const MAX_RANGES: usize = 256;

/// Sorted, disjoint, non-touching `[start, end)` byte ranges.
#[derive(Default, Debug)]
struct Ranges(Vec<(u64, u64)>);

/// One inode's record: the ranges sent, and the bytes asked for again since it started.
#[derive(Default, Debug)]
struct Record {
    ranges: Ranges,
    again: u64,
}

impl Ranges {
    fn insert(&mut self, start: u64, end: u64) {
        let i = self.0.partition_point(|r| r.1 < start);
        let (mut lo, mut hi, mut j) = (start, end, i);
        while j < self.0.len() && self.0[j].0 <= end {
            lo = lo.min(self.0[j].0);
            hi = hi.max(self.0[j].1);
            j += 1;
        }
        self.0.splice(i..j, [(lo, hi)]);
    }

    /// Bytes of `[0, size)` covered.
    fn covered(&self, size: u64) -> u64 {
        self.0.iter().map(|&(s, e)| e.min(size).saturating_sub(s)).sum()
    }

    /// Bytes of `[start, end)` covered.
    fn overlap(&self, start: u64, end: u64) -> u64 {
        let i = self.0.partition_point(|r| r.1 <= start);
        self.0[i..]
            .iter()
            .take_while(|r| r.0 < end)
            .map(|r| r.1.min(end) - r.0.max(start))
            .sum()
    }
}

/// Per-session record, by inode. One mutex, a leaf.
#[derive(Default)]
pub(super) struct Served {
    inodes: Mutex<HashMap<u64, Record>>,
}

impl Served {
    /// The kernel asked for `len` bytes of `ino` at `offset` through its page cache.
    pub(super) fn read(&self, ino: u64, offset: u64, len: u64) {
        let end = offset.saturating_add(len);
        let mut inodes = self.inodes.lock();
        let r = inodes.entry(ino).or_default();
        r.again += r.ranges.overlap(offset, end);
        if r.again * 4 > r.ranges.covered(u64::MAX) || r.ranges.0.len() >= MAX_RANGES {
            // Pages it had been sent are gone: what it holds is unknown but for this read.
            *r = Record::default();
        }
        r.ranges.insert(offset, end);
    }

    /// The kernel dropped the pages of `ino` (or the inode itself).
    pub(super) fn dropped(&self, ino: u64) {
        self.inodes.lock().remove(&ino);
    }

    /// Whether any page of `ino` is believed to be in the kernel's page cache.
    pub(super) fn tracks(&self, ino: u64) -> bool {
        self.inodes.lock().contains_key(&ino)
    }

    /// Whether the kernel's page cache of `ino` holds at least half of its `size` bytes (so a plain
    /// open reads more from memory than passthrough could, the cache file being cold).
    pub(super) fn holds_most(&self, ino: u64, size: u64) -> bool {
        size > 0 && self.held(ino, size) * 2 >= size
    }

    /// Bytes of `ino`'s first `size` the kernel's page cache holds, as far as the session can tell.
    pub(super) fn held(&self, ino: u64, size: u64) -> u64 {
        self.inodes.lock().get(&ino).map_or(0, |r| r.ranges.covered(size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_find_overlaps() {
        let mut r = Ranges::default();
        r.insert(10, 20);
        r.insert(30, 40);
        r.insert(20, 30);
        assert_eq!(r.0, vec![(10, 40)], "touching ranges merge");
        r.insert(50, 60);
        r.insert(0, 5);
        assert_eq!(r.0, vec![(0, 5), (10, 40), (50, 60)]);
        assert_eq!(r.overlap(5, 10), 0);
        assert_eq!(r.overlap(40, 50), 0);
        assert_eq!(r.overlap(39, 41), 1);
        assert_eq!(r.overlap(0, 100), 45);
        r.insert(3, 55);
        assert_eq!(r.0, vec![(0, 60)]);
        assert_eq!(r.covered(50), 50, "clamped to the size");
    }

    #[test]
    fn a_read_of_a_range_already_sent_restarts_the_record() {
        let s = Served::default();
        let mib = 1u64 << 20;
        for i in 0..8 {
            s.read(7, i * mib, mib);
        }
        assert!(s.holds_most(7, 8 * mib));
        assert!(!s.holds_most(8, 8 * mib), "another inode");
        // A page asked for again: no sign the rest is gone.
        s.read(7, 5 * mib, 4096);
        assert!(s.holds_most(7, 8 * mib));
        // The kernel asks for the start again and again: it dropped those pages.
        s.read(7, 0, mib);
        assert!(s.holds_most(7, 8 * mib));
        s.read(7, mib, mib);
        assert!(!s.holds_most(7, 8 * mib), "the record started over");
        for i in 2..5 {
            s.read(7, i * mib, mib);
        }
        assert!(s.holds_most(7, 8 * mib), "half of it again");
        s.dropped(7);
        assert!(!s.holds_most(7, 8 * mib));
        assert!(!s.holds_most(7, 0));
    }

    #[test]
    fn scattered_reads_are_bounded() {
        let s = Served::default();
        for i in 0..(MAX_RANGES as u64 * 3) {
            s.read(1, i * 8192, 4096);
        }
        assert!(s.inodes.lock()[&1].ranges.0.len() <= MAX_RANGES);
    }
}
