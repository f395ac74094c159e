//! Downloads. `/resolve/` on the API origin answers regular files itself and redirects LFS and Xet
//! files to the blob origin (a second port, so clients treat it as a different origin, as they do
//! the Hub's CDN). The blob origin serves presigned URLs with ranges and conditional requests.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use xet_client::cas_types::FileRange;
use xet_core_structures::merklehash::MerkleHash;

use super::error::{HubError, HubResult};
use super::http_util::{
    ContentMeta, content_head, http_date, json_response, not_modified, serve_file, set_header, with_headers,
};
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

/// Piece size when streaming a Xet reconstruction: bounds the memory of one download.
const XET_PIECE: u64 = 16 << 20;

async fn xet_download(state: &HubState, req: Req, key: &str) -> HubResult<Response> {
    let hash = MerkleHash::from_hex(key).map_err(|_| HubError::bad_request("Invalid Xet hash"))?;
    let size = state
        .cas_client
        .get_file_size(&hash)
        .await
        .map_err(|_| HubError::EntryNotFound("Entry not found".to_string()))?;
    let mut extra = HeaderMap::new();
    let meta = ContentMeta {
        size,
        etag: key,
        last_modified: None,
    };
    let (status, range) = content_head(&req.headers, &meta, &mut extra)?;
    extra.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    let Some(range) = range.filter(|_| req.method == Method::GET) else {
        return Ok(with_headers(status, extra, Body::empty()));
    };
    let client = state.cas_client.clone();
    let stream = futures::stream::unfold(range.start, move |pos| {
        let client = client.clone();
        async move {
            if pos > range.end {
                return None;
            }
            let end = (pos + XET_PIECE).min(range.end + 1);
            let r = client
                .get_file_data(&hash, Some(FileRange::new(pos, end)))
                .await
                .map_err(|e| std::io::Error::other(e.to_string()));
            Some((r, end))
        }
    });
    Ok(with_headers(status, extra, Body::from_stream(stream)))
}
