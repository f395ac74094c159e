//! Read routes of the Hub API: repo info, tree listings, paths-info, refs, commit history, whoami.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};

use super::auth::Caller;
use super::error::{HubError, HubResult};
use super::http_util::{json_response, query_flag, query_str, read_body, set_header};
use super::model::{Commit, Node};
use super::names::{RepoId, encode_segment};
use super::server::Req;
use super::state::HubState;
use super::store::RepoState;

/// Page size of tree listings, as on the Hub (50 when entries carry `lastCommit`).
pub const TREE_PAGE: usize = 1000;
pub const TREE_PAGE_EXPANDED: usize = 50;

pub fn entry_json(node: &Node, last: Option<&Commit>) -> Value {
    let mut v = match node {
        Node::Dir { path, oid } => {
            json!({"type": "directory", "oid": oid, "size": 0, "path": path})
        }
        Node::File { path, entry } => {
            let mut v = json!({"type": "file", "oid": entry.oid, "size": entry.size, "path": path});
            if let Some(lfs) = &entry.lfs {
                v["lfs"] = json!({"oid": lfs.sha256, "size": entry.size, "pointerSize": lfs.pointer_size});
            }
            if let Some(x) = &entry.xet_hash {
                v["xetHash"] = json!(x);
            }
            v
        }
    };
    if let Some(c) = last {
        v["lastCommit"] = json!({"id": c.id, "title": c.title, "date": c.date});
    }
    v
}

/// For each path, the newest commit (walking first parents from `head`) that changed it.
fn last_commits(
    state: &HubState,
    repo: &RepoState,
    head: &str,
    nodes: &[Node],
) -> HubResult<HashMap<String, Arc<Commit>>> {
    const MAX_WALK: usize = 1000;
    let key = |snap: &super::model::Snapshot, path: &str| -> Option<String> {
        match snap.node(path)? {
            Node::File { entry, .. } => Some(entry.oid),
            Node::Dir { oid, .. } => Some(oid),
        }
    };
    let mut pending: HashSet<String> = nodes.iter().map(|n| n.path().to_string()).collect();
    let mut out = HashMap::new();
    let mut cur = state.store.snapshot(repo, head)?;
    for _ in 0..MAX_WALK {
        if pending.is_empty() {
            break;
        }
        let parent = match cur.commit.parents.first() {
            Some(p) => Some(state.store.snapshot(repo, p)?),
            None => None,
        };
        let changed: Vec<String> = pending
            .iter()
            .filter(|p| parent.as_ref().is_none_or(|ps| key(ps, p) != key(&cur, p)))
            .cloned()
            .collect();
        for p in changed {
            pending.remove(&p);
            out.insert(p, cur.commit.clone());
        }
        match parent {
            Some(ps) => cur = ps,
            None => break,
        }
    }
    Ok(out)
}

pub async fn info(state: &HubState, req: Req, id: RepoId, rev: Option<String>) -> HubResult<Response> {
    let repo = state.readable_repo(&id, req.caller.as_ref())?;
    let rev = rev.unwrap_or_else(|| "main".to_string());
    let resolved = state.store.resolve(&repo, &rev)?;
    let commit = state.store.commit(&repo, &resolved.commit)?;
    let blobs = query_flag(&req.query, "blobs");
    let siblings: Vec<Value> = commit
        .files
        .iter()
        .map(|(path, e)| {
            let mut s = json!({"rfilename": path});
            if blobs {
                s["size"] = json!(e.size);
                s["blobId"] = json!(e.oid);
                if let Some(l) = &e.lfs {
                    s["lfs"] = json!({"sha256": l.sha256, "size": e.size, "pointerSize": l.pointer_size});
                }
            }
            s
        })
        .collect();
    let meta = repo.meta.read().clone();
    let mut v = json!({
        "_id": meta.id,
        "id": id.id(),
        "author": id.namespace,
        "sha": commit.id,
        "lastModified": commit.date,
        "createdAt": meta.created_at,
        "private": meta.private,
        "gated": false,
        "disabled": false,
        "tags": [],
        "downloads": 0,
        "likes": 0,
        "siblings": siblings,
    });
    if id.ty == super::names::RepoType::Model {
        v["modelId"] = json!(id.id());
    }
    if id.ty == super::names::RepoType::Space {
        v["sdk"] = json!("static");
    }
    let mut resp = json_response(StatusCode::OK, &v);
    set_header(resp.headers_mut(), "x-repo-commit", &commit.id);
    Ok(resp)
}

