//! The bucket routes of the Hub API, except the batch endpoint (`bucket_batch`): create, info,
//! list, delete, move, settings, tree, paths-info, the Xet token endpoints and downloads
//! (`/buckets/{id}/resolve/{path}`).
//!
//! Access follows the repo rules (`auth`): public buckets are readable by anyone, private ones only
//! by their namespace's users, and writes need a write token of the namespace (or a fine-grained
//! one with `repo.write` on it). A bucket the caller
//! may not see is reported missing (401 anonymous, 404 with a token) with `X-Error-Code:
//! RepoNotFound`, which clients turn into their bucket-not-found error on `/api/buckets/` URLs.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use super::auth::Caller;
use super::bucket_store::{Bucket, BucketDoc, BucketFile, BucketId};
use super::error::{HubError, HubResult};
use super::http_util::{
    http_date, json_response, not_modified, query_flag, query_str, read_body, set_header, with_headers,
};
use super::names::encode_segment;
use super::routes::BucketRoute;
use super::server::Req;
use super::state::HubState;

/// Page size of bucket tree listings and of bucket lists, as for repo trees.
pub const TREE_PAGE: usize = 1000;

pub async fn dispatch(state: &HubState, req: Req, route: BucketRoute) -> HubResult<Response> {
    let m = req.method.clone();
    match route {
        BucketRoute::List { namespace } if m == Method::GET => list(state, req, namespace).await,
        BucketRoute::Bucket { id } if m == Method::GET => info(state, req, id).await,
        BucketRoute::Bucket { id } if m == Method::POST => create(state, req, id).await,
        BucketRoute::Bucket { id } if m == Method::DELETE => delete(state, req, id).await,
        BucketRoute::Settings { id } if m == Method::PUT => settings(state, req, id).await,
        BucketRoute::Tree { id, prefix } if m == Method::GET => tree(state, req, id, prefix).await,
        BucketRoute::PathsInfo { id } if m == Method::POST => paths_info(state, req, id).await,
        BucketRoute::Batch { id } if m == Method::POST => super::bucket_batch::batch(state, req, id).await,
        BucketRoute::XetToken { id, write } if m == Method::GET => xet_token(state, req, id, write).await,
        BucketRoute::Resolve { id, path } => resolve(state, req, id, path).await,
        _ => Err(HubError::MethodNotAllowed),
    }
}

/// Whether `caller` may see the private buckets of `namespace`: its user's, through a token that
/// reads there (a fine-grained one needs `repo.content.read` or `repo.write` on the namespace).
fn owns(caller: &Caller, namespace: &str) -> bool {
    (caller.admin || caller.user == namespace) && caller.token_reads(namespace, None)
}

/// The bucket if it exists and `caller` may read it.
pub fn readable(state: &HubState, id: &BucketId, caller: Option<&Caller>) -> HubResult<Arc<Bucket>> {
    let missing = || HubError::BucketNotFound {
        anonymous: caller.is_none(),
    };
    let b = state.buckets.get(id).ok_or_else(missing)?;
    if b.doc().private && !caller.is_some_and(|c| owns(c, &id.namespace)) {
        return Err(missing());
    }
    Ok(b)
}

/// Whether `caller` may write under `namespace` (create there, or write its buckets).
fn check_namespace_write(caller: Option<&Caller>, namespace: &str) -> HubResult<()> {
    match caller {
        None => Err(HubError::BadToken),
        Some(c) if c.grants.is_none() && !c.write => Err(HubError::Forbidden(
            "You have read access but not the required permissions for this operation: this token is read-only"
                .to_string(),
        )),
        Some(c) if !c.token_writes(namespace, None) => Err(HubError::Forbidden(format!(
            "This fine-grained token does not have the repo.write permission on {namespace}"
        ))),
        Some(c) if !owns(c, namespace) => Err(HubError::Forbidden(format!(
            "You don't have the rights to write to buckets of {namespace}"
        ))),
        Some(_) => Ok(()),
    }
}

/// The bucket if it exists and `caller` may write it.
pub fn writable(state: &HubState, id: &BucketId, caller: Option<&Caller>) -> HubResult<Arc<Bucket>> {
    let b = readable(state, id, caller)?;
    if caller.is_none() {
        return Err(HubError::BucketNotFound { anonymous: true });
    }
    check_namespace_write(caller, &id.namespace)?;
    Ok(b)
}

