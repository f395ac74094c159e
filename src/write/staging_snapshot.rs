//! What uploads read of a staged file: snapshots (a frozen copy of one generation, with its
//! sha256 and preupload sample) and in-place reads of the staged file itself.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::DirtyFile;
use crate::hub_client::SAMPLE_BYTES;

/// What a commit round saw of a file.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub generation: u64,
    /// The repo path the file had at this generation (a rename moves the generation too). A
    /// round gathers its files by path and snapshots them later: one renamed in between must not
    /// be committed, and marked clean, at the path it left.
    pub path: String,
    pub size: u64,
    pub sha256: String,
    pub sample: Vec<u8>,
    /// The content is already in LFS/Xet storage: commit it as an LFS file, no preupload.
    pub uploaded: bool,
    /// Its Xet hash, when it was uploaded through Xet for a bucket (which names content by it).
    pub xet_hash: Option<String>,
    /// A copy of exactly these bytes, deleted when the last snapshot holding it goes.
    pub frozen: Option<std::sync::Arc<Frozen>>,
}

impl Snapshot {
    /// The frozen copy of exactly the snapshot's bytes.
    pub fn frozen(&self) -> std::io::Result<&Frozen> {
        self.frozen
            .as_deref()
            .ok_or_else(|| std::io::Error::other("this snapshot has no copy to read (already uploaded)"))
    }

    /// The whole content (small files sent inline in a commit).
    pub fn read_all(&self) -> std::io::Result<Bytes> {
        match self.frozen()? {
            Frozen::File(path) => Ok(Bytes::from(std::fs::read(path)?)),
            Frozen::Memory(b) => Ok(b.clone()),
        }
    }
}

/// A staged file's content at one generation, to upload from the staged file itself.
#[derive(Debug, Clone)]
pub struct InPlace {
    pub generation: u64,
    pub path: String,
    pub size: u64,
    pub sample: Vec<u8>,
    pub data_path: PathBuf,
}

/// Where frozen copies live, below the staging directory.
pub(super) const UPLOADS_DIR: &str = "uploads";
/// Makes frozen copies' names unique within a run.
static FROZEN_SEQ: AtomicU64 = AtomicU64::new(0);

/// Files up to this size are frozen in memory rather than copied to a file: a round of thousands
/// of small files would otherwise create (and delete) a copy of each, and their content goes
/// inline in the commit body anyway.
pub const FROZEN_IN_MEMORY_MAX: u64 = 64 << 10;

