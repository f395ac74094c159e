//! Xet reads driven by hubfs itself: one reconstruction request for a range of a file, then the
//! xorb byte ranges it names fetched in parallel parts and decoded straight into pooled block
//! buffers. The xet crates' download stream does the same in a general way, but it cannot be told
//! how to split a range into requests or how many to keep in flight, buffers every term in a fresh
//! allocation and hands the bytes over in pieces that cost one more copy; a mount that reads
//! through a prefetch window wants all three decided by the reader.
//!
//! Wire protocol (as the xet crates speak it): `GET {cas}/v2/reconstructions/{file hash}` with
//! `Range: bytes=a-b` and the CAS token answers the file's terms (xorb, chunk range, unpacked
//! length) and, per xorb, presigned URLs with the byte ranges that hold those chunks. A single
//! `Range` header on such a URL selects bytes within it, as on a CDN. Xorb bytes are a sequence
//! of chunks, each an 8-byte header (compressed length, scheme, uncompressed length) and its data.

mod batch;
mod body;

pub use batch::Batch;
pub use body::BodyBuffers;

use std::borrow::Cow;
use std::time::{Duration, Instant};

use bytes::Bytes;
use xet_client::cas_types::QueryReconstructionResponseV2;
use xet_core_structures::xorb_object::{CompressionScheme, XORB_CHUNK_HEADER_LENGTH, parse_chunk_header};

use crate::chunk_store::buffer_pool::{BufferPool, Lease};
use crate::hub_client::HubClient;
use crate::hub_client::windows::{Bucket, Windows};
use crate::vfs::error::{VfsError, VfsResult};
use body::{Body, LARGE_PIECE};

/// Outputs at least this long are assembled in pooled buffers.
const POOLED_MIN: u64 = 1 << 20;

/// Where and how to reach the CAS.
pub struct Cas {
    pub url: String,
    pub token: String,
}

/// Why a fetch failed; `Expired` asks the caller for a new reconstruction (fresh presigned URLs);
/// `Status` is a 4xx answer the caller may know what to do with (a 404 of the batch route);
/// `Unreachable`: no connection to the CAS (or its xorb URLs) after a few tries, so the caller
/// asks the Hub for a fresh token, and with it the CAS address, which may have moved.
pub(super) enum FetchError {
    Expired,
    Status(u16, String),
    Unreachable(String),
    Fatal(VfsError),
}

/// Connection failures in a row after which a CAS request hands back `Unreachable`.
const UNREACHABLE_AFTER: u32 = 2;

impl FetchError {
    /// As a `VfsError`, for callers with no special case.
    pub(super) fn into_vfs(self) -> VfsError {
        match self {
            FetchError::Expired => VfsError::Xet("CAS token or URL refused".to_string()),
            FetchError::Status(s, text) => VfsError::Xet(format!("CAS answered {s}: {text}")),
            FetchError::Unreachable(why) => VfsError::Xet(format!("CAS unreachable: {why}")),
            FetchError::Fatal(e) => e,
        }
    }
}

impl From<VfsError> for FetchError {
    fn from(e: VfsError) -> Self {
        FetchError::Fatal(e)
    }
}

/// One xorb byte range to download: `[start, end]` (inclusive, as the CAS states it) of `url`,
/// holding chunks from `first_chunk` on.
struct Fetch {
    url: String,
    start: u64,
    end: u64,
    first_chunk: u32,
}

/// One term of the file: `take` chunks of fetch `fetch`, after skipping `skip` chunks of it.
struct Step {
    fetch: usize,
    skip: u32,
    take: u32,
    unpacked: u64,
}

/// The HTTP side: the Hub client's connection pool and retry settings.
pub struct Fetcher {
    pub client: reqwest::Client,
    pub attempt_timeout: Duration,
    pub max_retries: u32,
    /// How long a request keeps waiting for the CAS's window or through its outage.
    pub patience: Duration,
    /// The Hub client's request windows; CAS API answers go in its `cas` bucket.
    pub windows: std::sync::Arc<Windows>,
    pub pool: BufferPool,
    /// Buffers for bodies copied whole before they are decoded (see `body`).
    pub bodies: BodyBuffers,
    /// Set by the owner once its latency measure says the link is fast: bodies are then copied
    /// only where they arrive in small pieces (see `Body`).
    pub fast_link: std::sync::atomic::AtomicBool,
}

