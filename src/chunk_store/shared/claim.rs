//! Claims: one Hub fetch per block for a fleet starting together. Before fetching a block from the
//! Hub a node creates `PREFIX/claims/KEY/BLOCK` only if it does not exist (`If-None-Match: *`); the
//! node that created it fetches and uploads the block, then deletes the claim. A node that finds a
//! claim younger than [`CLAIM_STALE`] polls for the block for up to [`CLAIM_WAIT`], and fetches it
//! itself if it has not come: nothing waits on a dead claimer for longer than that. A claim gone
//! without its block is claimed again by one of the nodes waiting, which fetches it while the
//! others wait on. Metadata objects are claimed the same way (`PREFIX/claims/meta/…`, see `meta`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::{ObjectStoreExt, PutMode, PutOptions};

use super::{CLAIM_DEADLINE, CLAIM_WAIT, Lookup, SharedTier, format};

/// A claim older than this is of a claimer that died (or lost its upload): it is taken over.
pub const CLAIM_STALE: Duration = Duration::from_secs(30);

/// How often a waiting node looks for the block.
const POLL: Duration = Duration::from_millis(100);

/// The claim is looked at every this many polls (is its claimer still at it?).
const CLAIM_CHECK_EVERY: u32 = 5;

/// What a claim attempt found.
pub enum Outcome {
    /// This node fetches the block; the claim goes when it is written (or given up).
    Ours(Claim),
    /// Another node is fetching it: wait for the object.
    Theirs,
    /// No claims (paused, unsupported, stale claim taken over): fetch.
    None,
    /// The store did not answer the claim in time: another node may well have claimed it and
    /// fetched it meanwhile (SeaweedFS answers creates racing on one name a second apart), so
    /// look once more before fetching.
    TimedOut,
}

/// A claim this node holds; deleted when released or dropped.
pub struct Claim {
    tier: SharedTier,
    path: Option<object_store::path::Path>,
}

impl Claim {
    /// Deletes the claim in the background.
    pub fn release(mut self) {
        self.delete();
    }

    fn delete(&mut self) {
        let Some(path) = self.path.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let tier = self.tier.clone();
        rt.spawn(async move {
            let _ = tokio::time::timeout(CLAIM_DEADLINE, tier.0.store.delete(&path)).await;
        });
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.delete();
    }
}

impl SharedTier {
    pub(super) fn claim_path(&self, key: &str, block: u64) -> object_store::path::Path {
        format::object_path(&self.0.prefix, "claims", key, block)
    }

    /// Claims the block's Hub fetch for this node, unless another node holds a fresh claim.
    pub(super) async fn claim(&self, key: &str, block: u64) -> Outcome {
        self.claim_at(self.claim_path(key, block), CLAIM_DEADLINE).await
    }

