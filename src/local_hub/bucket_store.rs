//! On-disk state of storage buckets, and the only code that writes it.
//!
//! Layout under the data dir:
//! ```text
//! buckets/{ns}/{name}/bucket.json   settings and every file of the bucket (path → Xet hash, size,
//!                                   mtime, upload time), replaced as a whole on each change
//! ```
//! A bucket exists while its `bucket.json` does. Each change (a whole batch, a settings change)
//! writes a new `bucket.json` through a temporary file, fsync and rename, so it lands whole or not
//! at all, even across `kill -9`. File contents live in the embedded Xet CAS, shared with repos.
//! Buckets are small next to what a file per object would cost (one JSON document, loaded at
//! start), which suits a local Hub; a bucket of a million files would want a real index.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use super::error::{HubError, HubResult};
use super::names::validate_name_part;
use super::store::{now_iso, write_atomic};

/// `namespace/name` of a bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketId {
    pub namespace: String,
    pub name: String,
}

impl BucketId {
    pub fn new(namespace: &str, name: &str) -> HubResult<Self> {
        validate_name_part(namespace)?;
        validate_name_part(name)?;
        Ok(BucketId {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// Parses `ns/name` (as in a move request or a copy source).
    pub fn parse(id: &str) -> HubResult<Self> {
        let (ns, name) = id
            .split_once('/')
            .ok_or_else(|| HubError::bad_request(format!("Invalid bucket id {id:?}: expected namespace/name")))?;
        BucketId::new(ns, name)
    }

    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `/api/buckets/ns/name`.
    pub fn api_path(&self) -> String {
        format!("/api/buckets/{}/{}", self.namespace, self.name)
    }
}

impl fmt::Display for BucketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "buckets/{}/{}", self.namespace, self.name)
    }
}

/// One file of a bucket. Content is always a Xet file (buckets have no other storage).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BucketFile {
    pub xet_hash: String,
    pub size: u64,
    /// Modification time the client declared, in milliseconds since the epoch.
    pub mtime_ms: i64,
    /// When this version of the file was added (ISO 8601, milliseconds, UTC).
    pub uploaded_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

/// Everything a bucket is: its settings and its files, keyed by their full path.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BucketDoc {
    pub private: bool,
    pub created_at: String,
    /// Moves forward on every change (files or settings): mounts poll it to notice changes.
    pub updated_at: String,
    pub files: BTreeMap<String, BucketFile>,
}

impl BucketDoc {
    pub fn size(&self) -> u64 {
        self.files.values().map(|f| f.size).sum()
    }

    /// Sets `updated_at` to now, or 1 ms past its old value when the clock has not moved on (two
    /// changes in one millisecond must still look different to a poller).
    pub fn touch(&mut self) {
        let now = now_iso();
        self.updated_at = if now > self.updated_at {
            now
        } else {
            chrono::DateTime::parse_from_rfc3339(&self.updated_at)
                .map(|t| {
                    (t.with_timezone(&chrono::Utc) + chrono::Duration::milliseconds(1))
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                })
                .unwrap_or(now)
        };
    }
}

/// One loaded bucket. Writers hold `write` (async, for a whole batch) while they build and store a
/// new document; readers take a snapshot of `doc` and never wait for a writer's disk I/O.
pub struct Bucket {
    pub id: BucketId,
    dir: PathBuf,
    doc: RwLock<Arc<BucketDoc>>,
    pub write: tokio::sync::Mutex<()>,
    /// Set once the bucket is deleted or moved away: a writer that waited on `write` meanwhile must
    /// not bring it back.
    gone: AtomicBool,
}

impl Bucket {
    pub fn doc(&self) -> Arc<BucketDoc> {
        self.doc.read().clone()
    }

    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }
}

pub struct BucketStore {
    root: PathBuf,
    buckets: RwLock<BTreeMap<BucketId, Arc<Bucket>>>,
    /// Serialises creations, deletions and moves (the existence checks and the renames).
    admin: Mutex<()>,
    /// Most operations one batch (and paths one paths-info request) may carry; 0 = no limit.
    batch_limit: AtomicUsize,
    /// Sizes of Xet files the CAS was asked about (file hash → size): the CAS is the authority,
    /// this only saves asking it again.
    xet_sizes: Mutex<HashMap<String, u64>>,
}

fn bucket_file(dir: &Path) -> PathBuf {
    dir.join("bucket.json")
}

fn sync_dir(dir: &Path) -> HubResult<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| HubError::internal(format!("syncing {}: {e}", dir.display())))
}