impl Fetcher {
    /// Bytes `span` of Xet file `hash` (clamped to the file) as consecutive
    /// buffers of `piece` bytes (the last one shorter), xorb ranges fetched in parts of about
    /// `part(len)` bytes. `on_first_byte` gets each request's time to first byte.
    ///
    /// `part` is asked once the reconstruction has answered: that answer's time is the mount's
    /// first measure of the link, so the very first loads of a distant Hub are already split
    /// (asked before, the first three blocks of a cold read at 30 ms each went as one 8 MiB
    /// request).
    pub async fn range(
        &self,
        cas: &Cas,
        hash: &str,
        span: std::ops::Range<u64>,
        part: &(dyn Fn(u64) -> u64 + Sync),
        piece: u64,
        on_first_byte: &(dyn Fn(Duration) + Sync),
    ) -> Result<Vec<Bytes>, FetchError> {
        let (start, len) = (span.start, span.end.saturating_sub(span.start));
        // A presigned URL may expire between the reconstruction and the fetch: one fresh try.
        for _ in 0..2 {
            match self.try_range(cas, hash, start, len, part, piece, on_first_byte).await {
                Ok(v) => return Ok(v),
                Err(FetchError::Expired) => {
                    tracing::debug!(hash, start, "xorb URL refused; asking for a new reconstruction")
                }
                Err(e @ FetchError::Unreachable(_)) => return Err(e),
                Err(e @ (FetchError::Fatal(_) | FetchError::Status(..))) => {
                    return Err(FetchError::Fatal(e.into_vfs()));
                }
            }
        }
        Err(FetchError::Fatal(VfsError::Xet(
            "xorb URLs refused twice in a row".to_string(),
        )))
    }

    #[allow(clippy::too_many_arguments)]
    async fn try_range(
        &self,
        cas: &Cas,
        hash: &str,
        start: u64,
        len: u64,
        part: &(dyn Fn(u64) -> u64 + Sync),
        piece: u64,
        on_first_byte: &(dyn Fn(Duration) + Sync),
    ) -> Result<Vec<Bytes>, FetchError> {
        let Some(recon) = self.reconstruction(cas, hash, start, len, on_first_byte).await? else {
            return Ok(Vec::new());
        };
        let part = part(len);
        // The buffers this load takes, announced so that buffers given back meanwhile wait for it
        // (the caller admitted it with room for them).
        let fast = self.fast_link.load(std::sync::atomic::Ordering::Relaxed);
        let lease = self.bodies.lease(len, part, fast);
        let lease = &lease;
        let (fetches, steps) = plan(&recon)?;
        let unpacked: u64 = steps.iter().map(|s| s.unpacked).sum();
        let len = len.min(unpacked.saturating_sub(recon.offset_into_first_range));

        // Every fetch split into parts, all requested at once; the caller bounds how many ranges
        // are in flight.
        let parts: Vec<(usize, u64, u64)> = fetches
            .iter()
            .enumerate()
            .flat_map(|(i, f)| split(f.start, f.end, part).map(move |(a, b)| (i, a, b)))
            .collect();
        // Built up front: a stream holding these closures across awaits would not be `Send`.
        let requests: Vec<_> = parts
            .iter()
            .map(|&(i, a, b)| self.get_part(&fetches[i].url, a, b, Some(lease), on_first_byte))
            .collect();
        let answers = futures::future::try_join_all(requests).await?;
        let mut bodies: Vec<Vec<Bytes>> = vec![Vec::new(); fetches.len()];
        for (&(i, _, _), pieces) in parts.iter().zip(answers) {
            bodies[i].extend(pieces);
        }

        let mut out = Output::new(&self.pool, recon.offset_into_first_range, len, piece);
        for s in &steps {
            decode(&bodies[s.fetch], s, &mut out)?;
        }
        Ok(out.finish(start)?)
    }

