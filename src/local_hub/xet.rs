//! Xet: the token endpoints of the Hub API, and the public CAS origin. The CAS itself is xet-client's
//! `LocalServer` on an internal port; the public origin in front of it checks the tokens we issued,
//! is where the `cas` fault class and its step classes apply (see `faults::cas_step`), and reads every uploaded shard to learn which sha256 each Xet file
//! hash stands for (the commit only names the sha256). Batch reconstructions are checked and
//! rewritten for the CAS in `xet_batch`.

use std::io::Cursor;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::json;
use xet_core_structures::metadata_shard::streaming_shard::MDBMinimalShard;

use super::auth::Caller;
use super::error::{HubError, HubResult};
use super::http_util::{json_response, read_body, set_header};
use super::names::RepoId;
use super::server::Req;
use super::state::HubState;
use super::store::XetBinding;
use super::xet_batch;

/// Largest shard accepted (real shards of one upload are a few MiB).
const MAX_SHARD: usize = 256 << 20;

pub async fn token(state: &HubState, req: Req, id: RepoId, rev: String, write: bool) -> HubResult<Response> {
    if write {
        state.writable_repo(&id, req.caller.as_ref())?;
        if !state.xet_uploads.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(HubError::EntryNotFound("This Hub does not store uploads in Xet".into()));
        }
    } else {
        let repo = state.readable_repo(&id, req.caller.as_ref())?;
        state.store.resolve(&repo, &rev)?;
    }
    Ok(token_response(state, write, req.caller.as_ref()))
}

/// A fresh CAS token as the Hub hands it out: in the JSON body (hf_xet, hf-hub, hf-mount read it)
/// and in `X-Xet-*` headers (Python's downloader reads only those). Shared by repos and buckets.
pub fn token_response(state: &HubState, write: bool, caller: Option<&Caller>) -> Response {
    let (token, exp) = state.issue_cas_token(write, caller.map(|c| c.user.as_str()));
    let mut resp = json_response(
        StatusCode::OK,
        &json!({"casUrl": state.cas_url, "accessToken": token, "exp": exp}),
    );
    let h = resp.headers_mut();
    set_header(h, "x-xet-cas-url", &state.cas_url);
    set_header(h, "x-xet-access-token", &token);
    set_header(h, "x-xet-token-expiration", &exp.to_string());
    resp
}

/// Reads the file sections of a shard: Xet file hash, sha256 (metadata extension) and size.
pub fn shard_bindings(shard: &[u8]) -> HubResult<Vec<XetBinding>> {
    let parsed = MDBMinimalShard::from_reader(&mut Cursor::new(shard), true, false)
        .map_err(|e| HubError::bad_request(format!("Invalid shard: {e}")))?;
    let mut out = Vec::new();
    for i in 0..parsed.num_files() {
        let Some(f) = parsed.file(i) else { continue };
        let Some(ext) = f.metadata_ext() else {
            continue;
        };
        let size: u64 = (0..f.num_entries())
            .map(|j| f.entry(j).unpacked_segment_bytes as u64)
            .sum();
        out.push(XetBinding {
            sha256: ext.sha256.hex(),
            xet_hash: f.file_hash().hex(),
            size,
        });
    }
    Ok(out)
}

/// Paths of the CAS that need no bearer token: presigned fetch URLs and grant uploads.
pub fn is_presigned(path: &str) -> bool {
    path.starts_with("/v1/fetch_term") || path.starts_with("/simulation/xorb-uploads/")
}

fn needs_write(method: &axum::http::Method, path: &str) -> bool {
    *method == axum::http::Method::POST && !path.starts_with("/v1/reconstructions") && path != "/v1/telemetry"
}

