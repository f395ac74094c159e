//! Fault injection and request accounting, per route class.
//!
//! The knobs shape real network trouble: added latency, a per-connection bandwidth cap, 5xx
//! errors, stalls (the request is accepted and never answered), connections reset mid-body and
//! 429s with the Hub's `RateLimit` header (at a probability, or past a request rate). They are set
//! by CLI flags and at runtime through `/admin/faults`, and every class counts its requests and
//! body bytes for benchmarks.
//!
//! Every request has one coarse class (api, commit, resolve, cas). A CAS request may also have a
//! fine class naming its protocol step (reconstruction, xorb-fetch, xorb-upload, shard-upload), so
//! a test can break one step of a Xet read or upload while the others keep working. Such a request
//! obeys the knobs of both its classes and is counted in both.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::Stream;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RouteClass {
    /// The `/api/…` routes and the LFS batch API, except commits.
    #[serde(rename = "api")]
    Api,
    /// `/resolve/` downloads on the API origin and everything on the blob origin.
    #[serde(rename = "resolve")]
    Resolve,
    /// Every request to the Xet CAS origin.
    #[serde(rename = "cas")]
    Cas,
    /// Write calls of the API: `…/commit/…`, `…/preupload/…` and bucket batches
    /// (`/api/buckets/{id}/batch`), a class of its own so a test can break writes while listings
    /// keep working.
    #[serde(rename = "commit")]
    Commit,
    /// CAS: `GET /v1|v2/reconstructions…` (which xorb ranges make up a file) and the batch
    /// `POST|GET /v1/reconstructions` (many files at once).
    #[serde(rename = "reconstruction")]
    Reconstruction,
    /// CAS: presigned `fetch_term` and `get_xorb` reads of xorb bytes.
    #[serde(rename = "xorb-fetch")]
    XorbFetch,
    /// CAS: xorb uploads (`/xorbs/…`, grants, grant commits and presigned grant uploads).
    #[serde(rename = "xorb-upload")]
    XorbUpload,
    /// CAS: `POST /v1|v2/shards` (registers the uploaded files).
    #[serde(rename = "shard-upload")]
    ShardUpload,
}

/// Number of route classes (coarse and fine).
const N: usize = 8;

impl RouteClass {
    /// The coarse classes: every request has exactly one of them, so summing their stats counts
    /// each request once, and a knob without a class prefix applies to these.
    pub const ALL: [RouteClass; 4] = [
        RouteClass::Api,
        RouteClass::Resolve,
        RouteClass::Cas,
        RouteClass::Commit,
    ];

    /// The fine classes of the CAS protocol steps (each also counts as `cas`).
    pub const CAS_STEPS: [RouteClass; 4] = [
        RouteClass::Reconstruction,
        RouteClass::XorbFetch,
        RouteClass::XorbUpload,
        RouteClass::ShardUpload,
    ];

    /// Coarse and fine classes.
    pub const EVERY: [RouteClass; N] = [
        RouteClass::Api,
        RouteClass::Resolve,
        RouteClass::Cas,
        RouteClass::Commit,
        RouteClass::Reconstruction,
        RouteClass::XorbFetch,
        RouteClass::XorbUpload,
        RouteClass::ShardUpload,
    ];

    fn idx(self) -> usize {
        self as usize
    }

    /// The name used by the CLI flags, `/admin/faults` and `/admin/stats`.
    pub fn name(self) -> &'static str {
        match self {
            RouteClass::Api => "api",
            RouteClass::Resolve => "resolve",
            RouteClass::Cas => "cas",
            RouteClass::Commit => "commit",
            RouteClass::Reconstruction => "reconstruction",
            RouteClass::XorbFetch => "xorb-fetch",
            RouteClass::XorbUpload => "xorb-upload",
            RouteClass::ShardUpload => "shard-upload",
        }
    }

    /// A class by name; `blob` is an alias of `resolve`, and `_` may stand for `-`.
    pub fn parse(s: &str) -> Option<RouteClass> {
        if s == "blob" {
            return Some(RouteClass::Resolve);
        }
        let s = s.replace('_', "-");
        RouteClass::EVERY.into_iter().find(|c| c.name() == s)
    }
}

