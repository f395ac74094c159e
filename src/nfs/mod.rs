//! NfsAdapter: NFSv3 requests (decoded by hubfs's RPC front, `rpc`, into calls of nfsserve's
//! `NFSFileSystem` trait and of `rpc::Served`) onto the same VirtualFs the FUSE mount uses. Thin by
//! rule: call the core and turn `VfsError::errno` into an NFS status in one place.
//!
//! Calls that change something carry the caller's AUTH_UNIX credentials (`served`): new entries are
//! the caller's, with the mode the client sent, and the permission checks FUSE leaves to the kernel
//! are made here (`perm`), as a Linux NFS server makes them. Not checked: LOOKUP, READDIR and
//! READLINK (a client checks search and read permission through ACCESS, which answers by the mode
//! bits); AUTH_NONE stands for the mount's owner; root is not squashed.
//!
//! NFS is stateless where FUSE is not, and the adapter bridges the two with bounded state only:
//! - file ids are VirtualFs inode numbers, *remembered* in the core's bounded LRU (NFS clients never
//!   forget a handle); a handle minted by another server instance answers NFS3ERR_STALE;
//! - reads go through a VirtualFs file handle per recently read file (bounded, idle ones closed), so
//!   sequential detection and prefetch work as on FUSE;
//! - READDIR/READDIRPLUS cookies index a VirtualFs directory snapshot taken when a listing starts
//!   (cookie 0) and reused by every later page of it;
//! - on a writable mount, WRITEs go through a VirtualFs write handle per file that is closed after
//!   `WRITE_QUIET` without writes: NFS has no close, so that quiet period is when the file is
//!   committed (in the background, like a FUSE close with `--close stage`); a COMMIT or a stable
//!   WRITE seals the file (fsync and journal, as fsync does before the network) without waiting
//!   for the Hub.

pub mod ceiling;
mod perm;
pub mod release;
pub mod rpc;
mod served;
pub mod server;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use nfsserve::nfs::{
    fattr3, fileid3, filename3, fsinfo3, ftype3, nfs_fh3, nfspath3, nfsstat3, nfstime3, post_op_attr, sattr3, specdata3,
};
use nfsserve::vfs::{DirEntry as NfsDirEntry, NFSFileSystem, ReadDirResult, VFSCapabilities};

use self::release::{HeldDir, HeldFile, InUse, Releaser};
use self::rpc::{CreateHow, Served, Stability};
use crate::vfs::error::VfsError;
use crate::vfs::{Attr, ContentId, DirEntry, Hold, Ino, Kind, NewNode, OpenMode, ROOT_INO, VirtualFs};

/// Largest READ/WRITE transfer offered to clients (the Linux client's own cap is 1 MiB).
pub const MAX_TRANSFER: u32 = 1 << 20;

/// Largest file size announced in FSINFO: model files exceed nfsserve's default of 128 GiB.
pub const MAX_FILE_SIZE: u64 = 1 << 62;

/// Open VirtualFs file handles kept for reads, and how long an idle one stays open.
const OPEN_FILES: u64 = 1024;
const OPEN_IDLE: Duration = Duration::from_secs(30);

/// Files open for writing at once, and how long one stays open without a WRITE before it is closed
/// (which commits it).
const WRITE_FILES: u64 = 1024;
pub const WRITE_QUIET: Duration = Duration::from_secs(2);

/// How many write handles the adapter keeps and for how long (`WRITE_FILES`, `WRITE_QUIET`; tests
/// make them small to reach the limits quickly).
#[derive(Debug, Clone, Copy)]
pub struct WriteLimits {
    pub files: u64,
    pub quiet: Duration,
}

impl Default for WriteLimits {
    fn default() -> WriteLimits {
        WriteLimits {
            files: WRITE_FILES,
            quiet: WRITE_QUIET,
        }
    }
}

