//! The committer of a writable mount: group commits of staged files and namespace changes.
//!
//! One task runs commit rounds. A round takes every change that is ready (closed dirty files, files
//! someone is waiting on, moves and deletions), uploads what needs uploading, and sends one commit
//! with `parentCommit` set to the commit the mount shows. Closes that arrive while a round is in
//! flight wait for the next one, so a `cp -r` of many files makes a handful of commits.
//!
//! A 412 (the branch moved) is re-based: if no touched path changed on the Hub since our parent,
//! the commit is retried on the new head; if every touched path already holds our content, our
//! own earlier attempt landed; otherwise the conflicting files fail with an error and stay staged
//! (held) until they are written again. Other failures are retried in the background with backoff,
//! and the callers waiting in close()/fsync() get the error at once.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha1::Digest as _;
use tokio::sync::{Notify, oneshot};

use super::error::{VfsError, VfsResult};
use super::read::ReadState;
use super::{Node, VirtualFs};
use crate::hub_client::{CommitOp, CommitRequest, HubClient, HubClientError, RepoRef, TreeEntry};
use crate::write::overlay::{Entry, Overlay};
use crate::write::staging::{DirtyFile, Phase, StagingArea};
use crate::write::upload::{Staged, Uploader};

/// Settings of a writable mount.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Root of staging directories (one per repo and branch below it).
    pub staging_root: PathBuf,
    /// Commit title; `{summary}` is replaced by what the commit does, `{count}` by its size.
    pub commit_message: String,
    /// Base deadline of one upload session (plus time for the bytes at a slow rate).
    pub upload_timeout: Duration,
    /// A background commit starts once no new close (or namespace change) arrived for this long…
    pub quiet_period: Duration,
    /// …or once the oldest pending change has waited this long, whichever comes first.
    pub max_batch_delay: Duration,
    /// Where this mount writes its status file for `hubfs status` (`None`: no file).
    pub status_dir: Option<PathBuf>,
    /// close() waits for the commit (true), or returns once the content is durable in the local
    /// journal and leaves the commit to the next group round (false: bulk copies, few commits).
    pub close_waits: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            staging_root: super::default_cache_dir().join("staging"),
            commit_message: "hubfs: {summary}".into(),
            upload_timeout: Duration::from_secs(120),
            quiet_period: Duration::from_millis(500),
            max_batch_delay: Duration::from_secs(5),
            status_dir: None,
            close_waits: true,
        }
    }
}

type Reply = Result<(), Arc<VfsError>>;

