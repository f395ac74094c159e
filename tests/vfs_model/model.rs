//! The reference model: a POSIX tree in memory, with Linux's answer (errno included) for every
//! operation the harness drives through VirtualFs, and what Linux keeps of each entry besides its
//! content: kind, mode (with setuid, setgid and sticky), owner, symlink target, device number and
//! the times an operation set.
//!
//! Files are inodes (`FileId`) so that open handles follow renames and keep working after an
//! unlink or a rename over their name, as they do on Linux. Paths given to the operations go
//! through Linux's path walk (`walk`), symlinks included; the tree itself is kept by canonical
//! path. The caller is root as far as permissions go (they are the kernel's business, not the file
//! system's: FUSE runs with `default_permissions`), and the owner a new entry gets is the one the
//! operation names.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;

use crate::walk::{self, Namespace, Ty};

pub type FileId = u32;

/// The model's answer for an operation whose outcome is the kernel's, not the file system's
/// (opening a FIFO, a socket or a device node): the harness does not run it.
pub const SKIP: i32 = -1;

/// The ids the mount runs as (VfsOptions uid/gid): the owner of what it did not make for a caller.
pub const MOUNT_UID: u32 = 501;
pub const MOUNT_GID: u32 = 20;

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_IXGRP: u32 = 0o0010;

/// Longest symlink target Linux takes (PATH_MAX with its NUL).
const MAX_TARGET: usize = 4095;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(FileId),
    Symlink(String),
    Special(Special),
}

/// What mknod makes besides regular files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    Fifo,
    Socket,
    Char(u32),
    Block(u32),
}

/// What the model knows of a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Time {
    /// Nothing: the Hub's time of an entry the mount never changed.
    Any,
    /// Set to the time of an operation that started then: no earlier.
    After(SystemTime),
    /// Set explicitly (utimensat): exactly this.
    Exact(SystemTime),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// Permission bits with setuid, setgid and sticky.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: Time,
    pub ctime: Time,
}

impl Meta {
    /// An entry the mount never changed: the defaults of a writable mount, owned by its user.
    fn default_for(dir: bool) -> Meta {
        Meta {
            mode: if dir { 0o755 } else { 0o644 },
            uid: MOUNT_UID,
            gid: MOUNT_GID,
            mtime: Time::Any,
            ctime: Time::Any,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub node: Node,
    pub meta: Meta,
}

/// The caller that creates an entry (FUSE: the request's ids); `None` in an op: the mount's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Who {
    pub uid: u32,
    pub gid: u32,
}

/// One time of utimensat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// UTIME_OMIT
    Omit,
    /// UTIME_NOW
    Now,
    At(SystemTime),
}

/// The type mknod is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeType {
    Regular,
    Fifo,
    Socket,
    Char(u32),
    Block(u32),
}

impl NodeType {
    /// The S_IFMT bits and device number mknod(2) is given.
    pub fn mode_and_rdev(self) -> (u32, u32) {
        match self {
            NodeType::Regular => (libc::S_IFREG, 0),
            NodeType::Fifo => (libc::S_IFIFO, 0),
            NodeType::Socket => (libc::S_IFSOCK, 0),
            NodeType::Char(r) => (libc::S_IFCHR, r),
            NodeType::Block(r) => (libc::S_IFBLK, r),
        }
    }
}

/// A symlink target (printed short: one is 4,095 bytes long).
#[derive(Clone, PartialEq, Eq)]
pub struct LinkTo(pub String);

impl fmt::Debug for LinkTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() > 40 {
            write!(f, "{:?}... ({} bytes)", &self.0[..8], self.0.len())
        } else {
            write!(f, "{:?}", self.0)
        }
    }
}

/// What an operation is aimed at: an open handle (by slot) or a path.
#[derive(Debug, Clone)]
pub enum Target {
    Handle(usize),
    Path(String),
}

