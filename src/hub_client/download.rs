//! Content: ranged GETs and HEADs of `/{prefix}{repo}/resolve/{rev}/{path}`.
//!
//! Regular files are answered by the Hub itself. LFS and Xet files get a `302` to another origin
//! (the CDN; the local Hub's blob port): we follow it ourselves, without the token, and remember
//! the target per (repo, commit, path) for [`REDIRECT_CACHE_TTL`](super::REDIRECT_CACHE_TTL) when
//! the revision is a full commit id. A remembered URL that fails in any way is dropped and the Hub
//! is asked again, once per call.

use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderValue, RANGE};
use url::Url;

use super::error::{ErrorContext, HubClientError};
use super::http::{BodyRead, Redirects, Reply, Request};
use super::types::FileHead;
use super::{HubClient, RepoRef, check_path, check_rev, is_commit_id};

impl HubClient {
    /// Reads `len` bytes of `path` at `commit` from offset `start`. Returns exactly `len` bytes, or
    /// fewer only when the file ends first (empty when `start` is at or past the end).
    ///
    /// One HTTP Range GET (two for LFS/Xet files: the Hub's redirect, then its target; one when
    /// the target is cached). Keep `len` to a few MiB per call: the whole body must arrive
    /// within the per-attempt timeout.
    pub async fn read_range(
        &self,
        repo: &RepoRef,
        commit: &str,
        path: &str,
        start: u64,
        len: u64,
    ) -> Result<Bytes, HubClientError> {
        check_rev(repo, commit)?;
        let path = check_path(repo, path, false)?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        let ctx = ErrorContext::call("GET", repo, Some(commit), Some(path));
        let key = is_commit_id(commit).then(|| cache_key(repo, commit, path));
        if let Some(k) = &key
            && let Some(target) = self.inner.redirects.get(k)
        {
            match self.range_get(&target, Redirects::All, start, len, &ctx).await {
                Ok(Ranged::Bytes(b)) => return Ok(b),
                Ok(Ranged::Redirect(_)) => {}
                Err(e) => tracing::debug!(error = %e, "cached redirect target failed; asking the Hub again"),
            }
            self.inner.redirects.invalidate(k);
        }
        let url = self.resolve_url(repo, commit, path)?;
        let target = match self.range_get(&url, Redirects::HubOnly, start, len, &ctx).await? {
            Ranged::Bytes(b) => return Ok(b),
            Ranged::Redirect(target) => target,
        };
        if let Some(k) = key {
            self.inner.redirects.insert(k, target.clone().into());
        }
        match self.range_get(&target, Redirects::All, start, len, &ctx).await? {
            Ranged::Bytes(b) => Ok(b),
            Ranged::Redirect(_) => Err(HubClientError::invalid(&ctx, "too many redirects")),
        }
    }

    /// GETs a range; a redirect that was not followed is handed back as its target.
    async fn range_get(
        &self,
        url: &Url,
        redirects: Redirects,
        start: u64,
        len: u64,
        ctx: &ErrorContext,
    ) -> Result<Ranged, HubClientError> {
        let reply = self
            .inner
            .http
            .send(&range_request(url, redirects, start, len), ctx)
            .await?;
        if reply.status.is_redirection() {
            return reply
                .location()
                .map(Ranged::Redirect)
                .ok_or_else(|| HubClientError::invalid(ctx, "redirect without Location"));
        }
        finish_range(reply, start, len, ctx).map(Ranged::Bytes)
    }

    /// `HEAD /{prefix}{repo}/resolve/{commit}/{path}`: redirects on the Hub's origin are followed,
    /// the first one to another origin is not (its headers are the file's metadata, as in Python).
    pub async fn head_file(&self, repo: &RepoRef, commit: &str, path: &str) -> Result<FileHead, HubClientError> {
        check_rev(repo, commit)?;
        let path = check_path(repo, path, false)?;
        let ctx = ErrorContext::call("HEAD", repo, Some(commit), Some(path));
        let mut headers = HeaderMap::new();
        headers.insert(reqwest::header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let req = Request {
            method: Method::HEAD,
            headers,
            read: BodyRead::Full { cap: 0 },
            ..Request::get(self.resolve_url(repo, commit, path)?)
        };
        let reply = self.inner.http.send(&req, &ctx).await?;
        if !reply.status.is_success() && !reply.status.is_redirection() {
            return Err(HubClientError::invalid(
                &ctx,
                format!("unexpected status {}", reply.status),
            ));
        }
        let size = reply
            .header("x-linked-size")
            .or_else(|| reply.header("content-length"))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| HubClientError::invalid(&ctx, "no X-Linked-Size or Content-Length"))?;
        let etag = reply
            .header("x-linked-etag")
            .or_else(|| reply.header("etag"))
            .map(normalize_etag)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| HubClientError::invalid(&ctx, "no ETag"))?;
        if reply.status.is_redirection()
            && is_commit_id(commit)
            && let Some(target) = reply.location()
        {
            // A HEAD's redirect is where a GET would go: prime the cache for read_range.
            self.inner
                .redirects
                .insert(cache_key(repo, commit, path), target.into());
        }
        Ok(FileHead {
            size,
            etag,
            xet_hash: reply.header("x-xet-hash").map(str::to_string),
            commit: reply.header("x-repo-commit").map(str::to_string),
            last_modified: reply
                .header("last-modified")
                .and_then(|v| httpdate::parse_http_date(v).ok()),
        })
    }
}