    /// The reconstruction of `[start, start + len)`; `None` past the end of the file.
    async fn reconstruction(
        &self,
        cas: &Cas,
        hash: &str,
        start: u64,
        len: u64,
        on_first_byte: &(dyn Fn(Duration) + Sync),
    ) -> Result<Option<QueryReconstructionResponseV2>, FetchError> {
        let url = format!("{}/v2/reconstructions/{hash}", cas.url.trim_end_matches('/'));
        let range = format!("bytes={start}-{}", start + len.max(1) - 1);
        let (status, body) = self
            .get(&url, Some(&cas.token), &range, None, on_first_byte, 64 << 20)
            .await?;
        if status == 416 {
            return Ok(None);
        }
        let body: Vec<u8> = body.iter().flat_map(|b| b.iter().copied()).collect();
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| FetchError::Fatal(VfsError::Xet(format!("reconstruction of {hash}: {e}"))))
    }

    /// Bytes `[a, b]` of a presigned xorb URL, in pieces (see `Body`).
    async fn get_part(
        &self,
        url: &str,
        a: u64,
        b: u64,
        lease: Option<&Lease>,
        on_first_byte: &(dyn Fn(Duration) + Sync),
    ) -> Result<Vec<Bytes>, FetchError> {
        let want = b - a + 1;
        let (status, pieces) = self
            .get(url, None, &format!("bytes={a}-{b}"), lease, on_first_byte, want)
            .await?;
        let got: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        if !matches!(status, 200 | 206) || got != want {
            return Err(FetchError::Fatal(VfsError::Xet(format!(
                "xorb range {a}-{b}: status {status}, {got} bytes"
            ))));
        }
        Ok(pieces)
    }

    /// A GET with a Range header (see `send`).
    async fn get(
        &self,
        url: &str,
        bearer: Option<&str>,
        range: &str,
        lease: Option<&Lease>,
        on_first_byte: &(dyn Fn(Duration) + Sync),
        cap: u64,
    ) -> Result<(u16, Vec<Bytes>), FetchError> {
        let make = || {
            let rb = self
                .client
                .get(url)
                .header(reqwest::header::RANGE, range)
                .header(reqwest::header::ACCEPT_ENCODING, "identity");
            match bearer {
                Some(tok) => rb.bearer_auth(tok),
                None => rb,
            }
        };
        self.send(&make, bearer.is_some(), lease, on_first_byte, cap).await
    }

    /// A request built by `make`, retried on transport errors, timeouts, 429 and 5xx (waiting as
    /// long as a 429 asks); the status and the body (at most `cap` bytes) in pieces (see `Body`).
    /// 401/403 mean the URL or the token went stale; other 4xx but 416 are fatal. `api`: a CAS API
    /// call (with the token), not a presigned xorb fetch (for the metrics).
    pub(super) async fn send(
        &self,
        make: &(dyn Fn() -> reqwest::RequestBuilder + Sync),
        api: bool,
        lease: Option<&Lease>,
        on_first_byte: &(dyn Fn(Duration) + Sync),
        cap: u64,
    ) -> Result<(u16, Vec<Bytes>), FetchError> {
        let mut attempt = 0u32;
        let mut unreachable = 0u32;
        let started = Instant::now();
        loop {
            // Presigned xorb URLs are the CDN's, outside the CAS's windows.
            if api && let Err(r) = self.windows.admit(Bucket::Cas, self.patience, started).await {
                return Err(FetchError::Fatal(VfsError::Xet(format!("CAS request not sent: {r}"))));
            }
            attempt += 1;
            let t = Instant::now();
            let once = async {
                let mut resp = make().send().await?;
                on_first_byte(t.elapsed());
                let status = resp.status().as_u16();
                let observed = api && self.windows.observe(Bucket::Cas, status, resp.headers()).is_some();
                let wait = HubClient::retry_wait(resp.headers());
                let expect = resp.content_length().unwrap_or(0).min(cap.saturating_add(1));
                let fast = self.fast_link.load(std::sync::atomic::Ordering::Relaxed);
                let mut body = Body::new(expect, if fast { LARGE_PIECE } else { usize::MAX }, &self.bodies, lease);
                while let Some(c) = resp.chunk().await? {
                    body.push(c);
                    if body.got > cap {
                        break;
                    }
                }
                Ok::<_, reqwest::Error>((status, (wait, observed), body.pieces()))
            };
            let r = tokio::time::timeout(self.attempt_timeout, once).await;
            crate::metrics::xet_attempt(api, &r, t.elapsed());
            let (why, wait, gated) = match r {
                Ok(Ok((s, _, body))) if s < 400 || s == 416 => return Ok((s, body)),
                Ok(Ok((401 | 403, _, _))) => return Err(FetchError::Expired),
                Ok(Ok((s, _, body))) if s != 429 && s < 500 => {
                    let text =
                        String::from_utf8_lossy(body.first().map_or(&[][..], |b| &b[..b.len().min(200)])).into_owned();
                    return Err(FetchError::Status(s, text));
                }
                Ok(Ok((s, (wait, observed), _))) => {
                    unreachable = 0;
                    (
                        format!("status {s}"),
                        wait,
                        s == 429 && observed && !self.patience.is_zero(),
                    )
                }
                Ok(Err(e)) => {
                    let why = format!("network error: {e}");
                    unreachable = if e.is_connect() { unreachable + 1 } else { 0 };
                    // With patience, a CAS that cannot be reached may have moved: the caller asks
                    // the Hub where it is now.
                    if unreachable >= UNREACHABLE_AFTER && !self.patience.is_zero() {
                        return Err(FetchError::Unreachable(why));
                    }
                    (why, None, false)
                }
                Err(_) => (format!("timed out after {:?}", self.attempt_timeout), None, false),
            };
            let delay =
                HubClient::retry_delay(attempt, self.max_retries, wait, gated, self.patience, started.elapsed());
            let Some(delay) = delay else {
                return Err(FetchError::Fatal(VfsError::Xet(format!(
                    "CAS request failed after {attempt} attempts: {why}"
                ))));
            };
            tracing::debug!(attempt, error = %why, "CAS request failed, retrying");
            crate::metrics::xet_retry(api, delay, wait.is_some());
            tokio::time::sleep(delay).await;
        }
    }
}