#[derive(Debug, Clone)]
pub enum Op {
    /// open(O_CREAT [|O_EXCL] [|O_TRUNC] | O_RDWR, mode) by `who`; keeps the handle.
    Create {
        path: String,
        exclusive: bool,
        truncate: bool,
        mode: Option<u32>,
        who: Option<Who>,
    },
    /// open(O_RDWR [|O_TRUNC]) of an existing path; keeps the handle.
    OpenWrite {
        path: String,
        truncate: bool,
    },
    /// open(O_RDONLY) of an existing path; keeps the handle (writes through it are EBADF).
    OpenRead {
        path: String,
    },
    Write {
        h: usize,
        offset: u64,
        len: usize,
        seed: u8,
    },
    /// ftruncate (handle) or truncate (path).
    Truncate {
        target: Target,
        size: u64,
    },
    /// pread through a handle, or open(O_RDONLY) + pread + close of a path.
    Read {
        target: Target,
        offset: u64,
        len: u32,
    },
    Flush {
        h: usize,
    },
    Fsync {
        h: usize,
    },
    /// close(): flush, then release.
    Close {
        h: usize,
    },
    Rename {
        from: String,
        to: String,
        noreplace: bool,
        exchange: bool,
    },
    Unlink {
        path: String,
    },
    /// mkdir(path, mode) by `who` (the mode as the kernel passes it on: umask applied, setuid and
    /// setgid dropped).
    Mkdir {
        path: String,
        mode: Option<u32>,
        who: Option<Who>,
    },
    Rmdir {
        path: String,
    },
    Readdir {
        path: String,
    },
    /// stat(2): follows a last symlink.
    Stat {
        path: String,
    },
    /// chmod(2).
    Chmod {
        path: String,
        mode: u32,
    },
    /// chown(2), or lchown(2) when not `follow`.
    Chown {
        path: String,
        uid: Option<u32>,
        gid: Option<u32>,
        follow: bool,
    },
    /// utimensat(2), with AT_SYMLINK_NOFOLLOW when not `follow`.
    Utimens {
        path: String,
        atime: SetTime,
        mtime: SetTime,
        follow: bool,
    },
    /// symlink(target, path) by `who`.
    Symlink {
        path: String,
        target: LinkTo,
        who: Option<Who>,
    },
    /// mknod(path, type | mode, rdev) by `who`.
    Mknod {
        path: String,
        kind: NodeType,
        mode: u32,
        who: Option<Who>,
    },
    Readlink {
        path: String,
    },
    /// link(from, to).
    Link {
        from: String,
        to: String,
    },
    /// sync(): commit every pending change now (background commits otherwise land whenever the
    /// quiet period ends).
    Sync,
    /// Waits longer than the slack allowed on "now" times (fixed sequences only).
    Pause,
    /// Close every handle, drain the committer, drop the VirtualFs and open a new one.
    Remount,
}

/// The bytes a write puts down: printable, so most files go inline and holes make the LFS ones.
pub fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| b'a' + ((seed as usize + i * 7) % 26) as u8).collect()
}

pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else if name.is_empty() {
        dir.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Where a path leads: the directory of its last component, the canonical path, and what is
/// there.
struct Place {
    parent: String,
    path: String,
    node: Option<Node>,
}

#[derive(Debug, Clone)]
pub struct Model {
    /// Every entry but the root, by canonical path.
    pub tree: BTreeMap<String, Entry>,
    pub root: Meta,
    pub files: HashMap<FileId, Vec<u8>>,
    /// Open handles, by slot: the inode each one holds.
    pub handles: Vec<FileId>,
    next_id: FileId,
    /// When the operation being run started: the times it sets are no earlier.
    pub now: SystemTime,
}

impl Default for Model {
    fn default() -> Model {
        Model {
            tree: BTreeMap::new(),
            root: Meta::default_for(true),
            files: HashMap::new(),
            handles: Vec::new(),
            next_id: 0,
            now: UNIX_EPOCH,
        }
    }
}

pub type Res<T> = Result<T, i32>;

impl Namespace for Model {
    type Id = String;

    fn root(&mut self) -> String {
        String::new()
    }

    fn lookup(&mut self, dir: &String, name: &str) -> Res<(String, Ty)> {
        if name.len() > walk::NAME_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        let path = join(dir, name);
        let ty = match self.get(&path).ok_or(libc::ENOENT)? {
            Node::Dir => Ty::Dir,
            Node::File(_) => Ty::File,
            Node::Symlink(_) => Ty::Symlink,
            Node::Special(_) => Ty::Other,
        };
        Ok((path, ty))
    }

    fn readlink(&mut self, link: &String) -> Res<String> {
        match self.get(link) {
            Some(Node::Symlink(t)) => Ok(t),
            _ => Err(libc::EINVAL),
        }
    }
}

impl Model {
    pub fn get(&self, path: &str) -> Option<Node> {
        if path.is_empty() {
            return Some(Node::Dir);
        }
        self.tree.get(path).map(|e| e.node.clone())
    }

    /// The entry at a canonical path (the root included).
    pub fn entry(&self, path: &str) -> Option<Entry> {
        if path.is_empty() {
            return Some(Entry {
                node: Node::Dir,
                meta: self.root.clone(),
            });
        }
        self.tree.get(path).cloned()
    }

    fn meta_mut(&mut self, path: &str) -> Option<&mut Meta> {
        if path.is_empty() {
            Some(&mut self.root)
        } else {
            self.tree.get_mut(path).map(|e| &mut e.meta)
        }
    }

    /// Linux's walk to `path` (see `walk`).
    fn place(&mut self, path: &str, follow: bool) -> Res<Place> {
        let w = walk::walk(self, path, follow)?;
        let path = match &w.last {
            Some((id, _)) => id.clone(),
            None => join(&w.parent, &w.name),
        };
        let node = self.get(&path).filter(|_| w.last.is_some());
        Ok(Place {
            parent: w.parent,
            path,
            node,
        })
    }

    /// Direct children of a directory, by name.
    pub fn children(&self, dir: &str) -> BTreeMap<String, Entry> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        self.tree
            .iter()
            .filter_map(|(p, e)| {
                let rest = p.strip_prefix(&prefix)?;
                (!rest.is_empty() && !rest.contains('/')).then(|| (rest.to_string(), e.clone()))
            })
            .collect()
    }

    /// A file the repo starts with (a new Hub repo holds a `.gitattributes`).
    pub fn seed_file(&mut self, path: &str, content: Vec<u8>) {
        let id = self.new_file();
        self.files.insert(id, content);
        self.tree.insert(
            path.to_string(),
            Entry {
                node: Node::File(id),
                meta: Meta::default_for(false),
            },
        );
    }

    fn new_file(&mut self) -> FileId {
        self.next_id += 1;
        self.files.insert(self.next_id, Vec::new());
        self.next_id
    }

    pub fn content(&self, id: FileId) -> &[u8] {
        self.files.get(&id).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The metadata of a new entry in `parent`: the mode and owner asked for; a setgid parent
    /// gives its group, and to a new directory its setgid bit.
    fn new_meta(&self, parent: &str, dir: bool, mode: u32, who: Option<Who>) -> Meta {
        let who = who.unwrap_or(Who {
            uid: MOUNT_UID,
            gid: MOUNT_GID,
        });
        let now = Time::After(self.now);
        let mut m = Meta {
            mode: mode & 0o7777,
            uid: who.uid,
            gid: who.gid,
            mtime: now,
            ctime: now,
        };
        if let Some(p) = self.entry(parent)
            && p.meta.mode & S_ISGID != 0
        {
            m.gid = p.meta.gid;
            if dir {
                m.mode |= S_ISGID;
            }
        }
        m
    }

    fn insert(&mut self, parent: &str, path: String, node: Node, mode: u32, who: Option<Who>) {
        let meta = self.new_meta(parent, node == Node::Dir, mode, who);
        self.tree.insert(path, Entry { node, meta });
        self.dir_changed(parent);
    }

    /// An entry was added to or removed from `dir`: its mtime and ctime move.
    fn dir_changed(&mut self, dir: &str) {
        let now = Time::After(self.now);
        if let Some(m) = self.meta_mut(dir) {
            m.mtime = now;
            m.ctime = now;
        }
    }

    /// `path`'s inode changed (attributes, a rename): its ctime moves.
    fn changed(&mut self, path: &str) {
        let now = Time::After(self.now);
        if let Some(m) = self.meta_mut(path) {
            m.ctime = now;
        }
    }

    /// A file's content or size changed: mtime and ctime move (if it still has a name).
    fn content_changed(&mut self, id: FileId) {
        let now = Time::After(self.now);
        for e in self.tree.values_mut() {
            if e.node == Node::File(id) {
                e.meta.mtime = now;
                e.meta.ctime = now;
            }
        }
    }

    pub fn create(
        &mut self,
        path: &str,
        exclusive: bool,
        truncate: bool,
        mode: Option<u32>,
        who: Option<Who>,
    ) -> Res<FileId> {
        // O_EXCL: a last symlink is not followed (and exists).
        let at = self.place(path, !exclusive)?;
        let id = match at.node {
            Some(_) if exclusive => return Err(libc::EEXIST),
            Some(Node::Dir) => return Err(libc::EISDIR),
            Some(Node::File(id)) => {
                if truncate {
                    self.files.insert(id, Vec::new());
                    self.content_changed(id);
                }
                id
            }
            Some(_) => return Err(SKIP),
            // Through a dangling symlink too: its target is created.
            None => {
                let id = self.new_file();
                self.insert(&at.parent, at.path, Node::File(id), mode.unwrap_or(0o644), who);
                id
            }
        };
        self.handles.push(id);
        Ok(id)
    }

    /// The file `path` leads to, for an open (`SKIP`: not a regular file or directory).
    fn file_at(&mut self, path: &str) -> Res<FileId> {
        match self.place(path, true)?.node {
            None => Err(libc::ENOENT),
            Some(Node::File(id)) => Ok(id),
            Some(Node::Dir) => Err(libc::EISDIR),
            Some(_) => Err(SKIP),
        }
    }

    pub fn open_write(&mut self, path: &str, truncate: bool) -> Res<FileId> {
        let id = self.file_at(path)?;
        if truncate {
            self.files.insert(id, Vec::new());
            self.content_changed(id);
        }
        self.handles.push(id);
        Ok(id)
    }

    pub fn open_read(&mut self, path: &str) -> Res<FileId> {
        let id = self.file_at(path)?;
        self.handles.push(id);
        Ok(id)
    }

    pub fn write(&mut self, id: FileId, offset: u64, data: &[u8]) {
        let f = self.files.entry(id).or_default();
        let end = offset as usize + data.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[offset as usize..end].copy_from_slice(data);
        self.content_changed(id);
    }

    pub fn truncate_id(&mut self, id: FileId, size: u64) {
        self.files.entry(id).or_default().resize(size as usize, 0);
        self.content_changed(id);
    }

    pub fn truncate_path(&mut self, path: &str, size: u64) -> Res<()> {
        match self.place(path, true)?.node {
            None => Err(libc::ENOENT),
            Some(Node::File(id)) => {
                self.truncate_id(id, size);
                Ok(())
            }
            Some(Node::Dir) => Err(libc::EISDIR),
            // vfs_truncate: not a regular file.
            Some(_) => Err(libc::EINVAL),
        }
    }

    pub fn read_id(&self, id: FileId, offset: u64, len: u32) -> Vec<u8> {
        let c = self.content(id);
        let start = (offset as usize).min(c.len());
        let end = (start + len as usize).min(c.len());
        c[start..end].to_vec()
    }

    pub fn read_path(&mut self, path: &str, offset: u64, len: u32) -> Res<Vec<u8>> {
        let id = self.file_at(path)?;
        Ok(self.read_id(id, offset, len))
    }

    pub fn close(&mut self, slot: usize) {
        self.handles.remove(slot);
        self.collect();
    }

    /// Drops inodes no name and no handle refers to.
    fn collect(&mut self) {
        let mut live: HashSet<FileId> = self.handles.iter().copied().collect();
        live.extend(self.tree.values().filter_map(|e| match e.node {
            Node::File(id) => Some(id),
            _ => None,
        }));
        self.files.retain(|id, _| live.contains(id));
    }

    pub fn mkdir(&mut self, path: &str, mode: Option<u32>, who: Option<Who>) -> Res<()> {
        let at = self.place(path, false)?;
        if at.node.is_some() {
            return Err(libc::EEXIST);
        }
        self.insert(&at.parent, at.path, Node::Dir, mode.unwrap_or(0o755), who);
        Ok(())
    }

    pub fn unlink(&mut self, path: &str) -> Res<()> {
        let at = self.place(path, false)?;
        match at.node {
            None => return Err(libc::ENOENT),
            Some(Node::Dir) => return Err(libc::EISDIR),
            Some(_) => {}
        }
        self.tree.remove(&at.path);
        self.dir_changed(&at.parent);
        self.collect();
        Ok(())
    }

    pub fn rmdir(&mut self, path: &str) -> Res<()> {
        let at = self.place(path, false)?;
        match at.node {
            None => return Err(libc::ENOENT),
            Some(Node::Dir) => {}
            Some(_) => return Err(libc::ENOTDIR),
        }
        if !self.children(&at.path).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.tree.remove(&at.path);
        self.dir_changed(&at.parent);
        Ok(())
    }

    /// renameat2 in Linux's order of checks (do_renameat2, then vfs_rename); RENAME_EXCHANGE is
    /// refused with EINVAL, as SEMANTICS.md documents. Last components are not followed.
    pub fn rename(&mut self, from: &str, to: &str, noreplace: bool, exchange: bool) -> Res<()> {
        // Both parents are resolved before either last component is looked up.
        let (from_parent, from_name) = walk::walk_parent(self, from)?;
        let (to_parent, to_name) = walk::walk_parent(self, to)?;
        let from = join(&from_parent, &from_name);
        let to = join(&to_parent, &to_name);
        let (from, to) = (from.as_str(), to.as_str());
        let src = self.get(from).ok_or(libc::ENOENT)?;
        let dst = self.get(to);
        if exchange && dst.is_none() {
            return Err(libc::ENOENT);
        }
        if noreplace && dst.is_some() {
            return Err(libc::EEXIST);
        }
        // The source is an ancestor of the target: EINVAL; the target of the source: ENOTEMPTY.
        if to.starts_with(&format!("{from}/")) {
            return Err(libc::EINVAL);
        }
        if !exchange && (from_parent == to || from_parent.starts_with(&format!("{to}/"))) {
            return Err(libc::ENOTEMPTY);
        }
        if exchange {
            return Err(libc::EINVAL);
        }
        if from == to {
            return Ok(());
        }
        match (&src, &dst) {
            (Node::Dir, Some(Node::Dir)) if !self.children(to).is_empty() => return Err(libc::ENOTEMPTY),
            (Node::Dir, Some(Node::Dir)) => {}
            (Node::Dir, Some(_)) => return Err(libc::ENOTDIR),
            (_, Some(Node::Dir)) => return Err(libc::EISDIR),
            _ => {}
        }
        self.tree.remove(to);
        let prefix = format!("{from}/");
        let moved: Vec<(String, Entry)> = self
            .tree
            .iter()
            .filter(|(p, _)| p.as_str() == from || p.starts_with(&prefix))
            .map(|(p, e)| (p.clone(), e.clone()))
            .collect();
        for (p, e) in moved {
            self.tree.remove(&p);
            self.tree.insert(format!("{to}{}", &p[from.len()..]), e);
        }
        self.changed(to);
        self.dir_changed(&from_parent);
        self.dir_changed(&to_parent);
        self.collect();
        Ok(())
    }

    /// The listing of the directory `path` leads to, and that directory's canonical path.
    pub fn readdir(&mut self, path: &str) -> Res<(String, BTreeMap<String, Entry>)> {
        let at = self.place(path, true)?;
        match at.node {
            None => Err(libc::ENOENT),
            Some(Node::Dir) => Ok((at.path.clone(), self.children(&at.path))),
            Some(_) => Err(libc::ENOTDIR),
        }
    }

    /// What `path` leads to (its canonical path and entry); `follow`: stat, else lstat.
    pub fn stat(&mut self, path: &str, follow: bool) -> Res<(String, Entry)> {
        let at = self.place(path, follow)?;
        let e = at.node.and_then(|_| self.entry(&at.path)).ok_or(libc::ENOENT)?;
        Ok((at.path, e))
    }

    pub fn chmod(&mut self, path: &str, mode: u32) -> Res<(String, Entry)> {
        let (p, _) = self.stat(path, true)?;
        let m = self.meta_mut(&p).expect("exists");
        m.mode = mode & 0o7777;
        self.changed(&p);
        Ok((p.clone(), self.entry(&p).unwrap()))
    }

    /// chown: also clears setuid, and setgid with group execute, of anything but a directory
    /// (the kernel sends that mode change along to a FUSE file system without handle_killpriv).
    pub fn chown(&mut self, path: &str, uid: Option<u32>, gid: Option<u32>, follow: bool) -> Res<(String, Entry)> {
        let (p, e) = self.stat(path, follow)?;
        let dir = e.node == Node::Dir;
        let m = self.meta_mut(&p).expect("exists");
        if let Some(u) = uid {
            m.uid = u;
        }
        if let Some(g) = gid {
            m.gid = g;
        }
        if !dir {
            m.mode = chown_kill(m.mode).unwrap_or(m.mode);
        }
        self.changed(&p);
        Ok((p.clone(), self.entry(&p).unwrap()))
    }

    pub fn utimens(&mut self, path: &str, mtime: SetTime, follow: bool) -> Res<(String, Entry)> {
        let (p, _) = self.stat(path, follow)?;
        let now = self.now;
        let m = self.meta_mut(&p).expect("exists");
        match mtime {
            SetTime::Omit => {}
            SetTime::Now => m.mtime = Time::After(now),
            SetTime::At(t) => m.mtime = Time::Exact(t),
        }
        self.changed(&p);
        Ok((p.clone(), self.entry(&p).unwrap()))
    }

    pub fn symlink(&mut self, path: &str, target: &str, who: Option<Who>) -> Res<()> {
        // The target is read (getname) before the walk.
        if target.is_empty() {
            return Err(libc::ENOENT);
        }
        if target.len() > MAX_TARGET {
            return Err(libc::ENAMETOOLONG);
        }
        let at = self.place(path, false)?;
        if at.node.is_some() {
            return Err(libc::EEXIST);
        }
        self.insert(&at.parent, at.path, Node::Symlink(target.to_string()), 0o777, who);
        Ok(())
    }

    pub fn mknod(&mut self, path: &str, kind: NodeType, mode: u32, who: Option<Who>) -> Res<()> {
        let at = self.place(path, false)?;
        if at.node.is_some() {
            return Err(libc::EEXIST);
        }
        let node = match kind {
            NodeType::Regular => Node::File(self.new_file()),
            NodeType::Fifo => Node::Special(Special::Fifo),
            NodeType::Socket => Node::Special(Special::Socket),
            NodeType::Char(r) => Node::Special(Special::Char(r)),
            NodeType::Block(r) => Node::Special(Special::Block(r)),
        };
        self.insert(&at.parent, at.path, node, mode, who);
        self.collect();
        Ok(())
    }

    pub fn readlink(&mut self, path: &str) -> Res<String> {
        match self.place(path, false)?.node {
            None => Err(libc::ENOENT),
            Some(Node::Symlink(t)) => Ok(t),
            Some(_) => Err(libc::EINVAL),
        }
    }

    /// link(2) (linkat without AT_SYMLINK_FOLLOW): the source is walked, then the new name's
    /// directory, which must not hold the name yet; then hubfs refuses with EPERM (as Linux does
    /// itself for a directory source).
    pub fn link(&mut self, from: &str, to: &str) -> Res<()> {
        if self.place(from, false)?.node.is_none() {
            return Err(libc::ENOENT);
        }
        if self.place(to, false)?.node.is_some() {
            return Err(libc::EEXIST);
        }
        Err(libc::EPERM)
    }

    /// A remount: handles are gone; the tree stays, metadata included (directories created or
    /// emptied through the mount, symlinks and special files are kept by the metadata log).
    pub fn remount(&mut self) {
        self.handles.clear();
        self.collect();
    }

    /// Every regular file's path with its content (what the Hub must hold once everything is
    /// committed: symlinks and special files never go there).
    pub fn file_contents(&self) -> BTreeMap<String, Vec<u8>> {
        self.tree
            .iter()
            .filter_map(|(p, e)| match e.node {
                Node::File(id) => Some((p.clone(), self.content(id).to_vec())),
                _ => None,
            })
            .collect()
    }
}

/// The mode a chown leaves on a non-directory whose setuid (or setgid with group execute) bit
/// it clears; `None`: nothing to clear.
pub fn chown_kill(mode: u32) -> Option<u32> {
    let mut m = mode;
    if m & S_ISUID != 0 {
        m &= !S_ISUID;
    }
    if m & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP {
        m &= !S_ISGID;
    }
    (m != mode).then_some(m)
}

/// Paths over a tiny name space (three names, up to three levels, mostly shallow) so that
/// collisions and every error case come up often.
fn path() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec!["a", "b", "c"]);
    prop_oneof![
        5 => name.clone().prop_map(str::to_string),
        5 => (name.clone(), name.clone()).prop_map(|(a, b)| format!("{a}/{b}")),
        1 => (name.clone(), name.clone(), name).prop_map(|(a, b, c)| format!("{a}/{b}/{c}")),
    ]
}

