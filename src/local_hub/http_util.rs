//! Small HTTP helpers shared by the local Hub's routes: byte ranges, conditional requests, serving a
//! file or a byte source with 200/206/304/416, query strings, bounded body reads, and closing
//! connections whose request body was left unread.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::error::{HubError, HubResult};

/// A satisfiable byte range, inclusive at both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }
}

/// Parses `Range: bytes=a-b | a- | -n` against a resource of `size` bytes.
/// `Ok(None)`: serve the whole resource (no header, or a form we ignore such as multiple ranges,
/// which RFC 9110 allows). `Err`: 416.
pub fn parse_range(headers: &HeaderMap, size: u64) -> HubResult<Option<ByteRange>> {
    let Some(v) = headers.get(header::RANGE) else {
        return Ok(None);
    };
    let v = v.to_str().map_err(|_| HubError::RangeNotSatisfiable { size })?.trim();
    let Some(spec) = v.strip_prefix("bytes=") else {
        return Err(HubError::RangeNotSatisfiable { size });
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (a, b) = spec.split_once('-').ok_or(HubError::RangeNotSatisfiable { size })?;
    let (a, b) = (a.trim(), b.trim());
    let bad = || HubError::RangeNotSatisfiable { size };
    let range = if a.is_empty() {
        let n: u64 = b.parse().map_err(|_| bad())?;
        if n == 0 || size == 0 {
            return Err(bad());
        }
        ByteRange {
            start: size.saturating_sub(n),
            end: size - 1,
        }
    } else {
        let start: u64 = a.parse().map_err(|_| bad())?;
        let end: u64 = if b.is_empty() {
            u64::MAX
        } else {
            b.parse().map_err(|_| bad())?
        };
        if start >= size || end < start {
            return Err(bad());
        }
        ByteRange {
            start,
            end: end.min(size - 1),
        }
    };
    Ok(Some(range))
}

/// `If-None-Match` matches `etag` (quotes and `W/` ignored, `*` matches).
pub fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',').any(|t| {
                let t = t.trim();
                t == "*" || t.trim_start_matches("W/").trim_matches('"') == etag
            })
        })
}

pub fn set_header(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// Common headers of a content response.
pub struct ContentMeta<'a> {
    pub size: u64,
    pub etag: &'a str,
    pub last_modified: Option<&'a str>,
}

/// Status and headers for a GET/HEAD of content; returns the range to send (None = 304).
pub fn content_head(
    headers: &HeaderMap,
    meta: &ContentMeta<'_>,
    out: &mut HeaderMap,
) -> HubResult<(StatusCode, Option<ByteRange>)> {
    set_header(out, "etag", &format!("\"{}\"", meta.etag));
    set_header(out, "accept-ranges", "bytes");
    if let Some(lm) = meta.last_modified {
        set_header(out, "last-modified", lm);
    }
    if not_modified(headers, meta.etag) {
        return Ok((StatusCode::NOT_MODIFIED, None));
    }
    match parse_range(headers, meta.size)? {
        Some(r) => {
            set_header(
                out,
                "content-range",
                &format!("bytes {}-{}/{}", r.start, r.end, meta.size),
            );
            set_header(out, "content-length", &r.len().to_string());
            Ok((StatusCode::PARTIAL_CONTENT, Some(r)))
        }
        None => {
            set_header(out, "content-length", &meta.size.to_string());
            let whole = if meta.size == 0 {
                None
            } else {
                Some(ByteRange {
                    start: 0,
                    end: meta.size - 1,
                })
            };
            Ok((StatusCode::OK, whole))
        }
    }
}

/// Serves a local file with ranges and conditional requests. Large reads stream in 1 MiB pieces.
pub async fn serve_file(
    method: &Method,
    headers: &HeaderMap,
    path: &Path,
    meta: ContentMeta<'_>,
    mut extra: HeaderMap,
) -> HubResult<Response> {
    let (status, range) = content_head(headers, &meta, &mut extra)?;
    set_header(&mut extra, "content-type", "application/octet-stream");
    if *method == Method::HEAD || status == StatusCode::NOT_MODIFIED {
        return Ok(with_headers(status, extra, Body::empty()));
    }
    let Some(range) = range else {
        return Ok(with_headers(status, extra, Body::empty()));
    };
    Ok(with_headers(
        status,
        extra,
        file_range_body(path, range.start, range.len()).await?,
    ))
}

/// Bytes a served file is read in, per piece of the body.
const FILE_PIECE: u64 = 1 << 20;

