//! Many small Xet files in few requests: one batch reconstruction (`POST /v1/reconstructions`, as
//! the CAS API documentation gives it) names every file's terms and the xorb byte ranges holding
//! them; ranges of one URL that touch or nearly touch are joined into one ranged GET, so files
//! uploaded together (side by side in a xorb) cost one fetch between them, and each file is then
//! decoded out of the joined bytes. A file the answer leaves out is simply not returned: the
//! caller reads it the usual way.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use xet_client::cas_types::{BatchQueryReconstructionResponse, XorbReconstructionFetchInfo};

use super::{Cas, FetchError, Fetcher, Output, Step, decode};
use crate::vfs::error::{VfsError, VfsResult};

/// Ranges of one URL at most this far apart (bytes between them) are fetched as one, as long as a
/// joined fetch holds no more gap than wanted bytes. Files uploaded together sit in a xorb in upload
/// order, which is not the listing's, so a batch's ranges are near each other but rarely touch: a
/// gap costs bytes of files outside the batch (fetched again by a later batch), a split costs a
/// round trip; the 2× cap bounds the first.
const JOIN_GAP: u64 = 64 << 10;

/// Largest reconstruction answer read (a thousand small files answer in well under a MiB).
const ANSWER_CAP: u64 = 32 << 20;

/// What a batch came back with.
pub enum Batch {
    /// The CAS has no batch route (404/405/501: an older server); ask file by file.
    Unsupported,
    /// Content by Xet hash, for the files the CAS answered.
    Files(HashMap<String, Bytes>),
    /// The CAS could not be reached: ask the Hub where it is now, then file by file.
    Unreachable(String),
}

/// One joined GET: bytes `[start, end]` of `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Joined {
    url: String,
    start: u64,
    end: u64,
    /// Bytes of the fetch that some range wants (the rest is gaps).
    wanted: u64,
}

/// Where one fetch-info range of a xorb landed: in joined fetch `joined`, from byte `offset` on.
struct Placed {
    info: XorbReconstructionFetchInfo,
    joined: usize,
    offset: u64,
}

impl Fetcher {
    /// The whole content of each `(hash, size)` of `files`: one batch reconstruction, then one
    /// ranged GET per joined xorb range, all in parallel.
    pub async fn batch(
        &self,
        cas: &Cas,
        files: &[(String, u64)],
        on_first_byte: &(dyn Fn(Duration) + Sync),
    ) -> VfsResult<Batch> {
        let url = format!("{}/v1/reconstructions", cas.url.trim_end_matches('/'));
        let keys: Vec<_> = files
            .iter()
            .map(|(h, _)| json!({"prefix": "default", "hash": h}))
            .collect();
        let body = serde_json::to_vec(&keys).map_err(|e| VfsError::Xet(e.to_string()))?;
        let make = || {
            self.client
                .post(&url)
                .bearer_auth(&cas.token)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
        };
        let pieces = match self.send(&make, true, None, on_first_byte, ANSWER_CAP).await {
            Ok((_, pieces)) => pieces,
            Err(FetchError::Status(404 | 405 | 501, _)) => return Ok(Batch::Unsupported),
            Err(FetchError::Unreachable(why)) => return Ok(Batch::Unreachable(why)),
            Err(e) => return Err(e.into_vfs()),
        };
        let answer: Vec<u8> = pieces.iter().flat_map(|b| b.iter().copied()).collect();
        let answer: BatchQueryReconstructionResponse =
            serde_json::from_slice(&answer).map_err(|e| VfsError::Xet(format!("batch reconstruction answer: {e}")))?;

        let (joined, placed) = join_ranges(&answer);
        let gets: Vec<_> = joined
            .iter()
            .map(|j| self.get_part(&j.url, j.start, j.end, None, on_first_byte))
            .collect();
        let bodies: Vec<Bytes> = futures::future::try_join_all(gets)
            .await
            .map_err(FetchError::into_vfs)?
            .into_iter()
            .map(concat)
            .collect();
        tracing::debug!(
            files = files.len(),
            answered = answer.files.len(),
            fetches = joined.len(),
            "batch of small Xet files"
        );

        let answered: HashMap<String, &Vec<_>> = answer.files.iter().map(|(k, t)| (k.to_string(), t)).collect();
        let mut out = HashMap::with_capacity(files.len());
        for (hash, size) in files {
            let Some(terms) = answered.get(hash) else {
                continue;
            };
            match assemble(&self.pool, terms, &placed, &bodies, *size) {
                Ok(b) => {
                    out.insert(hash.clone(), b);
                }
                Err(e) => tracing::debug!(hash, error = %e, "batch answer unusable for this file"),
            }
        }
        Ok(Batch::Files(out))
    }
}

