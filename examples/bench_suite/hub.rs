//! The local Hub's side of the suite: the repos the jobs read, the two network profiles, the raw
//! range throughput that bounds every cold read, and the request/byte counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, FaultSettings, LocalHub, RouteClass};

/// A network between hubfs and the Hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    Loopback,
    /// 30 ms per request on every route; 200 Mbit/s per connection for downloads and the CAS.
    Realistic,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Loopback => "loopback",
            Profile::Realistic => "realistic (30 ms, 200 Mbit/s per connection)",
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            Profile::Loopback => "loopback",
            Profile::Realistic => "realistic",
        }
    }

    pub fn apply(self, hub: &LocalHub) -> anyhow::Result<()> {
        hub.clear_faults();
        if self == Profile::Realistic {
            let slow = FaultSettings {
                latency_ms: 30,
                bandwidth_mbps: 200.0,
                ..Default::default()
            };
            let latency = FaultSettings {
                latency_ms: 30,
                ..Default::default()
            };
            for (class, s) in [
                (RouteClass::Cas, &slow),
                (RouteClass::Resolve, &slow),
                (RouteClass::Api, &latency),
                (RouteClass::Commit, &latency),
            ] {
                hub.set_faults(class, s.clone()).map_err(anyhow::Error::msg)?;
            }
        }
        Ok(())
    }
}

/// Requests answered and body bytes sent by the Hub (every origin) since the last reset.
pub fn counters(hub: &LocalHub) -> (u64, u64) {
    RouteClass::ALL.iter().fold((0, 0), |(r, b), c| {
        let s = hub.stats(*c);
        (r + s.requests, b + s.bytes_out)
    })
}

/// What the read repo holds, by path.
pub struct ReadRepo {
    pub id: String,
    pub five: Vec<String>,
    pub small_size: u64,
}

/// Creates model repo `local/bench-read` through the hf-hub crate (Xet uploads, as a stock client):
/// `big.bin`, `huge.bin`, five files under `five/` and many small ones, `small/s0.bin`,
/// `small/s1.bin`… (fio's `filename_format` names them by number).
pub async fn seed_read_repo(
    ep: &str,
    big: u64,
    huge: u64,
    five_size: u64,
    small_count: usize,
) -> anyhow::Result<ReadRepo> {
    use hf_hub::repository::{AddSource, CommitOperation};
    use hubfs::local_hub::seed::demo_bytes;
    let cache = tempfile::tempdir()?;
    let c = hf_hub::HFClient::builder()
        .endpoint(ep)
        .token(DEFAULT_WRITE_TOKEN)
        .cache_dir(cache.path())
        .build()?;
    c.create_repository()
        .repo_id("local/bench-read")
        .repo_type(hf_hub::RepoTypeModel)
        .send()
        .await?;
    let small_size = 4096u64;
    let five: Vec<String> = (0..5).map(|i| format!("five/f{i}.bin")).collect();
    let small: Vec<String> = (0..small_count).map(|i| format!("small/s{i}.bin")).collect();
    let add = |path: &str, len: u64, seed: u64| CommitOperation::Add {
        path_in_repo: path.into(),
        source: AddSource::Bytes(demo_bytes(len as usize, seed).into()),
    };
    let mut ops = vec![add("big.bin", big, 1), add("huge.bin", huge, 2)];
    ops.extend(five.iter().enumerate().map(|(i, p)| add(p, five_size, 10 + i as u64)));
    ops.extend(
        small
            .iter()
            .enumerate()
            .map(|(i, p)| add(p, small_size, 1000 + i as u64)),
    );
    c.model("local", "bench-read")
        .create_commit()
        .operations(ops)
        .commit_message("bench files")
        .send()
        .await?;
    Ok(ReadRepo {
        id: "local/bench-read".into(),
        five,
        small_size,
    })
}

/// Creates an empty dataset `local/NAME` for a writable mount.
pub async fn create_dataset(ep: &str, name: &str) -> anyhow::Result<String> {
    let body = serde_json::json!({"name": name, "organization": "local", "type": "dataset"});
    let r = reqwest::Client::new()
        .post(format!("{ep}/api/repos/create"))
        .bearer_auth(DEFAULT_WRITE_TOKEN)
        .json(&body)
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("create dataset {name}: {}", r.status());
    }
    Ok(format!("datasets/local/{name}"))
}

