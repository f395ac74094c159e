//! The model's file and name-space operations: create and open, write, truncate, read, close,
//! mkdir, unlink, rmdir, rename, readdir and stat, each with Linux's answer.

use std::collections::BTreeMap;

use super::{Entry, FileId, Model, Node, Res, SKIP, join};
use crate::ops::Who;
use crate::walk;

impl Model {
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
        let gone = self.tree.remove(&at.path);
        // The names left of its inode: one link fewer, ctime moved.
        if let Some(other) = self.name_of_group(gone.and_then(|e| e.link)) {
            self.changed(&other);
        }
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
        // Two names of one inode: rename does nothing (vfs_rename: source == target).
        let group = |p: &str| self.tree.get(p).and_then(|e| e.link);
        if dst.is_some() && group(from).is_some() && group(from) == group(to) {
            return Ok(());
        }
        match (&src, &dst) {
            (Node::Dir, Some(Node::Dir)) if !self.children(to).is_empty() => return Err(libc::ENOTEMPTY),
            (Node::Dir, Some(Node::Dir)) => {}
            (Node::Dir, Some(_)) => return Err(libc::ENOTDIR),
            (_, Some(Node::Dir)) => return Err(libc::EISDIR),
            _ => {}
        }
        let replaced = self.tree.remove(to);
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
        if let Some(other) = self.name_of_group(replaced.and_then(|e| e.link)) {
            self.changed(&other);
        }
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
}
