//! POSIX mutations of a writable mount, in one place for every frontend.
//!
//! Content changes go to staged files; namespace changes go to the overlay (`write::overlay`).
//! The committer (`commit`) turns both into Hub commits: a written file when it is closed, renames
//! and deletions in the background after a short quiet period. Renames are in `rename`, symlinks
//! and special files in `special`, modes, owners and times in `attrs`.

use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;

use super::attrs::NewNode;
use super::error::{VfsError, VfsResult};
use super::read::ReadState;
use super::remote::FileMeta;
use super::{Attr, CloseMode, Found, Handle, Ino, Node, VirtualFs, join};
use crate::write::metadata::Stamp;
use crate::write::overlay::{Entry, Overlay};
use crate::write::staging::DirtyFile;

/// How much of a remote file is copied into staging per read when it is opened for writing.
const FILL_BLOCK: u32 = 8 << 20;

/// Attribute changes a frontend asks for.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// The handle the change came through, if any.
    pub fh: Option<u64>,
}

/// A time to set: a given one, or the time the change is made (`UTIME_NOW`, NFS SET_TO_SERVER_TIME).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSet {
    Now,
    At(SystemTime),
}

impl TimeSet {
    fn stamp(self, now: Stamp) -> Stamp {
        match self {
            TimeSet::Now => now,
            TimeSet::At(t) => Stamp::from(t),
        }
    }
}

/// Checks a new name: what POSIX forbids, and what the Hub cannot store as a path component.
pub(super) fn check_name(name: &str) -> VfsResult<()> {
    if name.len() > 255 {
        return Err(VfsError::NameTooLong);
    }
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(VfsError::Invalid("not a valid file name"));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(VfsError::Invalid(
            "the Hub does not store names with control characters",
        ));
    }
    Ok(())
}

/// Checks a new entry's full repo path against what the Hub refuses to store although every name in
/// it is valid: the `.git` folder at the repo root. Refusing here keeps a doomed file from being
/// staged and retried forever.
pub(super) fn check_repo_path(remote_path: &str) -> VfsResult<()> {
    if remote_path == ".git" || remote_path.starts_with(".git/") {
        return Err(VfsError::Invalid("the Hub reserves the .git folder"));
    }
    Ok(())
}

/// A Hub path is being deleted: its parent directories become local ones, because the Hub drops a
/// directory with its last file and only rmdir may remove one from the mount. (Parents of a Hub
/// path are Hub directories, so one that has an overlay entry already is hidden or local.)
fn keep_parents(o: &mut Overlay, path: &str) {
    let mut dir = path;
    while let Some((parent, _)) = dir.rsplit_once('/') {
        if o.get(parent).is_none() {
            o.set(parent, Entry::Dir);
        }
        dir = parent;
    }
}

impl VirtualFs {
    pub(super) fn writable(&self) -> VfsResult<()> {
        if self.writer.is_some() {
            Ok(())
        } else {
            Err(VfsError::ReadOnly)
        }
    }

    pub(super) async fn expect_dir(&self, commit: &str, path: &str) -> VfsResult<()> {
        match self.find(commit, path).await? {
            Some(Found::Dir) => Ok(()),
            Some(_) => Err(VfsError::NotDir),
            None => Err(VfsError::NotFound),
        }
    }

    /// Whether the commit's tree has a file at `path` (so removing it needs a deletion).
    pub(super) async fn remote_file(&self, commit: &str, path: &str) -> VfsResult<bool> {
        Ok(matches!(self.node_at(commit, path).await?, Some(Node::File(_))))
    }

