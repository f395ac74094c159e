//! The Hub client: every HTTP request hubfs sends to the Hugging Face Hub (or a local Hub) for
//! reading repos: repo info, tree listings, paths-info, Xet read tokens, ranged downloads, file HEADs,
//! and whoami (what the token may do).
//!
//! Reliability rules (see docs/ARCHITECTURE.md and `http`):
//! - every attempt has a deadline (`HubClientConfig::timeout`, covering connect, headers and body);
//! - retries with exponential backoff + jitter on 429/500/502/503/504, timeouts and transport
//!   errors, at most `max_retries` of them, and past that while the patience lasts
//!   (`HubClientConfig::patience`, 10 minutes by default): a request refused for one of the Hub's
//!   request windows waits for it to reset ([`windows`]), and an outage is a slowdown. One HTTP
//!   exchange therefore ends within [`HubClientConfig::exchange_time_bound`]. A call makes one exchange,
//!   except listings (one per page of 1,000 entries), `paths_info` (one per 1,000 paths) and
//!   `read_range` (the Hub, then the redirect target; plus one more pair when a cached redirect
//!   URL has gone stale);
//! - errors carry repo, revision, path, status and the Hub's `X-Error-Code` ([`HubClientError`]);
//! - the token is sent only to the endpoint's origin and appears in no error, log or `Debug` output.
//!
//! Revisions are percent-encoded as one path segment (`refs/pr/1` → `refs%2Fpr%2F1`), file paths
//! keep `/` and escape everything else outside RFC 3986's unreserved set.
//!
//! [`windows`]: crate::hub_client::windows
//! [`HubClientConfig::exchange_time_bound`]: crate::hub_client::HubClientConfig::exchange_time_bound
//! [`HubClientError`]: crate::hub_client::HubClientError

mod api;
mod bucket;
mod commit;
mod config;
mod download;
mod error;
mod http;
mod lfs_upload;
mod repo;
mod types;
mod whoami;
pub mod windows;
mod xet_token;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::util::is_commit_id;

pub use bucket::{BucketBatchOutcome, BucketOp, bucket_state_id};
pub use commit::{CommitAnswer, CommitOp, CommitRequest, PreuploadFile, SAMPLE_BYTES, UploadMode};
pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_ENDPOINT, DEFAULT_MAX_RETRIES, DEFAULT_PATIENCE, DEFAULT_TIMEOUT, HubClientConfig,
};
pub use error::{ErrorContext, HubClientError};
pub use http::{MAX_RETRY_WAIT, backoff as backoff_for};
pub use lfs_upload::LfsUploadAction;
pub use repo::{ParsedRepo, RepoKind, RepoRef, encode_path, encode_revision};
pub use types::{ContentId, FileHead, FileMeta, RepoInfo, TreeEntry, XetToken};
pub use whoami::{FineGrained, REPO_WRITE, Scope, TokenRole, Whoami, WriteAccess};

/// How long a redirect target (a presigned CDN URL) is reused for the same (repo, commit, path).
pub const REDIRECT_CACHE_TTL: Duration = Duration::from_secs(50 * 60);
const REDIRECT_CACHE_CAPACITY: u64 = 65_536;

/// A Hub client. Cheap to clone (one `Arc`); clones share the connection pool and the caches.
#[derive(Clone)]
pub struct HubClient {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: String,
    http: http::Http,
    /// `repo\0commit\0path` → presigned URL the Hub redirected to (only for 40-hex commit ids,
    /// whose content cannot change).
    redirects: moka::sync::Cache<String, Arc<Url>>,
    tokens: xet_token::TokenCache,
    /// `HubClientConfig::tree_expand`.
    tree_expand: bool,
}

