//! Write routes of the Hub API: preupload, NDJSON commits, repo create/delete/settings, branches
//! and tags, validate-yaml.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use base64::Engine;
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{HubError, HubResult};
use super::http_util::{json_response, query_flag, read_body};
use super::model::{FileEntry, Node};
use super::names::{RepoId, RepoType, validate_file_path};
use super::server::Req;
use super::state::HubState;
use super::store::{CommitRequest, Op, RefKind, is_sha256};

/// Largest API request body (inline base64 content of a big commit included).
pub const MAX_API_BODY: usize = 512 << 20;
/// Files at least this large must be LFS on the Hub.
pub const LFS_SIZE_THRESHOLD: u64 = 10 << 20;

/// The `filter=lfs` patterns of a `.gitattributes` file.
fn lfs_patterns(gitattributes: &str) -> GlobSet {
    let mut b = GlobSetBuilder::new();
    for line in gitattributes.lines() {
        let mut parts = line.split_whitespace();
        let Some(pat) = parts.next() else { continue };
        if pat.starts_with('#') || !parts.any(|a| a == "filter=lfs") {
            continue;
        }
        // A pattern without a slash matches a name at any depth, as in git.
        let pat = if pat.contains('/') {
            pat.trim_start_matches('/').to_string()
        } else {
            format!("**/{pat}")
        };
        if let Ok(g) = globset::GlobBuilder::new(&pat).literal_separator(true).build() {
            b.add(g);
        }
        if let Ok(g) = Glob::new(pat.trim_start_matches("**/")) {
            b.add(g);
        }
    }
    b.build().unwrap_or_else(|_| GlobSet::empty())
}

#[derive(Deserialize)]
struct PreuploadFile {
    path: String,
    #[serde(default)]
    sample: String,
    #[serde(default)]
    size: u64,
}

#[derive(Deserialize)]
struct PreuploadBody {
    files: Vec<PreuploadFile>,
}

pub async fn preupload(state: &HubState, req: Req, id: RepoId, rev: String) -> HubResult<Response> {
    let repo = state.writable_repo(&id, req.caller.as_ref())?;
    let body = read_body(req.body, 64 << 20).await?;
    let body: PreuploadBody =
        serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid preupload body: {e}")))?;
    // A PR may be opened from any revision; otherwise the revision must exist.
    let resolved = state.store.resolve(&repo, &rev);
    let snap = match &resolved {
        Ok(r) => Some(state.store.snapshot(&repo, &r.commit)?),
        Err(_) if query_flag(&req.query, "create_pr") => None,
        Err(e) => return Err(HubError::RevisionNotFound(e.to_string())),
    };
    let gitattributes = snap
        .as_ref()
        .and_then(|s| s.commit.files.get(".gitattributes").cloned())
        .and_then(|e| state.store.read_git_object(&e.oid).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let patterns = lfs_patterns(&gitattributes);
    let mut out = Vec::new();
    for f in body.files {
        validate_file_path(&f.path)?;
        let sample = base64::engine::general_purpose::STANDARD
            .decode(&f.sample)
            .unwrap_or_default();
        let lfs = f.size >= LFS_SIZE_THRESHOLD || sample.contains(&0) || patterns.is_match(&f.path);
        let existing = snap.as_ref().and_then(|s| match s.node(&f.path) {
            Some(Node::File { entry, .. }) => Some(entry.etag().to_string()),
            _ => None,
        });
        out.push(json!({
            "path": f.path,
            "uploadMode": if lfs && f.size > 0 { "lfs" } else { "regular" },
            "shouldIgnore": false,
            "oid": existing,
        }));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"files": out, "commitOid": resolved.ok().map(|r| r.commit)}),
    ))
}