    /// Whether something laid at `path` must also delete what the Hub has (or may soon have)
    /// there: the commit's tree has an entry, or a local file or move there may be in a round
    /// being committed right now.
    pub(super) async fn replaces_remote(&self, commit: &str, path: &str) -> VfsResult<bool> {
        // The commit shown now, not the caller's: a round may have landed `path` meanwhile.
        let now = self.revision.lock().await.commit.clone();
        let remote = self.node_at(&now, path).await?.is_some() || self.node_at(commit, path).await?.is_some();
        let Some(w) = &self.writer else {
            return Err(VfsError::ReadOnly);
        };
        Ok(remote
            || matches!(
                w.overlay.lock().get(path),
                Some(Entry::File(_) | Entry::Moved(_) | Entry::Gone | Entry::Special { hides: true })
            ))
    }

    /// Puts a whiteout at `path` when the commit's tree has something there, else clears it.
    pub(super) async fn hide(&self, commit: &str, path: &str) -> VfsResult<()> {
        // The commit shown now, not the caller's: a round may have landed `path` meanwhile.
        let now = self.revision.lock().await.commit.clone();
        let remote = self.node_at(&now, path).await?.is_some() || self.node_at(commit, path).await?.is_some();
        let Some(w) = &self.writer else {
            return Err(VfsError::ReadOnly);
        };
        let mut o = w.overlay.lock();
        if remote
            || matches!(
                o.get(path),
                Some(Entry::File(_) | Entry::Moved(_) | Entry::Special { hides: true })
            )
        {
            // A local file or move may be in a round being committed right now: if that lands,
            // the whiteout deletes the path in the next round; if not, the next round drops it
            // (nothing there to delete).
            o.set(path, Entry::Gone);
            keep_parents(&mut o, path);
        } else {
            o.remove(path);
        }
        Ok(())
    }

    /// The staged file behind `path`, staging it first if it is still remote (its content is
    /// copied in unless `truncate`).
    async fn stage(&self, commit: &str, path: &str, truncate: bool) -> VfsResult<Arc<DirtyFile>> {
        let linked = self.group_of(path).is_some();
        if linked {
            self.split_diverged(commit, path).await?;
        }
        let d = self.stage_copy(commit, path, truncate).await?;
        if linked {
            // Every name of the file writes and reads this copy.
            self.share_staged(path, &d);
        }
        self.follow_staged(path, &d);
        Ok(d)
    }

    /// `stage` without moving the handles open on the file over to the staged copy.
    async fn stage_copy(&self, commit: &str, path: &str, truncate: bool) -> VfsResult<Arc<DirtyFile>> {
        let Some(w) = &self.writer else {
            return Err(VfsError::ReadOnly);
        };
        let meta = match self.find(commit, path).await? {
            Some(Found::Local(d)) => {
                if truncate && d.size() > 0 {
                    d.truncate(0)?;
                }
                return Ok(d);
            }
            Some(Found::Remote(m)) => m,
            Some(Found::Dir) => return Err(VfsError::IsDir),
            Some(Found::Special) => return Err(VfsError::Invalid("not a regular file")),
            None => return Err(VfsError::NotFound),
        };
        if let Some(d) = self.open_staged_copy(path) {
            // One content per file: descriptors still open on the committed staged copy keep
            // reading what this writer writes.
            let mut o = w.overlay.lock();
            let d = match o.get(path) {
                Some(Entry::File(existing)) => existing.clone(),
                _ => {
                    o.set(path, Entry::File(d.clone()));
                    d
                }
            };
            drop(o);
            if truncate && d.size() > 0 {
                d.truncate(0)?;
            }
            return Ok(d);
        }
        let d = Arc::new(w.staging.create(&self.remote_path(path))?);
        if !truncate && meta.size > 0 {
            if w.layer.is_some() {
                // An overlay keeps only what is written; the rest stays the Hub's (`copy_up`).
                d.set_base(crate::write::lazy::Base {
                    meta: meta.clone(),
                    commit: commit.to_string(),
                })?;
            } else {
                self.fill(&d, &meta, commit).await?;
            }
        }
        // Unchanged content at its own path is clean: closing without writing commits nothing.
        // Content moved here (not yet committed at this path) stays dirty.
        if meta.remote_path == self.remote_path(path) && (d.size() == meta.size) {
            d.mark_clean();
        }
        let mut o = w.overlay.lock();
        if let Some(Entry::File(existing)) = o.get(path) {
            // Someone staged it meanwhile: share theirs.
            let existing = existing.clone();
            d.discard();
            if truncate && existing.size() > 0 {
                existing.truncate(0)?;
            }
            return Ok(existing);
        }
        o.set(path, Entry::File(d.clone()));
        Ok(d)
    }