/// The write handles NFS WRITEs go through, one per file. A handle leaving the cache (quiet for
/// `WRITE_QUIET`, the least recently written when the cache is full, replaced, or its file
/// removed) is closed by the eviction listener, so the file's commit does not wait for moka to get
/// round to dropping the value; a request still using it keeps it open until it is done.
pub(crate) struct Writers {
    cache: moka::sync::Cache<Ino, Arc<HeldFile>>,
    releaser: Releaser,
}

impl Writers {
    fn new(releaser: Releaser, limits: WriteLimits) -> Writers {
        let cache = moka::sync::Cache::builder()
            .max_capacity(limits.files)
            .time_to_idle(limits.quiet)
            // Plain LRU: moka's default admission policy may turn a new file's handle away at
            // once when the cache is full, and a file being written is the one to keep.
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .eviction_listener(|_ino, w: Arc<HeldFile>, _cause| w.close())
            .build();
        Writers { cache, releaser }
    }

    /// The write handle of `ino` if one is open, entered for one request.
    fn enter(&self, ino: Ino) -> Option<InUse> {
        self.cache.get(&ino).and_then(|w| w.enter())
    }

    /// Closes every write handle and waits until the core has them closed, so that a drain which
    /// follows finds every written file dirty-and-closed and commits it.
    pub(crate) fn close_all(&self) {
        for (_, w) in self.cache.iter() {
            w.close();
        }
        self.cache.invalidate_all();
        self.cache.run_pending_tasks();
        self.releaser.flush();
    }
}

/// Directory snapshots kept for listings in progress, and how long an idle one is kept.
const DIR_SNAPSHOTS: u64 = 256;
const DIR_IDLE: Duration = Duration::from_secs(120);

/// A file handle this adapter keeps open on behalf of NFS reads. The VirtualFs handle is released
/// when the last holder drops it, so a read in flight keeps its handle even after the cache let go.
struct OpenFile {
    held: HeldFile,
    content: ContentId,
}

/// A directory listing in progress: the VirtualFs snapshot and where each cookie resumes.
struct DirSnapshot {
    /// The VirtualFs snapshot handle, released when this listing is dropped.
    _held: HeldDir,
    path: String,
    entries: Arc<Vec<DirEntry>>,
    /// Cookie (the entry's file id) → index of the entry after it.
    resume: HashMap<Ino, usize>,
}

/// Lock order: the adapter takes no lock of its own; the moka caches lock internally, and no lock is
/// held across an `.await`. No value here releases anything inline when dropped: see `release`.
pub struct NfsAdapter {
    vfs: Arc<VirtualFs>,
    /// Distinguishes this server instance's handles from those of an earlier one.
    generation: u64,
    files: moka::sync::Cache<Ino, Arc<OpenFile>>,
    dirs: moka::sync::Cache<Ino, Arc<DirSnapshot>>,
    /// Write handles by file (writable mounts); idle ones are closed by a sweeper task.
    writers: Arc<Writers>,
    releaser: Releaser,
    fsid: u64,
}

/// The NFS status for a core error: the single place NFS statuses come from.
pub fn nfs_status(e: &VfsError) -> nfsstat3 {
    match e.errno() {
        libc::ENOENT => nfsstat3::NFS3ERR_NOENT,
        libc::EROFS => nfsstat3::NFS3ERR_ROFS,
        libc::ENOTDIR => nfsstat3::NFS3ERR_NOTDIR,
        libc::EISDIR => nfsstat3::NFS3ERR_ISDIR,
        libc::ENAMETOOLONG => nfsstat3::NFS3ERR_NAMETOOLONG,
        libc::EINVAL => nfsstat3::NFS3ERR_INVAL,
        libc::EACCES => nfsstat3::NFS3ERR_ACCES,
        libc::EPERM => nfsstat3::NFS3ERR_PERM,
        libc::EEXIST => nfsstat3::NFS3ERR_EXIST,
        libc::ENOTEMPTY => nfsstat3::NFS3ERR_NOTEMPTY,
        libc::ENOSPC => nfsstat3::NFS3ERR_NOSPC,
        libc::EFBIG => nfsstat3::NFS3ERR_FBIG,
        // An inode number the core no longer knows: the client must look the path up again.
        libc::EBADF => nfsstat3::NFS3ERR_STALE,
        _ => nfsstat3::NFS3ERR_IO,
    }
}

