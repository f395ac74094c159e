//! State shared by every route of one running local Hub.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use xet_client::cas_client::DirectAccessClient;

use super::auth::{Auth, Caller, check_read, check_write};
use super::bucket_store::BucketStore;
use super::error::{HubError, HubResult};
use super::faults::Faults;
use super::limits::{CommitLimit, CommitLimiter};
use super::names::RepoId;
use super::store::{RepoState, Store};
use super::windows::{RequestWindows, WindowLimiter};

/// A CAS access token handed out by xet-read-token / xet-write-token.
#[derive(Debug, Clone)]
pub struct CasGrant {
    pub write: bool,
    pub expires: u64,
    /// The user the token was issued to (`None`: anonymous), whose window the CAS requests use.
    pub user: Option<String>,
}

/// How long issued CAS tokens and presigned blob URLs stay valid.
pub const GRANT_TTL: Duration = Duration::from_secs(3600);

pub struct HubState {
    pub store: Store,
    pub buckets: BucketStore,
    pub auth: Auth,
    pub faults: Arc<Faults>,
    /// `http://127.0.0.1:PORT` of the API origin, the blob origin and the public CAS origin.
    pub endpoint: String,
    pub blob_url: String,
    pub cas_url: String,
    /// Path prefix of `cas_url` on the public CAS origin (see `load_cas_prefix`).
    pub cas_prefix: String,
    /// The embedded xet CAS behind our authenticating, fault-injecting front.
    pub cas_internal: String,
    pub cas_client: Arc<dyn DirectAccessClient>,
    pub http: reqwest::Client,
    /// Secret for presigned blob URLs; random per data dir, kept on disk.
    secret: Vec<u8>,
    cas_grants: Mutex<HashMap<String, CasGrant>>,
    /// Whether uploads may go through Xet (write tokens, the LFS batch `xet` transfer). Off, the Hub
    /// behaves like one without Xet storage, so clients must use plain LFS.
    pub xet_uploads: std::sync::atomic::AtomicBool,
    /// The commit budget of every repo (the Hub's "128 commits per hour").
    pub commits: CommitLimiter,
    /// Requests per user or IP in the Hub's fixed windows (the `api`, `resolvers`, … quotas).
    pub windows: WindowLimiter,
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub fn random_hex(bytes: usize) -> String {
    let v: Vec<u8> = (0..bytes).map(|_| rand::random::<u8>()).collect();
    hex::encode(v)
}

pub struct HubStateParts {
    pub store: Store,
    pub buckets: BucketStore,
    pub auth: Auth,
    pub faults: Arc<Faults>,
    pub endpoint: String,
    pub blob_url: String,
    pub cas_url: String,
    pub cas_prefix: String,
    pub cas_internal: String,
    pub cas_client: Arc<dyn DirectAccessClient>,
    pub http: reqwest::Client,
    pub secret: Vec<u8>,
    pub commit_limit: CommitLimit,
    pub request_windows: RequestWindows,
}

impl HubState {
    pub fn new(p: HubStateParts) -> HubState {
        HubState {
            store: p.store,
            buckets: p.buckets,
            auth: p.auth,
            faults: p.faults,
            endpoint: p.endpoint,
            blob_url: p.blob_url,
            cas_url: p.cas_url,
            cas_prefix: p.cas_prefix,
            cas_internal: p.cas_internal,
            cas_client: p.cas_client,
            http: p.http,
            secret: p.secret,
            cas_grants: Mutex::new(HashMap::new()),
            xet_uploads: std::sync::atomic::AtomicBool::new(true),
            commits: CommitLimiter::new(p.commit_limit),
            windows: WindowLimiter::new(p.request_windows),
        }
    }

    /// The repo if it exists and `caller` may read it.
    pub fn readable_repo(&self, id: &RepoId, caller: Option<&Caller>) -> HubResult<Arc<RepoState>> {
        let repo = self.store.repo(id)?.ok_or(HubError::RepoNotFound {
            anonymous: caller.is_none(),
        })?;
        check_read(caller, id, &repo.meta.read())?;
        Ok(repo)
    }

    /// The repo if it exists and `caller` may write it.
    pub fn writable_repo(&self, id: &RepoId, caller: Option<&Caller>) -> HubResult<Arc<RepoState>> {
        let repo = self.store.repo(id)?.ok_or(HubError::RepoNotFound {
            anonymous: caller.is_none(),
        })?;
        check_write(caller, id, &repo.meta.read())?;
        Ok(repo)
    }

    /// Signature of a presigned URL: sha256 over the secret, the signed path and the expiry.
    pub fn sign(&self, path: &str, expires: u64) -> String {
        let mut h = Sha256::new();
        h.update(&self.secret);
        h.update(path.as_bytes());
        h.update(expires.to_le_bytes());
        hex::encode(h.finalize())
    }

    /// A presigned URL on the blob origin for `path` (which starts with `/`).
    pub fn presign(&self, path: &str) -> String {
        let exp = unix_now() + GRANT_TTL.as_secs();
        format!("{}{path}?exp={exp}&sig={}", self.blob_url, self.sign(path, exp))
    }

    pub fn check_signature(&self, path: &str, exp: Option<&str>, sig: Option<&str>) -> HubResult<()> {
        let denied = || HubError::Forbidden("Invalid or expired signed URL".to_string());
        let exp: u64 = exp.and_then(|e| e.parse().ok()).ok_or_else(denied)?;
        let sig = sig.ok_or_else(denied)?;
        if exp < unix_now() || self.sign(path, exp) != sig {
            return Err(denied());
        }
        Ok(())
    }

    /// Issues a CAS token. Expired grants are dropped on the way so the table stays bounded by the
    /// number of live tokens.
    pub fn issue_cas_token(&self, write: bool, user: Option<&str>) -> (String, u64) {
        let now = unix_now();
        let token = format!("xet_{}", random_hex(16));
        let expires = now + GRANT_TTL.as_secs();
        let mut g = self.cas_grants.lock();
        g.retain(|_, v| v.expires > now);
        g.insert(
            token.clone(),
            CasGrant {
                write,
                expires,
                user: user.map(str::to_string),
            },
        );
        (token, expires)
    }

    pub fn cas_grant(&self, token: &str) -> Option<CasGrant> {
        let g = self.cas_grants.lock();
        g.get(token).filter(|v| v.expires > unix_now()).cloned()
    }
}
