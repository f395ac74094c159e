//! Fetching file content from the Hub: Xet-stored files through the xet crates (reconstruction plus
//! xorb ranges from the CAS), regular and plain-LFS files through HTTP Range on `/resolve/`.
//! Every fetch has a deadline, so a stalled connection fails with EIO instead of wedging a reader.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::try_join_all;
use xet::xet_session::{XetDownloadStreamGroup, XetFileInfo, XetSession, XetSessionBuilder};

use super::error::{VfsError, VfsResult};
use crate::buffer_pool::BufferPool;
use crate::hub_client::{HubClient, RepoRef};

/// Ranges at least this long are assembled in a pooled (prefaulted) buffer.
const POOLED_MIN: u64 = 1 << 20;

/// Smallest part a block is split into when the link is latency-bound.
pub const MIN_PART: u64 = 2 << 20;

/// Request latency (time to first byte) from which one more part per block pays off: a request
/// costs about this much before bytes flow, so splitting a block keeps more connections busy.
const LATENCY_PER_PART_US: u64 = 10_000;

/// The link's base latency: a slowly rising minimum of recent times to first byte (microseconds; 0
/// until measured). A minimum, because queueing on a busy machine inflates many samples but not
/// all, while a distant Hub makes every sample slow. It decides how many parallel parts a block is
/// fetched in: on a fast link one request per block is cheapest, on a slow one more connections for
/// the same bytes in flight is what raises throughput.
#[derive(Default)]
struct Latency(std::sync::atomic::AtomicU64);

impl Latency {
    fn record(&self, d: Duration) {
        use std::sync::atomic::Ordering;
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        let old = self.0.load(Ordering::Relaxed);
        let new = if old == 0 || us < old {
            us.max(1)
        } else {
            old + (us - old) / 64
        };
        self.0.store(new, Ordering::Relaxed);
    }

    /// Size of each part of a block of `len` bytes.
    fn part_size(&self, len: u64) -> u64 {
        let us = self.0.load(std::sync::atomic::Ordering::Relaxed);
        let parts = (us / LATENCY_PER_PART_US).clamp(1, len.div_ceil(MIN_PART).max(1));
        len.div_ceil(parts)
    }
}

/// HTTP ranges up to this size are short enough that their duration measures latency.
const LATENCY_PROBE_MAX: u64 = 256 << 10;

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
    /// sha256 of the content, known for LFS and Xet files (lets a rename re-commit it by reference).
    pub sha256: Option<String>,
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
    latency: Latency,
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
        ("client.ac_initial_download_concurrency", "32"),
        ("client.ac_min_download_concurrency", "16"),
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
            latency: Latency::default(),
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

    /// Exactly the bytes `[start, start + len)` of `file` (clamped to its size), for one random
    /// read: a small range of a Xet file costs one HTTP request.
    pub async fn fetch_exact(&self, file: &FileMeta, commit: &str, start: u64, len: u64) -> VfsResult<Bytes> {
        let len = len.min(file.size.saturating_sub(start));
        if len == 0 {
            return Ok(Bytes::new());
        }
        let pieces = self.pieces(file, commit, start, len, len <= XET_HTTP_RANGE_MAX).await?;
        Ok(self.gather(pieces, len))
    }

    /// A whole cache block, fetched in parallel parts sized by the measured latency (see `Latency`),
    /// gathered with one copy into a pooled buffer.
    pub async fn fetch_block(&self, file: &FileMeta, commit: &str, start: u64, len: u64) -> VfsResult<Bytes> {
        let len = len.min(file.size.saturating_sub(start));
        if len == 0 {
            return Ok(Bytes::new());
        }
        let end = start + len;
        let part = self.latency.part_size(len);
        let parts = (start..end)
            .step_by(part as usize)
            .map(|s| self.pieces(file, commit, s, part.min(end - s), false));
        let pieces: Vec<Bytes> = try_join_all(parts).await?.into_iter().flatten().collect();
        Ok(self.gather(pieces, len))
    }

    /// The bytes `[start, start + len)` in the pieces they arrived in (no copy), within the deadline.
    async fn pieces(&self, file: &FileMeta, commit: &str, start: u64, len: u64, http: bool) -> VfsResult<Vec<Bytes>> {
        let work = async {
            match &file.id {
                ContentId::Xet(hash) if !http => self.xet_pieces(hash, file.size, commit, start, len).await,
                ContentId::Xet(_) | ContentId::Lfs(_) | ContentId::Git(_) => {
                    let t = std::time::Instant::now();
                    let b = self
                        .client
                        .read_range(&self.repo, commit, &file.remote_path, start, len)
                        .await?;
                    if len <= LATENCY_PROBE_MAX {
                        self.latency.record(t.elapsed());
                    }
                    Ok(vec![b])
                }
            }
        };
        let pieces = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| VfsError::Timeout(self.timeout))??;
        let got: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        if got != len {
            return Err(VfsError::ShortRead {
                offset: start,
                wanted: len,
                got,
            });
        }
        Ok(pieces)
    }

    /// One `Bytes` out of pieces totalling `len`: a lone small piece as it is, anything else copied
    /// once into a pooled (prefaulted) buffer.
    fn gather(&self, mut pieces: Vec<Bytes>, len: u64) -> Bytes {
        if pieces.len() == 1 && len < POOLED_MIN {
            return pieces.pop().unwrap_or_default();
        }
        let mut buf = self.pool.acquire(len as usize);
        for p in &pieces {
            buf.extend_from_slice(p);
        }
        buf.freeze()
    }

    async fn xet_pieces(&self, hash: &str, size: u64, commit: &str, start: u64, len: u64) -> VfsResult<Vec<Bytes>> {
        let x = self.xet_group(commit).await?;
        let info = XetFileInfo::new(hash.to_string(), size);
        let t = std::time::Instant::now();
        let mut stream = x
            .group
            .download_stream(info, Some(start..start + len))
            .await
            .map_err(|e| VfsError::Xet(e.to_string()))?;
        let mut pieces = Vec::new();
        while let Some(piece) = stream.next().await.map_err(|e| VfsError::Xet(e.to_string()))? {
            if pieces.is_empty() {
                self.latency.record(t.elapsed());
            }
            pieces.push(piece);
        }
        Ok(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_follow_latency() {
        let l = Latency::default();
        assert_eq!(l.part_size(8 << 20), 8 << 20, "unmeasured: one request per block");
        l.record(Duration::from_millis(2));
        assert_eq!(l.part_size(8 << 20), 8 << 20, "loopback: one request per block");
        let l = Latency::default();
        l.record(Duration::from_millis(60));
        assert_eq!(
            l.part_size(8 << 20),
            MIN_PART,
            "30 ms per hop: as many parts as allowed"
        );
        let l = Latency::default();
        l.record(Duration::from_millis(25));
        assert_eq!(l.part_size(8 << 20), 4 << 20, "in between: two parts");
        assert_eq!(l.part_size(1 << 20), 1 << 20, "a small block stays whole");
        let l = Latency::default();
        l.record(Duration::from_millis(1));
        for _ in 0..10 {
            l.record(Duration::from_millis(40));
        }
        assert_eq!(l.part_size(8 << 20), 8 << 20, "queueing spikes do not hide a fast link");
    }
}
