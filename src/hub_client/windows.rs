//! The Hub's request windows as this client meets them.
//!
//! The Hub rations requests per fixed window (5 minutes) in buckets: `api`, `resolvers` and
//! `pages`; the Xet CAS has limits of its own. Every answer says where the caller stands,
//! `RateLimit: "resolvers";r=REMAINING;t=SECONDS_TO_RESET`, and a refused request gets 429 with
//! the same header. A refusal can ask for a wait of up to the whole window. This keeps what the
//! answers said, per bucket, so that:
//! - once a bucket is refused (or an answer says nothing is left), later requests of that bucket
//!   wait for the window to reset instead of being sent only to meet another 429, and a demand
//!   request waits as long as the client's patience allows rather than failing a read;
//! - background work (listing-order prefetch, warmers, revision re-resolution: futures run inside
//!   [`background`]) never waits for a window and never spends its last tenth, leaving it to reads
//!   somebody is waiting on;
//! - `hubfs status`, the metrics and one log line per wait say which bucket waits until when.
//!
//! One `Windows` is shared by a Hub client and its clones, and by the Xet fetcher of its mount.

use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};

pub use crate::util::hub_bucket::Bucket;

/// What the Hub's `RateLimit` header says: `"NAME";r=REMAINING;t=SECONDS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateLimit {
    pub name: Option<String>,
    pub remaining: Option<u64>,
    pub reset: Option<Duration>,
}

/// Parses `RateLimit` (`"api";r=12;t=40`); `None` when the header is missing or says nothing.
pub(crate) fn parse_ratelimit(h: &HeaderMap) -> Option<RateLimit> {
    let v = h.get("ratelimit")?.to_str().ok()?;
    let mut out = RateLimit {
        name: None,
        remaining: None,
        reset: None,
    };
    for part in v.split([';', ',']).map(str::trim) {
        if let Some(r) = part.strip_prefix("r=") {
            out.remaining = r.trim().parse().ok();
        } else if let Some(t) = part.strip_prefix("t=") {
            out.reset = t.trim().parse().ok().map(Duration::from_secs);
        } else if part.starts_with('"') && out.name.is_none() {
            out.name = Some(part.trim_matches('"').to_string());
        }
    }
    (out.remaining.is_some() || out.reset.is_some()).then_some(out)
}

/// The quota of `RateLimit-Policy` (`"fixed window";"api";q=1000;w=300`).
fn parse_quota(h: &HeaderMap) -> Option<u64> {
    let v = h.get("ratelimit-policy")?.to_str().ok()?;
    v.split([';', ','])
        .find_map(|p| p.trim().strip_prefix("q=").and_then(|q| q.trim().parse().ok()))
}

/// What the answers of one bucket said.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    remaining: Option<u64>,
    quota: Option<u64>,
    /// When the window the last answer spoke of resets.
    resets: Option<Instant>,
    /// Nothing of this bucket is sent before then: refused, or nothing left.
    closed_until: Option<Instant>,
    /// The same instant on the wall clock, for reports.
    closed_until_wall: Option<SystemTime>,
    requests: u64,
    refused: u64,
    /// Demand requests waiting for the bucket to reopen now.
    waiting: u64,
    /// Waits begun (a request that waited), and background requests turned away.
    waits: u64,
    deferred: u64,
}

/// Why a request was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the Hub's {} request window is spent until {}, later than this request may wait (--max-hub-wait)",
        bucket.name(),
        rfc3339(*until)
    )]
    /// The bucket reopens after the caller's patience runs out.
    TooLong { bucket: Bucket, until: SystemTime },
    /// Background work yields: the bucket is closed or nearly spent.
    #[error("background request deferred: the rest of the Hub's {} request window is kept for reads", bucket.name())]
    Deferred { bucket: Bucket },
}

/// Where one bucket stands, for `hubfs status` and the metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketReport {
    pub bucket: String,
    /// Requests answered (any status).
    pub requests: u64,
    /// Answered 429.
    pub refused: u64,
    /// What the last answer said was left in the window, and of how many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<u64>,
    /// Requests of this bucket wait until then (RFC 3339), when it is closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_until: Option<String>,
    /// Seconds until then (0: open).
    #[serde(default)]
    pub wait_secs: f64,
    /// Demand requests waiting now.
    #[serde(default)]
    pub waiting: u64,
    /// Background requests turned away to keep the window for reads.
    #[serde(default)]
    pub deferred: u64,
}

