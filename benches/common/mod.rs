//! Helpers shared by the mount benchmarks: a Xet file uploaded the way a stock client does, cache
//! dropping, medians and Hub request counts.

#![allow(dead_code)]

use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub, RouteClass};

/// Creates model repo `local/{name}` holding `path` = `size` pseudo-random bytes (seed `seed`),
/// uploaded through Xet by the hf-hub crate.
pub async fn upload_xet_file(ep: &str, name: &str, path: &str, size: u64, seed: u64) {
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
    c.model("local", name)
        .create_commit()
        .operations(vec![hf_hub::repository::CommitOperation::Add {
            path_in_repo: path.into(),
            source: hf_hub::repository::AddSource::Bytes(
                hubfs::local_hub::seed::demo_bytes(size as usize, seed).into(),
            ),
        }])
        .commit_message("bench file")
        .send()
        .await
        .unwrap();
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
