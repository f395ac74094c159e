//! Uploader: turns staged files into commit operations.
//!
//! The Hub decides per file (preupload) whether it is stored inline or through LFS. Inline files go
//! base64 in the commit. LFS-class files go through one Xet upload session per commit round: the
//! xet crates chunk them, skip chunks the session or the CAS already holds, and upload the rest. A
//! file whose sha256 equals what the branch already has at that path uploads nothing at all.
//! A Hub that offers no Xet (no write token) gets plain LFS: the batch API's `basic` transfer.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use xet::xet_session::{Sha256Policy, XetSession};

use super::compression::Compression;
use super::staging::{DirtyFile, Frozen, InPlace, Snapshot};
use crate::hub_client::{CommitOp, HubClient, PreuploadFile, RepoRef};

#[path = "upload_live.rs"]
mod live;
pub use live::{LiveEnd, LiveUpload};

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("{0}")]
    Hub(#[from] crate::hub_client::HubClientError),
    #[error("xet upload failed: {0}")]
    Xet(String),
    #[error("upload timed out after {0:?}")]
    Timeout(Duration),
    #[error("reading staged data: {0}")]
    Io(#[from] std::io::Error),
}

/// One staged file to upload.
pub struct Staged {
    pub repo_path: String,
    pub file: Arc<DirtyFile>,
    pub snap: Snapshot,
}

/// Bytes sent to the CAS, for `hubfs status` and the dedup benchmark.
#[derive(Debug, Default)]
pub struct UploadStats {
    pub files: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_uploaded: AtomicU64,
}

/// What an upload at close did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ahead {
    /// Nothing: the file goes inline in the commit (a repo's small text files).
    Inline,
    /// The content is in LFS/Xet storage; a bucket's file comes back with its Xet hash.
    Stored(Option<String>),
}

/// Where an upload reads a file's bytes from.
enum Source {
    /// A frozen copy, whole.
    Path(std::path::PathBuf),
    /// A small frozen copy, in memory.
    Bytes(bytes::Bytes),
    /// The first `len` bytes of a staged file that may still change: streamed with exactly that
    /// length, so a writer growing the file meanwhile changes nothing the upload sees (xet-data's
    /// path upload sizes a file once and must not see it grow).
    Live(std::path::PathBuf, u64),
}

/// Block size of a `Source::Live` read (the crates' ingestion block).
const LIVE_BLOCK: usize = 2 << 20;

/// What an upload read straight from the staged file did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InPlaceOutcome {
    /// Nothing: the file goes inline in the commit.
    Inline,
    /// Stored through Xet: the sha256 and Xet hash of exactly the bytes read.
    Stored { sha256: String, xet_hash: Option<String> },
    /// The Hub offers no Xet here (plain LFS needs the sha256 first): upload from a snapshot.
    NoXet,
}

pub struct Uploader {
    client: HubClient,
    repo: RepoRef,
    branch: String,
    /// One session per `Compression` (the crates take the policy per session), each replaced
    /// after a failed or timed-out upload: a stalled upload may still hold the crates' upload
    /// permits, and a fresh session must not queue behind it.
    sessions: [parking_lot::Mutex<XetSession>; 2],
    /// Xorb uploads at once per session (see `upload_config`).
    streams: usize,
    /// Deadline of one Xet upload session: `base + size / min_rate`.
    base_timeout: Duration,
    pub stats: UploadStats,
}

/// The slowest upload rate tolerated before a session is called stalled (bytes per second).
const MIN_UPLOAD_RATE: u64 = 4 << 20;

/// Where the crates cut a xorb (the Xet format allows up to 64 MiB, their default). A 64 MiB xorb
/// is sent whole once full, so a 64 MiB file's close waited for the Hub to check all of it, and the
/// mount chunked the next xorb while the Hub checked the last, one after the other. Cut at 8 MB
/// (8,000,000 bytes), a file's xorbs are checked while the rest is chunked or still written, a
/// close waits for one small xorb and the shard, and a xorb in flight holds 8 MB, not 64 MiB. The
/// Xet setting's name says simulation; it is the crates' only knob for the cut, and the feature
/// changes nothing else.
const XORB_CUT: &str = "8mb";

