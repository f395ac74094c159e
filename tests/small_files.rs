//! Folders of small Xet files read in any order (`vfs::small_files`), in process against the local
//! Hub, counted in the Hub's own requests and bytes: a shuffled reader of a folder uploaded in one
//! commit costs well under 0.1 Hub requests per file with every byte checked; reading three files of
//! a 10,000-file folder fetches a bounded batch, not the folder.

mod common;

use std::time::{Duration, Instant};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef};
use hubfs::local_hub::{LocalHub, RouteClass};
use hubfs::vfs::{ROOT_INO, VfsOptions, VirtualFs};

const SIZE: usize = 4096;

fn name(i: usize) -> String {
    format!("{i:05}.bin")
}

fn content(i: usize) -> Vec<u8> {
    common::bytes(SIZE, 1000 + i as u64)
}

/// A Hub holding `n` Xet files of 4 KiB in `d/` of dataset `local/small`, uploaded in one commit.
async fn setup(n: usize) -> LocalHub {
    let hub = LocalHub::start_temp_with(false, |c| c.dir_entry_limit = 20_000)
        .await
        .expect("local hub");
    let files: Vec<(String, Vec<u8>)> = (0..n).map(|i| (format!("d/{}", name(i)), content(i))).collect();
    common::upload_xet_files(hub.endpoint(), &common::Repo::dataset("local/small"), &files).await;
    hub
}

async fn mount(hub: &LocalHub) -> VirtualFs {
    let client = HubClient::new(HubClientConfig {
        endpoint: hub.endpoint().to_string(),
        token: hub.write_token(),
        ..HubClientConfig::default()
    })
    .unwrap();
    let repo = RepoRef::dataset("local/small").unwrap();
    let vfs = VirtualFs::new(client, repo, "main", None, VfsOptions::default())
        .await
        .unwrap();
    // A listing of the folder, as `ls`, `cp -r` or a data loader's first step makes one cached.
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
    assert!(got[..] == content(i)[..], "{} differs", name(i));
}

/// Requests for file content: reconstructions, xorb fetches and `/resolve/` downloads.
fn content_requests(hub: &LocalHub) -> u64 {
    [RouteClass::Reconstruction, RouteClass::XorbFetch, RouteClass::Resolve]
        .iter()
        .map(|c| hub.stats(*c).requests)
        .sum()
}

/// Waits until the Hub's content requests and bytes stop changing for `quiet` (batches run in the
/// background, and the embedded CAS of a debug build takes seconds to answer a batch over a
/// 10,000-file xorb).
async fn settle(hub: &LocalHub) -> u64 {
    settle_for(hub, Duration::from_secs(2)).await
}

async fn settle_for(hub: &LocalHub, quiet: Duration) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(90);
    let state = |hub: &LocalHub| (content_requests(hub), hub.stats(RouteClass::XorbFetch).bytes_out);
    let mut last = state(hub);
    loop {
        tokio::time::sleep(quiet).await;
        let now = state(hub);
        if now == last || Instant::now() > deadline {
            return now.0;
        }
        last = now;
    }
}

/// A fixed shuffle of `0..n` (a multiplicative stride coprime with n).
fn shuffled(n: usize) -> Vec<usize> {
    (0..n).map(|k| (k * 7919 + 13) % n).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shuffled_reader_costs_under_a_tenth_of_a_request_per_file() {
    const N: usize = 600;
    let hub = setup(N).await;
    let vfs = mount(&hub).await;
    hub.reset_stats();
    for i in shuffled(N) {
        read(&vfs, i).await;
    }
    let requests = settle(&hub).await;
    let per_file = requests as f64 / N as f64;
    eprintln!(
        "{N} files shuffled: {requests} content requests ({per_file:.3}/file), {} reconstructions, {} xorb fetches",
        hub.stats(RouteClass::Reconstruction).requests,
        hub.stats(RouteClass::XorbFetch).requests
    );
    assert!(per_file <= 0.1, "{requests} Hub requests for {N} files");
    // Joined fetches carry some bytes of files outside their batch (at most as many as they want).
    let served = hub.stats(RouteClass::XorbFetch).bytes_out + hub.stats(RouteClass::Resolve).bytes_out;
    assert!(
        served <= (N * SIZE) as u64 * 2,
        "{served} bytes served for {} bytes of files",
        N * SIZE
    );
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_files_of_a_big_folder_fetch_a_bounded_batch() {
    const N: usize = 10_000;
    let hub = setup(N).await;
    let vfs = mount(&hub).await;
    hub.reset_stats();
    for i in [4321, 17, 9000] {
        read(&vfs, i).await;
    }
    settle_for(&hub, Duration::from_secs(8)).await;
    let served = hub.stats(RouteClass::XorbFetch).bytes_out + hub.stats(RouteClass::Resolve).bytes_out;
    // At most 256 × 2^(opened − 1) files started (`small_files`): 1,024 after three opens, with
    // at most as many gap bytes as wanted ones (`remote::xet::batch`): 2 × 1,024 files.
    let bound = 2 * 1030 * SIZE as u64;
    eprintln!("3 of {N} files read: {served} bytes served (bound {bound})");
    assert!(served <= bound, "{served} bytes served after reading 3 of {N} files");
    assert!(
        served >= 100 * SIZE as u64,
        "a batch was fetched ahead ({served} bytes)"
    );
    hub.stop().await;
}

/// The NFS frontend shares the core: a client that lists the folder (READDIRPLUS) and then reads
/// its files in a shuffled order (LOOKUP + READ, no open) costs as few requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_nfs_a_shuffled_reader_costs_as_few_requests() {
    use nfs3_client::nfs3_types::nfs3::{self, Nfs3Result, READ3args, diropargs3, filename3, nfs_fh3};
    use nfs3_client::nfs3_types::xdr_codec::Opaque;

    const N: usize = 300;
    let hub = setup(N).await;
    let vfs = std::sync::Arc::new(mount(&hub).await);
    let server = hubfs::nfs::server::NfsServer::start(vfs, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut c = common::nfs_mount(server.addr().port()).await.unwrap();
    async fn lookup(c: &mut common::NfsConn, dir: &nfs_fh3, name: &str) -> nfs_fh3 {
        let args = nfs3::LOOKUP3args {
            what: diropargs3 {
                dir: dir.clone(),
                name: filename3(Opaque::owned(name.as_bytes().to_vec())),
            },
        };
        match c.lookup(&args).await.unwrap() {
            Nfs3Result::Ok(ok) => ok.object,
            Nfs3Result::Err((s, _)) => panic!("lookup {name}: {s:?}"),
        }
    }
    let root = c.root_nfs_fh3();
    let d = lookup(&mut c, &root, "d").await;
    hub.reset_stats();
    for i in shuffled(N) {
        let fh = lookup(&mut c, &d, &name(i)).await;
        let args = READ3args {
            file: fh,
            offset: 0,
            count: 1 << 20,
        };
        let data = match c.read(&args).await.unwrap() {
            Nfs3Result::Ok(ok) => ok.data.to_vec(),
            Nfs3Result::Err((s, _)) => panic!("read {}: {s:?}", name(i)),
        };
        assert!(data == content(i), "{} differs over NFS", name(i));
    }
    let requests = settle(&hub).await;
    eprintln!("NFS, {N} files shuffled: {requests} content requests");
    assert!(
        requests as f64 <= 0.1 * N as f64,
        "{requests} Hub requests for {N} files over NFS"
    );
    c.unmount().await.unwrap();
}
