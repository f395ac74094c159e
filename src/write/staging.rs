//! Staging: one local file per dirty inode, plus a small journal entry beside it.
//!
//! Written bytes go straight to `<id>.data` with `pwrite` (never an unbounded RAM buffer). Beside it,
//! `<id>.meta` records the repo path and whether the file was *closed* (its content is final and
//! must reach the Hub) or still *open* (a crash leaves it as recoverable, not uploaded). The meta is
//! replaced atomically (write + rename) and the data is fsynced before a file is marked closed, so
//! after a crash or power cut the next mount finds every closed file intact. A new file's first
//! entries, while it is open and at its first quick close, are lines in a shared log instead
//! (`staging/opens.rs`).
//!
//! Staged data is deleted only after the commit holding it succeeded (or the file was unlinked).
//!
//! A small file's close may skip the wait for the disk (`close_quick`, in `staging/quick.rs`): its
//! closed entry then carries the content's size and CRC, and a background thread makes both
//! durable a moment later.
//!
//! A new file has no `<id>.data` at first: while it is small, its bytes are appended to a log
//! shared by all such files (`staging/datalog.rs`), and it gets its data file only when it grows
//! or something needs the file itself.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::lazy::Lazy;

/// What the journal says about a staged file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Open,
    Closed,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    /// Path in the repo (from the repo root, subfolder mounts included).
    path: String,
    phase: Phase,
    /// A closed entry written before its data reached the disk (a quick close): what the data
    /// must be for the entry to hold after a power cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    check: Option<quick::Check>,
}

/// A staging directory: one per (repo, branch, cache dir), held by one mount at a time.
pub struct StagingArea {
    dir: PathBuf,
    next_id: AtomicU64,
    /// Makes quickly closed files durable in the background.
    sealer: quick::Sealer,
    /// New files' open entries.
    opens: std::sync::Arc<opens::OpensLog>,
    /// Emptied data files of committed small files, reused when a file needs one.
    spares: std::sync::Arc<spares::Spares>,
    /// New small files' bytes.
    data: std::sync::Arc<datalog::DataLog>,
    /// Keeps the directory's advisory lock for as long as the mount lives.
    _lock: File,
}

/// A staged file found at startup.
pub struct Recovered {
    pub file: DirtyFile,
    pub phase: Phase,
}