/// Bytes `[start, end]` cut into near-equal parts of about `part` bytes each (inclusive ranges).
/// A block's xorb range is its bytes plus the chunks' headers, always a little over a whole
/// number of parts: cut at `part`, that remainder cost a request of its own (a fifth of the
/// requests at 30 ms), so a remainder up to a sixteenth of a part is spread over the others.
/// Nothing for a range the CAS gave backwards (its decode then fails as short, not a panic).
fn split(start: u64, end: u64, part: u64) -> impl Iterator<Item = (u64, u64)> {
    let len = end.saturating_add(1).saturating_sub(start);
    let part = part.max(1);
    let mut n = len.div_ceil(part);
    if n > 1 && len - (n - 1) * part <= part / 16 {
        n -= 1;
    }
    let each = len.div_ceil(n.max(1));
    (0..n)
        .map(move |i| (start + i * each, (start + (i + 1) * each - 1).min(end)))
        .filter(move |&(a, _)| a <= end)
}

/// The fetches a reconstruction calls for (each xorb range once, however many terms use it) and
/// the terms in file order.
fn plan(r: &QueryReconstructionResponseV2) -> Result<(Vec<Fetch>, Vec<Step>), FetchError> {
    let mut fetches: Vec<Fetch> = Vec::new();
    let mut index: std::collections::HashMap<(String, usize, usize), usize> = std::collections::HashMap::new();
    let mut steps = Vec::with_capacity(r.terms.len());
    for t in &r.terms {
        let key_hash = t.hash.to_string();
        let entries = r.xorbs.get(&t.hash).ok_or_else(|| {
            FetchError::Fatal(VfsError::Xet(format!(
                "reconstruction names xorb {key_hash} without a URL"
            )))
        })?;
        let found = entries.iter().enumerate().find_map(|(ei, e)| {
            e.ranges
                .iter()
                .position(|d| d.chunks.start <= t.range.start && t.range.end <= d.chunks.end)
                .map(|ri| (ei, ri))
        });
        let Some((ei, ri)) = found else {
            return Err(FetchError::Fatal(VfsError::Xet(format!(
                "no xorb range of {key_hash} holds chunks {}-{}",
                t.range.start, t.range.end
            ))));
        };
        let d = &entries[ei].ranges[ri];
        let fetch = *index.entry((key_hash, ei, ri)).or_insert_with(|| {
            fetches.push(Fetch {
                url: entries[ei].url.clone(),
                start: d.bytes.start,
                end: d.bytes.end,
                first_chunk: d.chunks.start,
            });
            fetches.len() - 1
        });
        steps.push(Step {
            fetch,
            skip: t.range.start - fetches[fetch].first_chunk,
            take: t.range.end - t.range.start,
            unpacked: t.unpacked_length as u64,
        });
    }
    Ok((fetches, steps))
}