/// The xet crates' upload defaults adapt up to 64 concurrent xorb uploads, each a serialized xorb of
/// up to 64 MiB held in memory: fine for a one-off upload tool, not for a mount that must stay
/// small. `streams` xorb uploads at once (the mount's uploads at close, see `WriteOptions`): with
/// one, the mount chunks a file while the Hub idles and the Hub checks its xorb while the mount
/// idles; with two, each works while the other does. `compression`: the crates' automatic choice,
/// or none at all for data that does not compress (see `Compression`).
fn upload_config(streams: usize, compression: Compression) -> Result<xet_runtime::config::XetConfig, UploadError> {
    let streams = streams.clamp(1, 2).to_string();
    let policy = match compression {
        Compression::Auto => "auto",
        Compression::Off => "none",
    };
    let settings: [(&str, &str); 7] = [
        ("xorb.simulation_max_bytes", XORB_CUT),
        ("data.ingestion_block_size", "2mb"),
        ("client.ac_max_upload_concurrency", &streams),
        ("client.ac_initial_upload_concurrency", &streams),
        ("client.ac_min_upload_concurrency", "1"),
        ("data.max_concurrent_file_ingestion", "1"),
        ("xorb.compression_policy", policy),
    ];
    let mut cfg = xet_runtime::config::XetConfig::new();
    for (path, value) in settings {
        cfg = cfg
            .with_config(path, value)
            .map_err(|e| UploadError::Xet(format!("xet setting {path}: {e}")))?;
    }
    Ok(cfg)
}

impl Uploader {
    pub fn new(
        client: HubClient,
        repo: RepoRef,
        branch: String,
        base_timeout: Duration,
        streams: usize,
    ) -> Result<Uploader, UploadError> {
        let session = |c| -> Result<_, UploadError> {
            let s = xet::xet_session::XetSessionBuilder::new_with_config(upload_config(streams, c)?)
                .build()
                .map_err(|e| UploadError::Xet(e.to_string()))?;
            Ok(parking_lot::Mutex::new(s))
        };
        Ok(Uploader {
            client,
            repo,
            branch,
            sessions: [session(Compression::Auto)?, session(Compression::Off)?],
            streams,
            base_timeout,
            stats: UploadStats::default(),
        })
    }

    /// Uploads one closed file's content now if the Hub stores it through LFS/Xet, so that the
    /// commit that follows only refers to it (a bucket's always goes through Xet). `Inline`: it
    /// goes inline in the commit, nothing to upload ahead.
    pub async fn upload_ahead(&self, f: &Staged) -> Result<Ahead, UploadError> {
        if self.repo.is_bucket() {
            let hashes = self.bounded_upload(&[f]).await?;
            self.stats.files.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes_in.fetch_add(f.snap.size, Ordering::Relaxed);
            return Ok(Ahead::Stored(hashes.into_iter().next().flatten()));
        }
        let offer = [PreuploadFile {
            path: f.repo_path.clone(),
            size: f.snap.size,
            sample: f.snap.sample.clone(),
        }];
        let mode = self.client.preupload(&self.repo, &self.branch, &offer).await?;
        let Some(m) = mode.into_iter().find(|m| m.path == f.repo_path) else {
            return Ok(Ahead::Inline);
        };
        if !m.lfs || f.snap.size == 0 {
            return Ok(Ahead::Inline);
        }
        if m.remote_oid.as_deref() != Some(f.snap.sha256.as_str()) {
            self.bounded_upload(&[f]).await?;
        }
        self.stats.files.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_in.fetch_add(f.snap.size, Ordering::Relaxed);
        Ok(Ahead::Stored(None))
    }

