//! Branch and tag records: the commit the last node to ask the Hub got for a repo's branch or
//! tag, so a fleet re-resolves a branch about once per metadata TTL instead of once per node.
//!
//! - One object per (repo, revision) under `PREFIX/refs/`, overwritten by each node that resolves
//!   it from the Hub, with the metadata objects' verified header. Its payload names the commit,
//!   and the write (the writing node and a random number), so that two writes of one commit are
//!   two records: a reader tells "written since I last looked" from "the one I saw" by the write
//!   alone, with no clock (see `vfs::shared_revision`).
//! - A refresh is claimed (`PREFIX/claims/refs/…`), so of the nodes finding a record too old at
//!   once, one asks the Hub and the others look again shortly.
//! - Every request has [`REF_DEADLINE`]: a record is on the path of the lookup that found the
//!   revision due, and the Hub is the answer to a store that is slow.

use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::PutPayload;
use serde::{Deserialize, Serialize};

use super::claim::Outcome;
use super::{SharedTier, format};
use crate::chunk_store::MetaKey;

/// Deadline of a record's lookup, write and claim.
pub const REF_DEADLINE: Duration = Duration::from_secs(1);

/// Largest record read (a commit id, a node name and a number fit in far less).
const MAX_REF_BYTES: u64 = 4096;

const OBJECTS: [&str; 1] = ["refs"];
const CLAIMS: [&str; 2] = ["claims", "refs"];

/// What the tier records of a branch or tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefRecord {
    /// The commit id the writer got from the Hub.
    pub commit: String,
    /// Which write this is: random, so a reader sees a new write even of the same commit.
    pub write: u64,
    /// The writing node (host and pid), for whoever looks at the bucket.
    pub node: String,
}

/// What a record lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefLook {
    Found(RefRecord),
    /// No record yet.
    Absent,
    /// The store failed, is paused, or the record is not valid: ask the Hub.
    Failed,
}

/// What a refresh claim found.
pub enum RefClaim {
    /// This node asks the Hub; the claim goes when the record is written.
    Ours(super::Claim),
    /// Another node is asking the Hub now, or the store did not answer in time (as SeaweedFS
    /// answers creates racing on one name a second apart): look again shortly.
    Theirs,
    /// No claims (unsupported, paused, a dead node's claim taken over): ask the Hub.
    None,
}

impl SharedTier {
    /// The record of `key` (see `vfs::shared_revision` for the key), within [`REF_DEADLINE`].
    pub async fn get_ref(&self, key: &MetaKey) -> RefLook {
        if self.paused() {
            return RefLook::Failed;
        }
        let path = self.meta_path(&OBJECTS, key);
        let got = tokio::time::timeout(REF_DEADLINE, async {
            let r = self.0.store.get(&path).await?;
            if r.meta.size > MAX_REF_BYTES {
                return Ok(None);
            }
            r.bytes().await.map(Some)
        })
        .await;
        let obj = match got {
            Ok(Ok(Some(obj))) => obj,
            Ok(Err(object_store::Error::NotFound { .. })) => return RefLook::Absent,
            // A slow answer sends this refresh to the Hub; it does not pause the tier (the
            // blocks' lookups judge the store, with their own deadline).
            Err(_) => return RefLook::Failed,
            Ok(Err(e)) => {
                self.pause("revision lookup", &e);
                return RefLook::Failed;
            }
            Ok(Ok(None)) => return self.bad_ref(key, &"larger than any record"),
        };
        let record = format::decode_meta(&obj, key.id())
            .map_err(|e| e.to_string())
            .and_then(|data| serde_json::from_slice::<RefRecord>(&data).map_err(|e| format!("does not parse: {e}")));
        match record {
            Ok(r) if crate::util::is_commit_id(&r.commit) => {
                self.event("ref_found");
                RefLook::Found(r)
            }
            Ok(r) => self.bad_ref(key, &format!("not a commit id: {:?}", r.commit)),
            Err(why) => self.bad_ref(key, &why),
        }
    }

    fn bad_ref(&self, key: &MetaKey, why: &dyn std::fmt::Display) -> RefLook {
        self.event("meta_invalid");
        tracing::warn!(url = %self.0.url, key = %key.id(), error = %why,
            "shared cache revision record failed verification: asking the Hub (its answer replaces it)");
        RefLook::Failed
    }

    /// Claims the refresh of `key`'s record for this node.
    pub async fn claim_ref(&self, key: &MetaKey) -> RefClaim {
        match self.claim_at(self.meta_path(&CLAIMS, key), REF_DEADLINE).await {
            Outcome::Ours(c) => RefClaim::Ours(c),
            Outcome::Theirs | Outcome::TimedOut => RefClaim::Theirs,
            Outcome::None => RefClaim::None,
        }
    }

