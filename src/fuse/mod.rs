//! FuseAdapter: the kernel's FUSE requests onto VirtualFs. Thin by rule: decode, call the core,
//! encode, map errors through `VfsError::errno`. Each request runs as a task on the tokio runtime,
//! so a slow remote read never holds a FUSE worker thread.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};

use crate::vfs::error::VfsError;
use crate::vfs::{Attr, Kind, VirtualFs};

/// Largest read the kernel sends when max_read allows it (its own cap is 1 MiB).
pub const MAX_READ: u32 = 1 << 20;

pub struct FuseAdapter {
    vfs: Arc<VirtualFs>,
    rt: tokio::runtime::Handle,
    ttl: Duration,
}

impl FuseAdapter {
    pub fn new(vfs: Arc<VirtualFs>, rt: tokio::runtime::Handle) -> Self {
        let ttl = vfs.options().metadata_ttl;
        FuseAdapter { vfs, rt, ttl }
    }
}

fn errno(e: &VfsError) -> Errno {
    Errno::from_i32(e.errno())
}

pub fn to_fuse(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: a.mtime,
        kind: match a.kind {
            Kind::Dir => FileType::Directory,
            Kind::File => FileType::RegularFile,
        },
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: 1 << 20,
        flags: 0,
    }
}

fn name_of(name: &OsStr) -> Option<String> {
    name.to_str().map(str::to_string)
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Ask for large reads ahead and parallel directory operations; the kernel keeps what it supports.
        let _ = config.set_max_readahead(MAX_READ);
        let _ = config.add_capabilities(
            InitFlags::FUSE_ASYNC_READ
                | InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO
                | InitFlags::FUSE_PARALLEL_DIROPS,
        );
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name_of(name) else {
            return reply.error(Errno::ENOENT);
        };
        let (vfs, ttl) = (self.vfs.clone(), self.ttl);
        self.rt.spawn(async move {
            match vfs.lookup(parent.0, &name).await {
                Ok(a) => reply.entry(&ttl, &to_fuse(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.vfs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let (vfs, ttl) = (self.vfs.clone(), self.ttl);
        self.rt.spawn(async move {
            match vfs.getattr(ino.0).await {
                Ok(a) => reply.attr(&ttl, &to_fuse(&a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn mknod(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _r: u32, reply: ReplyEntry) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn mkdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, reply: ReplyEntry) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn unlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn rmdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn symlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _t: &std::path::Path, reply: ReplyEntry) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn rename(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _np: INodeNo,
        _nn: &OsStr,
        _f: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn link(&self, _req: &Request, _i: INodeNo, _np: INodeNo, _nn: &OsStr, reply: ReplyEntry) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn create(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _f: i32, reply: ReplyCreate) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0;
        let vfs = self.vfs.clone();
        self.rt.spawn(async move {
            match vfs.open(ino.0, write).await {
                Ok((fh, keep)) => {
                    let f = if keep {
                        FopenFlags::FOPEN_KEEP_CACHE
                    } else {
                        FopenFlags::empty()
                    };
                    reply.opened(FileHandle(fh), f)
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let vfs = self.vfs.clone();
        self.rt.spawn(async move {
            match vfs.read(fh.0, offset, size).await {
                Ok(data) => reply.data(&data),
                Err(e) => {
                    tracing::warn!(fh = fh.0, offset, size, error = %e, "read failed");
                    reply.error(errno(&e))
                }
            }
        });
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        reply.ok();
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
        self.vfs.release(fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let vfs = self.vfs.clone();
        self.rt.spawn(async move {
            match vfs.opendir(ino.0).await {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let entries = match self.vfs.dir_entries(fh.0) {
            Ok(e) => e,
            Err(e) => return reply.error(errno(&e)),
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let kind = if e.attr.kind == Kind::Dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
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
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(
                INodeNo(e.attr.ino),
                i as u64 + 1,
                &e.name,
                &self.ttl,
                &to_fuse(&e.attr),
                Generation(0),
            ) {
                break;
            }
            // Every entry readdirplus returns (but . and ..) counts as a lookup for the kernel.
            if e.name != "." && e.name != ".." {
                self.vfs.note_entry_lookup(&dir, &e.name);
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.vfs.releasedir(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, self.vfs.inode_count() as u64, 0, 1 << 20, 255, 1 << 20);
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::from_i32(libc::ENODATA));
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 { reply.size(0) } else { reply.data(&[]) }
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
        reply.error(errno(&self.vfs.refuse_write()));
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(errno(&self.vfs.refuse_write()));
    }
}
