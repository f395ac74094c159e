//! Quick closes: a small file's close that does not wait for the disk.
//!
//! A durable close costs three fsyncs (data, journal entry, directory): about 1 ms on a good disk,
//! most of the time a `cp -r` of small files spends in the mount. A quick close writes the closed
//! journal entry without them, carrying the content's size and CRC, and hands the file to a
//! background thread that makes data and entry durable a moment later (a full seal).
//!
//! What this keeps: a crash of the mount (`kill -9`) loses nothing, since both writes are in the
//! kernel's page cache. A power cut in the moment between the close and the seal may lose the
//! file, as on a local disk without fsync; if the entry survived but not the bytes, the CRC says
//! so and the next mount saves what is there in `recovered/` instead of committing it. `fsync`
//! and NFS COMMIT still seal at once.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::sync::{Arc, Weak};

use serde::{Deserialize, Serialize};

use super::{DirtyFile, Phase};

/// Files up to this size may close quickly: their content goes inline in a commit within
/// seconds, and reading them back for the CRC costs microseconds.
pub const QUICK_CLOSE_MAX: u64 = 64 << 10;

/// What a quickly closed file's data must be for its journal entry to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Check {
    size: u64,
    crc32: u32,
}

impl Check {
    /// Whether `file` (of `size` bytes on disk) holds the bytes this check was made for.
    pub(super) fn holds(&self, file: &File, size: u64) -> bool {
        if size != self.size {
            return false;
        }
        let mut buf = vec![0u8; size as usize];
        match file.read_exact_at(&mut buf, 0) {
            Ok(()) => crc32fast::hash(&buf) == self.crc32,
            Err(_) => false,
        }
    }
}

impl DirtyFile {
    /// Journals the file as closed without waiting for the disk, if it is small enough (see the
    /// module). Returns false when it does not qualify or changed meanwhile: the caller seals it.
    /// True also when it is already journaled closed, quickly or durably, at this generation.
    pub fn close_quick(&self) -> std::io::Result<bool> {
        let (size, generation) = {
            let s = self.st.lock();
            if s.discarded || s.quick == s.generation || (s.sealed && s.synced == s.generation) {
                return Ok(true);
            }
            (s.size, s.generation)
        };
        if size > QUICK_CLOSE_MAX
            || self.lazy.lock().is_some()
            || self.in_flight.load(std::sync::atomic::Ordering::SeqCst) != 0
        {
            return Ok(false);
        }
        let bytes = self.read_exactly(size)?;
        let check = Check {
            size,
            crc32: crc32fast::hash(&bytes),
        };
        let _j = self.journal.lock();
        let path = {
            let s = self.st.lock();
            if s.generation != generation || self.in_flight.load(std::sync::atomic::Ordering::SeqCst) != 0 {
                return Ok(false);
            }
            s.path.clone()
        };
        self.write_meta_locked(&path, Phase::Closed, Some((check, generation)))?;
        Ok(true)
    }

    /// Makes a quick close durable as it is, entry and all, without rewriting the entry (the
    /// check it carries then holds): fsyncs the data and the entry file. Returns the generation
    /// that is durable once the directory is synced too (and the opens log, when the entry is a
    /// line there: `in_log`; the data log, when it holds the content: `data_in_log`), or `None`
    /// when the file moved on since (written, renamed, reopened): then it needs a full seal.
    fn sync_quick(&self) -> std::io::Result<Option<QuickSynced>> {
        let generation = {
            let s = self.st.lock();
            if s.discarded || s.quick == 0 || s.quick != s.generation {
                return Ok(None);
            }
            s.generation
        };
        // Content the data log holds is synced with the log, once for the whole batch.
        let data_in_log = match self.disk.get() {
            Some(f) => {
                f.sync_data()?;
                false
            }
            None => true,
        };
        // The entry is not replaced while it is synced.
        let _j = self.journal.lock();
        let in_log = {
            let s = self.st.lock();
            if s.quick != generation {
                return Ok(None);
            }
            !s.has_meta
        };
        if !in_log {
            File::open(&self.meta_path)?.sync_data()?;
        }
        Ok(Some(QuickSynced {
            generation,
            in_log,
            data_in_log,
        }))
    }