/// A path, or now and then the mount's root (`""`).
fn path_or_root() -> impl Strategy<Value = String> {
    prop_oneof![12 => path(), 1 => Just(String::new())]
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![6 => 0..64u64, 3 => 0..600u64, 1 => 4_000..40_000u64]
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![3 => Just(0u64), 6 => 0..600u64, 1 => 4_000..40_000u64]
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        3 => (0..4usize).prop_map(Target::Handle),
        2 => path().prop_map(Target::Path),
    ]
}

/// The creator of a new entry: mostly the mount's own ids, else another user.
fn who() -> impl Strategy<Value = Option<Who>> {
    prop_oneof![
        3 => Just(None),
        1 => prop::sample::select(vec![(1000, 1000), (1000, 100), (0, 50), (65534, 65534)])
            .prop_map(|(uid, gid)| Some(Who { uid, gid })),
    ]
}

/// Modes for chmod. None both sticky and world-writable: in such a directory Linux's
/// protected_symlinks/protected_regular refuse some follows and opens even to root.
fn chmod_mode() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![
        0o644, 0o600, 0o755, 0o700, 0o777, 0o000, 0o4755, 0o2755, 0o2775, 0o2644, 0o6750, 0o1755, 0o4644,
    ])
}

/// Times for utimensat: old, before 1970, with nanoseconds, past 2038.
fn time() -> impl Strategy<Value = SystemTime> {
    prop::sample::select(vec![
        UNIX_EPOCH,
        UNIX_EPOCH - Duration::new(1, 500_000_000),
        UNIX_EPOCH - Duration::from_secs(315_619_200), // 1960-01-01
        UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789),
        UNIX_EPOCH + Duration::new(1_700_000_000, 1),
        UNIX_EPOCH + Duration::new(2_147_483_655, 999_999_999), // past 2038-01-19
    ])
}

