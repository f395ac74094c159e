//! Whole files in the disk tier: a content whose every block is on disk is joined into one file,
//! `HASH.whole`, holding the content at its own offsets (a one-block content's block file already
//! is such a file).
//!
//! Why: FUSE passthrough (`fuse::passthrough`) hands the kernel one backing file per open file,
//! and the kernel then serves reads and mmap from it without the daemon. Block files cannot be
//! that file. The join copies with `O_DIRECT` (no page cache, no CPU copy; `copy_file_range`
//! where the filesystem refuses it), is made durable before it is renamed into place (a crash
//! leaves a temporary file, never a short or empty whole file), and then the block files are
//! deleted: the tier serves those blocks from the whole file (`locate`), so the content takes its
//! size on disk once. The whole file is indexed and weighed like the blocks were, and evicted
//! like them.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use super::BLOCK_SIZE;
use super::disk::{DiskTier, WHOLE, rel_path};

/// Bytes of block `idx` of a content of `size` bytes.
fn block_len(size: u64, idx: u64) -> u64 {
    size.saturating_sub(idx * BLOCK_SIZE).min(BLOCK_SIZE)
}

impl DiskTier {
    /// The file holding content `key` (`size` bytes) at its own offsets, if the tier has it: its
    /// whole file, or for a content of one block, that block's file (nothing to join).
    pub fn whole_file(&self, key: &Arc<str>, size: u64) -> Option<PathBuf> {
        if size > 0 && size <= BLOCK_SIZE && self.index.get(&(key.clone(), 0)) == Some(size) {
            let path = self.root.join(rel_path(key, 0)?);
            return match std::fs::metadata(&path) {
                Ok(m) if m.len() == size => Some(path),
                _ => None,
            };
        }
        let id = (key.clone(), WHOLE);
        if self.index.get(&id)? != size {
            return None;
        }
        let path = self.root.join(rel_path(key, WHOLE)?);
        match std::fs::metadata(&path) {
            Ok(m) if m.len() == size => Some(path),
            _ => {
                self.index.invalidate(&id);
                None
            }
        }
    }

    /// Whether the index says content `key` (`size` bytes) is whole on disk ([`Self::whole_file`]
    /// without looking at the file: cheap enough for every open).
    pub fn is_whole(&self, key: &Arc<str>, size: u64) -> bool {
        (size > 0 && size <= BLOCK_SIZE && self.index.get(&(key.clone(), 0)) == Some(size))
            || self.index.get(&(key.clone(), WHOLE)) == Some(size)
    }

    /// Whether every block of content `key` (`size` bytes) is on disk as a block file.
    pub fn has_all_blocks(&self, key: &Arc<str>, size: u64) -> bool {
        size > 0 && self.missing_blocks(key, size, 1) == 0
    }

    /// How many blocks of content `key` (`size` bytes) are not on disk as block files, counting
    /// up to `limit` (a huge file's open does not walk its every block).
    pub fn missing_blocks(&self, key: &Arc<str>, size: u64, limit: u64) -> u64 {
        self.missing_block_list(key, size, limit).len() as u64
    }

    /// The indices of the blocks `missing_blocks` counts.
    pub fn missing_block_list(&self, key: &Arc<str>, size: u64, limit: u64) -> Vec<u64> {
        (0..size.div_ceil(BLOCK_SIZE))
            .filter(|&i| self.index.get(&(key.clone(), i)) != Some(block_len(size, i)))
            .take(limit as usize)
            .collect()
    }

