//! The real Hub's limits on writes, as far as the local Hub models them (see docs/LOCAL_HUB.md,
//! "Limits"):
//!
//! - a commit budget per repository: at most N accepted commits in any sliding window of S seconds
//!   (the Hub's free plan: 128 per hour), past which the commit endpoint answers 429 with the Hub's
//!   message, `Retry-After` and `RateLimit`/`RateLimit-Policy` headers;
//! - no regular (non-LFS) file larger than 10 MiB in a commit (400, the Hub's pre-receive message);
//! - at most 10,000 entries in one directory (400, the Hub's pre-receive message; adjustable, as
//!   `LocalHubConfig::dir_entry_limit`, `--dir-entry-limit`, `/admin/limits`).
//!
//! The budget counts accepted commits of every client and token together, is kept in memory (a
//! restart forgets it) and can be changed at runtime (`POST /admin/limits`, `LocalHub::set_commit_limit`).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use super::error::HubError;
use super::model::FileEntry;
use super::names::RepoId;

/// Regular (non-LFS) files larger than this are refused in a commit, as the Hub's pre-receive hook
/// does ("Your push was rejected because it contains files larger than 10 MiB").
pub const MAX_REGULAR_FILE: u64 = 10 << 20;
/// Most entries (files and folders) one directory may hold ("Each directory in your git repo can
/// only contain up to 10000 files"): the default of `LocalHubConfig::dir_entry_limit`.
pub const MAX_DIR_ENTRIES: usize = 10_000;
/// Most operations one bucket batch may carry, and paths one bucket paths-info request may name:
/// both stock clients (huggingface_hub, hf-hub) split their requests at 1,000, the Hub's limit as
/// far as they show it. The default of `LocalHubConfig::bucket_batch_limit`.
pub const MAX_BUCKET_BATCH_OPS: usize = 1000;
/// Commit times kept per repo beyond what the current limit needs, so a limit raised at runtime
/// still sees the commits made before it (up to this many).
const KEEP_TIMES: usize = 10_000;

/// A commit budget per repository: at most `max` accepted commits in any `window`. `max == 0` is
/// no limit. Written `N/SECONDS` (`128/3600`), or `0` for no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitLimit {
    pub max: u32,
    pub window: Duration,
}

impl CommitLimit {
    /// The Hub's free plan: 128 commits per hour per repository.
    pub const HUB_FREE: CommitLimit = CommitLimit {
        max: 128,
        window: Duration::from_secs(3600),
    };
    pub const UNLIMITED: CommitLimit = CommitLimit {
        max: 0,
        window: Duration::ZERO,
    };

    /// `max` commits per `window_secs` seconds; `max == 0` is no limit.
    pub fn new(max: u32, window_secs: u64) -> Result<CommitLimit, String> {
        if max == 0 {
            return Ok(CommitLimit::UNLIMITED);
        }
        if window_secs == 0 {
            return Err("the window must be at least 1 second".to_string());
        }
        Ok(CommitLimit {
            max,
            window: Duration::from_secs(window_secs),
        })
    }

    pub fn is_unlimited(&self) -> bool {
        self.max == 0
    }
}

impl Default for CommitLimit {
    fn default() -> Self {
        CommitLimit::HUB_FREE
    }
}

impl fmt::Display for CommitLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unlimited() {
            write!(f, "0")
        } else {
            write!(f, "{}/{}", self.max, self.window.as_secs())
        }
    }
}

impl FromStr for CommitLimit {
    type Err = String;

    fn from_str(s: &str) -> Result<CommitLimit, String> {
        let s = s.trim();
        let usage = "expected N/SECONDS (e.g. 128/3600: at most N commits per repository in any \
                     SECONDS-second window) or 0 for no limit";
        let int = |part: &str, what: &str| -> Result<u64, String> {
            part.trim()
                .parse::<u64>()
                .map_err(|_| format!("{what} {part:?} is not a whole number ≥ 0; {usage}"))
        };
        match s.split_once('/') {
            None if s == "0" => Ok(CommitLimit::UNLIMITED),
            None => Err(format!("{s:?}: {usage}")),
            Some((n, secs)) => {
                let n = int(n, "count")?;
                let secs = int(secs, "window")?;
                let n = u32::try_from(n).map_err(|_| format!("count {n} is too large"))?;
                if n > 0 && secs == 0 {
                    return Err(format!("{s:?}: the window must be at least 1 second; {usage}"));
                }
                CommitLimit::new(n, secs)
            }
        }
    }
}