    /// Uploads a closed file's content read from the staged file itself, hashing it in the same
    /// pass (no frozen copy, no separate sha256 pass). The caller checks afterwards that the file
    /// did not change meanwhile (`DirtyFile::unchanged_since`); if it did, the result names bytes
    /// that are no longer the file's and is dropped, and the Hub holds a harmless extra object.
    pub async fn upload_in_place(&self, f: &InPlace) -> Result<InPlaceOutcome, UploadError> {
        if !self.repo.is_bucket() {
            let offer = [PreuploadFile {
                path: f.path.clone(),
                size: f.size,
                sample: f.sample.clone(),
            }];
            let mode = self.client.preupload(&self.repo, &self.branch, &offer).await?;
            match mode.into_iter().find(|m| m.path == f.path) {
                Some(m) if m.lfs && f.size > 0 => {}
                _ => return Ok(InPlaceOutcome::Inline),
            }
        }
        let token = match self.client.xet_write_token(&self.repo, &self.branch).await {
            Ok(t) => t,
            Err(e) if e.is_not_found() && !self.repo.is_bucket() => return Ok(InPlaceOutcome::NoXet),
            Err(e) => return Err(e.into()),
        };
        let sources = [(Source::Live(f.data_path.clone(), f.size), Sha256Policy::Compute)];
        let compression = compression_of(&sources).await;
        let mut infos = self
            .bounded(f.size, compression, self.xet_upload(&sources, token, compression))
            .await?;
        let info = infos.pop().flatten();
        let Some((xet_hash, Some(sha256), size)) = info else {
            return Err(UploadError::Xet(format!("no sha256 came back for {}", f.path)));
        };
        if size != f.size {
            return Err(UploadError::Xet(format!(
                "{}: read {size} bytes, expected {} (written meanwhile)",
                f.path, f.size
            )));
        }
        self.stats.files.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_in.fetch_add(f.size, Ordering::Relaxed);
        Ok(InPlaceOutcome::Stored {
            sha256,
            xet_hash: self.repo.is_bucket().then_some(xet_hash),
        })
    }

    /// `upload` within the session deadline for these bytes; a failed or stalled session is
    /// replaced. Returns each file's Xet hash where the upload went through Xet.
    async fn bounded_upload(&self, files: &[&Staged]) -> Result<Vec<Option<String>>, UploadError> {
        let total: u64 = files.iter().map(|f| f.snap.size).sum();
        let sources = files
            .iter()
            .map(|f| {
                let source = match f.snap.frozen()? {
                    Frozen::File(path) => Source::Path(path.clone()),
                    Frozen::Memory(bytes) => Source::Bytes(bytes.clone()),
                };
                Ok((source, Sha256Policy::from_hex(&f.snap.sha256)))
            })
            .collect::<Result<Vec<_>, UploadError>>()?;
        let compression = compression_of(&sources).await;
        self.bounded(total, compression, self.upload(files, sources, compression))
            .await
    }

