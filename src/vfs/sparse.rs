//! Sparse reads: the bytes a seek or a not-yet-sequential read asks for, fetched exactly (whole
//! pages; a read of the end of a file, its last 64 KiB) and kept as parts of their blocks, and
//! whole-block loads that fetch only what those parts lack. A parquet query reads footers and
//! column chunks scattered over a file; it costs what it reads, and a later scan of the same file
//! does not fetch those bytes again.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::try_join_all;

use super::error::{VfsError, VfsResult};
use super::read::Reader;
use super::remote::FileMeta;
use crate::chunk_store::BLOCK_SIZE;

/// A sparse read is rounded out to whole pages (the kernel asks in pages but at the end of a
/// file). Not to Xet chunks (64 KiB on average): these reads go through the Hub's `/resolve/`
/// with an HTTP Range, which serves exact bytes, and rounding them out to 64 KiB fetched up to 16
/// times the bytes of a 4 KiB read while saving a request only where reads were next to each
/// other (a footer, which `TAIL` covers).
pub const SPARSE_UNIT: u64 = 4 << 10;

/// A sparse read that reaches the end of the file takes this much before it too (within its
/// block): the formats read sparsely keep their index there (parquet's footer before the 8 bytes
/// that give its length, zip's central directory), and their readers ask for it in two reads, the
/// length first.
pub const TAIL: u64 = 64 << 10;

/// Gaps between parts of a block that are closer than this are fetched as one range when the
/// block is loaded whole: a request costs more than fetching a few pages again. Not more: a
/// strided reader's 64 KiB parts every 600 KiB, joined, were the whole block fetched again.
const MERGE_BELOW: u64 = 16 << 10;

/// Blocks from this size on are assembled in pooled buffers, as the fetchers do.
const POOLED_MIN: u64 = 1 << 20;

/// Files whose content several runs have read in order (by any handle): DuckDB's threads each
/// open a file and read a 6 MiB row group at a time, each a run of its own, and reading the first
/// MiB of every row group exactly cost a full scan at 30 ms 1.7 times its time. From the second
/// such run on, a file's runs are sequential from their first read. Per mount, by content key.
///
/// A folder in which a file was scanned lately (within [`FOLDER_SCAN_FOR`]) is being scanned too:
/// the other shards of a dataset are read the same way, so their runs are sequential from their
/// first read as well, rather than each file's first two row groups paying the round trips again,
/// and they are opened through the page cache (`VirtualFs::direct_io`). A column query never
/// proves a run (its chunks are far smaller than a run must read), so it leaves no mark; one that
/// follows a full scan of the same folder within that time loads whole blocks, as the scan did.
#[derive(Default)]
pub struct Scans(parking_lot::Mutex<ScanCounts>);

#[derive(Default)]
struct ScanCounts {
    /// Runs proven per content key.
    files: std::collections::HashMap<Arc<str>, u32>,
    /// Per folder: files scanned in it, and when the last one was.
    folders: std::collections::HashMap<String, (u32, std::time::Instant)>,
}

/// Runs after which a file counts as scanned.
const SCANNED_AFTER: u32 = 2;

/// Files scanned in a folder after which its other files count as scanned.
const FOLDER_SCANNED_AFTER: u32 = 1;

/// How long a folder counts as being scanned after its last file was.
const FOLDER_SCAN_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Files (and folders) remembered at most (the table starts again when full).
const SCANS_KEPT: usize = 4096;

impl Scans {
    /// Whether `key`'s content, a file in `folder` (its repo path's parent), is being scanned.
    pub fn scanned(&self, key: &Arc<str>, folder: &str) -> bool {
        let m = self.0.lock();
        m.files.get(key).is_some_and(|n| *n >= SCANNED_AFTER)
            || m.folders
                .get(folder)
                .is_some_and(|(n, at)| *n >= FOLDER_SCANNED_AFTER && at.elapsed() < FOLDER_SCAN_FOR)
    }

    /// A run over `key`'s content, a file in `folder`, turned sequential.
    pub fn proven(&self, key: &Arc<str>, folder: &str) {
        let mut m = self.0.lock();
        if m.files.len() >= SCANS_KEPT && !m.files.contains_key(key) {
            m.files.clear();
        }
        let n = m.files.entry(key.clone()).or_default();
        *n += 1;
        if *n != SCANNED_AFTER {
            return;
        }
        if m.folders.len() >= SCANS_KEPT && !m.folders.contains_key(folder) {
            m.folders.clear();
        }
        let now = std::time::Instant::now();
        let f = m.folders.entry(folder.to_string()).or_insert((0, now));
        // A folder scanned long ago starts counting again.
        if f.1.elapsed() >= FOLDER_SCAN_FOR {
            f.0 = 0;
        }
        *f = (f.0 + 1, now);
    }
}

/// The folder of repo path `path` ("" at the root).
pub fn folder_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

