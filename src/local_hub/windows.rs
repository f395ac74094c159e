//! The real Hub's request windows (docs: huggingface.co/docs/hub/rate-limits), enforced by default
//! so that clients meet here the 429s they will meet on the Hub.
//!
//! Every request to the API origin falls in one bucket: `resolvers` (a `/resolve/` segment), `api`
//! (`/api/…` and the LFS batch API) or `pages` (everything else); requests to the CAS API fall in
//! `cas`. Each bucket has a quota per fixed window (300 s, aligned to the unix clock), counted per
//! user for a valid token (all of the user's tokens together) and per client IP otherwise, at the
//! quotas of the user's tier (anonymous callers have their own). Past the quota the answer is the
//! Hub's 429, before any handler runs; refused requests do not use the quota. `/admin/…`, the blob
//! origin (the Hub's CDN) and presigned CAS URLs are never counted.
//!
//! Settings change at runtime (`/admin/limits`, `LocalHub::set_request_windows`); counts live in
//! memory, and a key is forgotten once a whole window passes without its requests.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};

use super::error::HubError;
use super::state::HubState;

/// The Hub's window: 5 minutes.
pub const HUB_WINDOW_SECS: u64 = 300;

pub use crate::util::hub_bucket::Bucket;

/// Bucket of a request path on the API origin; `None` for the local Hub's own `/admin/…`.
pub fn bucket_of(path: &str) -> Option<Bucket> {
    Bucket::of_path(path)
}

/// A plan's tier. Quotas per window, as the Hub documents them (Sept 2025).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Requests without a token, counted per IP.
    Anonymous,
    Free,
    Pro,
    Team,
    Enterprise,
    EnterprisePlus,
}

impl Tier {
    pub const ALL: [Tier; 6] = [
        Tier::Anonymous,
        Tier::Free,
        Tier::Pro,
        Tier::Team,
        Tier::Enterprise,
        Tier::EnterprisePlus,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Tier::Anonymous => "anonymous",
            Tier::Free => "free",
            Tier::Pro => "pro",
            Tier::Team => "team",
            Tier::Enterprise => "enterprise",
            Tier::EnterprisePlus => "enterprise-plus",
        }
    }

    /// The documented quota of `bucket` per 5-minute window; `None` for `cas` (not documented).
    pub fn documented(self, bucket: Bucket) -> Option<u64> {
        let (api, resolvers, pages) = match self {
            Tier::Anonymous => (500, 3000, 100),
            Tier::Free => (1000, 5000, 200),
            Tier::Pro => (2500, 12_000, 400),
            Tier::Team => (3000, 20_000, 400),
            Tier::Enterprise => (6000, 50_000, 600),
            Tier::EnterprisePlus => (10_000, 100_000, 1000),
        };
        match bucket {
            Bucket::Api => Some(api),
            Bucket::Resolvers => Some(resolvers),
            Bucket::Pages => Some(pages),
            Bucket::Cas => None,
        }
    }
}

impl FromStr for Tier {
    type Err = String;

    /// A user's tier: `free`, `pro`, `team`, `enterprise` or `enterprise-plus`.
    fn from_str(s: &str) -> Result<Tier, String> {
        Tier::ALL
            .into_iter()
            .filter(|t| *t != Tier::Anonymous)
            .find(|t| t.name() == s.trim())
            .ok_or_else(|| format!("unknown tier {s:?}: use free, pro, team, enterprise or enterprise-plus"))
    }
}

impl Serialize for Tier {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The settings of the request windows: [`LocalHubConfig::request_windows`](super::LocalHubConfig).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestWindows {
    /// Off, no request is counted or refused (and no `RateLimit` header sent).
    pub enabled: bool,
    /// Length of the fixed window, in seconds (the Hub: 300).
    pub window_secs: u64,
    /// Quotas are `ceil(documented × scale)`, at least 1: `0.1` with a 30 s window is the Hub's
    /// strictness in a tenth of the time, for CI.
    pub quota_scale: f64,
    /// Tier of each user with a token; users not listed are `free`.
    pub tiers: BTreeMap<String, Tier>,
    /// Requests per window to the CAS API, per user or IP (not scaled); 0 is no limit.
    pub cas_quota: u64,
}

impl Default for RequestWindows {
    /// The Hub's: 5-minute windows at the documented quotas, every user `free`, no CAS quota.
    fn default() -> Self {
        RequestWindows {
            enabled: true,
            window_secs: HUB_WINDOW_SECS,
            quota_scale: 1.0,
            tiers: BTreeMap::new(),
            cas_quota: 0,
        }
    }
}

impl RequestWindows {
    /// Nothing counted: for tests and benchmarks that make more requests than the Hub allows.
    pub fn off() -> Self {
        RequestWindows {
            enabled: false,
            ..RequestWindows::default()
        }
    }

