//! Downloads. `/resolve/` on the API origin answers regular files itself and redirects LFS and Xet
//! files to the blob origin (a second port, so clients treat it as a different origin, as they do
//! the Hub's CDN). The blob origin serves presigned URLs with ranges and conditional requests.

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use xet_core_structures::merklehash::MerkleHash;

use super::error::{HubError, HubResult};
use super::http_util::{ContentMeta, http_date, json_response, not_modified, serve_file, set_header, with_headers};
use super::model::FileEntry;
use super::names::RepoId;
use super::server::Req;
use super::state::HubState;
use super::store::is_sha256;

pub async fn resolve(state: &HubState, req: Req, id: RepoId, rev: String, path: String) -> HubResult<Response> {
    if req.method != Method::GET && req.method != Method::HEAD {
        return Err(HubError::MethodNotAllowed);
    }
    let repo = state.readable_repo(&id, req.caller.as_ref())?;
    let resolved = state.store.resolve(&repo, &rev)?;
    let commit = state.store.commit(&repo, &resolved.commit)?;
    let mut extra = HeaderMap::new();
    set_header(&mut extra, "x-repo-commit", &commit.id);
    let Some(entry) = commit.files.get(&path).cloned() else {
        let mut resp = HubError::EntryNotFound("Entry not found".to_string()).into_response();
        resp.headers_mut().extend(extra);
        return Ok(resp);
    };
    let last_modified = http_date(&commit.date);
    if let Some(lm) = &last_modified {
        set_header(&mut extra, "last-modified", lm);
    }
    let Some(lfs) = entry.lfs.clone() else {
        let meta = ContentMeta {
            size: entry.size,
            etag: &entry.oid,
            last_modified: last_modified.as_deref(),
        };
        return serve_file(
            &req.method,
            &req.headers,
            &state.store.git_object_path(&entry.oid),
            meta,
            extra,
        )
        .await;
    };
    set_header(&mut extra, "etag", &format!("\"{}\"", lfs.sha256));
    set_header(&mut extra, "x-linked-etag", &format!("\"{}\"", lfs.sha256));
    set_header(&mut extra, "x-linked-size", &entry.size.to_string());
    set_header(&mut extra, "accept-ranges", "bytes");
    if let Some(xet) = &entry.xet_hash {
        set_header(&mut extra, "x-xet-hash", xet);
        let refresh = format!("{}{}/xet-read-token/{}", req.base, id.api_path(), commit.id);
        let recon = format!("{}/v1/reconstructions/{xet}", state.cas_url);
        set_header(
            &mut extra,
            "link",
            &format!("<{refresh}>; rel=\"xet-auth\", <{recon}>; rel=\"xet-reconstruction-info\""),
        );
        set_header(
            &mut extra,
            "x-xet-refresh-route",
            &format!("{}/xet-read-token/{}", id.api_path(), commit.id),
        );
        let wants_fileinfo = req
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/vnd.xet-fileinfo+json"));
        if wants_fileinfo {
            let mut resp = json_response(
                StatusCode::OK,
                &json!({"hash": xet, "etag": lfs.sha256, "size": entry.size,
                        "refreshUrl": refresh, "reconstructionUrl": recon}),
            );
            resp.headers_mut().extend(extra);
            return Ok(resp);
        }
    }
    if not_modified(&req.headers, &lfs.sha256) {
        return Ok(with_headers(StatusCode::NOT_MODIFIED, extra, Body::empty()));
    }
    let location = blob_location(state, &entry)?;
    set_header(&mut extra, "location", &location);
    set_header(&mut extra, "content-length", "0");
    Ok(with_headers(StatusCode::FOUND, extra, Body::empty()))
}

/// Presigned blob-origin URL for an LFS-class file: the plain-LFS object when we hold one,
/// otherwise the Xet reconstruction of it.
pub fn blob_location(state: &HubState, entry: &FileEntry) -> HubResult<String> {
    let lfs = entry
        .lfs
        .as_ref()
        .ok_or_else(|| HubError::internal("not an LFS entry"))?;
    if state.store.has_lfs_object(&lfs.sha256) {
        return Ok(state.presign(&format!("/lfs/{}", lfs.sha256)));
    }
    if let Some(x) = &entry.xet_hash {
        return Ok(state.presign(&format!("/xet/{x}")));
    }
    Err(HubError::internal(format!(
        "content of LFS object {} is missing",
        lfs.sha256
    )))
}

