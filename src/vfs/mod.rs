//! VirtualFs: the POSIX view of one Hub repo revision, shared by every frontend.
//!
//! Metadata is addressed by commit: a directory listing or a point lookup made at commit C is valid
//! for as long as C is the mount's commit, so caches need no invalidation. The metadata TTL only
//! says how often a branch or tag is re-resolved to its current commit. File content is addressed
//! by hash, so cached bytes are never stale.

mod attrs;
mod commit;
mod copy_up;
mod dirs;
pub mod error;
pub mod inode;
mod links;
mod listing_prefetch;
mod meta;
mod passthrough;
pub mod read;
pub mod remote;
mod rename;
mod revision;
mod shared_meta;
mod small_batch;
mod small_files;
pub mod sparse;
mod special;
mod walk_ahead;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::chunk_store::ChunkStore;
use crate::hub_client::{HubClient, RepoRef};
use crate::util::is_commit_id;
use crate::write::staging::DirtyFile;
pub use attrs::{Caller, NewNode, may_access};
use commit::Writer;
pub use commit::{
    BudgetSpec, Change, ChangeKind, CloseMode, Counters, DirtyReport, OverlayOptions, PublishOptions, Published,
    StatusReport, UPLOAD_AHEAD_MIN, WriteOptions, uploads_for_budget,
};
use error::{VfsError, VfsResult};
pub use inode::{Ino, ROOT_INO};
use meta::Listing;
pub use read::{READAHEAD_MODEL, READAHEAD_OTHER, default_readahead};
use read::{ReadState, Reader};
pub use remote::ContentId;
use remote::{FileMeta, Remote};
pub use rename::RenameFlags;
use revision::Revision;
pub use write::{SetAttr, TimeSet};

#[derive(Debug, Clone)]
pub struct VfsOptions {
    pub metadata_ttl: Duration,
    pub uid: u32,
    pub gid: u32,
    pub memory_cache_bytes: u64,
    /// The process's memory budget in bytes and where it came from (`--memory-limit`, the
    /// cgroup, the default); `None`: no budget (tests).
    pub memory_limit: Option<(u64, String)>,
    /// Root of the on-disk content cache; `None` (or a zero size) keeps content in memory only.
    pub cache_dir: Option<std::path::PathBuf>,
    pub disk_cache_bytes: u64,
    /// Deadline of one remote read.
    pub read_timeout: Duration,
    /// Writable mount settings; `None` mounts read-only.
    pub write: Option<WriteOptions>,
    /// Files fetched ahead of a reader that opens a directory's files in listing order
    /// (`listing_prefetch`); 0 turns it off.
    pub prefetch_files: usize,
    /// FUSE passthrough for fully cached files on read-only mounts, where the kernel allows it
    /// (`passthrough`).
    pub passthrough: bool,
    /// Files whose read-only opens skip the kernel's readahead (FUSE direct I/O), by path in the
    /// repo (`VirtualFs::direct_io`); `None`: none.
    pub direct_io: Option<globset::GlobSet>,
    /// Kernel readahead of the mount in bytes, which the read path's sequential detection follows;
    /// `None`: by repo kind (`mount::default_readahead`).
    pub readahead: Option<u64>,
    /// The shared cache tier's URL (`--shared-cache s3://bucket/prefix`); `None`: no shared tier.
    pub shared_cache: Option<String>,
}

impl Default for VfsOptions {
    fn default() -> Self {
        VfsOptions {
            metadata_ttl: Duration::from_secs(60),
            uid: 0,
            gid: 0,
            memory_cache_bytes: 128 << 20,
            memory_limit: None,
            cache_dir: None,
            disk_cache_bytes: 0,
            read_timeout: Duration::from_secs(60),
            write: None,
            prefetch_files: 16,
            passthrough: false,
            direct_io: None,
            readahead: None,
            shared_cache: None,
        }
    }
}

/// What a path is at one commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(FileMeta),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// Attributes as every frontend reports them.
#[derive(Debug, Clone)]
pub struct Attr {
    pub ino: Ino,
    pub kind: Kind,
    pub size: u64,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    /// Permission bits with setuid, setgid and sticky (`0o7777`).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    /// Device number of a character or block device node (`makedev` encoding).
    pub rdev: u32,
}

/// How a frontend holds the inode numbers it is given. The kernel (FUSE) counts lookups and
/// forgets them; an NFS client keeps file handles forever and never says when it is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    Counted,
    Remembered,
}

/// One entry of a directory snapshot.
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub name: String,
    pub attr: Attr,
}

