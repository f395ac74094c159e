//! Fetching file content from the Hub: Xet-stored files through the xet crates (reconstruction plus
//! xorb ranges from the CAS), regular and plain-LFS files through HTTP Range on `/resolve/`.
//! Every fetch has a deadline, so a stalled connection fails with EIO instead of wedging a reader.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use xet::xet_session::{XetDownloadStreamGroup, XetFileInfo, XetSession, XetSessionBuilder};

use super::error::{VfsError, VfsResult};
use crate::buffer_pool::BufferPool;
use crate::hub_client::{HubClient, RepoRef};

/// Ranges at least this long are assembled in a pooled (prefaulted) buffer.
const POOLED_MIN: u64 = 1 << 20;

/// Exact-range reads of Xet files up to this size go through the Hub's `/resolve/` redirect with an
/// HTTP Range (one request once the redirect target is cached) instead of a Xet reconstruction
/// followed by a xorb fetch (two requests every time).
const XET_HTTP_RANGE_MAX: u64 = 4 << 20;

/// How a file's bytes are addressed. The key doubles as the chunk store's content key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ContentId {
    Xet(String),
    Lfs(String),
    Git(String),
}

impl ContentId {
    pub fn key(&self) -> Arc<str> {
        match self {
            ContentId::Xet(h) => Arc::from(format!("xet:{h}")),
            ContentId::Lfs(h) => Arc::from(format!("sha256:{h}")),
            ContentId::Git(h) => Arc::from(format!("git:{h}")),
        }
    }
}

/// A file as the core knows it: where it is, how big, what content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// Path in the repo (subfolder mounts included).
    pub remote_path: String,
    pub size: u64,
    pub id: ContentId,
}

struct XetGroup {
    group: XetDownloadStreamGroup,
    /// Unix seconds after which the CAS token must be renewed.
    renew_after: u64,
}

/// Lock order: `xet` (async mutex) is held only while building a download group.
pub struct Remote {
    client: HubClient,
    repo: RepoRef,
    timeout: Duration,
    session: XetSession,
    xet: tokio::sync::Mutex<Option<Arc<XetGroup>>>,
    pool: BufferPool,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The xet crates' defaults suit one big download to disk; a mount reads many ranges at once, each
/// bounded by the reader's prefetch window. Start with enough parallel range requests to fill a
/// window at once (the adaptive default starts at 4 and grows slowly), let every block of a window
/// stream at the same time, and cap the crates' own buffering so memory stays bounded by hubfs's
/// caches rather than by a fraction of the machine's RAM.
fn xet_config() -> VfsResult<xet_runtime::config::XetConfig> {
    let settings: [(&str, &str); 6] = [
        ("client.ac_initial_download_concurrency", "16"),
        ("client.ac_min_download_concurrency", "8"),
        ("data.max_concurrent_file_downloads", "32"),
        ("reconstruction.download_buffer_size", "32mb"),
        ("reconstruction.download_buffer_perfile_size", "16mb"),
        ("reconstruction.download_buffer_limit", "64mb"),
    ];
    let mut cfg = xet_runtime::config::XetConfig::new();
    for (path, value) in settings {
        cfg = cfg
            .with_config(path, value)
            .map_err(|e| VfsError::Xet(format!("xet setting {path}: {e}")))?;
    }
    Ok(cfg)
}

impl Remote {
    pub fn new(client: HubClient, repo: RepoRef, timeout: Duration, pool: BufferPool) -> VfsResult<Remote> {
        let session = XetSessionBuilder::new_with_config(xet_config()?)
            .with_tokio_handle(tokio::runtime::Handle::current())
            .build()
            .map_err(|e| VfsError::Xet(e.to_string()))?;
        Ok(Remote {
            client,
            repo,
            timeout,
            session,
            xet: tokio::sync::Mutex::new(None),
            pool,
        })
    }

    /// The download group, rebuilt with a fresh CAS token a minute before the old one expires.
    async fn xet_group(&self, commit: &str) -> VfsResult<Arc<XetGroup>> {
        let mut g = self.xet.lock().await;
        if let Some(x) = g.as_ref()
            && x.renew_after > unix_now()
        {
            return Ok(x.clone());
        }
        let token = self.client.xet_read_token(&self.repo, commit).await?;
        let group = self
            .session
            .new_download_stream_group()
            .map_err(|e| VfsError::Xet(e.to_string()))?
            .with_endpoint(token.cas_url.clone())
            .with_token_info(token.access_token.clone(), token.exp)
            .build()
            .await
            .map_err(|e| VfsError::Xet(e.to_string()))?;
        let x = Arc::new(XetGroup {
            group,
            renew_after: token.exp.saturating_sub(60),
        });
        *g = Some(x.clone());
        Ok(x)
    }

    /// Exactly the bytes `[start, start + len)` of `file` (clamped to its size), for streaming:
    /// Xet files through the Xet protocol.
    pub async fn fetch(&self, file: &FileMeta, commit: &str, start: u64, len: u64) -> VfsResult<Bytes> {
        self.fetch_with(file, commit, start, len, false).await
    }

    /// Like `fetch`, for one random read: a small range of a Xet file costs one HTTP request.
    pub async fn fetch_exact(&self, file: &FileMeta, commit: &str, start: u64, len: u64) -> VfsResult<Bytes> {
        self.fetch_with(file, commit, start, len, len <= XET_HTTP_RANGE_MAX)
            .await
    }

    async fn fetch_with(&self, file: &FileMeta, commit: &str, start: u64, len: u64, http: bool) -> VfsResult<Bytes> {
        let len = len.min(file.size.saturating_sub(start));
        if len == 0 {
            return Ok(Bytes::new());
        }
        let work = async {
            match &file.id {
                ContentId::Xet(hash) if !http => self.fetch_xet(hash, file.size, commit, start, len).await,
                ContentId::Xet(_) | ContentId::Lfs(_) | ContentId::Git(_) => Ok(self
                    .client
                    .read_range(&self.repo, commit, &file.remote_path, start, len)
                    .await?),
            }
        };
        let data = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| VfsError::Timeout(self.timeout))??;
        if data.len() as u64 != len {
            return Err(VfsError::ShortRead {
                offset: start,
                wanted: len,
                got: data.len() as u64,
            });
        }
        Ok(data)
    }

    async fn fetch_xet(&self, hash: &str, size: u64, commit: &str, start: u64, len: u64) -> VfsResult<Bytes> {
        let x = self.xet_group(commit).await?;
        let info = XetFileInfo::new(hash.to_string(), size);
        let mut stream = x
            .group
            .download_stream(info, Some(start..start + len))
            .await
            .map_err(|e| VfsError::Xet(e.to_string()))?;
        // Small ranges usually arrive as one piece: hand it on without copying. Large ones are
        // gathered in a pooled buffer.
        let mut first: Option<Bytes> = None;
        let mut buf = None;
        while let Some(piece) = stream.next().await.map_err(|e| VfsError::Xet(e.to_string()))? {
            if buf.is_none() {
                match first.take() {
                    None if len < POOLED_MIN => {
                        first = Some(piece);
                        continue;
                    }
                    earlier => {
                        let mut b = self.pool.acquire(len as usize);
                        if let Some(f) = earlier {
                            b.extend_from_slice(&f);
                        }
                        buf = Some(b);
                    }
                }
            }
            if let Some(b) = buf.as_mut() {
                b.extend_from_slice(&piece);
            }
        }
        Ok(match (first, buf) {
            (_, Some(b)) => b.freeze(),
            (Some(f), None) => f,
            (None, None) => Bytes::new(),
        })
    }
}
