//! Directory handles: the snapshot opendir takes, which every page of that listing is served
//! from (offsets stay stable across pages), whether the kernel may keep its cached pages of the
//! directory, and the numbers the entries carry to a frontend.

use std::sync::Arc;
use std::time::Instant;

use super::error::{VfsError, VfsResult};
use super::inode::{Ino, ROOT_INO};
use super::{DirEntry, Found, Handle, Node, VirtualFs, join};

impl VirtualFs {
    /// Takes the directory snapshot that every later page of this listing is served from.
    pub async fn opendir(&self, ino: Ino) -> VfsResult<u64> {
        Ok(self.opendir_keep(ino).await?.0)
    }

    /// `opendir`, also saying whether a kernel that caches directory pages may keep what it
    /// cached of this one: on a read-only mount, when the listing is at the same commit as at the
    /// directory's previous opendir, and that one was less than the metadata TTL ago. A revision
    /// that moved drops them, and so does age: past the TTL the kernel's entries are stale too,
    /// and a fresh READDIRPLUS renews all their attributes at once where cached pages would leave
    /// a LOOKUP per entry to `ls -l`.
    pub async fn opendir_keep(&self, ino: Ino) -> VfsResult<(u64, bool)> {
        let path = self.path_of(ino)?;
        let commit = self.commit().await?;
        let fh = self.snapshot_dir(ino, &path, &commit).await?;
        let keep = self.writer.is_none() && {
            let now = Instant::now();
            let last = self.dirs_listed.lock().insert(ino, (commit.clone(), now));
            last.is_some_and(|(c, at)| c == commit && now.duration_since(at) < self.opts.metadata_ttl)
        };
        Ok((fh, keep))
    }

    async fn snapshot_dir(&self, ino: Ino, path: &str, commit: &str) -> VfsResult<u64> {
        match self.find(commit, path).await? {
            Some(Found::Dir) => {}
            Some(_) => return Err(VfsError::NotDir),
            None => return Err(VfsError::NotFound),
        }
        // A read-only mount's listing is served as the Hub listed it, with no copy of each
        // file's metadata made on the way (an `ls -lR` lists every entry of the repo).
        let (listed, merged) = if self.writer.is_none() {
            (Some(self.listing(commit, path).await?), Vec::new())
        } else {
            (None, self.merged_listing(commit, path).await?)
        };
        self.note_opendir(commit, path).await;
        let parent_path = path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        let parent_ino = match path.rsplit_once('/') {
            Some((p, _)) => self.ino_at(p, 0),
            None => ROOT_INO,
        };
        let count = listed.as_ref().map_or(merged.len(), |l| l.entries.len());
        let mut entries = Vec::with_capacity(count + 2);
        entries.push(DirEntry {
            name: ".".into(),
            attr: self.attr_at(ino, Some(path), &Found::Dir),
        });
        entries.push(DirEntry {
            name: "..".into(),
            attr: self.attr_at(parent_ino, Some(parent_path), &Found::Dir),
        });
        let none = Vec::new();
        for (name, node) in listed.as_ref().map_or(&none, |l| &l.entries) {
            let child = join(path, name);
            let child_ino = self.ino_at(&child, 0);
            let attr = match node {
                Node::Dir => self.attr_with(child_ino, &Found::Dir, None),
                Node::File(m) => self.remote_attr(child_ino, m),
            };
            entries.push(DirEntry {
                name: name.clone(),
                attr,
            });
        }
        for (name, found) in &merged {
            let child = join(path, name);
            let child_ino = self.ino_at(&child, 0);
            entries.push(DirEntry {
                name: name.clone(),
                attr: self.attr_at(child_ino, Some(&child), found),
            });
        }
        Ok(self.add_handle(Handle::Dir(Arc::new(entries))))
    }

    /// The snapshot of an open directory; entry `i` has readdir offset `i + 1`.
    pub fn dir_entries(&self, fh: u64) -> VfsResult<Arc<Vec<DirEntry>>> {
        match self.handles.lock().get(&fh).map(|h| h.as_ref()) {
            Some(Handle::Dir(e)) => Ok(e.clone()),
            _ => Err(VfsError::BadHandle),
        }
    }

    /// A readdirplus entry is about to be handed to the kernel, which then holds one reference to
    /// the child: counts it and returns the number `name` in `dir` has now. One table visit per
    /// entry, where a listing is served; an entry that did not fit in the reply is given back
    /// with `forget(ino, 1)`.
    pub fn entry_lookup(&self, dir: &str, name: &str) -> Ino {
        self.ino_at(&join(dir, name), 1)
    }

    /// A directory entry's handle was handed to an NFS client, which may use it at any time.
    pub fn remember_entry(&self, parent_path: &str, name: &str) {
        match name {
            "." | ".." => {}
            _ => {
                self.remember_at(&join(parent_path, name));
            }
        }
    }

    /// The number of a mount-relative path for a frontend that never forgets.
    pub fn remember_path(&self, path: &str) -> Ino {
        self.remember_at(path)
    }

    /// Path of a directory inode, for `entry_lookup`.
    pub fn dir_path(&self, ino: Ino) -> VfsResult<String> {
        self.path_of(ino)
    }

    pub fn releasedir(&self, fh: u64) {
        self.handles.lock().remove(&fh);
    }
}