    /// A staged copy of `path` that an open handle still holds after its commit took it out of the
    /// overlay: clean (it is what the Hub has there) and not discarded.
    fn open_staged_copy(&self, path: &str) -> Option<Arc<DirtyFile>> {
        let ino = self.ino_at(path, 0);
        let remote = self.remote_path(path);
        self.handles.lock().values().find_map(|h| match h.as_ref() {
            Handle::Local { ino: i, file, .. }
                if *i == ino && !file.is_discarded() && !file.is_dirty() && file.repo_path() == remote =>
            {
                Some(file.clone())
            }
            _ => None,
        })
    }

    /// Copies a remote file's content into staging.
    async fn fill(&self, d: &DirtyFile, meta: &FileMeta, commit: &str) -> VfsResult<()> {
        let state = Mutex::new(ReadState::default());
        let mut off = 0;
        while off < meta.size {
            let data = self.reader.read(meta, commit, &state, off, FILL_BLOCK).await?;
            if data.is_empty() {
                return Err(VfsError::ShortRead {
                    offset: off,
                    wanted: meta.size - off,
                    got: 0,
                });
            }
            d.write_at(off, &data)?;
            off += data.len() as u64;
        }
        Ok(())
    }

    /// Opens a file for writing (staging it).
    pub(crate) async fn open_for_write(&self, ino: Ino, truncate: bool) -> VfsResult<(u64, bool)> {
        self.writable()?;
        let path = self.path_of(ino)?;
        let commit = self.commit().await?;
        let file = self.stage(&commit, &path, truncate).await?;
        if truncate {
            self.content_changed(&path);
        }
        file.add_writer()?;
        self.writer_opened(&path, &file);
        self.inodes.opened(ino);
        let fh = self.add_handle(Handle::Local { ino, file, write: true });
        Ok((fh, false))
    }

    /// Creates (or with `exclusive` false, opens) `name` in `parent` for writing, with the mount's
    /// default mode and owner.
    pub async fn create(&self, parent: Ino, name: &str, exclusive: bool, truncate: bool) -> VfsResult<(Attr, u64)> {
        self.create_as(parent, name, exclusive, truncate, NewNode::default())
            .await
    }

    /// `create`; a new file gets `node`'s mode and owner.
    pub async fn create_as(
        &self,
        parent: Ino,
        name: &str,
        exclusive: bool,
        truncate: bool,
        node: NewNode,
    ) -> VfsResult<(Attr, u64)> {
        self.writable()?;
        check_name(name)?;
        let commit = self.commit().await?;
        let parent_path = self.path_of(parent)?;
        self.expect_dir(&commit, &parent_path).await?;
        let path = join(&parent_path, name);
        check_repo_path(&self.remote_path(&path))?;
        let file = match self.find(&commit, &path).await? {
            Some(Found::Dir) if exclusive => return Err(VfsError::Exists),
            Some(Found::Dir) => return Err(VfsError::IsDir),
            Some(_) if exclusive => return Err(VfsError::Exists),
            Some(_) => {
                let d = self.stage(&commit, &path, truncate).await?;
                if truncate {
                    self.content_changed(&path);
                }
                d.add_writer()?;
                d
            }
            None => {
                let Some(w) = &self.writer else {
                    return Err(VfsError::ReadOnly);
                };
                let d = Arc::new(w.staging.create(&self.remote_path(&path))?);
                self.new_record(&path, false, node, None);
                self.dir_changed(&parent_path);
                // The writer is counted before the committer can see the file: an empty file with
                // no writer in the overlay is one it may commit and drop as clean.
                d.add_writer()?;
                // A whiteout here (the Hub's file was deleted) stays a deletion: the new file
                // replaces the Hub's at its commit.
                w.overlay.lock().set(&path, Entry::File(d.clone()));
                d
            }
        };
        self.writer_opened(&path, &file);
        let ino = self.ino_at(&path, 1);
        self.inodes.opened(ino);
        let attr = self.attr_at(ino, Some(&path), &Found::Local(file.clone()));
        let fh = self.add_handle(Handle::Local { ino, file, write: true });
        Ok((attr, fh))
    }