impl Serialize for CommitLimit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What the commit endpoint answers past the budget: the Hub's 429.
#[derive(Debug, Clone)]
pub struct CommitRateLimited {
    pub limit: CommitLimit,
    /// Seconds until the oldest commit of the window leaves it (at least 1).
    pub retry_after: u64,
}

impl CommitRateLimited {
    /// The Hub's text: "You have exceeded the rate limit for repository commits (128 per hour). You
    /// can retry this action in 43 minutes. To reduce the number of commits, …".
    pub fn message(&self) -> String {
        format!(
            "You have exceeded the rate limit for repository commits ({} {}). You can retry this \
             action in {}. To reduce the number of commits, you can upload entire folders at once \
             using the Hub Python library: https://huggingface.co/docs/huggingface_hub/guides/upload#upload-a-folder",
            self.limit.max,
            per_window(self.limit.window.as_secs()),
            retry_phrase(self.retry_after),
        )
    }

    /// `RateLimit` in the Hub's format (`"api";r=0;t=55`), naming the commit budget.
    pub fn ratelimit_header(&self) -> String {
        format!("\"commits\";r=0;t={}", self.retry_after)
    }

    /// `RateLimit-Policy` in the Hub's format (`"fixed window";"api";q=500;w=300`).
    pub fn policy_header(&self) -> String {
        format!(
            "\"sliding window\";\"commits\";q={};w={}",
            self.limit.max,
            self.limit.window.as_secs()
        )
    }
}

/// "per hour", "per minute", "per 2 seconds", …: how the message names the window.
fn per_window(secs: u64) -> String {
    let unit = |n: u64, name: &str| {
        if n == 1 {
            format!("per {name}")
        } else {
            format!("per {n} {name}s")
        }
    };
    match secs {
        s if s > 0 && s % 86_400 == 0 => unit(s / 86_400, "day"),
        s if s > 0 && s % 3600 == 0 => unit(s / 3600, "hour"),
        s if s > 0 && s % 60 == 0 => unit(s / 60, "minute"),
        s => unit(s, "second"),
    }
}

/// "43 minutes", "about 1 hour": the wait as the Hub words it (the distance wording of date-fns'
/// `formatDistance`, which the Hub's "in about 1 hour" / "in 43 minutes" match), with seconds
/// spelled out under a minute so short test windows read sensibly.
fn retry_phrase(secs: u64) -> String {
    let plural = |n: u64, name: &str| {
        if n == 1 {
            format!("1 {name}")
        } else {
            format!("{n} {name}s")
        }
    };
    match secs {
        s if s < 60 => plural(s.max(1), "second"),
        s if s < 2670 => plural(((s + 30) / 60).max(1), "minute"),
        s if s < 5370 => "about 1 hour".to_string(),
        s if s < 86_370 => format!("about {}", plural((s + 1800) / 3600, "hour")),
        s => plural((s + 43_200) / 86_400, "day"),
    }
}

/// Commits of one repo: the times of the newest accepted ones, and totals since the Hub started.
#[derive(Debug, Default)]
struct RepoCommits {
    times: VecDeque<Instant>,
    total: u64,
    refused: u64,
}

/// Per-repo commit counts, as `/admin/limits` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepoCommitStats {
    /// Accepted commits in the current window (in the last hour when there is no limit).
    pub in_window: u64,
    /// Accepted commits since the Hub started (or since the counts were reset).
    pub total: u64,
    /// Commits refused with 429.
    pub refused: u64,
    /// Seconds until the next commit is accepted, when the budget is spent.
    pub retry_after: Option<u64>,
}

/// The commit budget of every repo. Checked and charged while the repo's write lock is held, so
/// commits to one repo are counted in order; repos do not share anything but this table's lock.
pub struct CommitLimiter {
    inner: Mutex<LimiterInner>,
}

struct LimiterInner {
    limit: CommitLimit,
    repos: HashMap<RepoId, RepoCommits>,
}

impl CommitLimiter {
    pub fn new(limit: CommitLimit) -> CommitLimiter {
        CommitLimiter {
            inner: Mutex::new(LimiterInner {
                limit,
                repos: HashMap::new(),
            }),
        }
    }

    pub fn limit(&self) -> CommitLimit {
        self.inner.lock().limit
    }

