//! Metadata objects: what a commit fixes (a directory's listing, a point lookup's answer), looked
//! up in the tier before the Hub and written to it behind a Hub fetch, so a fleet mounting one
//! revision lists it on the Hub about once instead of once per node.
//!
//! - A key (`MetaKey`) names the repo, the commit, the question and the path; the caller builds it
//!   only from a commit id it resolved itself with its own token, so a node never learns from the
//!   tier about a revision it could not open. What a commit id holds never changes, so an object
//!   is never invalidated.
//! - An object carries the block objects' header (`format::encode_meta`: key, length, SHA-256); one
//!   that fails the check, or whose payload does not parse, is refetched from the Hub and
//!   replaced. An object larger than [`MAX_META_BYTES`] is neither read nor written.
//! - A miss is claimed as a block's is (`claim`), so nodes starting together wait for one node's
//!   Hub fetch instead of each asking the Hub.
//! - Write-behind never blocks the caller: the value is serialized (JSON) and uploaded by a task,
//!   [`UPLOADERS`] at once, at most [`MAX_PENDING`] objects and [`MAX_PENDING_BYTES`] waiting;
//!   past that it is dropped (the next node to miss it writes it).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use super::claim::{Outcome, Waited};
use super::{Claim, LOOKUP_DEADLINE, Lookup, SharedTier, UPLOAD_DEADLINE, format};

/// Largest metadata object read or written (a listing of about a million entries): a larger one
/// is not stored, and an object stating more is not read (the node asks the Hub).
pub const MAX_META_BYTES: u64 = 256 << 20;

/// Metadata uploads at once.
const UPLOADERS: usize = 4;

/// Deadline of a metadata claim's create. A listing is on the path of every `ls` and `stat`,
/// and costs the Hub one small request: past this the node looks once more and else asks the
/// Hub itself, rather than wait the blocks' [`super::CLAIM_DEADLINE`]. (32 nodes claiming one name
/// at once on SeaweedFS waited up to 7 s for its answers, a second apart.)
const META_CLAIM_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// Objects waiting for an uploader or uploading, at most, and their bytes.
const MAX_PENDING: usize = 256;
const MAX_PENDING_BYTES: u64 = 64 << 20;

/// Longest path named in clear in an object's name; a longer one is named by its SHA-256 (the
/// header still names it in clear). S3 keys end at 1,024 bytes.
const CLEAR_PATH_MAX: usize = 256;

/// Where metadata objects and their claims live under the prefix.
const OBJECTS: [&str; 1] = ["meta"];
const CLAIMS: [&str; 2] = ["claims", "meta"];

/// The name of one metadata object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaKey {
    /// What the object's header must name: every part, the path in clear.
    id: String,
    /// The object's name below `PREFIX/meta/` (and its claim's below `PREFIX/claims/meta/`).
    tail: Vec<String>,
}

impl MetaKey {
    /// `scope` names the repo and the commit (for example `v1`, `model`, `ns`, `name`, the commit
    /// id), `what` the question (`tree`, `info`), `path` the repo path it is about ("" = the root).
    pub fn new(scope: &[&str], what: &str, path: &str) -> MetaKey {
        let mut tail: Vec<String> = scope.iter().map(|s| s.to_string()).collect();
        tail.push(what.to_string());
        // `_` first, so the root has a name; the store's path encoding escapes `/` and the rest.
        tail.push(if path.len() <= CLEAR_PATH_MAX {
            format!("_{path}")
        } else {
            format!("sha256-{}", hex::encode(Sha256::digest(path.as_bytes())))
        });
        MetaKey {
            id: format!("{}/{what}:{path}", scope.join("/")),
            tail,
        }
    }

    /// What the object's header names.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The metadata write-behind's bounds.
pub(super) struct Uploads {
    slots: tokio::sync::Semaphore,
    pending: AtomicUsize,
    bytes: AtomicU64,
}

impl Default for Uploads {
    fn default() -> Self {
        Uploads {
            slots: tokio::sync::Semaphore::new(UPLOADERS),
            pending: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
        }
    }
}

impl Uploads {
    pub(super) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Room for one more object of `len` bytes, or `false` (then nothing is taken).
    fn take(&self, len: u64) -> bool {
        let n = self.pending.fetch_add(1, Ordering::AcqRel);
        let b = self.bytes.fetch_add(len, Ordering::AcqRel);
        if n < MAX_PENDING && b + len <= MAX_PENDING_BYTES {
            return true;
        }
        self.give_back(len);
        false
    }