impl StagingArea {
    /// Opens (creating) `dir` and takes its lock; a second writable mount of the same repo and
    /// cache dir is refused rather than mixing two journals.
    pub fn open(dir: &Path) -> std::io::Result<StagingArea> {
        std::fs::create_dir_all(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err(std::io::Error::new(
                ErrorKind::WouldBlock,
                format!(
                    "{} is in use by another writable hubfs mount of the same repo",
                    dir.display()
                ),
            ));
        }
        // First, so that the files it restores are found like any other.
        let data = std::sync::Arc::new(datalog::DataLog::open(dir)?);
        // One scan finds the highest id in use and the spares a previous run left.
        let (mut max, mut spares) = (0, Vec::new());
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(n) = spares::number(name) {
                spares.push((n, e));
            } else if let Some(id) = name.split('.').next().and_then(|n| n.parse::<u64>().ok()) {
                max = max.max(id);
            }
        }
        // Copies frozen for uploads (see `DirtyFile::snapshot`) of a run that stopped are stale.
        let uploads = dir.join(UPLOADS_DIR);
        let _ = std::fs::remove_dir_all(&uploads);
        std::fs::create_dir_all(&uploads)?;
        Ok(StagingArea {
            dir: dir.to_path_buf(),
            next_id: AtomicU64::new(max + 1),
            sealer: quick::Sealer::start(dir)?,
            opens: std::sync::Arc::new(opens::OpensLog::open(dir)?),
            spares: std::sync::Arc::new(spares::Spares::adopt(dir, spares)),
            data,
            _lock: lock,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new, empty staged file for `repo_path`, journaled as open: held by the data log while
    /// it has room (`staging/datalog.rs`), else given a data file (a spare renamed into place when
    /// there is one, `staging/spares.rs`).
    pub fn create(&self, repo_path: &str) -> std::io::Result<DirtyFile> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let data_path = self.dir.join(format!("{id}.data"));
        let file = if self.data.adopt(id)? {
            None
        } else {
            Some(match self.spares.take(&data_path) {
                Some(f) => f,
                None => OpenOptions::new()
                    .create_new(true)
                    .read(true)
                    .write(true)
                    .open(&data_path)?,
            })
        };
        let df = DirtyFile::new(
            id,
            &self.dir,
            file,
            repo_path.to_string(),
            0,
            Stores {
                opens: self.opens.clone(),
                spares: self.spares.clone(),
                log: self.data.clone(),
            },
            false,
        );
        df.write_meta(repo_path, Phase::Open)?;
        Ok(df)
    }

    /// Every staged file left by an earlier run, oldest first. Files whose meta cannot be read are
    /// left in place (and logged), never deleted.
    pub fn recover(&self) -> std::io::Result<Vec<Recovered>> {
        let mut ids: Vec<u64> = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let name = e?.file_name();
            let Some(name) = name.to_str() else { continue };
            let id = match name.split_once('.') {
                Some((id, "meta")) => id.parse().ok(),
                // Data without an entry file: a new file open at the crash, if the log knows it.
                Some((id, "data")) => id
                    .parse()
                    .ok()
                    .filter(|id| self.opens.path_of(*id).is_some() && !self.dir.join(format!("{id}.meta")).exists()),
                _ => None,
            };
            ids.extend(id);
        }
        ids.sort_unstable();
        let mut out = Vec::new();
        for id in ids {
            let meta_path = self.dir.join(format!("{id}.meta"));
            let data_path = self.dir.join(format!("{id}.data"));
            let logged = self.opens.entry_of(id).map(|l| Meta {
                path: l.path,
                phase: if l.check.is_some() { Phase::Closed } else { Phase::Open },
                check: l.check,
            });
            let has_meta = meta_path.exists();
            let read = std::fs::read(&meta_path).map(|b| serde_json::from_slice::<Meta>(&b));
            let mut meta = match (read, logged) {
                (Ok(Ok(m)), _) => m,
                // No entry file, or one torn by a crash while it was first written: the log's.
                (_, Some(m)) => m,
                (other, None) => {
                    tracing::warn!(path = %meta_path.display(), ?other, "unreadable staging journal entry left in place");
                    continue;
                }
            };
            let file = match OpenOptions::new().read(true).write(true).open(&data_path) {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(path = %data_path.display(), error = %e, "journal entry without data left in place");
                    continue;
                }
            };
            let size = file.metadata()?.len();
            if let Some(check) = &meta.check
                && !check.holds(&file, size)
            {
                // Closed a moment before a power cut that kept the entry but not the bytes.
                tracing::warn!(path = %meta.path, "a file closed just before a crash did not reach the disk whole");
                meta.phase = Phase::Open;
            }
            let lazy = match Lazy::open(&data_path) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(path = %data_path.display(), error = %e, "unreadable copy-up state: staged file left in place");
                    continue;
                }
            };
            let df = DirtyFile::new(
                id,
                &self.dir,
                Some(file),
                meta.path,
                size,
                Stores {
                    opens: self.opens.clone(),
                    spares: self.spares.clone(),
                    log: self.data.clone(),
                },
                has_meta,
            );
            *df.lazy.lock() = lazy;
            out.push(Recovered {
                phase: meta.phase,
                file: df,
            });
        }
        Ok(out)
    }
}

#[derive(Debug)]
pub(super) struct State {
    path: String,
    pub(super) size: u64,
    /// Bumped by every change of content or size.
    generation: u64,
    /// The generation the Hub has (0: none yet).
    committed: u64,
    /// Open handles that may write.
    writers: u32,
    mtime: SystemTime,
    /// The last upload or commit failure, until a later commit succeeds.
    error: Option<String>,
    discarded: bool,
    /// The journal says closed under the current path: a seal then needs only the data fsync
    /// (NFS COMMITs and stable WRITEs seal a file many times while it is being written).
    sealed: bool,
    /// The journal says open under the current path (just created): a first writer need not
    /// write it again.
    journaled_open: bool,
    /// The generation whose data was last fsynced: a second seal of unchanged content (the
    /// release after a close's flush) skips the fsync.
    synced: u64,
    /// The generation journaled as closed by a quick close (not yet durable; 0: none).
    quick: u64,
    /// The file has its own entry file (`.meta`); until then its open entry is in the opens log.
    has_meta: bool,
    /// This generation's content is already in the Hub's LFS/Xet storage (uploaded at close): the
    /// commit refers to it without hashing or uploading again.
    uploaded: Option<Snapshot>,
}

/// The staging area's shared stores a file writes to.
struct Stores {
    opens: std::sync::Arc<opens::OpensLog>,
    spares: std::sync::Arc<spares::Spares>,
    log: std::sync::Arc<datalog::DataLog>,
}

