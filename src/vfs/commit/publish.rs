//! Publishing an overlay's layer (`hubfs overlay commit`): every change of the layer in one commit,
//! or in one pull request, made against the commit the layer lies over (`parentCommit`).
//!
//! A branch that moved since is not overwritten: when none of the paths the layer touches changed
//! on it, the commit goes on top of its head; otherwise nothing is published and the paths are
//! reported (and recorded as the layer's conflicts). A pull request is opened from the layer's
//! commit itself, so it never conflicts at creation: the Hub shows its conflicts. The token may be
//! another than the mount's: a layer is made with a read token and published with a write one.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::round::{Batch, since_parent};
use crate::hub_client::{CommitOp, CommitRequest, HubClient, HubClientConfig, HubClientError};
use crate::util::is_commit_id;
use crate::vfs::VirtualFs;
use crate::vfs::error::{VfsError, VfsResult};
use crate::write::overlay::Entry;
use crate::write::upload::Uploader;

/// How to publish a layer.
#[derive(Clone, Default)]
pub struct PublishOptions {
    /// The commit's title (and the pull request's).
    pub message: String,
    /// The commit's description (default: the list of changes).
    pub description: Option<String>,
    /// Open a pull request instead of committing to the branch.
    pub pr: bool,
    /// The branch to commit to (or a pull request's target); created at the layer's commit when
    /// missing. Default: the revision the overlay was mounted at.
    pub branch: Option<String>,
    /// Publish paths that changed on the Hub too (the layer's version wins).
    pub force: bool,
    /// A token for this publish (the mount may hold a read-only one).
    pub token: Option<String>,
}

impl std::fmt::Debug for PublishOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishOptions")
            .field("message", &self.message)
            .field("pr", &self.pr)
            .field("branch", &self.branch)
            .field("force", &self.force)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// What a publish did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    /// The new commit (`None`: the layer had nothing the Hub can store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The branch committed to, or the pull request's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_num: Option<u64>,
    /// Operations in the commit (files added or changed, deleted).
    pub operations: usize,
    /// The branch had moved without touching the layer's paths: the commit's parent is this head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebased_on: Option<String>,
    /// Bytes of file content sent to the Hub's storage (after Xet's deduplication).
    #[serde(default)]
    pub bytes_uploaded: u64,
}

fn refused(msg: String, errno: i32) -> VfsError {
    VfsError::Commit { msg, errno }
}

impl VirtualFs {
    /// A refused token said in terms of what to do.
    fn token_refused(&self, e: VfsError) -> VfsError {
        match &e {
            VfsError::Remote(h @ (HubClientError::Unauthorized { .. } | HubClientError::Forbidden { .. })) => refused(
                format!(
                    "the Hub refused the token ({h}); publishing needs a token that may write to {} (`--token` or \
                     HF_TOKEN)",
                    self.repo
                ),
                libc::EACCES,
            ),
            _ => e,
        }
    }