fn nfs_time(t: SystemTime) -> nfstime3 {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    nfstime3 {
        seconds: d.as_secs().min(u32::MAX as u64) as u32,
        nseconds: d.subsec_nanos(),
    }
}

fn name_str(name: &filename3) -> Result<&str, nfsstat3> {
    // The Hub's paths are UTF-8: a name that is not cannot exist there.
    std::str::from_utf8(&name.0).map_err(|_| nfsstat3::NFS3ERR_NOENT)
}

impl NfsAdapter {
    pub fn new(vfs: Arc<VirtualFs>) -> NfsAdapter {
        NfsAdapter::with_limits(vfs, WriteLimits::default())
    }

    pub fn with_limits(vfs: Arc<VirtualFs>, limits: WriteLimits) -> NfsAdapter {
        let files = moka::sync::Cache::builder()
            .max_capacity(OPEN_FILES)
            .time_to_idle(OPEN_IDLE)
            .build();
        let dirs = moka::sync::Cache::builder()
            .max_capacity(DIR_SNAPSHOTS)
            .time_to_idle(DIR_IDLE)
            .build();
        // Random per instance: a restarted server must not accept the old server's handles.
        let generation = rand::random::<u64>() | 1;
        let releaser = Releaser::start(vfs.clone());
        let writers = Arc::new(Writers::new(releaser.clone(), limits));
        // moka evicts idle entries lazily: sweep so a quiet file is closed (and committed) on time.
        if vfs.is_writable()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let weak = Arc::downgrade(&writers);
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    match weak.upgrade() {
                        Some(w) => w.cache.run_pending_tasks(),
                        None => return,
                    }
                }
            });
        }
        NfsAdapter {
            vfs,
            generation,
            files,
            dirs,
            writers,
            releaser,
            fsid: 0x0068_7562_6673, // "hubfs"
        }
    }

    /// The write handle of `ino`, opening one (staging the file) if needed, entered for the
    /// request.
    async fn writer(&self, ino: Ino) -> Result<InUse, nfsstat3> {
        if let Some(w) = self.writers.enter(ino) {
            return Ok(w);
        }
        let mode = OpenMode {
            write: true,
            truncate: false,
        };
        let (fh, _) = self.vfs.open_with(ino, mode).await.map_err(|e| nfs_status(&e))?;
        let (w, in_use) = HeldFile::new_in_use(fh, self.releaser.clone());
        self.writers.cache.insert(ino, w);
        Ok(in_use)
    }

    /// Closes every write handle now (their files are committed in the background).
    pub fn close_writers(&self) {
        self.writers.close_all();
    }

    /// CREATE: the new file's write handle is kept for the WRITEs that follow.
    async fn create_file(
        &self,
        dirid: fileid3,
        name: &str,
        exclusive: bool,
        truncate: bool,
        node: NewNode,
    ) -> Result<(Ino, Attr), nfsstat3> {
        let (a, fh) = self
            .vfs
            .create_as(dirid, name, exclusive, truncate, node)
            .await
            .map_err(|e| nfs_status(&e))?;
        let (w, _in_use) = HeldFile::new_in_use(fh, self.releaser.clone());
        let ino = self.remembered(dirid, name, a.ino)?;
        self.writers.cache.insert(ino, w);
        Ok((ino, a))
    }

    /// A name created through NFS: the kernel-style lookup count `create`/`mkdir` took is traded
    /// for a remembered number (NFS never forgets).
    fn remembered(&self, dirid: fileid3, name: &str, counted: Ino) -> Result<Ino, nfsstat3> {
        let dir = self.vfs.dir_path(dirid).map_err(|e| nfs_status(&e))?;
        let path = if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        };
        let ino = self.vfs.remember_path(&path);
        self.vfs.forget(counted, 1);
        Ok(ino)
    }

    pub fn vfs(&self) -> &Arc<VirtualFs> {
        &self.vfs
    }

    /// Open VirtualFs handles and snapshots this adapter holds (bounded; for tests and status).
    pub fn held_state(&self) -> (u64, u64) {
        self.files.run_pending_tasks();
        self.dirs.run_pending_tasks();
        self.releaser.flush();
        (self.files.entry_count(), self.dirs.entry_count())
    }

    fn fattr(&self, a: &Attr) -> fattr3 {
        let ftype = match a.kind {
            Kind::Dir => ftype3::NF3DIR,
            Kind::File => ftype3::NF3REG,
            Kind::Symlink => ftype3::NF3LNK,
            Kind::Fifo => ftype3::NF3FIFO,
            Kind::Socket => ftype3::NF3SOCK,
            Kind::CharDevice => ftype3::NF3CHR,
            Kind::BlockDevice => ftype3::NF3BLK,
        };
        let mode = a.perm as u32;
        fattr3 {
            ftype,
            mode,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            used: a.size.div_ceil(4096) * 4096,
            rdev: specdata3 {
                specdata1: libc::major(a.rdev as libc::dev_t),
                specdata2: libc::minor(a.rdev as libc::dev_t),
            },
            fsid: self.fsid,
            fileid: a.ino,
            atime: nfs_time(a.atime),
            mtime: nfs_time(a.mtime),
            ctime: nfs_time(a.ctime),
        }
    }

    /// The VirtualFs handle reads of `ino` go through, reopened when the file's content changed.
    async fn open_file(&self, ino: Ino) -> Result<Arc<OpenFile>, nfsstat3> {
        let content = self.vfs.content_id(ino).await.map_err(|e| nfs_status(&e))?;
        if let Some(f) = self.files.get(&ino)
            && f.content == content
        {
            return Ok(f);
        }
        let (fh, _) = self.vfs.open(ino, false).await.map_err(|e| nfs_status(&e))?;
        // Taken for an in-order reader (libnfs reads one READ at a time) until a READ arrives
        // behind its front, as a kernel client's readahead sends them.
        self.vfs.expect_in_order(fh);
        let f = Arc::new(OpenFile {
            held: HeldFile::new(fh, self.releaser.clone()),
            content,
        });
        // A replaced entry's handle is released once reads still using it are done.
        self.files.insert(ino, f.clone());
        Ok(f)
    }

    /// A new snapshot of directory `ino`, which later pages of the same listing reuse.
    async fn snapshot(&self, ino: Ino) -> Result<Arc<DirSnapshot>, nfsstat3> {
        let fh = self.vfs.opendir(ino).await.map_err(|e| nfs_status(&e))?;
        let mut d = DirSnapshot {
            _held: HeldDir::new(fh, self.releaser.clone()),
            path: String::new(),
            entries: Arc::new(Vec::new()),
            resume: HashMap::new(),
        };
        // From here on, dropping `d` releases the VirtualFs handle, also on the error paths.
        d.entries = self.vfs.dir_entries(fh).map_err(|e| nfs_status(&e))?;
        d.path = self.vfs.dir_path(ino).map_err(|e| nfs_status(&e))?;
        d.resume = d.entries.iter().enumerate().map(|(i, e)| (e.attr.ino, i + 1)).collect();
        let d = Arc::new(d);
        self.dirs.insert(ino, d.clone());
        Ok(d)
    }
}

