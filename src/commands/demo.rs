//! `hubfs demo`: the README's first command. A local Hub with its demo repos, `demo/tiny-model`
//! mounted read-only, and a short tour that checks every file's bytes against the Hub's hashes.

use std::path::Path;

use anyhow::Context;
use sha1::Digest as _;

use crate::hub_client::{HubClient, HubClientConfig, TreeEntry};
use crate::local_hub::LocalHub;
use crate::process::session::{MountRequest, mount, wait_until_unmounted};
use crate::process::signals::{StopSignals, runtime};
use crate::vfs::VfsOptions;

/// `hubfs demo [DIR] [--exit]`.
pub fn run(dir: &Path, exit: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let rt = runtime()?;
    let signals = {
        let _g = rt.enter();
        StopSignals::new()?
    };
    let hub = rt
        .block_on(LocalHub::start_temp(true))
        .context("starting the local Hub")?;
    println!("local Hub with demo repos at {}", hub.endpoint());
    let client = HubClientConfig {
        endpoint: hub.endpoint().to_string(),
        token: hub.write_token(),
        ..HubClientConfig::from_env()
    };
    let req = MountRequest {
        repo: "demo/tiny-model".to_string(),
        mountpoint: dir.to_path_buf(),
        revision: None,
        client: client.clone(),
        vfs: VfsOptions::default(),
        allow_other: false,
    };
    let mounted = mount(req, &rt)?;
    println!("mounted demo/tiny-model@{} at {}", mounted.commit, dir.display());
    let tour = tour(&rt, &client, &mounted.commit, dir);
    if exit || tour.is_err() {
        mounted.unmount()?;
        rt.block_on(hub.stop());
        return tour;
    }
    println!(
        "\nThe mount stays until Ctrl-C. Try: ls -l {0}; head -c 200 {0}/config.json",
        dir.display()
    );
    let r = wait_until_unmounted(&rt, mounted, signals);
    rt.block_on(hub.stop());
    r
}

/// Lists the mount and checks each file read through it against the Hub's listing.
fn tour(rt: &tokio::runtime::Runtime, cfg: &HubClientConfig, commit: &str, dir: &Path) -> anyhow::Result<()> {
    let client = HubClient::new(cfg.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (repo, _, _) = crate::hub_client::RepoRef::parse("demo/tiny-model").map_err(|e| anyhow::anyhow!("{e}"))?;
    let listing = rt
        .block_on(client.list_tree_recursive(&repo, commit, ""))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("\n{:>12}  {:<20} check", "size", "file");
    for e in &listing {
        let TreeEntry::File {
            path,
            size,
            oid,
            lfs_sha256,
            ..
        } = e
        else {
            continue;
        };
        let data = std::fs::read(dir.join(path)).with_context(|| format!("reading {path} through the mount"))?;
        let ok = match lfs_sha256 {
            Some(sha) => hex::encode(sha2::Sha256::digest(&data)) == *sha,
            None => crate::local_hub::model::git_blob_oid(&data) == *oid,
        };
        let how = if lfs_sha256.is_some() { "sha256" } else { "git oid" };
        println!(
            "{size:>12}  {path:<20} {how} {}",
            if ok { "matches the Hub" } else { "MISMATCH" }
        );
        anyhow::ensure!(
            ok && data.len() as u64 == *size,
            "{path}: bytes read through the mount differ from the Hub's"
        );
    }
    Ok(())
}
