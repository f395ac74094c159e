//! Listings fetched ahead of a tree walk. `find`, `ls -R`, `du`, `rsync`, `tar c` and Python's
//! `os.walk` open the subfolders of a directory one after another, and each open of a folder
//! whose listing is not cached waits a Hub round trip (one listing request per 1,000 entries)
//! while the walk does nothing else: a walk of 100 folders is 100 round trips in a row.
//!
//! So once a walk has opened [`STREAK`] subfolders of one directory, the listings of the
//! [`AHEAD`] subfolders listed after the one it opened are fetched in the background,
//! [`CONCURRENT`] at a time, and every later open there moves that window on. A walk going the
//! other way (a stack of folders popped from its end, as an `os.scandir` loop keeps it) gets the
//! folders listed before the one it opened instead. The walk then finds
//! them cached or joins a fetch under way. What it costs the request budget: the same listings the
//! walk would fetch anyway, plus at most `AHEAD` that it never opens if it stops early. Each fetch
//! checks the api window before it starts (a prefetch never spends the last tenth of a window, see
//! `hub_client::windows`). Read-only mounts only: a writable mount's commit moves with every
//! round, and a listing fetched at an old commit would be thrown away.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::meta::fetch_listing;
use super::{Node, VirtualFs, join};
use crate::hub_client::windows::Bucket;

/// Subfolders of one directory a walk opens before the next ones are fetched ahead of it.
pub(super) const STREAK: u32 = 2;

/// Subfolders fetched ahead of the walk's position in their parent's listing.
pub(super) const AHEAD: usize = 16;

/// Listing fetches ahead of walks at once, per mount: enough to hide a round trip of tens of
/// milliseconds behind a walk's own work (8 listings of 1,000 entries in flight at 30 ms), few
/// enough that a walk does not flood the Hub.
const CONCURRENT: usize = 8;

/// Directories whose walks are followed at once (older ones are forgotten).
const FOLLOWED: u64 = 1_024;

/// Where walks of one directory (at one commit) are.
#[derive(Default)]
struct Cursor {
    /// Subfolders opened.
    opened: u32,
    /// Listing index of the last one.
    last: Option<usize>,
    /// Listing index up to which fetches were started, going forward.
    ahead: usize,
    /// Lowest listing index a fetch was started at, going backward.
    behind: Option<usize>,
}

/// Per-mount state of the walks being followed.
pub(super) struct Walks {
    cursors: moka::sync::Cache<(String, String), Arc<Mutex<Cursor>>>,
    permits: Arc<Semaphore>,
    /// Listings fetched ahead of a walk (tests and status).
    fetched: Arc<AtomicU64>,
}

