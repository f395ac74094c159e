//! Compares VirtualFs with the model after every step: the whole tree (listings, attributes,
//! contents, symlink targets) and every open handle.

use hubfs::vfs::{Attr, Ino, Kind, ROOT_INO};

use super::{Case, SLACK, errno_name};
use crate::model::{Entry, Node, Special, Time, join};

impl Case<'_> {
    /// The entries of an open directory, without `.` and `..`.
    pub(super) fn list(&mut self, ino: Ino) -> Result<Vec<(String, Attr)>, i32> {
        let vfs = self.vfs();
        let fh = self.w.rt.block_on(vfs.opendir(ino)).map_err(|e| e.errno())?;
        let entries = vfs.dir_entries(fh).map_err(|e| e.errno());
        vfs.releasedir(fh);
        Ok(entries?
            .iter()
            .filter(|e| e.name != "." && e.name != "..")
            .map(|e| (e.name.clone(), e.attr.clone()))
            .collect())
    }

    /// Everything the model knows of an entry, against its attributes: kind, size, device number,
    /// mode, owner, link count (of a directory a bound only: VirtualFs counts subdirectories only
    /// where it knows them), and the times (exact where set explicitly, else no earlier than the
    /// operation that set them).
    pub(super) fn same_attr(&self, path: &str, a: &Attr, e: &Entry) -> Result<(), String> {
        let (kind, size, rdev) = match &e.node {
            Node::Dir => (Kind::Dir, None, 0),
            Node::File(id) => (Kind::File, Some(self.model.content(*id).len() as u64), 0),
            Node::Symlink(t) => (Kind::Symlink, Some(t.len() as u64), 0),
            Node::Special(Special::Fifo) => (Kind::Fifo, Some(0), 0),
            Node::Special(Special::Socket) => (Kind::Socket, Some(0), 0),
            Node::Special(Special::Char(r)) => (Kind::CharDevice, Some(0), *r),
            Node::Special(Special::Block(r)) => (Kind::BlockDevice, Some(0), *r),
        };
        let m = &e.meta;
        let mut diffs = Vec::new();
        if a.kind != kind {
            diffs.push(format!("kind {:?}, model {kind:?}", a.kind));
        }
        if let Some(size) = size
            && a.size != size
        {
            diffs.push(format!("size {}, model {size}", a.size));
        }
        if a.rdev != rdev {
            diffs.push(format!("rdev {:#x}, model {rdev:#x}", a.rdev));
        }
        if a.perm as u32 != m.mode {
            diffs.push(format!("mode {:o}, model {:o}", a.perm, m.mode));
        }
        if (a.uid, a.gid) != (m.uid, m.gid) {
            diffs.push(format!("owner {}:{}, model {}:{}", a.uid, a.gid, m.uid, m.gid));
        }
        if kind == Kind::Dir {
            // 2 + subdirectories, those of a Hub directory counted only while its listing is
            // cached: never more.
            let subdirs = self
                .model
                .children(path)
                .values()
                .filter(|e| e.node == Node::Dir)
                .count() as u32;
            if a.nlink < 2 || a.nlink > 2 + subdirs {
                diffs.push(format!("nlink {}, model 2 + {subdirs} subdirectories", a.nlink));
            }
        } else {
            // One per name of its inode (a hard-link group: every entry naming it).
            let names = match e.link {
                Some(g) => self.model.tree.values().filter(|x| x.link == Some(g)).count() as u32,
                None => 1,
            };
            if a.nlink != names {
                diffs.push(format!("nlink {}, model {names}", a.nlink));
            }
        }
        for (name, got, want) in [("mtime", a.mtime, m.mtime), ("ctime", a.ctime, m.ctime)] {
            match want {
                Time::Exact(t) if got != t => diffs.push(format!("{name} {got:?}, set to {t:?}")),
                Time::After(t) if got + SLACK < t => diffs.push(format!("{name} {got:?}, before {t:?}")),
                _ => {}
            }
        }
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(format!("/{path}: {}", diffs.join(", ")))
        }
    }

    pub(super) fn same_listing(&self, dir: &str, got: &[(String, Attr)]) -> Result<(), String> {
        let want = self.model.children(dir);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        let want_names: Vec<&str> = want.keys().map(String::as_str).collect();
        if names != want_names {
            return Err(format!("listing of /{dir}: {names:?}, model {want_names:?}"));
        }
        for (name, attr) in got {
            self.same_attr(&join(dir, name), attr, &want[name])?;
        }
        Ok(())
    }

    /// The whole tree through VirtualFs (listings, lookups, reads, readlinks) and every open
    /// handle.
    pub(super) fn check(&mut self) -> Result<(), String> {
        let r = self
            .check_root()
            .and_then(|_| self.check_dir("", ROOT_INO))
            .and_then(|_| self.check_handles());
        self.forget_lookups();
        r
    }

    fn check_root(&mut self) -> Result<(), String> {
        let vfs = self.vfs();
        let a = self
            .call(vfs.getattr(ROOT_INO))?
            .map_err(|e| format!("getattr of the root: {e}"))?;
        self.same_attr("", &a, &self.model.entry("").unwrap())
    }

    fn check_dir(&mut self, dir: &str, ino: Ino) -> Result<(), String> {
        let got = self
            .list(ino)
            .map_err(|e| format!("listing /{dir}: {}", errno_name(e)))?;
        self.same_listing(dir, &got)?;
        for (name, _) in got {
            let path = join(dir, &name);
            let a = self
                .lookup_in(ino, &name)
                .map_err(|e| format!("lookup {path}: {}", errno_name(e)))?;
            let e = self.model.entry(&path).unwrap();
            self.same_attr(&path, &a, &e)?;
            match e.node {
                Node::Dir => self.check_dir(&path, a.ino)?,
                Node::File(id) => {
                    let want = self.model.content(id).to_vec();
                    let got = self
                        .read_path(a.ino, 0, want.len() as u32 + 16)?
                        .map_err(|e| format!("read {path}: {}", errno_name(e)))?;
                    if got != want {
                        return Err(format!(
                            "{path}: content differs ({} bytes, model {})",
                            got.len(),
                            want.len()
                        ));
                    }
                }
                Node::Symlink(want) => {
                    let vfs = self.vfs();
                    let got = self
                        .call(vfs.readlink(a.ino))?
                        .map_err(|e| format!("readlink {path}: {e}"))?;
                    if got != want {
                        return Err(format!("{path}: symlink to {got:?}, model {want:?}"));
                    }
                }
                Node::Special(_) => {}
            }
        }
        Ok(())
    }

    fn check_handles(&mut self) -> Result<(), String> {
        let vfs = self.vfs();
        for (s, (fh, ino)) in self.handles.clone().into_iter().enumerate() {
            let want = self.model.content(self.model.handles[s]).to_vec();
            let a = self
                .call(vfs.getattr_fh(ino, Some(fh)))?
                .map_err(|e| format!("fstat of handle {s}: {e}"))?;
            if a.size != want.len() as u64 || a.kind != Kind::File {
                return Err(format!(
                    "fstat of handle {s}: {:?} of size {}, model a file of {}",
                    a.kind,
                    a.size,
                    want.len()
                ));
            }
            let got = self
                .call(vfs.read(fh, 0, want.len() as u32 + 16))?
                .map_err(|e| format!("read through handle {s}: {e}"))?;
            if got[..] != want[..] {
                return Err(format!(
                    "handle {s}: content differs ({} bytes, model {})",
                    got.len(),
                    want.len()
                ));
            }
        }
        Ok(())
    }
}
