//! Discussions and pull requests, as far as clients need them to open a PR and read it back: a PR
//! is its `refs/pr/N` ref plus a title; there are no comments or merges.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::error::{HubError, HubResult};
use super::http_util::{json_response, read_body};
use super::model::{Discussion, Refs};
use super::names::RepoId;
use super::server::Req;
use super::state::HubState;
use super::store::RepoState;

/// A discussion as the Hub answers it; `repo` supplies a PR's head commit and the ref it targets.
fn discussion_json(id: &RepoId, base: &str, num: u64, d: &Discussion, repo: &RepoState, refs: &Refs) -> Value {
    let mut v = json!({
        "num": num,
        "title": d.title,
        "status": "open",
        "author": {"name": d.author},
        "createdAt": d.created_at,
        "isPullRequest": d.is_pr,
        "repo": {"name": id.id(), "type": id.ty.singular()},
        "events": [],
        "url": format!("{base}/{}/discussions/{num}", id.web_path()),
    });
    if d.is_pr {
        v["changes"] = json!({"base": repo.pr_base(num), "headCommit": refs.prs.get(&num)});
        v["filesWithConflicts"] = json!([]);
        v["diff"] = json!("");
    }
    v
}

/// `POST …/discussions` with `{title, description?, pullRequest?}`.
pub async fn create(state: &HubState, req: Req, id: RepoId) -> HubResult<Response> {
    let repo = state.writable_repo(&id, req.caller.as_ref())?;
    let author = req.caller.as_ref().map(|c| c.user.clone()).unwrap_or_default();
    let body = read_body(req.body, 1 << 20).await?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| HubError::bad_request(format!("Invalid body: {e}")))?;
    let title = v["title"]
        .as_str()
        .filter(|t| t.trim().len() >= 3)
        .ok_or_else(|| HubError::bad_request("A discussion needs a \"title\" of at least 3 characters"))?;
    let is_pr = v["pullRequest"].as_bool().unwrap_or(false);
    let _guard = repo.write.lock().await;
    let base = if is_pr {
        Some(state.store.resolve(&repo, "main")?.commit)
    } else {
        None
    };
    let num = state.store.create_discussion(&repo, title, &author, base)?;
    let refs = repo.refs.read().clone();
    let d = refs
        .discussions
        .get(&num)
        .ok_or_else(|| HubError::internal("discussion vanished"))?;
    Ok(json_response(
        StatusCode::OK,
        &discussion_json(&id, &req.base, num, d, &repo, &refs),
    ))
}

pub async fn get(state: &HubState, req: Req, id: RepoId, num: u64) -> HubResult<Response> {
    let repo = state.readable_repo(&id, req.caller.as_ref())?;
    let refs = repo.refs.read().clone();
    let d = refs
        .discussions
        .get(&num)
        .ok_or_else(|| HubError::EntryNotFound(format!("Discussion {num} not found")))?;
    Ok(json_response(
        StatusCode::OK,
        &discussion_json(&id, &req.base, num, d, &repo, &refs),
    ))
}

pub async fn list(state: &HubState, req: Req, id: RepoId) -> HubResult<Response> {
    let repo = state.readable_repo(&id, req.caller.as_ref())?;
    let refs = repo.refs.read().clone();
    let items: Vec<Value> = refs
        .discussions
        .iter()
        .rev()
        .map(|(n, d)| discussion_json(&id, &req.base, *n, d, &repo, &refs))
        .collect();
    let total = items.len();
    Ok(json_response(
        StatusCode::OK,
        &json!({"discussions": items, "count": total, "start": 0, "numTotalItems": total}),
    ))
}