/// Parses the NDJSON commit body into a request; content of inline files is stored on the way.
fn parse_commit(state: &HubState, body: &[u8], base_files: Option<&super::model::Commit>) -> HubResult<CommitRequest> {
    let text = std::str::from_utf8(body).map_err(|_| HubError::bad_request("Commit body is not UTF-8"))?;
    let mut req = CommitRequest {
        title: String::new(),
        message: String::new(),
        author: String::new(),
        parent: None,
        create_pr: false,
        ops: Vec::new(),
    };
    let mut saw_header = false;
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| HubError::bad_request(format!("Invalid NDJSON on line {}: {e}", i + 1)))?;
        let key = v["key"].as_str().unwrap_or("");
        let val = &v["value"];
        // Only a folder deletion may end in '/'; a file path must name a file.
        let folder = key == "deletedFolder";
        let path = || -> HubResult<String> {
            let p = val["path"]
                .as_str()
                .ok_or_else(|| HubError::bad_request(format!("line {}: missing path", i + 1)))?;
            let p = p.trim_start_matches("./");
            let p = if folder { p.trim_end_matches('/') } else { p };
            validate_file_path(p)?;
            Ok(p.to_string())
        };
        match key {
            "header" => {
                saw_header = true;
                req.title = val["summary"].as_str().unwrap_or("").to_string();
                req.message = val["description"].as_str().unwrap_or("").to_string();
                req.parent = val["parentCommit"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_string);
            }
            "file" => {
                let content = val["content"].as_str().unwrap_or("");
                let bytes = match val["encoding"].as_str().unwrap_or("utf-8") {
                    "base64" => base64::engine::general_purpose::STANDARD
                        .decode(content)
                        .map_err(|e| HubError::bad_request(format!("line {}: invalid base64: {e}", i + 1)))?,
                    "utf-8" | "utf8" => content.as_bytes().to_vec(),
                    other => {
                        return Err(HubError::bad_request(format!("Unknown encoding {other:?}")));
                    }
                };
                let entry = state.store.put_git_object(&bytes)?;
                req.ops.push(Op::Put { path: path()?, entry });
            }
            "lfsFile" => {
                let p = path()?;
                let entry = lfs_entry(state, val, base_files)?;
                req.ops.push(Op::Put { path: p, entry });
            }
            "deletedFile" => req.ops.push(Op::DeleteFile { path: path()? }),
            "deletedFolder" => req.ops.push(Op::DeleteFolder { path: path()? }),
            other => {
                return Err(HubError::bad_request(format!("Unknown commit operation key {other:?}")));
            }
        }
    }
    if !saw_header {
        return Err(HubError::bad_request("The commit has no header line"));
    }
    if req.title.trim().is_empty() {
        return Err(HubError::bad_request("The commit summary must not be empty"));
    }
    Ok(req)
}

/// The `parentCommit` of an NDJSON commit body's header, read before the body is parsed in full
/// (lines are read only up to the header, which clients send first).
fn header_parent(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["key"] == "header")
        .and_then(|v| v["value"]["parentCommit"].as_str().map(str::to_string))
        .filter(|s| !s.is_empty())
}

/// An `lfsFile` line: the object must already be uploaded (plain LFS or Xet), or be a copy of an
/// LFS file of the base revision (`oldPath`).
fn lfs_entry(state: &HubState, val: &Value, base: Option<&super::model::Commit>) -> HubResult<FileEntry> {
    let oid = val["oid"].as_str().unwrap_or("");
    if val["algo"].as_str().is_some_and(|a| a != "sha256") || !is_sha256(oid) {
        return Err(HubError::bad_request("lfsFile needs algo sha256 and a 64-hex oid"));
    }
    if let Some(old) = val["oldPath"].as_str() {
        let e = base
            .and_then(|c| c.files.get(old))
            .filter(|e| e.lfs.as_ref().is_some_and(|l| l.sha256 == oid))
            .ok_or_else(|| HubError::bad_request(format!("Cannot copy {old:?}: no LFS file with oid {oid} there")))?;
        return Ok(e.clone());
    }
    let size = val["size"].as_u64();
    let binding = state.store.xet_binding(oid);
    let stored_size = if state.store.has_lfs_object(oid) {
        std::fs::metadata(state.store.lfs_object_path(oid))
            .map(|m| m.len())
            .ok()
    } else {
        binding.as_ref().map(|b| b.size)
    };
    let Some(stored_size) = stored_size else {
        return Err(HubError::bad_request(format!(
            "LFS object {oid} was never uploaded: upload it (LFS batch or Xet) before committing"
        )));
    };
    if size.is_some_and(|s| s != stored_size) {
        return Err(HubError::bad_request(format!(
            "LFS object {oid} has size {stored_size}, not {}",
            size.unwrap_or(0)
        )));
    }
    Ok(FileEntry::lfs(oid, stored_size, binding.map(|b| b.xet_hash)))
}

