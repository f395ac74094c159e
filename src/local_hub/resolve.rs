//! Downloads. `/resolve/` on the API origin answers regular files itself and redirects LFS and Xet
//! files to the blob origin (a second port, so clients treat it as a different origin, as they do
//! the Hub's CDN). The blob origin serves presigned URLs with ranges and conditional requests.

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
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

/// Serves a Xet file to plain HTTP clients, as the Hub's CAS bridge does: a range is rebuilt from
/// the terms that cover it and streamed term by term, so the first byte of a range costs the same
/// on a fresh Hub as on a warm one. (Materialising the whole file on first download made the first
/// small range of a large file wait for all of it: about 1 s per 512 MiB here, longer than a
/// client's read deadline for files of tens of GB.)
async fn xet_download(state: &HubState, req: Req, key: &str) -> HubResult<Response> {
    let hash = MerkleHash::from_hex(key).map_err(|_| HubError::bad_request("Invalid Xet hash"))?;
    let size = file_size(state, &hash).await?;
    let meta = ContentMeta {
        size,
        etag: key,
        last_modified: None,
    };
    let mut out = HeaderMap::new();
    let (status, range) = content_head(&req.headers, &meta, &mut out)?;
    set_header(&mut out, "content-type", "application/octet-stream");
    let Some(range) = range.filter(|_| req.method != Method::HEAD) else {
        return Ok(with_headers(status, out, Body::empty()));
    };
    let recon = reconstruction(state, &hash, range.start, range.end + 1).await?;
    Ok(with_headers(status, out, xet_range_body(state, recon, range.len())))
}

/// Size of a Xet file. Right after an upload the embedded CAS may not know the file for a moment,
/// so a miss is retried for up to about 5 s (the presigned URL exists only for committed files).
async fn file_size(state: &HubState, hash: &MerkleHash) -> HubResult<u64> {
    for _ in 0..50 {
        if let Ok(n) = state.cas_client.get_file_size(hash).await {
            return Ok(n);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(HubError::EntryNotFound("Entry not found".to_string()))
}

/// The reconstruction of bytes `[start, end)` of a Xet file from the embedded CAS.
async fn reconstruction(
    state: &HubState,
    hash: &MerkleHash,
    start: u64,
    end: u64,
) -> HubResult<xet_client::cas_types::QueryReconstructionResponse> {
    let range = xet_client::cas_types::FileRange::new(start, end);
    match state.cas_client.get_reconstruction_v1(hash, Some(range)).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(HubError::EntryNotFound("Entry not found".to_string())),
        Err(e) => Err(HubError::internal(format!("reconstructing Xet file {hash}: {e}"))),
    }
}

/// A body of `len` bytes from a range's reconstruction: each term's chunks are decompressed when
/// the body gets to them (one term in memory at a time), the first term less the bytes before the
/// range. A term that cannot be read ends the body early, which the client sees as a short body.
fn xet_range_body(state: &HubState, recon: xet_client::cas_types::QueryReconstructionResponse, len: u64) -> Body {
    let cas = state.cas_client.clone();
    let terms = recon.terms.into_iter();
    let skip = recon.offset_into_first_range;
    let stream = futures::stream::unfold((terms, skip, len), move |(mut terms, skip, left)| {
        let cas = cas.clone();
        async move {
            if left == 0 {
                return None;
            }
            let term = terms.next()?;
            let xorb: MerkleHash = (&term.hash).into();
            let data = match cas
                .get_xorb_ranges(&xorb, vec![(term.range.start, term.range.end)])
                .await
                .ok()
                .and_then(|mut parts| parts.pop())
            {
                Some(d) => d,
                None => {
                    tracing::warn!(%xorb, "local hub: a xorb range of a download is unreadable");
                    return Some((Err(std::io::Error::other("xorb range unreadable")), (terms, 0, 0)));
                }
            };
            let from = (skip as usize).min(data.len());
            let to = (from as u64 + left).min(data.len() as u64) as usize;
            let piece = data.slice(from..to);
            let left = left - piece.len() as u64;
            Some((Ok::<_, std::io::Error>(piece), (terms, 0, left)))
        }
    });
    Body::from_stream(stream)
}