    /// Claims the Hub fetch of what the claim object `path` stands for (a block, a metadata
    /// object), unless another node holds a fresh claim; the create has `deadline`.
    pub(super) async fn claim_at(&self, path: object_store::path::Path, deadline: Duration) -> Outcome {
        use std::sync::atomic::Ordering;
        if self.paused() || self.0.no_claims.load(Ordering::Relaxed) {
            return Outcome::None;
        }
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let body = Bytes::from(self.0.node.clone());
        let put = self.0.store.put_opts(&path, body.into(), opts);
        match tokio::time::timeout(deadline, put).await {
            Ok(Ok(_)) => {
                self.event("claimed");
                Outcome::Ours(Claim {
                    tier: self.clone(),
                    path: Some(path),
                })
            }
            Ok(Err(object_store::Error::AlreadyExists { .. })) => self.fresh_or_take_over(&path).await,
            Ok(Err(e @ (object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. }))) => {
                self.0.no_claims.store(true, Ordering::Relaxed);
                tracing::warn!(url = %self.0.url, error = %e,
                    "shared cache: the store has no conditional create; nodes starting together may each fetch a block");
                Outcome::None
            }
            // Stores answer a create racing another node's with other errors than a failed
            // precondition (a conflict, a 5xx): see whether a claim is there rather than pause.
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "shared cache: claim refused; looking at the claim");
                self.fresh_or_take_over(&path).await
            }
            // A slow claim is not a reason to pause: lookups and uploads judge the store (a store
            // that hangs fails the lookup before this).
            Err(_) => {
                tracing::debug!("shared cache: no answer to a claim within {deadline:?}; fetching unless it came");
                Outcome::TimedOut
            }
        }
    }

    /// Another node's claim: wait if it is fresh, else delete it and fetch.
    async fn fresh_or_take_over(&self, path: &object_store::path::Path) -> Outcome {
        match tokio::time::timeout(CLAIM_DEADLINE, self.0.store.head(path)).await {
            Ok(Ok(meta)) => {
                let age = chrono::Utc::now().signed_duration_since(meta.last_modified);
                if age.to_std().is_ok_and(|a| a > CLAIM_STALE) {
                    self.event("stale_claim");
                    let _ = tokio::time::timeout(CLAIM_DEADLINE, self.0.store.delete(path)).await;
                    Outcome::None
                } else {
                    Outcome::Theirs
                }
            }
            // Released between our create and this look: the block is most likely there now
            // (`wait_on_claim` sees the claim gone and looks once).
            Ok(Err(object_store::Error::NotFound { .. })) => Outcome::Theirs,
            _ => Outcome::None,
        }
    }

    /// Waits for what another node claimed (claim object `claim`), polling with `look`, for at
    /// most [`CLAIM_WAIT`] in all. If the claim goes without it (its claimer gave up, or let its
    /// claim go to a backed-up upload queue), this node claims it in turn (`create`: the
    /// deadline of that create), so that of the nodes waiting one fetches it from the Hub and the
    /// others wait on for the time left, instead of all of them fetching it at once.
    pub(super) async fn wait_on_claim<T, L, F>(
        &self,
        claim: &object_store::path::Path,
        create: Duration,
        mut look: L,
    ) -> Waited<T>
    where
        L: FnMut() -> F,
        F: std::future::Future<Output = Lookup<T>>,
    {
        let deadline = Instant::now() + CLAIM_WAIT;
        loop {
            match self.poll_claimed(claim, deadline, &mut look).await {
                Polled::Hit(v) => return Waited::Found(v),
                Polled::Gone if Instant::now() < deadline => match self.claim_at(claim.clone(), create).await {
                    Outcome::Ours(c) => return Waited::Fetch(Some(c)),
                    // Another waiter took it over: wait on it.
                    Outcome::Theirs => {}
                    Outcome::TimedOut => {
                        return match look().await {
                            Lookup::Hit(v) => Waited::Found(v),
                            _ => Waited::Fetch(None),
                        };
                    }
                    Outcome::None => return Waited::Fetch(None),
                },
                Polled::Gone | Polled::GiveUp => return Waited::Fetch(None),
            }
        }
    }

    /// Polls for what `claim` stands for until `deadline`, looking at the claim itself every
    /// [`CLAIM_CHECK_EVERY`] polls.
    async fn poll_claimed<T, L, F>(
        &self,
        claim: &object_store::path::Path,
        deadline: Instant,
        look: &mut L,
    ) -> Polled<T>
    where
        L: FnMut() -> F,
        F: std::future::Future<Output = Lookup<T>>,
    {
        let mut polls = 0u32;
        loop {
            tokio::time::sleep(POLL).await;
            polls += 1;
            match look().await {
                Lookup::Hit(b) => {
                    self.event("waited_hit");
                    return Polled::Hit(b);
                }
                Lookup::Bad => return Polled::GiveUp,
                Lookup::Miss => {}
            }
            if self.paused() {
                return Polled::GiveUp;
            }
            if Instant::now() >= deadline {
                self.event("wait_expired");
                return Polled::GiveUp;
            }
            if polls.is_multiple_of(CLAIM_CHECK_EVERY) {
                let head = tokio::time::timeout(CLAIM_DEADLINE, self.0.store.head(claim)).await;
                if let Ok(Err(object_store::Error::NotFound { .. })) = head {
                    // The claimer gave up (or wrote it just now: one more look).
                    return match look().await {
                        Lookup::Hit(b) => {
                            self.event("waited_hit");
                            Polled::Hit(b)
                        }
                        _ => Polled::Gone,
                    };
                }
            }
        }
    }
}

/// What waiting on another node's claim came to.
pub(super) enum Waited<T> {
    /// It came, through the tier.
    Found(T),
    /// Fetch it from the Hub; upload it under this claim if this node took one over.
    Fetch(Option<Claim>),
}

/// What one stretch of polling found.
enum Polled<T> {
    Hit(T),
    /// The claim went without the object.
    Gone,
    /// The wait is over (its time is up, the object is bad, or the tier paused).
    GiveUp,
}