impl NfsAdapter {
    /// Seals the file through its write handle, or by inode when there is none (a handle let go
    /// was sealed as it closed, unless it is still being closed right now).
    async fn seal(&self, id: fileid3, fh: Option<u64>) -> Result<(), nfsstat3> {
        if let Some(fh) = fh {
            match self.vfs.seal_handle(fh).await {
                Err(VfsError::BadHandle) => {}
                r => return r.map_err(|e| nfs_status(&e)),
            }
        }
        self.vfs.seal_ino(id).await.map_err(|e| nfs_status(&e))
    }
}

#[async_trait]
impl NFSFileSystem for NfsAdapter {
    fn capabilities(&self) -> VFSCapabilities {
        // Clients such as libnfs (and fio's engine on it) open files read-write and would be refused
        // by an ACCESS answer without write bits; every mutation is still answered NFS3ERR_ROFS.
        VFSCapabilities::ReadWrite
    }

    fn root_dir(&self) -> fileid3 {
        ROOT_INO
    }

    async fn lookup(&self, dirid: fileid3, filename: &filename3) -> Result<fileid3, nfsstat3> {
        let name = name_str(filename)?;
        match name {
            "." => return Ok(dirid),
            ".." => {
                let path = self.vfs.dir_path(dirid).map_err(|e| nfs_status(&e))?;
                return Ok(match path.rsplit_once('/') {
                    Some((parent, _)) => self.vfs.remember_path(parent),
                    None => ROOT_INO,
                });
            }
            _ => {}
        }
        let a = self
            .vfs
            .lookup_as(dirid, name, Hold::Remembered)
            .await
            .map_err(|e| nfs_status(&e))?;
        Ok(a.ino)
    }

