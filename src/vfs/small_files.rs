//! Folders of small Xet files read in any order: once a reader has opened two of a folder's small
//! files (whatever their order: listing, name, inode as `cp -r` walks, shuffled), the folder's
//! small files are fetched ahead in batches, many files per request (`Remote::fetch_small_batch`:
//! one batch reconstruction, one fetch per joined xorb range). Order does not matter because a
//! batch is not a guess about the next file: every file of the folder is wanted by a reader that
//! goes through the folder, and files uploaded together sit side by side in a xorb, so fetching
//! them together is nearly free. A batch's request names only the files no cache tier (memory,
//! disk, the shared tier) holds (`small_batch`): a node that has them all asks the Hub nothing.
//!
//! What a reader can cause is bounded: fetching starts at the second open, and a folder may have
//! at most `FIRST × 2^(files opened − 1)` files started, so reading three files of a 10,000-file
//! folder fetches at most 1,024 small files, never the folder. The allowance doubles with each
//! file opened because a reader in shuffled order misses (and waits two round trips) on every
//! open that the started files do not cover: doubling covers a folder of thousands within a
//! handful of opens. At most `AHEAD_FILES` files and `AHEAD_BYTES` bytes are fetched and not yet
//! opened per folder; bytes in flight share the mount's download budget, at most two batch
//! requests of a mount are in flight (`Remote::batch_slots`), and what lands goes to the chunk
//! store, whose tiers are bounded. An open of a file no batch has started yet gets a batch of its
//! own (the reader waits on a small request, not on a batch of hundreds), and the files the open
//! earned go in the batches after it. Git-stored and plain-LFS files are not batched; they keep
//! the listing-order prefetch (`listing_prefetch`).

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use parking_lot::Mutex;

use super::meta::Listing;
use super::remote::FileMeta;
use super::small_batch::{Gather, Member};
use super::{Node, VirtualFs};
use crate::chunk_store::BLOCK_SIZE;

/// Files a folder may have started per distinct small file opened, once two are: the allowance
/// doubles with each further open (see `allowance`).
const FIRST: usize = 256;
/// Most files of one folder fetched and not yet opened.
const AHEAD_FILES: usize = 4096;
/// Most bytes of one folder fetched and not yet opened.
const AHEAD_BYTES: u64 = 64 << 20;
/// Most files and bytes asked in one batch request.
const BATCH_FILES: usize = 256;
const BATCH_BYTES: u64 = 16 << 20;
/// A batch is only sent once it has this many files (or the folder has no more): a reader that
/// finds its files fetched does not make a request for every few files it opens.
const MIN_BATCH: usize = 64;

/// Folders followed at once (older ones are forgotten).
pub(super) const FOLLOWED_FOLDERS: u64 = 1_024;

/// What readers did in one folder (at one commit).
#[derive(Default)]
pub(super) struct Folder {
    /// Listing indices opened (distinct).
    opened: std::collections::HashSet<usize>,
    /// Listing indices a batch was started for.
    started: Vec<bool>,
    started_n: usize,
    /// Started and not opened yet: files and bytes.
    ahead_files: usize,
    ahead_bytes: u64,
    /// Where the next batch's search for unstarted files begins (wraps around).
    scan: usize,
    /// A whole scan found nothing left to start: later opens skip the scan (a folder of
    /// thousands of files would cost each open a walk over all of them).
    exhausted: bool,
}

impl VirtualFs {
    /// A small Xet file `meta`, entry `idx` of `listing`, was opened at `commit`: take note, and
    /// start the batches the folder has earned. Returns once the opened file itself is cached, if
    /// it went into a batch, so the read that follows finds it.
    pub(super) async fn note_small_open(
        &self,
        commit: &str,
        parent: &str,
        listing: &Arc<Listing>,
        idx: usize,
        meta: &FileMeta,
    ) {
        let folder = self.folders.get_with((commit.to_string(), parent.to_string()), || {
            Arc::new(Mutex::new(Folder::default()))
        });
        let picks = {
            let mut f = folder.lock();
            pick(&mut f, listing, idx, meta, |m| self.reader.remote.batchable(m))
        };
        if picks.is_empty() {
            return;
        }
        let opened_key = meta.id.key();
        let mut own = None;
        // A missed file (first in `picks`) is fetched alone: the reader waits on it.
        let mut batches = Vec::new();
        let mut rest = picks;
        if rest.first().is_some_and(|f| f.id.key() == opened_key) {
            batches.push(vec![rest.remove(0)]);
        }
        batches.extend(split(rest));
        for batch in batches {
            let gather = self.gather(batch.len(), commit);
            for file in batch {
                let fut = self.load_from(gather.member(), file.clone(), commit);
                if file.id.key() == opened_key {
                    own = Some(fut);
                } else {
                    tokio::spawn(fut);
                }
            }
        }
        if let Some(fut) = own {
            fut.await;
        }
    }