/// What a path is in the mount's view: the commit's tree with the overlay laid over it.
#[derive(Clone)]
pub(crate) enum Found {
    Dir,
    Remote(FileMeta),
    Local(Arc<DirtyFile>),
    /// A symlink, FIFO, socket or device node (local only).
    Special,
}

enum Handle {
    Dir(Arc<Vec<DirEntry>>),
    File {
        ino: Ino,
        meta: FileMeta,
        commit: String,
        state: Mutex<ReadState>,
    },
    /// A staged file: reads and writes go to its local copy.
    Local {
        ino: Ino,
        file: Arc<DirtyFile>,
        write: bool,
    },
}

/// Lock order: `revision` (async) → `handles` → `last_content` → the overlay (in `writer`) → the
/// inode table; `dirs_listed` is a leaf; the sync locks are never held across an `.await`.
pub struct VirtualFs {
    client: HubClient,
    repo: RepoRef,
    revision_name: String,
    /// Repo path that is the mount's root ("" for the whole repo).
    subfolder: String,
    opts: VfsOptions,
    revision: tokio::sync::Mutex<Revision>,
    inodes: inode::InodeTable,
    listings: moka::future::Cache<(String, String), Arc<Listing>>,
    points: moka::future::Cache<(String, String), Option<Node>>,
    /// Point lookups per (commit, directory) that missed its listing (see `note_point_lookup`).
    point_lookups: moka::sync::Cache<(String, String), Arc<std::sync::atomic::AtomicU32>>,
    /// Readers following a directory's listing order, by directory (`listing_prefetch`).
    cursors: moka::sync::Cache<String, Arc<Mutex<listing_prefetch::Cursor>>>,
    /// Folders whose small Xet files readers are going through, by (commit, folder) (`small_files`).
    folders: moka::sync::Cache<(String, String), Arc<Mutex<small_files::Folder>>>,
    /// Tree walks whose next folders' listings are fetched ahead of them (`walk_ahead`).
    walks: walk_ahead::Walks,
    /// Read states of copy-ups' Hub files, by staged file id (`copy_up`).
    copy_up_reads: moka::sync::Cache<u64, Arc<Mutex<ReadState>>>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    /// The Hub content the kernel's cached pages of an inode can only have come from (see
    /// `add_handle_keep`); no entry: unknown, the next open drops them.
    last_content: Mutex<HashMap<Ino, ContentId>>,
    /// The commit each directory was last listed at by opendir, and when (read-only mounts), so
    /// the kernel keeps its cached pages of a listing that cannot have changed.
    dirs_listed: Mutex<HashMap<Ino, (String, Instant)>>,
    next_fh: AtomicU64,
    reader: Reader,
    mtime: SystemTime,
    /// Present on writable mounts: staging, overlay and the committer's state.
    writer: Option<Writer>,
    passthrough: passthrough::State,
    /// How the frontend's kernel cache is told to forget what changed behind its back (an
    /// overlay reset); set once by the frontend.
    invalidator: std::sync::OnceLock<Invalidator>,
}

/// What a frontend's kernel cache must forget.
pub enum Forget<'a> {
    /// The name `name` in directory `parent`.
    Entry { parent: Ino, name: &'a str },
    /// The attributes and cached pages of an inode (a directory's: its listing).
    Inode(Ino),
}

/// A frontend's way to make its kernel forget (FUSE notifications; NFS clients revalidate on
/// their own, so NFS sets none).
pub type Invalidator = Box<dyn Fn(Forget<'_>) + Send + Sync>;

/// `a/b` (without a slash where one side is empty). Called for every entry of every listing
/// served, so it allocates once and skips the formatting machinery.
fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => {
            let mut s = String::with_capacity(a.len() + 1 + b.len());
            s.push_str(a);
            s.push('/');
            s.push_str(b);
            s
        }
    }
}

/// `$XDG_CACHE_HOME/hubfs`, else `~/.cache/hubfs`, else a directory under the system temp dir.
pub fn default_cache_dir() -> std::path::PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return std::path::PathBuf::from(x).join("hubfs");
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => std::path::PathBuf::from(h).join(".cache").join("hubfs"),
        None => std::env::temp_dir().join("hubfs-cache"),
    }
}

