//! One HTTP exchange with the Hub, with a deadline per attempt, bounded retries and manual redirects.
//!
//! - Every attempt (connect, headers and the whole body) runs under `timeout`.
//! - Retried: 429, 500, 502, 503, 504, timeouts and transport errors (connect failures, resets,
//!   bodies cut short). All requests this client sends are reads, so repeating them is safe.
//!   Nothing else is retried.
//! - Between attempts: exponential backoff with jitter (0.2 s doubling, at most 5 s, each sleep
//!   drawn from [d/2, d]); a 429/503 that names a wait (`RateLimit: "…";r=N;t=SECS` or
//!   `Retry-After`) is honoured, capped at [`MAX_RETRY_WAIT`] without patience.
//! - Patience (`HubClientConfig::patience`): a request the Hub refuses for a request window, or
//!   that meets an outage (no connection, 5xx, timeouts), keeps trying past `max_retries` until
//!   that long after its first attempt, and a window's wait is honoured whole: the request waits
//!   for the window to reset (see [`super::windows`]) instead of failing a read.
//! - Redirects are never followed by reqwest. [`Redirects`] says which ones we follow; the bearer
//!   token goes only to the endpoint's own origin (scheme, host, port), never to a redirect target
//!   elsewhere.
//! - One `debug` event per attempt: method, URL path (no query: presigned URLs carry signatures),
//!   status, duration. Headers and tokens are never logged.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderMap, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use url::Url;

use super::error::{ErrorContext, HubClientError};
use super::windows::{Bucket, Refusal, rfc3339};

/// Longest sleep between two attempts, even when the Hub asks for more.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);
const BACKOFF_BASE: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const MAX_REDIRECTS: usize = 5;
/// Error bodies are read up to this size (for the Hub's message).
const ERROR_BODY_CAP: u64 = 64 * 1024;
const RETRY_STATUSES: [u16; 5] = [429, 500, 502, 503, 504];

/// Which redirects an exchange follows by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Redirects {
    /// Follow redirects that stay on the Hub's origin; hand any other redirect back to the caller.
    HubOnly,
    /// Follow every redirect (the token still goes only to the Hub's origin).
    All,
}

/// How much of the body to keep.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BodyRead {
    /// The whole body, refusing more than `cap` bytes.
    Full { cap: u64 },
    /// The answer to `Range: bytes=start-(start+len-1)`: a 206 is kept up to `len + 1` bytes (the
    /// caller checks `Content-Range`); a 200 (range ignored) is skipped to `start` and cut at `len`.
    Range { start: u64, len: u64 },
}

pub(crate) struct Request {
    pub method: Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<(&'static str, Bytes)>,
    pub read: BodyRead,
    pub redirects: Redirects,
    /// Error statuses handed back as answers instead of errors (416 for ranges).
    pub accept: &'static [u16],
    /// A 429/503 asking for a wait longer than [`MAX_RETRY_WAIT`] fails at once, the wait recorded
    /// in the error, instead of being retried early (commits: the Hub's commit limit answers with
    /// waits of minutes, and each early retry is refused again).
    pub long_wait_fails: bool,
}

impl Request {
    pub fn get(url: Url) -> Request {
        Request {
            method: Method::GET,
            url,
            headers: HeaderMap::new(),
            body: None,
            read: BodyRead::Full { cap: 64 << 20 },
            redirects: Redirects::HubOnly,
            accept: &[],
            long_wait_fails: false,
        }
    }
}

/// An answer with status < 400 (or listed in `accept`), its body already read.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The URL that gave this answer (after followed redirects).
    pub url: Url,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_str(&self.headers, name)
    }

    /// The `Location` of a redirect, resolved against the URL that sent it.
    pub fn location(&self) -> Option<Url> {
        self.header(LOCATION.as_str()).and_then(|l| self.url.join(l).ok())
    }
}

pub(crate) fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// What one attempt produced when it got no answer.
enum Failure {
    Timeout,
    Transport(reqwest::Error),
    TooLarge,
}

/// A token in both forms the client needs.
#[derive(Clone)]
pub(crate) struct Token {
    pub header: HeaderValue,
    pub text: String,
}