    fn give_back(&self, len: u64) {
        self.bytes.fetch_sub(len, Ordering::AcqRel);
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl SharedTier {
    pub(super) fn meta_path(&self, root: &[&str], key: &MetaKey) -> Path {
        let prefix = self.0.prefix.split('/').filter(|p| !p.is_empty());
        Path::from_iter(
            prefix
                .chain(root.iter().copied())
                .chain(key.tail.iter().map(String::as_str)),
        )
    }

    /// The value `key` names: from the tier when a verified object of it is there, else from
    /// `fetch` (the Hub), then written behind. A miss is claimed, so that nodes asking at once
    /// wait for one node's fetch (at most [`super::CLAIM_WAIT`]). Only `fetch`'s error is
    /// returned: a store that fails only sends the question to the Hub.
    pub async fn metadata<T, E, F>(&self, key: &MetaKey, fetch: F) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: Future<Output = Result<T, E>>,
    {
        if self.paused() {
            return fetch.await;
        }
        let claim = match self.get_meta::<T>(key).await {
            Lookup::Hit(v) => return Ok(v),
            // Replaced from the Hub.
            Lookup::Bad => None,
            Lookup::Miss if self.paused() => None,
            Lookup::Miss => {
                self.event("meta_miss");
                let claim = self.meta_path(&CLAIMS, key);
                match self.claim_at(claim.clone(), META_CLAIM_DEADLINE).await {
                    Outcome::Ours(c) => Some(c),
                    Outcome::Theirs => {
                        let look = || self.get_meta::<T>(key);
                        match self.wait_on_claim(&claim, META_CLAIM_DEADLINE, look).await {
                            Waited::Found(v) => return Ok(v),
                            Waited::Fetch(c) => c,
                        }
                    }
                    Outcome::None => None,
                    Outcome::TimedOut => match self.get_meta::<T>(key).await {
                        Lookup::Hit(v) => return Ok(v),
                        _ => None,
                    },
                }
            }
        };
        let got = fetch.await;
        match &got {
            Ok(v) => self.put_meta_behind(key, v, claim),
            Err(_) => drop(claim),
        }
        got
    }

    /// Looks the object up (within [`LOOKUP_DEADLINE`]), verifies and parses it.
    async fn get_meta<T: DeserializeOwned + Send + 'static>(&self, key: &MetaKey) -> Lookup<T> {
        if self.paused() {
            return Lookup::Miss;
        }
        let path = self.meta_path(&OBJECTS, key);
        let got = tokio::time::timeout(LOOKUP_DEADLINE, async {
            let r = self.0.store.get(&path).await?;
            // Header and key on top of the payload; an object stating more is not read.
            if r.meta.size > MAX_META_BYTES + (1 << 17) {
                return Ok(None);
            }
            r.bytes().await.map(Some)
        })
        .await;
        let obj = match self.looked_up(got) {
            Some(Some(obj)) => obj,
            Some(None) => return self.bad_meta(key, &"larger than any metadata object"),
            None => return Lookup::Miss,
        };
        let id = key.id.clone();
        let parsed = tokio::task::spawn_blocking(move || {
            let data = format::decode_meta(&obj, &id).map_err(|e| e.to_string())?;
            serde_json::from_slice::<T>(&data).map_err(|e| format!("payload does not parse: {e}"))
        })
        .await;
        match parsed {
            Ok(Ok(v)) => {
                self.event("meta_hit");
                Lookup::Hit(v)
            }
            Ok(Err(why)) => self.bad_meta(key, &why),
            Err(_) => Lookup::Miss,
        }
    }

    fn bad_meta<T>(&self, key: &MetaKey, why: &dyn std::fmt::Display) -> Lookup<T> {
        self.event("meta_invalid");
        tracing::warn!(url = %self.0.url, key = %key.id, error = %why,
            "shared cache metadata object failed verification: asking the Hub to replace it");
        Lookup::Bad
    }

    /// Queues `value` for upload as `key`'s object; `claim` goes once it is there or given up.
    /// The caller never waits for this.
    fn put_meta_behind<T: Serialize>(&self, key: &MetaKey, value: &T, claim: Option<Claim>) {
        if self.paused() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let data = match serde_json::to_vec(value) {
            Ok(d) => Bytes::from(d),
            Err(e) => {
                tracing::debug!(key = %key.id, error = %e, "metadata not serializable; not stored");
                return;
            }
        };
        let len = data.len() as u64;
        if len > MAX_META_BYTES || !self.0.meta_uploads.take(len) {
            self.event("meta_dropped");
            tracing::debug!(key = %key.id, len, "metadata object not stored (too large, or too many waiting)");
            return;
        }
        let (this, path, id) = (self.clone(), self.meta_path(&OBJECTS, key), key.id.clone());
        rt.spawn(async move {
            let up = &this.0.meta_uploads;
            if let Ok(_slot) = up.slots.acquire().await {
                let payload: PutPayload = format::encode_meta(&id, &data).into_iter().collect();
                match tokio::time::timeout(UPLOAD_DEADLINE, this.0.store.put(&path, payload)).await {
                    Ok(Ok(_)) => this.event("meta_written"),
                    Ok(Err(e)) => {
                        this.event("upload_failed");
                        this.pause("upload", &e);
                    }
                    Err(_) => {
                        this.event("upload_failed");
                        this.pause("upload", &format!("not written within {UPLOAD_DEADLINE:?}"));
                    }
                }
            }
            drop(claim);
            up.give_back(len);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_repo_commit_question_and_path() {
        let k = MetaKey::new(&["v1", "model", "demo", "tiny-model", "c0ffee"], "tree", "sub/dir");
        assert_eq!(k.id(), "v1/model/demo/tiny-model/c0ffee/tree:sub/dir");
        let store: std::sync::Arc<dyn object_store::ObjectStore> =
            std::sync::Arc::new(object_store::memory::InMemory::new());
        let tier = SharedTier::with_store("mem://", store, "fleet/a");
        assert_eq!(
            tier.meta_path(&OBJECTS, &k).as_ref(),
            "fleet/a/meta/v1/model/demo/tiny-model/c0ffee/tree/_sub%2Fdir"
        );
        let root = MetaKey::new(&["v1", "model", "demo", "tiny-model", "c0ffee"], "info", "");
        assert_eq!(
            tier.meta_path(&CLAIMS, &root).as_ref(),
            "fleet/a/claims/meta/v1/model/demo/tiny-model/c0ffee/info/_"
        );
        let long = "d/".repeat(200);
        let k = MetaKey::new(&["v1"], "tree", &long);
        let name = tier.meta_path(&OBJECTS, &k);
        assert!(name.as_ref().len() < 200, "a long path is named by its hash: {name}");
        assert!(k.id().ends_with(&long), "and named in clear in the header");
    }
}