    pub fn set_limit(&self, limit: CommitLimit) {
        self.inner.lock().limit = limit;
    }

    /// Forgets every repo's commits (a fresh budget everywhere).
    pub fn reset(&self) {
        self.inner.lock().repos.clear();
    }

    /// Whether `repo` may commit now; the refusal carries the wait. A refusal is counted.
    pub fn check(&self, repo: &RepoId) -> Result<(), CommitRateLimited> {
        self.check_at(repo, Instant::now())
    }

    fn check_at(&self, repo: &RepoId, now: Instant) -> Result<(), CommitRateLimited> {
        let mut g = self.inner.lock();
        let limit = g.limit;
        if limit.is_unlimited() {
            return Ok(());
        }
        let Some(rc) = g.repos.get_mut(repo) else {
            return Ok(());
        };
        match retry_after(limit, &rc.times, now) {
            None => Ok(()),
            Some(retry_after) => {
                rc.refused += 1;
                Err(CommitRateLimited { limit, retry_after })
            }
        }
    }

    /// Charges one accepted commit to `repo`.
    pub fn record(&self, repo: &RepoId) {
        self.record_at(repo, Instant::now())
    }

    fn record_at(&self, repo: &RepoId, now: Instant) {
        let mut g = self.inner.lock();
        let keep = (g.limit.max as usize).max(KEEP_TIMES);
        let rc = g.repos.entry(repo.clone()).or_default();
        rc.total += 1;
        rc.times.push_back(now);
        while rc.times.len() > keep {
            rc.times.pop_front();
        }
    }

    /// Counts per repo (keyed `datasets/ns/name`, models without a prefix), sorted.
    pub fn stats(&self) -> BTreeMap<String, RepoCommitStats> {
        let now = Instant::now();
        let g = self.inner.lock();
        g.repos
            .iter()
            .map(|(id, rc)| {
                let window = if g.limit.is_unlimited() {
                    CommitLimit::HUB_FREE.window
                } else {
                    g.limit.window
                };
                let in_window = rc
                    .times
                    .iter()
                    .filter(|t| now.saturating_duration_since(**t) < window)
                    .count();
                let s = RepoCommitStats {
                    in_window: in_window as u64,
                    total: rc.total,
                    refused: rc.refused,
                    retry_after: if g.limit.is_unlimited() {
                        None
                    } else {
                        retry_after(g.limit, &rc.times, now)
                    },
                };
                (id.to_string(), s)
            })
            .collect()
    }
}

/// Seconds until a commit fits the budget again, or `None` if one fits now: the window holds
/// `max` commits when the `max`-th newest is younger than the window, and frees a place when that
/// one leaves it.
fn retry_after(limit: CommitLimit, times: &VecDeque<Instant>, now: Instant) -> Option<u64> {
    let max = limit.max as usize;
    if max == 0 || times.len() < max {
        return None;
    }
    let nth_newest = times[times.len() - max];
    let age = now.saturating_duration_since(nth_newest);
    if age >= limit.window {
        return None;
    }
    let left = limit.window - age;
    // Whole seconds, rounded up, so a client that waits that long finds a place.
    Some(left.as_secs() + u64::from(left.subsec_nanos() > 0))
}

/// `refs/heads/main` for a branch, `refs/pr/N` as it is: how the Hub's pre-receive messages name
/// the ref being pushed.
pub fn full_ref(branch: &str) -> String {
    if branch.starts_with("refs/") {
        branch.to_string()
    } else {
        format!("refs/heads/{branch}")
    }
}

/// The Hub's refusal of regular files over 10 MiB, for the `(path, entry)` of each file a commit
/// adds.
pub fn check_regular_sizes<'a>(
    added: impl IntoIterator<Item = (&'a str, &'a FileEntry)>,
    git_ref: &str,
) -> Result<(), HubError> {
    let offending: Vec<String> = added
        .into_iter()
        .filter(|(_, e)| e.lfs.is_none() && e.size > MAX_REGULAR_FILE)
        .map(|(p, _)| format!("- {p} (ref: {git_ref})"))
        .collect();
    if offending.is_empty() {
        return Ok(());
    }
    Err(HubError::BadRequest(format!(
        "Your push was rejected because it contains files larger than 10 MiB. Please use \
         https://git-lfs.github.com/ to store large files. See also: \
         https://hf.co/docs/hub/repositories-getting-started#terminal Offending files: {}",
        offending.join(" ")
    )))
}

