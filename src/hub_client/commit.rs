//! Write calls: preupload (which files the Hub wants as LFS), Xet write tokens and NDJSON commits.
//!
//! A commit POST is not idempotent: if an answer is lost and the retry finds the branch moved
//! (412), the caller checks whether its own commit landed (see `write::committer`).

use base64::Engine;
use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::Deserialize;

use super::api::parse_json;
use super::error::{ErrorContext, HubClientError};
use super::http::Request;
use super::types::XetToken;
use super::{HubClient, RepoRef, check_path, check_rev, encode_revision};

/// Files per preupload request (what the Python client sends).
pub const PREUPLOAD_BATCH: usize = 256;
/// Bytes of a file's start sent to preupload so the Hub can tell text from binary.
pub const SAMPLE_BYTES: usize = 512;

/// One file offered to preupload.
#[derive(Debug, Clone)]
pub struct PreuploadFile {
    pub path: String,
    pub size: u64,
    /// The first [`SAMPLE_BYTES`] of the content.
    pub sample: Vec<u8>,
}

/// The Hub's answer for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadMode {
    pub path: String,
    /// Store through LFS/Xet (else inline in the commit).
    pub lfs: bool,
    /// The oid the path has on the branch now (sha256 for LFS files, git sha1 otherwise).
    pub remote_oid: Option<String>,
}

/// One operation of a commit.
#[derive(Debug, Clone)]
pub enum CommitOp {
    /// Content sent inline (base64) in the commit.
    Inline {
        path: String,
        content: Bytes,
    },
    /// Content already uploaded (Xet/LFS), named by its sha256.
    Lfs {
        path: String,
        sha256: String,
        size: u64,
    },
    DeleteFile {
        path: String,
    },
}

