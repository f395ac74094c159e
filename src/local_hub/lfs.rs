//! The Git LFS batch API with the Hub's extensions (basic and multipart transfers, verify, and the
//! `xet` transfer), plus the presigned upload endpoints of the blob origin.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::error::{HubError, HubResult};
use super::http_util::{json_response, query_str, read_body, set_header, with_headers};
use super::names::RepoId;
use super::resolve::blob_location;
use super::server::Req;
use super::state::HubState;
use super::store::is_sha256;

/// Objects larger than this are offered a multipart upload when the client supports it.
pub const MULTIPART_THRESHOLD: u64 = 16 << 20;
/// Part size of multipart uploads.
pub const PART_SIZE: u64 = 8 << 20;
/// Largest object accepted (the Hub's own limit is 50 GB per file).
pub const MAX_OBJECT: u64 = 50_000_000_000;

#[derive(Deserialize)]
struct BatchObject {
    oid: String,
    size: u64,
}

#[derive(Deserialize)]
struct BatchBody {
    operation: String,
    #[serde(default)]
    transfers: Vec<String>,
    objects: Vec<BatchObject>,
}

fn lfs_json(status: StatusCode, v: &Value) -> Response {
    let mut r = json_response(status, v);
    set_header(r.headers_mut(), "content-type", "application/vnd.git-lfs+json");
    r
}

pub async fn batch(state: &HubState, req: Req, id: RepoId) -> HubResult<Response> {
    let body = read_body(req.body, 16 << 20).await?;
    let b: BatchBody =
        serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid LFS batch body: {e}")))?;
    let upload = match b.operation.as_str() {
        "upload" => true,
        "download" => false,
        other => {
            return Err(HubError::bad_request(format!("Unknown LFS operation {other:?}")));
        }
    };
    if upload {
        state.writable_repo(&id, req.caller.as_ref())?;
    } else {
        state.readable_repo(&id, req.caller.as_ref())?;
    }
    let offers = |t: &str| b.transfers.iter().any(|x| x == t);
    let xet = state.xet_uploads.load(std::sync::atomic::Ordering::Relaxed);
    let transfer = if upload && offers("xet") && xet {
        "xet"
    } else if upload && offers("multipart") {
        "multipart"
    } else {
        "basic"
    };
    let mut objects = Vec::new();
    for o in &b.objects {
        if !is_sha256(&o.oid) {
            objects.push(json!({"oid": o.oid, "size": o.size, "error": {"code": 422, "message": "Invalid oid"}}));
            continue;
        }
        if o.size > MAX_OBJECT {
            objects.push(json!({"oid": o.oid, "size": o.size, "error": {"code": 422, "message": "Object too large"}}));
            continue;
        }
        let present = state.store.has_lfs_object(&o.oid) || state.store.xet_binding(&o.oid).is_some();
        let mut obj = json!({"oid": o.oid, "size": o.size, "authenticated": true});
        if upload {
            if !present {
                let user = req.caller.as_ref().map(|c| c.user.as_str());
                obj["actions"] = upload_actions(state, &req.base, &id, transfer, &o.oid, o.size, user);
            }
        } else if present {
            let entry =
                super::model::FileEntry::lfs(&o.oid, o.size, state.store.xet_binding(&o.oid).map(|b| b.xet_hash));
            obj["actions"] = json!({"download": {"href": blob_location(state, &entry)?, "header": {}}});
        } else {
            obj["error"] = json!({"code": 404, "message": "Object does not exist"});
        }
        objects.push(obj);
    }
    Ok(lfs_json(
        StatusCode::OK,
        &json!({"transfer": transfer, "objects": objects, "hash_algo": "sha256"}),
    ))
}

fn upload_actions(
    state: &HubState,
    base: &str,
    id: &RepoId,
    transfer: &str,
    oid: &str,
    size: u64,
    user: Option<&str>,
) -> Value {
    let verify = json!({"href": format!("{base}/{}.git/info/lfs/objects/verify", id.web_path()), "header": {}});
    match transfer {
        "xet" => {
            let (token, exp) = state.issue_cas_token(true, user);
            json!({"upload": {
                "href": format!("{base}{}/xet-write-token/main", id.api_path()),
                "header": {
                    "X-Xet-Cas-Url": state.cas_url,
                    "X-Xet-Access-Token": token,
                    "X-Xet-Token-Expiration": exp.to_string(),
                    "X-Xet-Session-Id": super::state::random_hex(8),
                }
            }, "verify": verify})
        }
        "multipart" if size > MULTIPART_THRESHOLD => {
            let parts = size.div_ceil(PART_SIZE);
            let mut header = serde_json::Map::new();
            header.insert("chunk_size".to_string(), json!(PART_SIZE.to_string()));
            for n in 1..=parts {
                header.insert(
                    format!("{n:05}"),
                    json!(state.presign(&format!("/upload/{oid}/{size}/part/{n}"))),
                );
            }
            json!({"upload": {"href": state.presign(&format!("/upload/{oid}/{size}/complete")), "header": header},
                   "verify": verify})
        }
        _ => {
            json!({"upload": {"href": state.presign(&format!("/upload/{oid}/{size}")), "header": {}},
                    "verify": verify})
        }
    }
}

