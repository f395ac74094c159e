//! How much of a directory a READDIRPLUS reply carries with attributes.
//!
//! Every entry a READDIRPLUS reply carries becomes an inode and a dentry in the kernel, made in the
//! reading process's time: about 2 µs each on the machines we measured, 0.2 s of `find`'s 0.5 s
//! over 100,000 files, against nothing for a plain READDIR entry. The kernel asks for the first
//! page of every directory with READDIRPLUS (its "auto" mode), and for the pages after it only when
//! the program looked at the entries it was given; a reply of 1,000 entries at once leaves it no
//! second page to decide on. Programs that stat what they list (`ls -l`, `du`, `rsync`,
//! `os.scandir` with `stat`) gain from the attributes: no LOOKUP per entry. Walks that only
//! read names and types (`find`, `os.walk`, `tar`'s listing) pay for them.
//!
//! So the session watches which kind of walk it serves, from what the kernel decides for the pages
//! after the first:
//! - a plain READDIR after the first page: the program did not look at the entries. From then on
//!   a first page carries [`SHORT`] entries, and the kernel asks for the rest as it decides;
//! - a READDIRPLUS after the first page, or the LOOKUP of a file in a directory whose first page
//!   was short (the program stats what it lists): first pages carry every entry again, for at
//!   least the next [`HOLD`] directories. `du` and `rsync` read a whole directory before they stat
//!   its entries, so the kernel asks for its pages after the first without attributes as `find`
//!   does; only their lookups tell them apart, and the hold keeps one such walk from switching
//!   back at every directory.
//!
//! A session starts in the second mode, which serves `ls -l` of one directory best. What a wrong
//! guess costs: a LOOKUP for the entries of one directory past its short first page, once per
//! `HOLD` directories at most.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use parking_lot::Mutex;

/// Entries (with `.` and `..`) of a short first page.
pub(super) const SHORT: usize = 16;

/// Directories whose short first pages are remembered (older ones are forgotten all at once).
const REMEMBERED: usize = 4_096;

/// First pages served whole, once a walk showed it stats what it lists, before a plain page may
/// switch to short ones again.
pub(super) const HOLD: u32 = 256;

/// One mutex, a leaf.
pub(super) struct PlusPolicy {
    /// The walks served lately stat what they list.
    stat_walks: AtomicBool,
    /// Whole first pages still to serve before plain pages count again.
    hold: AtomicU32,
    /// Directories whose last first page was short.
    short: Mutex<HashSet<u64>>,
}

impl Default for PlusPolicy {
    fn default() -> Self {
        PlusPolicy {
            stat_walks: AtomicBool::new(true),
            hold: AtomicU32::new(0),
            short: Mutex::new(HashSet::new()),
        }
    }
}

impl PlusPolicy {
    /// How many entries a READDIRPLUS reply for directory `dir` at `offset` may carry.
    pub(super) fn limit(&self, dir: u64, offset: u64) -> usize {
        if offset > 0 {
            // The kernel asked for the attributes of the next page: the program looks at them.
            self.stat_seen();
            return usize::MAX;
        }
        if self.stat_walks.load(Ordering::Relaxed) {
            let _ = self
                .hold
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| h.checked_sub(1));
            self.whole(dir);
            return usize::MAX;
        }
        let mut short = self.short.lock();
        if short.len() >= REMEMBERED {
            short.clear();
        }
        short.insert(dir);
        SHORT
    }

    /// A first page of `dir` goes out whole.
    fn whole(&self, dir: u64) {
        self.short.lock().remove(&dir);
    }

    /// The kernel asked for a page of `dir` past the first without attributes.
    pub(super) fn plain_page(&self, offset: u64) {
        if offset > 0 && self.hold.load(Ordering::Relaxed) == 0 {
            self.stat_walks.store(false, Ordering::Relaxed);
        }
    }

    /// A file of `parent` was looked up: a program stats what a short first page did not give it.
    pub(super) fn file_looked_up(&self, parent: u64) {
        if !self.stat_walks.load(Ordering::Relaxed) && self.short.lock().contains(&parent) {
            self.stat_seen();
        }
    }

    /// Whether `dir`'s last first page was short (the kernel's cached pages of it, if any, carry
    /// no attributes).
    pub(super) fn listed_short(&self, dir: u64) -> bool {
        self.short.lock().contains(&dir)
    }

    fn stat_seen(&self) {
        self.hold.store(HOLD, Ordering::Relaxed);
        self.stat_walks.store(true, Ordering::Relaxed);
    }

    #[cfg(test)]
    fn stat_walks(&self) -> bool {
        self.stat_walks.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_that_reads_names_gets_short_first_pages_until_it_stats() {
        let p = PlusPolicy::default();
        assert!(p.stat_walks());
        assert_eq!(p.limit(1, 0), usize::MAX, "a fresh session: whole first pages");
        // find: the kernel asks for the rest of the root without attributes.
        p.plain_page(1_000);
        assert!(!p.stat_walks());
        assert_eq!(p.limit(2, 0), SHORT);
        assert_eq!(p.limit(3, 0), SHORT);
        assert!(p.listed_short(2) && p.listed_short(3) && !p.listed_short(1));
        // A folder looked up in a short-listed directory: find descending, not a stat walk.
        p.file_looked_up(99);
        assert!(!p.stat_walks(), "a directory never listed short says nothing");
        // ls -l or du: a file of a short-listed directory is looked up.
        p.file_looked_up(3);
        assert!(p.stat_walks());
        // du reads each directory whole before it stats: its plain pages do not switch back for
        // HOLD directories.
        for d in 0..u64::from(HOLD) - 1 {
            assert_eq!(p.limit(100 + d, 0), usize::MAX);
            p.plain_page(1_000);
            assert!(p.stat_walks(), "held at directory {d}");
        }
        // The last whole first page of the hold.
        assert_eq!(p.limit(4, 0), usize::MAX);
        assert_eq!(p.limit(3, 0), usize::MAX);
        assert!(!p.listed_short(3), "listed whole since");
        // A READDIR at the first page says nothing (the kernel sends none there in auto mode).
        p.plain_page(0);
        assert!(p.stat_walks());
        // Past the hold, a plain page switches to short ones; a READDIRPLUS past the first page
        // turns them off again.
        p.plain_page(5);
        assert_eq!(p.limit(5, 0), SHORT);
        assert_eq!(p.limit(5, SHORT as u64), usize::MAX);
        assert!(p.stat_walks());
        p.plain_page(5);
        assert!(p.stat_walks(), "held again");
    }

    #[test]
    fn remembered_directories_are_bounded() {
        let p = PlusPolicy::default();
        p.plain_page(1);
        for d in 0..(REMEMBERED as u64 * 3) {
            assert_eq!(p.limit(d, 0), SHORT);
        }
        assert!(p.short.lock().len() <= REMEMBERED);
    }
}