impl Default for Walks {
    fn default() -> Self {
        Walks {
            cursors: moka::sync::Cache::builder().max_capacity(FOLLOWED).build(),
            permits: Arc::new(Semaphore::new(CONCURRENT)),
            fetched: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Walks {
    pub(super) fn fetched(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }
}

/// The indexes of the first `AHEAD` folders listed after `idx`, from `from` on.
fn folders_after(entries: &[(String, Node)], idx: usize, from: usize) -> Vec<usize> {
    (idx + 1..entries.len())
        .filter(|&i| matches!(entries[i].1, Node::Dir))
        .take(AHEAD)
        .filter(|&i| i >= from)
        .collect()
}

/// The indexes of the last `AHEAD` folders listed before `idx`, nearest first, below `below`.
fn folders_before(entries: &[(String, Node)], idx: usize, below: usize) -> Vec<usize> {
    (0..idx.min(entries.len()))
        .rev()
        .filter(|&i| matches!(entries[i].1, Node::Dir))
        .take(AHEAD)
        .filter(|&i| i < below)
        .collect()
}

impl VirtualFs {
    /// Folder `path` was opened (opendir) at `commit`: follow the walk of its parent and fetch the
    /// listings of the folders after it once the walk shows.
    pub(super) async fn note_opendir(&self, commit: &str, path: &str) {
        if self.writer.is_some() || path.is_empty() {
            return;
        }
        let Some((parent, listing, idx)) = self.cached_place(commit, path).await else {
            return;
        };
        let cursor = self
            .walks
            .cursors
            .get_with((commit.to_string(), parent.to_string()), Default::default);
        let next = {
            let mut c = cursor.lock();
            c.opened += 1;
            if c.opened < STREAK {
                return;
            }
            let backward = c.last.is_some_and(|last| idx < last);
            c.last = Some(idx);
            if backward {
                let next = folders_before(&listing.entries, idx, c.behind.unwrap_or(usize::MAX));
                if let Some(&lowest) = next.last() {
                    c.behind = Some(lowest);
                }
                next
            } else {
                let next = folders_after(&listing.entries, idx, c.ahead);
                if let Some(&last) = next.last() {
                    c.ahead = last + 1;
                }
                next
            }
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for i in next {
            let child = join(parent, &listing.entries[i].0);
            let key = (commit.to_string(), child.clone());
            if self.listings.contains_key(&key) {
                continue;
            }
            let fetch = fetch_listing(
                self.client.clone(),
                self.reader.store.shared().cloned(),
                self.repo.clone(),
                commit.to_string(),
                self.remote_path(&child),
            );
            let (listings, permits, fetched, client) = (
                self.listings.clone(),
                self.walks.permits.clone(),
                self.walks.fetched.clone(),
                self.client.clone(),
            );
            rt.spawn(async move {
                let Ok(_permit) = permits.acquire_owned().await else {
                    return;
                };
                // Checked once a permit is held: the fetch may have waited behind others, and the
                // walk may have fetched this listing itself meanwhile.
                if listings.contains_key(&key) || !client.windows().background_ok(Bucket::Api) {
                    return;
                }
                match listings.try_get_with(key, fetch).await {
                    Ok(_) => {
                        fetched.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => tracing::debug!(folder = %child, error = %e, "listing ahead of a walk failed"),
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(kinds: &str) -> Vec<(String, Node)> {
        kinds
            .chars()
            .enumerate()
            .map(|(i, k)| {
                let node = if k == 'd' {
                    Node::Dir
                } else {
                    Node::File(crate::vfs::remote::FileMeta {
                        remote_path: format!("f{i}"),
                        commit: "".into(),
                        size: 1,
                        id: crate::vfs::remote::ContentId::Git(String::new()),
                        sha256: None,
                        last_commit: None,
                    })
                };
                (format!("e{i:03}"), node)
            })
            .collect()
    }

    #[test]
    fn folders_ahead_skip_files_and_what_was_started() {
        let e = entries("dfdfddffd");
        assert_eq!(folders_after(&e, 0, 0), vec![2, 4, 5, 8]);
        assert_eq!(folders_after(&e, 2, 5), vec![5, 8], "4 was started before");
        assert_eq!(folders_after(&e, 8, 0), Vec::<usize>::new(), "the last folder");
        let many = entries(&"d".repeat(40));
        assert_eq!(folders_after(&many, 3, 0).len(), AHEAD);
        assert_eq!(folders_after(&many, 3, 0)[AHEAD - 1], 3 + AHEAD);
        // The first call started 4..=3 + AHEAD; the next open moves the window by one.
        assert_eq!(
            folders_after(&many, 4, 4 + AHEAD),
            vec![4 + AHEAD],
            "the window moves by one"
        );
        // Backward: nearest first, below what was started.
        assert_eq!(folders_before(&e, 5, usize::MAX), vec![4, 2, 0]);
        assert_eq!(folders_before(&e, 5, 2), vec![0], "2 and 4 were started before");
        assert_eq!(
            folders_before(&e, 0, usize::MAX),
            Vec::<usize>::new(),
            "the first folder"
        );
        assert_eq!(folders_before(&many, 39, usize::MAX).len(), AHEAD);
        assert_eq!(folders_before(&many, 39, usize::MAX)[AHEAD - 1], 39 - AHEAD);
    }
}
