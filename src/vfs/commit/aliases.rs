//! Committing the names of a link group (`vfs::links`): the staged copy is uploaded once, under
//! the name it is staged as; every other name (an alias) gets an operation with the same content
//! hash in the same commit, so a second name costs no upload.

use std::sync::Arc;

use parking_lot::Mutex;

use super::Writer;
use super::round::Batch;
use crate::hub_client::{BucketOp, CommitOp};
use crate::vfs::error::VfsResult;
use crate::vfs::read::ReadState;
use crate::vfs::remote::{ContentId, FileMeta};
use crate::vfs::{Node, VirtualFs};
use crate::write::overlay::Entry;
use crate::write::staging::DirtyFile;

impl VirtualFs {
    /// Whether `path`'s staged copy `d` is staged under another name of `path`'s link group.
    pub(super) fn is_alias(&self, path: &str, d: &DirtyFile) -> bool {
        let primary = d.repo_path();
        let me = self.remote_path(path);
        primary != me
            && self
                .store()
                .is_some_and(|s| s.link_of(&me).is_some_and(|g| s.link_of(&primary) == Some(g)))
    }

    /// Keeps the aliases a round can commit: those whose copy this round uploads, and clean ones
    /// whose copy already left the overlay (its content is the Hub's at the staged name).
    pub(super) fn keep_ready_aliases(&self, w: &Writer, batch: &mut Batch) {
        let uploads: Vec<Arc<DirtyFile>> = batch.uploads.iter().map(|(_, d)| d.clone()).collect();
        let o = w.overlay.lock();
        batch.aliases.retain(|(_, d)| {
            if d.is_dirty() {
                return uploads.iter().any(|u| Arc::ptr_eq(u, d));
            }
            let primary = self.mount_path(&d.repo_path());
            !matches!(primary.and_then(|p| o.get(&p).cloned()), Some(Entry::File(x)) if Arc::ptr_eq(&x, d))
        });
    }

    /// What the Hub has at the name `d` is staged under, when an alias must be committed from it
    /// (`None`: nothing to do this round, or already the same at `path`).
    async fn alias_source(&self, base: &str, path: &str, d: &DirtyFile) -> VfsResult<Option<FileMeta>> {
        if d.is_dirty() {
            return Ok(None);
        }
        let Some(primary) = self.mount_path(&d.repo_path()) else {
            return Ok(None);
        };
        let Some(Node::File(m)) = self.node_at(base, &primary).await? else {
            return Ok(None);
        };
        match self.node_at(base, path).await? {
            Some(Node::File(here)) if here.id == m.id => Ok(None),
            _ => Ok(Some(m)),
        }
    }

    /// Commit operations for a repo round's aliases.
    pub(super) async fn alias_ops(&self, base: &str, batch: &Batch, ops: &mut Vec<CommitOp>) -> VfsResult<()> {
        for (path, d) in &batch.aliases {
            let repo_path = self.remote_path(path);
            let primary = d.repo_path();
            let same = ops.iter().find(|o| o.path() == primary).cloned();
            match same {
                Some(CommitOp::Inline { content, .. }) => ops.push(CommitOp::Inline {
                    path: repo_path,
                    content,
                }),
                Some(CommitOp::Lfs { sha256, size, .. }) => ops.push(CommitOp::Lfs {
                    path: repo_path,
                    sha256,
                    size,
                }),
                Some(CommitOp::DeleteFile { .. }) => {}
                None => {
                    if let Some(m) = self.alias_source(base, path, d).await? {
                        ops.push(self.copy_op(base, repo_path, &m).await?);
                    }
                }
            }
        }
        Ok(())
    }

    /// A commit operation putting the content `m` names at `repo_path` (by hash, or inline for a
    /// small file the Hub keeps in git).
    pub(super) async fn copy_op(&self, base: &str, repo_path: String, m: &FileMeta) -> VfsResult<CommitOp> {
        Ok(match &m.sha256 {
            Some(sha) => CommitOp::Lfs {
                path: repo_path,
                sha256: sha.clone(),
                size: m.size,
            },
            None => {
                let content = self
                    .reader
                    .read(m, base, &Mutex::new(ReadState::default()), 0, m.size as u32)
                    .await?;
                CommitOp::Inline {
                    path: repo_path,
                    content,
                }
            }
        })
    }

    /// Batch operations for a bucket round's aliases.
    pub(super) async fn alias_bucket_ops(&self, base: &str, batch: &Batch, ops: &mut Vec<BucketOp>) -> VfsResult<()> {
        for (path, d) in &batch.aliases {
            let repo_path = self.remote_path(path);
            let primary = d.repo_path();
            let same = ops.iter().find(|o| o.path() == primary).cloned();
            match same {
                Some(BucketOp::AddFile {
                    xet_hash,
                    size,
                    mtime_ms,
                    ..
                }) => ops.push(BucketOp::AddFile {
                    path: repo_path,
                    xet_hash,
                    size,
                    mtime_ms,
                }),
                Some(BucketOp::DeleteFile { .. }) => {}
                None => {
                    if let Some(m) = self.alias_source(base, path, d).await?
                        && let ContentId::Xet(hash) = &m.id
                    {
                        let shown = m.last_commit.unwrap_or_else(std::time::SystemTime::now);
                        ops.push(BucketOp::AddFile {
                            path: repo_path,
                            xet_hash: hash.clone(),
                            size: m.size,
                            mtime_ms: self.bucket_mtime(path, shown),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// After a round: an alias goes from the overlay once its copy is clean and out of the overlay
    /// and the commit holds the same content at both names (the Hub's tree shows it from then on).
    pub(super) async fn settle_aliases(&self, w: &Writer, batch: &Batch, commit: &str) {
        for (path, d) in &batch.aliases {
            if d.is_dirty() || d.writers() > 0 {
                continue;
            }
            let Some(primary) = self.mount_path(&d.repo_path()) else {
                continue;
            };
            if matches!(w.overlay.lock().get(&primary), Some(Entry::File(x)) if Arc::ptr_eq(x, d)) {
                continue;
            }
            let at = |p: String| async move { self.node_at(commit, &p).await.ok().flatten() };
            match (at(path.clone()).await, at(primary.clone()).await) {
                (Some(Node::File(a)), Some(Node::File(b))) if a.id == b.id => {}
                // The name it is staged under is no longer a file on the Hub (another client
                // removed it): nothing to copy from; this name shows the Hub's again.
                (_, None | Some(Node::Dir)) => {
                    tracing::warn!(path = %path, staged_as = %primary, "a hard link's staged name left the Hub; the name shows the Hub's content");
                }
                _ => continue,
            }
            let mut o = w.overlay.lock();
            if matches!(o.get(path), Some(Entry::File(x)) if Arc::ptr_eq(x, d)) {
                o.remove(path);
            }
        }
    }
}
