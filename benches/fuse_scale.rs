//! Scale benchmarks of a hubfs FUSE mount against the local Hub, measured in one run:
//! - `ls -lR` of a 10,000-file repo: Hub requests against pages + directories (the target);
//! - peak RSS of a `hubfs mount` process (the real binary, default cache sizes) while a large Xet
//!   file is read sequentially through it, with throughput for reference.
//!
//! Needs root (FUSE). Prints figures; asserts nothing.
//! `cargo bench --bench fuse_scale` (HUBFS_BENCH_RSS_MIB sets the large file's size, default 4096;
//! HUBFS_BENCH_MOUNT_ARGS adds options to that `hubfs mount`).

mod common;

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use common::requests;
use hubfs::hub_client::HubClientConfig;
use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub};
use hubfs::process::session::{MountRequest, mount};
use hubfs::vfs::VfsOptions;

const DIRS: usize = 10;
const FILES_PER_DIR: usize = 1_000;

/// A model repo with `DIRS` folders of `FILES_PER_DIR` small files, in one NDJSON commit.
async fn make_tree_repo(ep: &str) {
    let c = reqwest::Client::new();
    let r = c
        .post(format!("{ep}/api/repos/create"))
        .bearer_auth(DEFAULT_WRITE_TOKEN)
        .json(&serde_json::json!({"name": "tree10k", "organization": "local", "type": "model"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "create repo: {}", r.status());
    let mut body =
        serde_json::json!({"key": "header", "value": {"summary": "10k files", "description": ""}}).to_string();
    for d in 0..DIRS {
        for f in 0..FILES_PER_DIR {
            body.push('\n');
            let content = format!("file {d}/{f}\n");
            body.push_str(
                &serde_json::json!({"key": "file", "value": {
                    "path": format!("shard-{d:02}/item-{f:04}.txt"),
                    "content": base64::engine::general_purpose::STANDARD.encode(content),
                    "encoding": "base64",
                }})
                .to_string(),
            );
        }
    }
    let r = c
        .post(format!("{ep}/api/models/local/tree10k/commit/main"))
        .bearer_auth(DEFAULT_WRITE_TOKEN)
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "commit: {}", r.status());
}

/// The mount's largest resident mappings, to see where memory goes.
fn print_largest_mappings(pid: u32) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut maps: Vec<(u64, String)> = Vec::new();
    let mut current = String::new();
    for line in smaps.lines() {
        if let Some(kb) = line.strip_prefix("Rss:") {
            let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            maps.push((kb, current.clone()));
        } else if line.contains('-') && !line.contains(':')
            || line.split_whitespace().count() >= 5 && line.contains('-')
        {
            current = line.to_string();
        }
    }
    maps.sort_by_key(|m| std::cmp::Reverse(m.0));
    for (kb, m) in maps.iter().take(12) {
        println!("{:>8} KiB  {m}", kb);
    }
}

fn main() {
    let rss_mib: u64 = std::env::var("HUBFS_BENCH_RSS_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
    let ep = hub.endpoint().to_string();
    rt.block_on(make_tree_repo(&ep));

    // ls -lR: every directory listed once, every entry's attributes from the listing.
    let d = tempfile::tempdir().unwrap();
    let req = MountRequest {
        repo: "local/tree10k".into(),
        mountpoint: d.path().to_path_buf(),
        revision: None,
        client: HubClientConfig {
            endpoint: ep.clone(),
            token: Some(DEFAULT_WRITE_TOKEN.to_string()),
            ..HubClientConfig::from_env()
        },
        vfs: VfsOptions::default(),
        allow_other: false,
    };
    let m = mount(req, &rt).unwrap();
    hub.reset_stats();
    let t = Instant::now();
    let out = Command::new("ls").arg("-lR").arg(d.path()).output().unwrap();
    let ls_secs = t.elapsed().as_secs_f64();
    let ls_reqs = requests(&hub);
    let lines = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b"-"))
        .count();
    m.unmount().unwrap();
    let pages = DIRS * FILES_PER_DIR.div_ceil(1000);
    let budget = pages + DIRS + 1;

    // RSS: the real binary, default cache sizes, a fresh cache dir.
    println!("uploading a {rss_mib} MiB Xet file for the RSS run...");
    rt.block_on(common::upload_xet_file(&ep, "big", "weights.bin", rss_mib << 20, 5));
    let d = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut child = common::spawn_mount(env!("CARGO_BIN_EXE_hubfs"), "big", d.path(), &ep, cache.path(), &[]);
    let pid = child.id();
    let baseline = common::vm_hwm_mib(pid);
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    let t = Instant::now();
    let mut f = std::fs::File::open(d.path().join("weights.bin")).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    let mut peak = 0;
    let mut last_sample = Instant::now();
    loop {
        let r = f.read(&mut buf).unwrap();
        if r == 0 {
            break;
        }
        n += r as u64;
        if last_sample.elapsed() > Duration::from_millis(200) {
            peak = peak.max(common::vm_hwm_mib(pid));
            last_sample = Instant::now();
        }
    }
    let secs = t.elapsed().as_secs_f64();
    if std::env::var_os("HUBFS_BENCH_SMAPS").is_some() {
        print_largest_mappings(pid);
    }
    peak = peak.max(common::vm_hwm_mib(pid));
    drop(f);
    hubfs::process::session::unmount(d.path()).unwrap();
    let _ = child.wait();

    println!("| measurement | figure | target |");
    println!("|---|---|---|");
    println!(
        "| `ls -lR` of {} files in {DIRS} folders: Hub requests | {ls_reqs} ({lines} files listed, {ls_secs:.2} s) | ≤ {budget} (pages {pages} + directories {}) |",
        DIRS * FILES_PER_DIR,
        DIRS + 1
    );
    println!(
        "| peak RSS of `hubfs mount` reading a {rss_mib} MiB Xet file sequentially | {peak} MiB (after mount: {baseline} MiB) | < 300 MB |"
    );
    println!(
        "| that read's throughput (cold, disk cache filling) | {:.2} GB/s | |",
        n as f64 / secs / 1e9
    );
    rt.block_on(hub.stop());
}
