//! What a path is and the attributes it shows: tree lookups at a commit (the listing and point
//! caches, keyed by commit; below them the shared tier, `shared_meta`, then the Hub), the overlay
//! laid over them on a writable mount, and merged listings.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::error::{VfsError, VfsResult};
use super::remote::{ContentId, FileMeta};
use super::{Found, Node, VirtualFs, shared_meta};
use crate::chunk_store::SharedTier;
use crate::hub_client::{HubClient, RepoRef, TreeEntry};
use crate::write::overlay::Entry;

/// A directory listing at one commit, sorted by name.
#[derive(Debug)]
pub(super) struct Listing {
    pub(super) entries: Vec<(String, Node)>,
}

impl Listing {
    fn find(&self, name: &str) -> Option<&Node> {
        self.index(name).map(|i| &self.entries[i].1)
    }

    /// Where `name` is in the listing.
    fn index(&self, name: &str) -> Option<usize> {
        self.entries.binary_search_by(|(n, _)| n.as_str().cmp(name)).ok()
    }
}

/// Point lookups that may miss one directory's listing before the listing is fetched in the
/// background (read-only mounts): a program opening many files of a directory by name (a data
/// loader, fio) then costs a few requests for the whole directory instead of one per file.
pub(super) const LIST_AFTER_POINT_LOOKUPS: u32 = 8;

/// Directories whose point lookups are counted at once (older counts are forgotten).
pub(super) const COUNTED_DIRS: u64 = 10_000;

/// The name and node of a Hub tree entry listed at `commit`.
pub(super) fn node_from_entry(commit: &str, e: &TreeEntry) -> (String, Node) {
    match e {
        TreeEntry::Dir { path, .. } => (basename(path).to_string(), Node::Dir),
        TreeEntry::File {
            path,
            size,
            oid,
            lfs_sha256,
            xet_hash,
            last_commit_date,
        } => {
            let id = match (xet_hash, lfs_sha256) {
                (Some(x), _) => ContentId::Xet(x.clone()),
                (None, Some(s)) => ContentId::Lfs(s.clone()),
                (None, None) => ContentId::Git(oid.clone()),
            };
            let meta = FileMeta {
                remote_path: path.clone(),
                commit: commit.into(),
                size: *size,
                id,
                sha256: lfs_sha256.clone(),
                last_commit: *last_commit_date,
            };
            (basename(path).to_string(), Node::File(meta))
        }
    }
}

/// Fetches the listing of repo directory `remote` at `commit`, sorted by name: from the shared
/// tier `tier` when it has it, else from the Hub.
pub(super) async fn fetch_listing(
    client: HubClient,
    tier: Option<SharedTier>,
    repo: RepoRef,
    commit: String,
    remote: String,
) -> VfsResult<Arc<Listing>> {
    let entries = shared_meta::list_dir(&client, tier.as_ref(), &repo, &commit, &remote).await?;
    let mut entries: Vec<(String, Node)> = entries.iter().map(|e| node_from_entry(&commit, e)).collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|a, b| a.0 == b.0);
    Ok(Arc::new(Listing { entries }))
}

