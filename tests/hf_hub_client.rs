//! The hf-hub crate (the Rust Hub client hubfs builds on) against the local Hub: repo creation, a
//! commit with a regular and an LFS-class file (uploaded through Xet), tree listing, paths-info and
//! ranged downloads over both the Xet and the plain HTTP path. Every byte is checked.

use futures::StreamExt;
use hf_hub::repository::{AddSource, CommitOperation, RepoTreeEntry};
use hf_hub::{HFClient, RepoTypeDataset};
use hubfs::local_hub::seed::demo_safetensors;
use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub};
use sha2::{Digest, Sha256};

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn client(hub: &LocalHub, cache: &std::path::Path) -> HFClient {
    HFClient::builder()
        .endpoint(hub.endpoint())
        .token(DEFAULT_WRITE_TOKEN)
        .cache_dir(cache)
        .build()
        .expect("client")
}

async fn tree(repo: &hf_hub::HFRepository<RepoTypeDataset>) -> Vec<RepoTreeEntry> {
    let stream = repo.list_tree().recursive(true).send().expect("list_tree");
    futures::pin_mut!(stream);
    let mut out = Vec::new();
    while let Some(e) = stream.next().await {
        out.push(e.expect("tree entry"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hf_hub_round_trip() {
    let hub = LocalHub::start_temp(false).await.expect("hub");
    let cache = tempfile::tempdir().unwrap();
    let c = client(&hub, cache.path());

    c.create_repository()
        .repo_id("local/roundtrip")
        .repo_type(RepoTypeDataset)
        .send()
        .await
        .expect("create");
    let repo = c.dataset("local", "roundtrip");

    let small = b"id,text\n1,hello\n2,world\n".to_vec();
    // Pseudo-random so it neither compresses nor dedups: 12 MiB is over the Hub's LFS threshold.
    let big = hubfs::local_hub::seed::demo_bytes(12 << 20, 99);
    let info = repo
        .create_commit()
        .operations(vec![
            CommitOperation::Add {
                path_in_repo: "data/small.csv".into(),
                source: AddSource::Bytes(small.clone().into()),
            },
            CommitOperation::Add {
                path_in_repo: "data/big.bin".into(),
                source: AddSource::Bytes(big.clone().into()),
            },
        ])
        .commit_message("add files")
        .send()
        .await
        .expect("create_commit");
    let commit = info.commit_oid.clone().expect("commit oid");
    assert_eq!(commit.len(), 40);

    // Tree: both files with the right sizes; the big one is LFS with the content's sha256 and Xet.
    let entries = tree(&repo).await;
    let file = |p: &str| {
        entries.iter().find_map(|e| match e {
            RepoTreeEntry::File {
                path,
                size,
                lfs,
                xet_hash,
                ..
            } if path == p => Some((*size, lfs.clone(), xet_hash.clone())),
            _ => None,
        })
    };
    let (size, lfs, _) = file("data/small.csv").expect("small listed");
    assert_eq!(size, small.len() as u64);
    assert!(lfs.is_none());
    let (size, lfs, xet) = file("data/big.bin").expect("big listed");
    assert_eq!(size, big.len() as u64);
    // hf-hub 1.0 reads `sha256` in the lfs object while the Hub's tree sends `oid`, so only the size
    // is checked here; the bytes are checked by sha256 below.
    assert_eq!(lfs.expect("lfs info").size, Some(big.len() as u64));
    assert!(
        xet.is_some_and(|x| x.len() == 64),
        "big file should be stored through Xet"
    );
    assert!(
        entries
            .iter()
            .any(|e| matches!(e, RepoTreeEntry::Directory { path, .. } if path == "data"))
    );

    // paths-info: present paths answered, missing ones omitted.
    let infos = repo
        .get_paths_info()
        .paths(vec!["data/small.csv".into(), "data".into(), "nope.txt".into()])
        .send()
        .await
        .expect("paths-info");
    assert_eq!(infos.len(), 2);

    // Ranged downloads: Xet path (big) and plain HTTP Range (small), odd offsets included.
    for (start, end) in [
        (0u64, 1u64),
        (65_535, 65_537),
        (5_000_001, 9_000_003),
        (big.len() as u64 - 7, big.len() as u64),
    ] {
        let got = repo
            .download_file_to_bytes()
            .filename("data/big.bin")
            .range(start..end)
            .send()
            .await
            .expect("ranged xet download");
        assert_eq!(&got[..], &big[start as usize..end as usize], "range {start}..{end}");
    }
    let got = repo
        .download_file_to_bytes()
        .filename("data/small.csv")
        .range(3..11)
        .send()
        .await
        .expect("range");
    assert_eq!(&got[..], &small[3..11]);
    let whole = repo
        .download_file_to_bytes()
        .filename("data/big.bin")
        .revision(commit)
        .send()
        .await
        .expect("whole");
    assert_eq!(sha256_hex(&whole), sha256_hex(&big));

    // A second commit deleting the small file lands on top of the first.
    repo.create_commit()
        .operations(vec![CommitOperation::Delete {
            path_in_repo: "data/small.csv".into(),
        }])
        .commit_message("delete small")
        .send()
        .await
        .expect("delete commit");
    let entries = tree(&repo).await;
    assert!(
        !entries
            .iter()
            .any(|e| matches!(e, RepoTreeEntry::File { path, .. } if path == "data/small.csv"))
    );
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hf_hub_reads_demo_model() {
    let hub = LocalHub::start_temp(true).await.expect("hub");
    let cache = tempfile::tempdir().unwrap();
    let c = client(&hub, cache.path());
    let model = c.model("demo", "tiny-model");
    let expected = demo_safetensors();
    let got = model
        .download_file_to_bytes()
        .filename("model.safetensors")
        .send()
        .await
        .expect("download");
    assert_eq!(got.len(), expected.len());
    assert_eq!(sha256_hex(&got), sha256_hex(&expected));
    let header_len = u64::from_le_bytes(got[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&got[8..8 + header_len]).expect("safetensors header");
    assert!(header.get("model.embed.weight").is_some());
    let cfg = model
        .download_file_to_bytes()
        .filename("config.json")
        .send()
        .await
        .expect("config");
    let cfg: serde_json::Value = serde_json::from_slice(&cfg).expect("config json");
    assert_eq!(cfg["model_type"], "tiny-demo");
    hub.stop().await;
}