/// One staged file. Lock order: `journal` → `logged` → `st` → the stores' locks (each a leaf);
/// `st` is taken before `logged` only by `truncate` (the size must change atomically with the
/// data), which takes nothing else under it. File I/O happens outside `st` but there.
pub struct DirtyFile {
    id: u64,
    data_path: PathBuf,
    meta_path: PathBuf,
    opens: std::sync::Arc<opens::OpensLog>,
    /// Where the data file goes once the Hub has it, if small (see `Drop`).
    spares: std::sync::Arc<spares::Spares>,
    /// Holds the content while the file has no data file (`staging/datalog.rs`).
    log: std::sync::Arc<datalog::DataLog>,
    /// The data file; unset while the content lives in the log.
    disk: std::sync::OnceLock<File>,
    /// Taken to read or write content that lives in the log, and to move it to a data file.
    logged: Mutex<()>,
    pub(super) st: Mutex<State>,
    /// Serialises journal updates (they share one temporary file name).
    journal: Mutex<()>,
    /// Writes under way (see `write_at` and `snapshot`).
    in_flight: std::sync::atomic::AtomicU32,
    /// Created empty and only ever appended to since: bytes below the size were final when
    /// written (see `stable_prefix`). Cleared, before the bytes move, by any write below the
    /// size and by any truncate.
    grown_only: std::sync::atomic::AtomicBool,
    /// A copy-up that holds only what was written (`write::lazy`); a leaf lock, held across the
    /// data write of such a file so a fill from the base never overwrites a newer write.
    pub(super) lazy: Mutex<Option<Lazy>>,
}