impl Reader {
    /// Bytes `[offset, end)` of `file` for a sparse read: per block, from its load if `join` says
    /// the block is on its way whole (or held), else what its parts have and the rest fetched and
    /// kept as parts, with up to `ahead` bytes past `end` (within its block) kept too.
    pub(super) async fn fetch_sparse(
        &self,
        file: &FileMeta,
        commit: &str,
        key: &Arc<str>,
        (offset, end): (u64, u64),
        ahead: u64,
        join: &(dyn Fn(u64) -> bool + Sync),
    ) -> VfsResult<Bytes> {
        let (first, last) = (offset / BLOCK_SIZE, (end - 1) / BLOCK_SIZE);
        let unit = SPARSE_UNIT;
        let blocks = (first..=last).map(|idx| async move {
            let base = idx * BLOCK_SIZE;
            let len = file.size.saturating_sub(base).min(BLOCK_SIZE);
            let (from, to) = (offset.max(base) - base, end.min(base + BLOCK_SIZE) - base);
            let whole = || async {
                let b = self.block(file, commit, key, idx).await?;
                Ok::<_, VfsError>(b.slice(from as usize..(to as usize).min(b.len())))
            };
            if join(idx) {
                return whole().await;
            }
            let fetch_to = if idx == last { (to + ahead).min(len) } else { to };
            let (mut rf, rt) = (from / unit * unit, (fetch_to.div_ceil(unit) * unit).min(len));
            if base + to >= file.size {
                rf = rf.min(len.saturating_sub(TAIL) / unit * unit);
            }
            let (mut pieces, gaps, fetching) = self.store.partial().claim(key, idx, rf, rt).await;
            if !gaps.is_empty() {
                tracing::trace!(key = %key, block = idx, ?gaps, "sparse read: exact ranges from the Hub");
            }
            // A load of the block that began since `join` was asked: it waits for fetches marked
            // before it began, and this one was not, so it would fetch these bytes as well. Or one
            // that ended since the read looked in the cache: its block is in memory now (a file's
            // listing-order prefetch landing as its reader opens it).
            if !gaps.is_empty() && (self.store.is_loading(key, idx) || self.store.is_loaded(key, idx)) {
                drop(fetching);
                return whole().await;
            }
            let fetched = try_join_all(
                gaps.iter()
                    .map(|g| self.remote.fetch_exact(file, commit, base + g.start, g.end - g.start)),
            )
            .await?;
            for (g, b) in gaps.iter().zip(fetched) {
                self.store.partial().insert(key, idx, g.start, &b);
                pieces.push((g.start, b));
            }
            // Adopted before the mark goes: a load of the block waiting for this fetch then finds
            // the block adopted instead of its parts gone.
            if !gaps.is_empty() && self.store.partial().gaps(key, idx, len).is_empty() {
                self.adopt_parts(key, idx, len).await;
            }
            drop(fetching);
            cover(pieces, from, to).ok_or(VfsError::ShortRead {
                offset: base + from,
                wanted: to - from,
                got: 0,
            })
        });
        let parts = try_join_all(blocks).await?;
        if parts.len() == 1 {
            return Ok(parts.into_iter().next().unwrap_or_default());
        }
        let mut out = BytesMut::with_capacity((end - offset) as usize);
        parts.iter().for_each(|p| out.extend_from_slice(p));
        Ok(out.freeze())
    }

    /// Block `idx` (`len` bytes), whose parts now cover it, made a block of the store: assembled
    /// once into a pooled buffer and kept like a loaded block (on disk too), its parts let go. A
    /// reader that reads a whole file in scattered pieces (pyarrow's threads reading column chunks
    /// side by side through one descriptor) then has it cached as a later scan wants it.
    async fn adopt_parts(&self, key: &Arc<str>, idx: u64, len: u64) {
        let parts = self.store.partial().take(key, idx);
        // Taken whole or not at all: parts let go in between leave nothing to adopt.
        if let Some(b) = self.whole_block(&parts, len) {
            tracing::trace!(key = %key, block = idx, "sparse reads covered a whole block");
            self.store.adopt(key, idx, b).await;
        }
    }

    /// Block bytes `[0, len)` out of `pieces` (in order; `None` if they leave a hole): the one
    /// piece that holds them all as it is (a small file read in one go), else copied once into a
    /// buffer, pooled from 1 MiB on as fetched blocks are (an 8 MiB pooled buffer for each small
    /// file made 10,000 of them read three times slower).
    fn whole_block(&self, pieces: &[(u64, Bytes)], len: u64) -> Option<Bytes> {
        if let Some((_, b)) = pieces.iter().find(|(s, b)| *s == 0 && b.len() as u64 >= len) {
            return Some(b.slice(..len as usize));
        }
        let mut pooled = (len >= POOLED_MIN).then(|| self.store.pool().acquire(len as usize));
        let mut plain = BytesMut::new();
        if pooled.is_none() {
            plain.reserve(len as usize);
        }
        let mut at = 0u64;
        for (s, b) in pieces {
            let e = s + b.len() as u64;
            if e <= at {
                continue;
            }
            if *s > at {
                return None;
            }
            let bytes = &b[(at - s) as usize..(e.min(len) - s) as usize];
            match pooled.as_mut() {
                Some(p) => p.extend_from_slice(bytes),
                None => plain.extend_from_slice(bytes),
            }
            at = e.min(len);
            if at == len {
                break;
            }
        }
        (at == len).then(|| pooled.map_or_else(|| plain.freeze(), |p| p.freeze()))
    }