    /// The Hub's windows shortened to `window_secs` with quotas scaled by `quota_scale`.
    pub fn scaled(window_secs: u64, quota_scale: f64) -> Self {
        RequestWindows {
            window_secs,
            quota_scale,
            ..RequestWindows::default()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.window_secs == 0 {
            return Err("the window must be at least 1 second".to_string());
        }
        if !self.quota_scale.is_finite() || self.quota_scale <= 0.0 || self.quota_scale > 1e6 {
            return Err(format!(
                "the quota scale must be a number above 0 (at most 1000000), got {}",
                self.quota_scale
            ));
        }
        Ok(())
    }

    /// A user's tier (`free` unless set).
    pub fn tier_of(&self, user: &str) -> Tier {
        self.tiers.get(user).copied().unwrap_or(Tier::Free)
    }

    /// Requests of `bucket` allowed per window at `tier`; `None` is no limit.
    pub fn quota(&self, tier: Tier, bucket: Bucket) -> Option<u64> {
        match tier.documented(bucket) {
            // A hair below the product first, so that 5000 × 0.0006 is 3 and not 4.
            Some(n) => Some(((n as f64 * self.quota_scale - 1e-9).ceil() as u64).max(1)),
            None if bucket == Bucket::Cas && self.cas_quota > 0 => Some(self.cas_quota),
            None => None,
        }
    }

    /// The settings as `/admin/limits` shows them, with the quotas they give every tier.
    pub fn to_json(&self) -> Value {
        let quotas: serde_json::Map<String, Value> = Tier::ALL
            .iter()
            .map(|t| {
                let q: serde_json::Map<String, Value> = Bucket::ALL
                    .iter()
                    .map(|b| (b.name().to_string(), json!(self.quota(*t, *b))))
                    .collect();
                (t.name().to_string(), Value::Object(q))
            })
            .collect();
        json!({
            "enabled": self.enabled,
            "window_secs": self.window_secs,
            "quota_scale": self.quota_scale,
            "cas_quota": self.cas_quota,
            "tiers": self.tiers,
            "quotas": quotas,
        })
    }

    /// Applies `/admin/limits`' `"request_windows"` object (fields left out keep their value;
    /// `tiers` adds to the users' tiers). Returns whether the counts are to be reset.
    pub fn apply_json(&mut self, v: &Value) -> Result<bool, String> {
        let usage = "use {\"enabled\": bool, \"window_secs\": N, \"quota_scale\": F, \"cas_quota\": N, \
                     \"tiers\": {\"USER\": \"free|pro|team|enterprise|enterprise-plus\"}, \"reset\": bool}";
        let obj = v
            .as_object()
            .ok_or_else(|| format!("request_windows must be an object: {usage}"))?;
        let mut next = self.clone();
        let mut reset = false;
        for (k, v) in obj {
            match (k.as_str(), v) {
                ("enabled", Value::Bool(b)) => next.enabled = *b,
                ("window_secs", Value::Number(n)) => {
                    next.window_secs = n
                        .as_u64()
                        .ok_or_else(|| format!("window_secs {n}: a whole number ≥ 1"))?
                }
                ("quota_scale", Value::Number(n)) => {
                    next.quota_scale = n.as_f64().ok_or_else(|| format!("quota_scale {n}: a number above 0"))?
                }
                ("cas_quota", Value::Number(n)) => {
                    next.cas_quota = n.as_u64().ok_or_else(|| format!("cas_quota {n}: a whole number ≥ 0"))?
                }
                ("tiers", Value::Object(m)) => {
                    for (user, tier) in m {
                        let tier = tier.as_str().ok_or_else(|| format!("tier of {user:?}: {usage}"))?;
                        next.tiers.insert(user.clone(), tier.parse()?);
                    }
                }
                ("reset", Value::Bool(b)) => reset = *b,
                _ => return Err(format!("unknown or invalid field {k:?}: {usage}")),
            }
        }
        next.validate()?;
        *self = next;
        Ok(reset)
    }
}

/// Whose window a request is counted in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Who {
    /// A user with a valid token: all of the user's tokens share one window.
    User(String),
    /// Anonymous requests (and ones with an unknown token), per client IP.
    Ip(IpAddr),
}

impl fmt::Display for Who {
    /// `user:NAME` or `ip:ADDR`, the keys of `/admin/stats`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::User(u) => write!(f, "user:{u}"),
            Who::Ip(ip) => write!(f, "ip:{ip}"),
        }
    }
}

