//! Spare data files: small staged files whose bytes the Hub has are kept, emptied, for the next
//! new file instead of being deleted.
//!
//! A `cp -r` of thousands of small files creates a staging file per file, and every commit deletes
//! a few hundred of them. On ext4 without a journal the inode allocator skips inodes freed in the
//! last minute (five while their block is dirty), re-reading the inode table for each one it
//! skips, so creates slowed down the more files the mount had just committed: a fifth of the
//! mount's CPU in one profile. A spare costs a rename out and a rename back (plus the truncate
//! that freed its blocks), and no inode is allocated or freed. Other file systems gain a little
//! (no inode initialisation or eviction); none loses.
//!
//! Only files up to [`SPARE_MAX_BYTES`] are kept: nothing opens those by path for an upload (their
//! snapshots are in memory and they go inline in the commit), so no reader can see a spare's
//! next content through an old descriptor. Spares are named `spare-N` in the staging directory,
//! which journal recovery ignores; at start the ones a previous run left are emptied and kept.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Staged files up to this size become spares when their last reference goes.
pub(super) const SPARE_MAX_BYTES: u64 = super::FROZEN_IN_MEMORY_MAX;
/// At most this many spares are kept (empty inodes, a few hundred bytes of disk each): enough for
/// the creates between two commits of small files at the default commit budget.
pub(super) const SPARES_MAX: usize = 4096;
/// A spare's name: this and a number.
pub(crate) const PREFIX: &str = "spare-";

/// A spare's number, if `name` is a spare's name.
pub(super) fn number(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.parse().ok()
}

/// The spares of one staging directory. Lock order: `free` is a leaf.
pub(super) struct Spares {
    dir: PathBuf,
    free: Mutex<Vec<PathBuf>>,
    next: AtomicU64,
}

impl Spares {
    /// Adopts the spares a previous run left in `dir` (found by `StagingArea::open`'s scan, with
    /// their numbers): they are emptied (a crash may have come between a rename and its
    /// truncate), and those past [`SPARES_MAX`] deleted.
    pub(super) fn adopt(dir: &Path, found: Vec<(u64, std::fs::DirEntry)>) -> Spares {
        let mut free = Vec::new();
        let mut next = 0u64;
        for (n, e) in found {
            next = next.max(n + 1);
            let path = e.path();
            if free.len() >= SPARES_MAX {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let emptied = match e.metadata() {
                Ok(m) if m.is_file() && m.len() == 0 => true,
                Ok(m) if m.is_file() => OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_len(0))
                    .is_ok(),
                _ => false,
            };
            if emptied {
                free.push(path);
            }
        }
        Spares {
            dir: dir.to_path_buf(),
            free: Mutex::new(free),
            next: AtomicU64::new(next),
        }
    }

    /// An empty file renamed to `to` and opened for reading and writing, if a spare is left.
    pub(super) fn take(&self, to: &Path) -> Option<File> {
        loop {
            let spare = self.free.lock().pop()?;
            // A spare that went missing (removed by hand) is skipped; the caller creates a file.
            if std::fs::rename(&spare, to).is_err() {
                continue;
            }
            match OpenOptions::new().read(true).write(true).open(to) {
                Ok(f) => return Some(f),
                Err(e) => {
                    tracing::debug!(path = %to.display(), error = %e, "a spare staging file could not be opened");
                    let _ = std::fs::remove_file(to);
                    return None;
                }
            }
        }
    }

    /// Keeps `path` (open as `file`) as a spare, emptied; `false` when there is no room or the
    /// rename failed, and the caller deletes it. The rename comes first: only a file that is a
    /// spare by name is emptied, so a crash in between leaves either the staged file as it was or
    /// a spare to empty at the next start.
    pub(super) fn give_back(&self, path: &Path, file: &File) -> bool {
        if self.free.lock().len() >= SPARES_MAX {
            return false;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let spare = self.dir.join(format!("{PREFIX}{n}"));
        if std::fs::rename(path, &spare).is_err() {
            return false;
        }
        if file.set_len(0).is_err() {
            let _ = std::fs::remove_file(&spare);
            return false;
        }
        self.free.lock().push(spare);
        true
    }

    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        self.free.lock().len()
    }
}