/// Someone in close()/fsync() waiting for a file (or, with `file: None`, for the next round).
struct Waiter {
    file: Option<Arc<DirtyFile>>,
    generation: u64,
    tx: oneshot::Sender<Reply>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Counters {
    pub commits: u64,
    pub files_committed: u64,
    pub failed_rounds: u64,
}

/// What `hubfs status` shows for a mount.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    pub pid: u32,
    pub repo: String,
    pub branch: String,
    pub mountpoint: Option<String>,
    pub last_commit: Option<String>,
    pub last_error: Option<String>,
    pub counters: Counters,
    pub bytes_uploaded: u64,
    /// Files written but not yet committed: (repo path, size, open for writing, error).
    pub dirty: Vec<DirtyReport>,
    /// Deletions and moves waiting for a commit.
    pub pending_namespace_changes: usize,
    pub staging_dir: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirtyReport {
    pub path: String,
    pub size: u64,
    pub open: bool,
    pub error: Option<String>,
}

/// Lock order: `overlay` → (DirtyFile state, a leaf); `waiters` and `status` are leaves and never
/// held together with the overlay.
pub(crate) struct Writer {
    pub staging: StagingArea,
    pub overlay: Mutex<Overlay>,
    pub uploader: Uploader,
    pub branch: String,
    opts: WriteOptions,
    kick: Arc<Notify>,
    waiters: Mutex<Vec<Waiter>>,
    last_commit: Mutex<Option<String>>,
    last_error: Mutex<Option<String>>,
    counters: Mutex<Counters>,
    /// Files whose commit conflicted with a change on the Hub: kept staged until written again.
    held: Mutex<HashSet<u64>>,
    pub mountpoint: Mutex<Option<PathBuf>>,
    repo_id: String,
}

/// `kind/ns/name/branch`, each part made safe as one directory name.
fn staging_dir(root: &Path, repo: &RepoRef, branch: &str) -> PathBuf {
    let safe = |s: &str| crate::urlenc::encode_segment(s);
    root.join(repo.kind.plural())
        .join(safe(&repo.namespace))
        .join(safe(&repo.name))
        .join(safe(branch))
}

impl Writer {
    pub fn open(
        client: &HubClient,
        repo: &RepoRef,
        revision: &str,
        subfolder: Option<&str>,
        opts: &WriteOptions,
    ) -> VfsResult<Writer> {
        if super::is_commit_id(revision) {
            return Err(VfsError::Invalid(
                "a writable mount needs a branch (a commit id cannot move): mount @main or another branch",
            ));
        }
        let dir = staging_dir(&opts.staging_root, repo, revision);
        let staging = StagingArea::open(&dir).map_err(|e| {
            VfsError::Cache(format!(
                "cannot use staging dir {}: {e} (pass --cache-dir DIR on a writable disk)",
                dir.display()
            ))
        })?;
        let uploader = Uploader::new(client.clone(), repo.clone(), revision.to_string(), opts.upload_timeout)
            .map_err(|e| VfsError::Xet(e.to_string()))?;
        let w = Writer {
            overlay: Mutex::new(Overlay::default()),
            uploader,
            branch: revision.to_string(),
            opts: opts.clone(),
            kick: Arc::new(Notify::new()),
            waiters: Mutex::new(Vec::new()),
            last_commit: Mutex::new(None),
            last_error: Mutex::new(None),
            counters: Mutex::new(Counters::default()),
            held: Mutex::new(HashSet::new()),
            mountpoint: Mutex::new(None),
            repo_id: repo.to_string(),
            staging,
        };
        w.recover(subfolder.unwrap_or("").trim_matches('/'))?;
        Ok(w)
    }

    /// Staged files of an earlier run: closed ones go back into the overlay (the committer uploads
    /// them); ones that were still open are moved to `recovered/` and left for a person to check.
    fn recover(&self, subfolder: &str) -> VfsResult<()> {
        let found = self.staging.recover()?;
        let mut overlay = self.overlay.lock();
        for r in found {
            let repo_path = r.file.repo_path();
            let rel = if subfolder.is_empty() {
                Some(repo_path.as_str())
            } else {
                repo_path.strip_prefix(subfolder).and_then(|p| p.strip_prefix('/'))
            };
            match (r.phase, rel) {
                (Phase::Closed, Some(rel)) => {
                    tracing::info!(path = %repo_path, size = r.file.size(), "recovered a closed file; it will be committed");
                    overlay.set(rel, Entry::File(Arc::new(r.file)));
                }
                (Phase::Closed, None) => {
                    tracing::warn!(path = %repo_path, "staged file outside the mounted folder left for a mount of its folder");
                    std::mem::forget(r.file);
                }
                (Phase::Open, _) => {
                    let dest = self.staging.dir().join("recovered").join(&repo_path);
                    if let Some(parent) = dest.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::rename(r.file.data_path(), &dest)?;
                    r.file.discard();
                    tracing::warn!(
                        path = %repo_path,
                        saved = %dest.display(),
                        "a file was still open when hubfs stopped; its bytes are saved, not uploaded"
                    );
                }
            }
        }
        Ok(())
    }

    /// Whether a background round has something to do.
    fn has_ready_work(&self) -> bool {
        let held = self.held.lock().clone();
        self.overlay.lock().all().iter().any(|(_, e)| match e {
            Entry::File(d) => d.is_dirty() && d.writers() == 0 && !held.contains(&d.id()),
            Entry::Moved(_) | Entry::Gone => true,
            Entry::Dir => false,
        })
    }