    /// Writes through a handle opened for writing. Synchronous: it is one `pwrite` to local disk.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> VfsResult<u32> {
        self.write_as(fh, offset, data, false)
    }

    /// `write` for a frontend whose close uploads (FUSE's flush): a large file written in order
    /// is uploaded while it is written (`commit::follow`). NFS has no close: its handles go when
    /// idle, and the round uploads what they wrote, so it does not follow.
    pub fn write_following(&self, fh: u64, offset: u64, data: &[u8]) -> VfsResult<u32> {
        self.write_as(fh, offset, data, true)
    }

    fn write_as(&self, fh: u64, offset: u64, data: &[u8], follow: bool) -> VfsResult<u32> {
        let h = self.handles.lock().get(&fh).cloned().ok_or(VfsError::BadHandle)?;
        match h.as_ref() {
            Handle::Local {
                file, write: true, ino, ..
            } => {
                file.write_at(offset, data)?;
                if follow {
                    self.follow_write(file);
                }
                self.unhold(file);
                if let Ok(path) = self.path_of(*ino) {
                    self.content_changed(&path);
                }
                Ok(data.len() as u32)
            }
            Handle::Dir(_) => Err(VfsError::IsDir),
            _ => Err(VfsError::BadHandle),
        }
    }

    /// close() (FUSE flush; may come several times per open): a handle that can write commits the
    /// file's content and returns the outcome, so close() reports upload errors.
    pub async fn flush(&self, fh: u64) -> VfsResult<()> {
        let mode = self.close_mode();
        self.sync_handle(fh, mode, quick_close(mode)).await
    }

    /// Whether a close of `fh` has nothing to do (not a write handle), so a frontend can answer it
    /// at once.
    pub fn flush_is_noop(&self, fh: u64) -> bool {
        let handles = self.handles.lock();
        !matches!(
            handles.get(&fh).map(|h| h.as_ref()),
            Some(Handle::Local { write: true, .. })
        )
    }

    /// fsync(): the file durable in the journal and its content uploaded (`--close upload` and
    /// `stage`: no commit is spent), or committed (`--close commit`).
    pub async fn fsync(&self, fh: u64) -> VfsResult<()> {
        let mode = match self.close_mode() {
            CloseMode::Commit => CloseMode::Commit,
            CloseMode::Upload | CloseMode::Stage => CloseMode::Upload,
            CloseMode::Keep => CloseMode::Keep,
        };
        self.sync_handle(fh, mode, false).await?;
        if self.is_overlay() {
            self.sync_layer();
        }
        Ok(self.sync_records()?)
    }

    /// NFS COMMIT (and stable WRITEs) through a write handle: what fsync does before the network,
    /// without the Hub commit, which follows when the handle lets go. The fsync runs off the
    /// async threads.
    pub async fn seal_handle(&self, fh: u64) -> VfsResult<()> {
        let h = self.handles.lock().get(&fh).cloned();
        match h.as_deref() {
            Some(Handle::Local { file, write: true, .. }) => seal_staged(file.clone()).await,
            Some(_) => Ok(()),
            None => Err(VfsError::BadHandle),
        }
    }

    /// `seal_handle` by inode, for a COMMIT that arrives after the write handle was let go (it
    /// names a file, not a handle): the staged file at the inode's path, if it has unsaved content.
    /// Only the overlay can hold one, so the commit's tree (and the Hub) is not asked.
    pub async fn seal_ino(&self, ino: Ino) -> VfsResult<()> {
        let Some(w) = &self.writer else {
            return Ok(());
        };
        let path = self.path_of(ino)?;
        let staged = match w.overlay.lock().get(&path) {
            Some(Entry::File(d)) => Some(d.clone()),
            _ => None,
        };
        match staged {
            Some(d) => seal_staged(d).await,
            None => Ok(()),
        }
    }

    /// Makes a written file durable and journaled as final (before the network is touched), then
    /// commits it and waits (`Commit`), uploads its content (`Upload`), or leaves both to the next
    /// group commit (`Stage`). With `quick`, a small file is journaled as final at once and made
    /// durable in the background (a close; see `write::staging`).
    async fn sync_handle(&self, fh: u64, mode: CloseMode, quick: bool) -> VfsResult<()> {
        let h = self.handles.lock().get(&fh).cloned();
        let Some(h) = h else { return Ok(()) };
        if let Handle::Local { write: true, .. } = h.as_ref() {
            // The file's times go to the metadata log (written, not fsynced: fsync does that).
            self.flush_records();
        }
        if let Handle::Local { file, write: true, .. } = h.as_ref()
            && file.is_dirty()
        {
            match self.writer.as_ref() {
                Some(w) if quick && file.close_quick()? => w.staging.seal_later(file),
                _ => file.seal()?,
            }
            match mode {
                CloseMode::Commit => return self.commit_file(file).await,
                CloseMode::Upload => {
                    let r = self.upload_ahead(file).await;
                    self.kick();
                    return r;
                }
                CloseMode::Stage => {
                    self.upload_in_background(file);
                    self.kick();
                }
                // Durable like a writable mount's close: the data and its journal entry (a
                // crash before the layer's journal line puts the file back at its own path).
                CloseMode::Keep => {}
            }
        }
        Ok(())
    }

    /// chmod, chown, truncate and utimens. Modes, owners and times are kept by the mount
    /// (`attrs`); a size change stages the file. Permission checks are the caller's (the kernel's
    /// `default_permissions` for FUSE, the NFS adapter's own).
    pub async fn setattr(&self, ino: Ino, req: SetAttr) -> VfsResult<Attr> {
        let path = match self.path_of(ino) {
            Ok(p) => p,
            Err(e) => return self.setattr_unlinked(ino, &req).unwrap_or(Err(e)),
        };
        let commit = self.commit().await?;
        let found = self.find(&commit, &path).await?.ok_or(VfsError::NotFound)?;
        if self.writer.is_none() {
            return Err(VfsError::ReadOnly);
        }
        let current = self.attr_at(ino, Some(&path), &found);
        if self.strict()
            && (req.mode.is_some_and(|m| (m & 0o7777) as u16 != current.perm)
                || req.uid.is_some_and(|u| u != current.uid)
                || req.gid.is_some_and(|g| g != current.gid))
        {
            return Err(VfsError::NotPermitted(
                "--posix strict: the Hub stores no modes or owners",
            ));
        }
        let mut found = found;
        if let Some(size) = req.size {
            match found {
                Found::Dir => return Err(VfsError::IsDir),
                Found::Special => return Err(VfsError::Invalid("not a regular file")),
                _ => {}
            }
            let through_handle = req
                .fh
                .and_then(|fh| match self.handles.lock().get(&fh).map(|h| h.as_ref()) {
                    Some(Handle::Local { file, write: true, .. }) => Some(file.clone()),
                    _ => None,
                });
            let file = match through_handle {
                Some(f) => {
                    if f.size() != size {
                        f.truncate(size)?;
                        self.unhold(&f);
                    }
                    f
                }
                None => {
                    // truncate(2) on a path: a writer for the length of the change, so that a
                    // round that just committed the staged copy cannot drop it from the overlay
                    // between its staging and the truncate (`writer_opened` puts back one dropped
                    // before). No close follows: the last writer going seals it for the committer.
                    let file = self.stage(&commit, &path, size == 0).await?;
                    file.add_writer()?;
                    self.writer_opened(&path, &file);
                    let r = if file.size() != size {
                        let r = file.truncate(size);
                        self.unhold(&file);
                        r
                    } else {
                        Ok(())
                    };
                    self.writer_closed(&file);
                    r?;
                    file
                }
            };
            found = Found::Local(file);
        }
        if req.mode.is_none() && req.uid.is_none() && req.gid.is_none() && req.atime.is_none() && req.mtime.is_none() {
            if req.size.is_some() {
                // truncate(2) and ftruncate(2) move mtime and ctime even when the size stays.
                let now = Stamp::now();
                self.update_record(&path, &found, |m| {
                    m.mtime = now;
                    m.ctime = now;
                });
            }
            return Ok(self.attr_at(ino, Some(&path), &found));
        }
        let now = Stamp::now();
        let sized = req.size.is_some();
        self.update_record(&path, &found, |m| {
            if let Some(mode) = req.mode {
                m.mode = mode & 0o7777;
            }
            if let Some(uid) = req.uid {
                m.uid = uid;
            }
            if let Some(gid) = req.gid {
                m.gid = gid;
            }
            if let Some(t) = req.atime {
                m.atime = t.stamp(now);
            }
            if sized {
                m.mtime = now;
            }
            if let Some(t) = req.mtime {
                m.mtime = t.stamp(now);
            }
            m.ctime = now;
        });
        if let (Some(t), Found::Local(d)) = (req.mtime, &found) {
            d.set_mtime(SystemTime::from(t.stamp(now)));
        }
        if let (Some(_), Found::Remote(m), Some(w)) = (req.mtime, &found, &self.writer)
            && self.repo.is_bucket()
        {
            // A bucket keeps each file's mtime: a committed file whose mtime changed (`touch -d`,
            // `rsync -a` setting times) is added again, same content, with the new time.
            let mut overlay = w.overlay.lock();
            if overlay.get(&path).is_none() {
                overlay.set(&path, crate::write::overlay::Entry::Moved(m.clone()));
            }
            drop(overlay);
            self.kick();
        }
        if req.mode.is_some() || req.uid.is_some() || req.gid.is_some() {
            // `hubfs status` counts modes and owners the Hub never sees.
            self.kick();
        }
        Ok(self.attr_at(ino, Some(&path), &found))
    }

    /// ftruncate/fchmod/futimens of a file unlinked (or renamed over) while open: it has no path
    /// any more, but its handle still names it (`None`: no such handle). Its mode and owner are
    /// gone with its name: accepted, not kept.
    fn setattr_unlinked(&self, ino: Ino, req: &SetAttr) -> Option<VfsResult<Attr>> {
        let file = req
            .fh
            .and_then(|fh| match self.handles.lock().get(&fh).map(|h| h.as_ref()) {
                Some(Handle::Local {
                    ino: i,
                    file,
                    write: true,
                }) if *i == ino => Some(file.clone()),
                _ => None,
            })?;
        if let Some(size) = req.size
            && let Err(e) = file.truncate(size)
        {
            return Some(Err(e.into()));
        }
        if let Some(t) = req.mtime {
            file.set_mtime(SystemTime::from(t.stamp(Stamp::now())));
        }
        Some(Ok(Attr {
            nlink: 0,
            ..self.attr_at(ino, None, &Found::Local(file))
        }))
    }

    /// mkdir with the mount's default mode and owner.
    pub async fn mkdir(&self, parent: Ino, name: &str) -> VfsResult<Attr> {
        self.mkdir_as(parent, name, NewNode::default()).await
    }

    /// mkdir; the directory gets `node`'s mode and owner.
    pub async fn mkdir_as(&self, parent: Ino, name: &str, node: NewNode) -> VfsResult<Attr> {
        self.writable()?;
        check_name(name)?;
        let commit = self.commit().await?;
        let parent_path = self.path_of(parent)?;
        self.expect_dir(&commit, &parent_path).await?;
        let path = join(&parent_path, name);
        if self.find(&commit, &path).await?.is_some() {
            return Err(VfsError::Exists);
        }
        self.settle_whiteout(commit, &path).await?;
        check_repo_path(&self.remote_path(&path))?;
        if let Some(w) = &self.writer {
            w.overlay.lock().set(&path, Entry::Dir);
        }
        self.drop_records(&path);
        self.new_record(&path, true, node, None);
        self.dir_changed(&parent_path);
        let ino = self.ino_at(&path, 1);
        Ok(self.attr_at(ino, Some(&path), &Found::Dir))
    }

    pub async fn unlink(&self, parent: Ino, name: &str) -> VfsResult<()> {
        self.writable()?;
        let commit = self.commit().await?;
        let parent_path = self.path_of(parent)?;
        let path = join(&parent_path, name);
        let found = match self.find(&commit, &path).await? {
            None => return Err(VfsError::NotFound),
            Some(Found::Dir) => return Err(VfsError::IsDir),
            Some(f) => f,
        };
        if let Found::Local(d) = &found {
            self.let_go(&path, d)?;
        }
        let others = self.other_names(&path);
        self.hide(&commit, &path).await?;
        self.drop_records(&path);
        self.names_left(&others, &found);
        self.dir_changed(&parent_path);
        self.kick();
        self.inodes.detach(&path);
        Ok(())
    }

    pub async fn rmdir(&self, parent: Ino, name: &str) -> VfsResult<()> {
        self.writable()?;
        if name == "." {
            return Err(VfsError::Invalid("cannot remove ."));
        }
        if name == ".." {
            return Err(VfsError::NotEmpty);
        }
        let commit = self.commit().await?;
        let parent_path = self.path_of(parent)?;
        let path = join(&parent_path, name);
        match self.find(&commit, &path).await? {
            None => return Err(VfsError::NotFound),
            Some(Found::Dir) => {}
            Some(_) => return Err(VfsError::NotDir),
        }
        if !self.merged_listing(&commit, &path).await?.is_empty() {
            return Err(VfsError::NotEmpty);
        }
        self.hide(&commit, &path).await?;
        self.drop_records(&path);
        self.dir_changed(&parent_path);
        self.inodes.detach(&path);
        Ok(())
    }
}