    /// A batch of `members` files at `commit`, whose requests go out only for the files no
    /// cache tier holds (`small_batch`).
    fn gather(&self, members: usize, commit: &str) -> Gather {
        let (remote, commit) = (self.reader.remote.clone(), commit.to_string());
        let request = move |files: Vec<FileMeta>| {
            let (remote, commit) = (remote.clone(), commit.clone());
            async move {
                match remote.fetch_small_batch(&files, &commit).await {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::debug!(files = files.len(), error = %e, "batch of small files failed");
                        HashMap::new()
                    }
                }
            }
            .boxed()
        };
        Gather::new(Box::new(request), members)
    }

    /// Loads `file` into the chunk store: from a cache tier that has it, else from its batch
    /// (`member`), or on its own if the batch lacks it (a reader may be waiting on this load, so
    /// it must end with the bytes when it can).
    fn load_from(&self, member: Member, file: FileMeta, commit: &str) -> impl Future<Output = ()> + Send + 'static {
        let (store, remote, commit) = (
            self.reader.store.clone(),
            self.reader.remote.clone(),
            commit.to_string(),
        );
        async move {
            let key = file.id.key();
            // Asked only when memory, disk and the shared tier missed; dropped unasked otherwise,
            // which tells the batch this file needs no request.
            let fetch = async {
                match member.want(&file).await {
                    Some(b) => Ok(b),
                    None => remote.fetch_block(&file, &commit, 0, BLOCK_SIZE).await,
                }
            };
            if let Err(e) = store.get_or_fetch(&key, 0, file.size, fetch).await {
                tracing::debug!(path = %file.remote_path, error = %e, "small file prefetch failed");
            }
        }
    }
}

/// Notes the open of entry `idx` and returns the files to fetch now: the opened file first if no
/// batch has it, then unstarted small files of the folder as far as the folder's allowance goes.
fn pick(
    f: &mut Folder,
    listing: &Listing,
    idx: usize,
    meta: &FileMeta,
    batchable: impl Fn(&FileMeta) -> bool,
) -> Vec<FileMeta> {
    let n = listing.entries.len();
    if f.started.len() != n {
        f.started = vec![false; n];
        f.scan = idx;
        f.exhausted = false;
    }
    if !f.opened.insert(idx) {
        return Vec::new();
    }
    let was_started = f.started[idx];
    if was_started {
        f.ahead_files = f.ahead_files.saturating_sub(1);
        f.ahead_bytes = f.ahead_bytes.saturating_sub(meta.size);
    }
    if f.opened.len() < 2 {
        return Vec::new();
    }
    let mut picks = Vec::new();
    if !was_started {
        f.started[idx] = true;
        f.started_n += 1;
        picks.push(meta.clone());
    }
    if f.exhausted {
        return picks;
    }
    let allowed = allowance(f.opened.len()).saturating_sub(f.started_n);
    let room = allowed.min(AHEAD_FILES.saturating_sub(f.ahead_files));
    let mut chosen = Vec::new();
    let mut bytes = 0u64;
    let mut looked = 0;
    let mut cut = false;
    while chosen.len() < room && looked < n {
        let i = f.scan % n;
        f.scan = (f.scan + 1) % n;
        looked += 1;
        // Opened files were read already (the first one of a folder on its own).
        if f.started[i] || f.opened.contains(&i) {
            continue;
        }
        let Node::File(m) = &listing.entries[i].1 else {
            continue;
        };
        if !batchable(m) {
            continue;
        }
        if f.ahead_bytes + bytes + m.size > AHEAD_BYTES {
            // Leave it for a later open (the scan comes back to it).
            f.scan = i;
            cut = true;
            break;
        }
        bytes += m.size;
        chosen.push(i);
    }
    // A few files only, while the reader still has fetched files to open: wait for more room.
    let folder_done = f.started_n + chosen.len() >= n || looked >= n;
    if picks.is_empty() && chosen.len() < MIN_BATCH && !folder_done && f.ahead_files > 0 {
        if let Some(&first) = chosen.first() {
            f.scan = first;
        }
        return Vec::new();
    }
    // Every entry was looked at and none is left unchosen: nothing can be started any more.
    f.exhausted = looked >= n && !cut;
    for i in chosen {
        if let Node::File(m) = &listing.entries[i].1 {
            f.started[i] = true;
            f.started_n += 1;
            f.ahead_files += 1;
            f.ahead_bytes += m.size;
            picks.push(m.clone());
        }
    }
    picks
}