    /// Joins the blocks of content `key` (`size` bytes) into its whole file, then drops the
    /// block files. `Ok(false)`: a block is missing (nothing changed). Blocking: call from a
    /// blocking thread.
    pub fn join_blocks(&self, key: &Arc<str>, size: u64) -> std::io::Result<bool> {
        if self.whole_file(key, size).is_some() {
            return Ok(true);
        }
        if !self.has_all_blocks(key, size) {
            return Ok(false);
        }
        let Some(rel) = rel_path(key, WHOLE) else {
            return Ok(false);
        };
        let path = self.root.join(rel);
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        let tmp = dir.join(format!(".tmp.{}.{}", std::process::id(), rand::random::<u64>()));
        let mut r = self.join_into(key, size, &tmp, true);
        let refused = match &r {
            Ok(None) => true,
            Err(e) => e.raw_os_error() == Some(libc::EINVAL),
            Ok(Some(_)) => false,
        };
        if refused {
            // A filesystem or device that refuses `O_DIRECT` (tmpfs, some overlays, an alignment
            // it does not take): through the page cache instead.
            let _ = std::fs::remove_file(&tmp);
            r = self.join_into(key, size, &tmp, false);
        }
        let r = r.map(|joined| joined == Some(true)).and_then(|joined| {
            if joined {
                std::fs::rename(&tmp, &path)?;
            }
            Ok(joined)
        });
        match r {
            Ok(true) => {
                self.index.insert((key.clone(), WHOLE), size);
                for idx in 0..size.div_ceil(BLOCK_SIZE) {
                    // Served from the whole file from now on; eviction deletes the block file.
                    self.index.invalidate(&(key.clone(), idx));
                }
                self.index.run_pending_tasks();
                Ok(true)
            }
            other => {
                let _ = std::fs::remove_file(&tmp);
                other
            }
        }
    }

    /// Writes the blocks of `key` into the new file `tmp`, durably. `Ok(None)`: asked for
    /// `direct` and the filesystem does not do `O_DIRECT`; `Ok(Some(false))`: a block is missing.
    fn join_into(
        &self,
        key: &Arc<str>,
        size: u64,
        tmp: &std::path::Path,
        direct: bool,
    ) -> std::io::Result<Option<bool>> {
        let (out, mut buf) = if direct {
            let Some(out) = super::direct::create(tmp)? else {
                return Ok(None);
            };
            let buf = super::direct::CopyBuf::new().ok_or(std::io::ErrorKind::OutOfMemory)?;
            (out, Some(buf))
        } else {
            (
                std::fs::OpenOptions::new().write(true).create_new(true).open(tmp)?,
                None,
            )
        };
        for idx in 0..size.div_ceil(BLOCK_SIZE) {
            let Some(block) = rel_path(key, idx) else {
                return Ok(Some(false));
            };
            let block = self.root.join(block);
            let opened = match &buf {
                Some(_) => {
                    super::direct::open_read(&block).map(|f| f.ok_or(std::io::Error::from_raw_os_error(libc::EINVAL)))
                }
                None => Ok(File::open(&block)),
            };
            let src = match opened.and_then(|f| f) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(false)),
                Err(e) => return Err(e),
            };
            let len = block_len(size, idx);
            if src.metadata()?.len() != len {
                return Ok(Some(false));
            }
            match &mut buf {
                Some(buf) => super::direct::copy_at(&src, len, &out, idx * BLOCK_SIZE, buf)?,
                None => copy_range(&src, &out, idx * BLOCK_SIZE, len)?,
            }
        }
        if buf.is_some() {
            // The last block's partial page went out padded.
            out.set_len(size)?;
        }
        out.sync_data()?;
        if buf.is_none() {
            // The copy went through the page cache; the blocks' readers have their bytes already.
            let _ = rustix::fs::fadvise(&out, 0, None, rustix::fs::Advice::DontNeed);
        }
        Ok(Some(true))
    }
}