    async fn getattr(&self, id: fileid3) -> Result<fattr3, nfsstat3> {
        let a = self.vfs.getattr(id).await.map_err(|e| nfs_status(&e))?;
        Ok(self.fattr(&a))
    }

    /// nfsserve's calls without credentials stand for AUTH_NONE (`served`).
    async fn setattr(&self, id: fileid3, setattr: sattr3) -> Result<fattr3, nfsstat3> {
        self.setattr_by(None, id, setattr).await
    }

    /// nfsserve's READ (its own listener, tests): `read_attr`, copied into the `Vec` it wants.
    async fn read(&self, id: fileid3, offset: u64, count: u32) -> Result<(Vec<u8>, bool), nfsstat3> {
        let (data, eof, _) = self.read_attr(None, id, offset, count).await?;
        Ok((data.to_vec(), eof))
    }

    /// nfsserve's WRITE has no stability argument and its listener answers FILE_SYNC: so it is.
    async fn write(&self, id: fileid3, offset: u64, data: &[u8]) -> Result<fattr3, nfsstat3> {
        Ok(self.write_durable(None, id, offset, data, Stability::FileSync).await?.0)
    }

    async fn create(&self, dirid: fileid3, filename: &filename3, attr: sattr3) -> Result<(fileid3, fattr3), nfsstat3> {
        let (id, a) = self
            .create_by(None, dirid, filename, CreateHow::Unchecked(attr))
            .await?;
        match a {
            Some(a) => Ok((id, a)),
            None => Ok((id, self.getattr(id).await?)),
        }
    }

    async fn create_exclusive(&self, dirid: fileid3, filename: &filename3) -> Result<fileid3, nfsstat3> {
        Ok(self.create_by(None, dirid, filename, CreateHow::Exclusive).await?.0)
    }

    async fn mkdir(&self, dirid: fileid3, dirname: &filename3) -> Result<(fileid3, fattr3), nfsstat3> {
        self.mkdir_by(None, dirid, dirname, sattr3::default()).await
    }

    /// REMOVE and RMDIR (nfsserve sends both here).
    async fn remove(&self, dirid: fileid3, filename: &filename3) -> Result<(), nfsstat3> {
        self.remove_by(None, dirid, filename).await
    }

    async fn rename(
        &self,
        from_dirid: fileid3,
        from_filename: &filename3,
        to_dirid: fileid3,
        to_filename: &filename3,
    ) -> Result<(), nfsstat3> {
        self.rename_by(None, from_dirid, from_filename, to_dirid, to_filename)
            .await
    }

