//! Hard links on a writable mount.
//!
//! The Hub stores every name as a regular file of its own; the mount keeps which names are one
//! file. A link group is numbered by the inode number its first name had when the link was made,
//! and every name of the group answers with that number (`inode::link_key`). Its names share:
//! - one record (mode, owner, times, a special file's details): `MetaStore` sets every name's
//!   record together, and the group is the `link` field of those records, so the metadata log
//!   keeps it across a remount;
//! - one content: when a name is staged for writing, every other name's overlay entry points at the
//!   same staged file (an *alias*: its `repo_path` is another name's). The committer uploads it once
//!   and commits each alias with the same hash (`commit::aliases`).
//!
//! A name of a group is removed like any file (its overlay entry and record go); the staged copy
//! stays while another name holds it. A group whose names the Hub shows with different content
//! (another client changed one) is split at the next mount or write: every name a file of its own.

use std::sync::Arc;

use super::error::{VfsError, VfsResult};
use super::inode::{self, Ino};
use super::write::{check_name, check_repo_path};
use super::{Attr, Found, Hold, VirtualFs, join};
use crate::write::metadata::Stamp;
use crate::write::overlay::Entry;
use crate::write::staging::DirtyFile;

impl VirtualFs {
    /// The link group `path` (mount-relative) belongs to.
    pub(super) fn group_of(&self, path: &str) -> Option<u64> {
        self.store()?.link_of(&self.remote_path(path))
    }