/// A frozen copy of a staged file's content for one upload: a file (removed when dropped) or,
/// for small files, the bytes themselves.
#[derive(Debug)]
pub enum Frozen {
    File(PathBuf),
    Memory(Bytes),
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Frozen::File(path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl DirtyFile {
    /// Records that `snap` (a snapshot of this file) is stored in LFS/Xet.
    pub fn set_uploaded(&self, snap: &Snapshot) {
        let mut s = self.st.lock();
        if s.generation == snap.generation {
            // The frozen copy is no longer needed: the commit only names the sha256.
            s.uploaded = Some(Snapshot {
                uploaded: true,
                frozen: None,
                ..snap.clone()
            });
        }
    }

    /// Records an upload read straight from the staged file (`in_place`), if nothing was written
    /// since; `false` when the bytes sent are no longer the file's (the round uploads what it has
    /// then).
    pub fn set_uploaded_in_place(&self, now: InPlace, sha256: String, xet_hash: Option<String>) -> bool {
        if !self.unchanged_since(now.generation) {
            return false;
        }
        self.set_uploaded(&Snapshot {
            generation: now.generation,
            path: now.path,
            size: now.size,
            sha256,
            sample: now.sample,
            uploaded: true,
            xet_hash,
            frozen: None,
        });
        true
    }

    /// The current content for an upload read straight from the staged file (no frozen copy):
    /// its generation, path, size and preupload sample. `None` while a write is in flight. The
    /// uploader hashes what it reads, so the sha256 always names the bytes sent; [`Self::unchanged_since`]
    /// afterwards says whether they are still this file's content.
    pub fn in_place(&self) -> std::io::Result<Option<InPlace>> {
        if self.in_flight.load(Ordering::SeqCst) != 0 {
            return Ok(None);
        }
        let (generation, size, path) = {
            let s = self.st.lock();
            (s.generation, s.size, s.path.clone())
        };
        // The uploader reads the data file itself; a file the data log holds is small and goes
        // through a snapshot.
        if self.in_log() {
            return Ok(None);
        }
        let mut sample = vec![0u8; SAMPLE_BYTES.min(size as usize)];
        let n = self.read_some(&mut sample, 0)?;
        sample.truncate(n);
        Ok(Some(InPlace {
            generation,
            path,
            size,
            sample,
            data_path: self.data_path.clone(),
        }))
    }

    /// For a file created empty and only appended to since: its size, a prefix no write can
    /// change any more without clearing `grown_only` first (a write below the size clears it
    /// before its bytes move). `None` for any other file, while a write is in flight (an append
    /// that started earlier may still be filling a hole below the size), and for a copy-up.
    pub fn stable_prefix(&self) -> Option<u64> {
        if !self.grown_only.load(Ordering::SeqCst) || self.lazy.lock().is_some() {
            return None;
        }
        let size = self.st.lock().size;
        (self.in_flight.load(Ordering::SeqCst) == 0).then_some(size)
    }

    /// Whether the file was only ever appended to since it was created empty.
    pub fn grown_only(&self) -> bool {
        self.grown_only.load(Ordering::SeqCst)
    }

    /// Reads exactly `len` bytes at `offset` from the staged data (an upload that follows the
    /// writer; the caller knows the range is written).
    pub fn read_exact_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            match self.read_some(&mut buf[done..], offset + done as u64)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => done += n,
            }
        }
        Ok(buf)
    }

    /// Whether the current content is already in LFS/Xet storage (uploaded at an earlier close).
    pub fn uploaded_now(&self) -> bool {
        let s = self.st.lock();
        s.uploaded.as_ref().is_some_and(|u| u.generation == s.generation)
    }

    /// Whether nothing was written since `generation` and no write is in flight: bytes read from
    /// the staged file since then were this generation's.
    pub fn unchanged_since(&self, generation: u64) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0 && self.st.lock().generation == generation
    }

    /// Size, sha256 and the preupload sample of the current content, and a frozen copy of it to
    /// upload from (or the snapshot taken when this content was uploaded, if nothing changed
    /// since). The copy matters: the staged file may be written again while its upload runs (a
    /// writer reopening it once close() returned), and bytes that differ from the sha256 declared
    /// for them would bind that sha256 to other content on the Hub.
    pub fn snapshot(&self) -> std::io::Result<Snapshot> {
        if self.lazy.lock().is_some() {
            return Err(std::io::Error::other(
                "a copy-up still missing its Hub bytes cannot be uploaded (fill it first)",
            ));
        }
        for attempt in 0..50u32 {
            let (generation, size, repo_path) = {
                let s = self.st.lock();
                if let Some(u) = s.uploaded.as_ref().filter(|u| u.generation == s.generation) {
                    return Ok(u.clone());
                }
                (s.generation, s.size, s.path.clone())
            };
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                let (frozen, sha256, sample) = if size <= FROZEN_IN_MEMORY_MAX {
                    let bytes = self.read_exactly(size)?;
                    let sha256 = hex::encode(Sha256::digest(&bytes));
                    let sample = bytes[..bytes.len().min(SAMPLE_BYTES)].to_vec();
                    (Frozen::Memory(bytes), sha256, sample)
                } else {
                    let n = FROZEN_SEQ.fetch_add(1, Ordering::Relaxed);
                    let path = self
                        .data_path
                        .parent()
                        .unwrap_or(Path::new("."))
                        .join(UPLOADS_DIR)
                        .join(format!("{}-{n}.data", self.id));
                    let frozen = Frozen::File(path.clone());
                    let (sha256, sample) = self.copy_and_hash(&path, size)?;
                    (frozen, sha256, sample)
                };
                let unchanged = self.in_flight.load(Ordering::SeqCst) == 0 && self.st.lock().generation == generation;
                if unchanged {
                    return Ok(Snapshot {
                        generation,
                        path: repo_path,
                        size,
                        sha256,
                        sample,
                        uploaded: false,
                        xet_hash: None,
                        frozen: Some(std::sync::Arc::new(frozen)),
                    });
                }
            }
            // Written meanwhile: try again once the writer is done.
            std::thread::sleep(std::time::Duration::from_millis(2 + u64::from(attempt)));
        }
        Err(std::io::Error::other(
            "the file kept changing while it was being copied for upload; it will be tried again",
        ))
    }

    /// The first `size` bytes of the staged file (zeros past its end on disk, as in `copy_and_hash`).
    pub(super) fn read_exactly(&self, size: u64) -> std::io::Result<Bytes> {
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            let n = self.read_some(&mut buf[done..], done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(Bytes::from(buf))
    }

    /// Copies the first `size` bytes of the staged file to `dest`, hashing them on the way.
    fn copy_and_hash(&self, dest: &Path, size: u64) -> std::io::Result<(String, Vec<u8>)> {
        let mut out = File::create(dest)?;
        let mut hasher = Sha256::new();
        let mut sample = Vec::with_capacity(SAMPLE_BYTES);
        let mut buf = vec![0u8; 1 << 20];
        let mut done = 0u64;
        while done < size {
            let want = (buf.len() as u64).min(size - done) as usize;
            let n = self.read_some(&mut buf[..want], done)?;
            let chunk = if n == 0 {
                // Shorter on disk than recorded (only after a crash): the zeros a read returns.
                buf[..want].fill(0);
                &buf[..want]
            } else {
                &buf[..n]
            };
            if sample.len() < SAMPLE_BYTES {
                let take = (SAMPLE_BYTES - sample.len()).min(chunk.len());
                sample.extend_from_slice(&chunk[..take]);
            }
            hasher.update(chunk);
            out.write_all(chunk)?;
            done += chunk.len() as u64;
        }
        Ok((hex::encode(hasher.finalize()), sample))
    }
}