/// `me` stands for the caller's own namespace, as on the Hub.
fn resolve_me(namespace: &str, caller: Option<&Caller>) -> HubResult<String> {
    if namespace == "me" {
        return caller.map(|c| c.user.clone()).ok_or(HubError::BadToken);
    }
    Ok(namespace.to_string())
}

pub fn info_json(id: &BucketId, doc: &BucketDoc) -> Value {
    json!({
        "id": id.id(),
        "author": id.namespace,
        "private": doc.private,
        "createdAt": doc.created_at,
        "updatedAt": doc.updated_at,
        "size": doc.size(),
        "totalFiles": doc.files.len(),
    })
}

/// `mtime` (ms since the epoch) as ISO 8601 with milliseconds, as the Hub prints it.
pub fn iso_millis(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn file_json(path: &str, f: &BucketFile) -> Value {
    json!({
        "type": "file",
        "path": path,
        "size": f.size,
        "xetHash": f.xet_hash,
        "mtime": iso_millis(f.mtime_ms),
        "uploadedAt": f.uploaded_at,
    })
}

async fn create(state: &HubState, req: Req, id: BucketId) -> HubResult<Response> {
    let ns = resolve_me(&id.namespace, req.caller.as_ref())?;
    let id = BucketId::new(&ns, &id.name)?;
    check_namespace_write(req.caller.as_ref(), &id.namespace)?;
    let body = read_body(req.body, 1 << 20).await?;
    let v: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?
    };
    // Python sends `visibility`, hf-hub `private`.
    let private = match (&v["private"], v["visibility"].as_str()) {
        (Value::Bool(b), _) => *b,
        (_, Some("private")) => true,
        (_, Some("public")) | (_, None) => false,
        (_, Some(other)) => {
            return Err(HubError::bad_request(format!(
                "Invalid visibility {other:?}: use public or private"
            )));
        }
    };
    let url = format!("{}/buckets/{}", req.base, id.id());
    if state.buckets.get(&id).is_some() {
        let mut resp = json_response(
            StatusCode::CONFLICT,
            &json!({"error": "You already created this bucket", "url": url}),
        );
        set_header(resp.headers_mut(), "x-error-message", "You already created this bucket");
        return Ok(resp);
    }
    state.buckets.create(&id, private)?;
    tracing::info!(bucket = %id, private, "bucket created");
    Ok(json_response(
        StatusCode::OK,
        &json!({"url": url, "id": id.id(), "name": id.id()}),
    ))
}

async fn info(state: &HubState, req: Req, id: BucketId) -> HubResult<Response> {
    let b = readable(state, &id, req.caller.as_ref())?;
    Ok(json_response(StatusCode::OK, &info_json(&b.id, &b.doc())))
}

/// `GET /api/buckets/{ns}[?search=&limit=&cursor=]`: the buckets of a namespace the caller may
/// see, by name, paginated with an absolute `Link` as tree listings are.
async fn list(state: &HubState, req: Req, namespace: String) -> HubResult<Response> {
    let ns = resolve_me(&namespace, req.caller.as_ref())?;
    let search = query_str(&req.query, "search").unwrap_or("").to_lowercase();
    let limit = page_limit(&req);
    let after = cursor(&req)?;
    let visible: Vec<Arc<Bucket>> = state
        .buckets
        .list(&ns)
        .into_iter()
        .filter(|b| b.id.name.to_lowercase().contains(&search))
        .filter(|b| !b.doc().private || req.caller.as_ref().is_some_and(|c| owns(c, &ns)))
        .filter(|b| after.as_deref().is_none_or(|a| b.id.name.as_str() > a))
        .collect();
    let page: Vec<Value> = visible.iter().take(limit).map(|b| info_json(&b.id, &b.doc())).collect();
    let mut resp = json_response(StatusCode::OK, &page);
    if visible.len() > limit
        && let Some(last) = visible.get(limit - 1)
    {
        let mut url = format!("{}/api/buckets/{}?limit={limit}", req.base, encode_segment(&namespace));
        if !search.is_empty() {
            url.push_str(&format!("&search={}", encode_segment(&search)));
        }
        url.push_str(&format!("&cursor={}", encode_cursor(&last.id.name)));
        set_header(resp.headers_mut(), "link", &format!("<{url}>; rel=\"next\""));
    }
    Ok(resp)
}

