//! The inode table: inode number ↔ path, with the kernel's lookup counts.
//!
//! Inode numbers are derived from the path (a 64-bit hash, probed on the rare collision), so a path
//! keeps its number for the life of the mount even after its entry was evicted and looked up again.
//! An inode is evicted when the kernel has forgotten every lookup and no handle is open on it, which
//! bounds the table by what the kernel holds.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

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
}

/// Lock order: this table's mutex is a leaf (nothing else is locked while it is held).
#[derive(Default)]
pub struct InodeTable {
    inner: Mutex<Tables>,
}

fn hash_path(path: &str) -> Ino {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    // Keep clear of 0 (invalid) and the root's 1; stay below 2^63 for NFS clients that sign-extend.
    (h.finish() & 0x7fff_ffff_ffff_ffff).max(2)
}

impl InodeTable {
    pub fn new() -> Self {
        let t = InodeTable::default();
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
        let mut ino = hash_path(path);
        while g.by_ino.contains_key(&ino) {
            ino = ino.wrapping_add(1).max(2) & 0x7fff_ffff_ffff_ffff;
        }
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

    /// Path of a known inode.
    pub fn path(&self, ino: Ino) -> Option<String> {
        self.inner.lock().by_ino.get(&ino).map(|e| e.path.clone())
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

    pub fn len(&self) -> usize {
        self.inner.lock().by_ino.len()
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
    fn readdir_numbers_do_not_register() {
        let t = InodeTable::new();
        let n = t.ino_for("x", 0);
        assert!(t.path(n).is_none());
        assert_eq!(t.len(), 1);
    }
}
