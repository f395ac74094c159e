//! Listing-order prefetch of small files (`vfs::listing_prefetch`), in process against the local
//! Hub, counted in the Hub's own download requests: a reader following a directory's listing finds
//! the next files fetched ahead of it; a reader in another order, or with the prefetch off, costs
//! exactly one download per file, as before.

mod common;

use std::time::{Duration, Instant};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef};
use hubfs::local_hub::{LocalHub, RouteClass};
use hubfs::vfs::{ROOT_INO, VfsOptions, VirtualFs};

const FILES: usize = 40;

fn name(i: usize) -> String {
    format!("sample-{i:03}.txt")
}

fn content(i: usize) -> Vec<u8> {
    format!("sample {i}\n").repeat(40).into_bytes()
}

struct Setup {
    hub: LocalHub,
    repo: RepoRef,
}

async fn setup() -> Setup {
    let hub = LocalHub::start_temp(false).await.expect("local hub");
    let ep = hub.endpoint().to_string();
    let c = common::client();
    let repo = common::Repo::dataset("local/shards");
    common::create_repo_ok(&c, &ep, common::WRITE, &repo, false).await;
    let mut lines = vec![common::header_line("shards", None)];
    for i in 0..FILES {
        lines.push(common::file_line(&format!("d/{}", name(i)), &content(i)));
    }
    common::commit_ok(&c, &ep, common::WRITE, &repo, &lines).await;
    Setup {
        hub,
        repo: RepoRef::dataset("local/shards").unwrap(),
    }
}

async fn mount(s: &Setup, prefetch_files: usize) -> VirtualFs {
    let client = HubClient::new(HubClientConfig {
        endpoint: s.hub.endpoint().to_string(),
        token: s.hub.write_token(),
        ..HubClientConfig::default()
    })
    .unwrap();
    let opts = VfsOptions {
        prefetch_files,
        ..VfsOptions::default()
    };
    let vfs = VirtualFs::new(client, s.repo.clone(), "main", None, opts)
        .await
        .unwrap();
    // A listing of the directory, as `ls`, a glob or a data loader's first open makes one cached.
    let d = vfs.lookup(ROOT_INO, "d").await.unwrap();
    let fh = vfs.opendir(d.ino).await.unwrap();
    vfs.releasedir(fh);
    vfs
}

/// Opens and reads file `i` of `d/` whole, checking its bytes.
async fn read(vfs: &VirtualFs, i: usize) {
    let d = vfs.lookup(ROOT_INO, "d").await.unwrap();
    let a = vfs.lookup(d.ino, &name(i)).await.unwrap();
    let (fh, _) = vfs.open(a.ino, false).await.unwrap();
    let got = vfs.read(fh, 0, 1 << 20).await.unwrap();
    vfs.release(fh);
    assert_eq!(&got[..], &content(i)[..], "{}", name(i));
}

fn downloads(hub: &LocalHub) -> u64 {
    hub.stats(RouteClass::Resolve).requests
}

/// Waits until the Hub has answered `want` downloads (prefetches run in the background).
async fn settle(hub: &LocalHub, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    while downloads(hub) < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    downloads(hub)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_read_in_listing_order_are_fetched_ahead_of_the_reader() {
    let s = setup().await;
    let vfs = mount(&s, 8).await;
    let before = downloads(&s.hub);
    // The third open of a successor in a row starts the prefetch of the next 8 files.
    for i in 0..3 {
        read(&vfs, i).await;
    }
    let after_three = settle(&s.hub, before + 3 + 8).await;
    assert_eq!(
        after_three - before,
        3 + 8,
        "the three files read and the eight after them"
    );
    // Those eight are then read without a request; each open keeps eight fetched ahead.
    for i in 3..11 {
        read(&vfs, i).await;
    }
    let after = settle(&s.hub, after_three + 8).await;
    assert_eq!(after - after_three, 8, "only the files now eight ahead were fetched");
    // To the end of the directory: every file fetched exactly once.
    for i in 11..FILES {
        read(&vfs, i).await;
    }
    let total = settle(&s.hub, before + FILES as u64).await;
    assert_eq!(
        total - before,
        FILES as u64,
        "one download per file, none twice, none past the end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_order_or_prefetch_off_costs_one_download_per_file() {
    let s = setup().await;
    // Every other file, backwards, then a jump: never two successors in a row.
    let order: Vec<usize> = (0..FILES).rev().step_by(2).chain([0, 6, 2, 8, 4]).collect();
    let vfs = mount(&s, 8).await;
    let before = downloads(&s.hub);
    for &i in &order {
        read(&vfs, i).await;
    }
    let n = settle(&s.hub, before + order.len() as u64).await - before;
    assert_eq!(n, order.len() as u64, "random order: one download per file read");

    let s = setup().await;
    let vfs = mount(&s, 0).await;
    let before = downloads(&s.hub);
    for i in 0..10 {
        read(&vfs, i).await;
    }
    let n = settle(&s.hub, before + 10).await - before;
    assert_eq!(n, 10, "--prefetch-files 0: one download per file read, nothing ahead");
}
