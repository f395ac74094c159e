//! Reads a cold cache file ahead of a passthrough reader.
//!
//! A passthrough reader gets the kernel's readahead on the cache file: one window of
//! `read_ahead_kb` in flight. That is enough for a file the disk has served before, but the first
//! read of a file the disk tier has just written is latency-bound on the disks we measured
//! (0.4–0.7 GB/s buffered against 1.2–1.3 for hubfs's own reads with several 8 MiB requests in
//! flight, and 1.3–2.0 with two threads reading ahead; BENCHMARKS, FUSE passthrough). So when an
//! inode's first passthrough open finds its cache file out of the page cache and not read since
//! it was written, two threads read the file in 8 MiB chunks from the start, into the page cache
//! the reader then finds, until the file is read or the inode's last passthrough handle is
//! released.
//!
//! Bounds: only files of at least [`MIN_FILE`], at most [`MAX_FILES`] files at a time (a loader
//! opening many shards at once already keeps the disk busy), and nothing when most of the file's
//! pages are resident. Files only pass through once the disk tier holds them whole,
//! which a reader earlier got by reading them whole, so reading the whole file is the expected
//! pattern; the page cache it fills is the kernel's to reclaim.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Smaller files are left to the kernel's readahead (a window or two).
const MIN_FILE: u64 = 16 << 20;
/// Files warmed at once, per session.
const MAX_FILES: usize = 2;
/// Threads reading one file ahead.
const THREADS: usize = 2;
/// A thread takes the next chunk of this size...
const CHUNK: u64 = 8 << 20;
/// ...and reads it in pieces of this size, checking for a stop between them.
const PIECE: usize = 1 << 20;

/// Per-session warming state.
#[derive(Default)]
pub(super) struct Warmer {
    running: Arc<AtomicUsize>,
    /// Files warmed (tests and status).
    started: Arc<AtomicU64>,
}

/// Stops one file's warming when dropped or told to.
pub(super) struct WarmStop(Arc<AtomicBool>);