pub async fn tree(state: &HubState, req: Req, id: RepoId, rev: String, path: String) -> HubResult<Response> {
    let repo = state.readable_repo(&id, req.caller.as_ref())?;
    let resolved = state.store.resolve(&repo, &rev)?;
    let snap = state.store.snapshot(&repo, &resolved.commit)?;
    let recursive = query_flag(&req.query, "recursive");
    let expand = query_flag(&req.query, "expand");
    match snap.node(&path) {
        Some(Node::Dir { .. }) => {}
        Some(Node::File { .. }) | None => {
            return Err(HubError::EntryNotFound(format!("Entry not found: {path}")));
        }
    }
    let all: Vec<Node> = if recursive {
        snap.walk(&path)
    } else {
        snap.dirs.get(&path).cloned().unwrap_or_default()
    };
    let max = if expand { TREE_PAGE_EXPANDED } else { TREE_PAGE };
    let limit = query_str(&req.query, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(max)
        .clamp(1, max);
    let start = match query_str(&req.query, "cursor") {
        Some(c) => {
            let after = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| HubError::bad_request("Invalid cursor"))?;
            all.partition_point(|n| n.path() <= after.as_str())
        }
        None => 0,
    };
    let page: Vec<Node> = all.iter().skip(start).take(limit).cloned().collect();
    let lasts = if expand {
        last_commits(state, &repo, &resolved.commit, &page)?
    } else {
        HashMap::new()
    };
    let body: Vec<Value> = page
        .iter()
        .map(|n| entry_json(n, lasts.get(n.path()).map(|c| c.as_ref())))
        .collect();
    let mut resp = json_response(StatusCode::OK, &body);
    if start + page.len() < all.len()
        && let Some(last) = page.last()
    {
        let cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(last.path());
        let mut url = format!("{}{}/tree/{}", req.base, id.api_path(), encode_segment(&rev));
        if !path.is_empty() {
            url.push('/');
            url.push_str(&super::names::encode_path(&path));
        }
        url.push_str(&format!(
            "?recursive={recursive}&expand={expand}&limit={limit}&cursor={cursor}"
        ));
        set_header(resp.headers_mut(), "link", &format!("<{url}>; rel=\"next\""));
    }
    set_header(resp.headers_mut(), "x-repo-commit", &resolved.commit);
    Ok(resp)
}

pub async fn paths_info(state: &HubState, req: Req, id: RepoId, rev: String) -> HubResult<Response> {
    let repo = state.readable_repo(&id, req.caller.as_ref())?;
    let resolved = state.store.resolve(&repo, &rev)?;
    let is_json = req
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let body = read_body(req.body, 16 << 20).await?;
    let (paths, expand) = if is_json {
        let v: Value =
            serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid JSON body: {e}")))?;
        let paths = v["paths"]
            .as_array()
            .ok_or_else(|| HubError::bad_request("Body must have a \"paths\" array"))?
            .iter()
            .map(|p| {
                p.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| HubError::bad_request("paths must be strings"))
            })
            .collect::<HubResult<Vec<_>>>()?;
        (paths, v["expand"].as_bool().unwrap_or(false))
    } else {
        let form = super::http_util::parse_query(std::str::from_utf8(&body).ok());
        (
            form.get("paths").cloned().unwrap_or_default(),
            query_flag(&form, "expand"),
        )
    };
    let snap = state.store.snapshot(&repo, &resolved.commit)?;
    let mut nodes = Vec::new();
    for p in paths {
        let p = p.trim_matches('/');
        if super::names::validate_file_path(p).is_ok()
            && let Some(n) = snap.node(p)
        {
            nodes.push(n);
        }
    }
    let lasts = if expand {
        last_commits(state, &repo, &resolved.commit, &nodes)?
    } else {
        HashMap::new()
    };
    let body: Vec<Value> = nodes
        .iter()
        .map(|n| entry_json(n, lasts.get(n.path()).map(|c| c.as_ref())))
        .collect();
    let mut resp = json_response(StatusCode::OK, &body);
    set_header(resp.headers_mut(), "x-repo-commit", &resolved.commit);
    Ok(resp)
}

