//! A commit round on a bucket: the same gathering and settling as a repo's (`round.rs`), but the
//! changes go out as one batch request instead of a commit. A bucket has no parent commit to race
//! against: each operation sets or removes one path, last writer wins, so there is no re-basing;
//! an operation the Hub refuses holds just its file (kept staged, its error in `hubfs status`).

use std::time::{SystemTime, UNIX_EPOCH};

use super::Writer;
use super::round::{Batch, staged_copies, upload_error};
use crate::hub_client::BucketOp;
use crate::vfs::error::{VfsError, VfsResult};
use crate::vfs::remote::ContentId;
use crate::vfs::{Node, VirtualFs};
use crate::write::upload::Staged;

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis().min(u64::MAX as u128) as u64)
        .unwrap_or(0)
}

impl VirtualFs {
    /// The mtime a bucket keeps for a file the mount writes: the one the mount shows (a record
    /// set by `touch -d`, `cp -p`, `rsync -a`), else the staged file's last write.
    pub(super) fn bucket_mtime(&self, path: &str, fallback: SystemTime) -> u64 {
        match self.record(path) {
            Some(m) => (m.mtime.s.max(0) as u64) * 1000 + u64::from(m.mtime.n) / 1_000_000,
            None => millis(fallback),
        }
    }

    /// Batch operations for a round: staged files uploaded through Xet and added by hash, moved
    /// files added again by the hash they have (the bytes are already in the bucket's storage),
    /// removed files deleted.
    pub(super) async fn build_bucket_ops(
        &self,
        w: &Writer,
        base: &str,
        batch: &Batch,
    ) -> VfsResult<(Vec<BucketOp>, Vec<(Staged, String)>)> {
        let staged = self.snapshot_batch(w, batch).await?;
        let uploaded = w
            .uploader
            .prepare_bucket(&staged_copies(&staged))
            .await
            .map_err(upload_error)?;
        let mut ops = Vec::with_capacity(uploaded.len() + batch.moves.len() + batch.gones.len());
        // Deletions first, as in a commit: a file may take the name of a directory emptied here.
        for path in &batch.gones {
            if let Some(Node::File(_)) = self.node_at(base, path).await? {
                ops.push(BucketOp::DeleteFile {
                    path: self.remote_path(path),
                });
            }
        }
        for (repo_path, xet_hash, size) in uploaded {
            let rel = staged
                .iter()
                .find(|(s, _)| s.repo_path == repo_path)
                .map(|(s, p)| (p.clone(), s.file.mtime()));
            let mtime_ms = match rel {
                Some((p, t)) => self.bucket_mtime(&p, t),
                None => millis(SystemTime::now()),
            };
            ops.push(BucketOp::AddFile {
                path: repo_path,
                xet_hash,
                size,
                mtime_ms,
            });
        }
        for (path, meta) in &batch.moves {
            let ContentId::Xet(hash) = &meta.id else {
                return Err(VfsError::Upload(format!(
                    "{} has no Xet hash: a bucket file cannot be moved without one",
                    meta.remote_path
                )));
            };
            let shown = meta.last_commit.unwrap_or_else(SystemTime::now);
            ops.push(BucketOp::AddFile {
                path: self.remote_path(path),
                xet_hash: hash.clone(),
                size: meta.size,
                mtime_ms: self.bucket_mtime(path, shown),
            });
        }
        self.alias_bucket_ops(base, batch, &mut ops).await?;
        Ok((ops, staged))
    }

    /// Sends a round's batch; returns the bucket's state after it (which may include others'
    /// changes made meanwhile: a bucket has no parent to pin). Files whose operation the Hub
    /// refused are held with its reason; the rest count as committed.
    pub(super) async fn send_batch(
        &self,
        w: &Writer,
        ops: Vec<BucketOp>,
        staged: &[(Staged, String)],
    ) -> VfsResult<String> {
        let outcome = self.client.bucket_batch(&self.repo, &ops).await?;
        if !outcome.failed.is_empty() && outcome.failed.len() >= ops.len() {
            let (path, why) = &outcome.failed[0];
            return Err(VfsError::Commit {
                msg: format!("the bucket refused every change ({path}: {why})"),
                errno: libc::EIO,
            });
        }
        for (path, why) in &outcome.failed {
            let msg = format!("the bucket refused {path}: {why}; the local version stays staged");
            tracing::warn!("{msg}");
            if let Some((s, _)) = staged.iter().find(|(s, _)| &s.repo_path == path) {
                s.file.set_error(Some(msg));
                w.held.lock().insert(s.file.id());
            }
        }
        // The bucket's state after the batch (the caller moves the mount to it).
        Ok(self.client.repo_info(&self.repo, &w.branch).await?.sha)
    }
}