pub async fn cas_front(State(state): State<Arc<HubState>>, req: Request) -> Response {
    match cas_proxy(&state, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// Serves a presigned `fetch_term` read straight from the xorb file on disk. The embedded CAS reads
/// the whole xorb (up to 64 MiB) into memory for every range it serves, which would make it the
/// bottleneck of every Xet read; this path streams just the range. Shapes it does not handle (several
/// ranges in one answer, unknown xorbs, bad ranges) return `None` and go to the CAS itself.
async fn fetch_term_fast(state: &HubState, query: &str, headers: &HeaderMap) -> Option<Response> {
    let term = query.split('&').find_map(|kv| kv.strip_prefix("term="))?;
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(term).ok()?;
    let payload = String::from_utf8(payload).ok()?;
    let (hash, ranges) = match payload.split_once(':') {
        Some((h, r)) => (h.to_string(), Some(r.to_string())),
        None => (payload, None),
    };
    if !super::store::is_sha256(&hash) {
        return None;
    }
    let path = state.store.cas_dir().join("xorbs").join(format!("default.{hash}"));
    let size = tokio::fs::metadata(&path).await.ok()?.len();
    let header_range = super::http_util::parse_range(headers, size).ok()?;
    let (status, start, len) = match (ranges, header_range) {
        // V2 term: a single-range Range header wins (as a CDN would); else the one embedded range.
        (Some(_), Some(r)) => (StatusCode::PARTIAL_CONTENT, r.start, r.len()),
        (Some(list), None) => {
            let mut it = list.split(',').filter(|s| !s.is_empty());
            let (a, b) = it.next()?.split_once('-')?;
            if it.next().is_some() {
                return None;
            }
            let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
            if a >= b || b > size {
                return None;
            }
            (StatusCode::PARTIAL_CONTENT, a, b - a)
        }
        // V1 term: the Range header selects the bytes; the CAS answers 200 either way.
        (None, Some(r)) => (StatusCode::OK, r.start, r.len()),
        (None, None) => (StatusCode::OK, 0, size),
    };
    let body = super::http_util::file_range_body(&path, start, len).await.ok()?;
    let mut headers = HeaderMap::new();
    set_header(&mut headers, "content-length", &len.to_string());
    set_header(&mut headers, "content-type", "application/octet-stream");
    Some(super::http_util::with_headers(status, headers, body))
}

async fn cas_proxy(state: &HubState, req: Request) -> HubResult<Response> {
    if req.method() == axum::http::Method::GET
        && req.uri().path() == "/v1/fetch_term"
        && let Some(resp) = fetch_term_fast(state, req.uri().query().unwrap_or(""), req.headers()).await
    {
        return Ok(resp);
    }
    // API routes live under this data dir's prefix; presigned URLs the CAS builds itself do not.
    let raw_path = req.uri().path();
    let path = match raw_path.strip_prefix(state.cas_prefix.as_str()) {
        Some(rest) if rest.starts_with('/') => rest.to_string(),
        _ if is_presigned(raw_path) || raw_path == "/health" => raw_path.to_string(),
        _ => return Err(HubError::RouteNotFound),
    };
    let mut path_and_query = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.clone(),
    };
    let uri_query = req.uri().query().map(str::to_string);
    // The simulator's control routes must not be reachable from outside.
    if path.starts_with("/simulation/") && !is_presigned(&path) {
        return Err(HubError::RouteNotFound);
    }
    if !is_presigned(&path) && path != "/health" {
        let token = req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(HubError::BadToken)?;
        let grant = state.cas_grant(token).ok_or(HubError::BadToken)?;
        if needs_write(req.method(), &path) && !grant.write {
            return Err(HubError::Forbidden("This CAS token is read-only".to_string()));
        }
    }
    let mut method = req.method().clone();
    let batch = xet_batch::is_batch(&method, &path);
    let host = req.headers().get(axum::http::header::HOST).cloned();
    let mut headers = HeaderMap::new();
    for (k, v) in req.headers() {
        if !matches!(
            k.as_str(),
            "host" | "connection" | "content-length" | "transfer-encoding" | "authorization"
        ) {
            headers.insert(k.clone(), v.clone());
        }
    }
    // The CAS builds fetch URLs from Host: keep ours so they point at this public origin.
    if let Some(h) = host {
        headers.insert(axum::http::header::HOST, h);
    }
    let is_shard = method == axum::http::Method::POST && (path == "/v1/shards" || path == "/v2/shards");
    let mut body = req.into_body();
    if batch {
        // Both batch forms become the embedded CAS's GET form, once the keys are checked.
        let ids = if method == axum::http::Method::POST {
            xet_batch::keys_from_body(&read_body(body, xet_batch::MAX_BATCH_BODY).await?)?
        } else {
            xet_batch::keys_from_query(uri_query.as_deref().unwrap_or(""))?
        };
        tracing::debug!(files = ids.len(), "batch reconstruction");
        path_and_query = xet_batch::upstream_path(&ids);
        method = axum::http::Method::GET;
        headers.remove(axum::http::header::CONTENT_TYPE);
        body = Body::empty();
    }
    let url = format!("{}{path_and_query}", state.cas_internal);
    let mut builder = state.http.request(method, &url).headers(headers);
    let shard = if is_shard {
        let b = read_body(body, MAX_SHARD).await?;
        builder = builder.body(b.clone());
        Some(b)
    } else {
        builder = builder.body(reqwest::Body::wrap_stream(body.into_data_stream()));
        None
    };
    let upstream = builder.send().await.map_err(|e| HubError::Upstream(e.to_string()))?;
    let status = StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut out_headers = HeaderMap::new();
    for (k, v) in upstream.headers() {
        if !matches!(k.as_str(), "connection" | "transfer-encoding" | "keep-alive") {
            out_headers.append(k.clone(), v.clone());
        }
    }
    if let Some(shard) = shard {
        // Shard answers are small: read them whole, and bind only when the CAS accepted the shard.
        let body = upstream.bytes().await.map_err(|e| HubError::Upstream(e.to_string()))?;
        let failed = !status.is_success() || String::from_utf8_lossy(&body).contains("\"error\"");
        if !failed {
            for b in shard_bindings(&shard)? {
                tracing::debug!(sha256 = %b.sha256, xet = %b.xet_hash, size = b.size, "xet file bound");
                state.store.add_xet_binding(b)?;
            }
        }
        return Ok(super::http_util::with_headers(status, out_headers, Body::from(body)));
    }
    Ok(super::http_util::with_headers(
        status,
        out_headers,
        Body::from_stream(upstream.bytes_stream()),
    ))
}
