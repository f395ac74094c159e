//! Small files read in listing order (small Xet files go in batches instead, see `small_files`): when a reader opens the files of one directory one after
//! another in the order the directory lists them (a data loader, `cat *`, `tar c`, `cp -r` out of
//! the mount), the next files' contents are fetched in parallel ahead of it, so each open finds its
//! bytes cached instead of waiting a round trip.
//!
//! The pattern needs `STREAK` opens in a row of each file's listing successor; any other open
//! resets it and aborts the fetches it started, so a reader in random order costs no more requests
//! than without this. Only files of one cache block at most are fetched, at most `--prefetch-files`
//! of them and `PREFETCH_BYTES` ahead of the reader. Only directories whose listing is cached are
//! followed (a listing is never fetched for this).

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::task::AbortHandle;

use super::{Node, VirtualFs};
use crate::chunk_store::BLOCK_SIZE;

/// Opens in a row of each file's successor before the files after it are fetched.
const STREAK: u32 = 2;

/// Bytes fetched ahead of a reader at most.
const PREFETCH_BYTES: u64 = 64 << 20;

/// Directories followed at once (older ones are forgotten).
pub(super) const FOLLOWED_DIRS: u64 = 1_024;

/// Where a reader of one directory is.
#[derive(Default)]
pub(super) struct Cursor {
    /// Listing index of the last file opened.
    last: Option<usize>,
    /// Opens in a row of the successor of the previous one.
    streak: u32,
    /// Listing index up to which fetches were started.
    ahead: usize,
    /// Fetches started and maybe still running, aborted when the pattern breaks.
    running: Vec<AbortHandle>,
}

impl Cursor {
    fn reset(&mut self) {
        self.streak = 0;
        self.ahead = 0;
        // Fetches already started are left to finish: their requests are sent, and aborting them
        // threw away bytes the Hub had been asked for (8 readers of one folder, each in listing
        // order, cost 1.10–1.13 resolves per file when their interleaved opens broke the pattern and
        // aborted each other's fetches).
        self.running.clear();
    }
}

impl VirtualFs {
    /// A file at `path` was opened for reading at `commit`: follow the listing-order pattern of its
    /// directory and fetch the files after it when the pattern holds.
    pub(super) async fn note_open(&self, commit: &str, path: &str) {
        let files = self.opts.prefetch_files;
        if files == 0 {
            return;
        }
        let Some((parent, listing, idx)) = self.cached_place(commit, path).await else {
            return;
        };
        // Small Xet files go in batches, whatever the order (`small_files`).
        if let Node::File(meta) = &listing.entries[idx].1
            && self.reader.remote.batchable(meta)
        {
            let meta = meta.clone();
            return self.note_small_open(commit, parent, &listing, idx, &meta).await;
        }
        let successor =
            |from: usize| (from + 1..listing.entries.len()).find(|&i| matches!(listing.entries[i].1, Node::File(_)));
        let cursor = self
            .cursors
            .get_with(parent.to_string(), || Arc::new(Mutex::new(Cursor::default())));
        let mut c = cursor.lock();
        match c.last {
            Some(last) if last == idx => return,
            Some(last) if successor(last) == Some(idx) => c.streak += 1,
            _ => c.reset(),
        }
        c.last = Some(idx);
        c.running.retain(|h| !h.is_finished());
        if c.streak < STREAK {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Keep `files` files (and at most PREFETCH_BYTES) fetched ahead of the reader.
        let mut i = idx;
        let mut bytes = 0u64;
        for _ in 0..files {
            let Some(next) = successor(i) else { break };
            let Node::File(meta) = &listing.entries[next].1 else {
                break;
            };
            // A file past the byte budget is left for a later open to reach (not marked as started).
            if bytes + meta.size > PREFETCH_BYTES {
                break;
            }
            bytes += meta.size;
            i = next;
            if i < c.ahead || meta.size == 0 || meta.size > BLOCK_SIZE {
                continue;
            }
            // Reads may join these loads, so the window is checked before one starts rather than
            // a load turned away half-way: prefetch never spends the last tenth of a window.
            if !self.reader.background_ok(meta) {
                break;
            }
            let (reader, meta, commit) = (self.reader.clone(), meta.clone(), commit.to_string());
            let task = rt.spawn(async move {
                if let Err(e) = reader.prefetch_file(&meta, &commit).await {
                    tracing::debug!(path = %meta.remote_path, error = %e, "listing-order prefetch failed");
                }
            });
            c.running.push(task.abort_handle());
        }
        c.ahead = c.ahead.max(i + 1);
    }
}
