//! The inode table: inode number ↔ path, with the kernel's lookup counts.
//!
//! Inode numbers are derived from the path (a 64-bit hash, probed on the rare collision), so a path
//! keeps its number for the life of the mount even after its entry was evicted and looked up again.
//! An inode is evicted when the kernel has forgotten every lookup and no handle is open on it, which
//! bounds the table by what the kernel holds.
//!
//! NFS clients never forget: a file handle may come back at any time. Numbers handed to such a
//! frontend are *remembered* beside the counted table, in two generations of bounded size (a number
//! used in the current or the previous generation survives; older ones are dropped); a handle whose
//! number fell out answers "stale" (the client looks the path up again), so memory stays bounded.
//! This is kept in plain maps under the table's own lock, not in a cache crate: moka runs deferred
//! drops of other caches' values on the calling thread, which must never happen with this lock held.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use parking_lot::Mutex;

pub type Ino = u64;
pub const ROOT_INO: Ino = 1;

#[derive(Debug, Clone)]
struct Entry {
    path: String,
    nlookup: u64,
    open: u32,
}

#[derive(Default)]
struct Tables {
    by_ino: HashMap<Ino, Entry>,
    by_path: HashMap<String, Ino>,
    remembered: Remembered,
    /// Numbers of hard-link groups: never handed to a path (see `link_key`).
    pinned: std::collections::HashSet<Ino>,
}

/// The table key of hard-link group `id`: its names share the number `id` (the number the first
/// name had when the link was made), whatever their paths hash to.
pub fn link_key(id: Ino) -> String {
    format!("{LINK_PREFIX}{id}")
}

/// Keys of link groups start with this (a NUL: no path does).
pub const LINK_PREFIX: &str = "\0link/";

/// The group a key names, if it is a link key.
pub fn link_id(key: &str) -> Option<Ino> {
    key.strip_prefix(LINK_PREFIX)?.parse().ok()
}

/// How many remembered (never forgotten) numbers are kept at most.
pub const REMEMBERED_CAPACITY: usize = 500_000;

/// Numbers handed to NFS, in two generations: when the current one is full it becomes the previous
/// one (whose entries are dropped), and a number found in the previous one moves back to current.
#[derive(Default)]
struct Remembered {
    current: HashMap<Ino, Arc<str>>,
    previous: HashMap<Ino, Arc<str>>,
    generation_size: usize,
}

impl Remembered {
    fn with_capacity(capacity: usize) -> Remembered {
        Remembered {
            generation_size: (capacity / 2).max(1),
            ..Remembered::default()
        }
    }

    fn get(&mut self, ino: Ino) -> Option<Arc<str>> {
        if let Some(p) = self.current.get(&ino) {
            return Some(p.clone());
        }
        let p = self.previous.remove(&ino)?;
        self.insert(ino, p.clone());
        Some(p)
    }

    fn peek(&self, ino: Ino) -> Option<&Arc<str>> {
        self.current.get(&ino).or_else(|| self.previous.get(&ino))
    }

    fn insert(&mut self, ino: Ino, path: Arc<str>) {
        self.previous.remove(&ino);
        if !self.current.contains_key(&ino) && self.current.len() >= self.generation_size {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(ino, path);
    }

    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

/// Lock order: this table's mutex is a leaf: nothing else is locked, and no cache crate is called,
/// while it is held.
pub struct InodeTable {
    inner: Mutex<Tables>,
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable::with_remembered_capacity(REMEMBERED_CAPACITY)
    }
}

fn hash_path(path: &str) -> Ino {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    // Keep clear of 0 (invalid) and the root's 1; stay below 2^63 for NFS clients that sign-extend.
    (h.finish() & 0x7fff_ffff_ffff_ffff).max(2)
}

/// A number for `path` not taken by another counted or remembered path: its hash, probed upward
/// on the rare collision.
fn free_number(g: &Tables, path: &str) -> Ino {
    if let Some(id) = link_id(path) {
        return id;
    }
    let mut ino = hash_path(path);
    while g.by_ino.contains_key(&ino) || g.pinned.contains(&ino) || g.remembered.peek(ino).is_some_and(|p| &**p != path)
    {
        ino = ino.wrapping_add(1).max(2) & 0x7fff_ffff_ffff_ffff;
    }
    ino
}

impl InodeTable {
    pub fn new() -> Self {
        InodeTable::default()
    }