impl HubClient {
    pub fn new(cfg: HubClientConfig) -> Result<Self, HubClientError> {
        let endpoint = cfg.endpoint.trim().trim_end_matches('/').to_string();
        let url = Url::parse(&endpoint)
            .map_err(|e| HubClientError::bad_input(&endpoint, format!("invalid endpoint URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(HubClientError::bad_input(
                &endpoint,
                "the endpoint must be an http(s) URL",
            ));
        }
        if cfg.timeout.is_zero() || cfg.connect_timeout.is_zero() {
            return Err(HubClientError::bad_input(
                "timeout",
                "timeouts must be greater than zero",
            ));
        }
        let token = http::Token::new(cfg.token.as_deref().unwrap_or(""))?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(cfg.connect_timeout)
            .user_agent(cfg.user_agent.clone())
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| HubClientError::bad_input("http client", e.to_string()))?;
        Ok(HubClient {
            inner: Arc::new(Inner {
                http: http::Http {
                    client,
                    origin: url.origin(),
                    token: parking_lot::RwLock::new(token),
                    old_tokens: parking_lot::Mutex::new(Vec::new()),
                    timeout: cfg.timeout,
                    max_retries: cfg.max_retries,
                    patience: cfg.patience,
                    windows: Arc::new(windows::Windows::default()),
                },
                endpoint,
                redirects: moka::sync::Cache::builder()
                    .max_capacity(REDIRECT_CACHE_CAPACITY)
                    .time_to_live(REDIRECT_CACHE_TTL)
                    .build(),
                tokens: xet_token::TokenCache::default(),
                tree_expand: cfg.tree_expand,
            }),
        })
    }

    /// The endpoint, without a trailing slash.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// Whether listings and paths-info ask for each entry's last commit (`tree_expand`): the
    /// answers differ, so caches of them key on it.
    pub fn tree_expand(&self) -> bool {
        self.inner.tree_expand
    }

    /// Replaces the token every later request carries (a rotated token: a Kubernetes secret
    /// rewritten by kubelet's republish). Clones share it. Xet tokens already fetched stay valid
    /// until they expire. The old token is still scrubbed from messages.
    pub fn set_token(&self, token: Option<&str>) -> Result<(), HubClientError> {
        let new = http::Token::new(token.unwrap_or(""))?;
        let old = std::mem::replace(&mut *self.inner.http.token.write(), new);
        if let Some(old) = old {
            let mut kept = self.inner.http.old_tokens.lock();
            if !kept.contains(&old.text) {
                // A bound: a process rotates its token a few times in its life.
                if kept.len() >= 16 {
                    kept.remove(0);
                }
                kept.push(old.text);
            }
        }
        Ok(())
    }

    /// The Hub's request windows as this client's answers described them (shared by its clones).
    pub fn windows(&self) -> &Arc<windows::Windows> {
        &self.inner.http.windows
    }

    /// How long a request may wait for a window or through an outage (`HubClientConfig::patience`).
    pub fn patience(&self) -> Duration {
        self.inner.http.patience
    }

    /// Whether requests to the endpoint carry a token.
    pub fn has_token(&self) -> bool {
        self.inner.http.token.read().is_some()
    }

    /// `{endpoint}/api/{kind}s/{ns}/{name}{tail}`; `tail` must already be encoded.
    fn api_url(&self, repo: &RepoRef, tail: &str) -> Result<Url, HubClientError> {
        repo.validate()?;
        self.url(&format!("{}{}", repo.api_path(), tail))
    }

    /// `{endpoint}/{prefix}{ns}/{name}/resolve/{rev}/{path}`; a bucket's has no revision
    /// (`/buckets/{ns}/{name}/resolve/{path}`).
    fn resolve_url(&self, repo: &RepoRef, rev: &str, path: &str) -> Result<Url, HubClientError> {
        repo.validate()?;
        self.url(&format!(
            "/{}/resolve{}/{}",
            repo.web_path(),
            at_rev(repo, "", rev),
            encode_path(path)
        ))
    }

    fn url(&self, path_and_query: &str) -> Result<Url, HubClientError> {
        let s = format!("{}{}", self.inner.endpoint, path_and_query);
        Url::parse(&s).map_err(|e| HubClientError::bad_input(path_and_query, format!("cannot build URL: {e}")))
    }
}

/// `{what}/{rev}` (encoded) for a repo; just `{what}` for a bucket, whose routes take no revision
/// (the revision hubfs passes for a bucket only names the state it listed, see `bucket`).
fn at_rev(repo: &RepoRef, what: &str, rev: &str) -> String {
    if repo.is_bucket() {
        what.to_string()
    } else {
        format!("{what}/{}", encode_revision(rev))
    }
}

/// Checks a revision argument (branch, tag, commit id, `refs/pr/N`).
fn check_rev(repo: &RepoRef, rev: &str) -> Result<(), HubClientError> {
    repo::check_revision(rev)
        .map(|_| ())
        .map_err(|why| HubClientError::bad_input(format!("{repo}@{rev}"), why))
}

/// Checks a path argument; returns it without leading/trailing slashes.
fn check_path<'a>(repo: &RepoRef, path: &'a str, allow_root: bool) -> Result<&'a str, HubClientError> {
    repo::check_path(path, allow_root).map_err(|why| HubClientError::bad_input(format!("{repo}: {path}"), why))
}

impl fmt::Debug for HubClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubClient")
            .field("endpoint", &self.inner.endpoint)
            .field("token", &self.inner.http.token.read().as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.inner.http.timeout)
            .field("max_retries", &self.inner.http.max_retries)
            .finish()
    }
}
