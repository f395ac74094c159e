//! `POST /api/buckets/{id}/batch`: the one write endpoint of bucket contents.
//!
//! The body is NDJSON, one operation a line:
//! `{"type":"addFile","path","xetHash","size"?,"mtime"?(ms),"contentType"?}`,
//! `{"type":"deleteFile","path"}` and
//! `{"type":"copyFile","path","xetHash","sourceRepoType","sourceRepoId","size"?,"mtime"?,"contentType"?}`.
//!
//! As on the Hub (and as its clients expect: "non-transactional"), a batch is not all-or-nothing:
//! each operation that fails is listed in `failed` with its reason and the others are applied, in
//! request order. Everything applied lands in one atomic write of the bucket, so a crash leaves the
//! bucket as before the batch or with every successful operation of it. The answer is
//! `{"success", "processed", "succeeded", "failed": [{"path", "error"}]}`: 200, or 422 when every
//! operation failed. A body that is not NDJSON, or more operations than the batch limit, is a 400
//! and changes nothing.
//!
//! Buckets hold Xet files only: an added hash must be a file the CAS holds (its size comes from the
//! CAS; a `size` that disagrees fails the operation), and a copied hash must be a file of the
//! source bucket or repo, which the caller must be able to read.

use std::collections::HashMap;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use xet_core_structures::merklehash::MerkleHash;

use super::auth::Caller;
use super::bucket_api::{readable, writable};
use super::bucket_store::{BucketFile, BucketId};
use super::error::{HubError, HubResult};
use super::http_util::{json_response, read_body};
use super::names::{RepoId, RepoType, validate_file_path};
use super::server::Req;
use super::state::HubState;
use super::store::now_iso;

/// Largest batch body (a thousand operations are well under 1 MiB).
const MAX_BODY: usize = 64 << 20;

/// The hash of the empty file: every client may add it, the CAS holds nothing for it.
const EMPTY_FILE_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One checked operation, ready to apply.
enum Change {
    Put { path: String, file: BucketFile },
    Delete { path: String },
}

/// Where a copy may take its hash from: the hashes (and sizes) of a source the caller can read.
type SourceFiles = Result<HashMap<String, u64>, String>;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The size of a Xet file the CAS holds, `None` if it holds no such file. A miss is asked again a
/// few times over 0.7 s: a client sends its batch right after its shard upload was answered, and the
/// CAS must not lose that race. Answers are kept per batch (`seen`), so a batch naming one unknown
/// hash many times waits once.
async fn cas_file_size(state: &HubState, seen: &mut HashMap<String, Option<u64>>, hash: &str) -> Option<u64> {
    if hash == EMPTY_FILE_HASH {
        return Some(0);
    }
    if let Some(s) = state.buckets.known_xet_size(hash) {
        return Some(s);
    }
    if let Some(answer) = seen.get(hash) {
        return *answer;
    }
    let h = MerkleHash::from_hex(hash).ok()?;
    let mut answer = None;
    for wait_ms in [0, 100, 200, 400] {
        tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
        match state.cas_client.get_file_size(&h).await {
            Ok(size) => {
                state.buckets.remember_xet_size(hash, size);
                answer = Some(size);
                break;
            }
            Err(e) => tracing::debug!(%hash, error = %e, "xet file not in the CAS (yet)"),
        }
    }
    seen.insert(hash.to_string(), answer);
    answer
}

/// Xet hashes of a copy source and their sizes: a bucket's files, or the files of every branch of
/// a repo (the request names no revision).
fn source_files(state: &HubState, caller: Option<&Caller>, ty: &str, id: &str) -> SourceFiles {
    let denied = |e: HubError| format!("Cannot read source {ty} {id}: {e}");
    if ty == "bucket" {
        let sid = BucketId::parse(id).map_err(denied)?;
        let b = readable(state, &sid, caller).map_err(denied)?;
        return Ok(b.doc().files.values().map(|f| (f.xet_hash.clone(), f.size)).collect());
    }
    let rt = match ty {
        "model" => RepoType::Model,
        "dataset" => RepoType::Dataset,
        "space" => RepoType::Space,
        other => {
            return Err(format!(
                "Invalid sourceRepoType {other:?}: use bucket, model, dataset or space"
            ));
        }
    };
    let (ns, name) = id
        .split_once('/')
        .ok_or_else(|| format!("Invalid sourceRepoId {id:?}: expected namespace/name"))?;
    let rid = RepoId::new(rt, ns, name).map_err(denied)?;
    let repo = state.readable_repo(&rid, caller).map_err(denied)?;
    let heads: Vec<String> = repo.refs.read().branches.values().cloned().collect();
    let mut out = HashMap::new();
    for head in heads {
        let commit = state.store.commit(&repo, &head).map_err(denied)?;
        for e in commit.files.values() {
            if let Some(x) = &e.xet_hash {
                out.insert(x.clone(), e.size);
            }
        }
    }
    Ok(out)
}

fn str_field<'a>(v: &'a Value, k: &str) -> Result<&'a str, String> {
    v[k].as_str().ok_or_else(|| format!("Missing or invalid {k:?}"))
}