async fn delete(state: &HubState, req: Req, id: BucketId) -> HubResult<Response> {
    let b = writable(state, &id, req.caller.as_ref())?;
    let _w = b.write.lock().await;
    state.buckets.delete(&b)?;
    tracing::info!(bucket = %id, "bucket deleted");
    Ok(json_response(StatusCode::OK, &json!({})))
}

/// `POST /api/repos/move` with `{"fromRepo", "toRepo", "type": "bucket"}`. Repos cannot be moved
/// on this local Hub.
pub async fn move_bucket(state: &HubState, req: Req) -> HubResult<Response> {
    let body = read_body(req.body, 1 << 20).await?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
    if v["type"].as_str() != Some("bucket") {
        return Err(HubError::bad_request(
            "This local Hub moves buckets only (\"type\": \"bucket\")",
        ));
    }
    let field = |k: &str| {
        v[k].as_str()
            .ok_or_else(|| HubError::bad_request(format!("Missing {k:?}")))
            .and_then(BucketId::parse)
    };
    let (from, to) = (field("fromRepo")?, field("toRepo")?);
    let b = writable(state, &from, req.caller.as_ref())?;
    check_namespace_write(req.caller.as_ref(), &to.namespace)?;
    let _w = b.write.lock().await;
    state.buckets.rename(&b, &to)?;
    tracing::info!(from = %from, to = %to, "bucket moved");
    Ok(json_response(StatusCode::OK, &json!({})))
}

async fn settings(state: &HubState, req: Req, id: BucketId) -> HubResult<Response> {
    let b = writable(state, &id, req.caller.as_ref())?;
    let body = read_body(req.body, 1 << 20).await?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
    let private = match (&v["private"], v["visibility"].as_str()) {
        (Value::Bool(b), _) => Some(*b),
        (_, Some(vis)) => Some(vis == "private"),
        _ => None,
    };
    if let Some(p) = private {
        let _w = b.write.lock().await;
        let mut doc = (*b.doc()).clone();
        if doc.private != p {
            doc.private = p;
            doc.touch();
            state.buckets.save(&b, doc)?;
            tracing::info!(bucket = %id, private = p, "bucket settings changed");
        }
    }
    Ok(json_response(StatusCode::OK, &json!({})))
}

fn page_limit(req: &Req) -> usize {
    query_str(&req.query, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(TREE_PAGE)
        .clamp(1, TREE_PAGE)
}

fn encode_cursor(after: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(after)
}

fn cursor(req: &Req) -> HubResult<Option<String>> {
    query_str(&req.query, "cursor")
        .map(|c| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| HubError::bad_request("Invalid cursor"))
        })
        .transpose()
}

/// An entry of a bucket listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed<'a> {
    File(&'a BucketFile),
    /// A folder, with the newest upload time of the files below it.
    Dir(&'a str),
}

/// The entries of a listing under the raw key `prefix`, sorted by path (a file and a folder of the
/// same name both appear, the file first). Keys match by prefix only, so `logs` also matches
/// `logs.json` and `logs_old/x`. Without `recursive`, entries are cut one level below the prefix's
/// own depth (`logs` and `logs/` both list what is inside `logs/`, plus lexical neighbours), as
/// files and folders; with it, every matching file and no folders (Python's HfFileSystem rebuilds
/// the folders of a recursive listing itself and would list them twice).
pub fn listing<'a>(
    files: &'a BTreeMap<String, BucketFile>,
    prefix: &str,
    recursive: bool,
) -> Vec<(String, Listed<'a>)> {
    let depth = prefix.split('/').filter(|s| !s.is_empty()).count() + 1;
    let mut out: BTreeMap<(String, u8), Listed<'a>> = BTreeMap::new();
    for (path, f) in files
        .range(prefix.to_string()..)
        .take_while(|(k, _)| k.starts_with(prefix))
    {
        let cut = if recursive {
            None
        } else {
            path.match_indices('/').nth(depth - 1).map(|(i, _)| i)
        };
        match cut {
            None => {
                out.insert((path.clone(), 0), Listed::File(f));
            }
            Some(i) => {
                let e = out
                    .entry((path[..i].to_string(), 1))
                    .or_insert(Listed::Dir(&f.uploaded_at));
                if let Listed::Dir(at) = e
                    && f.uploaded_at.as_str() > *at
                {
                    *e = Listed::Dir(&f.uploaded_at);
                }
            }
        }
    }
    out.into_iter().map(|((p, _), l)| (p, l)).collect()
}