/// Background work keeps off the last this-many-th of a window.
const RESERVE_DIVISOR: u64 = 10;

/// See the module doc. Lock order: `seen` is a leaf, never held across an `.await`.
#[derive(Debug, Default)]
pub struct Windows {
    seen: Mutex<[Seen; 4]>,
}

tokio::task_local! {
    static BACKGROUND: bool;
}

/// Runs `f` as background work: its Hub requests never wait for a closed window and leave the
/// last tenth of each window to demand reads; they fail at once instead (see [`Refusal`]). Only
/// for work whose failure costs nothing but the work: nothing else may join its requests.
pub async fn background<F: std::future::Future>(f: F) -> F::Output {
    BACKGROUND.scope(true, f).await
}

/// Runs `f` as demand work even inside [`background`]: for a request that other callers share.
pub async fn demand<F: std::future::Future>(f: F) -> F::Output {
    BACKGROUND.scope(false, f).await
}

/// Whether the current task runs inside [`background`].
pub fn in_background() -> bool {
    BACKGROUND.try_with(|b| *b).unwrap_or(false)
}

impl Windows {
    /// Takes in what an answer of `bucket` (by its URL) said. Returns the bucket the answer
    /// spoke of, if it was one of ours (a commit-budget 429 names `commits`: not a window).
    pub fn observe(&self, bucket: Bucket, status: u16, headers: &HeaderMap) -> Option<Bucket> {
        let rl = parse_ratelimit(headers);
        let bucket = match rl.as_ref().and_then(|r| r.name.as_deref()) {
            Some(name) => Bucket::from_name(name)?,
            None => bucket,
        };
        let now = Instant::now();
        let mut seen = self.seen.lock();
        let s = &mut seen[bucket.index()];
        s.requests += 1;
        if let Some(q) = parse_quota(headers) {
            s.quota = Some(q);
        }
        if let Some(r) = &rl {
            s.remaining = r.remaining.or(s.remaining);
            if let Some(t) = r.reset {
                s.resets = Some(now + t);
            }
        }
        let wait = match (status, &rl) {
            (429, r) => {
                s.refused += 1;
                let t = r
                    .as_ref()
                    .and_then(|r| r.reset)
                    .or_else(|| super::http::retry_hint(headers));
                Some(t.unwrap_or(Duration::from_secs(1)).max(Duration::from_secs(1)))
            }
            (
                _,
                Some(RateLimit {
                    remaining: Some(0),
                    reset: Some(t),
                    ..
                }),
            ) if !t.is_zero() => Some(*t),
            _ => None,
        };
        if let Some(wait) = wait {
            let until = now + wait;
            let open = s.closed_until.is_none_or(|u| u <= now);
            if open || s.closed_until.is_some_and(|u| u < until) {
                s.closed_until = Some(until);
                s.closed_until_wall = Some(SystemTime::now() + wait);
            }
            if open {
                let quota = s.quota.map_or_else(|| "?".to_string(), |q| q.to_string());
                let at = s.closed_until_wall.map(rfc3339).unwrap_or_default();
                drop(seen);
                tracing::warn!(
                    bucket = bucket.name(),
                    quota = %quota,
                    until = %at,
                    wait_s = wait.as_secs(),
                    "the Hub's {} window is spent: its requests wait until it resets",
                    bucket.name()
                );
            }
        }
        Some(bucket)
    }

