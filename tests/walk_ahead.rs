//! Listings fetched ahead of a tree walk (`vfs::walk_ahead`), in process against the local Hub,
//! counted in the Hub's own api requests: a walk through a directory's folders, in listing order or
//! from the end, finds their listings fetched ahead of it, and never costs more than one listing
//! per folder; a walk that stops
//! early costs at most the window ahead of it; one folder opened alone costs nothing more.
//! Also the directory-cache decision: an opendir may keep the kernel's cached pages only when the
//! listing is at the commit of the previous one.

mod common;

use std::time::{Duration, Instant};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef};
use hubfs::local_hub::{LocalHub, RouteClass};
use hubfs::vfs::{ROOT_INO, VfsOptions, VirtualFs};

const FOLDERS: usize = 40;
/// Folders fetched ahead of a walk (`walk_ahead::AHEAD`).
const AHEAD: u64 = 16;

fn folder(i: usize) -> String {
    format!("part-{i:03}")
}

async fn setup() -> (LocalHub, RepoRef) {
    let hub = LocalHub::start_temp(false).await.expect("local hub");
    let ep = hub.endpoint().to_string();
    let c = common::client();
    let repo = common::Repo::dataset("local/walk");
    common::create_repo_ok(&c, &ep, common::WRITE, &repo, false).await;
    let mut lines = vec![common::header_line("walk", None)];
    for i in 0..FOLDERS {
        for f in 0..3 {
            lines.push(common::file_line(&format!("{}/item-{f}.txt", folder(i)), b"row\n"));
        }
    }
    common::commit_ok(&c, &ep, common::WRITE, &repo, &lines).await;
    (hub, RepoRef::dataset("local/walk").unwrap())
}

/// A read-only mount whose branch is resolved again after `ttl`.
async fn mount(hub: &LocalHub, repo: &RepoRef, ttl: Duration) -> VirtualFs {
    let client = HubClient::new(HubClientConfig {
        endpoint: hub.endpoint().to_string(),
        token: hub.write_token(),
        ..HubClientConfig::default()
    })
    .unwrap();
    let opts = VfsOptions {
        metadata_ttl: ttl,
        ..VfsOptions::default()
    };
    VirtualFs::new(client, repo.clone(), "main", None, opts).await.unwrap()
}

fn api(hub: &LocalHub) -> u64 {
    hub.stats(RouteClass::Api).requests
}

/// Lists folder `i` as a walk does (lookup, opendir, releasedir); checks its 3 files are there.
async fn list(vfs: &VirtualFs, i: usize) {
    let d = vfs.lookup(ROOT_INO, &folder(i)).await.unwrap();
    let fh = vfs.opendir(d.ino).await.unwrap();
    let names: Vec<String> = vfs.dir_entries(fh).unwrap().iter().map(|e| e.name.clone()).collect();
    vfs.releasedir(fh);
    assert_eq!(
        names,
        [".", "..", "item-0.txt", "item-1.txt", "item-2.txt"],
        "{}",
        folder(i)
    );
}

async fn list_root(vfs: &VirtualFs) {
    let fh = vfs.opendir(ROOT_INO).await.unwrap();
    // ., .., the folders and the .gitattributes a new repo gets.
    assert_eq!(vfs.dir_entries(fh).unwrap().len(), FOLDERS + 3);
    vfs.releasedir(fh);
}

/// Waits until `n` listings were fetched ahead (or 10 s passed); returns how many were.
async fn fetched_ahead(vfs: &VirtualFs, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    while vfs.listings_fetched_ahead() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    vfs.listings_fetched_ahead()
}

/// Lists the folders `order` names, one after another.
async fn walk(vfs: &VirtualFs, order: impl Iterator<Item = usize>) {
    for i in order {
        list(vfs, i).await;
    }
}

/// After a whole walk: most folders were listed ahead of it (not all: in process and with no
/// latency, the walk reaches some first), and none twice.
async fn assert_walked(hub: &LocalHub, vfs: &VirtualFs, before: u64) {
    assert!(fetched_ahead(vfs, (FOLDERS / 2) as u64).await >= (FOLDERS / 2) as u64);
    assert_eq!(
        api(hub) - before,
        FOLDERS as u64,
        "the walk cost one listing per folder"
    );
}