impl Token {
    /// `None` for an empty token; an error for one that cannot be a header value.
    pub fn new(text: &str) -> Result<Option<Token>, HubClientError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        let mut header = HeaderValue::from_str(&format!("Bearer {text}"))
            .map_err(|_| HubClientError::bad_input("token", "the token contains invalid characters"))?;
        header.set_sensitive(true);
        Ok(Some(Token {
            header,
            text: text.to_string(),
        }))
    }
}

/// The parts of the client an exchange needs.
pub(crate) struct Http {
    pub client: reqwest::Client,
    pub origin: url::Origin,
    /// The Authorization header and the token's text (kept only to scrub it out of server
    /// messages); replaced whole by `HubClient::set_token`. A leaf lock, never held across an await.
    pub token: parking_lot::RwLock<Option<Token>>,
    /// Every token this client has used, to scrub from messages after a rotation too.
    pub old_tokens: parking_lot::Mutex<Vec<String>>,
    pub timeout: Duration,
    pub max_retries: u32,
    /// How long a request may keep waiting for a window or through an outage (zero: only
    /// `max_retries` retries, waits capped at [`MAX_RETRY_WAIT`]).
    pub patience: Duration,
    /// The Hub's request windows as the answers describe them.
    pub windows: std::sync::Arc<super::windows::Windows>,
}

/// Sleep between attempts once `max_retries` are spent and patience keeps a request going: an
/// outage is polled about this often.
const OUTAGE_POLL: Duration = Duration::from_secs(5);

impl Http {
    /// The Authorization header requests to the Hub's origin carry, if a token is set.
    pub fn auth_header(&self) -> Option<HeaderValue> {
        self.token.read().as_ref().map(|t| t.header.clone())
    }

    /// Sends `req`, retrying and following redirects as documented above.
    pub async fn send(&self, req: &Request, ctx: &ErrorContext) -> Result<Reply, HubClientError> {
        let mut url = req.url.clone();
        for _ in 0..=MAX_REDIRECTS {
            let reply = self.send_with_retries(req, &url, ctx).await?;
            if reply.status.is_redirection() && reply.status != StatusCode::NOT_MODIFIED {
                let Some(next) = reply.location() else {
                    return Err(HubClientError::invalid(
                        ctx,
                        format!("{} without Location", reply.status),
                    ));
                };
                if req.redirects == Redirects::All || next.origin() == self.origin {
                    url = next;
                    continue;
                }
            }
            return Ok(reply);
        }
        Err(HubClientError::invalid(ctx, "too many redirects"))
    }