    /// Block `idx` of `file`, whole, from the Hub: only the gaps between the parts sparse reads
    /// brought (gaps closer than `MERGE_BELOW` as one), assembled with them in a pooled buffer;
    /// the parts are let go once the block has them.
    pub(super) async fn load(&self, file: &FileMeta, commit: &str, key: &Arc<str>, idx: u64) -> VfsResult<Bytes> {
        let base = idx * BLOCK_SIZE;
        let len = file.size.saturating_sub(base).min(BLOCK_SIZE);
        self.store.partial().settled(key, idx).await;
        // Sparse reads that covered the block while this load waited made it a block already.
        if let Some(b) = self.store.get(key, idx, len).await {
            return Ok(b);
        }
        if !self.store.partial().has(key, idx) {
            tracing::trace!(key = %key, block = idx, len, "block load: whole");
            return self.remote.fetch_block(file, commit, base, BLOCK_SIZE).await;
        }
        let (mut pieces, gaps) = self.store.partial().covering(key, idx, 0, len);
        let gaps = merge_gaps(gaps, MERGE_BELOW);
        tracing::trace!(key = %key, block = idx, ?gaps, "block load: the gaps between its parts");
        let fetched = try_join_all(
            gaps.iter()
                .map(|g| self.remote.fetch_block(file, commit, base + g.start, g.end - g.start)),
        )
        .await?;
        pieces.extend(gaps.iter().map(|g| g.start).zip(fetched));
        pieces.sort_by_key(|p| p.0);
        let b = self.whole_block(&pieces, len).ok_or(VfsError::ShortRead {
            offset: base,
            wanted: len,
            got: 0,
        })?;
        self.store.partial().take(key, idx);
        Ok(b)
    }
}

/// `[from, to)` out of `pieces` (each a start and its bytes), or `None` if they leave a hole: a
/// slice of the piece that covers it all, else the pieces copied once.
fn cover(mut pieces: Vec<(u64, Bytes)>, from: u64, to: u64) -> Option<Bytes> {
    pieces.sort_by_key(|p| p.0);
    if let Some((s, b)) = pieces.iter().find(|(s, b)| *s <= from && s + b.len() as u64 >= to) {
        return Some(b.slice((from - s) as usize..(to - s) as usize));
    }
    let mut out = BytesMut::with_capacity((to - from) as usize);
    let mut at = from;
    for (s, b) in &pieces {
        let e = s + b.len() as u64;
        if e <= at {
            continue;
        }
        if *s > at || at >= to {
            break;
        }
        out.extend_from_slice(&b[(at - s) as usize..(e.min(to) - s) as usize]);
        at = e.min(to);
    }
    (at >= to).then(|| out.freeze())
}

/// `gaps` (in order) with those less than `within` apart joined.
fn merge_gaps(gaps: Vec<std::ops::Range<u64>>, within: u64) -> Vec<std::ops::Range<u64>> {
    let mut out: Vec<std::ops::Range<u64>> = Vec::with_capacity(gaps.len());
    for g in gaps {
        match out.last_mut() {
            Some(last) if g.start - last.end < within => last.end = g.end,
            _ => out.push(g),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cover_slices_one_piece_or_joins_several() {
        let a = Bytes::from(vec![1u8; 10]);
        let b = Bytes::from(vec![2u8; 10]);
        assert_eq!(&cover(vec![(0, a.clone())], 2, 5).unwrap()[..], &[1, 1, 1]);
        let got = cover(vec![(10, b.clone()), (0, a.clone())], 8, 12).unwrap();
        assert_eq!(&got[..], &[1, 1, 2, 2]);
        assert!(cover(vec![(0, a), (12, b)], 8, 14).is_none(), "a hole at 10..12");
    }

    #[test]
    fn gaps_close_together_are_fetched_as_one() {
        let kib = 1 << 10;
        let gaps = vec![0..100 * kib, 104 * kib..300 * kib, 364 * kib..1000 * kib];
        assert_eq!(
            merge_gaps(gaps, MERGE_BELOW),
            vec![0..300 * kib, 364 * kib..1000 * kib],
            "a page between two gaps is fetched again, a 64 KiB part is not"
        );
    }
}