impl DirtyFile {
    /// A staged file not yet on the Hub (generation 1, nothing committed); `file` is `None` for
    /// one the data log holds.
    fn new(
        id: u64,
        dir: &Path,
        file: Option<File>,
        path: String,
        size: u64,
        stores: Stores,
        has_meta: bool,
    ) -> DirtyFile {
        let disk = std::sync::OnceLock::new();
        if let Some(f) = file {
            let _ = disk.set(f);
        }
        DirtyFile {
            id,
            data_path: dir.join(format!("{id}.data")),
            meta_path: dir.join(format!("{id}.meta")),
            opens: stores.opens,
            spares: stores.spares,
            log: stores.log,
            disk,
            logged: Mutex::new(()),
            st: Mutex::new(State {
                path,
                size,
                generation: 1,
                committed: 0,
                writers: 0,
                mtime: SystemTime::now(),
                error: None,
                discarded: false,
                sealed: false,
                journaled_open: false,
                synced: 0,
                quick: 0,
                has_meta,
                uploaded: None,
            }),
            journal: Mutex::new(()),
            grown_only: std::sync::atomic::AtomicBool::new(size == 0),
            in_flight: std::sync::atomic::AtomicU32::new(0),
            lazy: Mutex::new(None),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn data_path(&self) -> &Path {
        &self.data_path
    }

    pub fn size(&self) -> u64 {
        self.st.lock().size
    }

    pub fn mtime(&self) -> SystemTime {
        self.st.lock().mtime
    }

    pub fn set_mtime(&self, t: SystemTime) {
        self.st.lock().mtime = t;
    }

    pub fn generation(&self) -> u64 {
        self.st.lock().generation
    }

    /// Content not yet on the Hub.
    pub fn is_dirty(&self) -> bool {
        let s = self.st.lock();
        !s.discarded && s.generation > s.committed
    }

    pub fn writers(&self) -> u32 {
        self.st.lock().writers
    }

    pub fn error(&self) -> Option<String> {
        self.st.lock().error.clone()
    }

    pub fn set_error(&self, e: Option<String>) {
        self.st.lock().error = e;
    }

    pub fn repo_path(&self) -> String {
        self.st.lock().path.clone()
    }

    /// The content equals what the Hub has (loaded from it, unchanged).
    pub fn mark_clean(&self) {
        let mut s = self.st.lock();
        s.committed = s.generation;
    }

    /// The content must be committed again although it did not change (it becomes the content of
    /// another name too: a hard link).
    pub fn mark_dirty(&self) {
        self.st.lock().generation += 1;
    }

    /// The Hub has generation `g`. Returns whether the file is now clean.
    pub fn committed(&self, g: u64) -> bool {
        let mut s = self.st.lock();
        s.committed = s.committed.max(g);
        s.error = None;
        s.committed >= s.generation
    }

    pub fn committed_generation(&self) -> u64 {
        self.st.lock().committed
    }

    pub fn add_writer(&self) -> std::io::Result<()> {
        let first = {
            let mut s = self.st.lock();
            s.writers += 1;
            s.writers == 1
        };
        if first && !self.st.lock().journaled_open {
            let path = self.repo_path();
            self.write_meta(&path, Phase::Open)?;
        }
        Ok(())
    }

    /// A writer went away; when it was the last, the content is journaled as closed (final: the
    /// next start uploads it if this run does not) and made durable, or, with `quick` and a small
    /// file, left for [`StagingArea::seal_later`] (returns true: the caller hands it over).
    pub fn remove_writer(&self, quick: bool) -> std::io::Result<bool> {
        let last = {
            let mut s = self.st.lock();
            s.writers = s.writers.saturating_sub(1);
            // A clean file (committed, or never changed) has nothing to make durable.
            s.writers == 0 && !s.discarded && s.generation > s.committed
        };
        if !last {
            return Ok(false);
        }
        if quick && self.close_quick()? {
            return Ok(true);
        }
        self.seal().map(|()| false)
    }

    /// fsync the data and journal the file as closed: from here on a crash leaves it to be
    /// committed by the next start (with whatever later writes reached the disk).
    pub fn seal(&self) -> std::io::Result<()> {
        let generation = {
            let s = self.st.lock();
            if s.sealed && s.synced == s.generation && self.in_flight.load(Ordering::SeqCst) == 0 {
                return Ok(());
            }
            s.generation
        };
        // A durable entry names a data file.
        self.disk()?.sync_data()?;
        {
            let mut s = self.st.lock();
            s.synced = s.synced.max(generation);
        }
        let _j = self.journal.lock();
        let (path, sealed) = {
            let s = self.st.lock();
            (s.path.clone(), s.sealed)
        };
        if sealed {
            return Ok(());
        }
        self.write_meta_locked(&path, Phase::Closed, None)
    }

    /// Sealed with nothing written since: what a reader sees now is what a crash would leave (an
    /// NFS client's file after COMMIT, a FUSE file after fsync, while still open).
    pub fn settled(&self) -> bool {
        let s = self.st.lock();
        s.sealed && s.synced == s.generation && self.in_flight.load(Ordering::SeqCst) == 0
    }

    /// The file moved to `repo_path` (rename).
    pub fn set_path(&self, repo_path: &str) -> std::io::Result<()> {
        let phase = {
            let mut s = self.st.lock();
            s.path = repo_path.to_string();
            s.generation += 1;
            if s.writers > 0 { Phase::Open } else { Phase::Closed }
        };
        self.write_meta(repo_path, phase)
    }

    fn write_meta(&self, path: &str, phase: Phase) -> std::io::Result<()> {
        let _j = self.journal.lock();
        self.write_meta_locked(path, phase, None)
    }

    /// `write_meta` with the journal lock held by the caller. A closed entry without a `check` is
    /// made durable, after the data and with directory entries included: the data file and the
    /// journal entry must both outlive a power cut, and a rename or a create is durable only once
    /// its directory is synced. One with a `check` (a quick close) is only written.
    /// `check` comes with the generation whose bytes it describes.
    fn write_meta_locked(&self, path: &str, phase: Phase, check: Option<(quick::Check, u64)>) -> std::io::Result<()> {
        let durable = phase == Phase::Closed && check.is_none();
        let (unsynced, has_meta) = {
            let s = self.st.lock();
            if s.discarded {
                return Ok(());
            }
            ((s.synced < s.generation).then_some(s.generation), s.has_meta)
        };
        if phase == Phase::Open && !has_meta {
            self.opens.note_open(self.id, path)?;
            let mut s = self.st.lock();
            s.sealed = false;
            s.journaled_open = true;
            s.quick = 0;
            return Ok(());
        }
        if let Some((c, g)) = check
            && !has_meta
        {
            // A quick close of a file the log speaks for: one more line, no entry file.
            self.opens.note_closed(self.id, path, c)?;
            let mut s = self.st.lock();
            s.sealed = false;
            s.journaled_open = false;
            s.quick = g;
            return Ok(());
        }
        // An entry file names a data file.
        let file = self.disk()?;
        if durable && let Some(generation) = unsynced {
            // A rename of a quickly closed file, whose bytes may not be on disk yet.
            file.sync_data()?;
            let mut s = self.st.lock();
            s.synced = s.synced.max(generation);
        }
        let quick = check.as_ref().map_or(0, |(_, g)| *g);
        let body = serde_json::to_vec(&Meta {
            path: path.to_string(),
            phase,
            check: check.map(|(c, _)| c),
        })
        .map_err(std::io::Error::other)?;
        // The first entry file is written in place: torn by a crash, it is unreadable and the
        // opens log's entry stands. Later ones replace it atomically.
        let target = if has_meta {
            self.meta_path.with_extension("meta.tmp")
        } else {
            self.meta_path.clone()
        };
        {
            let mut f = File::create(&target)?;
            f.write_all(&body)?;
            if durable {
                f.sync_data()?;
            }
        }
        if has_meta {
            std::fs::rename(&target, &self.meta_path)?;
        }
        if durable && let Some(dir) = self.meta_path.parent() {
            File::open(dir)?.sync_all()?;
        }
        if !has_meta {
            self.opens.note_settled(self.id);
        }
        let mut s = self.st.lock();
        s.has_meta = true;
        s.sealed = durable;
        s.journaled_open = phase == Phase::Open;
        s.quick = quick;
        Ok(())
    }

    /// The file was unlinked (or replaced): it must never be uploaded, even after a crash.
    pub fn discard(&self) {
        let _j = self.journal.lock();
        self.st.lock().discarded = true;
        let _ = std::fs::remove_file(&self.meta_path);
        self.opens.note_gone(self.id);
    }

    pub fn is_discarded(&self) -> bool {
        self.st.lock().discarded
    }

    /// Writes at `offset`, growing the file as needed.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        // Announced before the bytes move, retired after the generation moved: a snapshot that
        // sees neither an announced write nor a new generation copied a consistent file.
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if self.grown_only.load(Ordering::SeqCst) && offset < self.st.lock().size {
            self.grown_only.store(false, Ordering::SeqCst);
        }
        let r = {
            let mut lazy = self.lazy.lock();
            match lazy.as_mut() {
                Some(l) => self
                    .disk()
                    .and_then(|f| f.write_all_at(data, offset))
                    .and_then(|()| l.note_write(offset, data.len() as u64)),
                None => {
                    drop(lazy);
                    self.store_at(data, offset)
                }
            }
        };
        if r.is_ok() {
            let mut s = self.st.lock();
            s.size = s.size.max(offset + data.len() as u64);
            s.generation += 1;
            s.mtime = SystemTime::now();
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Reads up to `len` bytes at `offset`; short only at end of file.
    pub fn read_at(&self, offset: u64, len: u32) -> std::io::Result<Bytes> {
        let size = self.size();
        if offset >= size {
            return Ok(Bytes::new());
        }
        let len = (len as u64).min(size - offset) as usize;
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            match self.read_some(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // The data file can be shorter than `size` only after a crash; zeros are what a hole reads.
        Ok(Bytes::from(buf))
    }

    pub fn truncate(&self, size: u64) -> std::io::Result<()> {
        self.grown_only.store(false, Ordering::SeqCst);
        let mut s = self.st.lock();
        self.store_len(size)?;
        if let Some(l) = self.lazy.lock().as_mut() {
            l.note_truncate(size)?;
        }
        s.size = size;
        s.generation += 1;
        s.mtime = SystemTime::now();
        Ok(())
    }
}

impl Drop for DirtyFile {
    /// The last reference is gone: staged bytes that the Hub has (or that were discarded) are
    /// deleted, a small file's data file kept as a spare; anything else stays for the next start
    /// to upload.
    fn drop(&mut self) {
        let s = self.st.get_mut();
        if s.discarded || s.committed >= s.generation {
            let small = s.size <= spares::SPARE_MAX_BYTES;
            self.opens.note_settled(self.id);
            let _ = std::fs::remove_file(&self.meta_path);
            let lazy = self.lazy.get_mut().is_some();
            if lazy {
                Lazy::remove_files(&self.data_path);
            }
            match self.disk.get() {
                None => self.log.forget(self.id),
                Some(f) if lazy || !small || !self.spares.give_back(&self.data_path, f) => {
                    let _ = std::fs::remove_file(&self.data_path);
                }
                Some(_) => {}
            }
        }
    }
}

#[path = "staging_quick.rs"]
mod quick;

#[path = "staging_opens.rs"]
mod opens;

#[path = "staging_spares.rs"]
mod spares;

#[path = "staging_datalog.rs"]
mod datalog;
pub(crate) use spares::PREFIX as SPARE_PREFIX;

#[path = "staging_snapshot.rs"]
mod snapshot;
use snapshot::UPLOADS_DIR;
pub use snapshot::{FROZEN_IN_MEMORY_MAX, Frozen, InPlace, Snapshot};

#[cfg(test)]
#[path = "staging_tests.rs"]
mod tests;
