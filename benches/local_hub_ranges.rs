//! Local Hub range throughput: 8 parallel 8 MiB Range GETs over a 1 GiB plain-LFS blob on loopback
//! (the target: at least 2 GB/s together), plus the same over a Xet-stored file served by
//! reconstruction on the blob origin. Prints figures; asserts nothing (machines here are noisy).
//!
//! Run: `cargo bench --bench local_hub_ranges` (env HUBFS_BENCH_MIB to change the blob size).

use std::time::Instant;

use futures::StreamExt;
use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub};
use serde_json::json;
use sha2::{Digest, Sha256};

const PART: u64 = 8 << 20;
const PARALLEL: usize = 8;

async fn upload_lfs(http: &reqwest::Client, ep: &str, repo: &str, path: &str, data: Vec<u8>) -> String {
    let auth = format!("Bearer {DEFAULT_WRITE_TOKEN}");
    let oid = hex::encode(Sha256::digest(&data));
    let size = data.len() as u64;
    let batch: serde_json::Value = http
        .post(format!("{ep}/datasets/{repo}.git/info/lfs/objects/batch"))
        .header("authorization", &auth)
        .json(&json!({"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": size}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    if let Some(href) = batch["objects"][0]["actions"]["upload"]["href"].as_str() {
        let r = http.put(href).body(data).send().await.unwrap();
        assert!(r.status().is_success(), "upload failed: {}", r.status());
    }
    let ndjson = format!(
        "{}\n{}\n",
        json!({"key": "header", "value": {"summary": "bench blob"}}),
        json!({"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": oid, "size": size}})
    );
    let r = http
        .post(format!("{ep}/api/datasets/{repo}/commit/main"))
        .header("authorization", &auth)
        .header("content-type", "application/x-ndjson")
        .body(ndjson)
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "commit failed: {}",
        r.text().await.unwrap_or_default()
    );
    oid
}

/// Reads `size` bytes at `url` as PART-sized ranges with PARALLEL workers; returns GB/s.
async fn ranged_read(http: &reqwest::Client, url: &str, size: u64) -> f64 {
    let parts: Vec<u64> = (0..size.div_ceil(PART)).collect();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..PARALLEL {
        let (http, url, parts, next) = (http.clone(), url.to_string(), parts.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = 0u64;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(p) = parts.get(i) else { break };
                let (a, b) = (p * PART, ((p + 1) * PART).min(size) - 1);
                let r = http
                    .get(&url)
                    .header("range", format!("bytes={a}-{b}"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 206);
                let mut s = r.bytes_stream();
                while let Some(c) = s.next().await {
                    got += c.unwrap().len() as u64;
                }
            }
            got
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, size);
    size as f64 / start.elapsed().as_secs_f64() / 1e9
}

async fn location(http: &reqwest::Client, url: &str) -> String {
    let r = http.head(url).send().await.unwrap();
    r.headers()["location"].to_str().unwrap().to_string()
}

fn summary(name: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{name:<44} median {:>6.2} GB/s   best {:>6.2} GB/s   ({} runs)",
        v[v.len() / 2],
        v[v.len() - 1],
        v.len()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mib: u64 = std::env::var("HUBFS_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let hub = LocalHub::start_temp(false).await.expect("local hub");
    let ep = hub.endpoint().to_string();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let auth = format!("Bearer {DEFAULT_WRITE_TOKEN}");
    http.post(format!("{ep}/api/repos/create"))
        .header("authorization", &auth)
        .json(&json!({"name": "local/bench", "type": "dataset"}))
        .send()
        .await
        .unwrap();
    let size = mib << 20;
    upload_lfs(
        &http,
        &ep,
        "local/bench",
        "blob.bin",
        hubfs::local_hub::seed::demo_bytes(size as usize, 1),
    )
    .await;
    let url = location(&http, &format!("{ep}/datasets/local/bench/resolve/main/blob.bin")).await;
    println!(
        "local hub range throughput, {PARALLEL} parallel {} MiB ranges, {mib} MiB blob",
        PART >> 20
    );
    let mut plain = Vec::new();
    for _ in 0..5 {
        plain.push(ranged_read(&http, &url, size).await);
    }
    summary("plain LFS blob (blob origin, file-backed)", plain);

    // The same content stored through Xet (uploaded by the hf-hub crate, as a client would).
    let data = hubfs::local_hub::seed::demo_bytes(size as usize, 2);
    let cache = tempfile::tempdir().unwrap();
    let client = hf_hub::HFClient::builder()
        .endpoint(&ep)
        .token(DEFAULT_WRITE_TOKEN)
        .cache_dir(cache.path())
        .build()
        .unwrap();
    let repo = client.dataset("local", "bench");
    let t = Instant::now();
    repo.create_commit()
        .operations(vec![hf_hub::repository::CommitOperation::Add {
            path_in_repo: "xet.bin".into(),
            source: hf_hub::repository::AddSource::Bytes(data.into()),
        }])
        .commit_message("xet blob")
        .send()
        .await
        .unwrap();
    println!(
        "{:<44} {:>6.2} GB/s   (hf-hub upload through Xet, once)",
        "Xet upload",
        size as f64 / t.elapsed().as_secs_f64() / 1e9
    );
    let url = location(&http, &format!("{ep}/datasets/local/bench/resolve/main/xet.bin")).await;
    let first = ranged_read(&http, &url, size).await;
    println!(
        "{:<44} {:>6.2} GB/s   (first read reconstructs the file once)",
        "Xet file via blob origin, first pass", first
    );
    let mut xet = Vec::new();
    for _ in 0..5 {
        xet.push(ranged_read(&http, &url, size).await);
    }
    summary("Xet file via blob origin, later passes", xet);
    let mut via_client = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let got = repo.download_file_to_bytes().filename("xet.bin").send().await.unwrap();
        assert_eq!(got.len() as u64, size);
        via_client.push(size as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    summary("Xet file via CAS (hf-hub download, whole file)", via_client);
    hub.stop().await;
}