/// The knobs of one route class. Rates are probabilities in [0, 1]; `rate_limit` is requests per
/// second (0 = unlimited).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultSettings {
    pub latency_ms: u64,
    pub bandwidth_mbps: f64,
    pub error_rate: f64,
    pub stall_rate: f64,
    pub reset_rate: f64,
    pub rate_limit: f64,
    /// Probability of answering 429 with a `RateLimit` header asking for a 1 s wait.
    pub throttle_rate: f64,
}

impl FaultSettings {
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("error_rate", self.error_rate),
            ("stall_rate", self.stall_rate),
            ("reset_rate", self.reset_rate),
            ("throttle_rate", self.throttle_rate),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} must be between 0 and 1, got {v}"));
            }
        }
        if !self.bandwidth_mbps.is_finite() || (self.bandwidth_mbps != 0.0 && self.bandwidth_mbps < 0.001) {
            return Err(format!(
                "bandwidth_mbps must be 0 (no cap) or at least 0.001, got {}",
                self.bandwidth_mbps
            ));
        }
        if self.rate_limit < 0.0 || !self.rate_limit.is_finite() {
            return Err("rate_limit must be a non-negative number".to_string());
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct ClassStats {
    requests: AtomicU64,
    bytes_out: AtomicU64,
    injected: AtomicU64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassStatsSnapshot {
    pub requests: u64,
    pub bytes_out: u64,
    pub faults_injected: u64,
}

/// Shared by every router of one local Hub.
pub struct Faults {
    settings: [RwLock<FaultSettings>; N],
    stats: [ClassStats; N],
    /// Token bucket per class for `rate_limit`: (tokens, last refill).
    buckets: [Mutex<(f64, Instant)>; N],
    /// Released on shutdown so stalled requests end.
    pub shutdown: Arc<tokio::sync::Notify>,
}

impl Faults {
    pub fn new() -> Arc<Faults> {
        let now = Instant::now();
        Arc::new(Faults {
            settings: Default::default(),
            stats: Default::default(),
            buckets: std::array::from_fn(|_| Mutex::new((0.0, now))),
            shutdown: Arc::new(tokio::sync::Notify::new()),
        })
    }

    pub fn get(&self, class: RouteClass) -> FaultSettings {
        self.settings[class.idx()].read().clone()
    }

    pub fn set(&self, class: RouteClass, s: FaultSettings) -> Result<(), String> {
        s.validate()?;
        let rate = s.rate_limit;
        *self.settings[class.idx()].write() = s;
        *self.buckets[class.idx()].lock() = (rate, Instant::now());
        Ok(())
    }

    pub fn stats(&self, class: RouteClass) -> ClassStatsSnapshot {
        let s = &self.stats[class.idx()];
        ClassStatsSnapshot {
            requests: s.requests.load(Ordering::Relaxed),
            bytes_out: s.bytes_out.load(Ordering::Relaxed),
            faults_injected: s.injected.load(Ordering::Relaxed),
        }
    }

    pub fn reset_stats(&self) {
        for s in &self.stats {
            s.requests.store(0, Ordering::Relaxed);
            s.bytes_out.store(0, Ordering::Relaxed);
            s.injected.store(0, Ordering::Relaxed);
        }
    }

    fn take_token(&self, class: RouteClass, rate: f64) -> bool {
        let mut b = self.buckets[class.idx()].lock();
        let now = Instant::now();
        let refill = now.duration_since(b.1).as_secs_f64() * rate;
        b.0 = (b.0 + refill).min(rate.max(1.0));
        b.1 = now;
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

fn chance(p: f64) -> bool {
    p > 0.0 && rand::random::<f64>() < p
}

fn injected_error(status: StatusCode, msg: &str) -> Response {
    let mut r = (status, serde_json::json!({ "error": msg }).to_string()).into_response();
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(msg) {
        r.headers_mut().insert("x-error-message", v);
    }
    r
}

/// Class of a request on the API origin: `/resolve/` downloads or the API; admin routes have none.
pub fn classify(path: &str) -> Option<RouteClass> {
    if path.starts_with("/admin/") {
        None
    } else if !path.starts_with("/api/") && path.contains("/resolve/") {
        Some(RouteClass::Resolve)
    } else if path.starts_with("/api/") && (path.contains("/commit/") || path.contains("/preupload/"))
        || is_bucket_batch(path)
    {
        Some(RouteClass::Commit)
    } else {
        Some(RouteClass::Api)
    }
}

/// `/api/buckets/{ns}/{name}/batch`: a bucket's writes, faulted with the commits.
fn is_bucket_batch(path: &str) -> bool {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    matches!(segs.as_slice(), ["api", "buckets", _, _, "batch"])
}

/// The protocol step of a request on the CAS origin, if it is one of the fine classes. API paths
/// carry the data dir's prefix (`/cas/<id>/v1/…`); presigned ones do not (`/v1/fetch_term`,
/// `/simulation/xorb-uploads/…`).
pub fn cas_step(method: &Method, path: &str) -> Option<RouteClass> {
    if path.starts_with("/simulation/xorb-uploads/") {
        return Some(RouteClass::XorbUpload);
    }
    let at = path.find("/v1/").or_else(|| path.find("/v2/"))?;
    let route = path[at + 4..].split('/').next().unwrap_or("");
    match route {
        "reconstructions" => Some(RouteClass::Reconstruction),
        "fetch_term" | "get_xorb" => Some(RouteClass::XorbFetch),
        "xorbs" | "xorb-grants" | "xorb-commits" => Some(RouteClass::XorbUpload),
        "shards" if method == Method::POST => Some(RouteClass::ShardUpload),
        _ => None,
    }
}

/// A 429 as the Hub sends it: the `RateLimit` header names the wait (`t`, seconds) that clients
/// honour before retrying.
fn throttled(class: RouteClass, why: &str) -> Response {
    let mut r = injected_error(StatusCode::TOO_MANY_REQUESTS, why);
    let policy = if class == RouteClass::Resolve {
        "\"resolvers\";r=0;t=1"
    } else {
        "\"api\";r=0;t=1"
    };
    r.headers_mut().insert("ratelimit", HeaderValue::from_static(policy));
    r.headers_mut().insert("retry-after", HeaderValue::from_static("1"));
    r
}

/// Axum middleware: apply the faults of the request's classes (its coarse class, then its CAS step
/// if it has one), then count the request and its body bytes in each.
pub async fn layer(
    State((faults, fixed)): State<(Arc<Faults>, Option<RouteClass>)>,
    req: Request,
    next: Next,
) -> Response {
    let Some(coarse) = fixed.or_else(|| classify(req.uri().path())) else {
        return next.run(req).await;
    };
    let fine = match coarse {
        RouteClass::Cas => cas_step(req.method(), req.uri().path()),
        _ => None,
    };
    let classes: Vec<RouteClass> = std::iter::once(coarse).chain(fine).collect();
    let settings: Vec<(RouteClass, FaultSettings)> = classes.iter().map(|c| (*c, faults.get(*c))).collect();
    let injected = |c: RouteClass| faults.stats[c.idx()].injected.fetch_add(1, Ordering::Relaxed);
    for c in &classes {
        faults.stats[c.idx()].requests.fetch_add(1, Ordering::Relaxed);
    }
    let latency_ms: u64 = settings.iter().map(|(_, s)| s.latency_ms).sum();
    if latency_ms > 0 {
        // A stopping Hub ends injected waits at once, so no request outlives `stop()`.
        tokio::select! {
            _ = faults.shutdown.notified() => return injected_error(StatusCode::SERVICE_UNAVAILABLE, "shutting down"),
            _ = tokio::time::sleep(Duration::from_millis(latency_ms)) => {}
        }
    }
    for (c, s) in &settings {
        if s.rate_limit > 0.0 && !faults.take_token(*c, s.rate_limit) {
            injected(*c);
            return throttled(*c, "Too many requests (injected rate limit)");
        }
        if chance(s.throttle_rate) {
            injected(*c);
            return throttled(*c, "Too many requests (injected 429)");
        }
    }
    if let Some((c, _)) = settings.iter().find(|(_, s)| chance(s.stall_rate)) {
        injected(*c);
        tracing::debug!(class = c.name(), "injected stall");
        // Never answer; give the task back only when the Hub shuts down (or after an hour).
        tokio::select! {
            _ = faults.shutdown.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(3600)) => {}
        }
        return injected_error(StatusCode::SERVICE_UNAVAILABLE, "stalled request released");
    }
    if let Some((c, _)) = settings.iter().find(|(_, s)| chance(s.error_rate)) {
        injected(*c);
        return injected_error(StatusCode::INTERNAL_SERVER_ERROR, "Internal Error (injected)");
    }
    let resp = next.run(req).await;
    let reset = match settings.iter().find(|(_, s)| chance(s.reset_rate)) {
        Some((c, _)) => {
            injected(*c);
            true
        }
        None => false,
    };
    // The tighter of the classes' bandwidth caps (0 = none).
    let mbps = settings
        .iter()
        .map(|(_, s)| s.bandwidth_mbps)
        .filter(|m| *m > 0.0)
        .fold(0.0, |acc: f64, m| if acc == 0.0 { m } else { acc.min(m) });
    let len_hint = resp
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (parts, body) = resp.into_parts();
    let shaped = Shaped {
        inner: Box::pin(body.into_data_stream()),
        faults: faults.clone(),
        classes,
        bytes_per_sec: mbps * 1_000_000.0 / 8.0,
        started: Instant::now(),
        sent: 0,
        reset_after: reset.then(|| len_hint.unwrap_or(0) / 2),
        sleep: None,
        pending: None,
    };
    Response::from_parts(parts, Body::from_stream(shaped))
}

type DataStream = Pin<Box<dyn Stream<Item = Result<Bytes, axum::Error>> + Send>>;

/// Response body wrapper: counts bytes, paces them to the bandwidth cap, and cuts the connection
/// half-way when a reset is injected (an error from the body makes hyper drop the connection).
struct Shaped {
    inner: DataStream,
    faults: Arc<Faults>,
    classes: Vec<RouteClass>,
    bytes_per_sec: f64,
    started: Instant,
    sent: u64,
    reset_after: Option<u64>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    pending: Option<Bytes>,
}

impl Stream for Shaped {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(limit) = self.reset_after
            && self.sent >= limit
        {
            return Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "injected connection reset",
            ))));
        }
        if let Some(sleep) = self.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        let chunk = match self.pending.take() {
            Some(c) => c,
            None => match self.inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Some(Err(std::io::Error::other(e))));
                }
                Poll::Ready(Some(Ok(c))) => c,
            },
        };
        // Cut the chunk so a reset lands exactly half-way and pacing stays smooth (64 KiB steps).
        let mut take = chunk.len();
        if let Some(limit) = self.reset_after {
            take = take.min((limit - self.sent) as usize);
        }
        if self.bytes_per_sec > 0.0 {
            take = take.min(64 * 1024);
        }
        let mut chunk = chunk;
        if take < chunk.len() {
            self.pending = Some(chunk.split_off(take));
        }
        self.sent += chunk.len() as u64;
        for c in &self.classes {
            self.faults.stats[c.idx()]
                .bytes_out
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        if self.bytes_per_sec > 0.0 {
            let due = Duration::try_from_secs_f64(self.sent as f64 / self.bytes_per_sec).unwrap_or(Duration::MAX);
            let elapsed = self.started.elapsed();
            if due > elapsed {
                self.sleep = Some(Box::pin(tokio::time::sleep(due - elapsed)));
            }
        }
        Poll::Ready(Some(Ok(chunk)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_validate() {
        assert!(
            FaultSettings {
                error_rate: 1.5,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            FaultSettings {
                bandwidth_mbps: -1.0,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            FaultSettings {
                error_rate: 0.5,
                latency_ms: 30,
                ..Default::default()
            }
            .validate()
            .is_ok()
        );
    }

    #[test]
    fn class_names_round_trip() {
        for c in RouteClass::EVERY {
            assert_eq!(RouteClass::parse(c.name()), Some(c));
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.name()));
        }
        assert_eq!(RouteClass::parse("blob"), Some(RouteClass::Resolve));
        assert_eq!(RouteClass::parse("xorb_upload"), Some(RouteClass::XorbUpload));
        assert_eq!(RouteClass::parse("xorbs"), None);
    }

    #[test]
    fn cas_steps_by_path() {
        let get = Method::GET;
        let post = Method::POST;
        let cases = [
            (
                &get,
                "/cas/ab12/v1/reconstructions/0123",
                Some(RouteClass::Reconstruction),
            ),
            (
                &get,
                "/cas/ab12/v2/reconstructions/0123",
                Some(RouteClass::Reconstruction),
            ),
            (&post, "/cas/ab12/v1/reconstructions", Some(RouteClass::Reconstruction)),
            (&get, "/v1/fetch_term", Some(RouteClass::XorbFetch)),
            (&get, "/cas/ab12/v1/get_xorb/default/00/", Some(RouteClass::XorbFetch)),
            (&post, "/cas/ab12/v1/xorbs/default/00", Some(RouteClass::XorbUpload)),
            (
                &post,
                "/cas/ab12/v1/xorb-grants/default/00",
                Some(RouteClass::XorbUpload),
            ),
            (
                &Method::PUT,
                "/simulation/xorb-uploads/g1",
                Some(RouteClass::XorbUpload),
            ),
            (&post, "/cas/ab12/v1/shards", Some(RouteClass::ShardUpload)),
            (&post, "/cas/ab12/v2/shards", Some(RouteClass::ShardUpload)),
            (&get, "/cas/ab12/v1/chunks/default-merkledb/00", None),
            (&post, "/cas/ab12/v1/telemetry", None),
            (&get, "/health", None),
        ];
        for (m, path, want) in cases {
            assert_eq!(cas_step(m, path), want, "{m} {path}");
        }
    }

    #[test]
    fn bucket_routes_are_classified() {
        assert_eq!(classify("/api/buckets/ns/b/batch"), Some(RouteClass::Commit));
        assert_eq!(classify("/api/buckets/ns/batch"), Some(RouteClass::Api));
        assert_eq!(classify("/api/buckets/ns/b/tree/batch"), Some(RouteClass::Api));
        assert_eq!(classify("/api/buckets/ns/b/xet-write-token"), Some(RouteClass::Api));
        assert_eq!(classify("/buckets/ns/b/resolve/x.bin"), Some(RouteClass::Resolve));
    }

    #[test]
    fn token_bucket_limits() {
        let f = Faults::new();
        f.set(
            RouteClass::Api,
            FaultSettings {
                rate_limit: 2.0,
                ..Default::default()
            },
        )
        .unwrap();
        let granted = (0..10).filter(|_| f.take_token(RouteClass::Api, 2.0)).count();
        assert!((2..=3).contains(&granted), "granted {granted}");
    }
}
