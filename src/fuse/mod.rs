//! FuseAdapter: the kernel's FUSE requests onto VirtualFs. Thin by rule: decode, call the core,
//! encode, map errors through `VfsError::errno`. Each request runs as a task on the tokio runtime,
//! so a slow remote read never holds a FUSE worker thread.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner, OpenAccMode, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::vfs::error::VfsError;
use crate::vfs::{OpenMode, RenameFlags as VfsRenameFlags, SetAttr, VirtualFs};
pub use convert::to_fuse;
use convert::{bad_name, errno, file_type, name_of, new_node, seek_data_hole, time_of};

/// Largest read the kernel sends when max_read allows it (its own cap is 1 MiB).
pub const MAX_READ: u32 = 1 << 20;

/// Background requests (readahead READs) the kernel keeps in flight for the whole mount.
const MAX_BACKGROUND: u16 = 128;

// A dataset mount's default readahead is documented as the largest FUSE read.
const _: () = assert!(MAX_READ as u64 == crate::vfs::READAHEAD_OTHER);

pub mod ceiling;
pub mod ceiling_write;
mod convert;
mod direct;
mod init;
mod passthrough;
mod plus;
pub mod readahead;
mod served;
mod warm;

pub use warm::page_cache_bytes;

use direct::DirectReads;
use passthrough::Passthrough;
pub use passthrough::PassthroughStats;
use plus::PlusPolicy;

pub struct FuseAdapter {
    vfs: Arc<VirtualFs>,
    rt: tokio::runtime::Handle,
    ttl: Duration,
    passthrough: Arc<Passthrough>,
    /// Opens answered with direct I/O (`--direct-io`).
    direct: Arc<DirectReads>,
    /// How many entries READDIRPLUS first pages carry (`plus`).
    plus: Arc<PlusPolicy>,
}

impl FuseAdapter {
    pub fn new(vfs: Arc<VirtualFs>, rt: tokio::runtime::Handle) -> Self {
        let ttl = vfs.options().metadata_ttl;
        FuseAdapter {
            vfs,
            rt,
            ttl,
            passthrough: Arc::new(Passthrough::default()),
            direct: Arc::default(),
            plus: Arc::new(PlusPolicy::default()),
        }
    }