fn listed_json(path: &str, l: &Listed<'_>) -> Value {
    match l {
        Listed::File(f) => file_json(path, f),
        Listed::Dir(at) => json!({"type": "directory", "path": path, "uploadedAt": at}),
    }
}

/// `GET /api/buckets/{id}/tree[/{prefix}]?recursive=&limit=&cursor=`. A prefix nothing matches is
/// an empty listing, not a 404 (clients probe destinations this way).
async fn tree(state: &HubState, req: Req, id: BucketId, prefix: String) -> HubResult<Response> {
    let b = readable(state, &id, req.caller.as_ref())?;
    let doc = b.doc();
    let recursive = query_flag(&req.query, "recursive");
    let limit = page_limit(&req);
    let all = listing(&doc.files, &prefix, recursive);
    // The cursor is the last (path, kind) sent; a file sorts before a folder of the same name.
    let start = match cursor(&req)? {
        Some(c) => {
            let (kind, path) = c.split_at(1.min(c.len()));
            let after = (path, kind == "d");
            all.partition_point(|(p, l)| (p.as_str(), matches!(l, Listed::Dir(_))) <= after)
        }
        None => 0,
    };
    let page = &all[start.min(all.len())..(start + limit).min(all.len())];
    let body: Vec<Value> = page.iter().map(|(p, l)| listed_json(p, l)).collect();
    let mut resp = json_response(StatusCode::OK, &body);
    if start + page.len() < all.len()
        && let Some((last, l)) = page.last()
    {
        let kind = if matches!(l, Listed::Dir(_)) { "d" } else { "f" };
        let mut url = format!("{}{}/tree", req.base, id.api_path());
        if !prefix.is_empty() {
            url.push('/');
            url.push_str(&encode_segment(&prefix));
        }
        url.push_str(&format!(
            "?recursive={recursive}&limit={limit}&cursor={}",
            encode_cursor(&format!("{kind}{last}"))
        ));
        set_header(resp.headers_mut(), "link", &format!("<{url}>; rel=\"next\""));
    }
    Ok(resp)
}

/// `POST /api/buckets/{id}/paths-info` with `{"paths": [...]}`: the files among them (missing paths
/// and folders are left out, as clients expect file entries only).
async fn paths_info(state: &HubState, req: Req, id: BucketId) -> HubResult<Response> {
    let b = readable(state, &id, req.caller.as_ref())?;
    let body = read_body(req.body, 64 << 20).await?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
    let paths = v["paths"]
        .as_array()
        .ok_or_else(|| HubError::bad_request("Expected {\"paths\": [...]}"))?;
    let limit = state.buckets.batch_limit();
    if limit > 0 && paths.len() > limit {
        return Err(HubError::bad_request(format!(
            "Too many paths in one request: {} (at most {limit})",
            paths.len()
        )));
    }
    let doc = b.doc();
    let out: Vec<Value> = paths
        .iter()
        .filter_map(|p| p.as_str())
        .filter_map(|p| doc.files.get(p).map(|f| file_json(p, f)))
        .collect();
    Ok(json_response(StatusCode::OK, &out))
}

async fn xet_token(state: &HubState, req: Req, id: BucketId, write: bool) -> HubResult<Response> {
    if write {
        writable(state, &id, req.caller.as_ref())?;
        if !state.xet_uploads.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(HubError::EntryNotFound("This Hub does not store uploads in Xet".into()));
        }
    } else {
        readable(state, &id, req.caller.as_ref())?;
    }
    Ok(super::xet::token_response(state, write, req.caller.as_ref()))
}