fn save_doc(dir: &Path, doc: &BucketDoc) -> HubResult<()> {
    let data = serde_json::to_vec(doc).map_err(HubError::internal)?;
    let path = bucket_file(dir);
    write_atomic(&path, &data).map_err(|e| HubError::internal(format!("writing {}: {e}", path.display())))
}

impl BucketStore {
    /// Loads every bucket under `root/buckets`. A bucket file that cannot be read fails the start:
    /// serving a bucket as empty would let the next batch overwrite what it held.
    pub fn open(root: &Path, batch_limit: usize) -> HubResult<BucketStore> {
        let base = root.join("buckets");
        std::fs::create_dir_all(&base).map_err(|e| HubError::internal(format!("creating {}: {e}", base.display())))?;
        let mut buckets = BTreeMap::new();
        for ns in std::fs::read_dir(&base).map_err(HubError::internal)?.flatten() {
            let Ok(names) = std::fs::read_dir(ns.path()) else {
                continue;
            };
            for name in names.flatten() {
                let dir = name.path();
                let file = bucket_file(&dir);
                if !file.is_file() {
                    continue;
                }
                let (Some(n), Some(m)) = (
                    ns.file_name().to_str().map(str::to_string),
                    name.file_name().to_str().map(str::to_string),
                ) else {
                    continue;
                };
                let Ok(id) = BucketId::new(&n, &m) else { continue };
                let data =
                    std::fs::read(&file).map_err(|e| HubError::internal(format!("reading {}: {e}", file.display())))?;
                let doc: BucketDoc = serde_json::from_slice(&data)
                    .map_err(|e| HubError::internal(format!("parsing {}: {e}", file.display())))?;
                buckets.insert(id.clone(), Arc::new(Bucket::new(id, dir, doc)));
            }
        }
        Ok(BucketStore {
            root: root.to_path_buf(),
            buckets: RwLock::new(buckets),
            admin: Mutex::new(()),
            batch_limit: AtomicUsize::new(batch_limit),
            xet_sizes: Mutex::new(HashMap::new()),
        })
    }

    fn dir_of(&self, id: &BucketId) -> PathBuf {
        self.root.join("buckets").join(&id.namespace).join(&id.name)
    }

    pub fn batch_limit(&self) -> usize {
        self.batch_limit.load(Ordering::Relaxed)
    }

    pub fn set_batch_limit(&self, n: usize) {
        self.batch_limit.store(n, Ordering::Relaxed);
    }

    pub fn known_xet_size(&self, hash: &str) -> Option<u64> {
        self.xet_sizes.lock().get(hash).copied()
    }

    pub fn remember_xet_size(&self, hash: &str, size: u64) {
        self.xet_sizes.lock().insert(hash.to_string(), size);
    }

    pub fn get(&self, id: &BucketId) -> Option<Arc<Bucket>> {
        self.buckets.read().get(id).cloned()
    }

    /// Every bucket of a namespace, by name.
    pub fn list(&self, namespace: &str) -> Vec<Arc<Bucket>> {
        self.buckets
            .read()
            .values()
            .filter(|b| b.id.namespace == namespace)
            .cloned()
            .collect()
    }

    pub fn create(&self, id: &BucketId, private: bool) -> HubResult<Arc<Bucket>> {
        let _admin = self.admin.lock();
        if self.buckets.read().contains_key(id) {
            return Err(HubError::Conflict("You already created this bucket".to_string()));
        }
        let now = now_iso();
        let doc = BucketDoc {
            private,
            created_at: now.clone(),
            updated_at: now,
            files: BTreeMap::new(),
        };
        let dir = self.dir_of(id);
        save_doc(&dir, &doc)?;
        let b = Arc::new(Bucket::new(id.clone(), dir, doc));
        self.buckets.write().insert(id.clone(), b.clone());
        Ok(b)
    }

    /// Stores a bucket's new document. Caller holds `bucket.write` and built `doc` from the current
    /// one; it becomes visible to readers only once it is durable.
    pub fn save(&self, bucket: &Bucket, doc: BucketDoc) -> HubResult<()> {
        if bucket.is_gone() {
            return Err(HubError::BucketNotFound { anonymous: false });
        }
        save_doc(&bucket.dir, &doc)?;
        *bucket.doc.write() = Arc::new(doc);
        Ok(())
    }

