//! One commit round: what it takes from the overlay, the operations it builds (uploading content),
//! the commit it sends (re-based on a moved branch, conflicts held), and the overlay entries it
//! settles once the commit landed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use sha1::Digest as _;

use super::{Waiter, Writer};
use crate::hub_client::{CommitOp, CommitRequest, HubClientError, TreeEntry};
use crate::vfs::error::{VfsError, VfsResult};
use crate::vfs::read::ReadState;
use crate::vfs::{Node, VirtualFs};
use crate::write::overlay::Entry;
use crate::write::staging::DirtyFile;
use crate::write::upload::Staged;

impl Writer {
    pub(super) fn summary(&self, ops: &[CommitOp]) -> (String, String) {
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
        let template = self
            .next_title
            .lock()
            .clone()
            .unwrap_or_else(|| self.opts.commit_message.clone());
        let title = template
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

/// What a round sends: a commit to a repo, or a batch to a bucket.
enum Ops {
    Repo(Vec<CommitOp>),
    Bucket(Vec<crate::hub_client::BucketOp>),
}

impl Ops {
    fn is_empty(&self) -> bool {
        match self {
            Ops::Repo(o) => o.is_empty(),
            Ops::Bucket(o) => o.is_empty(),
        }
    }
}

/// What a landed commit leaves to drop: the last references to its files.
pub(super) type Landed = (Batch, Vec<(Staged, String)>);

/// What a round found to commit.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) uploads: Vec<(String, Arc<DirtyFile>)>,
    pub(super) moves: Vec<(String, crate::vfs::remote::FileMeta)>,
    pub(super) gones: Vec<String>,
    /// Names of link groups whose staged copy is staged under another name (`aliases`).
    pub(super) aliases: Vec<(String, Arc<DirtyFile>)>,
}

/// Changes one commit carries without a commit budget; with one, everything ready up to
/// `budget::MAX_CHANGES` (`CommitBudget::changes_per_commit`). 2,000 small files: four commits.
pub const MAX_CHANGES_PER_COMMIT: usize = super::budget::BASE_CHANGES;

/// Files below this size may go inline in the commit body (the Hub stores larger ones through
/// LFS), so their bytes are held in memory while the commit is built and sent.
pub(super) const INLINE_CANDIDATE_MAX: u64 = 10 << 20;
/// The most bytes of such files one commit carries: a commit of 10,000 files of 50 KiB would
/// otherwise hold 500 MB. The rest waits for the next round.
pub const SMALL_BYTES_PER_COMMIT: u64 = 64 << 20;

impl Batch {
    /// Keeps at most `n` changes: deletions first (they make room: a file may take the name of a
    /// directory whose last file is deleted), then moves, then files. Each part is cut in path
    /// order, so a directory's files tend to travel together.
    fn limit(&mut self, n: usize) {
        self.gones.sort();
        self.gones.truncate(n);
        let left = n - self.gones.len();
        self.moves.sort_by(|a, b| a.0.cmp(&b.0));
        self.moves.truncate(left);
        let left = left - self.moves.len();
        self.uploads.sort_by(|a, b| a.0.cmp(&b.0));
        self.uploads.truncate(left);
        let mut small = 0u64;
        let keep = self
            .uploads
            .iter()
            .position(|(_, d)| {
                let size = d.size();
                if size < INLINE_CANDIDATE_MAX {
                    small += size;
                }
                small > SMALL_BYTES_PER_COMMIT
            })
            .unwrap_or(self.uploads.len())
            .max(1);
        self.uploads.truncate(keep);
    }
}

/// A commit failure as the errno a caller of close() can act on.
pub(super) fn commit_error(e: &VfsError) -> VfsError {
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

/// The staged files of a round, for the uploader (which takes them without their mount paths).
pub(super) fn staged_copies(staged: &[(Staged, String)]) -> Vec<Staged> {
    staged
        .iter()
        .map(|(s, _)| Staged {
            repo_path: s.repo_path.clone(),
            file: s.file.clone(),
            snap: s.snap.clone(),
        })
        .collect()
}

/// An uploader failure as the core's error.
pub(super) fn upload_error(e: crate::write::upload::UploadError) -> VfsError {
    match e {
        crate::write::upload::UploadError::Hub(h) => VfsError::Remote(h),
        other => VfsError::Upload(other.to_string()),
    }
}

/// What a branch that moved from `parent` to `head` did to a commit's paths.
pub(super) struct Moved {
    /// Every operation already holds at `head`: the commit landed before its answer was lost.
    pub(super) landed: bool,
    /// The paths whose Hub entry differs between the two commits, in the operations' order.
    pub(super) changed: Vec<String>,
}

/// Compares the paths `ops` touch at `parent` and at `head` (two paths-info calls): how a round
/// re-bases and how an overlay's publish finds its conflicts.
pub(super) async fn since_parent(
    client: &crate::hub_client::HubClient,
    repo: &crate::hub_client::RepoRef,
    ops: &[CommitOp],
    parent: &str,
    head: &str,
) -> VfsResult<Moved> {
    let touched: Vec<String> = ops.iter().map(|o| o.path().to_string()).collect();
    let at = |commit: &str| {
        let (touched, commit) = (touched.clone(), commit.to_string());
        async move {
            let found = client.paths_info(repo, &commit, &touched).await?;
            Ok::<HashMap<String, TreeEntry>, VfsError>(found.into_iter().map(|e| (e.path().to_string(), e)).collect())
        }
    };
    let (before, now) = (at(parent).await?, at(head).await?);
    Ok(Moved {
        landed: ops.iter().all(|o| op_landed(o, now.get(o.path()))),
        changed: touched
            .into_iter()
            .filter(|p| before.get(p).map(TreeEntry::oid) != now.get(p).map(TreeEntry::oid))
            .collect(),
    })
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

/// What a round did, for the committer loop (see `schedule`).
pub(super) enum RoundOutcome {
    Committed,
    Idle,
    Failed,
}

impl VirtualFs {
    /// One commit round. Answers every waiter it took.
    pub(super) async fn round(&self) -> RoundOutcome {
        let Some(w) = &self.writer else {
            return RoundOutcome::Idle;
        };
        let _round = w.rounds.lock().await;
        let waiters: Vec<Waiter> = std::mem::take(&mut *w.waiters.lock());
        let mut landed = None;
        let result = self.commit_ready(w, &waiters, &mut landed).await;
        let outcome = match &result {
            Ok(true) => RoundOutcome::Committed,
            Ok(false) => RoundOutcome::Idle,
            Err(_) => RoundOutcome::Failed,
        };
        let shared: Result<(), Arc<VfsError>> = result.map(|_| ()).map_err(Arc::new);
        // The status file first: whoever is answered next (`hubfs sync`) may read it at once.
        self.write_status();
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
        // Dropping the last references to the committed files deletes (or keeps as spares) their
        // staged copies, a few syscalls each: 0.45 s for the 4,000 files of a large last commit,
        // which `hubfs sync` and close() need not wait for.
        if let Some(landed) = landed
            && let Err(e) = tokio::task::spawn_blocking(move || drop(landed)).await
        {
            tracing::warn!(error = %e, "removing committed files' staged copies stopped");
        }
        outcome
    }

    /// Gathers, uploads and commits what is ready. `Ok(false)`: nothing to do.
    /// A landed commit's batch and staged files go to `landed`, for the caller to drop once
    /// the waiters are answered.
    async fn commit_ready(&self, w: &Writer, waiters: &[Waiter], landed: &mut Option<Landed>) -> VfsResult<bool> {
        let requested: HashSet<u64> = waiters
            .iter()
            .filter_map(|wt| wt.file.as_ref().map(|f| f.id()))
            .collect();
        let flush_all = waiters.iter().any(|wt| wt.file.is_none());
        let held = w.held.lock().clone();
        let mut batch = Batch::default();
        let entries = w.overlay.lock().all();
        for (path, e) in entries {
            match e {
                // (Taken only when ready, like a staged file; never uploaded as one.)
                Entry::File(d) if self.is_alias(&path, &d) => batch.aliases.push((path, d)),
                Entry::File(d)
                    if d.is_dirty()
                        && !held.contains(&d.id())
                        && (d.writers() == 0 || requested.contains(&d.id()) || flush_all) =>
                {
                    batch.uploads.push((path, d))
                }
                Entry::Moved(m) => batch.moves.push((path, m)),
                // A symlink or special file that replaced a Hub file: the Hub file is deleted.
                Entry::Gone | Entry::Special { hides: true } => batch.gones.push(path),
                _ => {}
            }
        }
        batch
            .aliases
            .retain(|(_, d)| !held.contains(&d.id()) && (d.writers() == 0 || requested.contains(&d.id()) || flush_all));
        self.keep_ready_aliases(w, &mut batch);
        if batch.uploads.is_empty() && batch.moves.is_empty() && batch.gones.is_empty() && batch.aliases.is_empty() {
            return Ok(false);
        }
        // Files whose upload started at close: their bytes are on the way, do not send them twice.
        self.wait_uploads_ahead(w, batch.uploads.iter().map(|(_, d)| d.id()))
            .await;
        let pending = batch.uploads.len() + batch.moves.len() + batch.gones.len();
        let cap = if w.budget.lock().is_some() {
            super::budget::CommitBudget::changes_per_commit(pending)
        } else {
            MAX_CHANGES_PER_COMMIT
        };
        batch.limit(cap);
        let base = self.commit().await?;
        let built = if self.repo.is_bucket() {
            self.build_bucket_ops(w, &base, &batch)
                .await
                .map(|(o, s)| (Ops::Bucket(o), s))
        } else {
            self.build_ops(w, &w.uploader, &base, &batch)
                .await
                .map(|(o, s)| (Ops::Repo(o), s))
        };
        let (ops, staged) = match built {
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
        let sent = match ops {
            Ops::Repo(ops) => self.send_commit(w, &base, ops, &staged).await,
            Ops::Bucket(ops) => self.send_batch(w, ops, &staged).await,
        };
        match sent {
            Ok(new_commit) => {
                {
                    let mut rev = self.revision.lock().await;
                    rev.commit = new_commit.clone();
                    rev.checked = Instant::now();
                }
                self.settle(w, &batch, &staged, &new_commit).await;
                *w.last_commit.lock() = Some(new_commit);
                *w.last_error.lock() = None;
                *w.next_title.lock() = None;
                if let Some(b) = w.budget.lock().as_mut() {
                    b.spend(tokio::time::Instant::now());
                }
                {
                    let mut c = w.counters.lock();
                    c.commits += 1;
                    c.files_committed += staged.len() as u64;
                }
                *landed = Some((batch, staged));
                Ok(true)
            }
            Err(e) => {
                if let VfsError::Remote(h) = &e
                    && let Some(wait) = h.rate_limited_for()
                {
                    w.set_rate_limited(wait);
                }
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
    pub(super) async fn build_ops(
        &self,
        w: &Writer,
        uploader: &crate::write::upload::Uploader,
        base: &str,
        batch: &Batch,
    ) -> VfsResult<(Vec<CommitOp>, Vec<(Staged, String)>)> {
        let staged = self.snapshot_batch(w, batch).await?;
        let mut ops = uploader.prepare(&staged_copies(&staged)).await.map_err(upload_error)?;
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
        self.alias_ops(base, batch, &mut ops).await?;
        // The Hub applies operations in order: deletions first, so that a file may take the name
        // of a directory whose last file this commit deletes (and the other way round).
        ops.sort_by_key(|o| !matches!(o, CommitOp::DeleteFile { .. }));
        Ok((ops, staged))
    }

    /// A snapshot of each file of the batch, with the mount-relative path it was gathered at;
    /// files renamed since are left for the next round.
    pub(super) async fn snapshot_batch(&self, w: &Writer, batch: &Batch) -> VfsResult<Vec<(Staged, String)>> {
        // A copy-up leaves the machine whole: its Hub bytes are fetched first.
        for (_, d) in &batch.uploads {
            self.fill_copy_up(d).await?;
        }
        // One blocking task for the batch: a round of 500 small files would otherwise wait for
        // 500 hand-offs to the blocking pool, one after the other.
        let files: Vec<Arc<DirtyFile>> = batch.uploads.iter().map(|(_, d)| d.clone()).collect();
        let snaps = tokio::task::spawn_blocking(move || files.iter().map(|f| f.snapshot()).collect::<Vec<_>>())
            .await
            .map_err(|e| VfsError::Io(e.to_string()))?;
        let mut staged = Vec::with_capacity(batch.uploads.len());
        for ((path, d), snap) in batch.uploads.iter().zip(snaps) {
            let snap = snap?;
            if snap.path != self.remote_path(path) {
                // Renamed since the round gathered it: the next round commits it where it is now.
                // Committed here, it would be marked clean at the path it left.
                w.kick.notify_one();
                continue;
            }
            staged.push((
                Staged {
                    repo_path: self.remote_path(path),
                    file: d.clone(),
                    snap,
                },
                path.clone(),
            ));
        }
        Ok(staged)
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
                create_pr: false,
                ops: ops.clone(),
            };
            match self.client.commit(&self.repo, &w.branch, &req).await {
                Ok(c) => return Ok(c),
                Err(HubClientError::Conflict { .. }) => {}
                Err(e) => return Err(VfsError::Remote(e)),
            }
            let head = self.client.repo_info(&self.repo, &w.branch).await?.sha;
            let moved = since_parent(&self.client, &self.repo, &ops, &parent, &head).await?;
            if moved.landed {
                tracing::info!(commit = %head, "our commit had landed before its answer was lost");
                return Ok(head);
            }
            let changed = |p: &str| moved.changed.iter().any(|c| c == p);
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
    pub(super) async fn settle(&self, w: &Writer, batch: &Batch, staged: &[(Staged, String)], commit: &str) {
        let held = w.held.lock().clone();
        let mut stale_gones = Vec::new();
        for path in &batch.gones {
            if self.node_at(commit, path).await.ok().flatten().is_none() {
                stale_gones.push(path.clone());
            }
        }
        {
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
        }
        self.settle_aliases(w, batch, commit).await;
        let mut overlay = w.overlay.lock();
        for path in stale_gones {
            match overlay.get(&path) {
                Some(Entry::Gone) => {
                    overlay.remove(&path);
                }
                Some(Entry::Special { hides: true }) => overlay.set(&path, Entry::Special { hides: false }),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::staging::StagingArea;

    fn batch_of(area: &StagingArea, sizes: &[u64]) -> Batch {
        let mut b = Batch::default();
        for (i, &size) in sizes.iter().enumerate() {
            let path = format!("f{i:04}");
            let d = area.create(&path).unwrap();
            // Sparse: the size without writing the bytes.
            d.write_at(size - 1, &[1]).unwrap();
            b.uploads.push((path, Arc::new(d)));
        }
        b
    }

    #[test]
    fn a_commit_holds_at_most_64_mib_of_inline_candidates() {
        let dir = tempfile::tempdir().unwrap();
        let area = StagingArea::open(dir.path()).unwrap();
        // 100 files of 1 MiB: 64 fit.
        let mut b = batch_of(&area, &[1 << 20; 100]);
        b.limit(10_000);
        assert_eq!(b.uploads.len(), 64);
        // LFS-sized files are not held in memory and do not count; the count cap still applies.
        let mut b = batch_of(&area, &[20 << 20; 30]);
        b.limit(25);
        assert_eq!(b.uploads.len(), 25);
        // Small files after a big one: 9 MiB each, seven fit (63 MiB).
        let mut sizes = vec![100 << 20];
        sizes.extend([9 << 20; 10]);
        let mut b = batch_of(&area, &sizes);
        b.limit(10_000);
        assert_eq!(b.uploads.len(), 8);
    }
}
