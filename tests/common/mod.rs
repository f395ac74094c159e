//! Helpers shared by the local-Hub integration tests: an HTTP client, NDJSON commit lines, repo
//! creation, LFS uploads, Hub-shaped error checks and a handle on the `hubfs local-hub` binary.

#![allow(dead_code)]

pub mod isolated;
pub mod pyenv;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use tokio::io::AsyncBufReadExt;

pub const WRITE: &str = "hf_local_write";
pub const READ: &str = "hf_local_read";

/// A client that never follows redirects (302s to the blob origin are checked by hand) and never
/// uses a proxy. Every request has a deadline so a wedged server fails the test instead of hanging.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .expect("reqwest client")
}

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

pub fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// git's blob id: sha1 of `blob {len}\0` + content.
pub fn git_blob_oid(b: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", b.len()).as_bytes());
    h.update(b);
    hex::encode(h.finalize())
}

/// Deterministic pseudo-random bytes (incompressible, distinct per seed).
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    hubfs::local_hub::seed::demo_bytes(len, seed)
}

/// A repo as the tests address it: type (`model`, `dataset`, `space`) and `ns/name`.
#[derive(Debug, Clone)]
pub struct Repo {
    pub ty: &'static str,
    pub id: String,
}

impl Repo {
    pub fn model(id: &str) -> Repo {
        Repo {
            ty: "model",
            id: id.to_string(),
        }
    }

    pub fn dataset(id: &str) -> Repo {
        Repo {
            ty: "dataset",
            id: id.to_string(),
        }
    }

    pub fn ns(&self) -> &str {
        self.id.split_once('/').unwrap().0
    }

    pub fn name(&self) -> &str {
        self.id.split_once('/').unwrap().1
    }

    /// `{ep}/api/{type}s/{ns}/{name}`
    pub fn api(&self, ep: &str) -> String {
        format!("{ep}/api/{}s/{}", self.ty, self.id)
    }

    /// `{ep}/{prefix}{ns}/{name}` (models have no prefix on web routes).
    pub fn web(&self, ep: &str) -> String {
        match self.ty {
            "model" => format!("{ep}/{}", self.id),
            t => format!("{ep}/{t}s/{}", self.id),
        }
    }

    /// `rev` must already be URL-encoded when it contains `/`.
    pub fn resolve(&self, ep: &str, rev: &str, path: &str) -> String {
        format!("{}/resolve/{rev}/{path}", self.web(ep))
    }
}

pub async fn create_repo(c: &reqwest::Client, ep: &str, token: &str, repo: &Repo, private: bool) -> reqwest::Response {
    let (ns, name) = repo.id.split_once('/').unwrap();
    c.post(format!("{ep}/api/repos/create"))
        .header("authorization", bearer(token))
        .json(&json!({"name": name, "organization": ns, "type": repo.ty, "private": private}))
        .send()
        .await
        .expect("create request")
}

pub async fn create_repo_ok(c: &reqwest::Client, ep: &str, token: &str, repo: &Repo, private: bool) {
    let r = create_repo(c, ep, token, repo, private).await;
    let status = r.status();
    let body = r.text().await.unwrap_or_default();
    assert_eq!(status, StatusCode::OK, "create {}: {body}", repo.id);
}

pub fn header_line(summary: &str, parent: Option<&str>) -> String {
    let mut v = json!({"summary": summary, "description": ""});
    if let Some(p) = parent {
        v["parentCommit"] = json!(p);
    }
    json!({"key": "header", "value": v}).to_string()
}

pub fn file_line(path: &str, content: &[u8]) -> String {
    json!({"key": "file", "value": {
        "path": path,
        "content": base64::engine::general_purpose::STANDARD.encode(content),
        "encoding": "base64",
    }})
    .to_string()
}

pub fn utf8_line(path: &str, text: &str) -> String {
    json!({"key": "file", "value": {"path": path, "content": text, "encoding": "utf-8"}}).to_string()
}

pub fn lfs_line(path: &str, oid: &str, size: u64) -> String {
    json!({"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": oid, "size": size}}).to_string()
}

pub fn deleted_file_line(path: &str) -> String {
    json!({"key": "deletedFile", "value": {"path": path}}).to_string()
}

pub fn deleted_folder_line(path: &str) -> String {
    json!({"key": "deletedFolder", "value": {"path": path}}).to_string()
}