    fn summary(&self, ops: &[CommitOp]) -> (String, String) {
        let mut added = Vec::new();
        let mut deleted = Vec::new();
        for op in ops {
            match op {
                CommitOp::DeleteFile { path } => deleted.push(path.as_str()),
                other => added.push(other.path()),
            }
        }
        let mut parts = Vec::new();
        let list = |v: &[&str]| match v.len() {
            1..=3 => v.join(", "),
            n => format!("{}, {} and {} more", v[0], v[1], n - 2),
        };
        if !added.is_empty() {
            parts.push(format!("update {}", list(&added)));
        }
        if !deleted.is_empty() {
            parts.push(format!("delete {}", list(&deleted)));
        }
        let summary = parts.join("; ");
        let title = self
            .opts
            .commit_message
            .replace("{summary}", &summary)
            .replace("{count}", &ops.len().to_string());
        let mut description = String::new();
        for p in &added {
            description.push_str(&format!("add {p}\n"));
        }
        for p in &deleted {
            description.push_str(&format!("delete {p}\n"));
        }
        (title, description)
    }
}

/// What a round found to commit.
#[derive(Default)]
struct Batch {
    uploads: Vec<(String, Arc<DirtyFile>)>,
    moves: Vec<(String, super::remote::FileMeta)>,
    gones: Vec<String>,
}

/// A commit failure as the errno a caller of close() can act on.
fn commit_error(e: &VfsError) -> VfsError {
    let errno = match e {
        VfsError::Remote(HubClientError::Unauthorized { .. } | HubClientError::Forbidden { .. }) => libc::EACCES,
        VfsError::Remote(HubClientError::BadInput { ctx }) if ctx.status == Some(413) => libc::ENOSPC,
        VfsError::NoSpace(_) => libc::ENOSPC,
        _ => libc::EIO,
    };
    VfsError::Commit {
        msg: e.to_string(),
        errno,
    }
}

fn git_blob_oid(content: &[u8]) -> String {
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", content.len()).as_bytes());
    h.update(content);
    hex::encode(h.finalize())
}

/// Whether `entry` (a path at the branch head) already holds what `op` would put there.
fn op_landed(op: &CommitOp, entry: Option<&TreeEntry>) -> bool {
    match (op, entry) {
        (CommitOp::DeleteFile { .. }, None) => true,
        (CommitOp::Lfs { sha256, .. }, Some(TreeEntry::File { lfs_sha256, .. })) => {
            lfs_sha256.as_deref() == Some(sha256.as_str())
        }
        (CommitOp::Inline { content, .. }, Some(TreeEntry::File { oid, .. })) => *oid == git_blob_oid(content),
        _ => false,
    }
}

impl VirtualFs {
    /// Starts the committer of a writable mount (no-op on a read-only one). It holds the core
    /// weakly: dropping the last frontend's reference stops it.
    pub fn start_committer(self: &Arc<Self>, rt: &tokio::runtime::Handle) {
        let Some(w) = &self.writer else { return };
        let kick = w.kick.clone();
        let weak = Arc::downgrade(self);
        rt.spawn(committer_loop(weak, kick));
        self.write_status();
    }

    /// Records where the mount is, for `hubfs status`.
    pub fn set_mountpoint(&self, dir: &Path) {
        if let Some(w) = &self.writer {
            *w.mountpoint.lock() = Some(dir.to_path_buf());
            self.write_status();
        }
    }

    /// Asks for `file`'s current content to be committed and waits for the answer.
    pub(crate) async fn commit_file(&self, file: &Arc<DirtyFile>) -> VfsResult<()> {
        let Some(w) = &self.writer else {
            return Err(VfsError::ReadOnly);
        };
        if !file.is_dirty() {
            return Ok(());
        }
        if let Some(e) = file.error()
            && w.held.lock().contains(&file.id())
        {
            return Err(VfsError::Commit {
                msg: e,
                errno: libc::EIO,
            });
        }
        let (tx, rx) = oneshot::channel();
        w.waiters.lock().push(Waiter {
            file: Some(file.clone()),
            generation: file.generation(),
            tx,
        });
        w.kick.notify_one();
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(VfsError::Shared(e)),
            Err(_) => Err(VfsError::Io("the committer stopped".into())),
        }
    }