    /// Waits until a request of `bucket` may be sent. A demand request waits for a closed bucket
    /// while it reopens within `patience` (zero: never waits here; the retry loop decides);
    /// background work is turned away at once from a closed bucket, and from the last tenth of
    /// a window.
    pub async fn admit(&self, bucket: Bucket, patience: Duration, started: Instant) -> Result<(), Refusal> {
        let background = in_background();
        let mut counted = false;
        loop {
            let now = Instant::now();
            let (until, wall) = {
                let mut seen = self.seen.lock();
                let s = &mut seen[bucket.index()];
                match s.closed_until.filter(|u| *u > now) {
                    None => {
                        if background && nearly_spent(s, now) {
                            s.deferred += 1;
                            return Err(Refusal::Deferred { bucket });
                        }
                        return Ok(());
                    }
                    Some(u) => {
                        if background {
                            s.deferred += 1;
                            return Err(Refusal::Deferred { bucket });
                        }
                        let wall = s.closed_until_wall.unwrap_or_else(SystemTime::now);
                        if patience.is_zero() {
                            return Ok(());
                        }
                        if u > started + patience {
                            return Err(Refusal::TooLong { bucket, until: wall });
                        }
                        if !counted {
                            s.waits += 1;
                            counted = true;
                        }
                        s.waiting += 1;
                        (u, wall)
                    }
                }
            };
            tracing::debug!(bucket = bucket.name(), until = %rfc3339(wall), "waiting for the Hub's window");
            // Spread the waiters a little, so a reopened window is not met by all of them at once.
            let spread = Duration::from_millis(rand::random::<u64>() % 250);
            // Counted out when the wait ends or is given up (a reader interrupted, a fetch aborted).
            let _waiting = Waiting { windows: self, bucket };
            tokio::time::sleep_until(tokio::time::Instant::from_std(until + spread)).await;
        }
    }

    /// Whether background work may spend a request of `bucket` now: it is open and more than its
    /// last tenth is left. For work that checks before it starts what others may join.
    pub fn background_ok(&self, bucket: Bucket) -> bool {
        let now = Instant::now();
        let seen = self.seen.lock();
        let s = &seen[bucket.index()];
        s.closed_until.is_none_or(|u| u <= now) && !nearly_spent(s, now)
    }

    /// When `bucket` reopens, if it is closed now.
    pub fn closed_until(&self, bucket: Bucket) -> Option<SystemTime> {
        let now = Instant::now();
        let seen = self.seen.lock();
        let s = &seen[bucket.index()];
        s.closed_until.filter(|u| *u > now).and(s.closed_until_wall)
    }

    /// Every bucket that was used, as it stands now.
    pub fn report(&self) -> Vec<BucketReport> {
        let now = Instant::now();
        let seen = *self.seen.lock();
        Bucket::ALL
            .iter()
            .zip(seen.iter())
            .filter(|(_, s)| s.requests > 0 || s.deferred > 0)
            .map(|(b, s)| {
                let window_live = s.resets.is_some_and(|r| r > now);
                BucketReport {
                    bucket: b.name().to_string(),
                    requests: s.requests,
                    refused: s.refused,
                    remaining: if window_live { s.remaining } else { s.quota },
                    quota: s.quota,
                    waiting_until: s
                        .closed_until
                        .filter(|u| *u > now)
                        .and(s.closed_until_wall)
                        .map(rfc3339),
                    wait_secs: s
                        .closed_until
                        .map_or(0.0, |u| u.saturating_duration_since(now).as_secs_f64()),
                    waiting: s.waiting,
                    deferred: s.deferred,
                }
            })
            .collect()
    }
}

/// A demand request waiting for `bucket` to reopen, counted in `Seen::waiting` while it lives.
struct Waiting<'a> {
    windows: &'a Windows,
    bucket: Bucket,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut seen = self.windows.seen.lock();
        let s = &mut seen[self.bucket.index()];
        s.waiting = s.waiting.saturating_sub(1);
    }
}

/// Whether little enough of the window is left that background work should leave it alone.
fn nearly_spent(s: &Seen, now: Instant) -> bool {
    let (Some(left), Some(quota), Some(resets)) = (s.remaining, s.quota, s.resets) else {
        return false;
    };
    resets > now && left.saturating_mul(RESERVE_DIVISOR) <= quota
}