fn opt_u64(v: &Value, k: &str) -> Result<Option<u64>, String> {
    match &v[k] {
        Value::Null => Ok(None),
        // A float is accepted (some clients send fractional milliseconds) and truncated.
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .map(Some)
            .ok_or_else(|| format!("Invalid {k:?}: a number ≥ 0")),
        _ => Err(format!("Invalid {k:?}: a number ≥ 0")),
    }
}

fn xet_hash(v: &Value) -> Result<String, String> {
    let h = str_field(v, "xetHash")?.to_ascii_lowercase();
    if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("Invalid xetHash {h:?}: 64 hex digits"));
    }
    Ok(h)
}

/// A new file entry, with the size the content really has.
fn new_file(v: &Value, hash: String, actual: u64) -> Result<BucketFile, String> {
    if let Some(declared) = opt_u64(v, "size")?
        && declared != actual
    {
        return Err(format!("size {declared} does not match the Xet file's size {actual}"));
    }
    let mtime_ms = opt_u64(v, "mtime")?
        .map(|m| i64::try_from(m).unwrap_or(i64::MAX))
        .unwrap_or_else(now_ms);
    Ok(BucketFile {
        xet_hash: hash,
        size: actual,
        mtime_ms,
        uploaded_at: String::new(),
        content_type: v["contentType"].as_str().map(str::to_string),
    })
}

/// Checks one operation against the CAS and the copy sources.
async fn check(
    state: &HubState,
    caller: Option<&Caller>,
    sources: &mut HashMap<(String, String), SourceFiles>,
    cas: &mut HashMap<String, Option<u64>>,
    v: &Value,
) -> Result<Change, String> {
    let path = str_field(v, "path")?.to_string();
    validate_file_path(&path).map_err(|e| e.to_string())?;
    match v["type"].as_str() {
        Some("deleteFile") => Ok(Change::Delete { path }),
        Some("addFile") => {
            let hash = xet_hash(v)?;
            let size = cas_file_size(state, cas, &hash)
                .await
                .ok_or_else(|| format!("Xet file {hash} not found: upload its content to the CAS first"))?;
            Ok(Change::Put {
                path,
                file: new_file(v, hash, size)?,
            })
        }
        Some("copyFile") => {
            let hash = xet_hash(v)?;
            let ty = str_field(v, "sourceRepoType")?.to_string();
            let id = str_field(v, "sourceRepoId")?.to_string();
            let files = sources
                .entry((ty.clone(), id.clone()))
                .or_insert_with(|| source_files(state, caller, &ty, &id));
            let size = match files {
                Ok(m) => *m
                    .get(&hash)
                    .ok_or_else(|| format!("Xet file {hash} is not a file of {ty} {id}"))?,
                Err(e) => return Err(e.clone()),
            };
            Ok(Change::Put {
                path,
                file: new_file(v, hash, size)?,
            })
        }
        Some(other) => Err(format!(
            "Unknown operation type {other:?}: use addFile, deleteFile or copyFile"
        )),
        None => Err("Missing operation \"type\"".to_string()),
    }
}

pub async fn batch(state: &HubState, req: Req, id: BucketId) -> HubResult<Response> {
    let caller = req.caller.clone();
    let b = writable(state, &id, caller.as_ref())?;
    let body = read_body(req.body, MAX_BODY).await?;
    let text = std::str::from_utf8(&body).map_err(|_| HubError::bad_request("The batch body is not UTF-8"))?;
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| HubError::bad_request(format!("Invalid NDJSON on line {}: {e}", i + 1)))
        })
        .collect::<HubResult<_>>()?;
    let limit = state.buckets.batch_limit();
    if limit > 0 && lines.len() > limit {
        return Err(HubError::bad_request(format!(
            "Too many operations in one batch: {} (at most {limit})",
            lines.len()
        )));
    }

    // Checks that need the CAS or other buckets and repos run before the bucket is locked.
    let mut sources = HashMap::new();
    let mut cas = HashMap::new();
    let mut checked = Vec::with_capacity(lines.len());
    for v in &lines {
        let path = v["path"].as_str().unwrap_or_default().to_string();
        checked.push((path, check(state, caller.as_ref(), &mut sources, &mut cas, v).await));
    }

    let _w = b.write.lock().await;
    let mut doc = (*b.doc()).clone();
    let uploaded_at = now_iso();
    let mut failed = Vec::new();
    let mut changed = false;
    for (path, c) in checked {
        match c {
            Ok(Change::Put { path, mut file }) => {
                file.uploaded_at = uploaded_at.clone();
                doc.files.insert(path, file);
                changed = true;
            }
            // Deleting what is not there is done already (S3-like).
            Ok(Change::Delete { path }) => changed |= doc.files.remove(&path).is_some(),
            Err(error) => failed.push(json!({"path": path, "error": error})),
        }
    }
    if changed {
        doc.touch();
        state.buckets.save(&b, doc)?;
    }
    let processed = lines.len();
    let succeeded = processed - failed.len();
    tracing::info!(bucket = %id, processed, succeeded, failed = failed.len(), "bucket batch");
    let status = if processed > 0 && succeeded == 0 {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    Ok(json_response(
        status,
        &json!({"success": failed.is_empty(), "processed": processed, "succeeded": succeeded, "failed": failed}),
    ))
}