/// A body streaming `len` bytes of a file from `start`, in 1 MiB reads. Each piece is read with
/// `pread` straight into the buffer the body hands on: `tokio::fs` would read into a buffer of its
/// own and copy, and on a small machine that copy is CPU the mount under test does not get.
pub async fn file_range_body(path: &Path, start: u64, len: u64) -> HubResult<Body> {
    let f = tokio::fs::File::open(path)
        .await
        .map_err(|e| HubError::internal(format!("opening blob: {e}")))?;
    let f = f.into_std().await;
    let pieces = futures::stream::try_unfold((f, start, len), |(f, at, left)| async move {
        if left == 0 {
            return Ok(None);
        }
        let want = left.min(FILE_PIECE) as usize;
        let (f, piece) = tokio::task::spawn_blocking(move || {
            let mut buf = Vec::with_capacity(want);
            while buf.len() < want {
                let from = at + buf.len() as u64;
                match rustix::io::pread(&f, rustix::buffer::spare_capacity(&mut buf), from) {
                    Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            buf.truncate(want);
            Ok::<_, std::io::Error>((f, Bytes::from(buf)))
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok::<_, std::io::Error>(Some((piece, (f, at + want as u64, left - want as u64))))
    });
    Ok(Body::from_stream(pieces))
}

pub fn with_headers(status: StatusCode, headers: HeaderMap, body: Body) -> Response {
    let mut r = (status, body).into_response();
    // Keep a content-length we computed ourselves (HEAD responses have no body to measure).
    r.headers_mut().extend(headers);
    r
}

pub fn json_response<T: serde::Serialize>(status: StatusCode, v: &T) -> Response {
    match serde_json::to_vec(v) {
        Ok(body) => {
            let mut r = (status, body).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json; charset=utf-8"),
            );
            r
        }
        Err(e) => HubError::internal(e).into_response(),
    }
}

/// Query string as a multimap (`paths=a&paths=b`); keys and values percent-decoded, `+` is a space.
pub fn parse_query(q: Option<&str>) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for (k, v) in url::form_urlencoded::parse(q.unwrap_or("").as_bytes()) {
        out.entry(k.into_owned()).or_default().push(v.into_owned());
    }
    out
}

pub fn query_flag(q: &HashMap<String, Vec<String>>, key: &str) -> bool {
    q.get(key)
        .and_then(|v| v.first())
        .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "True" | "yes"))
}

pub fn query_str<'a>(q: &'a HashMap<String, Vec<String>>, key: &str) -> Option<&'a str> {
    q.get(key).and_then(|v| v.first()).map(|s| s.as_str())
}

/// Middleware for every listener: a response given before its request's body was read to the end
/// (a refusal: too large, bad token, unknown route) says `Connection: close`. hyper cannot drain a
/// large unread body, so it drops the connection once the response is out; a client that pooled
/// the connection would otherwise send its next request into a closing socket.
pub async fn close_when_body_unread(req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let ended = Arc::new(AtomicBool::new(false));
    let seen = ended.clone();
    let req = req.map(|body| {
        let mut data = body.into_data_stream();
        Body::from_stream(futures::stream::poll_fn(move |cx| {
            let next = data.poll_next_unpin(cx);
            if let Poll::Ready(None) = next {
                seen.store(true, Ordering::Release);
            }
            next
        }))
    });
    let mut resp = next.run(req).await;
    if !ended.load(Ordering::Acquire) {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Reads a request body, refusing more than `limit` bytes with 413.
pub async fn read_body(body: Body, limit: usize) -> HubResult<Bytes> {
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| HubError::bad_request(format!("reading request body: {e}")))?;
        if buf.len() + chunk.len() > limit {
            return Err(HubError::PayloadTooLarge { limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}

pub fn http_date(iso: &str) -> Option<String> {
    let t = chrono::DateTime::parse_from_rfc3339(iso).ok()?;
    Some(httpdate::fmt_http_date(std::time::SystemTime::from(t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(range: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
        m
    }

    #[test]
    fn ranges() {
        assert_eq!(
            parse_range(&h("bytes=0-9"), 100).unwrap(),
            Some(ByteRange { start: 0, end: 9 })
        );
        assert_eq!(
            parse_range(&h("bytes=90-"), 100).unwrap(),
            Some(ByteRange { start: 90, end: 99 })
        );
        assert_eq!(
            parse_range(&h("bytes=-10"), 100).unwrap(),
            Some(ByteRange { start: 90, end: 99 })
        );
        assert_eq!(
            parse_range(&h("bytes=-1000"), 100).unwrap(),
            Some(ByteRange { start: 0, end: 99 })
        );
        assert_eq!(
            parse_range(&h("bytes=50-1000"), 100).unwrap(),
            Some(ByteRange { start: 50, end: 99 })
        );
        assert_eq!(parse_range(&h("bytes=0-1,5-6"), 100).unwrap(), None);
        for bad in ["bytes=100-", "bytes=5-4", "bytes=abc", "items=0-1", "bytes=-0"] {
            assert!(
                matches!(
                    parse_range(&h(bad), 100),
                    Err(HubError::RangeNotSatisfiable { size: 100 })
                ),
                "{bad}"
            );
        }
        assert!(parse_range(&h("bytes=0-"), 0).is_err());
    }

    #[test]
    fn etags() {
        let mut m = HeaderMap::new();
        m.insert(header::IF_NONE_MATCH, HeaderValue::from_static("W/\"abc\", \"def\""));
        assert!(not_modified(&m, "def"));
        assert!(!not_modified(&m, "xyz"));
    }
}