/// A read position over the pieces of a downloaded xorb range.
struct Cursor<'a> {
    pieces: &'a [Bytes],
    idx: usize,
    off: usize,
}

impl<'a> Cursor<'a> {
    /// The next `n` bytes: borrowed when they lie in one piece, gathered otherwise.
    fn take(&mut self, mut n: usize) -> Option<Cow<'a, [u8]>> {
        while self.idx < self.pieces.len() && self.off == self.pieces[self.idx].len() {
            self.idx += 1;
            self.off = 0;
        }
        let p = self.pieces.get(self.idx)?;
        if self.off + n <= p.len() {
            let s = &p[self.off..self.off + n];
            self.off += n;
            return Some(Cow::Borrowed(s));
        }
        let mut v = Vec::with_capacity(n);
        while n > 0 {
            let p = self.pieces.get(self.idx)?;
            let k = (p.len() - self.off).min(n);
            v.extend_from_slice(&p[self.off..self.off + k]);
            self.off += k;
            n -= k;
            if self.off == p.len() {
                self.idx += 1;
                self.off = 0;
            }
        }
        Some(Cow::Owned(v))
    }
}

/// Decodes one term's chunks into `out`, checking the term's unpacked length.
fn decode(pieces: &[Bytes], s: &Step, out: &mut Output) -> VfsResult<()> {
    let bad = |why: &str| VfsError::Xet(format!("malformed xorb data: {why}"));
    let mut cur = Cursor { pieces, idx: 0, off: 0 };
    let mut written = 0u64;
    for i in 0..s.skip + s.take {
        let head = cur
            .take(XORB_CHUNK_HEADER_LENGTH)
            .ok_or_else(|| bad("truncated chunk header"))?;
        let mut h = [0u8; XORB_CHUNK_HEADER_LENGTH];
        h.copy_from_slice(&head);
        let h = parse_chunk_header(h).map_err(|e| bad(&e.to_string()))?;
        let data = cur
            .take(h.get_compressed_length() as usize)
            .ok_or_else(|| bad("truncated chunk"))?;
        if i < s.skip {
            continue;
        }
        let scheme = h.get_compression_scheme().map_err(|e| bad(&e.to_string()))?;
        let plain = match scheme {
            CompressionScheme::None => data,
            other => Cow::Owned(
                other
                    .decompress_from_slice(&data)
                    .map_err(|e| bad(&e.to_string()))?
                    .into_owned(),
            ),
        };
        if plain.len() != h.get_uncompressed_length() as usize {
            return Err(bad("chunk length differs from its header"));
        }
        written += plain.len() as u64;
        out.write(&plain);
    }
    if written != s.unpacked {
        return Err(bad("term length differs from the reconstruction"));
    }
    Ok(())
}

/// The decoded bytes of a range: skips what precedes it, cuts it into `piece`-byte buffers.
struct Output<'p> {
    pool: &'p BufferPool,
    skip: u64,
    left: u64,
    piece: u64,
    done: Vec<Bytes>,
    cur: Option<Buf>,
}

enum Buf {
    Pooled(crate::chunk_store::buffer_pool::PooledBuf),
    Plain(Vec<u8>),
}

impl Buf {
    fn len(&self) -> usize {
        match self {
            Buf::Pooled(b) => b.len(),
            Buf::Plain(v) => v.len(),
        }
    }

