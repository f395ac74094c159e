//! Uploads at close: a closed file large enough to be an LFS file is uploaded before its commit,
//! read straight from the staged file and hashed in the same pass. `--close upload` waits for it
//! in close(); `--close stage` starts it in the background, one at a time, and the round that
//! commits the file waits for it instead of uploading the same bytes again.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use tokio::sync::{Semaphore, watch};

use super::follow::{Finished, Follow};
use super::{UPLOAD_AHEAD_MIN, Writer, round};
use crate::vfs::VirtualFs;
use crate::vfs::error::{VfsError, VfsResult};
use crate::write::staging::DirtyFile;
use crate::write::upload::InPlaceOutcome;

/// Lock order: `running` and `following` are leaves.
pub(super) struct AheadUploads {
    /// The mount, for tasks that outlive the close that started them (set by `start_committer`).
    pub(super) me: OnceLock<Weak<VirtualFs>>,
    /// The runtime those tasks run on (writes arrive on the frontend's own threads).
    pub(super) rt: OnceLock<tokio::runtime::Handle>,
    /// Running uploads by staged file id; the sender is dropped when one ends.
    running: Mutex<HashMap<u64, watch::Receiver<()>>>,
    /// Uploads that follow a writer, by staged file id (`follow`).
    pub(super) following: Mutex<HashMap<u64, Follow>>,
    /// Background uploads and followers at once (each holds one while it runs).
    pub(super) slots: Arc<Semaphore>,
}

impl AheadUploads {
    /// `slots` uploads at once (`WriteOptions::background_uploads`). With one, the mount chunks a
    /// file while the Hub waits, then the Hub checks its xorb while the mount waits: 4 × 64 MiB
    /// of random data with `--close stage` on tmpfs took 3.8 s until on the Hub; with two uploads
    /// and two xorb streams (and no LZ4 on data that does not compress) 2.4–2.8 s at 172–178 MiB
    /// peak RSS, with three 2.4–2.6 s at 242 MiB.
    pub(super) fn new(slots: usize) -> Self {
        AheadUploads {
            me: OnceLock::new(),
            rt: OnceLock::new(),
            running: Mutex::new(HashMap::new()),
            following: Mutex::new(HashMap::new()),
            slots: Arc::new(Semaphore::new(slots.max(1))),
        }
    }
}

impl VirtualFs {
    /// Lets background uploads reach the mount (called once the core is shared).
    pub(super) fn enable_background_uploads(self: &Arc<Self>, rt: &tokio::runtime::Handle) {
        if let Some(w) = &self.writer {
            let _ = w.ahead.me.set(Arc::downgrade(self));
            let _ = w.ahead.rt.set(rt.clone());
        }
    }

    /// `--close stage`: starts `upload_ahead` for `file` in the background (errors are the
    /// round's to retry and report); the close does not wait.
    pub(crate) fn upload_in_background(&self, file: &Arc<DirtyFile>) {
        let Some(w) = &self.writer else { return };
        if file.size() < UPLOAD_AHEAD_MIN || !file.is_dirty() || file.uploaded_now() {
            return;
        }
        let Some(me) = w.ahead.me.get().cloned() else { return };
        let (tx, rx) = watch::channel(());
        {
            let mut running = w.ahead.running.lock();
            if running.contains_key(&file.id()) {
                return;
            }
            running.insert(file.id(), rx);
        }
        let slots = w.ahead.slots.clone();
        let file = file.clone();
        // Taken now, before this close's release can end it; the follower holds its own slot.
        let followed = self.finish_following(w, &file);
        tokio::spawn(async move {
            let mut result = None;
            if let Some(rx) = followed
                && let Some(vfs) = me.upgrade()
            {
                result = vfs.followed_upload(&file, rx).await;
            }
            let _permit = match result {
                Some(_) => None,
                None => Some(slots.acquire_owned().await),
            };
            if let Some(vfs) = me.upgrade() {
                let r = match result {
                    Some(r) => r,
                    None => vfs.upload_ahead(&file).await,
                };
                if let Err(e) = r {
                    tracing::debug!(path = %file.repo_path(), error = %e, "background upload failed; the round retries");
                }
                if let Some(w) = &vfs.writer {
                    w.ahead.running.lock().remove(&file.id());
                }
            }
            drop(tx);
        });
    }