pub fn ndjson(lines: &[String]) -> String {
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// POST a commit; `query` is appended verbatim (e.g. `?create_pr=1`). `rev` must be URL-encoded.
pub async fn commit_raw(
    c: &reqwest::Client,
    ep: &str,
    token: &str,
    repo: &Repo,
    rev: &str,
    query: &str,
    body: String,
) -> reqwest::Response {
    c.post(format!("{}/commit/{rev}{query}", repo.api(ep)))
        .header("authorization", bearer(token))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .expect("commit request")
}

/// A commit that must succeed; returns the response JSON.
pub async fn commit_ok(c: &reqwest::Client, ep: &str, token: &str, repo: &Repo, lines: &[String]) -> Value {
    let r = commit_raw(c, ep, token, repo, "main", "", ndjson(lines)).await;
    let status = r.status();
    let text = r.text().await.unwrap_or_default();
    assert_eq!(status, StatusCode::OK, "commit to {}: {text}", repo.id);
    let v: Value = serde_json::from_str(&text).expect("commit answer is JSON");
    assert_eq!(v["success"], json!(true), "{v}");
    assert_eq!(v["commitOid"].as_str().map(str::len), Some(40), "{v}");
    v
}

/// `sha` of the repo info at `rev` (URL-encoded).
pub async fn head_sha(c: &reqwest::Client, ep: &str, token: Option<&str>, repo: &Repo, rev: &str) -> String {
    let mut req = c.get(format!("{}/revision/{rev}", repo.api(ep)));
    if let Some(t) = token {
        req = req.header("authorization", bearer(t));
    }
    let r = req.send().await.expect("info request");
    assert_eq!(r.status(), StatusCode::OK, "info of {} at {rev}", repo.id);
    let v: Value = r.json().await.unwrap();
    v["sha"].as_str().expect("sha").to_string()
}

/// LFS batch (basic) + PUT to the presigned href + verify; returns the sha256 oid.
pub async fn lfs_upload_basic(c: &reqwest::Client, ep: &str, token: &str, repo: &Repo, data: &[u8]) -> String {
    let oid = sha256_hex(data);
    let size = data.len() as u64;
    let batch = lfs_batch(c, ep, token, repo, &["basic"], &oid, size).await;
    let obj = &batch["objects"][0];
    if let Some(href) = obj["actions"]["upload"]["href"].as_str() {
        let r = c.put(href).body(data.to_vec()).send().await.unwrap();
        assert!(r.status().is_success(), "basic upload: {}", r.status());
        let verify = obj["actions"]["verify"]["href"].as_str().expect("verify href");
        let r = c
            .post(verify)
            .header("authorization", bearer(token))
            .json(&json!({"oid": oid, "size": size}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "verify: {}", r.status());
    }
    oid
}

pub async fn lfs_batch(
    c: &reqwest::Client,
    ep: &str,
    token: &str,
    repo: &Repo,
    transfers: &[&str],
    oid: &str,
    size: u64,
) -> Value {
    let r = c
        .post(format!("{}.git/info/lfs/objects/batch", repo.web(ep)))
        .header("authorization", bearer(token))
        .header("accept", "application/vnd.git-lfs+json")
        .header("content-type", "application/vnd.git-lfs+json")
        .json(&json!({
            "operation": "upload", "transfers": transfers,
            "objects": [{"oid": oid, "size": size}], "hash_algo": "sha256", "ref": {"name": "main"}
        }))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "lfs batch: {text}");
    serde_json::from_str(&text).expect("batch answer is JSON")
}

/// Resolves `path` at `rev`: must be a 302 to the blob origin; follows it and returns the bytes.
pub async fn download_lfs(c: &reqwest::Client, ep: &str, repo: &Repo, rev: &str, path: &str) -> Vec<u8> {
    let r = c.get(repo.resolve(ep, rev, path)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FOUND, "resolve of an LFS file");
    let loc = r.headers()["location"].to_str().unwrap().to_string();
    let r = c.get(&loc).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "blob download");
    r.bytes().await.unwrap().to_vec()
}

/// Asserts a Hub-shaped error: the given status (or any 4xx when `None`), a JSON body with a string
/// `error`, and an `X-Error-Message` on 400s. Returns the headers and body.
pub async fn assert_hub_error(r: reqwest::Response, want: Option<StatusCode>, what: &str) -> (HeaderMap, Value) {
    let status = r.status();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap_or_default();
    match want {
        Some(s) => assert_eq!(status, s, "{what}: body {text}"),
        None => assert!(status.is_client_error(), "{what}: expected a 4xx, got {status}: {text}"),
    }
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: error body is not JSON ({e}): {text:?}"));
    assert!(v["error"].is_string(), "{what}: no \"error\" in {v}");
    if status == StatusCode::BAD_REQUEST {
        assert!(
            headers.contains_key("x-error-message"),
            "{what}: 400 without X-Error-Message"
        );
    }
    (headers, v)
}

