//! JSON API calls: repo info, tree listings (paginated by `Link`), paths-info.

use bytes::Bytes;
use reqwest::Method;
use serde::de::DeserializeOwned;
use url::Url;

use super::error::{ErrorContext, HubClientError};
use super::http::{Reply, Request};
use super::types::{RawBucketEntry, RawEntry, RawInfo, RepoInfo, TreeEntry, parse_date};
use super::{HubClient, RepoRef, at_rev, check_path, check_rev, encode_path, encode_revision};

/// Paths per paths-info request (the Hub's limit).
pub const PATHS_INFO_BATCH: usize = 1000;
/// Safety net against a `Link` chain that never ends (10 million entries at 1,000 a page).
const MAX_PAGES: usize = 10_000;

impl HubClient {
    /// `GET /api/{kind}s/{ns}/{name}/revision/{rev}`: the commit a revision points at, its date, and
    /// whether the repo is private.
    pub async fn repo_info(&self, repo: &RepoRef, revision: &str) -> Result<RepoInfo, HubClientError> {
        check_rev(repo, revision)?;
        if repo.is_bucket() {
            return self.bucket_info(repo).await;
        }
        let ctx = ErrorContext::call("GET", repo, Some(revision), None);
        let url = self.api_url(repo, &format!("/revision/{}", encode_revision(revision)))?;
        let reply = self.inner.http.send(&Request::get(url), &ctx).await?;
        let raw: RawInfo = parse_json(&reply, &ctx)?;
        let sha = raw
            .sha
            .filter(|s| !s.is_empty())
            .ok_or_else(|| HubClientError::invalid(&ctx, "repo info has no sha"))?;
        Ok(RepoInfo {
            sha,
            last_modified: raw.last_modified.as_deref().and_then(parse_date),
            private: raw.private,
            instance_id: raw.id.filter(|s| !s.is_empty()),
            created_at: raw.created_at.filter(|s| !s.is_empty()),
        })
    }

    /// The entries directly under `path` ("" = repo root), every page. A missing path (or a file)
    /// is `Err(NotFound)`.
    pub async fn list_dir(&self, repo: &RepoRef, commit: &str, path: &str) -> Result<Vec<TreeEntry>, HubClientError> {
        self.list_tree(repo, commit, path, false).await
    }

    /// Every file and directory below `path` ("" = repo root), every page.
    pub async fn list_tree_recursive(
        &self,
        repo: &RepoRef,
        commit: &str,
        path: &str,
    ) -> Result<Vec<TreeEntry>, HubClientError> {
        self.list_tree(repo, commit, path, true).await
    }

    async fn list_tree(
        &self,
        repo: &RepoRef,
        commit: &str,
        path: &str,
        recursive: bool,
    ) -> Result<Vec<TreeEntry>, HubClientError> {
        check_rev(repo, commit)?;
        let path = check_path(repo, path, true)?;
        let ctx = ErrorContext::call("GET", repo, Some(commit), Some(path));
        let mut tail = format!("/{}", at_rev(repo, "tree", commit));
        if !path.is_empty() {
            tail.push('/');
            tail.push_str(&encode_path(path));
        }
        if repo.is_bucket() {
            tail.push_str(&format!("?recursive={recursive}"));
        } else {
            tail.push_str(&format!("?recursive={recursive}&expand={}", self.inner.tree_expand));
        }
        let mut url = self.api_url(repo, &tail)?;
        let mut out = Vec::new();
        for _ in 0..MAX_PAGES {
            let reply = self.inner.http.send(&Request::get(url.clone()), &ctx).await?;
            if repo.is_bucket() {
                let page: Vec<RawBucketEntry> = parse_json(&reply, &ctx)?;
                // A bucket's tree matches the prefix as a raw key (`a/x` also lists `a/x#1`):
                // keep what is below the directory asked for.
                out.extend(
                    page.into_iter()
                        .filter_map(RawBucketEntry::into_entry)
                        .filter(|e| below(path, e.path())),
                );
            } else {
                let page: Vec<RawEntry> = parse_json(&reply, &ctx)?;
                out.extend(page.into_iter().filter_map(RawEntry::into_entry));
            }
            match reply.header("link").and_then(next_link) {
                // The Hub sends an absolute URL, fetched verbatim; a relative one is resolved.
                Some(next) => {
                    url = reply
                        .url
                        .join(&next)
                        .map_err(|e| HubClientError::invalid(&ctx, format!("bad Link URL: {e}")))?;
                }
                None => return Ok(out),
            }
        }
        Err(HubClientError::invalid(&ctx, "tree listing does not end"))
    }

