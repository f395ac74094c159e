//! The FUSE ceiling for writes, for benchmarks: a filesystem that keeps only names and sizes in
//! memory and drops every byte written, mounted with the same options as a writable hubfs mount
//! (`default_permissions`, 4 threads, one device fd per thread). A `cp -r` of small files into it
//! pays what the kernel's FUSE path costs per file on this machine (a LOOKUP, CREATE, WRITE,
//! FLUSH and RELEASE, and a GETATTR of the folder each create made stale) and nothing else, so it
//! bounds how fast any FUSE filesystem can take that copy here.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    ReplyAttr, ReplyCreate, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

const TTL: Duration = Duration::from_secs(3600);

struct Node {
    dir: bool,
    size: u64,
    mode: u32,
    uid: u32,
    gid: u32,
}

/// Names and sizes only. Lock order: `tree` is the only lock.
pub struct SinkFs {
    tree: Arc<Mutex<Tree>>,
}

/// Reads a mounted [`SinkFs`]'s totals.
pub struct SinkTotals(Arc<Mutex<Tree>>);

struct Tree {
    nodes: HashMap<u64, Node>,
    names: HashMap<(u64, OsString), u64>,
    next: u64,
}

impl SinkFs {
    pub fn new() -> SinkFs {
        let mut nodes = HashMap::new();
        nodes.insert(
            1,
            Node {
                dir: true,
                size: 0,
                mode: 0o755,
                uid: 0,
                gid: 0,
            },
        );
        SinkFs {
            tree: Arc::new(Mutex::new(Tree {
                nodes,
                names: HashMap::new(),
                next: 2,
            })),
        }
    }
}

impl SinkTotals {
    /// Files created so far and the bytes written to them.
    pub fn totals(&self) -> (u64, u64) {
        let t = self.0.lock();
        let files = t.nodes.values().filter(|n| !n.dir);
        files.fold((0, 0), |(n, b), f| (n + 1, b + f.size))
    }
}

impl Default for SinkFs {
    fn default() -> SinkFs {
        SinkFs::new()
    }
}

fn attr(ino: u64, n: &Node) -> FileAttr {
    let t = SystemTime::UNIX_EPOCH;
    FileAttr {
        ino: INodeNo(ino),
        size: n.size,
        blocks: n.size.div_ceil(512),
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: if n.dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: (n.mode & 0o7777) as u16,
        nlink: if n.dir { 2 } else { 1 },
        uid: n.uid,
        gid: n.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Tree {
    fn add(
        &mut self,
        parent: u64,
        name: &OsStr,
        dir: bool,
        mode: u32,
        req: &Request,
    ) -> Result<(u64, FileAttr), Errno> {
        if !self.nodes.get(&parent).is_some_and(|p| p.dir) {
            return Err(Errno::ENOENT);
        }
        if self.names.contains_key(&(parent, name.to_os_string())) {
            return Err(Errno::EEXIST);
        }
        let ino = self.next;
        self.next += 1;
        let node = Node {
            dir,
            size: 0,
            mode,
            uid: req.uid(),
            gid: req.gid(),
        };
        let a = attr(ino, &node);
        self.nodes.insert(ino, node);
        self.names.insert((parent, name.to_os_string()), ino);
        Ok((ino, a))
    }
}

impl Filesystem for SinkFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t = self.tree.lock();
        match t
            .names
            .get(&(parent.0, name.to_os_string()))
            .and_then(|i| t.nodes.get(i).map(|n| (*i, n)))
        {
            Some((ino, n)) => reply.entry(&TTL, &attr(ino, n), Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree.lock().nodes.get(&ino.0) {
            Some(n) => reply.attr(&TTL, &attr(ino.0, n)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut t = self.tree.lock();
        let Some(n) = t.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        n.mode = mode.unwrap_or(n.mode);
        n.uid = uid.unwrap_or(n.uid);
        n.gid = gid.unwrap_or(n.gid);
        n.size = size.unwrap_or(n.size);
        reply.attr(&TTL, &attr(ino.0, n));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        match self.tree.lock().add(parent.0, name, true, mode, req) {
            Ok((_, a)) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.tree.lock().add(parent.0, name, false, mode, req) {
            Ok((ino, a)) => reply.created(&TTL, &a, Generation(0), FileHandle(ino), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(ino.0), FopenFlags::empty());
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Some(n) = self.tree.lock().nodes.get_mut(&ino.0) {
            n.size = n.size.max(offset + data.len() as u64);
        }
        reply.written(data.len() as u32);
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }
}

/// Mounts a [`SinkFs`] at `dir` with a writable hubfs mount's options; dropping the session
/// unmounts.
pub fn mount(dir: &std::path::Path) -> std::io::Result<(fuser::BackgroundSession, SinkTotals)> {
    let fs = SinkFs::new();
    let totals = SinkTotals(fs.tree.clone());
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("sinkfs-ceiling".into()),
        fuser::MountOption::NoAtime,
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::CUSTOM(format!("max_read={}", super::MAX_READ)),
    ];
    config.n_threads = Some(4);
    config.clone_fd = true;
    let session = fuser::Session::new(fs, dir, &config)?.spawn()?;
    Ok((session, totals))
}