/// Copies `len` bytes of `src` (from its start) into `out` at `at`, in the kernel.
fn copy_range(src: &File, out: &File, at: u64, len: u64) -> std::io::Result<()> {
    let (mut off_in, mut off_out) = (0u64, at);
    let mut left = len as usize;
    while left > 0 {
        let n = match rustix::fs::copy_file_range(src, Some(&mut off_in), out, Some(&mut off_out), left) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        }
        left -= n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk_store::buffer_pool::BufferPool;

    fn wait_indexed(t: &DiskTier, k: &(Arc<str>, u64)) {
        for _ in 0..200 {
            if t.index.contains_key(k) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn both_ways_of_joining_write_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 30).unwrap();
        let key: Arc<str> = Arc::from("xet:00112233445566778899");
        let size = BLOCK_SIZE + 4096 * 3 + 17;
        let data: Vec<u8> = (0..size).map(|i| (i * 13 + i / 977) as u8).collect();
        for idx in 0..2u64 {
            let a = (idx * BLOCK_SIZE) as usize;
            let b = (a + BLOCK_SIZE as usize).min(data.len());
            t.write((key.clone(), idx), &data[a..b]);
            wait_indexed(&t, &(key.clone(), idx));
        }
        for direct in [true, false] {
            let tmp = dir.path().join(format!("joined-{direct}"));
            match t.join_into(&key, size, &tmp, direct).unwrap() {
                Some(joined) => assert!(joined, "every block is there"),
                None => {
                    assert!(direct, "only O_DIRECT may be refused");
                    continue;
                }
            }
            let got = std::fs::read(&tmp).unwrap();
            assert_eq!(got.len() as u64, size, "cut to the content's size (direct: {direct})");
            assert!(got == data, "the content's bytes (direct: {direct})");
        }
        let missing: Arc<str> = Arc::from("xet:ffeeddccbbaa99887766");
        t.write((missing.clone(), 0), &data[..BLOCK_SIZE as usize]);
        wait_indexed(&t, &(missing.clone(), 0));
        let tmp = dir.path().join("joined-missing");
        assert_ne!(
            t.join_into(&missing, size, &tmp, true).unwrap(),
            Some(true),
            "block 1 is missing"
        );
    }

    #[test]
    fn blocks_join_into_a_whole_file_that_serves_them() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 30).unwrap();
        let key: Arc<str> = Arc::from("xet:0123456789abcdef");
        let size = 2 * BLOCK_SIZE + 1234;
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4096) as u8).collect();
        assert!(!t.join_blocks(&key, size).unwrap(), "no blocks yet");
        for idx in 0..3u64 {
            let a = (idx * BLOCK_SIZE) as usize;
            let b = (a + BLOCK_SIZE as usize).min(data.len());
            if idx == 1 {
                assert!(!t.has_all_blocks(&key, size));
                assert_eq!(t.missing_blocks(&key, size, 8), 2);
                assert_eq!(t.missing_blocks(&key, size, 1), 1, "counted up to the limit");
            }
            t.write((key.clone(), idx), &data[a..b]);
            wait_indexed(&t, &(key.clone(), idx));
        }
        assert!(t.has_all_blocks(&key, size));
        assert!(!t.is_whole(&key, size));
        assert!(t.join_blocks(&key, size).unwrap());
        assert!(t.is_whole(&key, size));
        let whole = t.whole_file(&key, size).expect("the whole file");
        assert_eq!(std::fs::read(&whole).unwrap(), data);
        assert!(t.whole_file(&key, size + 1).is_none(), "another size is not it");
        // A one-block content is its block file: nothing to join.
        let small: Arc<str> = Arc::from("xet:fedcba9876543210");
        t.write((small.clone(), 0), b"tiny content");
        wait_indexed(&t, &(small.clone(), 0));
        let one = t.whole_file(&small, 12).expect("the block file");
        assert!(t.is_whole(&small, 12));
        assert_eq!(std::fs::read(&one).unwrap(), b"tiny content");
        assert!(t.join_blocks(&small, 12).unwrap());
        assert_eq!(t.whole_file(&small, 12), Some(one), "still the block file");
        assert!(
            !dir.path().join("blocks").join(rel_path(&key, 0).unwrap()).exists(),
            "the block files are gone"
        );
        assert_eq!(
            t.weighted_size(),
            (size.div_ceil(1024) + 1) * 1024,
            "each content counts once (in KiB)"
        );
        // Blocks and ranges come from the whole file now.
        let pool = BufferPool::new(BLOCK_SIZE as usize, 2);
        let b2 = t.read(&(key.clone(), 2), 1234, &pool).expect("block 2");
        assert_eq!(&b2[..], &data[2 * BLOCK_SIZE as usize..]);
        let r = t.read_range(&(key.clone(), 1), BLOCK_SIZE, 10, 20).expect("a range");
        assert_eq!(&r[..], &data[BLOCK_SIZE as usize + 10..BLOCK_SIZE as usize + 20]);
        // A reopen (remount) finds it again.
        drop(t);
        let t = DiskTier::open(dir.path(), 1 << 30).unwrap();
        wait_indexed(&t, &(key.clone(), WHOLE));
        assert_eq!(t.whole_file(&key, size), Some(whole));
    }
}