    async fn readdir(
        &self,
        dirid: fileid3,
        start_after: fileid3,
        max_entries: usize,
    ) -> Result<ReadDirResult, nfsstat3> {
        // Cookie 0 starts a listing (a fresh snapshot); a later page continues the one in progress,
        // or, if that was dropped meanwhile, a fresh one as long as the cookie is still in it.
        let snap = match (start_after, self.dirs.get(&dirid)) {
            (0, _) => self.snapshot(dirid).await?,
            (_, Some(s)) if s.resume.contains_key(&start_after) => s,
            _ => self.snapshot(dirid).await?,
        };
        let from = if start_after == 0 {
            0
        } else {
            *snap.resume.get(&start_after).ok_or(nfsstat3::NFS3ERR_BAD_COOKIE)?
        };
        let to = from.saturating_add(max_entries.max(1)).min(snap.entries.len());
        let mut entries = Vec::with_capacity(to - from);
        for e in &snap.entries[from..to] {
            self.vfs.remember_entry(&snap.path, &e.name);
            // On a writable mount a file may have been written since the snapshot: the client
            // takes these attributes as current, so give it the file's own (names and cookies stay
            // the snapshot's).
            let attr = if self.vfs.is_writable() {
                self.vfs.getattr(e.attr.ino).await.unwrap_or_else(|_| e.attr.clone())
            } else {
                e.attr.clone()
            };
            entries.push(NfsDirEntry {
                fileid: e.attr.ino,
                name: e.name.as_bytes().into(),
                attr: self.fattr(&attr),
            });
        }
        Ok(ReadDirResult {
            entries,
            end: to == snap.entries.len(),
        })
    }

    async fn symlink(
        &self,
        dirid: fileid3,
        linkname: &filename3,
        symlink: &nfspath3,
        attr: &sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        self.symlink_by(None, dirid, linkname, symlink, *attr).await
    }

    /// A symlink's target; anything else is NFS3ERR_INVAL.
    async fn readlink(&self, id: fileid3) -> Result<nfspath3, nfsstat3> {
        let target = self.vfs.readlink(id).await.map_err(|e| nfs_status(&e))?;
        Ok(target.into_bytes().into())
    }

    async fn fsinfo(&self, root_fileid: fileid3) -> Result<fsinfo3, nfsstat3> {
        let obj_attributes = match self.getattr(root_fileid).await {
            Ok(a) => post_op_attr::attributes(a),
            Err(_) => post_op_attr::Void,
        };
        Ok(fsinfo3 {
            obj_attributes,
            rtmax: MAX_TRANSFER,
            rtpref: MAX_TRANSFER,
            rtmult: 4096,
            wtmax: MAX_TRANSFER,
            wtpref: MAX_TRANSFER,
            wtmult: 4096,
            dtpref: 64 << 10,
            maxfilesize: MAX_FILE_SIZE,
            time_delta: nfstime3 {
                seconds: 0,
                nseconds: 1_000_000,
            },
            properties: nfsserve::nfs::FSF_HOMOGENEOUS,
        })
    }

    fn id_to_fh(&self, id: fileid3) -> nfs_fh3 {
        let mut data = Vec::with_capacity(16);
        data.extend_from_slice(&self.generation.to_le_bytes());
        data.extend_from_slice(&id.to_le_bytes());
        nfs_fh3 { data }
    }

    fn fh_to_id(&self, fh: &nfs_fh3) -> Result<fileid3, nfsstat3> {
        let (Some(generation), Some(id)) = (fh.data.get(0..8), fh.data.get(8..16)) else {
            return Err(nfsstat3::NFS3ERR_BADHANDLE);
        };
        if fh.data.len() != 16 {
            return Err(nfsstat3::NFS3ERR_BADHANDLE);
        }
        let le = |b: &[u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        };
        if le(generation) != self.generation {
            return Err(nfsstat3::NFS3ERR_STALE);
        }
        Ok(le(id))
    }

    fn serverid(&self) -> nfsserve::nfs::cookieverf3 {
        self.generation.to_le_bytes()
    }
}