/// Pieces as one buffer (one copy at most; small files come in few pieces).
fn concat(mut pieces: Vec<Bytes>) -> Bytes {
    if pieces.len() == 1 {
        return pieces.pop().unwrap_or_default();
    }
    let mut v = Vec::with_capacity(pieces.iter().map(|p| p.len()).sum());
    for p in &pieces {
        v.extend_from_slice(p);
    }
    Bytes::from(v)
}

/// Every distinct fetch range of the answer (the same range may be listed once per file), ranges
/// of one URL joined where they touch (or are at most `JOIN_GAP` apart).
fn join_ranges(answer: &BatchQueryReconstructionResponse) -> (Vec<Joined>, HashMap<String, Vec<Placed>>) {
    let mut all: Vec<(String, XorbReconstructionFetchInfo)> = Vec::new();
    for (xorb, infos) in &answer.fetch_info {
        for i in infos {
            all.push((xorb.to_string(), i.clone()));
        }
    }
    all.sort_by(|a, b| {
        (&a.1.url, a.1.url_range.start, a.1.url_range.end).cmp(&(&b.1.url, b.1.url_range.start, b.1.url_range.end))
    });
    all.dedup_by(|a, b| a.0 == b.0 && a.1.url == b.1.url && a.1.url_range == b.1.url_range && a.1.range == b.1.range);
    let mut joined: Vec<Joined> = Vec::new();
    let mut placed: HashMap<String, Vec<Placed>> = HashMap::new();
    for (xorb, info) in all {
        let (s, e) = (info.url_range.start, info.url_range.end);
        let fits = joined.last().is_some_and(|j| {
            let new = e.saturating_sub(j.end);
            let wanted = j.wanted + new.min(e - s + 1);
            j.url == info.url && s <= j.end.saturating_add(1 + JOIN_GAP) && e.max(j.end) - j.start < 2 * wanted
        });
        match joined.last_mut() {
            Some(j) if fits => {
                j.wanted += e.saturating_sub(j.end).min(e - s + 1);
                j.end = j.end.max(e);
            }
            _ => joined.push(Joined {
                url: info.url.clone(),
                start: s,
                end: e,
                wanted: e - s + 1,
            }),
        }
        let idx = joined.len() - 1;
        let offset = s - joined[idx].start;
        placed.entry(xorb).or_default().push(Placed {
            info,
            joined: idx,
            offset,
        });
    }
    (joined, placed)
}

