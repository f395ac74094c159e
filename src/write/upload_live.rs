//! An upload fed while its file is still being written: the bytes a writer has appended go to a
//! Xet stream as they arrive, so the chunking, hashing and most xorb uploads of a large file
//! overlap its writing instead of following its close. The caller decides what to feed and
//! checks at the end that the file is still what was fed (see `vfs::commit::follow`).

use std::time::Duration;

use xet::xet_session::{Sha256Policy, XetStreamUpload, XetUploadCommit};

use super::{InPlaceOutcome, MIN_UPLOAD_RATE, UploadError, Uploader};
use crate::hub_client::PreuploadFile;
use crate::write::compression::Compression;

/// A Xet stream upload under way, with the session it belongs to (replaced if it fails).
pub struct LiveUpload {
    commit: XetUploadCommit,
    stream: XetStreamUpload,
    compression: Compression,
    fed: u64,
}

/// What the Hub needs to know of the whole file at the end (preupload).
pub struct LiveEnd<'a> {
    pub path: &'a str,
    pub size: u64,
    pub sample: Vec<u8>,
}

impl Uploader {
    /// Starts a stream upload through Xet, compressed as `compression` says (sampled from the
    /// bytes written so far). `Ok(None)`: the Hub offers no Xet here, so nothing can be uploaded
    /// before the sha256 of the whole file is known.
    pub async fn start_live(&self, compression: Compression) -> Result<Option<LiveUpload>, UploadError> {
        let token = match self.client.xet_write_token(&self.repo, &self.branch).await {
            Ok(t) => t,
            Err(e) if e.is_not_found() && !self.repo.is_bucket() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let xet = |e: xet::error::XetError| UploadError::Xet(e.to_string());
        let commit = self.upload_commit(&token, compression).await?;
        let stream = commit.upload_stream(None, Sha256Policy::Compute).await.map_err(xet)?;
        Ok(Some(LiveUpload {
            commit,
            stream,
            compression,
            fed: 0,
        }))
    }

    /// Feeds the next bytes of the file. The crates hold back when their xorb uploads are all
    /// busy; past the deadline for these bytes the session is called stalled and replaced.
    pub async fn feed_live(&self, live: &mut LiveUpload, block: Vec<u8>) -> Result<(), UploadError> {
        let len = block.len() as u64;
        let limit = self.base_timeout + Duration::from_secs(len / MIN_UPLOAD_RATE);
        match tokio::time::timeout(limit, live.stream.write(block)).await {
            Ok(Ok(())) => {
                live.fed += len;
                Ok(())
            }
            Ok(Err(e)) => {
                self.abort_live(live);
                Err(UploadError::Xet(e.to_string()))
            }
            Err(_) => {
                self.abort_live(live);
                // A stalled stream may hold the session's upload permits.
                self.renew_session(live.compression);
                Err(UploadError::Timeout(limit))
            }
        }
    }

    /// Ends the stream once every byte of the file was fed, and waits for its xorbs to be
    /// stored. For a repo, the Hub is asked first whether the file is an LFS file at all: if it
    /// goes inline, what was uploaded stays unused (harmless) and the answer is `Inline`.
    pub async fn finish_live(&self, live: LiveUpload, end: LiveEnd<'_>) -> Result<InPlaceOutcome, UploadError> {
        if live.fed != end.size {
            self.abort_live(&live);
            return Err(UploadError::Xet(format!(
                "{}: fed {} bytes of {}",
                end.path, live.fed, end.size
            )));
        }
        if !self.repo.is_bucket() {
            let offer = [PreuploadFile {
                path: end.path.to_string(),
                size: end.size,
                sample: end.sample,
            }];
            let mode = self.client.preupload(&self.repo, &self.branch, &offer).await;
            let lfs = match mode {
                Ok(m) => m.into_iter().any(|m| m.path == end.path && m.lfs),
                Err(e) => {
                    self.abort_live(&live);
                    return Err(e.into());
                }
            };
            if !lfs {
                self.abort_live(&live);
                return Ok(InPlaceOutcome::Inline);
            }
        }
        let compression = live.compression;
        let xet = |e: xet::error::XetError| UploadError::Xet(e.to_string());
        // The stream's last xorbs (at most the two being sent and the one being filled) are what
        // is left to send: the deadline of a 192 MiB upload at most.
        let rest = end.size.min(192 << 20);
        let done = self
            .bounded(rest, compression, async {
                let meta = live.stream.finish().await.map_err(xet)?;
                let report = live.commit.commit().await.map_err(xet)?;
                Ok((meta, report))
            })
            .await;
        let (meta, report) = match done {
            Ok(v) => v,
            Err(e) => {
                let _ = live.commit.abort();
                return Err(e);
            }
        };
        let info = &meta.xet_info;
        let Some(sha256) = info.sha256.clone() else {
            return Err(UploadError::Xet(format!("no sha256 came back for {}", end.path)));
        };
        if info.file_size.unwrap_or(0) != end.size {
            return Err(UploadError::Xet(format!(
                "{}: the stream stored {:?} bytes, expected {}",
                end.path, info.file_size, end.size
            )));
        }
        self.note_uploaded(end.size, report.dedup_metrics.total_bytes_uploaded);
        tracing::info!(
            path = end.path,
            compression = ?compression,
            bytes = report.dedup_metrics.total_bytes,
            uploaded = report.dedup_metrics.total_bytes_uploaded,
            "xet upload that followed the writer done"
        );
        Ok(InPlaceOutcome::Stored {
            sha256,
            xet_hash: self.repo.is_bucket().then(|| info.hash.clone()),
        })
    }

    /// Drops an upload that will not be finished (the file changed, or the writer went away).
    /// Xorbs already stored stay in the CAS, unused.
    pub fn abort_live(&self, live: &LiveUpload) {
        live.stream.abort();
        if let Err(e) = live.commit.abort() {
            tracing::debug!(error = %e, "aborting a stream upload");
        }
    }
}

impl LiveUpload {
    /// Bytes fed so far.
    pub fn fed(&self) -> u64 {
        self.fed
    }
}
