//! Symlinks, FIFOs, sockets and device nodes on a writable mount.
//!
//! The Hub stores regular files only, so these exist in the mount alone: an overlay entry that the
//! committer never uploads, with their details (target, device number) in the metadata store. They
//! can be listed, read (`readlink`), renamed and removed like any entry, survive a remount through
//! the metadata log, and are counted by `hubfs status` as local-only. `--posix strict` refuses them.
//! Hard links (of these too) are in `links`.

use super::attrs::NewNode;
use super::error::{VfsError, VfsResult};
use super::write::{check_name, check_repo_path};
use super::{Attr, Found, Ino, VirtualFs, join};
use crate::write::metadata::Special;
use crate::write::overlay::Entry;

/// Longest symlink target Linux accepts (`PATH_MAX` including its terminating NUL).
const MAX_TARGET: usize = 4095;

impl VirtualFs {
    /// symlink(2): `name` in `parent` pointing at `target`.
    pub async fn symlink(&self, parent: Ino, name: &str, target: &str, node: NewNode) -> VfsResult<Attr> {
        if target.is_empty() {
            return Err(VfsError::NotFound);
        }
        if target.len() > MAX_TARGET {
            return Err(VfsError::NameTooLong);
        }
        let node = NewNode {
            mode: Some(0o777),
            ..node
        };
        self.make_special(
            parent,
            name,
            Special::Symlink {
                target: target.to_string(),
            },
            node,
        )
        .await
    }

    /// mknod(2) of a FIFO, socket or device node (`mode` carries the type bits, `rdev` the device).
    /// A regular file is created empty and closed, as a local file system does.
    pub async fn mknod(&self, parent: Ino, name: &str, mode: u32, rdev: u32, node: NewNode) -> VfsResult<Attr> {
        let special = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => {
                let node = NewNode {
                    mode: Some(mode & 0o7777),
                    ..node
                };
                let (attr, fh) = self.create_as(parent, name, true, false, node).await?;
                let r = self.flush(fh).await;
                self.release(fh);
                return r.map(|()| attr);
            }
            libc::S_IFIFO => Special::Fifo,
            libc::S_IFSOCK => Special::Socket,
            libc::S_IFCHR => Special::Char { rdev },
            libc::S_IFBLK => Special::Block { rdev },
            _ => return Err(VfsError::Invalid("mknod of an unknown file type")),
        };
        let node = NewNode {
            mode: Some(mode & 0o7777),
            ..node
        };
        self.make_special(parent, name, special, node).await
    }

    async fn make_special(&self, parent: Ino, name: &str, special: Special, node: NewNode) -> VfsResult<Attr> {
        if self.writer.is_none() {
            return Err(VfsError::ReadOnly);
        }
        if self.strict() {
            return Err(VfsError::NotPermitted(
                "--posix strict: the Hub stores no symlinks or special files",
            ));
        }
        check_name(name)?;
        let commit = self.commit().await?;
        let parent_path = self.path_of(parent)?;
        match self.find(&commit, &parent_path).await? {
            Some(Found::Dir) => {}
            Some(_) => return Err(VfsError::NotDir),
            None => return Err(VfsError::NotFound),
        }
        let path = join(&parent_path, name);
        check_repo_path(&self.remote_path(&path))?;
        if self.find(&commit, &path).await?.is_some() {
            return Err(VfsError::Exists);
        }
        let hides = self.replaces_remote(&commit, &path).await?;
        self.new_record(&path, false, node, Some(special));
        if let Some(w) = &self.writer {
            w.overlay.lock().set(&path, Entry::Special { hides });
        }
        self.dir_changed(&parent_path);
        // The committer deletes a Hub file this replaced, and `hubfs status` counts the entry.
        self.kick();
        let ino = self.ino_at(&path, 1);
        Ok(self.attr_at(ino, Some(&path), &Found::Special))
    }

    /// readlink(2): a symlink's target; anything else is EINVAL.
    pub async fn readlink(&self, ino: Ino) -> VfsResult<String> {
        let path = self.path_of(ino)?;
        let commit = self.commit().await?;
        match self.find(&commit, &path).await? {
            Some(Found::Special) => match self.record(&path).and_then(|r| r.special) {
                Some(Special::Symlink { target }) => Ok(target),
                _ => Err(VfsError::Invalid("not a symlink")),
            },
            Some(_) => Err(VfsError::Invalid("not a symlink")),
            None => Err(VfsError::NotFound),
        }
    }
}

impl VirtualFs {
    /// At mount: puts back what exists only in the mount, from the metadata log of an earlier run:
    /// symlinks and special files, and directories the Hub does not have (created empty, or
    /// emptied, through the mount). Where the Hub now holds such a path as something else (a file
    /// or folder where a special file was, a file where a directory was), the Hub's entry wins and
    /// the local records of that path and below it are dropped. (Records of another repo instance
    /// never get here: `write::instance` sets them aside when the mount opens.)
    pub(super) async fn restore_local(&self) -> VfsResult<()> {
        let Some(w) = &self.writer else { return Ok(()) };
        let wanted: Vec<(String, String, bool)> = w
            .meta
            .all()
            .into_iter()
            .filter(|(_, m)| m.dir || m.special.is_some())
            .filter_map(|(repo_path, m)| {
                let path = self.mount_path(&repo_path)?;
                Some((path, repo_path, m.special.is_some()))
            })
            .filter(|(path, _, _)| !path.is_empty())
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let commit = self.commit().await?;
        // Repo path → whether the Hub has a folder there (false: a file).
        let mut on_hub = std::collections::HashMap::new();
        let remote: Vec<String> = wanted.iter().map(|(_, r, _)| r.clone()).collect();
        for chunk in remote.chunks(RESTORE_BATCH) {
            for e in self.client.paths_info(&self.repo, &commit, chunk).await? {
                let is_dir = matches!(e, crate::hub_client::TreeEntry::Dir { .. });
                on_hub.insert(e.path().to_string(), is_dir);
            }
        }
        let mut restored = 0usize;
        let mut dropped = 0usize;
        let mut o = w.overlay.lock();
        for (path, repo_path, special) in wanted {
            // (Below a path dropped just before: its records went with it.)
            if o.get(&path).is_some() || w.meta.get(&repo_path).is_none() {
                continue;
            }
            match (special, on_hub.get(&repo_path)) {
                (true, None) => o.set(&path, Entry::Special { hides: false }),
                (false, None) => o.set(&path, Entry::Dir),
                // The Hub's folder, with this mount's mode and times for it.
                (false, Some(true)) => continue,
                (true, Some(_)) | (false, Some(false)) => {
                    tracing::warn!(path = %repo_path, "the Hub holds this path as something else now; its local-only record is dropped and the Hub's entry shown");
                    w.meta.remove_tree(&repo_path);
                    dropped += 1;
                    continue;
                }
            }
            restored += 1;
        }
        if restored > 0 || dropped > 0 {
            tracing::info!(
                entries = restored,
                dropped,
                "restored local-only entries from the metadata log"
            );
        }
        Ok(())
    }
}

/// Paths asked about per paths-info request when restoring local entries at mount.
const RESTORE_BATCH: usize = 100;
