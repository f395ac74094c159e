//! The shared cache tier (`--shared-cache s3://bucket/prefix`, or `gs://`, `az://`): blocks in an
//! object store every node of a fleet reads, between the disk tier and the Hub (memory → disk →
//! shared → Hub), so a fleet starting on the same weights fetches them from the Hub about once.
//!
//! - Lookup: a miss of memory and disk asks the store for the block's object (`format`), keyed by
//!   the content key the node resolved through the Hub with its own token (nothing else is ever
//!   looked up), and verifies it; a bad object is refetched from the Hub and replaced.
//! - Claims (`claim`): before a Hub fetch the node creates a claim object if none exists
//!   (`If-None-Match: *`); a node that finds a fresh claim waits up to [`CLAIM_WAIT`] for the
//!   block, then fetches it itself.
//! - Write-behind (`upload`): a block fetched from the Hub is uploaded in the background, on a lane
//!   of its own if this node claimed it; a block no uploader is free for waits as its key and is
//!   read back from the disk tier (a claimed one keeping its claim while its lane keeps pace), so
//!   a store slower than the Hub costs no memory; a read never waits for an upload, and while
//!   reads wait on the tier only one upload runs at a time, so the store answers their lookups
//!   first (claimed blocks excepted while other nodes are seen reading: they wait for those).
//! - Metadata (`meta`): what a commit fixes (a directory's listing, a point lookup's answer) is
//!   looked up and written behind the same way, as objects under `PREFIX/meta/`, keyed by repo,
//!   commit and path, with the same verified header, so a fleet mounting one revision lists it
//!   on the Hub about once.
//! - Revisions (`refs`): the commit a branch or tag resolved to, as the last node to ask the Hub
//!   got it, so a fleet re-resolves a branch about once per metadata TTL.
//! - Failure is a slowdown: every store request has a deadline; an error or an expired deadline
//!   pauses the tier for [`PAUSE`] (reads go straight to the Hub), then it is tried again.
//!
//! The store is S3 (or S3-compatible), Google Cloud Storage or Azure Blob (`open`). Its
//! credentials come from the places that cloud's own tools look, and are never logged: logs and
//! metrics name the tier by its URL, which holds none.

mod aws_profile;
mod claim;
pub mod format;
mod meta;
mod open;
mod refs;
mod upload;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};

pub use claim::{CLAIM_STALE, Claim};
pub use meta::{MAX_META_BYTES, MetaKey};
pub use open::{SCHEMES, supported as supported_url};
pub use refs::{REF_DEADLINE, RefClaim, RefLook, RefRecord};

/// Deadline of a block lookup (the GET and its body): past it the read goes to the Hub.
pub const LOOKUP_DEADLINE: Duration = Duration::from_secs(5);

/// Deadline of a claim request (create, head, delete).
pub const CLAIM_DEADLINE: Duration = Duration::from_secs(5);

/// Deadline of one block upload.
const UPLOAD_DEADLINE: Duration = Duration::from_secs(30);

/// How long the tier is left alone after a failure (reads go to the Hub meanwhile).
pub const PAUSE: Duration = Duration::from_secs(10);

/// How long a node waits for a block another node has claimed before fetching it itself.
pub const CLAIM_WAIT: Duration = Duration::from_secs(10);

/// Why the tier cannot be opened (a configuration error, reported at mount start).
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("--shared-cache {0}: not a URL")]
    Url(String),
    #[error("--shared-cache {0}: only s3://, gs:// and az:// URLs are supported (s3://bucket/prefix)")]
    Scheme(String),
    #[error("--shared-cache {url}: {source}")]
    Store {
        url: String,
        #[source]
        source: object_store::Error,
    },
}

/// The shared tier of one process; cheap to clone.
#[derive(Clone)]
pub struct SharedTier(Arc<Inner>);