impl VirtualFs {
    /// Resolves the revision and checks the subfolder exists; fails early with the Hub's answer.
    pub async fn new(
        client: HubClient,
        repo: RepoRef,
        revision: &str,
        subfolder: Option<&str>,
        opts: VfsOptions,
    ) -> VfsResult<VirtualFs> {
        let info = client.repo_info(&repo, revision).await?;
        let store = match &opts.memory_limit {
            Some((limit, source)) => {
                let plan = crate::chunk_store::Plan::new(*limit, opts.memory_cache_bytes);
                if plan.memory_tier < opts.memory_cache_bytes {
                    tracing::info!(
                        memory_tier_mib = plan.memory_tier >> 20,
                        "memory cache cut to a quarter of the memory budget's room for blocks"
                    );
                }
                tracing::info!(
                    limit_mib = plan.limit >> 20,
                    blocks_mib = plan.blocks >> 20,
                    from = %source,
                    "memory budget"
                );
                ChunkStore::budgeted(plan, source)
            }
            None => ChunkStore::new(opts.memory_cache_bytes),
        };
        let store = match &opts.cache_dir {
            Some(dir) if opts.disk_cache_bytes > 0 => store.add_disk(dir, opts.disk_cache_bytes).map_err(|e| {
                VfsError::Cache(format!(
                    "cannot use cache dir {}: {e} (pass --cache-dir DIR on a writable disk, or --cache-size 0)",
                    dir.display()
                ))
            })?,
            _ => store,
        };
        let store = match &opts.shared_cache {
            Some(url) => {
                let tier = crate::chunk_store::SharedTier::open(url).map_err(|e| VfsError::Cache(e.to_string()))?;
                tracing::info!(url = %tier.url(), "shared cache tier");
                store.add_shared(tier)
            }
            None => store,
        };
        let writer = match &opts.write {
            Some(w) => Some(Writer::open(&client, &repo, revision, &info, subfolder, w).await?),
            None => None,
        };
        let remote = Arc::new(Remote::new(
            client.clone(),
            repo.clone(),
            opts.read_timeout,
            store.pool().clone(),
            store.budget().plan(),
        )?);
        let vfs = VirtualFs {
            reader: Reader {
                remote,
                store,
                readahead: opts.readahead.unwrap_or(default_readahead(repo.kind)),
                scans: Arc::default(),
            },
            client,
            repo,
            revision_name: revision.to_string(),
            subfolder: subfolder.unwrap_or("").trim_matches('/').to_string(),
            revision: tokio::sync::Mutex::new(Revision::new(
                writer.as_ref().and_then(|w| w.layer_base()).unwrap_or(info.sha),
                Instant::now(),
            )),
            inodes: inode::InodeTable::new(),
            listings: moka::future::Cache::builder()
                .weigher(|_k, v: &Arc<Listing>| v.entries.len().min(u32::MAX as usize) as u32 + 1)
                .max_capacity(1_000_000)
                .build(),
            points: moka::future::Cache::builder().max_capacity(100_000).build(),
            point_lookups: moka::sync::Cache::builder().max_capacity(meta::COUNTED_DIRS).build(),
            cursors: moka::sync::Cache::builder()
                .max_capacity(listing_prefetch::FOLLOWED_DIRS)
                .build(),
            folders: moka::sync::Cache::builder()
                .max_capacity(small_files::FOLLOWED_FOLDERS)
                .build(),
            walks: walk_ahead::Walks::default(),
            copy_up_reads: moka::sync::Cache::builder().max_capacity(1024).build(),
            handles: Mutex::new(HashMap::new()),
            last_content: Mutex::new(HashMap::new()),
            dirs_listed: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            mtime: info.last_modified.unwrap_or_else(SystemTime::now),
            opts,
            writer,
            passthrough: passthrough::State::default(),
            invalidator: std::sync::OnceLock::new(),
        };
        let commit = vfs.commit().await?;
        // (A writable mount of a bucket prefix passes even while the prefix holds nothing yet:
        // see `node_at`.)
        if !vfs.subfolder.is_empty() {
            match vfs.node_at(&commit, "").await? {
                Some(Node::Dir) => {}
                _ => return Err(VfsError::NotFound),
            }
        }
        vfs.restore_local().await?;
        vfs.restore_links().await?;
        Ok(vfs)
    }

    pub fn options(&self) -> &VfsOptions {
        &self.opts
    }

    /// Sets how the kernel cache is told to forget paths (once; later calls are ignored).
    pub fn set_invalidator(&self, f: Invalidator) {
        let _ = self.invalidator.set(f);
    }

    /// The Hub client this mount reads and writes through (shared by its clones).
    pub fn hub_client(&self) -> &HubClient {
        &self.client
    }