#[tokio::test]
async fn a_walk_finds_the_next_folders_listed_and_costs_one_listing_each() {
    let (hub, repo) = setup().await;
    let vfs = mount(&hub, &repo, Duration::from_secs(600)).await;
    list_root(&vfs).await;
    let before = api(&hub);
    list(&vfs, 0).await;
    list(&vfs, 1).await;
    // Two folders in a row: the next AHEAD are fetched in the background.
    assert_eq!(fetched_ahead(&vfs, AHEAD).await, AHEAD);
    assert_eq!(api(&hub) - before, 2 + AHEAD, "one listing per folder, none twice");
    walk(&vfs, 2..FOLDERS).await;
    assert_walked(&hub, &vfs, before).await;
}

#[tokio::test]
async fn a_walk_from_the_end_gets_the_folders_before_it() {
    let (hub, repo) = setup().await;
    let vfs = mount(&hub, &repo, Duration::from_secs(600)).await;
    list_root(&vfs).await;
    let before = api(&hub);
    // A stack of folders popped from its end (os.scandir loops, some rsync orders).
    walk(&vfs, (0..FOLDERS).rev()).await;
    assert_walked(&hub, &vfs, before).await;
}

#[tokio::test]
async fn a_walk_that_stops_costs_at_most_the_window_ahead_and_one_folder_costs_nothing_more() {
    let (hub, repo) = setup().await;
    let vfs = mount(&hub, &repo, Duration::from_secs(600)).await;
    list_root(&vfs).await;
    let before = api(&hub);
    list(&vfs, 7).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        vfs.listings_fetched_ahead(),
        0,
        "one folder opened: nothing fetched ahead"
    );
    assert_eq!(api(&hub) - before, 1);
    // A second folder makes it a walk; it stops there.
    list(&vfs, 8).await;
    assert_eq!(fetched_ahead(&vfs, AHEAD).await, AHEAD);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        api(&hub) - before,
        2 + AHEAD,
        "at most the window ahead of where it stopped"
    );
}

#[tokio::test]
async fn a_directory_keeps_its_cached_pages_only_at_the_same_commit_within_the_ttl() {
    let (hub, repo) = setup().await;
    // The branch is resolved again after 1 s, so the test can move it.
    let vfs = mount(&hub, &repo, Duration::from_secs(1)).await;
    let d = vfs.lookup(ROOT_INO, &folder(3)).await.unwrap();
    let opendir = |ino| {
        let vfs = &vfs;
        async move {
            let (fh, keep) = vfs.opendir_keep(ino).await.unwrap();
            let n = vfs.dir_entries(fh).unwrap().len();
            vfs.releasedir(fh);
            (n, keep)
        }
    };
    assert_eq!(
        opendir(d.ino).await,
        (5, false),
        "first listing: nothing cached to keep"
    );
    assert_eq!(
        opendir(d.ino).await,
        (5, true),
        "same commit: the kernel keeps its pages"
    );
    assert!(!opendir(ROOT_INO).await.1, "another directory is decided on its own");

    // The branch moves: the next opendir shows the new commit and drops the kernel's pages.
    let c = common::client();
    let lines = vec![
        common::header_line("one more", None),
        common::file_line(&format!("{}/item-3.txt", folder(3)), b"row\n"),
    ];
    common::commit_ok(
        &c,
        hub.endpoint(),
        common::WRITE,
        &common::Repo::dataset("local/walk"),
        &lines,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        opendir(d.ino).await,
        (6, false),
        "a new commit: the new file, pages dropped"
    );
    assert_eq!(opendir(d.ino).await, (6, true), "and kept again at that commit");

    // Past the TTL at the same commit: dropped, so a READDIRPLUS renews every entry's attributes.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(opendir(d.ino).await, (6, false), "older than the TTL");
}