    fn push(&mut self, d: &[u8]) {
        match self {
            Buf::Pooled(b) => b.extend_from_slice(d),
            Buf::Plain(v) => v.extend_from_slice(d),
        }
    }

    fn freeze(self) -> Bytes {
        match self {
            Buf::Pooled(b) => b.freeze(),
            Buf::Plain(v) => Bytes::from(v),
        }
    }
}

impl<'p> Output<'p> {
    fn new(pool: &'p BufferPool, skip: u64, len: u64, piece: u64) -> Self {
        Output {
            pool,
            skip,
            left: len,
            piece: piece.max(1),
            done: Vec::new(),
            cur: None,
        }
    }

    fn write(&mut self, mut d: &[u8]) {
        if self.skip > 0 {
            let s = self.skip.min(d.len() as u64);
            d = &d[s as usize..];
            self.skip -= s;
        }
        while !d.is_empty() && self.left > 0 {
            let cur = match self.cur.as_mut() {
                Some(c) => c,
                None => {
                    let want = self.piece.min(self.left);
                    let b = if want >= POOLED_MIN {
                        Buf::Pooled(self.pool.acquire(want as usize))
                    } else {
                        Buf::Plain(Vec::with_capacity(want as usize))
                    };
                    self.cur.insert(b)
                }
            };
            let room = self.piece - cur.len() as u64;
            let n = room.min(d.len() as u64).min(self.left) as usize;
            cur.push(&d[..n]);
            d = &d[n..];
            self.left -= n as u64;
            if cur.len() as u64 == self.piece
                && let Some(full) = self.cur.take()
            {
                self.done.push(full.freeze());
            }
        }
    }

