//! Storage Buckets: the calls that differ from repos. A bucket has no revisions and no commits;
//! its files change through one batch endpoint, and `updatedAt` moves with every change.
//!
//! The rest of hubfs addresses metadata by commit (listings are cached per commit), so a bucket's
//! state gets an id of the same kind: [`bucket_state_id`] of its info. `repo_info` on a bucket
//! returns it as the "sha", and the listing, paths-info, token and resolve calls accept it as their
//! revision argument and leave it out of the URL (see `at_rev`). A listing cached under one state
//! id is never reused once the bucket's `updatedAt` moved.

use bytes::Bytes;
use reqwest::Method;
use serde::Deserialize;
use sha2::Digest as _;

use super::api::parse_json;
use super::error::{ErrorContext, HubClientError};
use super::http::Request;
use super::types::{RepoInfo, parse_date};
use super::{HubClient, RepoRef, check_path};

/// Operations per batch request: what the stock client sends at most.
pub const BUCKET_BATCH_MAX: usize = 1000;

/// One change to a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketOp {
    /// Content already in Xet storage, named by its Xet hash, placed at `path`.
    AddFile {
        path: String,
        xet_hash: String,
        size: u64,
        /// Milliseconds since the epoch: the mtime the bucket keeps for the file.
        mtime_ms: u64,
    },
    DeleteFile {
        path: String,
    },
}

impl BucketOp {
    pub fn path(&self) -> &str {
        match self {
            BucketOp::AddFile { path, .. } | BucketOp::DeleteFile { path } => path,
        }
    }
}

/// What a batch did: the Hub applies each operation on its own and lists those that failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketBatchOutcome {
    /// `(path, error)` of every refused operation.
    pub failed: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct RawBucketInfo {
    #[serde(rename = "_id")]
    id: Option<String>,
    #[serde(default)]
    private: bool,
    #[serde(rename = "updatedAt")]
    updated_at: Option<String>,
    #[serde(rename = "createdAt")]
    created_at: Option<String>,
    #[serde(default)]
    size: u64,
    #[serde(rename = "totalFiles", default)]
    total_files: u64,
}

#[derive(Deserialize)]
struct RawFailure {
    #[serde(default)]
    path: String,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize)]
struct RawBatchAnswer {
    #[serde(default)]
    failed: Vec<RawFailure>,
}

/// The id hubfs uses for one state of a bucket: `bucket-` and 32 hex digits of sha256 over the fields that move
/// when it changes (`updatedAt`, and size and file count in case a Hub rounds `updatedAt`).
pub fn bucket_state_id(updated_at: &str, size: u64, total_files: u64) -> String {
    let mut h = sha2::Sha256::new();
    h.update(format!("{updated_at}\n{size}\n{total_files}").as_bytes());
    // Not 40 hex digits: a bucket state must never pass for an immutable commit id.
    format!("bucket-{}", &hex::encode(h.finalize())[..32])
}

impl HubClient {
    /// `GET /api/buckets/{ns}/{name}` as a [`RepoInfo`] whose `sha` is the state id.
    pub(super) async fn bucket_info(&self, bucket: &RepoRef) -> Result<RepoInfo, HubClientError> {
        let ctx = ErrorContext::call("GET", bucket, None, None);
        let url = self.api_url(bucket, "")?;
        let reply = self.inner.http.send(&Request::get(url), &ctx).await?;
        let raw: RawBucketInfo = parse_json(&reply, &ctx)?;
        let created_at = raw.created_at.filter(|s| !s.is_empty());
        let stamp = raw.updated_at.or_else(|| created_at.clone()).unwrap_or_default();
        Ok(RepoInfo {
            sha: bucket_state_id(&stamp, raw.size, raw.total_files),
            last_modified: parse_date(&stamp),
            private: raw.private,
            instance_id: raw.id.filter(|s| !s.is_empty()),
            created_at,
        })
    }

    /// `POST /api/buckets/{ns}/{name}/batch` (NDJSON, one line per operation), in requests of at
    /// most `BUCKET_BATCH_MAX`. Every operation is idempotent (a path set to a content, a path
    /// removed), so a retried request cannot do harm. Operations the Hub refused come back in
    /// the outcome; a refused request is an error.
    pub async fn bucket_batch(&self, bucket: &RepoRef, ops: &[BucketOp]) -> Result<BucketBatchOutcome, HubClientError> {
        if !bucket.is_bucket() {
            return Err(HubClientError::bad_input(bucket.web_path(), "not a bucket"));
        }
        let ctx = ErrorContext::call("POST", bucket, None, None);
        let url = self.api_url(bucket, "/batch")?;
        let mut outcome = BucketBatchOutcome::default();
        for part in ops.chunks(BUCKET_BATCH_MAX) {
            let mut body = Vec::new();
            for op in part {
                check_path(bucket, op.path(), false)?;
                let line = match op {
                    BucketOp::AddFile {
                        path,
                        xet_hash,
                        size,
                        mtime_ms,
                    } => serde_json::json!({
                        "type": "addFile", "path": path, "xetHash": xet_hash, "size": size, "mtime": mtime_ms,
                    }),
                    BucketOp::DeleteFile { path } => serde_json::json!({"type": "deleteFile", "path": path}),
                };
                serde_json::to_writer(&mut body, &line)
                    .map_err(|e| HubClientError::bad_input("batch", e.to_string()))?;
                body.push(b'\n');
            }
            let req = Request {
                method: Method::POST,
                body: Some(("application/x-ndjson", Bytes::from(body))),
                long_wait_fails: true,
                ..Request::get(url.clone())
            };
            let reply = self.inner.http.send(&req, &ctx).await?;
            let raw: RawBatchAnswer = parse_json(&reply, &ctx)?;
            outcome.failed.extend(raw.failed.into_iter().map(|f| (f.path, f.error)));
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_ids_move_with_the_bucket() {
        let a = bucket_state_id("2026-01-01T00:00:00.000Z", 10, 1);
        assert_eq!(a.len(), 39);
        assert!(!super::super::is_commit_id(&a));
        assert_ne!(a, bucket_state_id("2026-01-01T00:00:00.001Z", 10, 1));
        assert_ne!(a, bucket_state_id("2026-01-01T00:00:00.000Z", 11, 1));
        assert_eq!(a, bucket_state_id("2026-01-01T00:00:00.000Z", 10, 1));
    }
}
