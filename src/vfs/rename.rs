//! rename(2) on a writable mount: files (staged, or Hub content moved by reference), symlinks and
//! special files, and whole directories, with the whiteouts a move leaves behind and the deletions
//! that must land before a directory takes a deleted file's place.

use super::error::{VfsError, VfsResult};
use super::write::{check_name, check_repo_path};
use super::{Found, Ino, Node, VirtualFs, join};
use crate::write::overlay::Entry;

/// Rename flags (Linux renameat2).
#[derive(Debug, Clone, Copy, Default)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

impl VirtualFs {
    pub async fn rename(
        &self,
        parent: Ino,
        name: &str,
        new_parent: Ino,
        new_name: &str,
        flags: RenameFlags,
    ) -> VfsResult<()> {
        self.rename_at(parent, name, new_parent, new_name, flags, true).await
    }

    /// `rename`; `settle_home`: a file moved back where the Hub has it while the deletion there is
    /// still pending is first committed where it is (see the `home` case), then moved.
    async fn rename_at(
        &self,
        parent: Ino,
        name: &str,
        new_parent: Ino,
        new_name: &str,
        flags: RenameFlags,
        settle_home: bool,
    ) -> VfsResult<()> {
        self.writable()?;
        if flags.exchange {
            return Err(VfsError::Invalid("RENAME_EXCHANGE is not supported"));
        }
        check_name(new_name)?;
        let commit = self.commit().await?;
        let from_parent = self.path_of(parent)?;
        let from = join(&from_parent, name);
        let to_parent = self.path_of(new_parent)?;
        self.expect_dir(&commit, &to_parent).await?;
        let to = join(&to_parent, new_name);
        check_repo_path(&self.remote_path(&to))?;
        let src = self.find(&commit, &from).await?.ok_or(VfsError::NotFound)?;
        if from == to {
            // Linux checks RENAME_NOREPLACE first: onto itself, too, it is EEXIST.
            return if flags.noreplace { Err(VfsError::Exists) } else { Ok(()) };
        }
        let commit = match src {
            Found::Dir => {
                let commit = self.settle_whiteout(commit, &to).await?;
                self.settle_nested_whiteouts(commit, &from, &to).await?
            }
            _ => commit,
        };
        let dst = self.find(&commit, &to).await?;
        if dst.is_some() && flags.noreplace {
            return Err(VfsError::Exists);
        }
        if dst.is_some() && self.group_of(&from).is_some_and(|g| self.group_of(&to) == Some(g)) {
            // Two names of one file: POSIX says rename does nothing.
            return Ok(());
        }
        if from.starts_with(&format!("{to}/")) {
            // The target is an ancestor of the source, so not empty: Linux says so before any
            // check of the types (a file onto its own parent is ENOTEMPTY, not EISDIR).
            return Err(VfsError::NotEmpty);
        }
        match (&src, &dst) {
            (Found::Dir, _) if to.starts_with(&format!("{from}/")) => {
                return Err(VfsError::Invalid("cannot move a directory into itself"));
            }
            (Found::Dir, Some(Found::Dir)) if !self.merged_listing(&commit, &to).await?.is_empty() => {
                return Err(VfsError::NotEmpty);
            }
            (Found::Dir, Some(Found::Dir)) => {}
            (Found::Dir, Some(_)) => return Err(VfsError::NotDir),
            (_, Some(Found::Dir)) => return Err(VfsError::IsDir),
            _ => {}
        }
        if let Some(Found::Local(old)) = &dst {
            self.let_go(&to, old)?;
        }
        // A name of a link group replaced here: the names it leaves see their ctime move.
        let replaced_others = match &dst {
            Some(Found::Dir) | None => Vec::new(),
            Some(_) => self.other_names(&to),
        };
        let moved = src.clone();
        match src {
            Found::Dir => self.rename_dir(&commit, &from, &to).await?,
            Found::Special => {
                let hides = self.replaces_remote(&commit, &to).await?;
                self.place(&to, Entry::Special { hides });
                self.hide(&commit, &from).await?;
            }
            Found::Local(d) => {
                // (Staged under another name of its link group: it stays staged there.)
                if d.repo_path() == self.remote_path(&from) {
                    d.set_path(&self.remote_path(&to))?;
                }
                self.place(&to, Entry::File(d));
                self.hide(&commit, &from).await?;
            }
            Found::Remote(m) => {
                // Back where the commit shown now has it: nothing to record. (Not the caller's
                // commit: a round may just have committed the move away from `to`.)
                let now = self.revision.lock().await.commit.clone();
                let home = m.remote_path == self.remote_path(&to)
                    && matches!(self.node_at(&now, &to).await?, Some(Node::File(ref h)) if h.id == m.id);
                // The whiteout at `to` (left by the move away) may be in a round being committed
                // right now: dropping it would not stop that round from deleting `to`, and the
                // file would be in neither place. Let that move land, then move the file from
                // where the commit has it.
                let pending = self
                    .writer
                    .as_ref()
                    .is_some_and(|w| matches!(w.overlay.lock().get(&to), Some(Entry::Gone)));
                if home && pending && settle_home && self.rounds_run() {
                    self.sync_all().await?;
                    return Box::pin(self.rename_at(parent, name, new_parent, new_name, flags, false)).await;
                }
                // Another file staged at `to` may be in a round being committed right now, and
                // dropping its entry would not stop that round from landing it: then the move is
                // recorded (committing the same content again) instead of dropped.
                let occupied = self.writer.as_ref().is_some_and(|w| {
                    matches!(
                        w.overlay.lock().get(&to),
                        Some(Entry::File(_) | Entry::Moved(_) | Entry::Special { .. })
                    )
                });
                if home && !occupied {
                    if let Some(w) = &self.writer {
                        w.overlay.lock().remove(&to);
                    }
                } else {
                    self.place(&to, Entry::Moved(m));
                }
                self.hide(&commit, &from).await?;
            }
        }
        self.inodes.rename(&from, &to);
        self.move_records(&from, &to, &moved);
        if let Some(d) = &dst {
            self.names_left(&replaced_others, d);
        }
        self.dir_changed(&from_parent);
        if to_parent != from_parent {
            self.dir_changed(&to_parent);
        }
        self.kick();
        Ok(())
    }