    /// Runs a request's future: polled once on this (the kernel channel's) thread, and spawned on
    /// the runtime only if it has to wait. Most requests of a busy mount are answered from memory
    /// or local disk; a hop to the runtime and back cost about as much as the work itself (a
    /// `cp -r` of small files spent a third of the mount's CPU in the scheduler). A future left
    /// pending is polled again by the runtime with its own waker, which every wait then uses.
    fn run<F: std::future::Future<Output = ()> + Send + 'static>(&self, f: F) {
        let mut f = Box::pin(f);
        let _rt = self.rt.enter();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if f.as_mut().poll(&mut cx).is_pending() {
            self.rt.spawn(f);
        }
    }

    /// A view of the session's passthrough use, for status and tests (valid after mounting).
    pub fn passthrough_stats(&self) -> PassthroughStats {
        PassthroughStats(self.passthrough.clone())
    }
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.negotiate(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name_of(name) else {
            return reply.error(Errno::ENOENT);
        };
        let (vfs, ttl, plus) = (self.vfs.clone(), self.ttl, self.plus.clone());
        self.run(async move {
            let _t = crate::metrics::timer("fuse", "lookup");
            match vfs.lookup(parent.0, &name).await {
                Ok(a) => {
                    if a.kind != crate::vfs::Kind::Dir {
                        plus.file_looked_up(parent.0);
                    }
                    reply.entry(&ttl, &to_fuse(&a), Generation(0))
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // The kernel forgets an inode when it evicts it, page cache included.
        self.passthrough.forgotten(ino.0);
        self.vfs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let (vfs, ttl) = (self.vfs.clone(), self.ttl);
        self.run(async move {
            let _t = crate::metrics::timer("fuse", "getattr");
            match vfs.getattr_fh(ino.0, fh.map(|f| f.0)).await {
                Ok(a) => reply.attr(&ttl, &to_fuse(&a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A truncate of a file open through passthrough would not reach its readers (they read
        // the cache file): refused like a write open (`open`).
        if size.is_some() && self.passthrough.passes_through(ino.0) {
            return reply.error(Errno::ETXTBSY);
        }
        let (vfs, ttl) = (self.vfs.clone(), self.ttl);
        let req = SetAttr {
            size,
            atime: atime.map(time_of),
            mtime: mtime.map(time_of),
            mode,
            uid,
            gid,
            fh: fh.map(|f| f.0),
        };
        self.run(async move {
            match vfs.setattr(ino.0, req).await {
                Ok(a) => reply.attr(&ttl, &to_fuse(&a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _u: u32, rdev: u32, reply: ReplyEntry) {
        let Some(name) = name_of(name) else {
            return reply.error(bad_name());
        };
        let (vfs, ttl, node) = (self.vfs.clone(), self.ttl, new_node(req, mode));
        self.run(async move {
            match vfs.mknod(parent.0, &name, mode, rdev, node).await {
                Ok(a) => reply.entry(&ttl, &to_fuse(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _u: u32, reply: ReplyEntry) {
        let Some(name) = name_of(name) else {
            return reply.error(bad_name());
        };
        let (vfs, ttl, node) = (self.vfs.clone(), self.ttl, new_node(req, mode));
        self.run(async move {
            match vfs.mkdir_as(parent.0, &name, node).await {
                Ok(a) => reply.entry(&ttl, &to_fuse(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = name_of(name) else {
            return reply.error(Errno::ENOENT);
        };
        let vfs = self.vfs.clone();
        self.run(async move {
            match vfs.unlink(parent.0, &name).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = name_of(name) else {
            return reply.error(Errno::ENOENT);
        };
        let vfs = self.vfs.clone();
        self.run(async move {
            match vfs.rmdir(parent.0, &name).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn symlink(&self, req: &Request, parent: INodeNo, name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        let (Some(name), Some(target)) = (name_of(name), target.to_str().map(str::to_string)) else {
            return reply.error(bad_name());
        };
        let (vfs, ttl, node) = (self.vfs.clone(), self.ttl, new_node(req, 0o777));
        self.run(async move {
            match vfs.symlink(parent.0, &name, &target, node).await {
                Ok(a) => reply.entry(&ttl, &to_fuse(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (Some(name), Some(new_name)) = (name_of(name), name_of(new_name)) else {
            return reply.error(bad_name());
        };
        let flags = VfsRenameFlags {
            noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
        };
        let vfs = self.vfs.clone();
        self.run(async move {
            match vfs.rename(parent.0, &name, new_parent.0, &new_name, flags).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    /// A second name for a file (docs/SEMANTICS.md, "Hard links").
    fn link(&self, _req: &Request, ino: INodeNo, new_parent: INodeNo, new_name: &OsStr, reply: ReplyEntry) {
        let Some(new_name) = name_of(new_name) else {
            return reply.error(bad_name());
        };
        let (vfs, ttl) = (self.vfs.clone(), self.ttl);
        self.run(async move {
            match vfs.link(ino.0, new_parent.0, &new_name).await {
                Ok(a) => reply.entry(&ttl, &to_fuse(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let Some(name) = name_of(name) else {
            return reply.error(bad_name());
        };
        let (vfs, ttl, node) = (self.vfs.clone(), self.ttl, new_node(req, mode));
        let exclusive = flags & libc::O_EXCL != 0;
        let truncate = flags & libc::O_TRUNC != 0;
        let passthrough = self.passthrough.clone();
        self.run(async move {
            let _t = crate::metrics::timer("fuse", "create");
            match vfs.create_as(parent.0, &name, exclusive, truncate, node).await {
                Ok((a, fh)) => {
                    // A plain open like any other write open (`open`); the file is the layer's.
                    if passthrough.begin_plain(a.ino) {
                        passthrough.plain_opened(a.ino, fh);
                    }
                    reply.created(&ttl, &to_fuse(&a), Generation(0), FileHandle(fh), FopenFlags::empty())
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // A pwrite to the local staging file: answered on this thread, no task needed.
        let _t = crate::metrics::timer("fuse", "write");
        match self.vfs.write_following(fh.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mode = OpenMode {
            write: flags.acc_mode() != OpenAccMode::O_RDONLY,
            truncate: flags.0 & libc::O_TRUNC != 0,
        };
        let (vfs, passthrough, direct) = (self.vfs.clone(), self.passthrough.clone(), self.direct.clone());
        let plain = mode.write || mode.truncate;
        // An overlay's unchanged Hub file may be open through passthrough: it takes no write
        // open until those opens are closed (docs/SEMANTICS.md, overlay mounts).
        if plain && !passthrough.begin_plain(ino.0) {
            return reply.error(Errno::ETXTBSY);
        }
        self.run(async move {
            let _t = crate::metrics::timer("fuse", "open");
            match vfs.open_with(ino.0, mode).await {
                Ok((fh, keep)) => {
                    let mut f = if keep {
                        FopenFlags::FOPEN_KEEP_CACHE
                    } else {
                        FopenFlags::empty()
                    };
                    if plain {
                        passthrough.plain_opened(ino.0, fh);
                        reply.opened(FileHandle(fh), f)
                    } else {
                        // A whole cached file still passes through: `reply` prefers it.
                        if direct.granted() && vfs.direct_io(fh) {
                            direct.opened(fh);
                            f |= FopenFlags::FOPEN_DIRECT_IO;
                        }
                        passthrough.reply(&vfs, ino.0, fh, f, reply)
                    }
                }
                Err(e) => {
                    if plain {
                        passthrough.plain_failed(ino.0);
                    }
                    reply.error(errno(&e))
                }
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // Direct reads neither fill the page cache nor show what it holds.
        let direct = if self.direct.is_direct(fh.0) { libc::O_DIRECT } else { 0 };
        self.passthrough.count_read(ino.0, offset, size, flags.0 | direct);
        let vfs = self.vfs.clone();
        self.run(async move {
            let _t = crate::metrics::timer("fuse", "read");
            match vfs.read(fh.0, offset, size).await {
                Ok(data) => {
                    crate::metrics::read("fuse", data.len());
                    reply.data(&data)
                }
                Err(e) => {
                    tracing::warn!(fh = fh.0, offset, size, error = %e, "read failed");
                    reply.error(errno(&e))
                }
            }
        });
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        // A read-only mount has nothing to do at close: ENOSYS tells the kernel to stop sending
        // FLUSH for this mount, which saves a round trip per close(2) (`cp -r` of small files).
        if !self.vfs.is_writable() {
            return reply.error(Errno::ENOSYS);
        }
        // A close of a handle that never wrote is answered here, without a hop to the runtime.
        if self.vfs.flush_is_noop(fh.0) {
            return reply.ok();
        }
        let vfs = self.vfs.clone();
        self.run(async move {
            let _t = crate::metrics::timer("fuse", "flush");
            match vfs.flush(fh.0).await {
                Ok(()) => reply.ok(),
                Err(e) => {
                    tracing::warn!(fh = fh.0, error = %e, "close: commit failed");
                    reply.error(errno(&e))
                }
            }
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.passthrough.released(fh.0);
        self.direct.released(fh.0);
        self.vfs.release(fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let vfs = self.vfs.clone();
        self.run(async move {
            match vfs.fsync(fh.0).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    // The requests below have fuser defaults that log a warning per call. The kernel caches ENOSYS
    // for most of them (and then does the generic thing a local file system does), but not for
    // ioctl: Python's open() sends TCGETS to every file, so each answer here is quiet and is the one
    // a local file system gives.

    /// Directory entries are journaled as they change: nothing more to make durable.
    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    /// A symlink's target (symlinks exist only in writable mounts; anything else is EINVAL).
    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let vfs = self.vfs.clone();
        self.run(async move {
            match vfs.readlink(ino.0).await {
                Ok(t) => reply.data(t.as_bytes()),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    /// No ioctl is supported: "not a terminal" (what a regular file answers TCGETS).
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(Errno::from_i32(libc::ENOTTY));
    }

    /// ENOSYS makes the kernel stop asking and report a regular file as always ready.
    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: fuser::PollNotifier,
        _events: fuser::PollEvents,
        _flags: fuser::PollFlags,
        reply: fuser::ReplyPoll,
    ) {
        reply.error(Errno::ENOSYS);
    }

    /// Never sent (no `blkdev` mount); answered quietly all the same.
    fn bmap(&self, _req: &Request, _ino: INodeNo, _blocksize: u32, _idx: u64, reply: fuser::ReplyBmap) {
        reply.error(Errno::ENOSYS);
    }

    /// POSIX locks are not negotiated, so the kernel keeps them locally and never sends these.
    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        reply: fuser::ReplyLock,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn setlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        _sleep: bool,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    /// ENOSYS makes the kernel copy through the page cache itself (as between two local files).
    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::ENOSYS);
    }

    /// SEEK_DATA / SEEK_HOLE (the kernel answers the other whences itself): files have no holes.
    fn lseek(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: i64, whence: i32, reply: fuser::ReplyLseek) {
        let vfs = self.vfs.clone();
        self.run(async move {
            let size = match vfs.getattr_fh(ino.0, Some(fh.0)).await {
                Ok(a) => a.size as i64,
                Err(e) => return reply.error(errno(&e)),
            };
            match seek_data_hole(offset, whence, size) {
                Ok(off) => reply.offset(off),
                Err(n) => reply.error(Errno::from_i32(n)),
            }
        });
    }

    /// Mode 0 (posix_fallocate) grows the file; KEEP_SIZE has nothing to reserve (the staged copy
    /// grows as it is written); punching or zeroing ranges is not supported, as on many local
    /// file systems, so callers fall back to writing.
    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if !self.vfs.is_writable() {
            return reply.error(Errno::from_i32(libc::EROFS));
        }
        match mode {
            libc::FALLOC_FL_KEEP_SIZE => reply.ok(),
            0 => {
                let vfs = self.vfs.clone();
                self.run(async move {
                    let r = async {
                        let end = offset
                            .checked_add(length)
                            .ok_or(VfsError::Invalid("fallocate range past the largest file size"))?;
                        let size = vfs.getattr_fh(ino.0, Some(fh.0)).await?.size;
                        if end > size {
                            let req = SetAttr {
                                size: Some(end),
                                fh: Some(fh.0),
                                ..SetAttr::default()
                            };
                            vfs.setattr(ino.0, req).await?;
                        }
                        Ok::<_, VfsError>(())
                    };
                    match r.await {
                        Ok(()) => reply.ok(),
                        Err(e) => reply.error(errno(&e)),
                    }
                });
            }
            _ => reply.error(Errno::from_i32(libc::EOPNOTSUPP)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let (vfs, plus) = (self.vfs.clone(), self.plus.clone());
        self.run(async move {
            let _t = crate::metrics::timer("fuse", "opendir");
            match vfs.opendir_keep(ino.0).await {
                // Read-only mounts let the kernel cache the listing's pages (a second `find` or
                // `os.walk` sends no READDIR), and keep them while the commit stays the same,
                // within the TTL. Not pages from a short first page: their entries carry no
                // attributes, and a program that stats them would LOOKUP each one, where a new
                // READDIRPLUS gives them all.
                Ok((fh, keep)) => {
                    let mut flags = FopenFlags::empty();
                    if !vfs.is_writable() {
                        flags |= FopenFlags::FOPEN_CACHE_DIR;
                    }
                    if keep && !plus.listed_short(ino.0) {
                        flags |= FopenFlags::FOPEN_KEEP_CACHE;
                    }
                    reply.opened(FileHandle(fh), flags)
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.plus.plain_page(offset);
        let entries = match self.vfs.dir_entries(fh.0) {
            Ok(e) => e,
            Err(e) => return reply.error(errno(&e)),
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let kind = file_type(e.attr.kind);
            if reply.add(INodeNo(e.attr.ino), i as u64 + 1, kind, &e.name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let (entries, dir) = match (self.vfs.dir_entries(fh.0), self.vfs.dir_path(ino.0)) {
            (Ok(e), Ok(d)) => (e, d),
            (Err(e), _) | (_, Err(e)) => return reply.error(errno(&e)),
        };
        let limit = self.plus.limit(ino.0, offset);
        for (i, e) in entries.iter().enumerate().skip(offset as usize).take(limit) {
            let dots = e.name == "." || e.name == "..";
            // The snapshot is from opendir: on a writable mount the name may have been deleted,
            // renamed over or recreated since, and a cached entry would tie the name to a file
            // that is gone or to another file's number. There, entries are sent with no TTL (the
            // kernel looks each name up again when it is used) under the number the name has now
            // (the one counted below).
            let mut attr = to_fuse(&e.attr);
            let mut ttl = if self.vfs.is_writable() {
                Duration::ZERO
            } else {
                self.ttl
            };
            // Every entry readdirplus returns (but . and ..) counts as a lookup for the kernel:
            // counted here, and given back if it does not fit in this reply.
            if !dots {
                let now = self.vfs.entry_lookup(&dir, &e.name);
                if now != e.attr.ino {
                    attr.ino = INodeNo(now);
                    ttl = Duration::ZERO;
                }
            }
            if reply.add(attr.ino, i as u64 + 1, &e.name, &ttl, &attr, Generation(0)) {
                if !dots {
                    self.vfs.forget(attr.ino.0, 1);
                }
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.vfs.releasedir(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Writable mounts report room so tools that check free space (cp, rsync) go ahead; the
        // real limit is the staging disk and the Hub's quota.
        if self.vfs.is_writable() {
            let free = 1u64 << 30;
            reply.statfs(
                free,
                free,
                free,
                self.vfs.inode_count() as u64,
                1 << 20,
                4096,
                255,
                4096,
            );
        } else {
            reply.statfs(0, 0, 0, self.vfs.inode_count() as u64, 0, 1 << 20, 255, 1 << 20);
        }
    }

    /// The Hub stores no extended attributes. ENOSYS makes the kernel answer every later
    /// getxattr itself (EOPNOTSUPP, what a file system without them says) instead of sending it:
    /// `ls -l` asks two per file (its SELinux label and ACL), which were two round trips per
    /// entry of an `ls -lR`, 200,000 requests over 100,000 files.
    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    /// As getxattr: `cp -a` and Python's `shutil.copystat` list each file's attributes, and take
    /// EOPNOTSUPP as "none".
    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        // The Hub stores no extended attributes.
        let e = if self.vfs.is_writable() {
            libc::ENOTSUP
        } else {
            libc::EROFS
        };
        reply.error(Errno::from_i32(e));
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        let e = if self.vfs.is_writable() {
            libc::ENODATA
        } else {
            libc::EROFS
        };
        reply.error(Errno::from_i32(e));
    }
}