impl CommitOp {
    pub fn path(&self) -> &str {
        match self {
            CommitOp::Inline { path, .. } | CommitOp::Lfs { path, .. } | CommitOp::DeleteFile { path } => path,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct CommitRequest {
    pub summary: String,
    pub description: String,
    /// The commit the change was made against; the Hub answers 412 if the branch moved, except
    /// with `create_pr`, where the pull request is made from this commit.
    pub parent: Option<String>,
    /// Open a pull request (`refs/pr/N`) instead of moving the branch, which then stays as it is.
    pub create_pr: bool,
    pub ops: Vec<CommitOp>,
}

/// What the Hub answered to a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitAnswer {
    /// The new commit's id.
    pub commit: String,
    /// The pull request's page (`…/discussions/N`) when the commit opened one.
    pub pr_url: Option<String>,
    /// `N` of that pull request's `refs/pr/N`, from the URL's last segment.
    pub pr_num: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct RawPreuploadFile {
    path: String,
    #[serde(rename = "uploadMode")]
    upload_mode: String,
    #[serde(default)]
    oid: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawPreupload {
    files: Vec<RawPreuploadFile>,
}

#[derive(Debug, Deserialize)]
struct RawCommitAnswer {
    #[serde(rename = "commitOid")]
    commit_oid: Option<String>,
    #[serde(rename = "pullRequestUrl", default)]
    pull_request_url: Option<String>,
}

impl RawCommitAnswer {
    /// `None` when the answer has no valid commit id (nothing else can be trusted then).
    fn answer(self) -> Option<CommitAnswer> {
        let commit = self.commit_oid.filter(|o| super::is_commit_id(o))?;
        let pr_url = self.pull_request_url.filter(|u| !u.is_empty());
        // The Hub's PR URL ends in the discussion number, which is also N of refs/pr/N.
        let pr_num = pr_url
            .as_deref()
            .and_then(|u| u.trim_end_matches('/').rsplit('/').next())
            .and_then(|n| n.parse().ok());
        Some(CommitAnswer { commit, pr_url, pr_num })
    }
}

impl HubClient {
    /// `POST /api/{kind}s/{repo}/preupload/{rev}`, in batches of `PREUPLOAD_BATCH`.
    pub async fn preupload(
        &self,
        repo: &RepoRef,
        revision: &str,
        files: &[PreuploadFile],
    ) -> Result<Vec<UploadMode>, HubClientError> {
        check_rev(repo, revision)?;
        let ctx = ErrorContext::call("POST", repo, Some(revision), None);
        let url = self.api_url(repo, &format!("/preupload/{}", encode_revision(revision)))?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut out = Vec::with_capacity(files.len());
        for batch in files.chunks(PREUPLOAD_BATCH) {
            let mut payload = Vec::with_capacity(batch.len());
            for f in batch {
                check_path(repo, &f.path, false)?;
                payload.push(serde_json::json!({"path": f.path, "size": f.size, "sample": b64.encode(&f.sample)}));
            }
            let body = serde_json::to_vec(&serde_json::json!({ "files": payload }))
                .map_err(|e| HubClientError::bad_input("preupload", e.to_string()))?;
            let req = Request {
                method: Method::POST,
                body: Some(("application/json", Bytes::from(body))),
                ..Request::get(url.clone())
            };
            let reply = self.inner.http.send(&req, &ctx).await?;
            let raw: RawPreupload = parse_json(&reply, &ctx)?;
            for f in raw.files {
                let lfs = match f.upload_mode.as_str() {
                    "lfs" => true,
                    "regular" => false,
                    other => {
                        return Err(HubClientError::invalid(&ctx, format!("unknown uploadMode {other:?}")));
                    }
                };
                out.push(UploadMode {
                    path: f.path,
                    lfs,
                    remote_oid: f.oid.filter(|o| !o.is_empty()),
                });
            }
        }
        Ok(out)
    }

    /// `GET /api/{kind}s/{repo}/xet-write-token/{rev}` (never cached: one per upload session).
    pub async fn xet_write_token(&self, repo: &RepoRef, revision: &str) -> Result<XetToken, HubClientError> {
        let url = self.xet_write_token_url(repo, revision)?;
        let ctx = ErrorContext::call("GET", repo, Some(revision), None);
        let reply = self.inner.http.send(&Request::get(url), &ctx).await?;
        super::xet_token::token_from_reply(&reply, &ctx)
    }

    /// The URL the xet crates call to refresh a write token during a long upload.
    pub fn xet_write_token_url(&self, repo: &RepoRef, revision: &str) -> Result<url::Url, HubClientError> {
        check_rev(repo, revision)?;
        self.api_url(repo, &format!("/{}", super::at_rev(repo, "xet-write-token", revision)))
    }

    /// The Authorization header for requests made on our behalf by the xet crates (token refresh).
    pub fn auth_headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = self.inner.http.auth_header() {
            h.insert(AUTHORIZATION, t);
        }
        h
    }

    /// `POST /api/{kind}s/{repo}/commit/{rev}` (NDJSON). Returns the new commit id.
    pub async fn commit(&self, repo: &RepoRef, branch: &str, req: &CommitRequest) -> Result<String, HubClientError> {
        Ok(self.commit_answer(repo, branch, req).await?.commit)
    }

    /// `POST /api/{kind}s/{repo}/commit/{rev}[?create_pr=1]` (NDJSON). Returns the new commit id
    /// and, when `req.create_pr` opened a pull request, its URL and number.
    pub async fn commit_answer(
        &self,
        repo: &RepoRef,
        branch: &str,
        req: &CommitRequest,
    ) -> Result<CommitAnswer, HubClientError> {
        check_rev(repo, branch)?;
        let ctx = ErrorContext::call("POST", repo, Some(branch), None);
        let mut url = self.api_url(repo, &format!("/commit/{}", encode_revision(branch)))?;
        if req.create_pr {
            url.query_pairs_mut().append_pair("create_pr", "1");
        }
        let body = ndjson(repo, req)?;
        let http_req = Request {
            method: Method::POST,
            body: Some(("application/x-ndjson", Bytes::from(body))),
            long_wait_fails: true,
            ..Request::get(url)
        };
        let reply = self.inner.http.send(&http_req, &ctx).await?;
        let raw: RawCommitAnswer = parse_json(&reply, &ctx)?;
        raw.answer()
            .ok_or_else(|| HubClientError::invalid(&ctx, "commit answer has no commitOid"))
    }
}

/// The NDJSON body of a commit.
fn ndjson(repo: &RepoRef, req: &CommitRequest) -> Result<Vec<u8>, HubClientError> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut header = serde_json::json!({"summary": req.summary, "description": req.description});
    if let Some(p) = &req.parent {
        header["parentCommit"] = serde_json::Value::String(p.clone());
    }
    let mut lines = vec![serde_json::json!({"key": "header", "value": header})];
    for op in &req.ops {
        check_path(repo, op.path(), false)?;
        lines.push(match op {
            CommitOp::Inline { path, content } => serde_json::json!({
                "key": "file",
                "value": {"path": path, "content": b64.encode(content), "encoding": "base64"}
            }),
            CommitOp::Lfs { path, sha256, size } => serde_json::json!({
                "key": "lfsFile",
                "value": {"path": path, "algo": "sha256", "oid": sha256, "size": size}
            }),
            CommitOp::DeleteFile { path } => serde_json::json!({"key": "deletedFile", "value": {"path": path}}),
        });
    }
    let mut out = Vec::new();
    for l in lines {
        serde_json::to_writer(&mut out, &l).map_err(|e| HubClientError::bad_input("commit", e.to_string()))?;
        out.push(b'\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub_client::RepoKind;

    #[test]
    fn ndjson_lines_are_the_hub_shape() {
        let repo = RepoRef::new(RepoKind::Dataset, "ns", "d");
        let req = CommitRequest {
            summary: "s".into(),
            description: String::new(),
            parent: Some("a".repeat(40)),
            create_pr: false,
            ops: vec![
                CommitOp::Inline {
                    path: "x/y.txt".into(),
                    content: Bytes::from_static(b"hi"),
                },
                CommitOp::Lfs {
                    path: "big.bin".into(),
                    sha256: "b".repeat(64),
                    size: 7,
                },
                CommitOp::DeleteFile { path: "old".into() },
            ],
        };
        let body = String::from_utf8(ndjson(&repo, &req).unwrap()).unwrap();
        let lines: Vec<serde_json::Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["value"]["parentCommit"], "a".repeat(40));
        assert_eq!(lines[1]["key"], "file");
        assert_eq!(lines[1]["value"]["content"], "aGk=");
        assert_eq!(lines[2]["key"], "lfsFile");
        assert_eq!(lines[2]["value"]["size"], 7);
        assert_eq!(lines[3]["key"], "deletedFile");
        let bad = CommitRequest {
            ops: vec![CommitOp::DeleteFile { path: "../x".into() }],
            ..Default::default()
        };
        assert!(ndjson(&repo, &bad).is_err(), "a path escaping the repo is refused");
    }

    #[test]
    fn commit_answer_reads_the_pull_request() {
        let parse = |v: serde_json::Value| serde_json::from_value::<RawCommitAnswer>(v).unwrap().answer();
        let oid = "c".repeat(40);
        let a = parse(serde_json::json!({
            "success": true,
            "commitOid": oid,
            "commitUrl": format!("https://hub.example/ns/m/commit/{oid}"),
            "pullRequestUrl": "https://hub.example/datasets/ns/d/discussions/12",
        }))
        .expect("answer");
        assert_eq!(a.commit, oid);
        assert_eq!(
            a.pr_url.as_deref(),
            Some("https://hub.example/datasets/ns/d/discussions/12")
        );
        assert_eq!(a.pr_num, Some(12));
        // A plain commit: no PR; an empty or odd PR URL gives no number.
        let a = parse(serde_json::json!({"commitOid": oid})).expect("answer");
        assert_eq!((a.pr_url, a.pr_num), (None, None));
        let a = parse(serde_json::json!({"commitOid": oid, "pullRequestUrl": ""})).expect("answer");
        assert_eq!((a.pr_url, a.pr_num), (None, None));
        let a =
            parse(serde_json::json!({"commitOid": oid, "pullRequestUrl": "https://h/x/discussions/"})).expect("answer");
        assert_eq!(a.pr_num, None);
        assert!(parse(serde_json::json!({"commitOid": "nope"})).is_none());
    }
}