    /// Commits everything that is ready now and waits for that round (unmount, `sync`).
    pub async fn sync_all(&self) -> VfsResult<()> {
        let Some(w) = &self.writer else { return Ok(()) };
        let (tx, rx) = oneshot::channel();
        w.waiters.lock().push(Waiter {
            file: None,
            generation: 0,
            tx,
        });
        w.kick.notify_one();
        match rx.await {
            Ok(r) => r.map_err(VfsError::Shared),
            Err(_) => Err(VfsError::Io("the committer stopped".into())),
        }
    }

    /// Commits what is pending, for at most `limit` (unmount, SIGTERM). Whatever is left stays
    /// staged for the next mount. Returns the number of files still dirty.
    pub async fn drain(&self, limit: Duration) -> usize {
        let Some(w) = &self.writer else { return 0 };
        let deadline = Instant::now() + limit;
        while w.has_ready_work() && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.sync_all()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "commit during shutdown failed; data stays staged");
                    break;
                }
                Err(_) => break,
            }
        }
        let left = self.status().dirty.len();
        if left > 0 {
            tracing::warn!(files = left, dir = %w.staging.dir().display(), "files left staged for the next mount");
        }
        left
    }

    /// The state of a writable mount (`None` when read-only).
    pub fn status_report(&self) -> Option<StatusReport> {
        self.writer.as_ref().map(|_| self.status())
    }

    fn status(&self) -> StatusReport {
        let Some(w) = &self.writer else {
            unreachable!("status of a read-only mount is never asked: status_report checks")
        };
        let mut dirty = Vec::new();
        let mut ns = 0;
        for (_, e) in w.overlay.lock().all() {
            match e {
                Entry::File(d) if d.is_dirty() => dirty.push(DirtyReport {
                    path: d.repo_path(),
                    size: d.size(),
                    open: d.writers() > 0,
                    error: d.error(),
                }),
                Entry::Moved(_) | Entry::Gone => ns += 1,
                _ => {}
            }
        }
        dirty.sort_by(|a, b| a.path.cmp(&b.path));
        StatusReport {
            pid: std::process::id(),
            repo: w.repo_id.clone(),
            branch: w.branch.clone(),
            mountpoint: w.mountpoint.lock().as_ref().map(|p| p.display().to_string()),
            last_commit: w.last_commit.lock().clone(),
            last_error: w.last_error.lock().clone(),
            counters: w.counters.lock().clone(),
            bytes_uploaded: w
                .uploader
                .stats
                .bytes_uploaded
                .load(std::sync::atomic::Ordering::Relaxed),
            dirty,
            pending_namespace_changes: ns,
            staging_dir: w.staging.dir().display().to_string(),
        }
    }

    /// Writes the status file (atomically) where `hubfs status` looks for it.
    fn write_status(&self) {
        let Some(w) = &self.writer else { return };
        let Some(dir) = &w.opts.status_dir else { return };
        let report = self.status();
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            let path = dir.join(format!("{}.json", report.pid));
            let tmp = dir.join(format!(".{}.json.tmp", report.pid));
            std::fs::write(&tmp, serde_json::to_vec_pretty(&report).map_err(std::io::Error::other)?)?;
            std::fs::rename(tmp, path)
        };
        if let Err(e) = write() {
            tracing::debug!(error = %e, "could not write the status file");
        }
    }

    /// Removes this mount's status file (unmount).
    pub fn remove_status(&self) {
        if let Some(w) = &self.writer
            && let Some(dir) = &w.opts.status_dir
        {
            let _ = std::fs::remove_file(dir.join(format!("{}.json", std::process::id())));
        }
    }

    /// A held (conflicting) file was written again: its new content may be committed.
    pub(crate) fn unhold(&self, file: &DirtyFile) {
        if let Some(w) = &self.writer
            && w.held.lock().remove(&file.id())
        {
            file.set_error(None);
        }
    }

    /// Whether close() waits for the commit.
    pub(crate) fn close_waits(&self) -> bool {
        self.writer.as_ref().is_some_and(|w| w.opts.close_waits)
    }

    /// A write handle closed: commit in the background whatever its flush did not.
    pub(crate) fn writer_closed(&self, file: &Arc<DirtyFile>) {
        if let Err(e) = file.remove_writer() {
            tracing::error!(path = %file.repo_path(), error = %e, "could not journal a closed file");
        }
        let Some(w) = &self.writer else { return };
        if file.is_dirty() {
            w.kick.notify_one();
            return;
        }
        // Clean and closed: the mount's commit has this content, so the overlay entry (and, once
        // the last handle goes, the staged copy and its journal entry) can go. The writer count is
        // read under the overlay lock: see `writer_opened`.
        if let Some(path) = self.mount_path(&file.repo_path()) {
            let mut o = w.overlay.lock();
            if file.writers() == 0 && matches!(o.get(&path), Some(Entry::File(d)) if Arc::ptr_eq(d, file)) {
                o.remove(&path);
            }
        }
    }

    /// After a writer was added to `file`, found at `path`: the release of an earlier handle may
    /// have dropped the clean file from the overlay in between (the kernel sends RELEASE after
    /// close(2) returns, so it can arrive after the next open). Put it back, else its new content
    /// would never be committed and close() would wait forever.
    pub(crate) fn writer_opened(&self, path: &str, file: &Arc<DirtyFile>) {
        let Some(w) = &self.writer else { return };
        let mut o = w.overlay.lock();
        if o.get(path).is_none() && !file.is_discarded() {
            o.set(path, Entry::File(file.clone()));
        }
    }

    /// The mount-relative path of a repo path (`None` outside a subfolder mount's folder).
    fn mount_path(&self, repo_path: &str) -> Option<String> {
        if self.subfolder.is_empty() {
            return Some(repo_path.to_string());
        }
        repo_path
            .strip_prefix(&self.subfolder)
            .and_then(|p| p.strip_prefix('/'))
            .map(str::to_string)
    }

    /// Wakes the committer for a background round (namespace change, truncate).
    pub(crate) fn kick(&self) {
        if let Some(w) = &self.writer {
            w.kick.notify_one();
        }
    }

    /// One commit round. Answers every waiter it took.
    async fn round(&self) -> RoundOutcome {
        let Some(w) = &self.writer else {
            return RoundOutcome::Idle;
        };
        let waiters: Vec<Waiter> = std::mem::take(&mut *w.waiters.lock());
        let result = self.commit_ready(w, &waiters).await;
        let outcome = match &result {
            Ok(true) => RoundOutcome::Committed,
            Ok(false) => RoundOutcome::Idle,
            Err(_) => RoundOutcome::Failed,
        };
        let shared: Result<(), Arc<VfsError>> = result.map(|_| ()).map_err(Arc::new);
        let mut again = Vec::new();
        for wt in waiters {
            let reply = match &wt.file {
                None => shared.clone(),
                Some(f) if f.committed_generation() >= wt.generation || f.is_discarded() => Ok(()),
                Some(f) if w.held.lock().contains(&f.id()) => Err(Arc::new(VfsError::Commit {
                    msg: f.error().unwrap_or_else(|| "conflict with a change on the Hub".into()),
                    errno: libc::EIO,
                })),
                Some(_) if shared.is_err() => shared.clone(),
                // Not in this round (written again meanwhile): wait for the next one.
                Some(_) => {
                    again.push(wt);
                    continue;
                }
            };
            let _ = wt.tx.send(reply);
        }
        if !again.is_empty() {
            w.waiters.lock().extend(again);
            w.kick.notify_one();
        }
        self.write_status();
        outcome
    }

    /// Gathers, uploads and commits what is ready. `Ok(false)`: nothing to do.
    async fn commit_ready(&self, w: &Writer, waiters: &[Waiter]) -> VfsResult<bool> {
        let requested: HashSet<u64> = waiters
            .iter()
            .filter_map(|wt| wt.file.as_ref().map(|f| f.id()))
            .collect();
        let flush_all = waiters.iter().any(|wt| wt.file.is_none());
        let held = w.held.lock().clone();
        let mut batch = Batch::default();
        for (path, e) in w.overlay.lock().all() {
            match e {
                Entry::File(d)
                    if d.is_dirty()
                        && !held.contains(&d.id())
                        && (d.writers() == 0 || requested.contains(&d.id()) || flush_all) =>
                {
                    batch.uploads.push((path, d))
                }
                Entry::Moved(m) => batch.moves.push((path, m)),
                Entry::Gone => batch.gones.push(path),
                _ => {}
            }
        }
        if batch.uploads.is_empty() && batch.moves.is_empty() && batch.gones.is_empty() {
            return Ok(false);
        }
        let base = self.commit().await?;
        let (ops, staged) = match self.build_ops(w, &base, &batch).await {
            Ok(x) => x,
            Err(e) => {
                self.fail(w, &batch, &e);
                return Err(commit_error(&e));
            }
        };
        if ops.is_empty() {
            self.settle(w, &batch, &staged, &base).await;
            return Ok(false);
        }
        match self.send_commit(w, &base, ops, &staged).await {
            Ok(new_commit) => {
                {
                    let mut rev = self.revision.lock().await;
                    rev.commit = new_commit.clone();
                    rev.checked = Instant::now();
                }
                self.settle(w, &batch, &staged, &new_commit).await;
                *w.last_commit.lock() = Some(new_commit);
                *w.last_error.lock() = None;
                let mut c = w.counters.lock();
                c.commits += 1;
                c.files_committed += staged.len() as u64;
                Ok(true)
            }
            Err(e) => {
                self.fail(w, &batch, &e);
                Err(commit_error(&e))
            }
        }
    }

    fn fail(&self, w: &Writer, batch: &Batch, e: &VfsError) {
        tracing::warn!(error = %e, files = batch.uploads.len(), "commit failed; data stays staged");
        let held = w.held.lock().clone();
        for (_, d) in &batch.uploads {
            // A conflict's own message says more than the round's.
            if !held.contains(&d.id()) {
                d.set_error(Some(e.to_string()));
            }
        }
        *w.last_error.lock() = Some(e.to_string());
        w.counters.lock().failed_rounds += 1;
    }

    /// Commit operations for a batch, uploading content as needed. Returns the ops and the
    /// generation of each staged file they carry.
    async fn build_ops(
        &self,
        w: &Writer,
        base: &str,
        batch: &Batch,
    ) -> VfsResult<(Vec<CommitOp>, Vec<(Staged, String)>)> {
        let mut staged = Vec::with_capacity(batch.uploads.len());
        for (path, d) in &batch.uploads {
            let file = d.clone();
            let snap = tokio::task::spawn_blocking(move || file.snapshot())
                .await
                .map_err(|e| VfsError::Io(e.to_string()))??;
            staged.push((
                Staged {
                    repo_path: self.remote_path(path),
                    file: d.clone(),
                    snap,
                },
                path.clone(),
            ));
        }
        let files: Vec<Staged> = staged
            .iter()
            .map(|(s, _)| Staged {
                repo_path: s.repo_path.clone(),
                file: s.file.clone(),
                snap: s.snap.clone(),
            })
            .collect();
        let mut ops = w.uploader.prepare(&files).await.map_err(|e| match e {
            crate::write::upload::UploadError::Hub(h) => VfsError::Remote(h),
            other => VfsError::Upload(other.to_string()),
        })?;
        for (path, meta) in &batch.moves {
            let repo_path = self.remote_path(path);
            match &meta.sha256 {
                Some(sha) => ops.push(CommitOp::Lfs {
                    path: repo_path,
                    sha256: sha.clone(),
                    size: meta.size,
                }),
                None => {
                    let content = self
                        .reader
                        .read(meta, base, &Mutex::new(ReadState::default()), 0, meta.size as u32)
                        .await?;
                    ops.push(CommitOp::Inline {
                        path: repo_path,
                        content,
                    });
                }
            }
        }
        for path in &batch.gones {
            if let Some(Node::File(_)) = self.node_at(base, path).await? {
                ops.push(CommitOp::DeleteFile {
                    path: self.remote_path(path),
                });
            }
        }
        // The Hub applies operations in order: deletions first, so that a file may take the name
        // of a directory whose last file this commit deletes (and the other way round).
        ops.sort_by_key(|o| !matches!(o, CommitOp::DeleteFile { .. }));
        Ok((ops, staged))
    }

    /// Sends the commit, re-basing on a moved branch when the touched paths allow it.
    async fn send_commit(
        &self,
        w: &Writer,
        base: &str,
        mut ops: Vec<CommitOp>,
        staged: &[(Staged, String)],
    ) -> VfsResult<String> {
        let mut parent = base.to_string();
        for _ in 0..4 {
            let (summary, description) = w.summary(&ops);
            let req = CommitRequest {
                summary,
                description,
                parent: Some(parent.clone()),
                ops: ops.clone(),
            };
            match self.client.commit(&self.repo, &w.branch, &req).await {
                Ok(c) => return Ok(c),
                Err(HubClientError::Conflict { .. }) => {}
                Err(e) => return Err(VfsError::Remote(e)),
            }
            let head = self.client.repo_info(&self.repo, &w.branch).await?.sha;
            let touched: Vec<String> = ops.iter().map(|o| o.path().to_string()).collect();
            let at = |commit: String| {
                let touched = touched.clone();
                async move {
                    let found = self.client.paths_info(&self.repo, &commit, &touched).await?;
                    Ok::<HashMap<String, TreeEntry>, VfsError>(
                        found.into_iter().map(|e| (e.path().to_string(), e)).collect(),
                    )
                }
            };
            let before = at(parent.clone()).await?;
            let now = at(head.clone()).await?;
            if ops.iter().all(|o| op_landed(o, now.get(o.path()))) {
                tracing::info!(commit = %head, "our commit had landed before its answer was lost");
                return Ok(head);
            }
            let changed = |p: &str| before.get(p).map(TreeEntry::oid) != now.get(p).map(TreeEntry::oid);
            let (conflicting, rest): (Vec<CommitOp>, Vec<CommitOp>) = ops.into_iter().partition(|o| changed(o.path()));
            for op in &conflicting {
                if let Some((s, _)) = staged.iter().find(|(s, _)| s.repo_path == op.path()) {
                    let msg = format!(
                        "{} changed on the Hub since this mount read it; the local version stays staged in {}",
                        op.path(),
                        w.staging.dir().display()
                    );
                    tracing::warn!("{msg}");
                    s.file.set_error(Some(msg));
                    w.held.lock().insert(s.file.id());
                }
            }
            if rest.is_empty() {
                // Show the Hub's head from now on; the conflicting files keep their local
                // version in the overlay, and a new write of one of them commits it over the head.
                let mut rev = self.revision.lock().await;
                rev.commit = head;
                rev.checked = Instant::now();
                return Err(VfsError::Commit {
                    msg: "every change conflicts with a newer commit on the Hub".into(),
                    errno: libc::EIO,
                });
            }
            tracing::info!(from = %parent, to = %head, "branch moved; re-basing the commit");
            ops = rest;
            parent = head;
        }
        Err(VfsError::Commit {
            msg: "the branch kept moving; giving up for now".into(),
            errno: libc::EIO,
        })
    }

    /// After a commit (or a round with nothing to send): drops the overlay entries the commit made
    /// redundant, so the new commit's tree shows them.
    async fn settle(&self, w: &Writer, batch: &Batch, staged: &[(Staged, String)], commit: &str) {
        let held = w.held.lock().clone();
        let mut stale_gones = Vec::new();
        for path in &batch.gones {
            if self.node_at(commit, path).await.ok().flatten().is_none() {
                stale_gones.push(path.clone());
            }
        }
        let mut overlay = w.overlay.lock();
        for (s, path) in staged {
            if held.contains(&s.file.id()) {
                continue;
            }
            let clean = s.file.committed(s.snap.generation);
            let same = matches!(overlay.get(path), Some(Entry::File(d)) if Arc::ptr_eq(d, &s.file));
            if clean && s.file.writers() == 0 && same {
                overlay.remove(path);
            }
        }
        for (path, meta) in &batch.moves {
            if matches!(overlay.get(path), Some(Entry::Moved(m)) if m == meta) {
                overlay.remove(path);
            }
        }
        for path in stale_gones {
            if matches!(overlay.get(&path), Some(Entry::Gone)) {
                overlay.remove(&path);
            }
        }
    }

    /// Files that are dirty right now (tests, status).
    pub fn dirty_paths(&self) -> Vec<String> {
        self.status_report()
            .map(|r| r.dirty.into_iter().map(|d| d.path).collect())
            .unwrap_or_default()
    }

    /// Whether `path` (mount-relative) is only local so far.
    pub fn is_staged(&self, path: &str) -> bool {
        self.writer
            .as_ref()
            .is_some_and(|w| matches!(w.overlay.lock().get(path), Some(Entry::File(d)) if d.is_dirty()))
    }
}