/// Where a key stands in one bucket's window after a request was counted (or refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub bucket: Bucket,
    pub quota: u64,
    pub remaining: u64,
    /// Whole seconds until the window ends, rounded up (at least 1).
    pub reset_secs: u64,
    pub window_secs: u64,
}

impl Charge {
    /// `RateLimit` and `RateLimit-Policy` as the Hub sends them (the IETF draft's format).
    pub fn headers(&self) -> [(&'static str, String); 2] {
        let name = self.bucket.name();
        [
            (
                "ratelimit",
                format!("\"{name}\";r={};t={}", self.remaining, self.reset_secs),
            ),
            (
                "ratelimit-policy",
                format!("\"fixed window\";\"{name}\";q={};w={}", self.quota, self.window_secs),
            ),
        ]
    }
}

/// A request past its window's quota: the Hub's 429.
#[derive(Debug, Clone)]
pub struct RequestRateLimited {
    pub charge: Charge,
    pub who: Who,
    pub tier: Tier,
}

impl RequestRateLimited {
    /// The Hub's words: to a user "We had to rate limit you, you hit the quota of 1000 api requests
    /// per 5 minutes period. Upgrade to a PRO user or Team/Enterprise organization account
    /// (`https://hf.co/pricing`) to get higher limits. See `https://huggingface.co/docs/hub/rate-limits`"
    /// (the upgrade advice is only known from free users' 429s, so paid tiers are spared it); to an
    /// anonymous caller the Hub's "We had to rate limit your IP (…)" message.
    pub fn message(&self) -> String {
        let c = &self.charge;
        match (&self.who, self.tier) {
            (Who::Ip(ip), _) => format!(
                "We had to rate limit your IP ({ip}). To continue using our service, create a HF account or login \
                 to your existing account, and make sure you pass a HF_TOKEN if you're using the API."
            ),
            (Who::User(_), tier) => {
                let upgrade = if tier == Tier::Free {
                    " Upgrade to a PRO user or Team/Enterprise organization account (https://hf.co/pricing) to get \
                     higher limits."
                } else {
                    ""
                };
                format!(
                    "We had to rate limit you, you hit the quota of {} {} requests per {} period.{upgrade} See \
                     https://huggingface.co/docs/hub/rate-limits",
                    c.quota,
                    c.bucket.name(),
                    window_phrase(c.window_secs),
                )
            }
        }
    }
}

/// "5 minutes", "1 hour", "30 seconds": the window as the Hub's message names it.
fn window_phrase(secs: u64) -> String {
    let unit = |n: u64, name: &str| {
        if n == 1 {
            format!("1 {name}")
        } else {
            format!("{n} {name}s")
        }
    };
    match secs {
        s if s % 3600 == 0 => unit(s / 3600, "hour"),
        s if s % 60 == 0 => unit(s / 60, "minute"),
        s => unit(s, "second"),
    }
}

/// What the limiter says about one request.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Not counted (windows off, or no quota for the bucket): no headers.
    Untracked,
    Allowed(Charge),
    Refused(Box<RequestRateLimited>),
}

/// The unix time, injectable for tests.
pub type Clock = Arc<dyn Fn() -> Duration + Send + Sync>;