/// Lock order: `paused_until`, `missing`, `others_seen` and the lanes' backlogs are leaves, never
/// held together; an upload takes its lane's uploader permit before its turn in `beside_reads`,
/// never the other way round; the metadata uploads take no lock.
struct Inner {
    store: Arc<dyn ObjectStore>,
    /// Object path prefix inside the bucket (no leading or trailing `/`).
    prefix: String,
    /// `s3://bucket/prefix` as given: what logs and status show (credentials are never in it).
    url: String,
    paused_until: parking_lot::Mutex<Option<Instant>>,
    /// Write-behind (`upload`): blocks this node claimed, and the rest.
    claimed: upload::Lane,
    unclaimed: upload::Lane,
    pace: upload::Pace,
    /// The disk tier deferred blocks are read back from (set when the store has one).
    disk: std::sync::OnceLock<(super::DiskTier, super::BufferPool)>,
    /// Write-behind of metadata objects (`meta`).
    meta_uploads: meta::Uploads,
    /// Set once the store refused a conditional create as unsupported: no claims from then on.
    no_claims: AtomicBool,
    /// Counts for `hubfs status`: hits, misses, invalid, written, dropped; metadata hits,
    /// misses, written; revision records found and written.
    counts: [std::sync::atomic::AtomicU64; 10],
    /// This process in claim objects (host and pid), for whoever looks at the bucket.
    node: String,
    /// Files whose last lookup missed (see `load`); bounded by [`MISS_RUNS`].
    missing: parking_lot::Mutex<std::collections::HashSet<Arc<str>>>,
    /// Reads waiting on the tier now (`upload::Reading`), and the turns of the uploads that
    /// may run beside them.
    reading: std::sync::atomic::AtomicUsize,
    beside_reads: tokio::sync::Semaphore,
    /// When this node last found another node's fresh claim on a block (`others_reading`).
    others_seen: parking_lot::Mutex<Option<Instant>>,
}

/// Files remembered as being in a run of misses at most; past it the set starts over.
const MISS_RUNS: usize = 4096;

/// The tier as `hubfs status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SharedReport {
    pub url: String,
    pub paused: bool,
    pub pending_uploads: u64,
    /// Blocks served by the tier (after a wait for another node's claim too).
    pub hits: u64,
    /// Blocks this node fetched from the Hub after missing the tier.
    pub misses: u64,
    /// Objects that failed verification (refetched and replaced).
    pub invalid: u64,
    pub written: u64,
    pub dropped: u64,
    /// Listings and point lookups served by the tier (after a wait for another node's claim too).
    #[serde(default)]
    pub meta_hits: u64,
    /// Listings and point lookups not found in the tier (then fetched from the Hub, or waited
    /// for while another node fetched them).
    #[serde(default)]
    pub meta_misses: u64,
    #[serde(default)]
    pub meta_written: u64,
    /// Branch and tag records found in the tier at a revision's refresh (`refs`).
    #[serde(default)]
    pub refs_found: u64,
    /// Records this node wrote after asking the Hub itself.
    #[serde(default)]
    pub refs_written: u64,
}

/// What a lookup found: a block's bytes, or a metadata object's value.
pub enum Lookup<T = Bytes> {
    Hit(T),
    Miss,
    /// An object that is not the block (torn, of another block, damaged): fetch and replace it.
    Bad,
}

impl SharedTier {
    /// The tier at `url` (`s3://`, `gs://` or `az://bucket/prefix`), with credentials from the
    /// places the store's own cloud tools look (see `open`). Nothing is contacted here: a store
    /// that is down only pauses the tier.
    pub fn open(url: &str) -> Result<SharedTier, SharedError> {
        let (store, prefix) = open::store(url)?;
        Ok(SharedTier::with_store(url, store, &prefix))
    }

    /// The tier over `store`, its blocks under `prefix`; `url` names it in logs.
    pub fn with_store(url: &str, store: Arc<dyn ObjectStore>, prefix: &str) -> SharedTier {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        SharedTier(Arc::new(Inner {
            store,
            prefix: prefix.trim_matches('/').to_string(),
            url: url.to_string(),
            paused_until: parking_lot::Mutex::new(None),
            claimed: upload::Lane::new(),
            unclaimed: upload::Lane::new(),
            pace: Default::default(),
            meta_uploads: Default::default(),
            disk: std::sync::OnceLock::new(),
            no_claims: AtomicBool::new(false),
            counts: Default::default(),
            node: format!("{}:{}", host.trim(), std::process::id()),
            missing: Default::default(),
            reading: Default::default(),
            beside_reads: tokio::sync::Semaphore::new(upload::UPLOADS_BESIDE_READS),
            others_seen: parking_lot::Mutex::new(None),
        }))
    }