    /// A table that remembers at most `capacity` NFS numbers (small values are for tests).
    pub fn with_remembered_capacity(capacity: usize) -> Self {
        let t = InodeTable {
            inner: Mutex::new(Tables {
                remembered: Remembered::with_capacity(capacity),
                ..Tables::default()
            }),
        };
        {
            let mut g = t.inner.lock();
            g.by_ino.insert(
                ROOT_INO,
                Entry {
                    path: String::new(),
                    nlookup: 1,
                    open: 0,
                },
            );
            g.by_path.insert(String::new(), ROOT_INO);
        }
        t
    }

    /// The inode number of `path`, registering it if needed. `lookups` is added to its count (1 for
    /// a FUSE lookup or a readdirplus entry, 0 when only a number is needed).
    pub fn ino_for(&self, path: &str, lookups: u64) -> Ino {
        let mut g = self.inner.lock();
        if let Some(&ino) = g.by_path.get(path) {
            if let Some(e) = g.by_ino.get_mut(&ino) {
                e.nlookup += lookups;
            }
            return ino;
        }
        let ino = free_number(&g, path);
        if lookups > 0 {
            g.by_ino.insert(
                ino,
                Entry {
                    path: path.to_string(),
                    nlookup: lookups,
                    open: 0,
                },
            );
            g.by_path.insert(path.to_string(), ino);
        }
        ino
    }

    /// The number of `path` for a frontend that never forgets (NFS): kept in the bounded LRU.
    pub fn remember(&self, path: &str) -> Ino {
        let mut g = self.inner.lock();
        let ino = match g.by_path.get(path) {
            Some(&ino) => ino,
            None => free_number(&g, path),
        };
        if g.remembered.peek(ino).is_none_or(|p| &**p != path) {
            g.remembered.insert(ino, Arc::from(path));
        } else {
            // Refresh its generation.
            g.remembered.get(ino);
        }
        ino
    }

    /// Path of a known inode: counted by the kernel, or remembered for NFS.
    pub fn path(&self, ino: Ino) -> Option<String> {
        let mut g = self.inner.lock();
        if let Some(e) = g.by_ino.get(&ino) {
            return Some(e.path.clone());
        }
        g.remembered.get(ino).map(|p| p.to_string())
    }

    /// The kernel forgot `n` lookups of `ino`.
    pub fn forget(&self, ino: Ino, n: u64) {
        let mut g = self.inner.lock();
        let remove = match g.by_ino.get_mut(&ino) {
            Some(e) if ino != ROOT_INO => {
                e.nlookup = e.nlookup.saturating_sub(n);
                e.nlookup == 0 && e.open == 0
            }
            _ => false,
        };
        if remove && let Some(e) = g.by_ino.remove(&ino) {
            g.by_path.remove(&e.path);
        }
    }

    pub fn opened(&self, ino: Ino) {
        if let Some(e) = self.inner.lock().by_ino.get_mut(&ino) {
            e.open += 1;
        }
    }

    pub fn closed(&self, ino: Ino) {
        let mut g = self.inner.lock();
        let remove = match g.by_ino.get_mut(&ino) {
            Some(e) if ino != ROOT_INO => {
                e.open = e.open.saturating_sub(1);
                e.nlookup == 0 && e.open == 0
            }
            _ => false,
        };
        if remove && let Some(e) = g.by_ino.remove(&ino) {
            g.by_path.remove(&e.path);
        }
    }

    /// `path` was removed: its number stays valid for the kernel's references (open files answer
    /// from their handle) but no longer names the path, so a new file there gets its own number.
    pub fn detach(&self, path: &str) {
        let mut g = self.inner.lock();
        if let Some(ino) = g.by_path.remove(path)
            && let Some(e) = g.by_ino.get_mut(&ino)
        {
            e.path = format!("\0removed/{ino}");
        }
    }