pub async fn refs(state: &HubState, req: Req, id: RepoId) -> HubResult<Response> {
    let repo = state.readable_repo(&id, req.caller.as_ref())?;
    let refs = repo.refs.read().clone();
    let item = |name: &str, r: String, c: &String| json!({"name": name, "ref": r, "targetCommit": c});
    let mut v = json!({
        "branches": refs.branches.iter().map(|(n, c)| item(n, format!("refs/heads/{n}"), c)).collect::<Vec<_>>(),
        "tags": refs.tags.iter().map(|(n, c)| item(n, format!("refs/tags/{n}"), c)).collect::<Vec<_>>(),
        "converts": [],
    });
    if query_flag(&req.query, "include_prs") || query_flag(&req.query, "include_pull_requests") {
        v["pullRequests"] = refs
            .prs
            .iter()
            .map(|(n, c)| item(&format!("refs/pr/{n}"), format!("refs/pr/{n}"), c))
            .collect::<Vec<_>>()
            .into();
    }
    Ok(json_response(StatusCode::OK, &v))
}

pub async fn commits(state: &HubState, req: Req, id: RepoId, rev: String) -> HubResult<Response> {
    let repo = state.readable_repo(&id, req.caller.as_ref())?;
    let resolved = state.store.resolve(&repo, &rev)?;
    let page: usize = query_str(&req.query, "p").and_then(|p| p.parse().ok()).unwrap_or(0);
    let limit: usize = query_str(&req.query, "limit")
        .and_then(|p| p.parse().ok())
        .unwrap_or(50)
        .clamp(1, 1000);
    let upto = page.saturating_add(1).saturating_mul(limit).saturating_add(1);
    let hist = state.store.history(&repo, &resolved.commit, upto)?;
    let items: Vec<Value> = hist
        .iter()
        .skip(page.saturating_mul(limit))
        .take(limit)
        .map(|c| {
            json!({
                "id": c.id,
                "title": c.title,
                "message": c.message,
                "authors": c.authors.iter().map(|a| json!({"user": a, "avatar": null})).collect::<Vec<_>>(),
                "date": c.date,
            })
        })
        .collect();
    let mut resp = json_response(StatusCode::OK, &items);
    if hist.len() > page.saturating_add(1).saturating_mul(limit) {
        let url = format!(
            "{}{}/commits/{}?p={}&limit={limit}",
            req.base,
            id.api_path(),
            encode_segment(&rev),
            page.saturating_add(1)
        );
        set_header(resp.headers_mut(), "link", &format!("<{url}>; rel=\"next\""));
    }
    Ok(resp)
}

/// `GET /api/whoami-v2`: the token's user and what the token may do (its role, and for a
/// fine-grained token its permissions), shaped as the Hub's answer. 401 without a token.
pub async fn whoami(_state: &HubState, req: Req) -> HubResult<Response> {
    let Some(c): Option<Caller> = req.caller else {
        return Err(HubError::BadToken);
    };
    Ok(json_response(StatusCode::OK, &c.whoami_json()))
}

pub async fn list_repos(state: &HubState, req: Req, ty: super::names::RepoType) -> HubResult<Response> {
    let author = query_str(&req.query, "author").map(str::to_string);
    let mut out = Vec::new();
    for id in state.store.list_repos(ty) {
        if author.as_ref().is_some_and(|a| *a != id.namespace) {
            continue;
        }
        let Ok(Some(repo)) = state.store.repo(&id) else {
            continue;
        };
        if super::auth::check_read(req.caller.as_ref(), &id, &repo.meta.read()).is_err() {
            continue;
        }
        let Ok(r) = state.store.resolve(&repo, "main") else {
            continue;
        };
        let private = repo.meta.read().private;
        out.push(json!({"id": id.id(), "author": id.namespace, "sha": r.commit, "private": private}));
    }
    Ok(json_response(StatusCode::OK, &out))
}