    fn finish(mut self, start: u64) -> VfsResult<Vec<Bytes>> {
        if let Some(c) = self.cur.take() {
            self.done.push(c.freeze());
        }
        if self.left > 0 {
            let got: u64 = self.done.iter().map(|b| b.len() as u64).sum();
            return Err(VfsError::ShortRead {
                offset: start,
                wanted: got + self.left,
                got,
            });
        }
        Ok(self.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        let h = xet_core_structures::xorb_object::XorbChunkHeader::new(
            CompressionScheme::None,
            data.len() as u32,
            data.len() as u32,
        );
        xet_core_structures::xorb_object::write_chunk_header(&mut v, &h).unwrap();
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn decodes_across_piece_boundaries_and_skips_chunks() {
        let mut raw = Vec::new();
        for i in 0..4u8 {
            raw.extend(chunk(&[i; 100]));
        }
        // Cut the xorb bytes at odd places, as parts and network reads do.
        let pieces: Vec<Bytes> = raw.chunks(37).map(Bytes::copy_from_slice).collect();
        let pool = BufferPool::new(1 << 20, 1);
        let mut out = Output::new(&pool, 10, 250, 64);
        let step = Step {
            fetch: 0,
            skip: 1,
            take: 3,
            unpacked: 300,
        };
        decode(&pieces, &step, &mut out).unwrap();
        let bufs = out.finish(0).unwrap();
        assert_eq!(bufs.iter().map(|b| b.len()).collect::<Vec<_>>(), vec![64, 64, 64, 58]);
        let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        let mut want = vec![1u8; 90];
        want.extend([2u8; 100]);
        want.extend([3u8; 60]);
        assert_eq!(all, want);
    }

    #[test]
    fn fetches_are_split_evenly_without_a_sliver() {
        let parts = |a, b, p| split(a, b, p).collect::<Vec<_>>();
        let mib = 1u64 << 20;
        // A block's 8 MiB and 1 KiB of chunk headers, at 2 MiB parts: four parts, not five.
        let got = parts(100, 100 + 8 * mib + 1023, 2 * mib);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], (100, 100 + 2 * mib + 255));
        assert_eq!(got[3].1, 100 + 8 * mib + 1023);
        for w in got.windows(2) {
            assert_eq!(w[0].1 + 1, w[1].0, "contiguous");
        }
        assert!(
            got.iter().all(|&(a, b)| b - a < 2 * mib + 2 * mib / 16),
            "within a pooled body buffer"
        );
        // A remainder past a sixteenth is a part of its own, and all parts shrink to match.
        let got = parts(0, 5 * mib - 1, 2 * mib);
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|&(a, b)| b - a + 1 >= mib), "{got:?}");
        assert_eq!(parts(0, 0, 2 * mib), vec![(0, 0)]);
        assert_eq!(parts(7, 9, 1), vec![(7, 7), (8, 8), (9, 9)]);
        assert_eq!(parts(0, 99, 2 * mib), vec![(0, 99)]);
        assert_eq!(parts(10, 5, 2 * mib), vec![], "backwards: nothing");
        assert_eq!(parts(0, 0, 1), vec![(0, 0)]);
    }

    #[test]
    fn a_wrong_term_length_is_an_error() {
        let pieces = vec![Bytes::from(chunk(&[7; 10]))];
        let pool = BufferPool::new(1 << 20, 1);
        let mut out = Output::new(&pool, 0, 10, 64);
        let step = Step {
            fetch: 0,
            skip: 0,
            take: 1,
            unpacked: 11,
        };
        assert!(decode(&pieces, &step, &mut out).is_err());
        let mut out = Output::new(&pool, 0, 20, 64);
        let step = Step { unpacked: 10, ..step };
        decode(&pieces, &step, &mut out).unwrap();
        assert!(matches!(out.finish(0), Err(VfsError::ShortRead { got: 10, .. })));
    }

    #[test]
    fn compressed_chunks_are_decompressed() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 7) as u8).collect();
        let mut raw = Vec::new();
        let n = xet_core_structures::xorb_object::serialize_chunk(&data, &mut raw, CompressionScheme::LZ4).unwrap();
        assert!(n < data.len(), "the test data must really compress");
        let pieces: Vec<Bytes> = raw.chunks(100).map(Bytes::copy_from_slice).collect();
        let pool = BufferPool::new(1 << 20, 1);
        let mut out = Output::new(&pool, 0, 5000, 1 << 20);
        let step = Step {
            fetch: 0,
            skip: 0,
            take: 1,
            unpacked: 5000,
        };
        decode(&pieces, &step, &mut out).unwrap();
        assert_eq!(&out.finish(0).unwrap()[0][..], &data[..]);
    }

    #[test]
    fn terms_sharing_a_xorb_range_fetch_it_once() {
        let hash = "a".repeat(64);
        let r: QueryReconstructionResponseV2 = serde_json::from_value(serde_json::json!({
            "offset_into_first_range": 5,
            "terms": [
                {"hash": hash, "unpacked_length": 300, "range": {"start": 0, "end": 3}},
                {"hash": hash, "unpacked_length": 100, "range": {"start": 1, "end": 2}},
            ],
            "xorbs": {
                hash.clone(): [{"url": "http://cas/x", "ranges": [
                    {"chunks": {"start": 0, "end": 3}, "bytes": {"start": 0, "end": 323}}
                ]}]
            }
        }))
        .unwrap();
        let (fetches, steps) = plan(&r).map_err(|_| "plan").unwrap();
        assert_eq!(fetches.len(), 1);
        assert_eq!((fetches[0].start, fetches[0].end), (0, 323));
        assert_eq!((steps[1].fetch, steps[1].skip, steps[1].take), (0, 1, 1));
        // Three chunks of 100 bytes: the file is chunks 0..3 then chunk 1 again, from byte 5 on.
        let mut raw = Vec::new();
        for i in 0..3u8 {
            raw.extend(chunk(&[i; 100]));
        }
        let pieces = vec![Bytes::from(raw)];
        let pool = BufferPool::new(1 << 20, 1);
        let mut out = Output::new(&pool, 5, 395, 1 << 20);
        for s in &steps {
            decode(&pieces, s, &mut out).unwrap();
        }
        let got = out.finish(0).unwrap();
        let mut want = vec![0u8; 95];
        want.extend([1u8; 100]);
        want.extend([2u8; 100]);
        want.extend([1u8; 100]);
        assert_eq!(&got[0][..], &want[..]);
    }
}
