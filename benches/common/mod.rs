//! Helpers shared by the mount benchmarks: a Xet file uploaded the way a stock client does, cache
//! dropping, medians and Hub request counts.

#![allow(dead_code)]

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub, RouteClass};

/// Creates model repo `local/{name}` holding `path` = `size` pseudo-random bytes (seed `seed`),
/// uploaded through Xet by the hf-hub crate.
pub async fn upload_xet_file(ep: &str, name: &str, path: &str, size: u64, seed: u64) {
    upload_xet_files(ep, name, &[(path.to_string(), size, seed)]).await
}

/// Creates model repo `local/{name}` holding each `(path, size, seed)` of `files` as pseudo-random
/// bytes, uploaded through Xet by the hf-hub crate in one commit.
pub async fn upload_xet_files(ep: &str, name: &str, files: &[(String, u64, u64)]) {
    let cache = tempfile::tempdir().unwrap();
    let c = hf_hub::HFClient::builder()
        .endpoint(ep)
        .token(DEFAULT_WRITE_TOKEN)
        .cache_dir(cache.path())
        .build()
        .unwrap();
    c.create_repository()
        .repo_id(&format!("local/{name}"))
        .repo_type(hf_hub::RepoTypeModel)
        .send()
        .await
        .unwrap();
    let ops = files
        .iter()
        .map(|(path, size, seed)| hf_hub::repository::CommitOperation::Add {
            path_in_repo: path.clone(),
            source: hf_hub::repository::AddSource::Bytes(
                hubfs::local_hub::seed::demo_bytes(*size as usize, *seed).into(),
            ),
        })
        .collect();
    c.model("local", name)
        .create_commit()
        .operations(ops)
        .commit_message("bench files")
        .send()
        .await
        .unwrap();
}

/// `bin mount local/{repo} DIR` as its own process (as a user runs it), with the write token, the
/// cache dir `cache` and `HUBFS_BENCH_MOUNT_ARGS`; returns once it said `mounted`.
pub fn spawn_mount(bin: &str, repo: &str, dir: &Path, ep: &str, cache: &Path, extra: &[&str]) -> Child {
    let mut child = Command::new(bin)
        .args(["mount", &format!("local/{repo}")])
        .arg(dir)
        .arg("--endpoint")
        .arg(ep)
        .arg("--token")
        .arg(DEFAULT_WRITE_TOKEN)
        .arg("--cache-dir")
        .arg(cache)
        .args(
            std::env::var("HUBFS_BENCH_MOUNT_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("mounted"), "hubfs mount said {line:?}");
    child
}

/// A process's peak resident memory (VmHWM), in MiB.
pub fn vm_hwm_mib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// Drops the page cache, dirty pages included (written out first: `drop_caches` skips dirty
/// pages, so a file written a moment ago would otherwise still be read from memory).
pub fn drop_caches() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Requests the local Hub answered since its last stats reset, over every origin.
pub fn requests(hub: &LocalHub) -> u64 {
    RouteClass::ALL.iter().map(|c| hub.stats(*c).requests).sum()
}