    /// The inode table's key for `path`: its link group's, or the path itself.
    fn ino_key<'a>(&self, path: &'a str) -> std::borrow::Cow<'a, str> {
        match self.group_of(path) {
            Some(id) => std::borrow::Cow::Owned(inode::link_key(id)),
            None => std::borrow::Cow::Borrowed(path),
        }
    }

    /// The inode number of `path`, counting `lookups` kernel references.
    pub(super) fn ino_at(&self, path: &str, lookups: u64) -> Ino {
        self.inodes.ino_for(&self.ino_key(path), lookups)
    }

    /// The inode number of `path` for a frontend that never forgets (NFS).
    pub(super) fn remember_at(&self, path: &str) -> Ino {
        self.inodes.remember(&self.ino_key(path))
    }

    /// A name (mount-relative) of the link group a table key names; `None`: it has none left.
    pub(super) fn link_path(&self, key: &str) -> Option<String> {
        let id = inode::link_id(key)?;
        self.store()?.members(id).into_iter().find_map(|p| self.mount_path(&p))
    }

    /// The other names (mount-relative) of `path`'s link group.
    pub(super) fn other_names(&self, path: &str) -> Vec<String> {
        let (Some(id), Some(s)) = (self.group_of(path), self.store()) else {
            return Vec::new();
        };
        let me = self.remote_path(path);
        s.members(id)
            .into_iter()
            .filter(|p| *p != me)
            .filter_map(|p| self.mount_path(&p))
            .collect()
    }

    /// link(2): `new_name` in `new_parent` becomes another name of `ino`. EPERM for a directory and
    /// under `--posix strict` (the Hub would hold two independent copies).
    pub async fn link(&self, ino: Ino, new_parent: Ino, new_name: &str) -> VfsResult<Attr> {
        self.link_as(ino, new_parent, new_name, Hold::Counted).await
    }

    /// `link` for a frontend that holds numbers as `hold` says.
    pub async fn link_as(&self, ino: Ino, new_parent: Ino, new_name: &str, hold: Hold) -> VfsResult<Attr> {
        let Some(w) = &self.writer else {
            return Err(VfsError::ReadOnly);
        };
        check_name(new_name)?;
        let commit = self.commit().await?;
        let path = self.path_of(ino)?;
        let parent_path = self.path_of(new_parent)?;
        self.expect_dir(&commit, &parent_path).await?;
        let found = self.find(&commit, &path).await?.ok_or(VfsError::NotFound)?;
        let new = join(&parent_path, new_name);
        if self.find(&commit, &new).await?.is_some() {
            return Err(VfsError::Exists);
        }
        if matches!(found, Found::Dir) {
            return Err(VfsError::NotPermitted("no hard links to directories"));
        }
        if self.strict() {
            return Err(VfsError::NotPermitted("--posix strict: the Hub stores no hard links"));
        }
        check_repo_path(&self.remote_path(&new))?;
        let entry = match &found {
            Found::Remote(m) => Entry::Moved(m.clone()),
            Found::Local(d) => Entry::File(d.clone()),
            Found::Special => Entry::Special {
                hides: self.replaces_remote(&commit, &new).await?,
            },
            Found::Dir => return Err(VfsError::NotPermitted("no hard links to directories")),
        };
        // link(2) moves the file's ctime (every name's: one record).
        let now = Stamp::now();
        self.update_record(&path, &found, |m| m.ctime = now);
        let number = self.ino_at(&path, 0);
        let Some(store) = self.store() else {
            return Err(VfsError::ReadOnly);
        };
        let id = store
            .link(&self.remote_path(&path), &self.remote_path(&new), number)
            .ok_or(VfsError::NotFound)?;
        if id == number {
            self.inodes.make_group(&path, id);
        }
        w.overlay.lock().set(&new, entry);
        self.dir_changed(&parent_path);
        self.kick();
        let ino = match hold {
            Hold::Counted => self.ino_at(&new, 1),
            Hold::Remembered => self.remember_at(&new),
        };
        Ok(self.attr_at(ino, Some(&new), &found))
    }

    /// `path` was just staged as `d`: every other name of its link group shows (and writes) the
    /// same staged copy from now on.
    pub(super) fn share_staged(&self, path: &str, d: &Arc<DirtyFile>) {
        let Some(w) = &self.writer else { return };
        let others = self.other_names(path);
        if others.is_empty() {
            return;
        }
        let mut o = w.overlay.lock();
        let mut pending = false;
        for q in others {
            match o.get(&q) {
                Some(Entry::File(x)) if Arc::ptr_eq(x, d) => {}
                Some(Entry::Gone | Entry::Dir | Entry::Special { .. }) => {}
                // A name the Hub already has with this content (no overlay entry) needs nothing;
                // one still waiting for its commit (a move, another staged copy) now waits for
                // this copy's.
                entry => {
                    pending |= entry.is_some();
                    o.set(&q, Entry::File(d.clone()));
                }
            }
        }
        drop(o);
        if pending && !d.is_dirty() {
            d.mark_dirty();
        }
    }

    /// Before a linked file is staged: names whose Hub content differs from `path`'s (another
    /// client changed one) leave the group, each a file of its own from now on.
    pub(super) async fn split_diverged(&self, commit: &str, path: &str) -> VfsResult<()> {
        let others = self.other_names(path);
        if others.is_empty() {
            return Ok(());
        }
        let Some(Found::Remote(mine)) = self.find(commit, path).await? else {
            return Ok(());
        };
        for q in others {
            if let Some(Found::Remote(m)) = self.find(commit, &q).await?
                && m.id != mine.id
            {
                tracing::warn!(path = %q, other = %path, "the Hub holds different content for two names of one file; the link is split");
                if let Some(s) = self.store() {
                    s.unlink_member(&self.remote_path(&q));
                }
            }
        }
        Ok(())
    }

    /// The name `path` no longer holds staged copy `d` (unlinked, or replaced by a rename): the
    /// copy is discarded unless another name of its group holds it; if it was staged under this
    /// name, it is staged under one that holds it from now on.
    pub(super) fn let_go(&self, path: &str, d: &Arc<DirtyFile>) -> VfsResult<()> {
        let holders: Vec<String> = match &self.writer {
            Some(w) => {
                let others = self.other_names(path);
                let o = w.overlay.lock();
                others
                    .into_iter()
                    .filter(|q| matches!(o.get(q), Some(Entry::File(x)) if Arc::ptr_eq(x, d)))
                    .collect()
            }
            None => Vec::new(),
        };
        match holders.first() {
            None => d.discard(),
            Some(q) if d.repo_path() == self.remote_path(path) => d.set_path(&self.remote_path(q))?,
            Some(_) => {}
        }
        Ok(())
    }

    /// A name of a link group went (unlinked, or renamed over): the names left see their ctime
    /// move, as the inode's link count changed. `others`: those names, taken before.
    pub(super) fn names_left(&self, others: &[String], found: &Found) {
        if let Some(q) = others.first() {
            let now = Stamp::now();
            self.update_record(q, found, |m| m.ctime = now);
        }
    }

    /// At mount: link groups from the metadata log get their numbers back, a name whose staged
    /// copy was recovered shares it with the other names again, and a group whose names the Hub
    /// shows with different content, or without a name, is split or trimmed.
    pub(super) async fn restore_links(&self) -> VfsResult<()> {
        let (Some(w), Some(store)) = (&self.writer, self.store()) else {
            return Ok(());
        };
        let groups = store.groups();
        if groups.is_empty() {
            return Ok(());
        }
        let commit = self.commit().await?;
        let mut split = 0usize;
        for (id, members) in groups {
            self.inodes.pin(id);
            let paths: Vec<String> = members.iter().filter_map(|p| self.mount_path(p)).collect();
            let staged = {
                let o = w.overlay.lock();
                paths.iter().find_map(|p| match o.get(p) {
                    Some(Entry::File(d)) => Some((p.clone(), d.clone())),
                    _ => None,
                })
            };
            if let Some((p, d)) = staged {
                self.share_staged(&p, &d);
                continue;
            }
            if store.get(&members[0]).is_some_and(|m| m.special.is_some()) {
                continue;
            }
            let mut ids = Vec::new();
            for p in &paths {
                match self.find(&commit, p).await? {
                    Some(Found::Remote(m)) => ids.push(m.id),
                    // The Hub lost this name (deleted by another client): it goes.
                    _ => store.remove_tree(&self.remote_path(p)),
                }
            }
            if ids.windows(2).any(|x| x[0] != x[1]) {
                for p in &paths {
                    store.unlink_member(&self.remote_path(p));
                }
                split += 1;
            }
        }
        if split > 0 {
            tracing::warn!(
                groups = split,
                "hard links split: the Hub holds different content for names of one file"
            );
        }
        Ok(())
    }
}