    /// `POST /api/{kind}s/{ns}/{name}/paths-info/{rev}` with `{"paths": [...]}`, in batches of 1,000.
    /// Paths that do not exist are left out of the answer; folders are allowed.
    pub async fn paths_info(
        &self,
        repo: &RepoRef,
        commit: &str,
        paths: &[String],
    ) -> Result<Vec<TreeEntry>, HubClientError> {
        check_rev(repo, commit)?;
        let clean = paths
            .iter()
            .map(|p| check_path(repo, p, false))
            .collect::<Result<Vec<&str>, _>>()?;
        let ctx = ErrorContext::call("POST", repo, Some(commit), None);
        let url: Url = self.api_url(repo, &format!("/{}", at_rev(repo, "paths-info", commit)))?;
        let mut out = Vec::new();
        for batch in clean.chunks(PATHS_INFO_BATCH) {
            let mut ctx = ctx.clone();
            if let [only] = batch {
                ctx.path = Some(only.to_string());
            }
            let body = serde_json::to_vec(&serde_json::json!({ "paths": batch, "expand": self.inner.tree_expand }))
                .map_err(|e| HubClientError::bad_input("paths", e.to_string()))?;
            let req = Request {
                method: Method::POST,
                body: Some(("application/json", Bytes::from(body))),
                ..Request::get(url.clone())
            };
            let reply = self.inner.http.send(&req, &ctx).await?;
            if repo.is_bucket() {
                let entries: Vec<RawBucketEntry> = parse_json(&reply, &ctx)?;
                out.extend(entries.into_iter().filter_map(RawBucketEntry::into_entry));
            } else {
                let entries: Vec<RawEntry> = parse_json(&reply, &ctx)?;
                out.extend(entries.into_iter().filter_map(RawEntry::into_entry));
            }
        }
        Ok(out)
    }
}

impl HubClient {
    /// `POST /api/{kind}s/{repo}/branch/{name}` with `startingPoint`: creates a branch at a commit
    /// (an existing branch answers 409: `Conflict`).
    pub async fn create_branch(&self, repo: &RepoRef, name: &str, starting_point: &str) -> Result<(), HubClientError> {
        check_rev(repo, name)?;
        let ctx = ErrorContext::call("POST", repo, Some(name), None);
        let url = self.api_url(repo, &format!("/branch/{}", encode_revision(name)))?;
        let body = serde_json::to_vec(&serde_json::json!({ "startingPoint": starting_point }))
            .map_err(|e| HubClientError::bad_input("branch", e.to_string()))?;
        let req = Request {
            method: Method::POST,
            body: Some(("application/json", Bytes::from(body))),
            long_wait_fails: true,
            ..Request::get(url)
        };
        let reply = self.inner.http.send(&req, &ctx).await?;
        if !reply.status.is_success() {
            return Err(HubClientError::invalid(
                &ctx,
                format!("creating the branch answered {}", reply.status),
            ));
        }
        Ok(())
    }
}

/// Whether `entry` lies below directory `dir` ("" = the root).
fn below(dir: &str, entry: &str) -> bool {
    dir.is_empty() || entry.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

/// A 2xx JSON answer; a redirect to another origin or a bad body is an invalid response.
pub(crate) fn parse_json<T: DeserializeOwned>(reply: &Reply, ctx: &ErrorContext) -> Result<T, HubClientError> {
    if !reply.status.is_success() {
        return Err(HubClientError::InvalidResponse {
            ctx: Box::new(ErrorContext {
                status: Some(reply.status.as_u16()),
                message: Some("unexpected answer (a redirect to another origin?)".to_string()),
                ..ctx.clone()
            }),
        });
    }
    serde_json::from_slice(&reply.body).map_err(|e| HubClientError::invalid(ctx, format!("invalid JSON: {e}")))
}

/// The `rel="next"` target of a `Link` header (`<URL>; rel="next", <URL2>; rel="prev"`).
pub(crate) fn next_link(header: &str) -> Option<String> {
    let mut rest = header;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let close = after.find('>')?;
        let target = &after[..close];
        let params_all = &after[close + 1..];
        let params = &params_all[..params_all.find('<').unwrap_or(params_all.len())];
        let is_next = params.split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim();
            p.strip_prefix("rel=")
                .map(|v| {
                    v.trim_matches('"')
                        .split_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
                })
                .unwrap_or(false)
        });
        if is_next {
            return Some(target.to_string());
        }
        rest = params_all;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers() {
        assert_eq!(
            next_link("<http://h/a?cursor=x,y>; rel=\"next\"").as_deref(),
            Some("http://h/a?cursor=x,y")
        );
        assert_eq!(
            next_link("<http://h/p>; rel=\"prev\", <http://h/n>; rel=\"next\"").as_deref(),
            Some("http://h/n")
        );
        assert_eq!(next_link("<http://h/p>; rel=\"prev\""), None);
        assert_eq!(next_link("<http://h/x>; rel=next").as_deref(), Some("http://h/x"));
        assert_eq!(next_link("garbage"), None);
    }
}