    /// Waits for the background uploads of these staged files to end (each has its own deadline).
    pub(super) async fn wait_uploads_ahead(&self, w: &Writer, ids: impl Iterator<Item = u64>) {
        let waits: Vec<watch::Receiver<()>> = {
            let running = w.ahead.running.lock();
            ids.filter_map(|id| running.get(&id).cloned()).collect()
        };
        for mut rx in waits {
            // Err: the sender is gone, the upload ended.
            while rx.changed().await.is_ok() {}
        }
    }

    /// `CloseMode::Upload`: uploads `file`'s content now if it is large enough to be an LFS file
    /// (see [`UPLOAD_AHEAD_MIN`]), so that the commit only refers to it. An upload error is the
    /// caller's error; the file stays staged and the commit round uploads it again.
    pub(crate) async fn upload_ahead(&self, file: &Arc<DirtyFile>) -> VfsResult<()> {
        let Some(w) = &self.writer else {
            return Err(VfsError::ReadOnly);
        };
        if file.size() < UPLOAD_AHEAD_MIN || !file.is_dirty() || file.uploaded_now() {
            return Ok(());
        }
        if let Some(rx) = self.finish_following(w, file)
            && let Some(r) = self.followed_upload(file, rx).await
        {
            return r;
        }
        // Straight from the staged file, hashed as it is read (Xet); a snapshot copy otherwise.
        let result = match file.in_place() {
            Ok(Some(now)) => match w.uploader.upload_in_place(&now).await {
                Ok(InPlaceOutcome::Stored { sha256, xet_hash }) => {
                    // Written meanwhile: not recorded; the round uploads what it has then.
                    file.set_uploaded_in_place(now, sha256, xet_hash);
                    Ok(())
                }
                Ok(InPlaceOutcome::Inline) => Ok(()),
                Ok(InPlaceOutcome::NoXet) => self.upload_ahead_snapshot(w, file).await,
                // Truncated under the upload by another writer: not this close's failure; the
                // round uploads what the file holds then.
                Err(crate::write::upload::UploadError::Io(e))
                    if e.kind() == std::io::ErrorKind::UnexpectedEof && !file.unchanged_since(now.generation) =>
                {
                    Ok(())
                }
                Err(e) => Err(e),
            },
            Ok(None) => self.upload_ahead_snapshot(w, file).await,
            Err(e) => Err(e.into()),
        };
        result.map_err(|e| {
            let e = match e {
                crate::write::upload::UploadError::Hub(h) => VfsError::Remote(h),
                other => VfsError::Upload(other.to_string()),
            };
            tracing::warn!(path = %file.repo_path(), error = %e, "upload at close failed; the file stays staged");
            file.set_error(Some(e.to_string()));
            round::commit_error(&e)
        })
    }

    /// The outcome of `file`'s follower, recorded as `upload_ahead` records its own. `None`: the
    /// follower could not finish; the caller uploads the file itself.
    async fn followed_upload(
        &self,
        file: &Arc<DirtyFile>,
        rx: tokio::sync::oneshot::Receiver<Finished>,
    ) -> Option<VfsResult<()>> {
        let (now, outcome) = match rx.await {
            Ok(Ok(done)) => done,
            Ok(Err(e)) => {
                crate::metrics::followed_upload("ended");
                tracing::debug!(path = %file.repo_path(), error = %e, "the upload that followed the writer did not finish; uploading at close");
                return None;
            }
            Err(_) => return None,
        };
        match outcome {
            InPlaceOutcome::Stored { sha256, xet_hash } => {
                if !file.set_uploaded_in_place(now, sha256, xet_hash) {
                    return None;
                }
                crate::metrics::followed_upload("stored");
                Some(Ok(()))
            }
            InPlaceOutcome::Inline => Some(Ok(())),
            InPlaceOutcome::NoXet => None,
        }
    }

    /// `upload_ahead` from a frozen copy (plain LFS needs the sha256 before the upload).
    async fn upload_ahead_snapshot(
        &self,
        w: &Writer,
        file: &Arc<DirtyFile>,
    ) -> Result<(), crate::write::upload::UploadError> {
        let f = file.clone();
        let snap = tokio::task::spawn_blocking(move || f.snapshot())
            .await
            .map_err(std::io::Error::other)??;
        if snap.uploaded {
            return Ok(());
        }
        let staged = crate::write::upload::Staged {
            repo_path: file.repo_path(),
            file: file.clone(),
            snap,
        };
        if let crate::write::upload::Ahead::Stored(xet_hash) = w.uploader.upload_ahead(&staged).await? {
            file.set_uploaded(&crate::write::staging::Snapshot {
                xet_hash,
                ..staged.snap
            });
        }
        Ok(())
    }
}