enum RoundOutcome {
    Committed,
    Idle,
    Failed,
}

/// Runs rounds: at once when someone waits, after the quiet period for background work, with
/// backoff (1 s doubling to 60 s) after a failure.
async fn committer_loop(weak: Weak<VirtualFs>, kick: Arc<Notify>) {
    let mut backoff = Duration::from_secs(1);
    let mut failed = false;
    loop {
        let notified = kick.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (urgent, ready, quiet, max_delay) = {
            let Some(vfs) = weak.upgrade() else { return };
            let Some(w) = &vfs.writer else { return };
            (
                !w.waiters.lock().is_empty(),
                w.has_ready_work(),
                w.opts.quiet_period,
                w.opts.max_batch_delay,
            )
        };
        if !urgent {
            if !ready {
                notified.await;
                continue;
            }
            // Debounce: each new change pushes the round back by the quiet period, up to the
            // maximum delay, so a stream of closes (a `cp -r`) makes few, large commits. After a
            // failure the backoff applies instead. A waiter arriving meanwhile starts it at once.
            let start = tokio::time::Instant::now();
            let latest = start + if failed { backoff } else { max_delay.max(quiet) };
            let mut deadline = start + if failed { backoff } else { quiet };
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = &mut notified => {
                        let urgent = match weak.upgrade() {
                            Some(v) => v.writer.as_ref().is_some_and(|w| !w.waiters.lock().is_empty()),
                            None => return,
                        };
                        if urgent { break; }
                        if !failed {
                            deadline = (tokio::time::Instant::now() + quiet).min(latest);
                        }
                        notified.set(kick.notified());
                        notified.as_mut().enable();
                    }
                }
            }
        }
        let Some(vfs) = weak.upgrade() else { return };
        match vfs.round().await {
            RoundOutcome::Failed => {
                if failed {
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                }
                failed = true;
            }
            RoundOutcome::Committed => {
                failed = false;
                backoff = Duration::from_secs(1);
            }
            RoundOutcome::Idle => {
                failed = false;
                // Nothing could be sent (e.g. only whiteouts of directories): wait for news.
                drop(vfs);
                notified.await;
            }
        }
    }
}