impl WarmStop {
    pub(super) fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Drop for WarmStop {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Warmer {
    /// Starts warming `path` (the backing file of a new passthrough inode) if it qualifies.
    /// Returns the handle that stops it; `None` when nothing was started.
    pub(super) fn start(&self, path: &Path) -> Option<WarmStop> {
        let size = std::fs::metadata(path).ok()?.len();
        if size < MIN_FILE {
            return None;
        }
        // Take a slot first, so a burst of opens starts at most MAX_FILES warmers.
        if self.running.fetch_add(1, Ordering::AcqRel) >= MAX_FILES {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let job = Job {
            path: path.to_path_buf(),
            size,
            next: AtomicU64::new(0),
            stop: stop.clone(),
            running: self.running.clone(),
            started: self.started.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("hubfs-warm".into())
            .spawn(move || job.run());
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "could not start a cache-file warmer");
            self.running.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(WarmStop(stop))
    }

    /// Files whose warming started (the file was cold).
    pub(super) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }
}

struct Job {
    path: PathBuf,
    size: u64,
    /// The next chunk to read, shared by the job's threads.
    next: AtomicU64,
    stop: Arc<AtomicBool>,
    running: Arc<AtomicUsize>,
    started: Arc<AtomicU64>,
}

impl Job {
    fn run(self) {
        match File::open(&self.path) {
            Ok(file) if unread_since_written(&file) && is_cold(&file, self.size) => {
                self.started.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(path = %self.path.display(), size = self.size, "reading a cold cache file ahead of its passthrough reader");
                let job = Arc::new(self);
                let helpers: Vec<_> = (1..THREADS)
                    .filter_map(|_| {
                        let job = job.clone();
                        std::thread::Builder::new()
                            .name("hubfs-warm".into())
                            .spawn(move || job.read_chunks())
                            .ok()
                    })
                    .collect();
                let whole = job.read_chunks();
                let whole = helpers.into_iter().fold(whole, |w, h| h.join().unwrap_or(false) && w);
                if whole {
                    mark_read(&file);
                }
                job.running.fetch_sub(1, Ordering::AcqRel);
            }
            Ok(_) => {
                self.running.fetch_sub(1, Ordering::AcqRel);
            }
            Err(e) => {
                tracing::debug!(error = %e, "cache file to warm could not be opened");
                self.running.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Reads chunks until none is left (true) or a stop or an error ends it (false).
    fn read_chunks(&self) -> bool {
        let Ok(file) = File::open(&self.path) else {
            return false;
        };
        let mut buf = vec![0u8; PIECE];
        loop {
            let chunk = self.next.fetch_add(1, Ordering::Relaxed);
            let start = chunk.saturating_mul(CHUNK);
            if start >= self.size {
                return true;
            }
            let end = (start + CHUNK).min(self.size);
            let mut at = start;
            while at < end {
                if self.stop.load(Ordering::Relaxed) {
                    return false;
                }
                let want = ((end - at) as usize).min(PIECE);
                match file.read_at(&mut buf[..want], at) {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => at += n as u64,
                }
            }
        }
    }
}

/// Whether `file` has not been read since it was last written (its atime is not after its
/// mtime). That first read is the slow one on the disks we measured; a file the disk has served
/// read as fast with the kernel's readahead alone as with the warmer beside it (4 passes each),
/// and a reader of part of a file would pay for reading the whole, so only then is it warmed.
fn unread_since_written(file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match file.metadata() {
        Ok(m) => (m.atime(), m.atime_nsec()) <= (m.mtime(), m.mtime_nsec()),
        Err(_) => false,
    }
}

/// Sets `file`'s atime to now after a whole read, so a filesystem mounted `noatime` also shows
/// the next open that the disk has served it.
fn mark_read(file: &File) {
    use rustix::fs::{Timespec, Timestamps, UTIME_NOW, UTIME_OMIT};
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
        last_modification: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
    };
    if let Err(e) = rustix::fs::futimens(file, &times) {
        tracing::debug!(error = %std::io::Error::from(e), "marking a warmed cache file read");
    }
}

/// Bytes of `file` in the page cache, from `cachestat(2)` (Linux 6.5+; passthrough needs 6.9),
/// which counts without reading or mapping (probing with `RWF_NOWAIT` reads would start
/// readahead, and a mapping sets atime); `None` where the kernel cannot answer.
pub fn page_cache_bytes(file: &File) -> Option<u64> {
    let pages = crate::util::linux::cached_pages(file)?;
    Some(pages.saturating_mul(rustix::param::page_size() as u64))
}

/// Whether less than half of `file`'s `size` bytes are in the page cache; a kernel that cannot
/// say gets `false` (nothing is warmed).
fn is_cold(file: &File, size: u64) -> bool {
    page_cache_bytes(file).is_some_and(|cached| cached.saturating_mul(2) < size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    /// Waits until `w` has no warming running (its slots are back), at most 30 s.
    fn idle(w: &Warmer) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while w.running.load(Ordering::Acquire) != 0 {
            assert!(Instant::now() < deadline, "the warmer never gave its slot back");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_file_just_read_is_resident_and_small_files_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        drop(f);
        let f = File::open(&path).unwrap();
        // Just written through the page cache: resident.
        assert!(!is_cold(&f, 1 << 20));
        let w = Warmer::default();
        assert!(w.start(&path).is_none(), "a 1 MiB file is the kernel readahead's");
        assert_eq!(w.running.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_resident_large_file_is_not_warmed_and_gives_its_slot_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        let block = vec![1u8; 1 << 20];
        for _ in 0..17 {
            f.write_all(&block).unwrap();
        }
        drop(f);
        let w = Warmer::default();
        let stop = w.start(&path).expect("a 17 MiB file takes a slot");
        idle(&w);
        assert_eq!(w.started(), 0, "a resident file is not read ahead");
        drop(stop);
    }

    #[test]
    fn a_cold_large_file_is_read_into_the_page_cache() {
        // A disk-backed dir: tmpfs pages cannot be dropped.
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        let block = vec![3u8; 1 << 20];
        for _ in 0..24 {
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
        // Clean pages of a synced file go with DONTNEED.
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let size = 24 << 20;
        let f = File::open(&path).unwrap();
        if !is_cold(&f, size) {
            eprintln!("the kernel kept the pages; nothing to check on this filesystem");
            return;
        }
        let w = Warmer::default();
        let stop = w.start(&path).expect("a slot");
        idle(&w);
        assert_eq!(w.started(), 1);
        assert!(!is_cold(&f, size), "the warmer left the file out of the page cache");
        drop(stop);
        // Read once since written: even out of the page cache again, it is the kernel's.
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        assert!(!unread_since_written(&f));
        let stop = w.start(&path).expect("a slot");
        idle(&w);
        assert_eq!(w.started(), 1, "a file the disk has served is not read ahead");
        drop(stop);
    }

    #[test]
    fn slots_are_bounded() {
        let w = Warmer::default();
        w.running.store(MAX_FILES, Ordering::Relaxed);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![0u8; (MIN_FILE + 1) as usize]).unwrap();
        assert!(w.start(&path).is_none(), "every slot is taken");
        assert_eq!(w.running.load(Ordering::Relaxed), MAX_FILES);
    }

    #[test]
    fn a_stop_ends_the_reading_before_the_end() {
        let job = Job {
            path: std::path::PathBuf::from("/dev/zero"),
            size: u64::MAX / 2,
            next: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            running: Arc::default(),
            started: Arc::default(),
        };
        // Stopped before it starts: the first piece is not read, and the file counts as unread.
        WarmStop(job.stop.clone()).stop();
        assert!(!job.read_chunks(), "a stopped job reports the file not read whole");
        assert_eq!(
            job.next.load(Ordering::Relaxed),
            1,
            "it took one chunk and read none of it"
        );
    }
}