/// `HEAD|GET /buckets/{id}/resolve/{path}`: the Xet headers of a repo's Xet file (hash, token and
/// reconstruction links, `X-Linked-Size`). A GET is then a 302 to the blob origin, which serves the
/// bytes with ranges for clients without Xet. A HEAD answers 200 with the file's size as
/// `Content-Length`: hf-hub's bucket metadata call HEADs without following redirects and takes
/// any non-2xx for an error, and Python reads the same headers from either answer. An empty file
/// is served directly (there is no Xet content to point at).
async fn resolve(state: &HubState, req: Req, id: BucketId, path: String) -> HubResult<Response> {
    if req.method != Method::GET && req.method != Method::HEAD {
        return Err(HubError::MethodNotAllowed);
    }
    let b = readable(state, &id, req.caller.as_ref())?;
    let doc = b.doc();
    let Some(f) = doc.files.get(&path) else {
        return Err(HubError::EntryNotFound("Entry not found".to_string()));
    };
    let mut h = HeaderMap::new();
    let quoted = format!("\"{}\"", f.xet_hash);
    set_header(&mut h, "etag", &quoted);
    set_header(&mut h, "x-linked-etag", &quoted);
    set_header(&mut h, "x-linked-size", &f.size.to_string());
    set_header(&mut h, "accept-ranges", "bytes");
    if let Some(lm) = http_date(&iso_millis(f.mtime_ms)) {
        set_header(&mut h, "last-modified", &lm);
    }
    if let Some(ct) = &f.content_type {
        set_header(&mut h, "x-content-type", ct);
    }
    let refresh_route = format!("{}/xet-read-token", id.api_path());
    let refresh = format!("{}{refresh_route}", req.base);
    let recon = format!("{}/v1/reconstructions/{}", state.cas_url, f.xet_hash);
    set_header(&mut h, "x-xet-hash", &f.xet_hash);
    set_header(
        &mut h,
        "link",
        &format!("<{refresh}>; rel=\"xet-auth\", <{recon}>; rel=\"xet-reconstruction-info\""),
    );
    set_header(&mut h, "x-xet-refresh-route", &refresh_route);
    let wants_fileinfo = req
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/vnd.xet-fileinfo+json"));
    if wants_fileinfo {
        let mut resp = json_response(
            StatusCode::OK,
            &json!({"hash": f.xet_hash, "etag": f.xet_hash, "size": f.size,
                    "refreshUrl": refresh, "reconstructionUrl": recon}),
        );
        resp.headers_mut().extend(h);
        return Ok(resp);
    }
    if not_modified(&req.headers, &f.xet_hash) {
        return Ok(with_headers(StatusCode::NOT_MODIFIED, h, Body::empty()));
    }
    if f.size == 0 {
        set_header(&mut h, "content-length", "0");
        return Ok(with_headers(StatusCode::OK, h, Body::empty()));
    }
    if req.method == Method::HEAD {
        set_header(&mut h, "content-length", &f.size.to_string());
        return Ok(with_headers(StatusCode::OK, h, Body::empty()));
    }
    set_header(&mut h, "location", &state.presign(&format!("/xet/{}", f.xet_hash)));
    set_header(&mut h, "content-length", "0");
    Ok(with_headers(StatusCode::FOUND, h, Body::empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(at: &str) -> BucketFile {
        BucketFile {
            xet_hash: "0".repeat(64),
            size: 1,
            mtime_ms: 0,
            uploaded_at: at.to_string(),
            content_type: None,
        }
    }

    fn paths(v: &[(String, Listed<'_>)]) -> Vec<String> {
        v.iter()
            .map(|(p, l)| match l {
                Listed::File(_) => p.clone(),
                Listed::Dir(_) => format!("{p}/"),
            })
            .collect()
    }

    #[test]
    fn listings_by_raw_prefix() {
        let files: BTreeMap<String, BucketFile> = [
            ("a.txt", "1"),
            ("logs/x/1.txt", "2"),
            ("logs/y.txt", "5"),
            ("logs.json", "3"),
            ("logs_old/z", "4"),
        ]
        .into_iter()
        .map(|(p, at)| (p.to_string(), f(at)))
        .collect();
        assert_eq!(
            paths(&listing(&files, "", false)),
            ["a.txt", "logs/", "logs.json", "logs_old/"]
        );
        // `logs` and `logs/` list inside logs/; raw-key neighbours of `logs` come along.
        assert_eq!(
            paths(&listing(&files, "logs", false)),
            ["logs.json", "logs/x/", "logs/y.txt", "logs_old/z"]
        );
        assert_eq!(paths(&listing(&files, "logs/", false)), ["logs/x/", "logs/y.txt"]);
        assert_eq!(paths(&listing(&files, "logs/", true)), ["logs/x/1.txt", "logs/y.txt"]);
        assert_eq!(paths(&listing(&files, "", true)).len(), 5, "files only");
        assert!(listing(&files, "nope", true).is_empty());
        // A folder carries the newest upload below it.
        let all = listing(&files, "", false);
        let logs = all
            .iter()
            .find(|(p, l)| p == "logs" && matches!(l, Listed::Dir(_)))
            .unwrap();
        assert_eq!(logs.1, Listed::Dir("5"));
        let top = listing(&files, "logs/x", false);
        assert_eq!(paths(&top), ["logs/x/1.txt"]);
    }
}