fn set_time() -> impl Strategy<Value = SetTime> {
    prop_oneof![1 => Just(SetTime::Omit), 1 => Just(SetTime::Now), 3 => time().prop_map(SetTime::At)]
}

/// Symlink targets: mostly paths of the name space (relative to the link's directory), some
/// dangling, one empty (ENOENT), one as long as Linux allows and one longer (ENAMETOOLONG).
fn link_target() -> impl Strategy<Value = LinkTo> {
    prop_oneof![
        12 => prop::sample::select(vec!["a", "b", "c", "a/b", "b/c", "c/a/b", "x", "no such file"])
            .prop_map(|t| LinkTo(t.to_string())),
        1 => prop::sample::select(vec![0usize, MAX_TARGET, MAX_TARGET + 1]).prop_map(|n| LinkTo("x".repeat(n))),
    ]
}

fn node_type() -> impl Strategy<Value = NodeType> {
    prop_oneof![
        3 => Just(NodeType::Fifo),
        2 => Just(NodeType::Socket),
        2 => prop::sample::select(vec![0x103u32, 0x440, 0x50000]).prop_map(NodeType::Char),
        1 => prop::sample::select(vec![0x801u32, 0x10300]).prop_map(NodeType::Block),
        1 => Just(NodeType::Regular),
    ]
}