    async fn send_with_retries(&self, req: &Request, url: &Url, ctx: &ErrorContext) -> Result<Reply, HubClientError> {
        let mut attempt: u32 = 0;
        let started = Instant::now();
        // Commits keep failing fast on long waits: their bytes stay staged and the committer
        // retries on its own schedule.
        // Background work never waits either: it yields to reads (see `windows`).
        let patience = if req.long_wait_fails || super::windows::in_background() {
            Duration::ZERO
        } else {
            self.patience
        };
        let bucket = (url.origin() == self.origin)
            .then(|| Bucket::of_path(url.path()))
            .flatten();
        loop {
            if let Some(b) = bucket
                && let Err(r) = self.windows.admit(b, patience, started).await
            {
                return Err(refusal_error(r, ctx, attempt, patience));
            }
            attempt += 1;
            let (err, wait, gated) = match self.attempt(req, url, attempt).await {
                Ok(reply) => {
                    let s = reply.status.as_u16();
                    let observed = bucket.and_then(|b| self.windows.observe(b, s, &reply.headers));
                    if s < 400 || req.accept.contains(&s) {
                        return Ok(reply);
                    }
                    let err = self.status_error(&reply, ctx, attempt);
                    if !RETRY_STATUSES.contains(&s) {
                        return Err(err);
                    }
                    let wait = retry_hint(&reply.headers);
                    if req.long_wait_fails && wait.is_some_and(|w| w > MAX_RETRY_WAIT) {
                        return Err(err);
                    }
                    // A window's refusal: the next `admit` waits for it to reopen.
                    (err, wait, s == 429 && observed.is_some() && !patience.is_zero())
                }
                Err(Failure::Timeout) => {
                    let msg = format!("timed out after {:?}", self.timeout);
                    let mut c = ctx.with_message(msg);
                    c.attempts = attempt;
                    (HubClientError::Timeout { ctx: c }, None, false)
                }
                Err(Failure::TooLarge) => {
                    return Err(HubClientError::invalid(ctx, "response body larger than expected"));
                }
                Err(Failure::Transport(e)) => {
                    let mut c = ctx.with_message(format!("network error: {}", describe(&e)));
                    c.attempts = attempt;
                    if e.is_builder() {
                        return Err(HubClientError::BadInput { ctx: c });
                    }
                    if e.is_timeout() {
                        (HubClientError::Timeout { ctx: c }, None, false)
                    } else {
                        (HubClientError::Network { ctx: c }, None, false)
                    }
                }
            };
            let Some(delay) = retry_delay(attempt, self.max_retries, wait, gated, patience, started.elapsed()) else {
                return Err(err);
            };
            crate::metrics::hub_retry(self.class(url), delay, wait.is_some());
            tracing::debug!(
                method = %req.method,
                path = url.path(),
                attempt,
                delay_ms = delay.as_millis() as u64,
                error = %err,
                "hub request failed, retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One request under the per-attempt deadline.
    async fn attempt(&self, req: &Request, url: &Url, attempt: u32) -> Result<Reply, Failure> {
        let started = Instant::now();
        let mut rb = self
            .client
            .request(req.method.clone(), url.clone())
            .headers(req.headers.clone());
        if url.origin() == self.origin
            && let Some(h) = self.auth_header()
        {
            rb = rb.header(reqwest::header::AUTHORIZATION, h);
        }
        if let Some((ct, body)) = &req.body {
            rb = rb.header(reqwest::header::CONTENT_TYPE, *ct).body(body.clone());
        }
        let work = async {
            let resp = rb.send().await.map_err(Failure::Transport)?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let (skip, cap, strict) = match (req.read, status.as_u16()) {
                (_, 400..) => (0, ERROR_BODY_CAP, false),
                (BodyRead::Full { cap }, _) => (0, cap.saturating_add(1), true),
                (BodyRead::Range { len, .. }, 206) => (0, len.saturating_add(1), false),
                (BodyRead::Range { start, len }, 200) => (start, len, false),
                (BodyRead::Range { .. }, _) => (0, ERROR_BODY_CAP, false),
            };
            let body = if req.method == Method::HEAD {
                Bytes::new()
            } else {
                read_body(resp, skip, cap).await.map_err(Failure::Transport)?
            };
            if strict && body.len() as u64 == cap {
                return Err(Failure::TooLarge);
            }
            Ok(Reply {
                status,
                headers,
                body,
                url: url.clone(),
            })
        };
        let out = match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(Failure::Timeout),
        };
        let elapsed_ms = started.elapsed().as_millis() as u64;
        crate::metrics::hub_attempt(
            self.class(url),
            attempt_outcome(&out),
            sent_bytes(req),
            started.elapsed(),
        );
        match &out {
            Ok(r) => tracing::debug!(
                method = %req.method, path = url.path(), status = r.status.as_u16(), elapsed_ms, attempt, "hub request"
            ),
            Err(Failure::Timeout) => {
                tracing::debug!(method = %req.method, path = url.path(), elapsed_ms, attempt, "hub request timed out")
            }
            Err(Failure::Transport(e)) => tracing::debug!(
                method = %req.method, path = url.path(), elapsed_ms, attempt, error = %describe(e), "hub request failed"
            ),
            Err(Failure::TooLarge) => {
                tracing::debug!(method = %req.method, path = url.path(), elapsed_ms, attempt, "hub answer too large")
            }
        }
        out
    }

    /// The metrics' endpoint class of a request to `url`.
    fn class(&self, url: &Url) -> crate::metrics::HubClass {
        if url.origin() == self.origin {
            crate::metrics::HubClass::of_path(url.path())
        } else {
            crate::metrics::HubClass::Other
        }
    }

    fn status_error(&self, reply: &Reply, ctx: &ErrorContext, attempts: u32) -> HubClientError {
        let status = reply.status.as_u16();
        let code = reply.header("x-error-code").map(str::to_string);
        let message = reply
            .header("x-error-message")
            .map(str::to_string)
            .or_else(|| json_error_message(&reply.body))
            .map(|m| self.scrub(&m));
        let c = Box::new(ErrorContext {
            status: Some(status),
            error_code: code.clone(),
            message,
            attempts,
            retry_after: retry_hint(&reply.headers),
            ..ctx.clone()
        });
        HubClientError::from_status(status, code.as_deref(), c)
    }

    /// Removes the token from a text that came from the network, and keeps it short.
    fn scrub(&self, s: &str) -> String {
        let mut s = s.to_string();
        if let Some(t) = self.token.read().as_ref() {
            s = s.replace(&t.text, "<redacted>");
        }
        for t in self.old_tokens.lock().iter() {
            s = s.replace(t.as_str(), "<redacted>");
        }
        if s.len() > 300 {
            let mut cut = 300;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s.push('…');
        }
        s
    }
}

fn attempt_outcome(out: &Result<Reply, Failure>) -> crate::metrics::Attempt {
    match out {
        Ok(r) => crate::metrics::Attempt::Status {
            status: r.status.as_u16(),
            received: r.body.len() as u64,
        },
        Err(Failure::Timeout) => crate::metrics::Attempt::Timeout,
        Err(Failure::TooLarge | Failure::Transport(_)) => crate::metrics::Attempt::Error,
    }
}

fn sent_bytes(req: &Request) -> u64 {
    req.body.as_ref().map_or(0, |(_, b)| b.len() as u64)
}

/// Reads a body: drops the first `skip` bytes, keeps at most `cap` bytes, stops reading there.
async fn read_body(mut resp: reqwest::Response, mut skip: u64, cap: u64) -> Result<Bytes, reqwest::Error> {
    let mut parts: Vec<Bytes> = Vec::new();
    let mut kept: u64 = 0;
    while kept < cap {
        let Some(mut chunk) = resp.chunk().await? else { break };
        if skip > 0 {
            if chunk.len() as u64 <= skip {
                skip -= chunk.len() as u64;
                continue;
            }
            chunk = chunk.slice(skip as usize..);
            skip = 0;
        }
        let room = cap - kept;
        if chunk.len() as u64 > room {
            chunk.truncate(room as usize);
        }
        kept += chunk.len() as u64;
        parts.push(chunk);
    }
    Ok(match parts.len() {
        0 => Bytes::new(),
        1 => parts.pop().unwrap_or_default(),
        _ => {
            let mut b = BytesMut::with_capacity(kept as usize);
            for p in parts {
                b.extend_from_slice(&p);
            }
            b.freeze()
        }
    })
}

/// `{"error": "..."}`, `{"error_description": ...}` or `{"errors": [{"message": ...}]}`.
fn json_error_message(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v["error"]
        .as_str()
        .or_else(|| v["error_description"].as_str())
        .or_else(|| v["errors"][0]["message"].as_str())
        .map(str::to_string)
}

/// A reqwest error and its causes, without the URL (presigned URLs carry signatures).
fn describe(e: &reqwest::Error) -> String {
    let mut out = String::new();
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if !text.is_empty() && !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        cur = err.source();
    }
    if let Some(url) = e.url() {
        out = out.replace(url.as_str(), url.path());
    }
    out
}

/// The wait a 429/503 asks for: `RateLimit: "name";r=N;t=SECS`, else `Retry-After` (seconds or
/// an HTTP date).
pub(crate) fn retry_hint(h: &HeaderMap) -> Option<Duration> {
    if let Some(v) = header_str(h, "ratelimit") {
        for part in v.split([';', ',']) {
            if let Some(t) = part.trim().strip_prefix("t=")
                && let Ok(secs) = t.trim().parse::<u64>()
            {
                return Some(Duration::from_secs(secs));
            }
        }
    }
    let ra = header_str(h, RETRY_AFTER.as_str())?;
    if let Ok(secs) = ra.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(ra).ok()?;
    Some(when.duration_since(std::time::SystemTime::now()).unwrap_or_default())
}

/// The sleep before the next attempt after failed attempt number `attempt`, or `None` to give up.
/// `wait`: what the answer asked for; `gated`: a window refused it and the next admission waits
/// for it; `elapsed`: since the first attempt. Without patience: `max_retries` retries, asked waits
/// capped at [`MAX_RETRY_WAIT`]. With it: retries go on while the patience lasts, an asked wait is
/// honoured whole, and an outage is polled every [`OUTAGE_POLL`] once the retries are spent.
pub(crate) fn retry_delay(
    attempt: u32,
    max_retries: u32,
    wait: Option<Duration>,
    gated: bool,
    patience: Duration,
    elapsed: Duration,
) -> Option<Duration> {
    if patience.is_zero() {
        if attempt > max_retries {
            return None;
        }
        return Some(match wait {
            Some(w) => (w + jitter(Duration::from_millis(100))).min(MAX_RETRY_WAIT),
            None => backoff(attempt),
        });
    }
    let left = patience.checked_sub(elapsed).filter(|l| !l.is_zero())?;
    let delay = match wait {
        _ if gated => Duration::ZERO,
        Some(w) => w + jitter(Duration::from_millis(100)),
        None if attempt > max_retries => OUTAGE_POLL / 2 + jitter(OUTAGE_POLL / 2),
        None => backoff(attempt),
    };
    // A wait the patience cannot cover fails now rather than at its end.
    (wait.is_none() || gated || delay <= left).then(|| delay.min(left))
}

/// The error of a request its window did not let through.
fn refusal_error(r: Refusal, ctx: &ErrorContext, attempts: u32, patience: Duration) -> HubClientError {
    let message = match r {
        Refusal::TooLong { bucket, until } => format!(
            "the Hub's {} request window is spent until {}, longer than the {}s this request may wait \
             (--max-hub-wait)",
            bucket.name(),
            rfc3339(until),
            patience.as_secs()
        ),
        Refusal::Deferred { bucket } => format!(
            "background request deferred: the rest of the Hub's {} request window is kept for reads",
            bucket.name()
        ),
    };
    let retry_after = match r {
        Refusal::TooLong { until, .. } => until.duration_since(std::time::SystemTime::now()).ok(),
        Refusal::Deferred { .. } => None,
    };
    HubClientError::RateLimited {
        ctx: Box::new(ErrorContext {
            status: Some(429),
            message: Some(message),
            attempts,
            retry_after,
            ..ctx.clone()
        }),
    }
}

/// Sleep before retry number `attempt` (1-based): 0.2 s doubling to at most 5 s, drawn from [d/2, d].
pub fn backoff(attempt: u32) -> Duration {
    let d = BACKOFF_BASE
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(BACKOFF_MAX);
    d / 2 + jitter(d / 2)
}

fn jitter(max: Duration) -> Duration {
    max.mul_f64(rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints() {
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_static("\"resolvers\";r=0;t=7"));
        assert_eq!(retry_hint(&h), Some(Duration::from_secs(7)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_hint(&h), Some(Duration::from_secs(3)));
        assert_eq!(retry_hint(&HeaderMap::new()), None);
    }

    #[test]
    fn patience_keeps_retrying_and_honours_long_waits() {
        let s = Duration::from_secs;
        // Without patience: max_retries, waits capped.
        assert_eq!(retry_delay(4, 3, None, false, Duration::ZERO, s(0)), None);
        assert!(retry_delay(1, 3, Some(s(300)), false, Duration::ZERO, s(0)).unwrap() <= MAX_RETRY_WAIT);
        // With patience: past max_retries while it lasts, polling an outage.
        let d = retry_delay(9, 3, None, false, s(600), s(100)).unwrap();
        assert!(d >= OUTAGE_POLL / 2 && d <= OUTAGE_POLL, "{d:?}");
        assert_eq!(retry_delay(9, 3, None, false, s(600), s(600)), None, "patience spent");
        assert_eq!(
            retry_delay(9, 3, None, false, s(600), s(598)),
            Some(s(2)),
            "cut to what is left"
        );
        // A 503's asked wait is honoured whole when patience covers it, refused at once when not.
        assert!(retry_delay(1, 3, Some(s(120)), false, s(600), s(0)).unwrap() >= s(120));
        assert_eq!(retry_delay(1, 3, Some(s(120)), false, s(600), s(500)), None);
        // A window's 429: no sleep here, the next admission waits.
        assert_eq!(
            retry_delay(1, 3, Some(s(120)), true, s(600), s(0)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        for a in 1..20 {
            let d = backoff(a);
            assert!(d <= BACKOFF_MAX, "{a}: {d:?}");
        }
        assert!(backoff(1) <= Duration::from_millis(200));
        assert!(backoff(3) >= Duration::from_millis(400));
    }

    #[test]
    fn error_messages_from_json() {
        assert_eq!(json_error_message(br#"{"error":"x"}"#).as_deref(), Some("x"));
        assert_eq!(
            json_error_message(br#"{"errors":[{"message":"y"}]}"#).as_deref(),
            Some("y")
        );
        assert_eq!(json_error_message(b"nope"), None);
    }
}