    /// `from` (and everything below it) is now called `to`: the numbers the kernel holds keep
    /// pointing at the same files. A counted entry already at `to` (replaced by the rename) loses
    /// its path and is dropped once the kernel forgets it.
    pub fn rename(&self, from: &str, to: &str) {
        let mut g = self.inner.lock();
        let prefix = format!("{from}/");
        let moved: Vec<(String, Ino)> = g
            .by_path
            .iter()
            .filter(|(p, _)| p.as_str() == from || p.starts_with(&prefix))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        let target_prefix = format!("{to}/");
        let replaced: Vec<(String, Ino)> = g
            .by_path
            .iter()
            .filter(|(p, _)| p.as_str() == to || p.starts_with(&target_prefix))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (p, ino) in replaced {
            g.by_path.remove(&p);
            // As in `detach`: the kernel may still hold the number (an open file, a lookup not yet
            // forgotten). Keeping it, pathless, until `forget` stops a new path from reusing it and
            // keeps open handles answering.
            if let Some(e) = g.by_ino.get_mut(&ino) {
                e.path = format!("\0removed/{ino}");
            }
        }
        for (old, ino) in moved {
            let new = format!("{to}{}", &old[from.len()..]);
            g.by_path.remove(&old);
            g.by_path.insert(new.clone(), ino);
            if let Some(e) = g.by_ino.get_mut(&ino) {
                e.path = new;
            }
        }
        // Numbers NFS clients hold move too (a scan: renames are rare next to lookups).
        let r = &mut g.remembered;
        for map in [&mut r.current, &mut r.previous] {
            for p in map.values_mut() {
                if p.as_ref() == from || p.starts_with(&prefix) {
                    *p = Arc::from(format!("{to}{}", &p[from.len()..]).as_str());
                }
            }
        }
    }

    /// Keeps `id` (a hard-link group's number) from ever being given to a path.
    pub fn pin(&self, id: Ino) {
        self.inner.lock().pinned.insert(id);
    }

    /// `path` became the first name of hard-link group `id` (its own number): the entry the kernel
    /// or an NFS client holds for it now stands for the group, so every name answers with it.
    pub fn make_group(&self, path: &str, id: Ino) {
        let key = link_key(id);
        let mut g = self.inner.lock();
        g.pinned.insert(id);
        if let Some(ino) = g.by_path.remove(path) {
            if let Some(e) = g.by_ino.get_mut(&ino) {
                e.path = key.clone();
            }
            g.by_path.insert(key.clone(), ino);
        }
        let r = &mut g.remembered;
        for map in [&mut r.current, &mut r.previous] {
            for p in map.values_mut() {
                if p.as_ref() == path {
                    *p = Arc::from(key.as_str());
                }
            }
        }
    }

    /// Counted inodes (the kernel's references); remembered numbers are not included.
    pub fn len(&self) -> usize {
        self.inner.lock().by_ino.len()
    }