fn system_clock() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// One key's counts in its latest window.
#[derive(Debug, Clone)]
struct KeyWindow {
    start_ms: u64,
    window_ms: u64,
    used: [u64; 4],
    /// Refused since the key was last forgotten.
    refused: [u64; 4],
}

struct Inner {
    settings: RequestWindows,
    keys: HashMap<Who, KeyWindow>,
    /// Start of the window the table was last swept in.
    swept_ms: u64,
    /// Refused requests per bucket since the start (or the last reset).
    refused: [u64; 4],
}

/// The counts of every key, behind one lock (a request takes it once, briefly).
pub struct WindowLimiter {
    inner: Mutex<Inner>,
    clock: Clock,
}

/// One key's figures in one bucket, as `/admin/stats` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BucketStats {
    /// Requests counted in the current window.
    pub used: u64,
    /// `None`: no limit.
    pub quota: Option<u64>,
    pub remaining: Option<u64>,
    pub reset_secs: u64,
    /// Requests refused since the key was last forgotten.
    pub refused: u64,
}

/// `/admin/stats`' `"request_windows"`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowStats {
    pub enabled: bool,
    pub window_secs: u64,
    /// `user:NAME` or `ip:ADDR` → bucket name → figures; keys seen in this window or the previous.
    pub keys: BTreeMap<String, BTreeMap<&'static str, BucketStats>>,
    /// Refused per bucket since the start (or the last reset), every key together.
    pub refused: BTreeMap<&'static str, u64>,
}

impl WindowLimiter {
    pub fn new(settings: RequestWindows) -> WindowLimiter {
        WindowLimiter::with_clock(settings, Arc::new(system_clock))
    }

    pub fn with_clock(settings: RequestWindows, clock: Clock) -> WindowLimiter {
        WindowLimiter {
            inner: Mutex::new(Inner {
                settings,
                keys: HashMap::new(),
                swept_ms: 0,
                refused: [0; 4],
            }),
            clock,
        }
    }

    pub fn settings(&self) -> RequestWindows {
        self.inner.lock().settings.clone()
    }

    /// New settings; counts of the current window carry on (a new window length starts new windows).
    pub fn set_settings(&self, settings: RequestWindows) -> Result<(), String> {
        settings.validate()?;
        self.inner.lock().settings = settings;
        Ok(())
    }

    /// Forgets every count: a fresh window for everyone.
    pub fn reset(&self) {
        let mut g = self.inner.lock();
        g.keys.clear();
        g.refused = [0; 4];
    }

    /// (start of the current window, its length, both in ms; now in ms).
    fn window(settings: &RequestWindows, now: Duration) -> (u64, u64, u64) {
        let now_ms = now.as_millis() as u64;
        let window_ms = settings.window_secs.max(1) * 1000;
        (now_ms - now_ms % window_ms, window_ms, now_ms)
    }

    /// Counts one request of `who` in `bucket`, or refuses it.
    pub fn check(&self, who: &Who, bucket: Bucket) -> Verdict {
        let now = (self.clock)();
        let mut g = self.inner.lock();
        if !g.settings.enabled {
            return Verdict::Untracked;
        }
        let tier = match who {
            Who::User(u) => g.settings.tier_of(u),
            Who::Ip(_) => Tier::Anonymous,
        };
        let Some(quota) = g.settings.quota(tier, bucket) else {
            return Verdict::Untracked;
        };
        let (start_ms, window_ms, now_ms) = Self::window(&g.settings, now);
        if g.swept_ms != start_ms {
            // Once per window: forget the keys idle for a whole window, which bounds the table by
            // the keys seen in the last two windows.
            g.keys.retain(|_, k| k.start_ms + k.window_ms >= start_ms);
            g.swept_ms = start_ms;
        }
        let window_secs = g.settings.window_secs;
        let k = g.keys.entry(who.clone()).or_insert_with(|| KeyWindow {
            start_ms,
            window_ms,
            used: [0; 4],
            refused: [0; 4],
        });
        if (k.start_ms, k.window_ms) != (start_ms, window_ms) {
            k.start_ms = start_ms;
            k.window_ms = window_ms;
            k.used = [0; 4];
        }
        let reset_secs = (start_ms + window_ms - now_ms).div_ceil(1000).max(1);
        let i = bucket.index();
        if k.used[i] >= quota {
            k.refused[i] += 1;
            g.refused[i] += 1;
            return Verdict::Refused(Box::new(RequestRateLimited {
                charge: Charge {
                    bucket,
                    quota,
                    remaining: 0,
                    reset_secs,
                    window_secs,
                },
                who: who.clone(),
                tier,
            }));
        }
        k.used[i] += 1;
        Verdict::Allowed(Charge {
            bucket,
            quota,
            remaining: quota - k.used[i],
            reset_secs,
            window_secs,
        })
    }