/// GET/HEAD on the blob origin: `/lfs/{sha256}` or `/xet/{hash}`, presigned.
pub async fn blob_download(state: &HubState, req: Req, kind: &str, key: &str) -> HubResult<Response> {
    if req.method != Method::GET && req.method != Method::HEAD {
        return Err(HubError::MethodNotAllowed);
    }
    let signed = format!("/{kind}/{key}");
    state.check_signature(
        &signed,
        super::http_util::query_str(&req.query, "exp"),
        super::http_util::query_str(&req.query, "sig"),
    )?;
    match kind {
        "lfs" if is_sha256(key) => {
            let path = state.store.lfs_object_path(key);
            let size = std::fs::metadata(&path)
                .map_err(|_| HubError::EntryNotFound("Entry not found".to_string()))?
                .len();
            let meta = ContentMeta {
                size,
                etag: key,
                last_modified: None,
            };
            serve_file(&req.method, &req.headers, &path, meta, HeaderMap::new()).await
        }
        "xet" => xet_download(state, req, key).await,
        _ => Err(HubError::RouteNotFound),
    }
}

/// Serves a Xet file to plain HTTP clients. The file is reconstructed once, term by term, into
/// `objects/xet/{hash}` (the embedded CAS rebuilds a whole file in memory for every range it is asked
/// for), then every range is a plain file read. Reconstructions are serialised so two requests for
/// one file do the work once.
async fn xet_download(state: &HubState, req: Req, key: &str) -> HubResult<Response> {
    let hash = MerkleHash::from_hex(key).map_err(|_| HubError::bad_request("Invalid Xet hash"))?;
    let path = state.store.xet_object_path(&hash.hex());
    if !path.is_file() {
        let _one_at_a_time = state.xet_materialize.lock().await;
        if !path.is_file() {
            materialize_xet(state, &hash, &path).await?;
        }
    }
    let size = std::fs::metadata(&path).map_err(HubError::internal)?.len();
    let meta = ContentMeta {
        size,
        etag: key,
        last_modified: None,
    };
    serve_file(&req.method, &req.headers, &path, meta, HeaderMap::new()).await
}

/// The file's reconstruction from the embedded CAS.
async fn reconstruction(
    state: &HubState,
    hash: &MerkleHash,
) -> HubResult<xet_client::cas_types::QueryReconstructionResponse> {
    match state.cas_client.get_reconstruction_v1(hash, None).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(HubError::EntryNotFound("Entry not found".to_string())),
        Err(e) => Err(HubError::internal(format!("reconstructing Xet file {hash}: {e}"))),
    }
}

async fn materialize_xet(state: &HubState, hash: &MerkleHash, dest: &std::path::Path) -> HubResult<()> {
    let recon = reconstruction(state, hash).await?;
    let tmp = tempfile::NamedTempFile::new_in(state.store.tmp_dir()).map_err(HubError::internal)?;
    let mut out = tokio::fs::File::from_std(tmp.reopen().map_err(HubError::internal)?);
    for term in &recon.terms {
        let xorb: MerkleHash = (&term.hash).into();
        let mut parts = state
            .cas_client
            .get_xorb_ranges(&xorb, vec![(term.range.start, term.range.end)])
            .await
            .map_err(|e| HubError::internal(format!("reading xorb {xorb}: {e}")))?;
        let data = parts.pop().ok_or_else(|| HubError::internal("empty xorb range"))?;
        tokio::io::AsyncWriteExt::write_all(&mut out, &data)
            .await
            .map_err(HubError::internal)?;
    }
    // Wait for tokio's in-flight writes before syncing: the file must be whole before the rename
    // makes it visible to other requests.
    tokio::io::AsyncWriteExt::flush(&mut out)
        .await
        .map_err(HubError::internal)?;
    out.sync_all().await.map_err(HubError::internal)?;
    drop(out);
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(HubError::internal)?;
    }
    tmp.persist(dest).map_err(|e| HubError::internal(e.error))?;
    Ok(())
}