    /// Deletes a bucket. Caller holds `bucket.write`.
    pub fn delete(&self, bucket: &Bucket) -> HubResult<()> {
        let _admin = self.admin.lock();
        if bucket.is_gone() {
            return Err(HubError::BucketNotFound { anonymous: false });
        }
        // bucket.json first: a crash mid-delete leaves no half-visible bucket.
        std::fs::remove_file(bucket_file(&bucket.dir)).map_err(HubError::internal)?;
        bucket.gone.store(true, Ordering::Release);
        self.buckets.write().remove(&bucket.id);
        if let Err(e) = std::fs::remove_dir_all(&bucket.dir) {
            tracing::warn!(bucket = %bucket.id, error = %e, "leftover directory of a deleted bucket");
        }
        Ok(())
    }

    /// Renames a bucket (one `rename(2)`, atomic). Caller holds `bucket.write`.
    pub fn rename(&self, bucket: &Bucket, to: &BucketId) -> HubResult<Arc<Bucket>> {
        let _admin = self.admin.lock();
        if bucket.is_gone() {
            return Err(HubError::BucketNotFound { anonymous: false });
        }
        if self.buckets.read().contains_key(to) {
            return Err(HubError::Conflict(format!("A bucket {} already exists", to.id())));
        }
        let dest = self.dir_of(to);
        let parent = dest
            .parent()
            .ok_or_else(|| HubError::internal("bucket directory has no parent"))?
            .to_path_buf();
        std::fs::create_dir_all(&parent).map_err(HubError::internal)?;
        if dest.exists() {
            // Left over from an interrupted delete: it holds no bucket.json, so nothing is lost.
            std::fs::remove_dir_all(&dest).map_err(HubError::internal)?;
        }
        let mut doc = (*bucket.doc()).clone();
        doc.touch();
        std::fs::rename(&bucket.dir, &dest).map_err(HubError::internal)?;
        sync_dir(&parent)?;
        if let Some(old_parent) = bucket.dir.parent() {
            sync_dir(old_parent)?;
        }
        bucket.gone.store(true, Ordering::Release);
        save_doc(&dest, &doc)?;
        let moved = Arc::new(Bucket::new(to.clone(), dest, doc));
        let mut map = self.buckets.write();
        map.remove(&bucket.id);
        map.insert(to.clone(), moved.clone());
        Ok(moved)
    }
}

impl Bucket {
    fn new(id: BucketId, dir: PathBuf, doc: BucketDoc) -> Bucket {
        Bucket {
            id,
            dir,
            doc: RwLock::new(Arc::new(doc)),
            write: tokio::sync::Mutex::new(()),
            gone: AtomicBool::new(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(hash: &str, size: u64) -> BucketFile {
        BucketFile {
            xet_hash: hash.to_string(),
            size,
            mtime_ms: 1_700_000_000_000,
            uploaded_at: now_iso(),
            content_type: None,
        }
    }

    #[test]
    fn create_save_move_delete_reopen() {
        let d = tempfile::tempdir().unwrap();
        let s = BucketStore::open(d.path(), 1000).unwrap();
        let id = BucketId::new("ns", "b").unwrap();
        let b = s.create(&id, true).unwrap();
        assert!(matches!(s.create(&id, false), Err(HubError::Conflict(_))));
        let mut doc = (*b.doc()).clone();
        doc.files.insert("a/x.bin".into(), file(&"1".repeat(64), 5));
        let before = doc.updated_at.clone();
        doc.touch();
        assert!(doc.updated_at > before, "{} !> {before}", doc.updated_at);
        s.save(&b, doc).unwrap();

        let s2 = BucketStore::open(d.path(), 1000).unwrap();
        let b2 = s2.get(&id).unwrap();
        assert!(b2.doc().private);
        assert_eq!(b2.doc().files["a/x.bin"].size, 5);

        let to = BucketId::new("other", "c").unwrap();
        let moved = s2.rename(&b2, &to).unwrap();
        assert!(b2.is_gone());
        assert!(s2.get(&id).is_none());
        assert_eq!(moved.doc().files.len(), 1);
        let s3 = BucketStore::open(d.path(), 1000).unwrap();
        assert!(s3.get(&id).is_none());
        let m3 = s3.get(&to).unwrap();
        s3.delete(&m3).unwrap();
        assert!(matches!(
            s3.save(&m3, (*m3.doc()).clone()),
            Err(HubError::BucketNotFound { .. })
        ));
        assert!(BucketStore::open(d.path(), 1000).unwrap().get(&to).is_none());
    }
}