    /// Records an event in the metrics and the status counts.
    fn event(&self, outcome: &'static str) {
        crate::metrics::shared(outcome);
        let i = match outcome {
            "hit" => 0,
            "miss" => 1,
            "invalid" | "meta_invalid" => 2,
            "written" => 3,
            "dropped" | "meta_dropped" => 4,
            "meta_hit" => 5,
            "meta_miss" => 6,
            "meta_written" => 7,
            "ref_found" => 8,
            "ref_written" => 9,
            _ => return,
        };
        self.0.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The tier now (`hubfs status`).
    pub fn report(&self) -> SharedReport {
        let c = |i: usize| self.0.counts[i].load(Ordering::Relaxed);
        SharedReport {
            url: self.0.url.clone(),
            paused: self.paused(),
            pending_uploads: self.pending_uploads() as u64,
            hits: c(0),
            misses: c(1),
            invalid: c(2),
            written: c(3),
            dropped: c(4),
            meta_hits: c(5),
            meta_misses: c(6),
            meta_written: c(7),
            refs_found: c(8),
            refs_written: c(9),
        }
    }

    /// The URL the tier was opened with (no credentials).
    pub fn url(&self) -> &str {
        &self.0.url
    }

    /// The store and the prefix (for `hubfs cache shared`).
    pub fn store(&self) -> (&Arc<dyn ObjectStore>, &str) {
        (&self.0.store, &self.0.prefix)
    }

    /// Whether the tier is paused after a failure (reads skip it until the pause ends).
    pub fn paused(&self) -> bool {
        let mut p = self.0.paused_until.lock();
        match *p {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *p = None;
                drop(p);
                tracing::info!(url = %self.0.url, "shared cache: pause over, trying it again");
                false
            }
            None => false,
        }
    }

    /// Pauses the tier after `what` failed.
    fn pause(&self, what: &str, err: &dyn std::fmt::Display) {
        let mut p = self.0.paused_until.lock();
        let first = p.is_none_or(|t| Instant::now() >= t);
        *p = Some(Instant::now() + PAUSE);
        drop(p);
        if first {
            self.event("paused");
            tracing::warn!(url = %self.0.url, what, error = %err, pause_s = PAUSE.as_secs(),
                "shared cache unavailable: reads go to the Hub, tier paused");
        }
    }

    fn block_path(&self, key: &str, block: u64) -> object_store::path::Path {
        format::object_path(&self.0.prefix, "blocks", key, block)
    }

    /// Looks the block up (within [`LOOKUP_DEADLINE`]) and verifies what it finds.
    pub async fn get(&self, key: &Arc<str>, block: u64, expected_len: u64) -> Lookup {
        if self.paused() {
            return Lookup::Miss;
        }
        let path = self.block_path(key, block);
        let got = tokio::time::timeout(LOOKUP_DEADLINE, async { self.0.store.get(&path).await?.bytes().await }).await;
        let Some(obj) = self.looked_up(got) else {
            return Lookup::Miss;
        };
        let k = key.clone();
        let checked = tokio::task::spawn_blocking(move || format::decode(&obj, &k, block, expected_len)).await;
        match checked {
            Ok(Ok(b)) => {
                self.event("hit");
                Lookup::Hit(b)
            }
            Ok(Err(why)) => {
                self.event("invalid");
                tracing::warn!(url = %self.0.url, key = %key, block, error = %why,
                    "shared cache object failed verification: refetching from the Hub to replace it");
                Lookup::Bad
            }
            Err(_) => Lookup::Miss,
        }
    }

    /// What a lookup under [`LOOKUP_DEADLINE`] found: the object, or `None` for a miss. A store
    /// error or an expired deadline is a miss that also pauses the tier.
    fn looked_up<T>(&self, got: Result<object_store::Result<T>, tokio::time::error::Elapsed>) -> Option<T> {
        match got {
            Ok(Ok(obj)) => Some(obj),
            Ok(Err(object_store::Error::NotFound { .. })) => None,
            Ok(Err(e)) => {
                self.pause("lookup", &e);
                None
            }
            Err(_) => {
                self.pause("lookup", &format!("no answer within {LOOKUP_DEADLINE:?}"));
                None
            }
        }
    }

    /// Lets deferred uploads read their blocks back from `disk` (see `write_behind`).
    pub fn set_disk(&self, disk: super::DiskTier, pool: super::BufferPool) {
        let _ = self.0.disk.set((disk, pool));
    }

