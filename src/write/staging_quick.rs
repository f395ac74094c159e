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

    /// Whether a seal would do anything: content not yet durable and journaled as closed.
    pub fn needs_seal(&self) -> bool {
        let s = self.st.lock();
        !s.discarded && s.writers == 0 && s.generation > s.committed && !(s.sealed && s.synced == s.generation)
    }
}

/// The background thread that seals quickly closed files, in the order they closed.
pub(super) struct Sealer {
    tx: mpsc::Sender<Weak<DirtyFile>>,
}

impl Sealer {
    pub(super) fn start() -> std::io::Result<Sealer> {
        let (tx, rx) = mpsc::channel::<Weak<DirtyFile>>();
        std::thread::Builder::new().name("hubfs-sealer".into()).spawn(move || {
            // Ends when the staging area (the only sender) goes.
            while let Ok(first) = rx.recv() {
                for f in std::iter::once(first).chain(rx.try_iter()) {
                    // Gone: committed (or deleted) and dropped, nothing left to make durable.
                    let Some(f) = f.upgrade() else { continue };
                    if f.needs_seal()
                        && let Err(e) = f.seal()
                    {
                        tracing::error!(path = %f.repo_path(), error = %e, "could not make a closed file durable");
                    }
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

impl super::StagingArea {
    /// Hands a quickly closed file to the background sealer.
    pub fn seal_later(&self, f: &Arc<DirtyFile>) {
        self.sealer.push(f);
    }
}