pub(crate) fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(rl: &str, policy: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_str(rl).unwrap());
        if !policy.is_empty() {
            h.insert("ratelimit-policy", HeaderValue::from_str(policy).unwrap());
        }
        h
    }

    #[test]
    fn buckets_follow_the_hubs_routing() {
        use Bucket::*;
        let cases = [
            ("/gpt2/resolve/main/config.json", Some(Resolvers)),
            ("/datasets/a/b/resolve/abc/x.parquet", Some(Resolvers)),
            ("/buckets/a/b/resolve/x", Some(Resolvers)),
            ("/api/models/a/b/tree/main", Some(Api)),
            ("/api/whoami-v2", Some(Api)),
            ("/a/b.git/info/lfs/objects/batch", Some(Api)),
            ("/a/b", Some(Pages)),
            ("/admin/stats", None),
        ];
        for (path, want) in cases {
            assert_eq!(Bucket::of_path(path), want, "{path}");
        }
        assert_eq!(Bucket::from_name("resolvers"), Some(Resolvers));
        assert_eq!(Bucket::from_name("commits"), None);
    }

    #[test]
    fn header_parsing() {
        let h = headers("\"resolvers\";r=12;t=40", "\"fixed window\";\"resolvers\";q=3000;w=300");
        assert_eq!(
            parse_ratelimit(&h),
            Some(RateLimit {
                name: Some("resolvers".into()),
                remaining: Some(12),
                reset: Some(Duration::from_secs(40)),
            })
        );
        assert_eq!(parse_quota(&h), Some(3000));
        assert_eq!(parse_ratelimit(&HeaderMap::new()), None);
        assert_eq!(parse_ratelimit(&headers("\"api\"", "")), None);
    }

    #[tokio::test]
    async fn a_refusal_closes_the_bucket_until_it_resets() {
        let w = Windows::default();
        let h = headers("\"resolvers\";r=0;t=1", "\"fixed window\";\"resolvers\";q=5;w=300");
        assert_eq!(w.observe(Bucket::Resolvers, 429, &h), Some(Bucket::Resolvers));
        assert!(w.closed_until(Bucket::Resolvers).is_some());
        assert!(w.closed_until(Bucket::Api).is_none(), "other buckets stay open");
        // Patience shorter than the wait: refused at once, naming the bucket.
        let started = Instant::now();
        assert!(matches!(
            w.admit(Bucket::Resolvers, Duration::from_millis(100), started).await,
            Err(Refusal::TooLong {
                bucket: Bucket::Resolvers,
                ..
            })
        ));
        // Background work never waits.
        assert_eq!(
            background(w.admit(Bucket::Resolvers, Duration::from_secs(60), started)).await,
            Err(Refusal::Deferred {
                bucket: Bucket::Resolvers
            })
        );
        // A demand request with patience waits for the reset, then goes.
        let t = Instant::now();
        w.admit(Bucket::Resolvers, Duration::from_secs(60), t).await.unwrap();
        assert!(t.elapsed() >= Duration::from_millis(900), "{:?}", t.elapsed());
        let r = w.report();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].requests, r[0].refused, r[0].deferred), (1, 1, 1));
        assert_eq!(r[0].waiting_until, None, "reopened");
    }

    #[tokio::test]
    async fn a_wait_given_up_is_counted_out() {
        let w = Windows::default();
        let h = headers("\"api\";r=0;t=60", "\"fixed window\";\"api\";q=5;w=300");
        w.observe(Bucket::Api, 429, &h);
        let started = Instant::now();
        let waited = tokio::time::timeout(
            Duration::from_millis(100),
            w.admit(Bucket::Api, Duration::from_secs(600), started),
        )
        .await;
        assert!(waited.is_err(), "still waiting for the reset");
        assert_eq!(w.report()[0].waiting, 0, "the abandoned wait is not counted");
    }

    #[tokio::test]
    async fn background_keeps_off_the_last_tenth() {
        let w = Windows::default();
        let q = "\"fixed window\";\"api\";q=100;w=300";
        w.observe(Bucket::Api, 200, &headers("\"api\";r=11;t=200", q));
        assert_eq!(
            background(w.admit(Bucket::Api, Duration::ZERO, Instant::now())).await,
            Ok(())
        );
        w.observe(Bucket::Api, 200, &headers("\"api\";r=10;t=200", q));
        assert_eq!(
            background(w.admit(Bucket::Api, Duration::ZERO, Instant::now())).await,
            Err(Refusal::Deferred { bucket: Bucket::Api })
        );
        assert_eq!(
            w.admit(Bucket::Api, Duration::ZERO, Instant::now()).await,
            Ok(()),
            "demand reads may spend it"
        );
        // r=0 on a 200 closes the bucket without waiting for a 429.
        w.observe(Bucket::Api, 200, &headers("\"api\";r=0;t=200", q));
        assert!(w.closed_until(Bucket::Api).is_some());
        // The commit budget's 429 names `commits`: not a window.
        let c = headers("\"commits\";r=0;t=60", "");
        assert_eq!(w.observe(Bucket::Api, 429, &c), None);
    }
}
