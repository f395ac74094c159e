//! The disk tier of the chunk store: one file per block under `<cache dir>/blocks`, named by content
//! hash and block index, with a size-weighed index that deletes the least useful files when the
//! tier is over its budget. The index is rebuilt from the directory at start, so cached content
//! survives remounts.
//!
//! Crash safety: a block is written to a temporary name and renamed into place, so a reader never
//! sees a partial file. A crash may still leave a renamed file empty (its data not yet on disk);
//! every read checks the length the caller expects, and a mismatch is a miss, so a damaged file is
//! never served.
//!
//! Page cache: blocks are written with `O_DIRECT` (`direct`) and their pages dropped after a whole
//! block is read back, so the tier does not hold a second copy of what the memory tier and the
//! FUSE page cache already have. Range reads (seeks) keep their pages: a random reader re-reads
//! them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use moka::notification::RemovalCause;

use super::direct;
use crate::chunk_store::buffer_pool::BufferPool;

type Key = (Arc<str>, u64);

/// A temporary block file older than this is a crash's leftover; a younger one may be mid-write.
const TMP_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

#[derive(Clone)]
pub struct DiskTier {
    pub(super) root: PathBuf,
    /// Block files by (content key, block index), and whole files by (content key, [`WHOLE`]),
    /// weighed by their size.
    pub(super) index: moka::sync::Cache<Key, u64>,
    /// Blocks are written with `O_DIRECT` (`direct`) until the filesystem refuses it once.
    pub(super) direct: Arc<AtomicBool>,
}

/// The index of a content's whole file (see `whole`), named `HASH.whole` on disk.
pub(super) const WHOLE: u64 = u64::MAX;

/// `kind:hexhash` → `kind/ab/hexhash.IDX` (`hexhash.whole` for [`WHOLE`]); anything else (a key the
/// Hub could shape into a path escape) is not cached on disk.
pub(super) fn rel_path(key: &str, idx: u64) -> Option<PathBuf> {
    let (kind, hash) = key.split_once(':')?;
    let kind_ok = !kind.is_empty() && kind.len() <= 16 && kind.bytes().all(|b| b.is_ascii_alphanumeric());
    let hash_ok = hash.len() >= 8 && hash.len() <= 128 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    if !(kind_ok && hash_ok) {
        return None;
    }
    let name = if idx == WHOLE {
        format!("{hash}.whole")
    } else {
        format!("{hash}.{idx}")
    };
    Some(PathBuf::from(kind).join(&hash[..2]).join(name))
}

/// The inverse of [`rel_path`] for a file found by the startup scan.
fn parse_path(kind: &str, file_name: &str) -> Option<Key> {
    let (hash, idx) = file_name.rsplit_once('.')?;
    let idx: u64 = if idx == "whole" { WHOLE } else { idx.parse().ok()? };
    let key = format!("{kind}:{hash}");
    rel_path(&key, idx)?;
    Some((Arc::from(key), idx))
}

impl DiskTier {
    /// Opens (creating) the tier under `dir/blocks`, holding at most `capacity` bytes. Existing
    /// files are indexed by a background thread; until it is done they simply count as misses.
    pub fn open(dir: &Path, capacity: u64) -> std::io::Result<DiskTier> {
        let root = dir.join("blocks");
        std::fs::create_dir_all(&root)?;
        let eviction_root = root.clone();
        let index = moka::sync::Cache::builder()
            // Weighed in KiB: a weight is a u32, and a whole file (`whole`) can pass 4 GiB.
            .weigher(|_k: &Key, size: &u64| size.div_ceil(1024).clamp(1, u32::MAX as u64) as u32)
            .max_capacity(capacity / 1024)
            .eviction_listener(move |k: Arc<Key>, _size, cause| {
                crate::metrics::evicted("disk", cause.was_evicted());
                // A replaced entry names the same file, which is still wanted.
                if cause != RemovalCause::Replaced
                    && let Some(rel) = rel_path(&k.0, k.1)
                {
                    let _ = std::fs::remove_file(eviction_root.join(rel));
                }
            })
            .build();
        let tier = DiskTier {
            root,
            index,
            direct: Arc::new(AtomicBool::new(true)),
        };
        let scan = tier.clone();
        std::thread::Builder::new()
            .name("hubfs-cache-scan".to_string())
            .spawn(move || scan.scan())?;
        Ok(tier)
    }