/// Commits on `main` of dataset `local/NAME`.
pub async fn commit_count(ep: &str, name: &str) -> anyhow::Result<usize> {
    let http = reqwest::Client::new();
    let mut n = 0;
    for p in 0.. {
        let url = format!("{ep}/api/datasets/local/{name}/commits/main?p={p}&limit=1000");
        let v: serde_json::Value = http
            .get(url)
            .bearer_auth(DEFAULT_WRITE_TOKEN)
            .send()
            .await?
            .json()
            .await?;
        let len = v.as_array().map_or(0, |a| a.len());
        n += len;
        if len < 1000 {
            break;
        }
    }
    Ok(n)
}

/// The blob URL a `/resolve/` of `path` in the read repo redirects to (where its bytes come from).
pub async fn blob_url(ep: &str, repo: &str, path: &str) -> anyhow::Result<String> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let r = http
        .head(format!("{ep}/{repo}/resolve/main/{path}"))
        .bearer_auth(DEFAULT_WRITE_TOKEN)
        .send()
        .await?;
    let loc = r.headers().get("location").context("no redirect for a Xet file")?;
    Ok(loc.to_str()?.to_string())
}

/// Reads `size` bytes at `url` as 8 MiB ranges with 8 parallel connections; bytes per second.
/// The Hub-side ceiling of cold reads: what the Hub serves to a client that only downloads.
pub async fn range_throughput(url: &str, size: u64) -> anyhow::Result<f64> {
    const PART: u64 = 8 << 20;
    const PARALLEL: usize = 8;
    let http = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..PARALLEL {
        let (http, url, next) = (http.clone(), url.to_string(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = 0u64;
            loop {
                let a = next.fetch_add(1, Ordering::Relaxed) as u64 * PART;
                if a >= size {
                    return Ok::<u64, anyhow::Error>(got);
                }
                let b = (a + PART).min(size) - 1;
                let r = http.get(&url).header("range", format!("bytes={a}-{b}")).send().await?;
                if r.status() != 206 {
                    bail!("range request answered {}", r.status());
                }
                let mut s = r.bytes_stream();
                while let Some(c) = s.next().await {
                    got += c?.len() as u64;
                }
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    if total != size {
        bail!("ranges gave {total} bytes of {size}");
    }
    Ok(size as f64 / t.elapsed().as_secs_f64())
}

/// 4 KiB range requests one after another on one connection for `time`; requests per second.
/// The Hub-side ceiling of cold random reads and of small files (one request each at best).
pub async fn small_request_rate(url: &str, size: u64, time: Duration) -> anyhow::Result<f64> {
    let http = reqwest::Client::new();
    let t = Instant::now();
    let (mut n, mut x) = (0u64, 0x2545_f491_4f6c_dd1du64);
    while t.elapsed() < time {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let a = (x % (size / 4096)) * 4096;
        let r = http
            .get(url)
            .header("range", format!("bytes={a}-{}", a + 4095))
            .send()
            .await?;
        if r.status() != 206 {
            bail!("range request answered {}", r.status());
        }
        r.bytes().await?;
        n += 1;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Files at the head of dataset `local/NAME`: path → (size, sha256 for LFS/Xet files).
pub async fn dataset_files(
    ep: &str,
    name: &str,
) -> anyhow::Result<std::collections::HashMap<String, (u64, Option<String>)>> {
    use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
    let client = HubClient::new(HubClientConfig {
        endpoint: ep.to_string(),
        token: Some(DEFAULT_WRITE_TOKEN.to_string()),
        ..HubClientConfig::from_env()
    })?;
    let repo = RepoRef::dataset(&format!("local/{name}"))?;
    let head = client.repo_info(&repo, "main").await?.sha;
    let tree = client.list_tree_recursive(&repo, &head, "").await?;
    Ok(tree
        .into_iter()
        .filter_map(|e| match e {
            TreeEntry::File {
                path, size, lfs_sha256, ..
            } => Some((path, (size, lfs_sha256))),
            _ => None,
        })
        .collect())
}

/// Polls dataset `local/NAME` until `check` accepts its files; the time that took.
pub async fn wait_for_files(
    ep: &str,
    name: &str,
    limit: Duration,
    check: impl Fn(&std::collections::HashMap<String, (u64, Option<String>)>) -> bool,
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    loop {
        let files = dataset_files(ep, name).await?;
        if check(&files) {
            return Ok(t.elapsed());
        }
        if t.elapsed() > limit {
            bail!(
                "the Hub does not hold the expected files after {limit:?} ({} files there)",
                files.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// sha256 of a local file, hex.
pub fn sha256_file(path: &std::path::Path) -> anyhow::Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let (mut h, mut buf) = (Sha256::new(), vec![0u8; 1 << 20]);
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(hex::encode(h.finalize()));
        }
        h.update(&buf[..n]);
    }
}