impl VirtualFs {
    /// Where `path` stands in its parent's listing at `commit`, when that listing is cached (never
    /// fetched for this): the parent's path, the listing and the entry's index in it. What the
    /// readers and walks that follow listing order start from.
    pub(super) async fn cached_place<'a>(&self, commit: &str, path: &'a str) -> Option<(&'a str, Arc<Listing>, usize)> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        let listing = self.listings.get(&(commit.to_string(), parent.to_string())).await?;
        let idx = listing.index(name)?;
        Some((parent, listing, idx))
    }

    /// The listing of a directory (mount-relative path) at `commit`; one fetch however many wait.
    pub(super) async fn listing(&self, commit: &str, path: &str) -> VfsResult<Arc<Listing>> {
        self.listing_with(commit, path, false).await
    }

    /// `listing`, with a folder the Hub does not have at `commit` listed (and cached) as empty: a
    /// writable mount's new folders are looked into once per file created in them.
    async fn listing_or_empty(&self, commit: &str, path: &str) -> VfsResult<Arc<Listing>> {
        self.listing_with(commit, path, true).await
    }

    async fn listing_with(&self, commit: &str, path: &str, missing_is_empty: bool) -> VfsResult<Arc<Listing>> {
        let key = (commit.to_string(), path.to_string());
        let fetch = fetch_listing(
            self.client.clone(),
            self.reader.store.shared().cloned(),
            self.repo.clone(),
            commit.to_string(),
            self.remote_path(path),
        );
        let fetch = async {
            match fetch.await {
                Err(e) if missing_is_empty && e.errno() == libc::ENOENT => {
                    Ok(Arc::new(Listing { entries: Vec::new() }))
                }
                r => r,
            }
        };
        self.listings.try_get_with(key, fetch).await.map_err(VfsError::Shared)
    }

    /// Counts a point lookup in `parent` that its listing could have answered; at the
    /// `LIST_AFTER_POINT_LOOKUPS`th, fetches that listing in the background (once: concurrent
    /// fetches of one listing share one).
    fn note_point_lookup(&self, commit: &str, parent: &str) {
        // Read-only mounts only: a writable mount's commit moves with every round, which would
        // re-list every busy directory once per round (a stress run failed with EIO while it did).
        if self.writer.is_some() {
            return;
        }
        let key = (commit.to_string(), parent.to_string());
        let count = self
            .point_lookups
            .get_with(key.clone(), || Arc::new(std::sync::atomic::AtomicU32::new(0)));
        if count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 != LIST_AFTER_POINT_LOOKUPS {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let fetch = fetch_listing(
            self.client.clone(),
            self.reader.store.shared().cloned(),
            self.repo.clone(),
            commit.to_string(),
            self.remote_path(parent),
        );
        let listings = self.listings.clone();
        // Demand lookups may join this fetch, so it is checked against the window before it starts
        // rather than turned away half-way (see `hub_client::windows`).
        if !self
            .client
            .windows()
            .background_ok(crate::hub_client::windows::Bucket::Api)
        {
            count.store(0, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        rt.spawn(async move {
            if let Err(e) = listings.try_get_with(key, fetch).await {
                tracing::debug!(error = %e, "background listing failed; lookups stay point lookups");
            }
        });
    }

    /// Whether lookups in `parent` of a writable mount go through its listing: from the
    /// `LIST_AFTER_POINT_LOOKUPS`th lookup in it on, whatever the commit. Every file a program
    /// creates is looked up first (is the name taken on the Hub?), and the mount's commit moves with
    /// every round, so a copy of N files into a folder cost N paths-info requests: N api calls of a
    /// window that allows a free user 1,000. Listing the folder costs one call per 1,000 entries,
    /// once per commit round.
    fn busy_writable_dir(&self, parent: &str) -> bool {
        let count = self.point_lookups.get_with((String::new(), parent.to_string()), || {
            Arc::new(std::sync::atomic::AtomicU32::new(0))
        });
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= LIST_AFTER_POINT_LOOKUPS
    }

    /// Whether folder `dir` (or a folder above it) is already known to be missing at `commit`, from
    /// a cached point lookup or a cached listing of its parent. Nothing below a missing folder can
    /// be on the Hub, so a lookup there asks nothing: the files and folders a program creates
    /// inside a folder it has just made cost no paths-info request each (pjdfstest on an overlay
    /// mount spent the free user's whole 1,000-call API window in five seconds on those).
    async fn known_absent(&self, commit: &str, dir: &str) -> bool {
        let mut dir = dir;
        while !dir.is_empty() {
            let (parent, name) = dir.rsplit_once('/').unwrap_or(("", dir));
            match self.points.get(&(commit.to_string(), dir.to_string())).await {
                Some(None) => return true,
                Some(Some(Node::File(_))) => return true,
                Some(Some(Node::Dir)) => return false,
                None => {}
            }
            if let Some(l) = self.listings.get(&(commit.to_string(), parent.to_string())).await {
                return !matches!(l.find(name), Some(Node::Dir));
            }
            dir = parent;
        }
        false
    }

    /// What `path` is at `commit`: from the parent's cached listing when there is one, else by a
    /// point lookup (one paths-info request, not a listing of every parent).
    pub(super) async fn node_at(&self, commit: &str, path: &str) -> VfsResult<Option<Node>> {
        if path.is_empty() {
            if self.subfolder.is_empty() {
                return Ok(Some(Node::Dir));
            }
        } else {
            let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
            if let Some(l) = self.listings.get(&(commit.to_string(), parent.to_string())).await {
                return Ok(l.find(name).cloned());
            }
            if self.known_absent(commit, parent).await {
                return Ok(None);
            }
            if self.writer.is_some() && self.busy_writable_dir(parent) {
                return Ok(self.listing_or_empty(commit, parent).await?.find(name).cloned());
            }
            if !self.points.contains_key(&(commit.to_string(), path.to_string())) {
                self.note_point_lookup(commit, parent);
            }
        }
        let key = (commit.to_string(), path.to_string());
        let fetch = async {
            let remote = self.remote_path(path);
            let tier = self.reader.store.shared();
            let found = shared_meta::path_info(&self.client, tier, &self.repo, commit, &remote).await?;
            let node = found.as_ref().map(|e| node_from_entry(commit, e).1);
            if node.is_some() || !self.repo.is_bucket() || remote.is_empty() {
                return Ok::<_, VfsError>(node);
            }
            if path.is_empty() && self.writer.is_some() {
                // The root of a writable mount of a bucket prefix: it exists (empty) before the
                // prefix holds anything.
                return Ok(Some(Node::Dir));
            }
            // A bucket's paths-info answers files only; its directories are the prefixes of its
            // files: one is there when its listing has entries (kept for the readdir that tends
            // to follow).
            match self.listing(commit, path).await {
                Ok(l) if !l.entries.is_empty() => Ok(Some(Node::Dir)),
                Ok(_) => Ok(None),
                Err(e) if e.errno() == libc::ENOENT => Ok(None),
                Err(e) => Err(e),
            }
        };
        self.points.try_get_with(key, fetch).await.map_err(VfsError::Shared)
    }

    /// What `path` is in the mount's view: the overlay first, then the commit's tree.
    pub(crate) async fn find(&self, commit: &str, path: &str) -> VfsResult<Option<Found>> {
        if let Some(w) = &self.writer {
            match w.overlay.lock().get(path) {
                Some(Entry::File(d)) => return Ok(Some(Found::Local(d.clone()))),
                Some(Entry::Moved(m)) => return Ok(Some(Found::Remote(m.clone()))),
                Some(Entry::Dir) => return Ok(Some(Found::Dir)),
                Some(Entry::Gone) => return Ok(None),
                Some(Entry::Special { .. }) => return Ok(Some(Found::Special)),
                None => {}
            }
            // The committer moves the mount's commit first and then drops the overlay entries that
            // commit carried: a caller holding the previous commit would find a just-committed file
            // in neither (ENOENT) and a just-deleted one in both. The overlay missed, so the commit
            // shown now is the one to look in.
            let now = self.revision.lock().await.commit.clone();
            if now != commit {
                return Ok(self.node_at(&now, path).await?.map(|n| match n {
                    Node::Dir => Found::Dir,
                    Node::File(m) => Found::Remote(m),
                }));
            }
        }
        Ok(self.node_at(commit, path).await?.map(|n| match n {
            Node::Dir => Found::Dir,
            Node::File(m) => Found::Remote(m),
        }))
    }

    /// The entries of a directory in the mount's view, sorted by name: the commit's listing (if the
    /// directory exists there) merged with the overlay's children.
    pub(crate) async fn merged_listing(&self, commit: &str, path: &str) -> VfsResult<Vec<(String, Found)>> {
        let mut commit = commit.to_string();
        for _ in 0..4 {
            let out = self.merged_listing_at(&commit, path).await?;
            if self.writer.is_none() {
                return Ok(out);
            }
            // As in `find`: the overlay read above may already lack entries the commit shown now
            // carries (a file just deleted would reappear from an older commit's listing). If the
            // mount's commit did not move since that read, the two agree.
            let now = self.revision.lock().await.commit.clone();
            if now == commit {
                return Ok(out);
            }
            commit = now;
        }
        self.merged_listing_at(&commit, path).await
    }

    async fn merged_listing_at(&self, commit: &str, path: &str) -> VfsResult<Vec<(String, Found)>> {
        let remote_dir = match &self.writer {
            None => true,
            Some(_) => matches!(self.node_at(commit, path).await?, Some(Node::Dir)),
        };
        let mut out: Vec<(String, Found)> = Vec::new();
        if remote_dir {
            let listing = self.listing(commit, path).await?;
            out.reserve(listing.entries.len());
            for (name, node) in &listing.entries {
                out.push((
                    name.clone(),
                    match node {
                        Node::Dir => Found::Dir,
                        Node::File(m) => Found::Remote(m.clone()),
                    },
                ));
            }
        }
        let Some(w) = &self.writer else {
            return Ok(out);
        };
        let local = w.overlay.lock().children(path);
        if local.is_empty() {
            return Ok(out);
        }
        let mut map: BTreeMap<String, Found> = out.into_iter().collect();
        for (name, e) in local {
            match e {
                Entry::File(d) => {
                    map.insert(name, Found::Local(d));
                }
                Entry::Moved(m) => {
                    map.insert(name, Found::Remote(m));
                }
                Entry::Dir => {
                    map.insert(name, Found::Dir);
                }
                Entry::Gone => {
                    map.remove(&name);
                }
                Entry::Special { .. } => {
                    map.insert(name, Found::Special);
                }
            }
        }
        Ok(map.into_iter().collect())
    }
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

impl VirtualFs {
    /// A directory's link count on a writable mount: 2 plus its subdirectories, counted from its
    /// listing when that is cached at `commit` or the directory exists only in the mount (never
    /// fetched for this: a `stat` must not cost a listing). Otherwise 2 plus the subdirectories
    /// made through the mount.
    pub(super) async fn dir_nlink(&self, commit: &str, path: &str) -> u32 {
        let Some(w) = &self.writer else { return 2 };
        let listing = self.listings.get(&(commit.to_string(), path.to_string())).await;
        let overlay = w.overlay.lock();
        let local = overlay.child_dirs(path);
        // The overlay decides for every name it has; the listing for the rest.
        let remote = listing.map_or(0, |l| {
            l.entries
                .iter()
                .filter(|(name, node)| matches!(node, Node::Dir) && !local.has(name))
                .count()
        });
        let dirs = local.count() + remote;
        2 + dirs.min(u32::MAX as usize - 2) as u32
    }
}