    /// Writes `commit` as `key`'s record (within [`REF_DEADLINE`]), then lets `claim` go. The
    /// write's number, or `None` if it was not written.
    pub async fn put_ref(&self, key: &MetaKey, commit: &str, claim: Option<super::Claim>) -> Option<u64> {
        if self.paused() {
            return None;
        }
        let record = RefRecord {
            commit: commit.to_string(),
            write: rand::random(),
            node: self.0.node.clone(),
        };
        let data = Bytes::from(serde_json::to_vec(&record).ok()?);
        let payload: PutPayload = format::encode_meta(key.id(), &data).into_iter().collect();
        let path = self.meta_path(&OBJECTS, key);
        let put = tokio::time::timeout(REF_DEADLINE, self.0.store.put(&path, payload)).await;
        drop(claim);
        match put {
            Ok(Ok(_)) => {
                self.event("ref_written");
                Some(record.write)
            }
            Ok(Err(e)) => {
                self.pause("revision write", &e);
                None
            }
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier() -> SharedTier {
        let store: std::sync::Arc<dyn object_store::ObjectStore> =
            std::sync::Arc::new(object_store::memory::InMemory::new());
        SharedTier::with_store("mem://", store, "fleet")
    }

    fn key() -> MetaKey {
        MetaKey::new(&["v1", "models", "demo", "tiny-model"], "ref", "main")
    }

    #[tokio::test]
    async fn a_record_reads_back_as_written_and_each_write_is_told_apart() {
        let t = tier();
        assert_eq!(t.get_ref(&key()).await, RefLook::Absent);
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let w1 = t.put_ref(&key(), commit, None).await.unwrap();
        let RefLook::Found(r) = t.get_ref(&key()).await else {
            panic!("not found")
        };
        assert_eq!((r.commit.as_str(), r.write), (commit, w1));
        let w2 = t.put_ref(&key(), commit, None).await.unwrap();
        assert_ne!(w1, w2, "the same commit written again is another write");
        assert_eq!(
            t.get_ref(&key()).await,
            RefLook::Found(RefRecord {
                commit: commit.into(),
                write: w2,
                node: r.node
            })
        );
        let path = t.meta_path(&OBJECTS, &key());
        assert_eq!(path.as_ref(), "fleet/refs/v1/models/demo/tiny-model/ref/_main");
    }

    #[tokio::test]
    async fn a_damaged_or_foreign_record_is_not_used() {
        let t = tier();
        let path = t.meta_path(&OBJECTS, &key());
        t.0.store.put(&path, PutPayload::from_static(b"{}")).await.unwrap();
        assert_eq!(t.get_ref(&key()).await, RefLook::Failed, "no header");
        // A valid object of another key (another branch's record copied over this one).
        let other = MetaKey::new(&["v1", "models", "demo", "tiny-model"], "ref", "dev");
        let data = Bytes::from_static(br#"{"commit":"0123456789abcdef0123456789abcdef01234567","write":1,"node":"x"}"#);
        let obj: PutPayload = format::encode_meta(other.id(), &data).into_iter().collect();
        t.0.store.put(&path, obj).await.unwrap();
        assert_eq!(t.get_ref(&key()).await, RefLook::Failed, "another key's record");
        // The right key, but not a commit id.
        let data = Bytes::from_static(br#"{"commit":"../../etc","write":1,"node":"x"}"#);
        let obj: PutPayload = format::encode_meta(key().id(), &data).into_iter().collect();
        t.0.store.put(&path, obj).await.unwrap();
        assert_eq!(t.get_ref(&key()).await, RefLook::Failed, "not a commit id");
    }

    #[tokio::test]
    async fn of_two_nodes_claiming_a_refresh_one_asks_the_hub() {
        let t = tier();
        let first = t.claim_ref(&key()).await;
        assert!(matches!(first, RefClaim::Ours(_)));
        assert!(matches!(t.claim_ref(&key()).await, RefClaim::Theirs));
        let RefClaim::Ours(c) = first else { unreachable!() };
        t.put_ref(&key(), "0123456789abcdef0123456789abcdef01234567", Some(c))
            .await
            .unwrap();
        // The claim goes in the background once the record is written.
        for _ in 0..50 {
            if matches!(t.claim_ref(&key()).await, RefClaim::Ours(_)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the claim stayed after the record was written");
    }
}
