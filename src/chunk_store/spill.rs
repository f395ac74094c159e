//! Blocks fetched while the disk write queue was full. Queueing more writes would hold buffers the
//! memory tier has already let go of (room a small budget's readers need); not writing them at all
//! fetched them again from the Hub once memory let them go (under `--memory-limit 128M`, four of a
//! five-block burst). So such a block is written when the memory tier lets it go, by whoever made it
//! let go, which waits for the write: the buffer is in hand then, and its room is freed once the
//! write is done.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::DiskTier;

type BlockKey = (Arc<str>, u64);

#[derive(Default)]
pub(super) struct Spill {
    /// Set once, when the store is given its disk tier (after the memory tier is built).
    disk: OnceLock<DiskTier>,
    /// Blocks turned away by the write queue and still in memory. A leaf lock.
    unwritten: parking_lot::Mutex<HashSet<BlockKey>>,
    /// Blocks being written after memory let them go, so a read meanwhile finds them. A leaf lock.
    writing: parking_lot::Mutex<HashMap<BlockKey, Bytes>>,
}

impl Spill {
    pub(super) fn set_disk(&self, disk: DiskTier) {
        // A store is given one disk tier, right after it is built: a second is ignored.
        let _ = self.disk.set(disk);
    }

    /// The write queue turned the block away: write it when memory lets it go.
    pub(super) fn turned_away(&self, key: &Arc<str>, block: u64) {
        if self.disk.get().is_some() {
            self.unwritten.lock().insert((key.clone(), block));
        }
    }

    /// The memory tier let go of `k`: a block the queue turned away is written now.
    pub(super) async fn left_memory(&self, k: &BlockKey, data: Bytes) {
        if !self.unwritten.lock().remove(k) {
            return;
        }
        let Some(disk) = self.disk.get().cloned() else { return };
        tracing::trace!(
            block = k.1,
            "memory let go of a block the disk queue turned away; writing it now"
        );
        self.writing.lock().insert(k.clone(), data.clone());
        let key = k.clone();
        // The cache runs this listener on the thread that let the block go, which may be outside
        // the runtime (the passthrough join's own thread writes turned-away blocks through the
        // cache): there the write blocks that thread, which is what it is for.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let _ = rt.spawn_blocking(move || disk.write(key, &data)).await;
            }
            Err(_) => disk.write(key, &data),
        }
        self.writing.lock().remove(k);
    }

    /// Whether `k` was turned away and waits for memory to let it go.
    pub(super) fn is_unwritten(&self, k: &BlockKey) -> bool {
        self.unwritten.lock().contains(k)
    }

    /// Writes `k`, turned away, now (blocking the calling thread), with `data`, its bytes from
    /// memory: its content is wanted whole on disk (see `ChunkStore::write_waiting`).
    pub(super) fn write_now(&self, k: &BlockKey, data: &Bytes) {
        if !self.unwritten.lock().remove(k) {
            return;
        }
        let Some(disk) = self.disk.get() else { return };
        self.writing.lock().insert(k.clone(), data.clone());
        disk.write(k.clone(), data);
        self.writing.lock().remove(k);
    }

    /// The bytes of `k` if it is being written now.
    pub(super) fn writing(&self, k: &BlockKey) -> Option<Bytes> {
        self.writing.lock().get(k).cloned()
    }

    #[cfg(test)]
    pub(super) fn is_waiting(&self, k: &BlockKey) -> bool {
        self.unwritten.lock().contains(k)
    }
}

impl super::ChunkStore {
    /// Whether the block's disk write was turned away (the write queue was full) and memory still
    /// holds it: it reaches the disk only when memory lets it go, unless `write_waiting` writes it.
    pub fn waits_for_disk(&self, key: &Arc<str>, block: u64) -> bool {
        let k = (key.clone(), block);
        self.spill.is_unwritten(&k) && self.mem.contains_key(&k)
    }

    /// Writes a block that `waits_for_disk` now, blocking the calling thread: a reader has just
    /// read its content through and the content is to be joined into one file for passthrough,
    /// which waited in vain for such blocks (a burst of blocks fills the write queue on a busy
    /// disk). Its buffer is the memory tier's, so this holds no more memory than memory does.
    pub fn write_waiting(&self, key: &Arc<str>, block: u64) {
        let k = (key.clone(), block);
        if !self.spill.is_unwritten(&k) {
            return;
        }
        if let Some(data) = futures::executor::block_on(self.mem.get(&k)) {
            self.spill.write_now(&k, &data);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use crate::chunk_store::ChunkStore;

    #[tokio::test]
    async fn a_block_the_queue_turned_away_is_written_when_memory_lets_it_go() {
        let dir = tempfile::tempdir().unwrap();
        // Memory for two 4-byte blocks.
        let s = ChunkStore::with_disk(8, dir.path(), 1 << 20).unwrap();
        let key: Arc<str> = Arc::from("xet:00112233445566778899");
        let (k0, k1) = ((key.clone(), 0), (key.clone(), 1));
        s.spill.turned_away(&key, 0);
        s.mem.insert(k0.clone(), Bytes::from_static(b"zero")).await;
        s.mem.insert(k1.clone(), Bytes::from_static(b"one!")).await;
        s.mem.run_pending_tasks().await;
        let disk = s.disk().unwrap().clone();
        assert!(s.spill.is_waiting(&k0));
        assert!(disk.read(&k0, 4, s.pool()).is_none(), "not written while memory has it");
        for i in 2..6 {
            s.mem.insert((key.clone(), i), Bytes::from_static(b"more")).await;
            s.mem.run_pending_tasks().await;
        }
        assert!(!s.mem.contains_key(&k0) && !s.mem.contains_key(&k1), "both let go");
        assert!(!s.spill.is_waiting(&k0));
        assert_eq!(
            disk.read(&k0, 4, s.pool()).as_deref(),
            Some(&b"zero"[..]),
            "written as it left"
        );
        assert!(
            disk.read(&k1, 4, s.pool()).is_none(),
            "a block not turned away is not written then"
        );
    }

    /// The cache may let a block go on a thread outside the runtime (the passthrough join's
    /// thread reads it with `block_on`): the turned-away block is still written, without a panic.
    #[test]
    fn a_block_let_go_outside_the_runtime_is_written_on_that_thread() {
        let dir = tempfile::tempdir().unwrap();
        let s = ChunkStore::with_disk(8, dir.path(), 1 << 20).unwrap();
        let key: Arc<str> = Arc::from("xet:00112233445566778899");
        let k0 = (key.clone(), 0);
        s.spill.turned_away(&key, 0);
        let s2 = s.clone();
        let k = k0.clone();
        std::thread::spawn(move || {
            assert!(
                tokio::runtime::Handle::try_current().is_err(),
                "no runtime on this thread"
            );
            futures::executor::block_on(s2.spill.left_memory(&k, Bytes::from_static(b"zero")));
        })
        .join()
        .expect("no panic outside the runtime");
        let disk = s.disk().unwrap().clone();
        assert!(!s.spill.is_waiting(&k0));
        assert_eq!(disk.read(&k0, 4, s.pool()).as_deref(), Some(&b"zero"[..]));
    }
}
