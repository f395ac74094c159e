//! The FUSE ceiling for benchmarks: a trivial read-only filesystem serving one file (`data.bin`) from
//! memory, mounted with the same options as hubfs (max_read 1 MiB, raised readahead). Whatever it
//! reaches is what the kernel's FUSE path allows on this machine; hubfs is measured against it.

use std::ffi::OsStr;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request,
};

const TTL: Duration = Duration::from_secs(3600);

pub struct MemFs {
    pub data: Vec<u8>,
}

fn attr(ino: u64, size: u64, dir: bool) -> FileAttr {
    let t = SystemTime::UNIX_EPOCH;
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: if dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if dir { 0o555 } else { 0o444 },
        nlink: if dir { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 1 << 20,
        flags: 0,
    }
}

impl Filesystem for MemFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == 1 && name == "data.bin" {
            reply.entry(&TTL, &attr(2, self.data.len() as u64, false), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino.0 {
            1 => reply.attr(&TTL, &attr(1, 0, true)),
            2 => reply.attr(&TTL, &attr(2, self.data.len() as u64, false)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let start = (offset as usize).min(self.data.len());
        let end = (start + size as usize).min(self.data.len());
        reply.data(&self.data[start..end]);
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let entries = [
            (1u64, FileType::Directory, "."),
            (1, FileType::Directory, ".."),
            (2, FileType::RegularFile, "data.bin"),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Mounts a `mib` MiB MemFs at `dir`; dropping the session unmounts.
pub fn mount(dir: &std::path::Path, mib: usize) -> std::io::Result<fuser::BackgroundSession> {
    let data: Vec<u8> = (0..mib << 20).map(|i| (i % 251) as u8).collect();
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("memfs-ceiling".into()),
        fuser::MountOption::RO,
        fuser::MountOption::CUSTOM(format!("max_read={}", super::MAX_READ)),
    ];
    config.n_threads = Some(4);
    config.clone_fd = true;
    let session = fuser::Session::new(MemFs { data }, dir, &config)?.spawn()?;
    super::readahead::raise_readahead(dir, crate::vfs::READAHEAD_MODEL);
    Ok(session)
}