pub async fn verify(state: &HubState, req: Req, id: RepoId) -> HubResult<Response> {
    state.writable_repo(&id, req.caller.as_ref())?;
    let body = read_body(req.body, 1 << 20).await?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
    let oid = v["oid"].as_str().unwrap_or("");
    let size = v["size"].as_u64();
    if !state.store.has_lfs_object(oid) {
        return Err(HubError::EntryNotFound(format!("LFS object {oid} was not uploaded")));
    }
    let actual = std::fs::metadata(state.store.lfs_object_path(oid))
        .map(|m| m.len())
        .unwrap_or(0);
    if size.is_some_and(|s| s != actual) {
        return Err(HubError::bad_request(format!("LFS object {oid} has size {actual}")));
    }
    Ok(lfs_json(StatusCode::OK, &json!({"success": true})))
}

/// Streams a body into a temp file, hashing it; returns the file, its sha256 and length.
async fn spool(state: &HubState, body: axum::body::Body, limit: u64) -> HubResult<(tempfile::TempPath, String, u64)> {
    let tmp = tempfile::NamedTempFile::new_in(state.store.tmp_dir()).map_err(HubError::internal)?;
    let (file, path) = tmp.into_parts();
    let mut f = tokio::fs::File::from_std(file);
    let mut h = Sha256::new();
    let mut n = 0u64;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| HubError::bad_request(format!("reading upload: {e}")))?;
        n += chunk.len() as u64;
        if n > limit {
            return Err(HubError::PayloadTooLarge { limit: limit as usize });
        }
        h.update(&chunk);
        f.write_all(&chunk).await.map_err(HubError::internal)?;
    }
    f.flush().await.map_err(HubError::internal)?;
    f.sync_all().await.map_err(HubError::internal)?;
    Ok((path, hex::encode(h.finalize()), n))
}

fn persist_object(state: &HubState, tmp: tempfile::TempPath, oid: &str) -> HubResult<()> {
    let dest = state.store.lfs_object_path(oid);
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(HubError::internal)?;
    }
    tmp.persist(&dest).map_err(|e| HubError::internal(e.error))?;
    Ok(())
}

/// Blob-origin uploads: `PUT /upload/{oid}/{size}` (basic), `PUT /upload/{oid}/{size}/part/{n}`
/// and `POST /upload/{oid}/{size}/complete` (multipart). Presigned, so no Authorization.
pub async fn blob_upload(state: &HubState, req: Req, segs: &[&str]) -> HubResult<Response> {
    let signed = format!("/{}", segs.join("/"));
    state.check_signature(&signed, query_str(&req.query, "exp"), query_str(&req.query, "sig"))?;
    let (oid, size) = match segs {
        ["upload", oid, size, ..] => (
            oid.to_string(),
            size.parse::<u64>().map_err(|_| HubError::RouteNotFound)?,
        ),
        _ => return Err(HubError::RouteNotFound),
    };
    match &segs[3..] {
        [] => {
            let (tmp, sha, n) = spool(state, req.body, size).await?;
            if sha != oid || n != size {
                return Err(HubError::bad_request(format!(
                    "Uploaded content does not match: sha256 {sha}, {n} bytes; expected {oid}, {size} bytes"
                )));
            }
            persist_object(state, tmp, &oid)?;
            Ok(with_headers(
                StatusCode::OK,
                HeaderMap::new(),
                axum::body::Body::empty(),
            ))
        }
        ["part", n] => {
            let n: u64 = n.parse().map_err(|_| HubError::RouteNotFound)?;
            let (tmp, sha, len) = spool(state, req.body, PART_SIZE).await?;
            let part = state.store.tmp_dir().join(format!("{oid}.{n}.part"));
            tmp.persist(&part).map_err(|e| HubError::internal(e.error))?;
            let mut h = HeaderMap::new();
            set_header(&mut h, "etag", &format!("\"{}-{len}\"", &sha[..16]));
            Ok(with_headers(StatusCode::OK, h, axum::body::Body::empty()))
        }
        ["complete"] => {
            let body = read_body(req.body, 1 << 20).await?;
            let v: Value =
                serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
            let parts = v["parts"].as_array().map(|p| p.len()).unwrap_or(0) as u64;
            if parts != size.div_ceil(PART_SIZE) {
                return Err(HubError::bad_request(format!(
                    "Expected {} parts, got {parts}",
                    size.div_ceil(PART_SIZE)
                )));
            }
            let tmp = tempfile::NamedTempFile::new_in(state.store.tmp_dir()).map_err(HubError::internal)?;
            let mut out = tmp.reopen().map_err(HubError::internal)?;
            let mut h = Sha256::new();
            let mut total = 0u64;
            for n in 1..=parts {
                let part = state.store.tmp_dir().join(format!("{oid}.{n}.part"));
                let data =
                    std::fs::read(&part).map_err(|_| HubError::bad_request(format!("Part {n} was not uploaded")))?;
                h.update(&data);
                total += data.len() as u64;
                std::io::Write::write_all(&mut out, &data).map_err(HubError::internal)?;
            }
            out.sync_all().map_err(HubError::internal)?;
            let sha = hex::encode(h.finalize());
            if sha != oid || total != size {
                return Err(HubError::bad_request(format!(
                    "Assembled object does not match: sha256 {sha}, {total} bytes"
                )));
            }
            persist_object(state, tmp.into_temp_path(), &oid)?;
            for n in 1..=parts {
                let _ = std::fs::remove_file(state.store.tmp_dir().join(format!("{oid}.{n}.part")));
            }
            Ok(json_response(StatusCode::OK, &json!({"success": true})))
        }
        _ => Err(HubError::RouteNotFound),
    }
}