pub fn op() -> impl Strategy<Value = Op> {
    let h = 0..4usize;
    // Modes as the kernel hands them on: umask applied; setgid never asked for (Linux strips it
    // from a caller outside the group), and mkdir keeps permission and sticky bits only.
    let file_mode = prop_oneof![
        3 => Just(None),
        1 => prop::sample::select(vec![0o600, 0o640, 0o755, 0o4755, 0o1644]).prop_map(Some),
    ];
    let dir_mode = prop_oneof![
        3 => Just(None),
        1 => prop::sample::select(vec![0o700, 0o750, 0o775, 0o1755]).prop_map(Some),
    ];
    let new_file =
        (path(), any::<bool>(), any::<bool>(), file_mode, who()).prop_map(|(path, exclusive, truncate, mode, who)| {
            Op::Create {
                path,
                exclusive,
                truncate,
                mode,
                who,
            }
        });
    let ids = prop_oneof![1 => Just(None), 2 => prop::sample::select(vec![0u32, 1000, 65534]).prop_map(Some)];
    let chown = (path_or_root(), ids.clone(), ids, prop::bool::weighted(0.8))
        // chown(-1, -1) is left out: FUSE passes no change on (the ctime it would move is the
        // kernel's request alone).
        .prop_filter("an id to set", |(_, u, g, _)| u.is_some() || g.is_some())
        .prop_map(|(path, uid, gid, follow)| Op::Chown { path, uid, gid, follow });
    let utimens = (path_or_root(), set_time(), set_time(), prop::bool::weighted(0.8))
        // Both UTIME_OMIT: Linux returns 0 without even walking the path.
        .prop_filter("a time to set", |(_, a, m, _)| {
            *a != SetTime::Omit || *m != SetTime::Omit
        })
        .prop_map(|(path, atime, mtime, follow)| Op::Utimens {
            path,
            atime,
            mtime,
            follow,
        });
    prop_oneof![
        6 => new_file,
        3 => (path(), prop::bool::weighted(0.2)).prop_map(|(path, truncate)| Op::OpenWrite { path, truncate }),
        2 => path().prop_map(|path| Op::OpenRead { path }),
        8 => (h.clone(), offset(), 1..200usize, any::<u8>())
            .prop_map(|(h, offset, len, seed)| Op::Write { h, offset, len, seed }),
        3 => (target(), size()).prop_map(|(target, size)| Op::Truncate { target, size }),
        3 => (target(), 0..700u64, 1..400u32).prop_map(|(target, offset, len)| Op::Read { target, offset, len }),
        1 => h.clone().prop_map(|h| Op::Flush { h }),
        1 => h.clone().prop_map(|h| Op::Fsync { h }),
        3 => h.prop_map(|h| Op::Close { h }),
        5 => (path(), path(), prop::bool::weighted(0.2), prop::bool::weighted(0.05))
            // Both flags at once never reach a filesystem: Linux refuses them up front.
            .prop_map(|(from, to, noreplace, exchange)| Op::Rename { from, to, noreplace: noreplace && !exchange, exchange }),
        3 => path().prop_map(|path| Op::Unlink { path }),
        6 => (path(), dir_mode, who()).prop_map(|(path, mode, who)| Op::Mkdir { path, mode, who }),
        3 => path().prop_map(|path| Op::Rmdir { path }),
        1 => path_or_root().prop_map(|path| Op::Readdir { path }),
        1 => path_or_root().prop_map(|path| Op::Stat { path }),
        2 => (path_or_root(), chmod_mode()).prop_map(|(path, mode)| Op::Chmod { path, mode }),
        1 => chown,
        2 => utimens,
        3 => (path(), link_target(), who()).prop_map(|(path, target, who)| Op::Symlink { path, target, who }),
        2 => (path(), node_type(), prop::sample::select(vec![0o644, 0o600, 0o666, 0o4755]), who())
            .prop_map(|(path, kind, mode, who)| Op::Mknod { path, kind, mode, who }),
        2 => path().prop_map(|path| Op::Readlink { path }),
        1 => (path(), path()).prop_map(|(from, to)| Op::Link { from, to }),
        2 => Just(Op::Sync),
        1 => Just(Op::Remount),
    ]
}