    /// The commit the mount currently shows; a branch or tag is re-resolved once per TTL
    /// (`revision`).
    pub async fn commit(&self) -> VfsResult<String> {
        let mut rev = self.revision.lock().await;
        // An overlay stays on its commit until remounted (or published).
        if !is_commit_id(&self.revision_name) && !self.is_overlay() {
            self.refresh_revision(&mut rev).await;
        }
        Ok(rev.commit.clone())
    }

    fn remote_path(&self, path: &str) -> String {
        join(&self.subfolder, path)
    }

    /// The path an inode names; a removed one (`InodeTable::detach`) names none: not found.
    fn path_of(&self, ino: Ino) -> VfsResult<String> {
        match self.inodes.path(ino) {
            Some(p) if p.starts_with(inode::LINK_PREFIX) => self.link_path(&p).ok_or(VfsError::NotFound),
            Some(p) if p.starts_with('\0') => Err(VfsError::NotFound),
            Some(p) => Ok(p),
            None => Err(VfsError::BadHandle),
        }
    }

    /// FUSE lookup: the child's attributes, counting one kernel reference.
    pub async fn lookup(&self, parent: Ino, name: &str) -> VfsResult<Attr> {
        self.lookup_as(parent, name, Hold::Counted).await
    }

    /// Lookup for a frontend that holds numbers as `hold` says.
    pub async fn lookup_as(&self, parent: Ino, name: &str, hold: Hold) -> VfsResult<Attr> {
        if name.len() > 255 {
            return Err(VfsError::NameTooLong);
        }
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(VfsError::NotFound);
        }
        let commit = self.commit().await?;
        let parent_path = self.path_of(parent)?;
        match self.find(&commit, &parent_path).await? {
            Some(Found::Dir) => {}
            Some(_) => return Err(VfsError::NotDir),
            None => return Err(VfsError::NotFound),
        }
        let path = join(&parent_path, name);
        let found = self.find(&commit, &path).await?.ok_or(VfsError::NotFound)?;
        let ino = match hold {
            Hold::Counted => self.ino_at(&path, 1),
            Hold::Remembered => self.remember_at(&path),
        };
        let mut a = self.attr_at(ino, Some(&path), &found);
        if matches!(found, Found::Dir) {
            a.nlink = self.dir_nlink(&commit, &path).await;
        }
        Ok(a)
    }

    pub fn forget(&self, ino: Ino, n: u64) {
        self.inodes.forget(ino, n);
    }

    /// getattr through an open handle (fstat). A file that was unlinked or renamed over while open
    /// answers from the handle, so it still has attributes. On a writable mount a file whose path
    /// still names it answers its current attributes, as its reads do (see `current`): the kernel
    /// takes the size in a getattr reply as the file's, and an older handle's size would cut short
    /// the reads of every descriptor (seen in the stress test).
    pub async fn getattr_fh(&self, ino: Ino, fh: Option<u64>) -> VfsResult<Attr> {
        if self.is_writable() && self.path_of(ino).is_ok() {
            return self.getattr(ino).await;
        }
        let h = fh.and_then(|fh| self.handles.lock().get(&fh).cloned());
        match h.as_deref() {
            Some(Handle::Local { ino: hino, file, .. }) if *hino == ino => {
                Ok(self.attr_at(ino, None, &Found::Local(file.clone())))
            }
            Some(Handle::File { ino: hino, meta, .. }) if *hino == ino => {
                Ok(self.attr_at(ino, None, &Found::Remote(meta.clone())))
            }
            _ => self.getattr(ino).await,
        }
    }

    pub async fn getattr(&self, ino: Ino) -> VfsResult<Attr> {
        let (path, found) = match self.path_of(ino) {
            Ok(path) => {
                let commit = self.commit().await?;
                let found = self.find(&commit, &path).await?;
                (Some(path), found)
            }
            Err(_) => (None, None),
        };
        match found {
            Some(Found::Dir) => {
                let path = path.unwrap_or_default();
                let mut a = self.attr_at(ino, Some(&path), &Found::Dir);
                let commit = self.commit().await?;
                a.nlink = self.dir_nlink(&commit, &path).await;
                Ok(a)
            }
            Some(f) => Ok(self.attr_at(ino, path.as_deref(), &f)),
            // Unlinked (or renamed over) while open: the kernel's fstat comes without the handle,
            // so answer from an open one, with no links left.
            None => self.open_attr(ino).ok_or(VfsError::NotFound),
        }
    }

    fn open_attr(&self, ino: Ino) -> Option<Attr> {
        let handles = self.handles.lock();
        let found = handles.values().find_map(|h| match h.as_ref() {
            Handle::Local { ino: i, file, .. } if *i == ino => Some(Found::Local(file.clone())),
            Handle::File { ino: i, meta, .. } if *i == ino => Some(Found::Remote(meta.clone())),
            _ => None,
        })?;
        drop(handles);
        Some(Attr {
            nlink: 0,
            ..self.attr_at(ino, None, &found)
        })
    }

    fn add_handle(&self, h: Handle) -> u64 {
        self.add_handle_keep(h).0
    }

    /// Adds a handle; for a file, also says whether the kernel may keep the pages it has cached for
    /// the inode (FOPEN_KEEP_CACHE). Those pages may come from any handle open on the inode since
    /// the last open that dropped them, not only from the previous open: a handle on older content
    /// (a read begun before an overwrite landed) or on a staged copy (reads, and writes through the
    /// cache) keeps filling them after a newer open. So the content is recorded as the cache's
    /// only while every handle open on the inode shows that same Hub content, and kept only when it
    /// is the recorded one; a staged handle, or handles on different contents, clear the record
    /// (the next open drops the pages). Checked and inserted under the handles lock, so two opens
    /// cannot miss each other.
    fn add_handle_keep(&self, h: Handle) -> (u64, bool) {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let mut handles = self.handles.lock();
        let keep = match &h {
            Handle::Dir(_) => false,
            Handle::Local { ino, .. } => {
                self.last_content.lock().remove(ino);
                false
            }
            Handle::File { ino, meta, .. } => {
                let mixed = handles.values().any(|o| match o.as_ref() {
                    Handle::File { ino: i, meta: m, .. } => i == ino && m.id != meta.id,
                    Handle::Local { ino: i, .. } => i == ino,
                    Handle::Dir(_) => false,
                });
                let mut last = self.last_content.lock();
                if mixed {
                    last.remove(ino);
                    false
                } else {
                    last.insert(*ino, meta.id.clone()).as_ref() == Some(&meta.id)
                }
            }
        };
        handles.insert(fh, Arc::new(h));
        (fh, keep)
    }

    /// The content a file has now (a stateless frontend reopens when it changed).
    pub async fn content_id(&self, ino: Ino) -> VfsResult<ContentId> {
        let path = self.path_of(ino)?;
        let commit = self.commit().await?;
        match self.find(&commit, &path).await? {
            Some(Found::Remote(m)) => Ok(m.id),
            // Staged content has no Hub id yet: name it by staging slot and generation.
            Some(Found::Local(d)) => Ok(ContentId::Git(format!("staged:{}:{}", d.id(), d.generation()))),
            Some(Found::Dir) => Err(VfsError::IsDir),
            Some(Found::Special) => Err(VfsError::Invalid("not a regular file")),
            None => Err(VfsError::NotFound),
        }
    }

    /// Opens a file for reading. Returns the handle and whether the kernel may keep cached pages
    /// (the content is the same as at the previous open).
    pub async fn open(&self, ino: Ino, write: bool) -> VfsResult<(u64, bool)> {
        self.open_with(ino, OpenMode { write, truncate: false }).await
    }

    /// Opens a file; on a writable mount a write open stages the file (see `write`).
    pub async fn open_with(&self, ino: Ino, mode: OpenMode) -> VfsResult<(u64, bool)> {
        if mode.write || mode.truncate {
            return self.open_for_write(ino, mode.truncate).await;
        }
        let path = self.path_of(ino)?;
        let commit = self.commit().await?;
        let meta = match self.find(&commit, &path).await? {
            Some(Found::Remote(m)) => m,
            Some(Found::Local(file)) => {
                self.inodes.opened(ino);
                let h = Handle::Local {
                    ino,
                    file,
                    write: false,
                };
                return Ok((self.add_handle(h), false));
            }
            Some(Found::Dir) => return Err(VfsError::IsDir),
            Some(Found::Special) => return Err(VfsError::Invalid("not a regular file")),
            None => return Err(VfsError::NotFound),
        };
        self.note_open(&commit, &path).await;
        self.join_if_cached(&meta, false);
        self.inodes.opened(ino);
        let h = Handle::File {
            ino,
            meta,
            commit,
            state: Mutex::new(ReadState::default()),
        };
        let (fh, keep) = self.add_handle_keep(h);
        // A writer may have staged the file since `find`: follow it, as if opened after it.
        if let Some(file) = self.staged_at(&path) {
            self.follow_staged(&path, &file);
            return Ok((fh, false));
        }
        Ok((fh, keep))
    }

    /// Marks read handle `fh` as one whose client reads in order (an NFS handle; see
    /// `ReadState::expect_in_order`). Other handles are left alone.
    pub fn expect_in_order(&self, fh: u64) {
        if let Some(h) = self.handles.lock().get(&fh).cloned()
            && let Handle::File { state, .. } = h.as_ref()
        {
            state.lock().expect_in_order();
        }
    }

    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> VfsResult<Bytes> {
        let h = self.handles.lock().get(&fh).cloned().ok_or(VfsError::BadHandle)?;
        match h.as_ref() {
            Handle::File {
                meta, commit, state, ..
            } => {
                let t = Instant::now();
                let got = self.reader.read(meta, commit, state, offset, size).await;
                tracing::trace!(path = %meta.remote_path, offset, us = t.elapsed().as_micros() as u64, "read answered");
                got
            }
            Handle::Local { file, .. } => self.read_local(file, offset, size).await,
            Handle::Dir(_) => Err(VfsError::IsDir),
        }
    }

    /// The staged copy `path` has in the overlay, if any.
    fn staged_at(&self, path: &str) -> Option<Arc<DirtyFile>> {
        let w = self.writer.as_ref()?;
        match w.overlay.lock().get(path) {
            Some(crate::write::overlay::Entry::File(d)) => Some(d.clone()),
            _ => None,
        }
    }

    /// One content per file: `file` is now what `path` holds (it was just staged), so every handle
    /// open on the file reads it from now on, as every descriptor of a local file sees a write
    /// through another one. A handle left on the Hub's bytes would also refill the kernel's page
    /// cache, which all descriptors of the inode share, with the old ones. A handle whose file was
    /// unlinked or renamed over is on another inode by then and keeps what it had.
    fn follow_staged(&self, path: &str, file: &Arc<DirtyFile>) {
        let ino = self.ino_at(path, 0);
        let mut handles = self.handles.lock();
        for h in handles.values_mut() {
            let moved = match h.as_ref() {
                Handle::File { ino: i, .. } => *i == ino,
                // A write handle stays: its writer is counted on its own staged copy (and two
                // copies of one path are never written at once).
                Handle::Local {
                    ino: i,
                    file: f,
                    write: false,
                } => *i == ino && !Arc::ptr_eq(f, file) && !f.is_discarded(),
                _ => false,
            };
            if moved {
                *h = Arc::new(Handle::Local {
                    ino,
                    file: file.clone(),
                    write: false,
                });
            }
        }
    }

    /// The last close of a handle (FUSE release). A written file that was not committed by its
    /// flush (an NFS client never flushes) is committed in the background.
    pub fn release(&self, fh: u64) {
        let h = self.handles.lock().remove(&fh);
        match h.as_deref() {
            Some(Handle::File { ino, meta, .. }) => {
                self.inodes.closed(*ino);
                self.join_if_cached(meta, true);
            }
            Some(Handle::Local { ino, file, write }) => {
                self.inodes.closed(*ino);
                if *write {
                    self.flush_records();
                    self.writer_closed(file);
                }
            }
            _ => {}
        }
    }

    /// Every mutation of a read-only mount.
    pub fn refuse_write(&self) -> VfsError {
        VfsError::ReadOnly
    }

    /// The kernel readahead this mount is meant to have, in bytes.
    pub fn readahead(&self) -> u64 {
        self.reader.readahead
    }

    pub fn is_writable(&self) -> bool {
        self.writer.is_some()
    }

    /// Folder listings fetched ahead of tree walks so far (`walk_ahead`).
    pub fn listings_fetched_ahead(&self) -> u64 {
        self.walks.fetched()
    }

    /// Open file and directory handles (every frontend's).
    /// The block cache (metrics read its sizes).
    pub fn chunk_store(&self) -> &ChunkStore {
        &self.reader.store
    }

    pub fn handle_count(&self) -> usize {
        self.handles.lock().len()
    }

    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }
}

/// How a file is opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenMode {
    pub write: bool,
    pub truncate: bool,
}

/// Reads a staged file's local copy (a blocking pread, off the async threads).
async fn read_staged(file: Arc<DirtyFile>, offset: u64, size: u32) -> VfsResult<Bytes> {
    tokio::task::spawn_blocking(move || file.read_at(offset, size))
        .await
        .map_err(|e| VfsError::Io(e.to_string()))?
        .map_err(|e| VfsError::Io(e.to_string()))
}
