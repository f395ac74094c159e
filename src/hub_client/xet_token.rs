//! Xet read tokens: `GET /api/{kind}s/{repo}/xet-read-token/{rev}`, cached per repo until 60 s
//! before expiry, with one request in flight per repo however many callers ask at once.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use super::error::{ErrorContext, HubClientError};
use super::http::{Reply, Request};
use super::types::{RawXetToken, XetToken};
use super::{HubClient, Inner, RepoRef, at_rev, check_rev};

/// A token is refreshed this long before it expires.
pub const XET_TOKEN_MARGIN_SECS: u64 = 60;
/// Above this many repos, stale entries are dropped.
const MAX_SLOTS: usize = 1024;

type TokenFuture = Shared<BoxFuture<'static, Result<XetToken, HubClientError>>>;

enum Slot {
    Ready(XetToken),
    Pending(TokenFuture),
}

/// Lock order: this mutex is a leaf; it is never held across an `.await`.
#[derive(Default)]
pub(crate) struct TokenCache {
    slots: parking_lot::Mutex<HashMap<String, Slot>>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn fresh(t: &XetToken) -> bool {
    now_secs() + XET_TOKEN_MARGIN_SECS < t.exp
}

impl HubClient {
    /// A CAS read token for `repo` (checked against `commit`). Cached per repo until
    /// `exp - 60 s`; concurrent callers share one request; a failure is not cached.
    pub async fn xet_read_token(&self, repo: &RepoRef, commit: &str) -> Result<XetToken, HubClientError> {
        check_rev(repo, commit)?;
        repo.validate()?;
        let key = repo.web_path();
        let fut = {
            let mut slots = self.inner.tokens.slots.lock();
            match slots.get(&key) {
                Some(Slot::Ready(t)) if fresh(t) => return Ok(t.clone()),
                Some(Slot::Pending(f)) => f.clone(),
                _ => {
                    if slots.len() >= MAX_SLOTS {
                        slots.retain(|_, s| match s {
                            Slot::Ready(t) => fresh(t),
                            Slot::Pending(_) => true,
                        });
                    }
                    let f = fetch_shared(
                        std::sync::Arc::downgrade(&self.inner),
                        repo.clone(),
                        commit.to_string(),
                        key.clone(),
                    );
                    slots.insert(key, Slot::Pending(f.clone()));
                    f
                }
            }
        };
        fut.await
    }

    /// Drops a ready token of `repo` (a request already on its way is left to finish).
    pub(super) fn forget_xet_token_of(&self, repo: &RepoRef) {
        let mut slots = self.inner.tokens.slots.lock();
        if let Some(Slot::Ready(_)) = slots.get(&repo.web_path()) {
            slots.remove(&repo.web_path());
        }
    }

    async fn fetch_xet_read_token(&self, repo: &RepoRef, commit: &str) -> Result<XetToken, HubClientError> {
        let ctx = ErrorContext::call("GET", repo, Some(commit), None);
        let url = self.api_url(repo, &format!("/{}", at_rev(repo, "xet-read-token", commit)))?;
        let reply = self.inner.http.send(&Request::get(url), &ctx).await?;
        token_from_reply(&reply, &ctx)
    }
}

/// A token answer: the body is what hf_xet reads, Python's downloader reads the headers; take either.
pub(super) fn token_from_reply(reply: &Reply, ctx: &ErrorContext) -> Result<XetToken, HubClientError> {
    let raw: RawXetToken = super::api::parse_json(reply, ctx)?;
    let cas_url = raw
        .cas_url
        .or_else(|| reply.header("x-xet-cas-url").map(str::to_string));
    let access_token = raw
        .access_token
        .or_else(|| reply.header("x-xet-access-token").map(str::to_string));
    let exp = raw
        .exp
        .or_else(|| reply.header("x-xet-token-expiration").and_then(|v| v.parse().ok()));
    match (cas_url, access_token, exp) {
        (Some(cas_url), Some(access_token), Some(exp)) => Ok(XetToken {
            cas_url,
            access_token,
            exp,
        }),
        _ => Err(HubClientError::invalid(
            ctx,
            "xet token answer lacks casUrl, accessToken or exp",
        )),
    }
}

/// The shared request. It holds the client weakly until first polled (a caller holding the client
/// polls it), and stores its outcome in the cache: the token on success, nothing on failure.
fn fetch_shared(inner: Weak<Inner>, repo: RepoRef, commit: String, key: String) -> TokenFuture {
    async move {
        let Some(inner) = inner.upgrade() else {
            return Err(HubClientError::bad_input(repo.web_path(), "the Hub client was dropped"));
        };
        let client = HubClient { inner };
        // Every caller shares this one request, a demand read among them maybe: it never yields
        // as background work would.
        let r = super::windows::demand(client.fetch_xet_read_token(&repo, &commit)).await;
        let mut slots = client.inner.tokens.slots.lock();
        match &r {
            Ok(t) => {
                slots.insert(key, Slot::Ready(t.clone()));
            }
            Err(_) => {
                slots.remove(&key);
            }
        }
        r
    }
    .boxed()
    .shared()
}