    /// The block from the tier, or from `fetch` (the Hub) after a miss, and whether it came from
    /// the tier. A block fetched here is written behind to the tier; a claim keeps other nodes
    /// from fetching it from the Hub at the same time. Only `fetch`'s own error is returned.
    ///
    /// Misses come in runs (the first node to read a file misses every block of it): while a
    /// file's last lookup missed, the lookup and the claim go out together, so a miss costs the
    /// Hub fetch one round trip to the store instead of two. A hit found that way lets its
    /// claim go at once; a file whose blocks are found asks the lookup alone (no claim writes).
    pub async fn load<F, E>(&self, key: &Arc<str>, block: u64, expected_len: u64, fetch: F) -> Result<(Bytes, bool), E>
    where
        F: std::future::Future<Output = Result<Bytes, E>>,
    {
        let t = Instant::now();
        let _reading = upload::Reading::new(self);
        let claim = match self.ask(key, block, expected_len).await {
            Asked::Found(b) => return Ok((b, true)),
            Asked::Fetch(claim) => claim,
        };
        let asked = t.elapsed();
        let got = fetch.await;
        tracing::debug!(key = %key, block, asked_ms = asked.as_millis() as u64,
            fetch_ms = (t.elapsed() - asked).as_millis() as u64, "shared cache miss: fetched from the Hub");
        match got {
            Ok(b) => {
                self.write_behind(key, block, &b, claim);
                Ok((b, false))
            }
            Err(e) => {
                if let Some(c) = claim {
                    c.release();
                }
                Err(e)
            }
        }
    }

    /// Lookup (and claim on a miss): the block, or to fetch it from the Hub (with the claim if
    /// this node holds one).
    async fn ask(&self, key: &Arc<str>, block: u64, expected_len: u64) -> Asked {
        let in_run = self.0.missing.lock().contains(key);
        let (found, early) = if in_run && !self.paused() {
            let (found, claimed) = tokio::join!(self.get(key, block, expected_len), self.claim(key, block));
            (found, Some(claimed))
        } else {
            (self.get(key, block, expected_len).await, None)
        };
        self.note_run(key, !matches!(found, Lookup::Hit(_)));
        match found {
            Lookup::Hit(b) => {
                if let Some(claim::Outcome::Ours(c)) = early {
                    c.release();
                }
                Asked::Found(b)
            }
            // Replaced from the Hub; a claim taken with the lookup is kept for the upload.
            Lookup::Bad => Asked::Fetch(match early {
                Some(claim::Outcome::Ours(c)) => Some(c),
                _ => None,
            }),
            Lookup::Miss if self.paused() => Asked::Fetch(None),
            Lookup::Miss => {
                self.event("miss");
                let claimed = match early {
                    Some(c) => c,
                    None => self.claim(key, block).await,
                };
                match claimed {
                    claim::Outcome::Ours(c) => Asked::Fetch(Some(c)),
                    claim::Outcome::Theirs => {
                        *self.0.others_seen.lock() = Some(Instant::now());
                        let claim = self.claim_path(key, block);
                        let look = || self.get(key, block, expected_len);
                        match self.wait_on_claim(&claim, CLAIM_DEADLINE, look).await {
                            claim::Waited::Found(b) => Asked::Found(b),
                            claim::Waited::Fetch(c) => {
                                tracing::debug!(key = %key, block, took_over = c.is_some(),
                                    "shared cache: claimed block did not come; fetching it");
                                Asked::Fetch(c)
                            }
                        }
                    }
                    claim::Outcome::None => Asked::Fetch(None),
                    claim::Outcome::TimedOut => match self.get(key, block, expected_len).await {
                        Lookup::Hit(b) => Asked::Found(b),
                        _ => Asked::Fetch(None),
                    },
                }
            }
        }
    }

    /// Whether another node was found fetching a block within [`upload::OTHERS_READING`]: a
    /// fleet reading together, whose nodes wait for the blocks this node claimed.
    fn others_reading(&self) -> bool {
        self.0
            .others_seen
            .lock()
            .is_some_and(|t| t.elapsed() < upload::OTHERS_READING)
    }

    /// Remembers whether `key`'s last lookup missed.
    fn note_run(&self, key: &Arc<str>, missed: bool) {
        let mut m = self.0.missing.lock();
        if !missed {
            m.remove(key);
            return;
        }
        if m.len() >= MISS_RUNS && !m.contains(key) {
            m.clear();
        }
        m.insert(key.clone());
    }
}

/// What `ask` decided.
enum Asked {
    /// The block, from the tier (also after waiting for another node's claim).
    Found(Bytes),
    /// Fetch it from the Hub, uploading it afterwards under this node's claim, if any.
    Fetch(Option<Claim>),
}

#[cfg(test)]
mod tests;
