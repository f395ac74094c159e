//! Linux's path walk (namei) over any name space: every component before the last is looked up
//! and must be a directory, symlinks met on the way are followed (the last one too when asked),
//! relative to the directory holding them, at most `MAXSYMLINKS` times per walk.
//!
//! The model walks its own tree with it; the harness walks VirtualFs with it (lookup + readlink),
//! as the kernel does in front of a FUSE file system. Targets are always relative here (the
//! generator makes no absolute ones, nor `.` or `..` components: the mount root is not `/`).

/// What a walk needs to know of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Dir,
    File,
    Symlink,
    /// A FIFO, socket or device node.
    Other,
}

/// Symlinks followed in one walk before ELOOP (Linux's MAXSYMLINKS).
pub const MAXSYMLINKS: u32 = 40;

/// Longest name of one component (NAME_MAX).
pub const NAME_MAX: usize = 255;

pub trait Namespace {
    /// How an entry is named to the name space (a canonical path; an inode's attributes).
    type Id: Clone;
    fn root(&mut self) -> Self::Id;
    /// `name` in directory `dir`: ENOENT when there is none.
    fn lookup(&mut self, dir: &Self::Id, name: &str) -> Result<(Self::Id, Ty), i32>;
    fn readlink(&mut self, link: &Self::Id) -> Result<String, i32>;
}

/// Where a walk ended: the directory of the last component, its name, and what is there (if
/// anything). A followed last symlink ends the walk where its target does.
#[derive(Debug, Clone)]
pub struct Walked<Id> {
    pub parent: Id,
    pub name: String,
    pub last: Option<(Id, Ty)>,
}

/// Walks `path` from the root (`""` is the root itself); `follow`: a symlink as the last
/// component is followed (stat, open) rather than named (lstat, unlink, rename, mkdir).
pub fn walk<N: Namespace>(ns: &mut N, path: &str, follow: bool) -> Result<Walked<N::Id>, i32> {
    let root = ns.root();
    if path.is_empty() {
        return Ok(Walked {
            parent: root.clone(),
            name: String::new(),
            last: Some((root, Ty::Dir)),
        });
    }
    let mut links = 0;
    walk_from(ns, root, path, follow, &mut links)
}

/// The directory `path` would be created in, and the name: every component before the last.
pub fn walk_parent<N: Namespace>(ns: &mut N, path: &str) -> Result<(N::Id, String), i32> {
    match path.rsplit_once('/') {
        None => Ok((ns.root(), path.to_string())),
        Some((dir, name)) => match walk(ns, dir, true)?.last {
            Some((id, Ty::Dir)) => Ok((id, name.to_string())),
            Some(_) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        },
    }
}

fn walk_from<N: Namespace>(
    ns: &mut N,
    start: N::Id,
    path: &str,
    follow: bool,
    links: &mut u32,
) -> Result<Walked<N::Id>, i32> {
    let parts: Vec<&str> = path.split('/').collect();
    let mut dir = start;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let (id, ty) = match ns.lookup(&dir, part) {
            Ok(found) => found,
            Err(libc::ENOENT) if last => {
                return Ok(Walked {
                    parent: dir,
                    name: part.to_string(),
                    last: None,
                });
            }
            Err(e) => return Err(e),
        };
        if ty == Ty::Symlink && (!last || follow) {
            *links += 1;
            if *links > MAXSYMLINKS {
                return Err(libc::ELOOP);
            }
            let target = ns.readlink(&id)?;
            let w = walk_from(ns, dir.clone(), &target, true, links)?;
            if last {
                return Ok(w);
            }
            match w.last {
                Some((d, Ty::Dir)) => dir = d,
                Some(_) => return Err(libc::ENOTDIR),
                None => return Err(libc::ENOENT),
            }
            continue;
        }
        if last {
            return Ok(Walked {
                parent: dir,
                name: part.to_string(),
                last: Some((id, ty)),
            });
        }
        if ty != Ty::Dir {
            return Err(libc::ENOTDIR);
        }
        dir = id;
    }
    unreachable!("a path has at least one component")
}
