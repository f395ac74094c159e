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
//!
//! This file holds the state and what every operation shares; the operations themselves are in
//! `model_fs.rs` (files and the name space) and `model_meta.rs` (metadata and special entries).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::ops::Who;
use crate::walk::{self, Namespace, Ty};

#[path = "model_fs.rs"]
mod fs;
#[path = "model_meta.rs"]
mod meta;

pub use meta::chown_kill;

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
pub const MAX_TARGET: usize = 4095;

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
    /// The hard-link group (inode) this name shares with others; its names have one `meta`.
    pub link: Option<u32>,
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
    next_link: u32,
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
            next_link: 0,
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
                link: None,
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
                link: None,
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
        self.tree.insert(path, Entry { node, meta, link: None });
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

    /// `path`'s inode changed (attributes, a rename): its ctime moves, for every name of it.
    fn changed(&mut self, path: &str) {
        let now = Time::After(self.now);
        if let Some(m) = self.meta_mut(path) {
            m.ctime = now;
        }
        self.sync_links(path);
    }

    /// The other names of `path`'s link group take its metadata (one inode).
    fn sync_links(&mut self, path: &str) {
        let Some(e) = self.tree.get(path).cloned() else { return };
        let Some(g) = e.link else { return };
        for other in self.tree.values_mut() {
            if other.link == Some(g) {
                other.meta = e.meta.clone();
            }
        }
    }

    /// Some name of link group `g`, if it has one left.
    fn name_of_group(&self, g: Option<u32>) -> Option<String> {
        let g = g?;
        self.tree
            .iter()
            .find(|(_, e)| e.link == Some(g))
            .map(|(p, _)| p.clone())
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

    /// Drops inodes no name and no handle refers to.
    fn collect(&mut self) {
        let mut live: HashSet<FileId> = self.handles.iter().copied().collect();
        live.extend(self.tree.values().filter_map(|e| match e.node {
            Node::File(id) => Some(id),
            _ => None,
        }));
        self.files.retain(|id, _| live.contains(id));
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