    /// After the staging directory's fsync: generation `g`'s quick entry and data are durable
    /// (unless the content was meanwhile moved out of the data log to a data file not synced).
    fn settle_quick(&self, q: &QuickSynced) {
        if q.data_in_log && !self.in_log() {
            return;
        }
        let g = q.generation;
        let mut s = self.st.lock();
        if s.quick == g && s.generation == g {
            s.synced = s.synced.max(g);
            s.sealed = true;
        }
    }

    /// Whether a seal would do anything: content not yet durable and journaled as closed.
    pub fn needs_seal(&self) -> bool {
        let s = self.st.lock();
        !s.discarded && s.writers == 0 && s.generation > s.committed && !(s.sealed && s.synced == s.generation)
    }
}

/// What `sync_quick` made durable, or left to the batch's syncs.
struct QuickSynced {
    generation: u64,
    /// The entry is a line in the opens log.
    in_log: bool,
    /// The content is in the data log.
    data_in_log: bool,
}

/// How long the sealer gathers closes before it syncs them. Each batch costs the disk one
/// journal commit or so (the first fsync carries every file's metadata), not three per file; a
/// sealer that synced each file at once made the creates of the next files wait on the journal.
const GATHER: std::time::Duration = std::time::Duration::from_millis(50);

/// The background thread that seals quickly closed files, in batches, in the order they closed.
pub(super) struct Sealer {
    tx: mpsc::Sender<Weak<DirtyFile>>,
}

impl Sealer {
    /// A sealer for the files of the staging directory `dir`.
    pub(super) fn start(dir: &std::path::Path) -> std::io::Result<Sealer> {
        let (tx, rx) = mpsc::channel::<Weak<DirtyFile>>();
        let dir = dir.to_path_buf();
        std::thread::Builder::new().name("hubfs-sealer".into()).spawn(move || {
            // Ends when the staging area (the only sender) goes.
            while let Ok(first) = rx.recv() {
                std::thread::sleep(GATHER);
                if let Err(e) = seal_batch(&dir, std::iter::once(first).chain(rx.try_iter())) {
                    tracing::error!(dir = %dir.display(), error = %e, "could not make closed files durable");
                }
            }
        })?;
        Ok(Sealer { tx })
    }

    pub(super) fn push(&self, f: &Arc<DirtyFile>) {
        // The thread lives as long as the receiver, which only ends with this sender.
        let _ = self.tx.send(Arc::downgrade(f));
    }
}

/// Seals a batch: each quick entry's data and entry file (the opens log once for the entries
/// that are lines in it), then the directory once; a file that moved on since its quick close is
/// sealed in full.
pub(super) fn seal_batch(dir: &std::path::Path, batch: impl Iterator<Item = Weak<DirtyFile>>) -> std::io::Result<()> {
    let mut synced = Vec::new();
    let mut log: Option<Arc<super::opens::OpensLog>> = None;
    let mut data: Option<Arc<super::datalog::DataLog>> = None;
    for f in batch {
        // Gone: committed (or deleted) and dropped, nothing left to make durable.
        let Some(f) = f.upgrade() else { continue };
        if !f.needs_seal() {
            continue;
        }
        let done = match f.sync_quick() {
            Ok(Some(q)) => {
                if q.in_log && log.is_none() {
                    log = Some(f.opens.clone());
                }
                if q.data_in_log && data.is_none() {
                    data = Some(f.log.clone());
                }
                synced.push((f, q));
                continue;
            }
            Ok(None) => f.seal(),
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            tracing::error!(path = %f.repo_path(), error = %e, "could not make a closed file durable");
        }
    }
    if synced.is_empty() {
        return Ok(());
    }
    // Data before the entries that name it.
    if let Some(data) = data {
        data.sync()?;
    }
    if let Some(log) = log {
        log.sync()?;
    }
    // Only new directory entries need it: a data file, or an entry file renamed into place.
    if synced.iter().any(|(_, q)| !(q.in_log && q.data_in_log)) {
        File::open(dir)?.sync_all()?;
    }
    for (f, q) in synced {
        f.settle_quick(&q);
    }
    Ok(())
}

impl super::StagingArea {
    /// Hands a quickly closed file to the background sealer.
    pub fn seal_later(&self, f: &Arc<DirtyFile>) {
        self.sealer.push(f);
    }
}