pub async fn commit(state: &HubState, req: Req, id: RepoId, rev: String) -> HubResult<Response> {
    let repo = state.writable_repo(&id, req.caller.as_ref())?;
    let author = req.caller.as_ref().map(|c| c.user.clone()).unwrap_or_default();
    let create_pr = query_flag(&req.query, "create_pr");
    let body = read_body(req.body, MAX_API_BODY).await?;
    // One commit at a time per repo, so parentCommit checks and ref moves cannot interleave.
    let _guard = repo.write.lock().await;
    // The repo's commit budget (the Hub's "128 per hour"), checked and charged under the write lock
    // so concurrent commits are counted in order; a refused or failed commit is not charged.
    if let Err(limited) = state.commits.check(&id) {
        tracing::info!(repo = %id, limit = %limited.limit, retry_after = limited.retry_after, "commit refused: rate limit for repository commits");
        return Err(HubError::CommitRateLimited(limited));
    }
    let head = state.store.resolve(&repo, &rev)?.commit;
    // `oldPath` copies read the commit the new one is made on, which for a PR from `parentCommit`
    // is that parent rather than the head.
    let base = if create_pr {
        let parent = header_parent(&body);
        state.store.commit_base(&repo, &head, parent.as_deref(), true)?
    } else {
        head
    };
    let base_commit = state.store.commit(&repo, &base)?;
    let mut creq = parse_commit(state, &body, Some(&base_commit))?;
    creq.author = author;
    creq.create_pr = create_pr;
    let out = state.store.apply_commit(&repo, &rev, creq)?;
    state.commits.record(&id);
    tracing::info!(repo = %id, rev, commit = %out.commit, "commit landed");
    let mut v = json!({
        "success": true,
        "commitOid": out.commit,
        "commitUrl": format!("{}/{}/commit/{}", req.base, id.web_path(), out.commit),
        "hookOutput": "",
    });
    if let Some(n) = out.pr_num {
        v["pullRequestUrl"] = json!(format!("{}/{}/discussions/{n}", req.base, id.web_path()));
    }
    Ok(json_response(StatusCode::OK, &v))
}

#[derive(Deserialize)]
struct CreateBody {
    name: String,
    organization: Option<String>,
    #[serde(default)]
    private: Option<bool>,
    visibility: Option<String>,
    #[serde(rename = "type")]
    ty: Option<String>,
}

fn repo_from_body(body: &CreateBody, caller_user: &str) -> HubResult<RepoId> {
    let ty = RepoType::from_singular(body.ty.as_deref())
        .ok_or_else(|| HubError::bad_request(format!("Unknown repo type {:?}", body.ty)))?;
    let (ns, name) = match (&body.organization, body.name.split_once('/')) {
        (Some(org), _) => (org.clone(), body.name.clone()),
        (None, Some((ns, name))) => (ns.to_string(), name.to_string()),
        (None, None) => (caller_user.to_string(), body.name.clone()),
    };
    RepoId::new(ty, &ns, &name)
}

