//! A local Hub in this process and writable FUSE mounts of its repos, for the tests that check
//! writes from the Hub's side (`fuse_write`, `fuse_metadata`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::{FaultSettings, LocalHub, RouteClass};
use hubfs::process::session::{MountRequest, Mounted, mount};
use hubfs::vfs::{VfsOptions, WriteOptions};
use serde_json::json;
use sha2::{Digest, Sha256};

pub fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

pub fn pseudo(len: usize, seed: u64) -> Vec<u8> {
    hubfs::local_hub::seed::demo_bytes(len, seed)
}

pub struct Env {
    pub rt: tokio::runtime::Runtime,
    pub hub: Option<LocalHub>,
    pub cache: tempfile::TempDir,
    pub _dirs: Vec<tempfile::TempDir>,
}

impl Env {
    pub fn new() -> Env {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let hub = rt.block_on(LocalHub::start_temp(false)).expect("local hub");
        Env {
            rt,
            hub: Some(hub),
            cache: tempfile::tempdir().unwrap(),
            _dirs: Vec::new(),
        }
    }

    pub fn hub(&self) -> &LocalHub {
        self.hub.as_ref().unwrap()
    }

    pub fn client_cfg(&self) -> HubClientConfig {
        HubClientConfig {
            endpoint: self.hub().endpoint().to_string(),
            token: self.hub().write_token(),
            timeout: Duration::from_secs(5),
            max_retries: 1,
            patience: std::time::Duration::ZERO,
            ..HubClientConfig::from_env()
        }
    }

    pub fn client(&self) -> HubClient {
        HubClient::new(self.client_cfg()).unwrap()
    }

    pub fn write_opts(&self, close_waits: bool) -> VfsOptions {
        VfsOptions {
            cache_dir: Some(self.cache.path().join("content")),
            disk_cache_bytes: 1 << 30,
            write: Some(WriteOptions {
                staging_root: self.cache.path().join("staging"),
                status_dir: Some(self.cache.path().join("mounts")),
                upload_timeout: Duration::from_secs(20),
                quiet_period: Duration::from_millis(200),
                close: if close_waits {
                    hubfs::vfs::CloseMode::Commit
                } else {
                    hubfs::vfs::CloseMode::Stage
                },
                ..WriteOptions::default()
            }),
            ..VfsOptions::default()
        }
    }

    pub fn mount_with(&mut self, repo: &str, opts: VfsOptions) -> Mounted {
        let cfg = self.client_cfg();
        self.mount_with_client(repo, opts, cfg)
    }

    pub fn mount_with_client(&mut self, repo: &str, opts: VfsOptions, client: HubClientConfig) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let req = MountRequest {
            repo: repo.to_string(),
            mountpoint: dir.path().to_path_buf(),
            revision: None,
            client,
            vfs: opts,
            allow_other: false,
        };
        // A remount may come while the last mount's committer still finishes a round: it lets
        // go of the staging directory's lock a moment after the unmount returned (a mount in its
        // own process, as users run it, has exited by then).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let m = loop {
            match mount(req.clone(), &self.rt) {
                Ok(m) => break m,
                Err(e) if e.to_string().contains("in use by another") && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => panic!("mount: {e:?}"),
            }
        };
        self._dirs.push(dir);
        m
    }

    pub fn mount_rw(&mut self, repo: &str) -> Mounted {
        let o = self.write_opts(true);
        self.mount_with(repo, o)
    }

    pub fn create_dataset(&self, name: &str) {
        let token = self.hub().write_token().unwrap();
        let url = format!("{}/api/repos/create", self.hub().endpoint());
        self.rt.block_on(async {
            let r = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&json!({"name": name, "organization": "local", "type": "dataset"}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "create repo: {}", r.status());
        });
    }

    /// The staging dir of `local/NAME` at main on this Hub.
    pub fn staging_dir(&self, name: &str) -> PathBuf {
        self.cache
            .path()
            .join("staging/hubs")
            .join(hubfs::write::instance::endpoint_key(self.hub().endpoint()))
            .join("datasets/local")
            .join(name)
            .join("main")
    }

    pub fn repo(name: &str) -> RepoRef {
        RepoRef::dataset(&format!("local/{name}")).unwrap()
    }

    pub fn head(&self, name: &str) -> String {
        self.rt
            .block_on(self.client().repo_info(&Env::repo(name), "main"))
            .unwrap()
            .sha
    }

    /// Path → (size, sha256 of the bytes the Hub serves) at the branch head.
    pub fn hub_files(&self, name: &str) -> std::collections::BTreeMap<String, (u64, String)> {
        let repo = Env::repo(name);
        let head = self.head(name);
        let client = self.client();
        self.rt.block_on(async {
            let mut out = std::collections::BTreeMap::new();
            for e in client.list_tree_recursive(&repo, &head, "").await.unwrap() {
                if let TreeEntry::File { path, size, .. } = e {
                    if path == ".gitattributes" {
                        continue;
                    }
                    let url = format!(
                        "{}/datasets/local/{name}/resolve/{head}/{}",
                        self.hub().endpoint(),
                        hubfs::util::urlenc::encode_path(&path)
                    );
                    let body = reqwest::Client::new()
                        .get(url)
                        .bearer_auth(self.hub().write_token().unwrap())
                        .send()
                        .await
                        .unwrap()
                        .bytes()
                        .await
                        .unwrap();
                    assert_eq!(body.len() as u64, size, "{path}: served size equals the listed size");
                    out.insert(path, (size, sha(&body)));
                }
            }
            out
        })
    }

    /// Sets one route class's fault knobs on the local Hub.
    pub fn fault(&self, class: RouteClass, set: impl FnOnce(&mut FaultSettings)) {
        let mut f = FaultSettings::default();
        set(&mut f);
        self.hub().set_faults(class, f).unwrap();
    }

    /// A commit made by someone else (straight to the Hub API).
    pub fn remote_commit(&self, name: &str, path: &str, text: &str) {
        let body = format!(
            "{}\n{}\n",
            json!({"key": "header", "value": {"summary": "theirs"}}),
            json!({"key": "file", "value": {"path": path, "content": text, "encoding": "utf-8"}})
        );
        self.rt.block_on(async {
            let r = reqwest::Client::new()
                .post(format!(
                    "{}/api/datasets/local/{name}/commit/main",
                    self.hub().endpoint()
                ))
                .bearer_auth(self.hub().write_token().unwrap())
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
        });
    }

    /// Commits on the branch (from the commit list API, every page).
    pub fn commit_count(&self, name: &str) -> usize {
        self.rt.block_on(async {
            let mut total = 0;
            for page in 0.. {
                let url = format!(
                    "{}/api/datasets/local/{name}/commits/main?p={page}&limit=100",
                    self.hub().endpoint()
                );
                let v = get_json(&url, &self.hub().write_token().unwrap()).await;
                let n = v.as_array().map(|a| a.len()).unwrap_or(0);
                total += n;
                if n < 100 {
                    break;
                }
            }
            total
        })
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(h) = self.hub.take() {
            self.rt.block_on(h.stop());
        }
    }
}

/// The JSON answer of a GET with a bearer token (the Hub's API or its CAS).
pub async fn get_json(url: &str, token: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

pub fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

/// Every regular file under `root`, path → (size, sha256).
pub fn local_files(root: &Path) -> std::collections::BTreeMap<String, (u64, String)> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                stack.push(r);
            } else {
                let b = std::fs::read(root.join(&r)).unwrap();
                out.insert(r.to_string_lossy().into_owned(), (b.len() as u64, sha(&b)));
            }
        }
    }
    out.remove(".gitattributes");
    out
}