/// One file out of the joined bodies: each term decoded from the fetch range holding its chunks.
fn assemble(
    pool: &crate::chunk_store::buffer_pool::BufferPool,
    terms: &[xet_client::cas_types::XorbReconstructionTerm],
    placed: &HashMap<String, Vec<Placed>>,
    bodies: &[Bytes],
    size: u64,
) -> VfsResult<Bytes> {
    let mut out = Output::new(pool, 0, size, size.max(1));
    for t in terms {
        let xorb = t.hash.to_string();
        let p = placed
            .get(&xorb)
            .and_then(|ps| {
                ps.iter()
                    .find(|p| p.info.range.start <= t.range.start && t.range.end <= p.info.range.end)
            })
            .ok_or_else(|| VfsError::Xet(format!("no fetch range of {xorb} holds chunks {:?}", t.range)))?;
        let body = &bodies[p.joined];
        let (a, b) = (p.offset, p.offset + (p.info.url_range.end - p.info.url_range.start) + 1);
        if b as usize > body.len() {
            return Err(VfsError::Xet("joined fetch shorter than its ranges".to_string()));
        }
        let slice = [body.slice(a as usize..b as usize)];
        let step = Step {
            fetch: 0,
            skip: t.range.start - p.info.range.start,
            take: t.range.end - t.range.start,
            unpacked: t.unpacked_length as u64,
        };
        decode(&slice, &step, &mut out)?;
    }
    let mut bufs = out.finish(0)?;
    Ok(match bufs.len() {
        0 => Bytes::new(),
        1 => bufs.pop().unwrap_or_default(),
        _ => concat(bufs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(v: serde_json::Value) -> BatchQueryReconstructionResponse {
        serde_json::from_value(v).unwrap()
    }

    /// A CAS without the batch route (an older server): 404 or 405, answered `Unsupported`, so the
    /// caller reads file by file; a 400 is an error, not a fallback.
    #[tokio::test]
    async fn a_cas_without_the_route_is_unsupported() {
        use axum::http::StatusCode;
        use axum::routing::{get, post};
        let app = axum::Router::new()
            .route("/a/v1/reconstructions", post(|| async { StatusCode::NOT_FOUND }))
            .route("/b/v1/reconstructions", get(|| async { StatusCode::OK }))
            .route("/c/v1/reconstructions", post(|| async { StatusCode::BAD_REQUEST }));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await });
        let f = Fetcher {
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            attempt_timeout: Duration::from_secs(10),
            max_retries: 1,
            patience: Duration::ZERO,
            windows: Default::default(),
            pool: crate::chunk_store::buffer_pool::BufferPool::new(1 << 20, 1),
            bodies: Default::default(),
            fast_link: Default::default(),
        };
        let files = [("a".repeat(64), 10)];
        for (prefix, unsupported) in [("a", true), ("b", true), ("c", false)] {
            let cas = Cas {
                url: format!("http://{addr}/{prefix}"),
                token: "t".to_string(),
            };
            let r = f.batch(&cas, &files, &|_| {}).await;
            match r {
                Ok(Batch::Unsupported) => assert!(unsupported, "{prefix}"),
                Ok(Batch::Files(_)) => panic!("{prefix}: files from an error"),
                Ok(Batch::Unreachable(why)) => panic!("{prefix}: a CAS that answers is reachable: {why}"),
                Err(_) => assert!(!unsupported, "{prefix}"),
            }
        }
    }

    #[test]
    fn adjacent_ranges_of_a_url_are_one_fetch() {
        let x = "a".repeat(64);
        let y = "b".repeat(64);
        let info = |c0: u32, c1: u32, b0: u64, b1: u64, url: &str| json!({"range": {"start": c0, "end": c1}, "url": url, "url_range": {"start": b0, "end": b1}});
        let a = answer(json!({
            "files": {},
            "fetch_info": {
                x.clone(): [
                    info(0, 1, 0, 99, "http://cas/x"),
                    info(1, 2, 100, 199, "http://cas/x"),
                    // Listed again for another file: fetched once.
                    info(1, 2, 100, 199, "http://cas/x"),
                    // Near but with more gap than wanted bytes: a fetch of its own.
                    info(5, 6, 1000, 1099, "http://cas/x"),
                    // Far away: a fetch of its own.
                    info(9, 10, 10_000_000, 10_000_099, "http://cas/x"),
                    // Near with a small gap: joined to the one before.
                    info(10, 11, 10_000_150, 10_000_249, "http://cas/x"),
                ],
                y.clone(): [info(0, 3, 0, 299, "http://cas/y")],
            }
        }));
        let (joined, placed) = join_ranges(&a);
        let spans: Vec<(&str, u64, u64)> = joined.iter().map(|j| (j.url.as_str(), j.start, j.end)).collect();
        assert_eq!(
            spans,
            vec![
                ("http://cas/x", 0, 199),
                ("http://cas/x", 1000, 1099),
                ("http://cas/x", 10_000_000, 10_000_249),
                ("http://cas/y", 0, 299)
            ]
        );
        let px = &placed[&x];
        assert_eq!(px.len(), 5);
        assert_eq!((px[1].joined, px[1].offset), (0, 100));
        assert_eq!((px[2].joined, px[2].offset), (1, 0));
        assert_eq!((px[4].joined, px[4].offset), (2, 150));
    }
}