    /// Runs an upload of `total` bytes within the session deadline; a failed or stalled session
    /// (the one of `compression`) is replaced.
    async fn bounded<T>(
        &self,
        total: u64,
        compression: Compression,
        upload: impl std::future::Future<Output = Result<T, UploadError>>,
    ) -> Result<T, UploadError> {
        let limit = self.base_timeout + Duration::from_secs(total / MIN_UPLOAD_RATE);
        let _timer = crate::metrics::UploadTimer::start();
        match tokio::time::timeout(limit, upload).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if matches!(e, UploadError::Xet(_)) {
                    self.renew_session(compression);
                }
                Err(e)
            }
            Err(_) => {
                self.renew_session(compression);
                Err(UploadError::Timeout(limit))
            }
        }
    }

    /// A bucket's staged files as `(path, Xet hash, size)`: every file goes through Xet (a bucket
    /// has no inline files and no preupload), except those uploaded at close, which kept their hash.
    pub async fn prepare_bucket(&self, files: &[Staged]) -> Result<Vec<(String, String, u64)>, UploadError> {
        let mut out = Vec::with_capacity(files.len());
        let mut to_upload: Vec<&Staged> = Vec::new();
        for f in files {
            match &f.snap.xet_hash {
                Some(h) if f.snap.uploaded => out.push((f.repo_path.clone(), h.clone(), f.snap.size)),
                _ => to_upload.push(f),
            }
        }
        if to_upload.is_empty() {
            return Ok(out);
        }
        let hashes = self.bounded_upload(&to_upload).await?;
        for (f, h) in to_upload.iter().zip(hashes) {
            let h = h.ok_or_else(|| UploadError::Xet(format!("no Xet hash came back for {}", f.repo_path)))?;
            self.stats.files.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes_in.fetch_add(f.snap.size, Ordering::Relaxed);
            out.push((f.repo_path.clone(), h, f.snap.size));
        }
        Ok(out)
    }

    /// Commit operations for `files`: inline or LFS as the Hub says, LFS content uploaded first.
    /// Files uploaded ahead (at close) become LFS operations without asking the Hub again.
    pub async fn prepare(&self, files: &[Staged]) -> Result<Vec<CommitOp>, UploadError> {
        let (ahead, files): (Vec<&Staged>, Vec<&Staged>) = files.iter().partition(|f| f.snap.uploaded);
        let mut ops: Vec<CommitOp> = ahead
            .iter()
            .map(|f| CommitOp::Lfs {
                path: f.repo_path.clone(),
                sha256: f.snap.sha256.clone(),
                size: f.snap.size,
            })
            .collect();
        if files.is_empty() {
            return Ok(ops);
        }
        let offer: Vec<PreuploadFile> = files
            .iter()
            .map(|f| PreuploadFile {
                path: f.repo_path.clone(),
                size: f.snap.size,
                sample: f.snap.sample.clone(),
            })
            .collect();
        let modes: HashMap<String, (bool, Option<String>)> = self
            .client
            .preupload(&self.repo, &self.branch, &offer)
            .await?
            .into_iter()
            .map(|m| (m.path, (m.lfs, m.remote_oid)))
            .collect();
        ops.reserve(files.len());
        let mut to_upload: Vec<&Staged> = Vec::new();
        for f in files {
            let (lfs, remote_oid) = modes.get(&f.repo_path).cloned().unwrap_or((false, None));
            self.stats.files.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes_in.fetch_add(f.snap.size, Ordering::Relaxed);
            if lfs && f.snap.size > 0 {
                if remote_oid.as_deref() != Some(f.snap.sha256.as_str()) {
                    to_upload.push(f);
                }
                ops.push(CommitOp::Lfs {
                    path: f.repo_path.clone(),
                    sha256: f.snap.sha256.clone(),
                    size: f.snap.size,
                });
            } else {
                // A copy in memory needs no hand-off to the blocking pool (a round of 500 small
                // files would otherwise wait for 500 of them).
                let content = match f.snap.frozen()? {
                    Frozen::Memory(bytes) => bytes.clone(),
                    Frozen::File(_) => {
                        let snap = f.snap.clone();
                        tokio::task::spawn_blocking(move || snap.read_all())
                            .await
                            .map_err(|e| UploadError::Io(std::io::Error::other(e)))??
                    }
                };
                ops.push(CommitOp::Inline {
                    path: f.repo_path.clone(),
                    content,
                });
            }
        }
        if !to_upload.is_empty() {
            self.bounded_upload(&to_upload).await?;
        }
        Ok(ops)
    }

    /// Aborts the Xet session of `compression` (ending its stalled transfers) and starts a new one.
    fn renew_session(&self, compression: Compression) {
        match xet::xet_session::XetSessionBuilder::new_with_config(match upload_config(self.streams, compression) {
            Ok(c) => c,
            Err(_) => return,
        })
        .build()
        {
            Ok(fresh) => {
                let old = std::mem::replace(&mut *self.sessions[compression as usize].lock(), fresh);
                if let Err(e) = old.abort() {
                    tracing::debug!(error = %e, "aborting the old xet session");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not start a new xet session"),
        }
    }

    /// Uploads through Xet when the Hub hands out a write token, else plain LFS (repos only: a
    /// bucket is Xet or nothing). Returns the Xet hash of each file, in order (None after LFS).
    async fn upload(
        &self,
        files: &[&Staged],
        sources: Vec<(Source, Sha256Policy)>,
        compression: Compression,
    ) -> Result<Vec<Option<String>>, UploadError> {
        match self.client.xet_write_token(&self.repo, &self.branch).await {
            Ok(token) => {
                let infos = self.xet_upload(&sources, token, compression).await?;
                Ok(infos.into_iter().map(|i| i.map(|(hash, _, _)| hash)).collect())
            }
            Err(e) if e.is_not_found() && !self.repo.is_bucket() => {
                tracing::debug!("no Xet write token: uploading through plain LFS");
                self.lfs_upload(files).await?;
                Ok(vec![None; files.len()])
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn lfs_upload(&self, files: &[&Staged]) -> Result<(), UploadError> {
        let objects: Vec<(String, u64)> = files.iter().map(|f| (f.snap.sha256.clone(), f.snap.size)).collect();
        let actions = self.client.lfs_batch_upload(&self.repo, &self.branch, &objects).await?;
        for a in &actions {
            let Some(f) = files.iter().find(|f| f.snap.sha256 == a.oid) else {
                continue;
            };
            if a.upload.is_some() {
                self.stats.bytes_uploaded.fetch_add(a.size, Ordering::Relaxed);
            }
            match f.snap.frozen()? {
                Frozen::File(path) => self.client.lfs_put(a, path).await?,
                Frozen::Memory(bytes) => {
                    // Plain LFS streams from a file: give the small copy one for the request.
                    let mut tmp = tempfile::NamedTempFile::new()?;
                    std::io::Write::write_all(&mut tmp, bytes)?;
                    self.client.lfs_put(a, tmp.path()).await?;
                }
            }
        }
        Ok(())
    }

    /// Uploads `sources` in one Xet upload commit. Returns, per source in order, its Xet hash,
    /// sha256 (when computed or given) and size.
    async fn xet_upload(
        &self,
        sources: &[(Source, Sha256Policy)],
        token: crate::hub_client::XetToken,
        compression: Compression,
    ) -> Result<Vec<Option<(String, Option<String>, u64)>>, UploadError> {
        let xet = |e: xet::error::XetError| UploadError::Xet(e.to_string());
        let commit = self.upload_commit(&token, compression).await?;
        enum Pending {
            Task(xet::xet_session::UniqueId),
            Done(xet::xet_session::XetFileMetadata),
        }
        let mut pending = Vec::with_capacity(sources.len());
        for (source, sha256) in sources {
            let task = match source {
                Source::Path(path) => commit.upload_from_path(path.clone(), *sha256).await,
                Source::Bytes(bytes) => commit.upload_bytes(bytes.to_vec(), *sha256, None).await,
                Source::Live(path, len) => {
                    let stream = commit.upload_stream(None, *sha256).await.map_err(xet)?;
                    let file = Arc::new(std::fs::File::open(path)?);
                    let mut done = 0u64;
                    while done < *len {
                        let want = (*len - done).min(LIVE_BLOCK as u64) as usize;
                        let f = file.clone();
                        let block = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
                            let mut buf = vec![0u8; want];
                            std::os::unix::fs::FileExt::read_exact_at(&*f, &mut buf, done)?;
                            Ok(buf)
                        })
                        .await
                        .map_err(std::io::Error::other)??;
                        stream.write(block).await.map_err(xet)?;
                        done += want as u64;
                    }
                    pending.push(Pending::Done(stream.finish().await.map_err(xet)?));
                    continue;
                }
            }
            .map_err(xet)?;
            pending.push(Pending::Task(task.task_id()));
        }
        let report = commit.commit().await.map_err(xet)?;
        let infos = pending
            .iter()
            .map(|p| {
                let m = match p {
                    Pending::Task(t) => report.uploads.get(t)?,
                    Pending::Done(m) => m,
                };
                let i = &m.xet_info;
                Some((i.hash.clone(), i.sha256.clone(), i.file_size.unwrap_or(0)))
            })
            .collect();
        self.note_sent(report.dedup_metrics.total_bytes_uploaded);
        tracing::info!(
            files = sources.len(),
            compression = ?compression,
            bytes = report.dedup_metrics.total_bytes,
            new_bytes = report.dedup_metrics.new_bytes,
            uploaded = report.dedup_metrics.total_bytes_uploaded,
            "xet upload done"
        );
        Ok(infos)
    }
}

impl Uploader {
    /// A Xet upload commit in the session of `compression`, with `token` and the URL the crates
    /// refresh it from.
    async fn upload_commit(
        &self,
        token: &crate::hub_client::XetToken,
        compression: Compression,
    ) -> Result<xet::xet_session::XetUploadCommit, UploadError> {
        let refresh = self.client.xet_write_token_url(&self.repo, &self.branch)?;
        let builder = self.sessions[compression as usize].lock().new_upload_commit();
        builder
            .map_err(|e| UploadError::Xet(e.to_string()))?
            .with_endpoint(token.cas_url.clone())
            .with_token_info(token.access_token.clone(), token.exp)
            .with_token_refresh_url(refresh.to_string(), self.client.auth_headers())
            .build()
            .await
            .map_err(|e| UploadError::Xet(e.to_string()))
    }

    /// Counts bytes an upload sent to the CAS (status, metrics).
    fn note_sent(&self, bytes: u64) {
        self.stats.bytes_uploaded.fetch_add(bytes, Ordering::Relaxed);
        crate::metrics::xet_upload::xet_upload_sent(bytes);
    }

    /// Counts one file of `size` bytes stored, of which `sent` went to the CAS.
    fn note_uploaded(&self, size: u64, sent: u64) {
        self.stats.files.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_in.fetch_add(size, Ordering::Relaxed);
        self.note_sent(sent);
    }
}

/// `Compression::Off` when no source's sample compresses, else `Auto` (one upload is one session).
/// A source that cannot be sampled (a staged file gone or cut short meanwhile) counts as
/// compressible: the upload itself reports what is wrong with it.
async fn compression_of(sources: &[(Source, Sha256Policy)]) -> Compression {
    let mut files = Vec::new();
    for (source, _) in sources {
        match source {
            Source::Bytes(b) => {
                if Compression::of_bytes(b) == Compression::Auto {
                    return Compression::Auto;
                }
            }
            Source::Path(p) => files.push((p.clone(), None)),
            Source::Live(p, len) => files.push((p.clone(), Some(*len))),
        }
    }
    if sources.is_empty() {
        return Compression::Auto;
    }
    let sampled = tokio::task::spawn_blocking(move || -> std::io::Result<Compression> {
        for (path, len) in files {
            let file = std::fs::File::open(&path)?;
            let len = match len {
                Some(l) => l,
                None => file.metadata()?.len(),
            };
            if Compression::of_file(&file, len)? == Compression::Auto {
                return Ok(Compression::Auto);
            }
        }
        Ok(Compression::Off)
    })
    .await;
    match sampled {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "could not sample an upload's files; compressing it");
            Compression::Auto
        }
        Err(e) => {
            tracing::debug!(error = %e, "sampling an upload's files failed; compressing it");
            Compression::Auto
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::compression::tests::noise;

    #[test]
    fn an_upload_is_compressed_unless_no_source_compresses() {
        let dir = tempfile::tempdir().unwrap();
        let (random, text) = (dir.path().join("r"), dir.path().join("t"));
        std::fs::write(&random, noise(2 << 20, 5)).unwrap();
        std::fs::write(&text, "{\"id\": 1, \"text\": \"a row\"}\n".repeat(60_000)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let both = [
            (Source::Path(random.clone()), Sha256Policy::Compute),
            (Source::Live(text.clone(), 1 << 20), Sha256Policy::Compute),
        ];
        assert_eq!(
            rt.block_on(compression_of(&both)),
            Compression::Auto,
            "one compressible source"
        );
        let one = [(Source::Live(random, 2 << 20), Sha256Policy::Compute)];
        assert_eq!(rt.block_on(compression_of(&one)), Compression::Off);
        let gone = [(Source::Live(dir.path().join("gone"), 2 << 20), Sha256Policy::Compute)];
        assert_eq!(
            rt.block_on(compression_of(&gone)),
            Compression::Auto,
            "unsampled: compressed"
        );
    }
}