/// Files a folder may have started once `opened` distinct files were opened (two or more):
/// 512, 1,024, 2,048, … The per-folder caps on files and bytes ahead bound it further.
fn allowance(opened: usize) -> usize {
    FIRST << opened.saturating_sub(1).min(20)
}

/// `files` cut into batch requests of at most `BATCH_FILES` files and `BATCH_BYTES` bytes.
fn split(files: Vec<FileMeta>) -> Vec<Vec<FileMeta>> {
    let mut out: Vec<Vec<FileMeta>> = Vec::new();
    let mut bytes = 0u64;
    for f in files {
        let full = out
            .last()
            .is_none_or(|b| b.len() >= BATCH_FILES || bytes + f.size > BATCH_BYTES);
        if full {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += f.size;
        if let Some(b) = out.last_mut() {
            b.push(f);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::remote::ContentId;

    fn listing(n: usize, size: u64) -> Listing {
        let entries = (0..n)
            .map(|i| {
                let name = format!("{i:05}.bin");
                let meta = FileMeta {
                    remote_path: format!("d/{name}"),
                    commit: Arc::from("c"),
                    size,
                    id: ContentId::Xet(format!("{i:064x}")),
                    sha256: None,
                    last_commit: None,
                };
                (name, Node::File(meta))
            })
            .collect();
        Listing { entries }
    }

    fn meta(l: &Listing, i: usize) -> FileMeta {
        match &l.entries[i].1 {
            Node::File(m) => m.clone(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn three_opens_of_a_big_folder_start_a_bounded_batch() {
        let l = listing(10_000, 4096);
        let mut f = Folder::default();
        let mut started = 0;
        for (k, i) in [5000, 17, 9000].into_iter().enumerate() {
            let p = pick(&mut f, &l, i, &meta(&l, i), |_| true);
            if k == 0 {
                assert!(p.is_empty(), "one file read alone is not a pattern");
            }
            started += p.len();
        }
        assert!(started <= allowance(3) + 1, "{started} files started");
        assert_eq!(allowance(3), 1024);
        assert!(started >= FIRST, "{started} files started");
    }

    #[test]
    fn a_shuffled_reader_gets_the_whole_folder_in_few_batches() {
        let n = 2000;
        let l = listing(n, 4096);
        let mut f = Folder::default();
        // A fixed permutation (multiplicative stride, coprime with n).
        let order: Vec<usize> = (0..n).map(|k| (k * 7919 + 13) % n).collect();
        let (mut batches, mut misses) = (0, 0);
        for &i in &order {
            let was = f.started.get(i).copied().unwrap_or(false);
            let p = pick(&mut f, &l, i, &meta(&l, i), |_| true);
            if !p.is_empty() {
                batches += split(p).len();
            }
            if !was && f.opened.len() > 1 {
                misses += 1;
            }
        }
        assert_eq!(f.started_n, n - 1, "every file but the first was batched");
        eprintln!("{batches} batch requests, {misses} misses");
        assert!(
            batches <= 100,
            "{batches} batch requests for {n} files ({misses} misses)"
        );
    }

    #[test]
    fn batches_respect_their_caps() {
        let l = listing(600, 100 << 10);
        let files: Vec<FileMeta> = (0..600).map(|i| meta(&l, i)).collect();
        let b = split(files);
        assert!(b.iter().all(|b| b.len() <= BATCH_FILES));
        assert!(b.iter().all(|b| b.iter().map(|f| f.size).sum::<u64>() <= BATCH_BYTES));
        assert_eq!(b.iter().map(|b| b.len()).sum::<usize>(), 600);
    }
}