/// Seals a staged file with unsaved content (a blocking fsync, off the async threads).
/// Whether closes in `mode` may leave a small file's fsyncs to the background: those whose files
/// go to the Hub within seconds. An overlay's layer is the only copy until it is published, and a
/// `--close commit` close waits for the Hub anyway.
pub(crate) fn quick_close(mode: CloseMode) -> bool {
    matches!(mode, CloseMode::Upload | CloseMode::Stage)
}

async fn seal_staged(file: Arc<DirtyFile>) -> VfsResult<()> {
    if !file.is_dirty() {
        return Ok(());
    }
    tokio::task::spawn_blocking(move || file.seal())
        .await
        .map_err(|e| VfsError::Io(e.to_string()))??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("ok.txt").is_ok());
        assert!(matches!(check_name(&"a".repeat(256)), Err(VfsError::NameTooLong)));
        assert!(check_name(&"a".repeat(255)).is_ok());
        assert!(check_name(".").is_err());
        assert!(check_name("a\nb").is_err());
        assert!(check_name("é #?%.txt").is_ok());
        assert!(check_repo_path(".git").is_err());
        assert!(check_repo_path(".git/config").is_err());
        assert!(check_repo_path("data/.git").is_ok());
        assert!(check_repo_path(".github/workflows").is_ok());
    }
}