    /// Before a directory is laid over `path`: a deleted remote file there (a whiteout the
    /// directory entry would replace) is committed first, else its deletion would be lost.
    /// Returns the commit to work on from then on.
    pub(super) async fn settle_whiteout(&self, commit: String, path: &str) -> VfsResult<String> {
        let whiteout = self
            .writer
            .as_ref()
            .is_some_and(|w| matches!(w.overlay.lock().get(path), Some(Entry::Gone)));
        if whiteout && self.rounds_run() && self.remote_file(&commit, path).await? {
            self.sync_all().await?;
            return self.commit().await;
        }
        Ok(commit)
    }

    /// `settle_whiteout` for the inside of a directory moved onto `to`: the target is empty in the
    /// mount's view, but its whiteouts stay (they hide the Hub's files there). Where the moved tree
    /// brings a directory onto a whiteout of a remote file, that deletion is committed first, for
    /// the same reason. Rare: it needs a target that held Hub files deleted but not yet committed.
    async fn settle_nested_whiteouts(&self, commit: String, from: &str, to: &str) -> VfsResult<String> {
        let prefix = format!("{to}/");
        let gones: Vec<String> = match &self.writer {
            Some(w) => w
                .overlay
                .lock()
                .subtree(to)
                .into_iter()
                .filter(|(p, e)| p.starts_with(&prefix) && matches!(e, Entry::Gone))
                .map(|(p, _)| p)
                .collect(),
            None => return Ok(commit),
        };
        for gone in gones {
            let source = join(from, &gone[prefix.len()..]);
            if self.rounds_run()
                && matches!(self.find(&commit, &source).await?, Some(Found::Dir))
                && self.remote_file(&commit, &gone).await?
            {
                self.sync_all().await?;
                return self.commit().await;
            }
        }
        Ok(commit)
    }

    fn place(&self, path: &str, e: Entry) {
        if let Some(w) = &self.writer {
            w.overlay.lock().set(path, e);
        }
    }

