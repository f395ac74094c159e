//! The reference model: a POSIX tree in memory, with Linux's answer (errno included) for every
//! operation the harness drives through VirtualFs.
//!
//! Files are inodes (`FileId`) so that open handles follow renames and keep working after an
//! unlink or a rename over their name, as they do on Linux.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

pub type FileId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(FileId),
}

/// What an operation is aimed at: an open handle (by slot) or a path.
#[derive(Debug, Clone)]
pub enum Target {
    Handle(usize),
    Path(String),
}

#[derive(Debug, Clone)]
pub enum Op {
    /// open(O_CREAT [|O_EXCL] [|O_TRUNC] | O_RDWR); keeps the handle.
    Create {
        path: String,
        exclusive: bool,
        truncate: bool,
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
    Mkdir {
        path: String,
    },
    Rmdir {
        path: String,
    },
    Readdir {
        path: String,
    },
    Stat {
        path: String,
    },
    /// sync(): commit every pending change now (background commits otherwise land whenever the
    /// quiet period ends).
    Sync,
    /// Close every handle, drain the committer, drop the VirtualFs and open a new one.
    Remount,
}

/// The bytes a write puts down: printable, so most files go inline and holes make the LFS ones.
pub fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| b'a' + ((seed as usize + i * 7) % 26) as u8).collect()
}

fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map(|(p, _)| p).unwrap_or("")
}

#[derive(Debug, Default, Clone)]
pub struct Model {
    pub tree: BTreeMap<String, Node>,
    pub files: HashMap<FileId, Vec<u8>>,
    /// Open handles, by slot: the inode each one holds.
    pub handles: Vec<FileId>,
    next_id: FileId,
}

pub type Res<T> = Result<T, i32>;

impl Model {
    pub fn get(&self, path: &str) -> Option<Node> {
        if path.is_empty() {
            return Some(Node::Dir);
        }
        self.tree.get(path).copied()
    }