    /// Remembered numbers.
    pub fn remembered_len(&self) -> u64 {
        self.inner.lock().remembered.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_numbers_and_eviction() {
        let t = InodeTable::new();
        let a = t.ino_for("a/b.txt", 1);
        assert_eq!(t.ino_for("a/b.txt", 1), a);
        assert_eq!(t.path(a).as_deref(), Some("a/b.txt"));
        t.forget(a, 1);
        assert!(t.path(a).is_some(), "one lookup left");
        t.opened(a);
        t.forget(a, 1);
        assert!(t.path(a).is_some(), "open handle keeps it");
        t.closed(a);
        assert!(t.path(a).is_none(), "evicted at nlookup 0 with no handle");
        assert_eq!(t.ino_for("a/b.txt", 1), a, "same number after eviction");
        assert_eq!(t.ino_for("", 0), ROOT_INO);
        t.forget(ROOT_INO, 100);
        assert_eq!(t.path(ROOT_INO).as_deref(), Some(""));
    }

    #[test]
    fn remembered_numbers_resolve_and_match_counted_ones() {
        let t = InodeTable::new();
        let counted = t.ino_for("dir/file", 1);
        assert_eq!(
            t.remember("dir/file"),
            counted,
            "one path, one number for every frontend"
        );
        t.forget(counted, 1);
        assert_eq!(t.path(counted).as_deref(), Some("dir/file"), "still known to NFS");
        let r = t.remember("other");
        assert_eq!(t.path(r).as_deref(), Some("other"));
        assert_eq!(t.ino_for("other", 1), r, "a later kernel lookup gets the same number");
        assert_eq!(t.len(), 2, "root and the counted entry");
    }

    #[test]
    fn rename_keeps_numbers() {
        let t = InodeTable::new();
        let d = t.ino_for("d", 1);
        let f = t.ino_for("d/f", 1);
        let other = t.ino_for("e", 1);
        t.rename("d", "e");
        assert_eq!(t.path(d).as_deref(), Some("e"));
        assert_eq!(t.path(f).as_deref(), Some("e/f"));
        assert!(
            t.path(other).is_some_and(|p| p.starts_with('\0')),
            "the replaced target names no path while the kernel holds it"
        );
        t.forget(other, 1);
        assert!(t.path(other).is_none(), "and is dropped once forgotten");
        assert_eq!(t.ino_for("e/f", 0), f);
        let r = t.remember("x/y");
        t.rename("x", "z");
        assert_eq!(t.path(r).as_deref(), Some("z/y"), "remembered numbers follow");
        let old = t.ino_for("e/f", 1);
        t.detach("e/f");
        let new = t.ino_for("e/f", 1);
        assert_ne!(old, new, "a new file at a removed path gets its own number");
        assert!(t.path(old).is_some_and(|p| p.starts_with('\0')));
    }

    #[test]
    fn remembered_numbers_stay_bounded_and_recent_ones_survive() {
        let t = InodeTable::with_remembered_capacity(100);
        let keep = t.remember("kept");
        for i in 0..1_000 {
            t.remember(&format!("f{i}"));
            // A number in use is refreshed on every use and survives the churn.
            assert_eq!(t.path(keep).as_deref(), Some("kept"));
        }
        assert!(t.remembered_len() <= 100, "{} remembered", t.remembered_len());
        let old = t.remember("f0");
        assert_eq!(t.path(old).as_deref(), Some("f0"), "remembering again brings it back");
        let last = t.remember("f999");
        assert_eq!(t.path(last).as_deref(), Some("f999"));
        // A number that fell out of both generations is unknown (NFS answers stale).
        let t = InodeTable::with_remembered_capacity(10);
        let gone = t.remember("gone");
        for i in 0..20 {
            t.remember(&format!("g{i}"));
        }
        assert!(t.path(gone).is_none());
    }

    #[test]
    fn a_link_group_keeps_its_first_names_number_and_no_path_takes_it() {
        let t = InodeTable::new();
        let a = t.ino_for("a", 1);
        let nfs = t.remember("a");
        assert_eq!(nfs, a);
        t.make_group("a", a);
        let key = link_key(a);
        assert_eq!(link_id(&key), Some(a));
        assert_eq!(t.ino_for(&key, 1), a, "the kernel's number for a is the group's");
        assert_eq!(t.path(a).as_deref(), Some(key.as_str()), "it names the group now");
        t.forget(a, 2);
        assert_eq!(t.path(a).as_deref(), Some(key.as_str()), "NFS still holds it");
        // A new file at "a" (the first name unlinked) gets a number of its own.
        assert_ne!(t.ino_for("a", 1), a);
        let t = InodeTable::new();
        t.pin(hash_path("b"));
        assert_ne!(t.ino_for("b", 1), hash_path("b"), "a pinned number is never a path's");
    }

    #[test]
    fn readdir_numbers_do_not_register() {
        let t = InodeTable::new();
        let n = t.ino_for("x", 0);
        assert!(t.path(n).is_none());
        assert_eq!(t.len(), 1);
    }
}
