//! The real things the micro-benchmarks run against: an in-process local Hub holding one repo with
//! directories of 100, 1,000 and 5,000 files, and `VirtualFs` instances over it, so listings,
//! lookups and attributes come from the same code and data a mount serves.

use std::sync::Arc;
use std::time::Duration;

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef};
use hubfs::local_hub::{LocalHub, RouteClass};
use hubfs::vfs::{Ino, ROOT_INO, VfsOptions, VirtualFs};
use serde_json::json;

/// Directory sizes the readdir benchmarks compare.
pub const SIZES: [usize; 3] = [100, 1_000, 5_000];

/// The directory the lookup and getattr benchmarks use.
pub const LOOKUP_DIR_SIZE: usize = 1_000;

/// Bytes of every file (all files share one git object: only metadata matters here).
pub const FILE_CONTENT: &str = "micro\n";

const REPO: &str = "local/micro";

pub fn dir_name(n: usize) -> String {
    format!("d{n}")
}

/// Names shaped like a sharded dataset's (`train-00042-of-01000.parquet`).
pub fn file_name(i: usize, n: usize) -> String {
    format!("train-{i:05}-of-{n:05}.parquet")
}

pub struct Fixture {
    pub rt: tokio::runtime::Runtime,
    hub: Option<LocalHub>,
}

impl Fixture {
    /// Starts the local Hub and commits the repo (one NDJSON commit of every file).
    pub fn start() -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let hub = rt.block_on(LocalHub::start_temp(false)).expect("local hub");
        let (ep, token) = (hub.endpoint().to_string(), hub.write_token().unwrap());
        rt.block_on(async {
            let c = reqwest::Client::builder().no_proxy().build().unwrap();
            let (ns, name) = REPO.split_once('/').unwrap();
            let r = c
                .post(format!("{ep}/api/repos/create"))
                .bearer_auth(&token)
                .json(&json!({"name": name, "organization": ns, "type": "model"}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "create repo: {}", r.status());
            let mut body = json!({"key": "header", "value": {"summary": "micro-benchmark tree"}}).to_string();
            body.push('\n');
            for n in SIZES {
                for i in 0..n {
                    let path = format!("{}/{}", dir_name(n), file_name(i, n));
                    let line =
                        json!({"key": "file", "value": {"path": path, "content": FILE_CONTENT, "encoding": "utf-8"}});
                    body.push_str(&line.to_string());
                    body.push('\n');
                }
            }
            let r = c
                .post(format!("{ep}/api/models/{REPO}/commit/main"))
                .bearer_auth(&token)
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status();
            assert!(
                status.is_success(),
                "commit: {status} {}",
                r.text().await.unwrap_or_default()
            );
        });
        Fixture { rt, hub: Some(hub) }
    }

    pub fn hub(&self) -> &LocalHub {
        self.hub.as_ref().unwrap()
    }

    /// Requests the Hub has answered so far, over every origin.
    pub fn hub_requests(&self) -> u64 {
        RouteClass::ALL.iter().map(|c| self.hub().stats(*c).requests).sum()
    }

    /// A fresh read-only VirtualFs of the repo at `main` (empty caches). The metadata TTL is long so
    /// a measurement never includes the branch re-resolution a real mount does once a minute.
    pub fn vfs(&self) -> Arc<VirtualFs> {
        let cfg = HubClientConfig {
            endpoint: self.hub().endpoint().to_string(),
            token: self.hub().write_token(),
            timeout: Duration::from_secs(30),
            max_retries: 1,
            patience: std::time::Duration::ZERO,
            ..HubClientConfig::default()
        };
        let client = HubClient::new(cfg).unwrap();
        let opts = VfsOptions {
            metadata_ttl: Duration::from_secs(86_400),
            ..VfsOptions::default()
        };
        let repo = RepoRef::model(REPO).unwrap();
        Arc::new(
            self.rt
                .block_on(VirtualFs::new(client, repo, "main", None, opts))
                .unwrap(),
        )
    }

    /// The inode of directory `d{n}` (a counted lookup, as the kernel's).
    pub fn dir_ino(&self, vfs: &VirtualFs, n: usize) -> Ino {
        self.rt.block_on(vfs.lookup(ROOT_INO, &dir_name(n))).unwrap().ino
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(h) = self.hub.take() {
            self.rt.block_on(h.stop());
        }
    }
}