    /// Path resolution of every component before the last: ENOENT or ENOTDIR.
    pub fn walk_parent(&self, path: &str) -> Res<()> {
        let mut at = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            at = if at.is_empty() {
                part.to_string()
            } else {
                format!("{at}/{part}")
            };
            match self.get(&at) {
                None => return Err(libc::ENOENT),
                Some(Node::File(_)) => return Err(libc::ENOTDIR),
                Some(Node::Dir) => {}
            }
        }
        Ok(())
    }

    /// Full resolution: the node at `path`.
    pub fn resolve(&self, path: &str) -> Res<Node> {
        self.walk_parent(path)?;
        self.get(path).ok_or(libc::ENOENT)
    }

    /// Direct children of a directory, by name.
    pub fn children(&self, dir: &str) -> BTreeMap<String, Node> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        self.tree
            .iter()
            .filter_map(|(p, n)| {
                let rest = p.strip_prefix(&prefix)?;
                (!rest.is_empty() && !rest.contains('/')).then(|| (rest.to_string(), *n))
            })
            .collect()
    }

    /// A file the repo starts with (a new Hub repo holds a `.gitattributes`).
    pub fn seed_file(&mut self, path: &str, content: Vec<u8>) {
        let id = self.new_file();
        self.files.insert(id, content);
        self.tree.insert(path.to_string(), Node::File(id));
    }

    fn new_file(&mut self) -> FileId {
        self.next_id += 1;
        self.files.insert(self.next_id, Vec::new());
        self.next_id
    }

    pub fn content(&self, id: FileId) -> &[u8] {
        self.files.get(&id).map(Vec::as_slice).unwrap_or(&[])
    }

    fn file_at(&self, path: &str) -> Res<FileId> {
        match self.resolve(path)? {
            Node::File(id) => Ok(id),
            Node::Dir => Err(libc::EISDIR),
        }
    }

    pub fn create(&mut self, path: &str, exclusive: bool, truncate: bool) -> Res<FileId> {
        self.walk_parent(path)?;
        let id = match self.get(path) {
            Some(_) if exclusive => return Err(libc::EEXIST),
            Some(Node::Dir) => return Err(libc::EISDIR),
            Some(Node::File(id)) => {
                if truncate {
                    self.files.insert(id, Vec::new());
                }
                id
            }
            None => {
                let id = self.new_file();
                self.tree.insert(path.to_string(), Node::File(id));
                id
            }
        };
        self.handles.push(id);
        Ok(id)
    }

    pub fn open_write(&mut self, path: &str, truncate: bool) -> Res<FileId> {
        let id = self.file_at(path)?;
        if truncate {
            self.files.insert(id, Vec::new());
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
    }

    pub fn truncate_id(&mut self, id: FileId, size: u64) {
        self.files.entry(id).or_default().resize(size as usize, 0);
    }

    pub fn truncate_path(&mut self, path: &str, size: u64) -> Res<()> {
        let id = self.file_at(path)?;
        self.truncate_id(id, size);
        Ok(())
    }

    pub fn read_id(&self, id: FileId, offset: u64, len: u32) -> Vec<u8> {
        let c = self.content(id);
        let start = (offset as usize).min(c.len());
        let end = (start + len as usize).min(c.len());
        c[start..end].to_vec()
    }

    pub fn read_path(&self, path: &str, offset: u64, len: u32) -> Res<Vec<u8>> {
        Ok(self.read_id(self.file_at(path)?, offset, len))
    }

    pub fn close(&mut self, slot: usize) {
        self.handles.remove(slot);
        self.collect();
    }

    /// Drops inodes no name and no handle refers to.
    fn collect(&mut self) {
        let mut live: std::collections::HashSet<FileId> = self.handles.iter().copied().collect();
        live.extend(self.tree.values().filter_map(|n| match n {
            Node::File(id) => Some(*id),
            Node::Dir => None,
        }));
        self.files.retain(|id, _| live.contains(id));
    }

    pub fn mkdir(&mut self, path: &str) -> Res<()> {
        self.walk_parent(path)?;
        if self.get(path).is_some() {
            return Err(libc::EEXIST);
        }
        self.tree.insert(path.to_string(), Node::Dir);
        Ok(())
    }

    pub fn unlink(&mut self, path: &str) -> Res<()> {
        if let Node::Dir = self.resolve(path)? {
            return Err(libc::EISDIR);
        }
        self.tree.remove(path);
        self.collect();
        Ok(())
    }

    pub fn rmdir(&mut self, path: &str) -> Res<()> {
        if let Node::File(_) = self.resolve(path)? {
            return Err(libc::ENOTDIR);
        }
        if !self.children(path).is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.tree.remove(path);
        Ok(())
    }

    /// renameat2 in Linux's order of checks (do_renameat2, then vfs_rename); RENAME_EXCHANGE is
    /// refused with EINVAL, as SEMANTICS.md documents.
    pub fn rename(&mut self, from: &str, to: &str, noreplace: bool, exchange: bool) -> Res<()> {
        // Both parents are resolved before either last component is looked up.
        self.walk_parent(from)?;
        self.walk_parent(to)?;
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
        let from_parent = parent_of(from);
        if !exchange && (from_parent == to || from_parent.starts_with(&format!("{to}/"))) {
            return Err(libc::ENOTEMPTY);
        }
        if exchange {
            return Err(libc::EINVAL);
        }
        if from == to {
            return Ok(());
        }
        match (src, dst) {
            (Node::Dir, Some(Node::File(_))) => return Err(libc::ENOTDIR),
            (Node::File(_), Some(Node::Dir)) => return Err(libc::EISDIR),
            (Node::Dir, Some(Node::Dir)) if !self.children(to).is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        self.tree.remove(to);
        let prefix = format!("{from}/");
        let moved: Vec<(String, Node)> = self
            .tree
            .iter()
            .filter(|(p, _)| p.as_str() == from || p.starts_with(&prefix))
            .map(|(p, n)| (p.clone(), *n))
            .collect();
        for (p, n) in moved {
            self.tree.remove(&p);
            self.tree.insert(format!("{to}{}", &p[from.len()..]), n);
        }
        self.collect();
        Ok(())
    }

    pub fn readdir(&self, path: &str) -> Res<BTreeMap<String, Node>> {
        match self.resolve(path)? {
            Node::Dir => Ok(self.children(path)),
            Node::File(_) => Err(libc::ENOTDIR),
        }
    }

    /// A remount: handles are gone, and directories holding no file are not kept (the Hub has no
    /// empty directories; SEMANTICS.md, "mkdir").
    pub fn remount(&mut self) {
        self.handles.clear();
        let files: Vec<String> = self
            .tree
            .iter()
            .filter(|(_, n)| matches!(n, Node::File(_)))
            .map(|(p, _)| p.clone())
            .collect();
        self.tree.retain(|p, n| match n {
            Node::File(_) => true,
            Node::Dir => files.iter().any(|f| f.starts_with(&format!("{p}/"))),
        });
        self.collect();
    }

    /// Every file path with its content (what the Hub must hold once everything is committed).
    pub fn file_contents(&self) -> BTreeMap<String, Vec<u8>> {
        self.tree
            .iter()
            .filter_map(|(p, n)| match n {
                Node::File(id) => Some((p.clone(), self.content(*id).to_vec())),
                Node::Dir => None,
            })
            .collect()
    }
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

pub fn op() -> impl Strategy<Value = Op> {
    let h = 0..4usize;
    prop_oneof![
        6 => (path(), any::<bool>(), any::<bool>())
            .prop_map(|(path, exclusive, truncate)| Op::Create { path, exclusive, truncate }),
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
        6 => path().prop_map(|path| Op::Mkdir { path }),
        3 => path().prop_map(|path| Op::Rmdir { path }),
        1 => prop_oneof![Just(String::new()), path()].prop_map(|path| Op::Readdir { path }),
        1 => path().prop_map(|path| Op::Stat { path }),
        2 => Just(Op::Sync),
        1 => Just(Op::Remount),
    ]
}