    /// Publishes the layer (see the module doc). Afterwards the layer holds only what the Hub
    /// cannot store (symlinks, empty folders, modes) and the mount shows the new commit.
    pub async fn publish(&self, p: &PublishOptions) -> VfsResult<Published> {
        let Some(w) = &self.writer else {
            return Err(VfsError::Invalid("not an overlay mount"));
        };
        let Some(layer) = &w.layer else {
            return Err(VfsError::Invalid("not an overlay mount"));
        };
        let _one = layer.publishing.lock().await;
        let base = self.commit().await?;
        let entries = w.overlay.lock().all();
        if let Some((path, _)) = entries
            .iter()
            .find(|(_, e)| matches!(e, Entry::File(d) if d.writers() > 0 && !d.settled()))
        {
            return Err(refused(
                format!("{path} is open for writing; close (or fsync) it first"),
                libc::EBUSY,
            ));
        }
        let conflicts = layer.record.lock().conflicts.clone();
        if !conflicts.is_empty() && !p.force {
            return Err(refused(
                format!(
                    "changed on the Hub too since the layer's changes were made: {}. `hubfs overlay reset DIR PATH` \
                     takes the Hub's version; `--force` publishes the layer's",
                    conflicts.join(", ")
                ),
                libc::EEXIST,
            ));
        }
        let target = match &p.branch {
            Some(b) => b.clone(),
            None if !is_commit_id(&self.revision_name) => self.revision_name.clone(),
            None => {
                return Err(VfsError::Invalid(
                    "the overlay lies over a commit id: name the branch to publish to with --branch",
                ));
            }
        };
        let client = match &p.token {
            Some(t) => HubClient::new(HubClientConfig {
                endpoint: self.client.endpoint().to_string(),
                token: Some(t.clone()),
                ..HubClientConfig::default()
            })?,
            None => self.client.clone(),
        };

        let mut batch = Batch::default();
        for (path, e) in &entries {
            match e {
                Entry::File(d) if self.is_alias(path, d) => batch.aliases.push((path.clone(), d.clone())),
                Entry::File(d) if d.is_dirty() => batch.uploads.push((path.clone(), d.clone())),
                Entry::Moved(m) => batch.moves.push((path.clone(), m.clone())),
                Entry::Gone | Entry::Special { hides: true } => batch.gones.push(path.clone()),
                _ => {}
            }
        }
        self.keep_ready_aliases(w, &mut batch);
        let covered = self.covered_files(&base, &entries).await?;
        if p.branch.is_some() {
            match client.repo_info(&self.repo, &target).await {
                Ok(_) => {}
                Err(HubClientError::RevisionNotFound { .. }) => {
                    client.create_branch(&self.repo, &target, &base).await?
                }
                Err(e) => return Err(e.into()),
            }
        }
        let uploader = Uploader::new(
            client.clone(),
            self.repo.clone(),
            target.clone(),
            w.opts.upload_timeout,
            w.opts.background_uploads,
        )
        .map_err(|e| VfsError::Xet(e.to_string()))?;
        let (mut ops, staged) = self
            .build_ops(w, &uploader, &base, &batch)
            .await
            .map_err(|e| self.token_refused(e))?;
        for path in covered {
            let path = self.remote_path(&path);
            if !ops
                .iter()
                .any(|o| matches!(o, CommitOp::DeleteFile { path: q } if *q == path))
            {
                ops.push(CommitOp::DeleteFile { path });
            }
        }
        ops.sort_by_key(|o| !matches!(o, CommitOp::DeleteFile { .. }));
        if ops.is_empty() {
            return Ok(Published::default());
        }
        let (_, listed) = w.summary(&ops);
        let mut parent = base.clone();
        let mut rebased_on = None;
        let mut moved = 0;
        let answer = loop {
            let req = CommitRequest {
                summary: p.message.clone(),
                description: p.description.clone().unwrap_or_else(|| listed.clone()),
                parent: Some(parent.clone()),
                ops: ops.clone(),
                create_pr: p.pr,
            };
            match client.commit_answer(&self.repo, &target, &req).await {
                Ok(a) => break a,
                Err(HubClientError::Conflict { .. }) if !p.pr && moved < 4 => {
                    moved += 1;
                    let head = client.repo_info(&self.repo, &target).await?.sha;
                    let moved = since_parent(&client, &self.repo, &ops, &parent, &head).await?;
                    if moved.landed {
                        tracing::info!(commit = %head, "the publish had landed before its answer was lost");
                        break crate::hub_client::CommitAnswer {
                            commit: head,
                            pr_url: None,
                            pr_num: None,
                        };
                    }
                    let changed = moved.changed;
                    if changed.is_empty() || p.force {
                        tracing::info!(from = %parent, to = %head, forced = p.force, "the branch moved; publishing on its head");
                        parent = head.clone();
                        rebased_on = Some(head);
                        continue;
                    }
                    {
                        let mut rec = layer.record.lock();
                        rec.conflicts.extend(changed.iter().cloned());
                        rec.conflicts.sort();
                        rec.conflicts.dedup();
                    }
                    layer.save()?;
                    return Err(refused(
                        format!(
                            "{target} changed these paths since the layer's commit: {}; nothing was published \
                             (`hubfs overlay diff` marks them; `--pr` opens a pull request from the layer's commit instead)",
                            changed.join(", ")
                        ),
                        libc::EEXIST,
                    ));
                }
                Err(e) => {
                    if let Some(wait) = e.rate_limited_for() {
                        // The Hub's commit rate limit: wait for its window rather than fail.
                        w.set_rate_limited(wait);
                        tokio::time::sleep(wait.max(std::time::Duration::from_secs(1))).await;
                        continue;
                    }
                    return Err(self.token_refused(VfsError::Remote(e)));
                }
            }
        };
        let new_commit = answer.commit.clone();
        self.settle(w, &batch, &staged, &new_commit).await;
        // Folders the new commit has are no longer the layer's.
        let dirs: Vec<String> = w
            .overlay
            .lock()
            .all()
            .into_iter()
            .filter(|(_, e)| matches!(e, Entry::Dir))
            .map(|(p, _)| p)
            .collect();
        for d in dirs {
            if matches!(self.node_at(&new_commit, &d).await?, Some(crate::vfs::Node::Dir)) {
                w.overlay.lock().remove(&d);
            }
        }
        {
            let mut rev = self.revision.lock().await;
            rev.commit = new_commit.clone();
            rev.checked = Instant::now();
        }
        {
            let mut rec = layer.record.lock();
            rec.base = new_commit.clone();
            rec.conflicts.clear();
        }
        layer.save()?;
        self.sync_layer();
        *w.last_commit.lock() = Some(new_commit.clone());
        w.counters.lock().commits += 1;
        Ok(Published {
            commit: Some(new_commit),
            branch: Some(target),
            pr_url: answer.pr_url,
            pr_num: answer.pr_num,
            operations: ops.len(),
            rebased_on,
            bytes_uploaded: uploader.stats.bytes_uploaded.load(std::sync::atomic::Ordering::Relaxed),
        })
    }
}