pub async fn create_repo(state: &HubState, req: Req) -> HubResult<Response> {
    let caller = req.caller.clone().ok_or(HubError::BadToken)?;
    let body = read_body(req.body, 1 << 20).await?;
    let body: CreateBody =
        serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
    let id = repo_from_body(&body, &caller.user)?;
    if !caller.token_writes(&id.namespace, None) {
        return Err(HubError::Forbidden(
            "You need a write token (or a fine-grained one with repo.write on the namespace) to create a repo"
                .to_string(),
        ));
    }
    if !caller.admin && caller.user != id.namespace {
        return Err(HubError::Forbidden(format!(
            "You don't have the rights to create a repo under {}",
            id.namespace
        )));
    }
    let private = body.private.unwrap_or(false) || body.visibility.as_deref() == Some("private");
    if state.store.repo(&id)?.is_some() {
        let mut resp = json_response(
            StatusCode::CONFLICT,
            &json!({"error": format!("You already created this {} repo", id.ty.singular()), "url": format!("{}/{}", req.base, id.web_path())}),
        );
        super::http_util::set_header(resp.headers_mut(), "x-error-message", "You already created this repo");
        return Ok(resp);
    }
    state.store.create_repo(&id, private, &caller.user)?;
    tracing::info!(repo = %id, private, "repo created");
    Ok(json_response(
        StatusCode::OK,
        &json!({"url": format!("{}/{}", req.base, id.web_path()), "name": id.id()}),
    ))
}

pub async fn delete_repo(state: &HubState, req: Req) -> HubResult<Response> {
    let caller = req.caller.clone().ok_or(HubError::BadToken)?;
    let body = read_body(req.body, 1 << 20).await?;
    let body: CreateBody =
        serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
    let id = repo_from_body(&body, &caller.user)?;
    let repo = state.writable_repo(&id, Some(&caller))?;
    let _guard = repo.write.lock().await;
    state.store.delete_repo(&id)?;
    tracing::info!(repo = %id, "repo deleted");
    Ok(json_response(StatusCode::OK, &json!({})))
}

pub async fn settings(state: &HubState, req: Req, id: RepoId) -> HubResult<Response> {
    let repo = state.writable_repo(&id, req.caller.as_ref())?;
    let body = read_body(req.body, 1 << 20).await?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
    let private = match (&v["private"], v["visibility"].as_str()) {
        (Value::Bool(b), _) => Some(*b),
        (_, Some(vis)) => Some(vis == "private"),
        _ => None,
    };
    if let Some(p) = private {
        let _guard = repo.write.lock().await;
        state.store.set_private(&repo, p)?;
    }
    Ok(json_response(StatusCode::OK, &json!({})))
}

/// `POST|DELETE /branch/{name}` and `POST /tag/{rev}` (body `{tag}`) / `DELETE /tag/{tag}`.
pub async fn set_ref(state: &HubState, req: Req, id: RepoId, kind: RefKind, name: String) -> HubResult<Response> {
    let repo = state.writable_repo(&id, req.caller.as_ref())?;
    let method = req.method.clone();
    let body = read_body(req.body, 1 << 20).await?;
    let v: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?
    };
    let _guard = repo.write.lock().await;
    match (method, kind) {
        (Method::DELETE, _) => state.store.set_ref(&repo, kind, &name, None)?,
        (Method::POST, RefKind::Branch) => {
            let start = v["startingPoint"].as_str().unwrap_or("main");
            let target = state.store.resolve(&repo, start)?.commit;
            state.store.set_ref(&repo, kind, &name, Some(target))?;
        }
        (Method::POST, RefKind::Tag) => {
            // Here `name` is the revision to tag; the tag name is in the body.
            let tag = v["tag"]
                .as_str()
                .ok_or_else(|| HubError::bad_request("Body must name the \"tag\""))?;
            let target = state.store.resolve(&repo, &name)?.commit;
            state.store.set_ref(&repo, kind, tag, Some(target))?;
        }
        _ => return Err(HubError::MethodNotAllowed),
    }
    Ok(json_response(StatusCode::OK, &json!({})))
}

pub async fn validate_yaml(_state: &HubState, req: Req) -> HubResult<Response> {
    let body = read_body(req.body, 4 << 20).await?;
    let _: Value = serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
    Ok(json_response(StatusCode::OK, &json!({"errors": [], "warnings": []})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitattributes_patterns() {
        let g = lfs_patterns(super::super::store::DEFAULT_GITATTRIBUTES);
        assert!(g.is_match("model.safetensors"));
        assert!(g.is_match("sub/dir/weights.bin"));
        assert!(g.is_match("saved_model/a/b"));
        assert!(g.is_match("runs/events.out.tfevents.123"));
        assert!(!g.is_match("config.json"));
        assert!(!g.is_match("data/train.csv"));
    }
}