    fn scan(&self) {
        let Ok(kinds) = std::fs::read_dir(&self.root) else {
            return;
        };
        let mut found = 0u64;
        for kind in kinds.flatten() {
            let kind_name = kind.file_name().to_string_lossy().into_owned();
            let Ok(prefixes) = std::fs::read_dir(kind.path()) else {
                continue;
            };
            for prefix in prefixes.flatten() {
                let Ok(files) = std::fs::read_dir(prefix.path()) else {
                    continue;
                };
                for f in files.flatten() {
                    let name = f.file_name().to_string_lossy().into_owned();
                    let path = f.path();
                    if name.starts_with(".tmp") {
                        // Left by a crash mid-write, unless it is young: then a live writer (this
                        // process, or another mount sharing the cache dir) is about to rename it.
                        let stale = f
                            .metadata()
                            .and_then(|m| m.modified())
                            .ok()
                            .and_then(|t| t.elapsed().ok())
                            .is_some_and(|age| age > TMP_STALE_AFTER);
                        if stale {
                            let _ = std::fs::remove_file(&path);
                        }
                        continue;
                    }
                    match (parse_path(&kind_name, &name), f.metadata()) {
                        (Some(key), Ok(meta)) if meta.is_file() => {
                            if !self.index.contains_key(&key) {
                                self.index.insert(key, meta.len());
                                found += 1;
                            }
                        }
                        _ => {
                            let _ = std::fs::remove_file(&path);
                        }
                    }
                }
            }
        }
        self.index.run_pending_tasks();
        tracing::debug!(root = %self.root.display(), blocks = found, "disk cache indexed");
    }

    /// Where block `key` of `expected_len` bytes is on disk: its own file (offset 0), or the
    /// content's whole file (see `whole`) at the block's offset. A file of the wrong size is
    /// dropped from the index (a crash's leftover, or damage) and is a miss; so is an index entry
    /// of another size than expected when `strict`.
    fn locate(&self, key: &Key, expected_len: u64, strict: bool) -> Option<(PathBuf, std::fs::File, u64)> {
        let (idx, offset, fits) = match self.index.get(key) {
            Some(size) => (key.1, 0, size == expected_len),
            None => {
                let whole = self.index.get(&(key.0.clone(), WHOLE))?;
                let offset = key.1 * super::BLOCK_SIZE;
                (WHOLE, offset, offset + expected_len <= whole)
            }
        };
        let id = (key.0.clone(), idx);
        let path = self.root.join(rel_path(&key.0, idx)?);
        let damaged = |why: &str| {
            tracing::warn!(path = %path.display(), why, "dropping a damaged disk cache file");
            self.index.invalidate(&id);
            None
        };
        if !fits {
            return if strict {
                damaged("recorded size differs from the block's")
            } else {
                None
            };
        }
        let Ok(f) = std::fs::File::open(&path) else {
            // Deleted behind the index (evicted while the startup scan re-added it, or by hand).
            self.index.invalidate(&id);
            return None;
        };
        let len = f.metadata().ok()?.len();
        let ok = if idx == WHOLE {
            Some(len) == self.index.get(&id)
        } else {
            len == expected_len
        };
        if !ok {
            return damaged("file size differs from the index's");
        }
        Some((path, f, offset))
    }

    /// The block if it is on disk with exactly `expected_len` bytes, read into a pooled buffer.
    /// Blocking: call from a blocking thread.
    pub fn read(&self, key: &Key, expected_len: u64, pool: &BufferPool) -> Option<Bytes> {
        let (path, f, offset) = self.locate(key, expected_len, true)?;
        let len = expected_len as usize;
        let mut buf = pool.acquire(len);
        // The whole block goes to memory (and soon to the FUSE file's page cache): read around the
        // page cache, so the cache file's pages do not hold a third copy.
        let direct =
            self.direct.load(Ordering::Relaxed) && matches!(direct::read_at(&path, offset, len, &mut buf), Ok(true));
        if !direct {
            if !buf.is_empty() || buf.pread_from(&f, offset, len, len).is_err() {
                tracing::warn!(path = %path.display(), "short read of a disk cache file");
                self.index
                    .invalidate(&(key.0.clone(), if offset > 0 { WHOLE } else { key.1 }));
                return None;
            }
            direct::drop_pages(&f);
        }
        Some(buf.freeze())
    }

    /// Bytes `[from, to)` of a block that is on disk with exactly `expected_len` bytes: a seek needs
    /// a few KiB, not the whole block. Blocking: call from a blocking thread.
    pub fn read_range(&self, key: &Key, expected_len: u64, from: u64, to: u64) -> Option<Bytes> {
        use std::os::unix::fs::FileExt;
        if from >= to || to > expected_len {
            return None;
        }
        let (_, f, offset) = self.locate(key, expected_len, false)?;
        let mut buf = vec![0u8; (to - from) as usize];
        f.read_exact_at(&mut buf, offset + from).ok()?;
        Some(Bytes::from(buf))
    }