    /// Moves a directory: every remote file below it becomes a move (committed by reference, no
    /// upload), every local entry below it moves with it.
    async fn rename_dir(&self, commit: &str, from: &str, to: &str) -> VfsResult<()> {
        let Some(w) = &self.writer else {
            return Err(VfsError::ReadOnly);
        };
        let mut remote = match self.node_at(commit, from).await? {
            Some(Node::Dir) => {
                self.client
                    .list_tree_recursive(&self.repo, commit, &self.remote_path(from))
                    .await?
            }
            _ => Vec::new(),
        };
        let base = self.remote_path(from);
        add_implied_dirs(&mut remote, &base);
        let local = w.overlay.lock().subtree(from);
        let local_paths: std::collections::HashSet<&str> = local.iter().map(|(p, _)| p.as_str()).collect();
        let mut sets: Vec<(String, Entry)> = Vec::new();
        let mut hides: Vec<String> = Vec::new();
        for e in &remote {
            let Some(rel) = e.path().strip_prefix(&base).and_then(|r| r.strip_prefix('/')) else {
                continue;
            };
            let old = join(from, rel);
            if local_paths.contains(old.as_str()) {
                continue;
            }
            let new = join(to, rel);
            let (_, node) = super::meta::node_from_entry(commit, e);
            sets.push((
                new,
                match node {
                    Node::Dir => Entry::Dir,
                    Node::File(m) => Entry::Moved(m),
                },
            ));
            hides.push(old);
        }
        for (old, e) in &local {
            if old == from {
                continue;
            }
            let rel = &old[from.len() + 1..];
            let new = join(to, rel);
            match e {
                Entry::File(d) => {
                    // (An alias of a linked file staged under another name stays staged there.)
                    if d.repo_path() == self.remote_path(old) {
                        d.set_path(&self.remote_path(&new))?;
                    }
                    sets.push((new, e.clone()));
                }
                Entry::Moved(_) | Entry::Dir => sets.push((new, e.clone())),
                // The Hub file it replaced stays deleted at the old place (`hide` below).
                Entry::Special { .. } => sets.push((new, Entry::Special { hides: false })),
                // A remote file already deleted: it stays deleted at the old place only.
                Entry::Gone => continue,
            }
            hides.push(old.clone());
        }
        {
            let mut o = w.overlay.lock();
            // The target is empty in the mount's view, but its whiteouts must stay: they hide the
            // Hub's files there until their deletion is committed. Anything else goes, then the
            // moved tree is laid down.
            for (p, e) in o.subtree(to) {
                if !matches!(e, Entry::Gone) {
                    o.remove(&p);
                }
            }
            o.set(to, Entry::Dir);
            for (p, e) in sets {
                // A special file laid over a whiteout takes over its deletion.
                let e = match (e, o.get(&p)) {
                    (Entry::Special { .. }, Some(Entry::Gone)) => Entry::Special { hides: true },
                    (e, _) => e,
                };
                o.set(&p, e);
            }
        }
        for old in hides {
            self.hide(commit, &old).await?;
        }
        self.hide(commit, from).await
    }
}

/// A recursive listing of a bucket has files only (its directories are the prefixes of its files):
/// adds an entry for every directory strictly below `base` that a file implies and the listing
/// lacks, so a moved tree keeps its subdirectories.
fn add_implied_dirs(entries: &mut Vec<crate::hub_client::TreeEntry>, base: &str) {
    let mut have: std::collections::HashSet<String> = entries
        .iter()
        .filter(|e| e.is_dir())
        .map(|e| e.path().to_string())
        .collect();
    let mut implied = Vec::new();
    for e in entries.iter().filter(|e| !e.is_dir()) {
        let mut p = e.path();
        while let Some((parent, _)) = p.rsplit_once('/') {
            if parent.len() <= base.len() || !have.insert(parent.to_string()) {
                break;
            }
            implied.push(parent.to_string());
            p = parent;
        }
    }
    entries.extend(implied.into_iter().map(|path| crate::hub_client::TreeEntry::Dir {
        path,
        oid: String::new(),
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub_client::TreeEntry;

    fn file(p: &str) -> TreeEntry {
        TreeEntry::File {
            path: p.into(),
            size: 1,
            oid: "h".into(),
            lfs_sha256: None,
            xet_hash: Some("h".into()),
            last_commit_date: None,
        }
    }

    #[test]
    fn implied_dirs_of_a_files_only_listing() {
        let mut e = vec![file("top/a/b/c.txt"), file("top/a/d.txt"), file("top/x.txt")];
        add_implied_dirs(&mut e, "top");
        let mut dirs: Vec<&str> = e.iter().filter(|e| e.is_dir()).map(|e| e.path()).collect();
        dirs.sort();
        assert_eq!(dirs, vec!["top/a", "top/a/b"]);
        let mut e = vec![file("a/b.txt")];
        add_implied_dirs(&mut e, "");
        assert_eq!(e.iter().filter(|e| e.is_dir()).count(), 1, "a below the root");
    }
}