pub fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// `hubfs local-hub` run as a child process (killed on drop).
pub struct CliHub {
    pub child: tokio::process::Child,
    pub endpoint: String,
    _stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

/// Spawns `hubfs local-hub --data-dir DIR ARGS…` and waits for its `endpoint:` line. stderr goes to
/// `stderr_to` when given (a file, so the child never blocks on a full pipe), else to /dev/null.
pub async fn spawn_cli(data_dir: &Path, args: &[&str], env: &[(&str, &str)], stderr_to: Option<&Path>) -> CliHub {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_hubfs"));
    cmd.arg("local-hub").arg("--data-dir").arg(data_dir).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).kill_on_drop(true);
    match stderr_to {
        Some(p) => {
            let f = std::fs::File::create(p).expect("stderr file");
            cmd.stderr(Stdio::from(f));
        }
        None => {
            cmd.stderr(Stdio::null());
        }
    }
    let mut child = cmd.spawn().expect("spawn hubfs local-hub");
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    let endpoint = loop {
        let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .expect("local-hub did not print its endpoint within 60 s")
            .expect("reading local-hub stdout");
        match line {
            Some(l) => {
                if let Some(ep) = l.strip_prefix("endpoint: ") {
                    break ep.trim().to_string();
                }
            }
            None => {
                let status = child.wait().await;
                panic!("local-hub exited before printing its endpoint: {status:?}");
            }
        }
    };
    CliHub {
        child,
        endpoint,
        _stdout: lines,
    }
}

impl CliHub {
    /// SIGKILL, then reap.
    pub async fn kill9(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// Runs `hubfs ARGS…` to completion (with a deadline); returns (exit success, stdout+stderr).
pub async fn run_cli(args: &[&str]) -> (bool, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_hubfs"))
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("hubfs did not exit within 30 s")
    .expect("run hubfs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Sends a raw HTTP/1.1 request line (path sent byte-for-byte, no client-side normalisation) and
/// returns (status, whole response text).
pub async fn raw_request(endpoint: &str, method: &str, path: &str, extra_headers: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = endpoint.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra_headers}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf))
        .await
        .expect("raw request hung")
        .expect("raw read");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, text)
}

/// An NFSv3 client connection (userspace, nfs3_client) to a hubfs NFS server.
pub type NfsConn = nfs3_client::Nfs3Connection<nfs3_client::tokio::TokioIo<tokio::net::TcpStream>>;

/// MOUNT `/` on the loopback NFS server at `port` (NFS and MOUNT share it), bounded at 20 s; the
/// error says which step failed.
pub async fn nfs_mount(port: u16) -> Result<NfsConn, String> {
    tokio::time::timeout(
        Duration::from_secs(20),
        nfs3_client::Nfs3ConnectionBuilder::new(nfs3_client::tokio::TokioConnector, "127.0.0.1", "/")
            .connect_from_privileged_port(false)
            .mount_port(port)
            .nfs3_port(port)
            .mount(),
    )
    .await
    .map_err(|_| "MOUNT did not answer within 20 s".to_string())?
    .map_err(|e| format!("MOUNT: {e:?}"))
}

/// Creates `repo` (a model or dataset repo) holding each `(path, content)` of `files`, uploaded in
/// one commit by the hf-hub crate, which stores binary files through Xet as `upload_folder` does.
pub async fn upload_xet_files(ep: &str, repo: &Repo, files: &[(String, Vec<u8>)]) {
    let cache = tempfile::tempdir().unwrap();
    let c = hf_hub::HFClient::builder()
        .endpoint(ep)
        .token(WRITE)
        .cache_dir(cache.path())
        .build()
        .unwrap();
    let ops: Vec<_> = files
        .iter()
        .map(|(path, content)| hf_hub::repository::CommitOperation::Add {
            path_in_repo: path.clone(),
            source: hf_hub::repository::AddSource::Bytes(content.clone().into()),
        })
        .collect();
    if repo.ty == "dataset" {
        c.create_repository()
            .repo_id(&repo.id)
            .repo_type(hf_hub::RepoTypeDataset)
            .send()
            .await
            .unwrap();
        let (ns, name) = repo.id.split_once('/').unwrap();
        c.dataset(ns, name)
            .create_commit()
            .operations(ops)
            .commit_message("small files")
            .send()
            .await
            .unwrap();
    } else {
        c.create_repository()
            .repo_id(&repo.id)
            .repo_type(hf_hub::RepoTypeModel)
            .send()
            .await
            .unwrap();
        let (ns, name) = repo.id.split_once('/').unwrap();
        c.model(ns, name)
            .create_commit()
            .operations(ops)
            .commit_message("small files")
            .send()
            .await
            .unwrap();
    }
}

/// The whole file the disk tier made under `cache`, once it is there.
pub fn wait_whole(cache: &Path) -> std::path::PathBuf {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(p) = find_whole(&cache.join("blocks")) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "no whole file appeared under {}",
            cache.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first disk-tier whole file (`HASH.whole`) under `dir`.
pub fn find_whole(dir: &Path) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(w) = find_whole(&p) {
                return Some(w);
            }
        } else if p.extension().is_some_and(|x| x == "whole") {
            return Some(p);
        }
    }
    None
}
