//! What the VFS does for FUSE passthrough (`fuse::passthrough`): on a read-only mount whose FUSE
//! session has it, a file whose content is whole in the disk tier is opened by the kernel on that
//! file, and reads and mmap no longer reach the daemon.
//!
//! The rule: read-only and overlay mounts only (a writable mount's content can change under an
//! open file; an overlay's Hub files do not, its changes being the layer's files), Hub files only, and only when the disk tier holds the content as one file (`HASH.whole`,
//! `chunk_store::whole`). A content becomes whole when a handle on it opens or closes with every
//! block on disk: its blocks are joined in the background, so the next open passes through.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::remote::FileMeta;
use super::{Handle, VirtualFs};

/// Blocks of a content that may still be on their way to disk when its reader closes (the disk
/// tier's write-behind queue holds at most 8).
const LAST_BLOCKS_PENDING: u64 = 8;

/// How long a join waits for them.
const LAST_BLOCKS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Passthrough state of one mount.
#[derive(Default)]
pub(super) struct State {
    /// The FUSE session was granted passthrough (set by the adapter at init).
    granted: AtomicBool,
    /// Contents whose blocks are being joined (one join per content).
    joining: Arc<Mutex<HashSet<Arc<str>>>>,
}

impl VirtualFs {
    /// Called by the FUSE adapter when the kernel granted passthrough: from then on, fully cached
    /// contents are joined into whole files for it.
    pub fn passthrough_granted(&self) {
        self.passthrough.granted.store(true, Ordering::Relaxed);
    }

    fn passthrough_on(&self) -> bool {
        self.opts.passthrough
            && (self.writer.is_none() || self.is_overlay())
            && self.passthrough.granted.load(Ordering::Relaxed)
            && self.reader.store.disk().is_some()
    }

    /// The file the kernel may read the content behind read handle `fh` from, if any, and the
    /// content's size.
    pub fn passthrough_file(&self, fh: u64) -> Option<(PathBuf, u64)> {
        if !self.passthrough_on() {
            return None;
        }
        let h = self.handles.lock().get(&fh).cloned()?;
        let Handle::File { meta, .. } = h.as_ref() else {
            return None;
        };
        let path = self.reader.store.disk()?.whole_file(&meta.id.key(), meta.size)?;
        Some((path, meta.size))
    }

    /// Whether the kernel should read behind read handle `fh` without its readahead (FUSE direct
    /// I/O): a file of a read-only mount that `--direct-io` names. Readahead of a file read in
    /// scattered pieces fetched up to eleven times the bytes a parquet query read (a column
    /// chunk's header and body read one after the other look sequential to the kernel).
    /// When it should, the handle's reads are classified as a program's own (`reads_direct`).
    pub fn direct_io(&self, fh: u64) -> bool {
        let Some(globs) = self.opts.direct_io.as_ref() else {
            return false;
        };
        if self.is_writable() {
            return false;
        }
        let h = self.handles.lock().get(&fh).cloned();
        match h.as_deref() {
            Some(Handle::File { meta, state, .. }) if globs.is_match(meta.remote_path.as_str()) => {
                // A file of a folder being scanned (a full scan's other shards) is read whole: the
                // kernel's readahead and page cache serve its many small reads better.
                let folder = super::sparse::folder_of(&meta.remote_path);
                if self.reader.scans.scanned(&meta.id.key(), folder) {
                    return false;
                }
                state.lock().reads_direct();
                true
            }
            _ => false,
        }
    }

    /// Joins `meta`'s blocks into a whole file in the background if they are all on disk. With
    /// `closing` (a read handle released), also when the last few are still being written and
    /// the others are there: the reader has just read them.
    pub(super) fn join_if_cached(&self, meta: &FileMeta, closing: bool) {
        if !self.passthrough_on() {
            return;
        }
        let Some(disk) = self.reader.store.disk().cloned() else {
            return;
        };
        let key = meta.id.key();
        let size = meta.size;
        // A reader that just read the last block closes before the disk tier has written the
        // last few (they are written behind, at most `LAST_BLOCKS_PENDING` queued): wait for those.
        if size == 0 || disk.is_whole(&key, size) {
            return;
        }
        // Only blocks still on their way to disk (loading, or queued behind) are waited for: a
        // file of a few blocks read fast can close before any of them is written.
        let missing = disk.missing_block_list(&key, size, LAST_BLOCKS_PENDING + 1);
        let store = &self.reader.store;
        let on_their_way = missing
            .iter()
            .all(|&i| store.on_its_way_to_disk(&key, i) || store.waits_for_disk(&key, i));
        let wait = closing && missing.len() as u64 <= LAST_BLOCKS_PENDING && on_their_way;
        if !missing.is_empty() && !wait {
            return;
        }
        if !self.passthrough.joining.lock().insert(key.clone()) {
            return;
        }
        let joining = self.passthrough.joining.clone();
        // A thread of its own: release() runs on a FUSE session thread, outside the runtime, and
        // a join happens once per content.
        let spawned = std::thread::Builder::new().name("hubfs-join".into()).spawn({
            let (key, joining, store) = (key.clone(), joining.clone(), store.clone());
            move || {
                // Blocks the write queue turned away are written now, from memory.
                for &i in &missing {
                    store.write_waiting(&key, i);
                }
                let deadline = std::time::Instant::now() + LAST_BLOCKS_WAIT;
                while !disk.has_all_blocks(&key, size) && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                match disk.join_blocks(&key, size) {
                    Ok(true) => tracing::debug!(%key, size, "content joined into one file for passthrough"),
                    Ok(false) => {}
                    Err(e) => tracing::debug!(%key, error = %e, "could not join a content's blocks"),
                }
                joining.lock().remove(&key);
            }
        });
        if spawned.is_err() {
            joining.lock().remove(&key);
        }
    }
}