    /// Stores a block (temp file + rename). Failures (disk full, permissions) only cost the cache.
    /// Blocking: call from a blocking thread.
    pub fn write(&self, key: Key, data: &[u8]) {
        let Some(rel) = rel_path(&key.0, key.1) else { return };
        let path = self.root.join(rel);
        if (self.index.contains_key(&key) && path.exists()) || self.index.contains_key(&(key.0.clone(), WHOLE)) {
            // Already here, as a block file or inside the content's whole file.
            return;
        }
        let result = (|| -> std::io::Result<()> {
            let dir = path.parent().unwrap_or(&self.root);
            std::fs::create_dir_all(dir)?;
            let tmp = dir.join(format!(".tmp.{}.{}", std::process::id(), rand::random::<u64>()));
            let written = if self.direct.load(Ordering::Relaxed) {
                direct::write_new(&tmp, data)
            } else {
                Ok(false)
            };
            let r = written.and_then(|direct| {
                if !direct {
                    if self.direct.swap(false, Ordering::Relaxed) {
                        tracing::debug!(root = %self.root.display(), "O_DIRECT refused here: disk cache writes go through the page cache");
                    }
                    direct::write_new_buffered(&tmp, data)?;
                }
                std::fs::rename(&tmp, &path)
            });
            if let Err(e) = r {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
            Ok(())
        })();
        match result {
            Ok(()) => self.index.insert(key, data.len() as u64),
            Err(e) => tracing::debug!(path = %path.display(), error = %e, "disk cache write failed"),
        }
    }

    /// Bytes (as [`Self::weighted_size`]), files and capacity in bytes (for metrics).
    pub fn usage(&self) -> (u64, u64, u64) {
        let size = self.weighted_size();
        let cap = self.index.policy().max_capacity().unwrap_or(0) * 1024;
        (size, self.index.entry_count(), cap)
    }

    /// Bytes the index accounts for, each file rounded up to a KiB (after pending evictions ran).
    pub fn weighted_size(&self) -> u64 {
        self.index.run_pending_tasks();
        self.index.weighted_size() * 1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str, idx: u64) -> Key {
        (Arc::from(s), idx)
    }

    fn wait_indexed(t: &DiskTier, k: &Key) {
        for _ in 0..1000 {
            if t.index.contains_key(k) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("{k:?} never indexed");
    }

    #[test]
    fn blocks_survive_a_reopen_and_damage_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let pool = BufferPool::new(1 << 16, 4);
        let k = key("xet:0123456789abcdef", 3);
        {
            let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
            t.write(k.clone(), b"hello block");
            assert_eq!(&t.read(&k, 11, &pool).unwrap()[..], b"hello block");
            assert!(t.read(&k, 12, &pool).is_none(), "a length mismatch is a miss");
            assert!(t.read(&k, 11, &pool).is_none(), "and the damaged block is forgotten");
            t.write(k.clone(), b"hello block");
        }
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        wait_indexed(&t, &k);
        assert_eq!(&t.read(&k, 11, &pool).unwrap()[..], b"hello block");
        // A file truncated behind our back (a crash before its data reached the disk).
        let path = t.root.join(rel_path(&k.0, k.1).unwrap());
        std::fs::write(&path, b"").unwrap();
        assert!(t.read(&k, 11, &pool).is_none());
    }

    #[test]
    fn the_start_scan_removes_only_stale_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let k = key("xet:0123456789abcdef", 1);
        let block_dir = {
            let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
            t.write(k.clone(), b"block");
            t.root
                .join(rel_path(&k.0, k.1).unwrap())
                .parent()
                .unwrap()
                .to_path_buf()
        };
        let (young, old) = (block_dir.join(".tmp.1.young"), block_dir.join(".tmp.1.old"));
        std::fs::write(&young, b"being written").unwrap();
        std::fs::write(&old, b"left by a crash").unwrap();
        let long_ago = std::time::SystemTime::now() - TMP_STALE_AFTER - std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        wait_indexed(&t, &k);
        // The scan runs in the background: wait for it to reach the leftover.
        for _ in 0..1000 {
            if !old.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!old.exists(), "a crash's leftover is removed");
        assert!(young.exists(), "a write in flight keeps its temporary file");
    }

    #[test]
    fn over_budget_files_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 10_000).unwrap();
        for i in 0..10 {
            t.write(key("sha256:00aa11bb22cc33dd", i), &[i as u8; 3000]);
        }
        assert!(t.weighted_size() <= 10_000);
        let files = walk(&t.root);
        assert!(files <= 3, "{files} block files left for a 10,000-byte budget");
        assert!(files >= 1);
    }

    #[test]
    fn keys_that_are_no_safe_file_name_are_not_cached() {
        assert!(rel_path("xet:../../etc", 0).is_none());
        assert!(rel_path("../x:abcdef0123", 0).is_none());
        assert!(rel_path("git:abc", 0).is_none());
        assert_eq!(
            rel_path("git:abcdef0123", 7).unwrap(),
            PathBuf::from("git/ab/abcdef0123.7")
        );
        assert_eq!(parse_path("git", "abcdef0123.7"), Some(key("git:abcdef0123", 7)));
        assert_eq!(parse_path("git", "abcdef0123"), None);
    }

    fn walk(p: &Path) -> usize {
        let mut n = 0;
        for e in std::fs::read_dir(p).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                n += walk(&e.path());
            } else {
                n += 1;
            }
        }
        n
    }
}