/// What a reader that talks to other origins itself (the Xet CAS) shares with this client: the
/// HTTP client, so one connection pool serves every origin, and the retry settings.
#[derive(Clone)]
pub struct Transport {
    pub client: reqwest::Client,
    /// Deadline of one attempt.
    pub timeout: std::time::Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// How long a request may keep waiting for a window or through an outage.
    pub patience: std::time::Duration,
    /// The client's request windows (the CAS's answers go in its `cas` bucket).
    pub windows: std::sync::Arc<super::windows::Windows>,
}

impl HubClient {
    /// How long an answer asks the client to wait before retrying (`RateLimit` `t=`, else
    /// `Retry-After`), for readers that retry requests to other origins themselves.
    pub fn retry_wait(headers: &HeaderMap) -> Option<std::time::Duration> {
        super::http::retry_hint(headers)
    }

    /// The sleep before retrying after failed attempt `attempt` of a request to another origin,
    /// or `None` to give up (the same rules as the client's own requests; see `http`).
    pub fn retry_delay(
        attempt: u32,
        max_retries: u32,
        wait: Option<std::time::Duration>,
        gated: bool,
        patience: std::time::Duration,
        elapsed: std::time::Duration,
    ) -> Option<std::time::Duration> {
        super::http::retry_delay(attempt, max_retries, wait, gated, patience, elapsed)
    }

    /// Forgets the cached Xet read token of `repo`, so the next read asks the Hub for a fresh one
    /// and with it the CAS address (a CAS that stopped answering may have moved).
    pub fn forget_xet_token(&self, repo: &super::RepoRef) {
        self.forget_xet_token_of(repo);
    }

    pub fn transport(&self) -> Transport {
        Transport {
            client: self.inner.http.client.clone(),
            timeout: self.inner.http.timeout,
            max_retries: self.inner.http.max_retries,
            patience: self.inner.http.patience,
            windows: self.inner.http.windows.clone(),
        }
    }
}

enum Ranged {
    Bytes(Bytes),
    Redirect(Url),
}

fn cache_key(repo: &RepoRef, commit: &str, path: &str) -> String {
    format!("{}\0{commit}\0{path}", repo.web_path())
}

fn range_request(url: &Url, redirects: Redirects, start: u64, len: u64) -> Request {
    let end = start.saturating_add(len - 1);
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&format!("bytes={start}-{end}")) {
        headers.insert(RANGE, v);
    }
    // Ranges are of the stored bytes: never let a compressed encoding in.
    headers.insert(reqwest::header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    Request {
        headers,
        read: BodyRead::Range { start, len },
        redirects,
        accept: &[416],
        ..Request::get(url.clone())
    }
}

/// Checks a ranged answer and returns its bytes.
fn finish_range(reply: Reply, start: u64, len: u64, ctx: &ErrorContext) -> Result<Bytes, HubClientError> {
    let bad = |why: String| {
        Err(HubClientError::InvalidResponse {
            ctx: Box::new(ErrorContext {
                status: Some(reply.status.as_u16()),
                message: Some(why),
                ..ctx.clone()
            }),
        })
    };
    match reply.status.as_u16() {
        // Start at or past the end of the file.
        416 => Ok(Bytes::new()),
        // The range was ignored: the body was already skipped to `start` and cut at `len`.
        200 => Ok(reply.body),
        206 => {
            let Some((first, last, total)) = reply.header("content-range").and_then(parse_content_range) else {
                return bad("206 without a valid Content-Range".to_string());
            };
            let got = reply.body.len() as u64;
            let span = last - first + 1;
            let at_eof = total.is_some_and(|t| last + 1 == t);
            if first != start || span > len || got != span || (span < len && !at_eof) {
                return bad(format!(
                    "asked bytes {start}-{} but got Content-Range {first}-{last}/{} with {got} bytes",
                    start.saturating_add(len - 1),
                    total.map_or("*".to_string(), |t| t.to_string()),
                ));
            }
            Ok(reply.body)
        }
        s => bad(format!("unexpected status {s} for a range request")),
    }
}

/// `bytes a-b/total` or `bytes a-b/*` → (a, b, total).
fn parse_content_range(v: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    if b < a {
        return None;
    }
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((a, b, total))
}

/// `W/"abc"` → `abc`.
fn normalize_etag(v: &str) -> String {
    v.trim().trim_start_matches("W/").trim_matches('"').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges() {
        assert_eq!(parse_content_range("bytes 0-9/100"), Some((0, 9, Some(100))));
        assert_eq!(parse_content_range("bytes 5-5/*"), Some((5, 5, None)));
        assert_eq!(parse_content_range("bytes 9-5/100"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
    }
}