    pub fn stats(&self) -> WindowStats {
        let now = (self.clock)();
        let g = self.inner.lock();
        let s = &g.settings;
        let (start_ms, window_ms, now_ms) = Self::window(s, now);
        let reset_secs = (start_ms + window_ms - now_ms).div_ceil(1000).max(1);
        let keys = g
            .keys
            .iter()
            .filter(|(_, k)| k.start_ms + k.window_ms >= start_ms)
            .map(|(who, k)| {
                let tier = match who {
                    Who::User(u) => s.tier_of(u),
                    Who::Ip(_) => Tier::Anonymous,
                };
                let current = (k.start_ms, k.window_ms) == (start_ms, window_ms);
                let buckets = Bucket::ALL
                    .iter()
                    .map(|b| {
                        let used = if current { k.used[b.index()] } else { 0 };
                        let quota = s.quota(tier, *b);
                        let st = BucketStats {
                            used,
                            quota,
                            remaining: quota.map(|q| q.saturating_sub(used)),
                            reset_secs,
                            refused: k.refused[b.index()],
                        };
                        (b.name(), st)
                    })
                    .collect();
                (who.to_string(), buckets)
            })
            .collect();
        WindowStats {
            enabled: s.enabled,
            window_secs: s.window_secs,
            keys,
            refused: Bucket::ALL.iter().map(|b| (b.name(), g.refused[b.index()])).collect(),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().keys.len()
    }
}

/// Which public origin a [`layer`] guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Buckets by path ([`bucket_of`]); keys by Hub token.
    Api,
    /// `cas` for the CAS API; keys by the user the CAS token was issued to.
    Cas,
}

/// The client's IP (`0.0.0.0` if the listener did not record it); IPv4-mapped addresses as IPv4.
fn client_ip(req: &Request) -> IpAddr {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_canonical())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    v.strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))
        .map(str::trim)
}

/// Axum middleware: counts the request in its key's window and refuses it past the quota before
/// any handler sees it; counted answers get the `RateLimit` headers (unless they carry their own,
/// as the commit budget's 429 does).
pub async fn layer(State((state, origin)): State<(Arc<HubState>, Origin)>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let bucket = match origin {
        Origin::Api => bucket_of(path),
        Origin::Cas if super::xet::is_presigned(path) || path == "/health" => None,
        Origin::Cas => Some(Bucket::Cas),
    };
    let Some(bucket) = bucket else {
        return next.run(req).await;
    };
    let ip = client_ip(&req);
    let user = match origin {
        Origin::Api => state.auth.caller(req.headers()).ok().flatten().map(|c| c.user),
        Origin::Cas => bearer(req.headers())
            .and_then(|t| state.cas_grant(t))
            .and_then(|g| g.user),
    };
    let who = user.map(Who::User).unwrap_or(Who::Ip(ip));
    match state.windows.check(&who, bucket) {
        Verdict::Untracked => next.run(req).await,
        Verdict::Refused(r) => {
            tracing::debug!(key = %r.who, bucket = bucket.name(), "request window spent: 429");
            HubError::RequestRateLimited(r).into_response()
        }
        Verdict::Allowed(charge) => {
            let mut resp = next.run(req).await;
            if !resp.headers().contains_key("ratelimit") {
                for (name, value) in charge.headers() {
                    if let Ok(v) = HeaderValue::from_str(&value) {
                        resp.headers_mut().insert(name, v);
                    }
                }
            }
            resp
        }
    }
}

#[cfg(test)]
mod tests;
