//! Reading and filling an overlay's copy-ups (`write::lazy`): a staged copy of a Hub file that holds
//! only what was written, the rest read from the Hub file through the usual read path (caches,
//! prefetch, sparse reads) until publishing needs the whole content.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

use super::error::{VfsError, VfsResult};
use super::read::ReadState;
use super::{VirtualFs, read_staged};
use crate::write::staging::DirtyFile;

/// What a fill asks of the read path at once: a block of the chunk store.
const FILL_BLOCK: u64 = crate::chunk_store::BLOCK_SIZE;

impl VirtualFs {
    /// The read state of a copy-up's base, per staged file, so a reader going through it is seen
    /// as sequential (and prefetched) as on a Hub file.
    fn base_state(&self, id: u64) -> Arc<Mutex<ReadState>> {
        self.copy_up_reads
            .get_with(id, || Arc::new(Mutex::new(ReadState::default())))
    }

    /// Reads a staged file: its local bytes, and for a copy-up the base's bytes where nothing was
    /// written.
    pub(super) async fn read_local(&self, file: &Arc<DirtyFile>, offset: u64, size: u32) -> VfsResult<Bytes> {
        let missing = file.missing(offset, size as u64);
        let local = read_staged(file.clone(), offset, size).await?;
        let base = match file.base() {
            Some(b) if !missing.is_empty() => b,
            _ => return Ok(local),
        };
        let end = offset + local.len() as u64;
        let mut buf = BytesMut::from(&local[..]);
        let state = self.base_state(file.id());
        for (s, e) in missing {
            let e = e.min(end);
            let mut at = s;
            while at < e {
                let want = (e - at).min(u32::MAX as u64) as u32;
                let data = self.reader.read(&base.meta, &base.commit, &state, at, want).await?;
                if data.is_empty() {
                    return Err(VfsError::ShortRead {
                        offset: at,
                        wanted: (e - at),
                        got: 0,
                    });
                }
                let n = data.len().min((e - at) as usize);
                let from = (at - offset) as usize;
                buf[from..from + n].copy_from_slice(&data[..n]);
                at += n as u64;
            }
        }
        Ok(buf.freeze())
    }

    /// Brings every byte of a copy-up into its staged file (before it is uploaded), after which it
    /// is a plain staged file.
    pub(crate) async fn fill_copy_up(&self, file: &Arc<DirtyFile>) -> VfsResult<()> {
        let Some(base) = file.base() else { return Ok(()) };
        let state = Mutex::new(ReadState::default());
        state.lock().expect_in_order();
        loop {
            let missing = file.missing(0, file.size());
            if missing.is_empty() {
                break;
            }
            for (s, e) in missing {
                let mut at = s;
                while at < e {
                    let want = (e - at).min(FILL_BLOCK) as u32;
                    let data = self.reader.read(&base.meta, &base.commit, &state, at, want).await?;
                    if data.is_empty() {
                        return Err(VfsError::ShortRead {
                            offset: at,
                            wanted: e - at,
                            got: 0,
                        });
                    }
                    let n = data.len().min((e - at) as usize);
                    let (f, part) = (file.clone(), data.slice(..n));
                    tokio::task::spawn_blocking(move || f.fill_at(at, &part))
                        .await
                        .map_err(|e| VfsError::Io(e.to_string()))??;
                    at += n as u64;
                }
            }
        }
        let f = file.clone();
        tokio::task::spawn_blocking(move || f.finish_copy_up())
            .await
            .map_err(|e| VfsError::Io(e.to_string()))??;
        self.copy_up_reads.invalidate(&file.id());
        Ok(())
    }
}