/// The Hub's refusal of directories with more than `max` (10,000) entries: checks the directories
/// that gained entries in this commit (`touched`: every ancestor of an added path, `""` the root),
/// in the commit's resulting file map. `max == 0` checks nothing.
pub fn check_dir_entries(
    files: &BTreeMap<String, FileEntry>,
    touched: &BTreeSet<String>,
    git_ref: &str,
    max: usize,
) -> Result<(), HubError> {
    if max == 0 {
        return Ok(());
    }
    let offending: Vec<String> = touched
        .iter()
        .filter(|d| dir_entries(files, d, max) > max)
        .map(|d| {
            if d.is_empty() {
                "/".to_string()
            } else {
                format!("/{d}/")
            }
        })
        .collect();
    if offending.is_empty() {
        return Ok(());
    }
    Err(HubError::BadRequest(format!(
        "Your push was rejected because it contains too many files per directory. Each directory \
         in your git repo can only contain up to {max} files. Offending reference: \
         {git_ref} Offending directories: {}",
        offending.join(" ")
    )))
}

/// Every ancestor directory of `path` (`""` for the root), the ones an added file may grow.
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    std::iter::once("").chain(path.match_indices('/').map(move |(i, _)| &path[..i]))
}

/// Entries (files and subdirectories) directly in `dir` (`""` is the root). Paths under one prefix
/// are contiguous in the sorted map, and so are the paths of one child, so counting changes of the
/// child name counts children; stops early once past `max`.
fn dir_entries(files: &BTreeMap<String, FileEntry>, dir: &str, max: usize) -> usize {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let mut n = 0;
    let mut last: Option<&str> = None;
    for (k, _) in files.range(prefix.clone()..) {
        let Some(rest) = k.strip_prefix(&prefix) else {
            break;
        };
        let child = rest.split('/').next().unwrap_or(rest);
        if last != Some(child) {
            n += 1;
            last = Some(child);
            if n > max {
                break;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::super::names::RepoType;
    use super::*;

    #[test]
    fn parses_and_prints() {
        assert_eq!("128/3600".parse::<CommitLimit>().unwrap(), CommitLimit::HUB_FREE);
        assert_eq!(CommitLimit::default(), CommitLimit::HUB_FREE);
        assert_eq!("0".parse::<CommitLimit>().unwrap(), CommitLimit::UNLIMITED);
        assert_eq!("0/60".parse::<CommitLimit>().unwrap(), CommitLimit::UNLIMITED);
        assert_eq!(" 3/2 ".parse::<CommitLimit>().unwrap(), CommitLimit::new(3, 2).unwrap());
        for bad in [
            "abc",
            "5/0",
            "-1/60",
            "1/-5",
            "",
            "/",
            "3/",
            "/60",
            "1.5/60",
            "3/2/1",
            "99999999999/1",
        ] {
            let e = bad.parse::<CommitLimit>().unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert_eq!(CommitLimit::HUB_FREE.to_string(), "128/3600");
        assert_eq!(CommitLimit::UNLIMITED.to_string(), "0");
        assert_eq!(
            serde_json::to_value(CommitLimit::new(6, 60).unwrap()).unwrap(),
            serde_json::json!("6/60")
        );
    }

    #[test]
    fn wording() {
        assert_eq!(per_window(3600), "per hour");
        assert_eq!(per_window(60), "per minute");
        assert_eq!(per_window(2), "per 2 seconds");
        assert_eq!(per_window(1), "per second");
        assert_eq!(per_window(7200), "per 2 hours");
        assert_eq!(per_window(86_400), "per day");
        assert_eq!(per_window(90), "per 90 seconds");
        assert_eq!(retry_phrase(0), "1 second");
        assert_eq!(retry_phrase(2), "2 seconds");
        assert_eq!(retry_phrase(60), "1 minute");
        assert_eq!(retry_phrase(43 * 60), "43 minutes");
        assert_eq!(retry_phrase(2669), "44 minutes");
        assert_eq!(retry_phrase(2670), "about 1 hour");
        assert_eq!(retry_phrase(3600), "about 1 hour");
        assert_eq!(retry_phrase(5400), "about 2 hours");
        assert_eq!(retry_phrase(3 * 86_400), "3 days");
        let r = CommitRateLimited {
            limit: CommitLimit::HUB_FREE,
            retry_after: 43 * 60,
        };
        assert!(
            r.message().starts_with(
                "You have exceeded the rate limit for repository commits (128 per hour). You can \
                 retry this action in 43 minutes. To reduce the number of commits, you can upload \
                 entire folders at once"
            ),
            "{}",
            r.message()
        );
        assert_eq!(r.ratelimit_header(), "\"commits\";r=0;t=2580");
        assert_eq!(r.policy_header(), "\"sliding window\";\"commits\";q=128;w=3600");
    }

    #[test]
    fn sliding_window_per_repo() {
        let l = CommitLimiter::new(CommitLimit::new(3, 10).unwrap());
        let a = RepoId::new(RepoType::Dataset, "ns", "a").unwrap();
        let b = RepoId::new(RepoType::Model, "ns", "b").unwrap();
        let t0 = Instant::now();
        for i in 0..3 {
            l.check_at(&a, t0 + Duration::from_secs(i)).unwrap();
            l.record_at(&a, t0 + Duration::from_secs(i));
        }
        // The 4th in the window waits until the first (t0) leaves it: 10 - 2.5 → 8 s (rounded up).
        let e = l.check_at(&a, t0 + Duration::from_millis(2500)).unwrap_err();
        assert_eq!(e.retry_after, 8);
        assert!(l.check_at(&b, t0).is_ok(), "another repo has its own budget");
        assert!(
            l.check_at(&a, t0 + Duration::from_secs(10)).is_ok(),
            "the first left the window"
        );
        l.record_at(&a, t0 + Duration::from_secs(10));
        assert_eq!(l.check_at(&a, t0 + Duration::from_secs(10)).unwrap_err().retry_after, 1);
        l.set_limit(CommitLimit::UNLIMITED);
        assert!(l.check_at(&a, t0 + Duration::from_secs(10)).is_ok());
        let s = l.stats();
        assert_eq!(s["datasets/ns/a"].total, 4);
        assert_eq!(s["datasets/ns/a"].refused, 2);
        l.reset();
        assert!(l.stats().is_empty());
    }

    #[test]
    fn directory_entries() {
        let e = FileEntry::regular(b"x");
        let mut files = BTreeMap::new();
        for i in 0..MAX_DIR_ENTRIES {
            files.insert(format!("d/f{i:05}"), e.clone());
        }
        files.insert("d.txt".to_string(), e.clone());
        files.insert("d0".to_string(), e.clone());
        let touched: BTreeSet<String> = ancestors("d/f00000").map(str::to_string).collect();
        assert_eq!(touched.iter().map(String::as_str).collect::<Vec<_>>(), ["", "d"]);
        let max = MAX_DIR_ENTRIES;
        assert_eq!(dir_entries(&files, "", max), 3);
        assert_eq!(dir_entries(&files, "d", max), max);
        check_dir_entries(&files, &touched, "refs/heads/main", max).unwrap();
        files.insert("d/sub/x".to_string(), e.clone());
        files.insert("d/sub/y".to_string(), e.clone());
        assert_eq!(dir_entries(&files, "d", max), max + 1);
        let err = check_dir_entries(&files, &touched, "refs/heads/main", max).unwrap_err();
        assert!(err.to_string().contains("Offending directories: /d/"), "{err}");
        assert!(err.to_string().contains("up to 10000 files"), "{err}");
        check_dir_entries(&files, &touched, "refs/heads/main", 0).unwrap();
        assert_eq!(dir_entries(&files, "d", 5), 6, "counting stops past the limit");
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["", "a", "a/b"]);
    }

    #[test]
    fn regular_size() {
        let small = FileEntry {
            size: MAX_REGULAR_FILE,
            oid: String::new(),
            lfs: None,
            xet_hash: None,
        };
        let big = FileEntry {
            size: MAX_REGULAR_FILE + 1,
            ..small.clone()
        };
        let lfs = FileEntry::lfs(&"a".repeat(64), 1 << 40, None);
        check_regular_sizes([("a", &small), ("b", &lfs)], "refs/heads/main").unwrap();
        let e = check_regular_sizes([("a", &small), ("big.bin", &big)], "refs/pr/1").unwrap_err();
        assert!(
            e.to_string().ends_with("Offending files: - big.bin (ref: refs/pr/1)"),
            "{e}"
        );
    }
}
