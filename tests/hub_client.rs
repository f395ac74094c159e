//! The Hub client against a real local Hub started in-process: repo info, listings and their
//! pagination, paths-info, ranged reads of regular, plain-LFS and Xet files (through the Hub's
//! redirect), revisions (branch, commit id, `refs/pr/N`), error mapping, private repos, fault
//! handling (5xx, rate limits, stalls, resets), token hygiene, and `RepoRef::parse`.

use std::time::{Duration, Instant};

use hubfs::hub_client::{
    CommitOp, CommitRequest, HubClient, HubClientConfig, HubClientError, RepoKind, RepoRef, TreeEntry,
};
use hubfs::local_hub::{FaultSettings, LocalHub, RouteClass};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const WRITE: &str = "hf_local_write";
const READ: &str = "hf_local_read";

fn client(hub: &LocalHub, token: Option<&str>) -> HubClient {
    client_with(hub, token, Duration::from_secs(20), 5)
}

fn client_with(hub: &LocalHub, token: Option<&str>, timeout: Duration, max_retries: u32) -> HubClient {
    HubClient::new(HubClientConfig {
        endpoint: hub.endpoint().to_string(),
        token: token.map(str::to_string),
        timeout,
        max_retries,
        patience: Duration::ZERO,
        ..Default::default()
    })
    .expect("client")
}

fn model() -> RepoRef {
    RepoRef::model("demo/tiny-model").unwrap()
}

fn dataset() -> RepoRef {
    RepoRef::dataset("demo/tiny-dataset").unwrap()
}

fn is_hex40(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn names(entries: &[TreeEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.path()).collect()
}

fn find<'a>(entries: &'a [TreeEntry], path: &str) -> &'a TreeEntry {
    entries
        .iter()
        .find(|e| e.path() == path)
        .unwrap_or_else(|| panic!("{path} not in {:?}", names(entries)))
}

fn api_requests(hub: &LocalHub) -> u64 {
    hub.stats(RouteClass::Api).requests
}

fn resolve_requests(hub: &LocalHub) -> u64 {
    hub.stats(RouteClass::Resolve).requests
}

/// Plain reqwest for the setup the Hub client does not do (repo creation, commits).
fn raw() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn create_repo(hub: &LocalHub, ns: &str, name: &str, private: bool) {
    let r = raw()
        .post(format!("{}/api/repos/create", hub.endpoint()))
        .bearer_auth(WRITE)
        .json(&json!({"name": name, "organization": ns, "private": private}))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "create {ns}/{name}: {}",
        r.text().await.unwrap()
    );
}

/// Commits `files` (path, content) to a model repo; `create_pr` opens a PR. Returns the answer.
async fn commit(hub: &LocalHub, repo: &str, files: &[(&str, &[u8])], create_pr: bool) -> Value {
    use base64::Engine;
    let mut lines = vec![json!({"key": "header", "value": {"summary": "test commit", "description": ""}}).to_string()];
    for (path, content) in files {
        let content = base64::engine::general_purpose::STANDARD.encode(content);
        lines.push(
            json!({"key": "file", "value": {"path": path, "content": content, "encoding": "base64"}}).to_string(),
        );
    }
    let q = if create_pr { "?create_pr=1" } else { "" };
    let r = raw()
        .post(format!("{}/api/models/{repo}/commit/main{q}", hub.endpoint()))
        .bearer_auth(WRITE)
        .header("content-type", "application/x-ndjson")
        .body(lines.join("\n") + "\n")
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "commit: {text}");
    serde_json::from_str(&text).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Reads against the demo repos
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_listings_and_paths_info() {
    let hub = LocalHub::start_temp(true).await.unwrap();
    let c = client(&hub, Some(READ));

    let info = c.repo_info(&model(), "main").await.unwrap();
    assert!(is_hex40(&info.sha), "{info:?}");
    assert!(!info.private);
    assert!(info.last_modified.is_some());
    let ds = c.repo_info(&dataset(), "main").await.unwrap();
    let sha = ds.sha.clone();

    // Root and one level down.
    let root = c.list_dir(&dataset(), &sha, "").await.unwrap();
    assert!(find(&root, "README.md").size() > 0);
    assert!(find(&root, "data").is_dir());
    let data = c.list_dir(&dataset(), &sha, "/data/").await.unwrap();
    for d in ["data/train", "data/many", "data/blobs", "data/nested"] {
        assert!(find(&data, d).is_dir(), "{d}");
    }

    // 1,100 entries: two pages, two requests, the second fetched from the Link URL.
    let before = api_requests(&hub);
    let many = c.list_dir(&dataset(), &sha, "data/many").await.unwrap();
    assert_eq!(api_requests(&hub) - before, 2, "one request per page");
    assert_eq!(many.len(), 1100);
    assert!(many.iter().all(|e| !e.is_dir() && e.path().starts_with("data/many/")));
    let mut uniq: Vec<&str> = names(&many);
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), 1100, "no entry twice across pages");

    // Recursive: directories and files at every depth.
    let nested = c.list_tree_recursive(&dataset(), &sha, "data/nested").await.unwrap();
    for d in ["data/nested/a", "data/nested/a/b", "data/nested/a/b/c"] {
        assert!(find(&nested, d).is_dir(), "{d}");
    }
    assert!(!find(&nested, "data/nested/a/b/c/deep.csv").is_dir());
    let all = c.list_tree_recursive(&dataset(), &sha, "").await.unwrap();
    assert!(all.len() > 1100 + 5, "{}", all.len());
    assert!(all.iter().any(|e| e.path() == "data/blobs/images.bin"));

    // Missing folder, and a file where a folder is expected.
    let e = c.list_dir(&dataset(), &sha, "data/nope").await.unwrap_err();
    assert!(matches!(e, HubClientError::NotFound { .. }), "{e:?}");
    assert_eq!(e.status(), Some(404));
    assert_eq!(e.error_code(), Some("EntryNotFound"));

    // paths-info: missing paths are left out; LFS data is read; folders are allowed.
    let paths: Vec<String> = ["README.md", "data/blobs/images.bin", "data/missing.csv", "data/nested"]
        .map(String::from)
        .to_vec();
    let got = c.paths_info(&dataset(), &sha, &paths).await.unwrap();
    assert_eq!(got.len(), 3, "{got:?}");
    let TreeEntry::File {
        size,
        lfs_sha256,
        xet_hash,
        ..
    } = find(&got, "data/blobs/images.bin")
    else {
        panic!("images.bin is a file")
    };
    assert_eq!(*size, 3 << 20);
    assert_eq!(lfs_sha256.as_ref().map(String::len), Some(64));
    assert!(xet_hash.is_none(), "plain LFS, not Xet");
    assert!(matches!(
        find(&got, "README.md"),
        TreeEntry::File { lfs_sha256: None, .. }
    ));
    assert!(find(&got, "data/nested").is_dir());

    // More than 1,000 paths: two batches.
    let mut paths: Vec<String> = many.iter().map(|e| e.path().to_string()).collect();
    paths.push("data/many/not-there".to_string());
    let before = api_requests(&hub);
    let got = c.paths_info(&dataset(), &sha, &paths).await.unwrap();
    assert_eq!(api_requests(&hub) - before, 2);
    assert_eq!(got.len(), 1100);

    let model_files = c
        .paths_info(&model(), "main", &["model.safetensors".to_string()])
        .await
        .unwrap();
    let TreeEntry::File { xet_hash, .. } = &model_files[0] else {
        panic!()
    };
    assert_eq!(xet_hash.as_ref().map(String::len), Some(64));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranged_reads_of_every_storage_kind() {
    let hub = LocalHub::start_temp(true).await.unwrap();
    let c = client(&hub, Some(READ));
    let ds_sha = c.repo_info(&dataset(), "main").await.unwrap().sha;

    // A regular (git) file, answered by the Hub itself.
    let csv = "data/train/shard-00000.csv";
    let entry = c
        .paths_info(&dataset(), &ds_sha, &[csv.to_string()])
        .await
        .unwrap()
        .remove(0);
    let size = entry.size();
    let full = c.read_range(&dataset(), &ds_sha, csv, 0, size).await.unwrap();
    assert_eq!(full.len() as u64, size);
    assert_eq!(
        &c.read_range(&dataset(), &ds_sha, csv, 3, 17).await.unwrap()[..],
        &full[3..20]
    );
    let tail = c.read_range(&dataset(), &ds_sha, csv, size - 5, 100).await.unwrap();
    assert_eq!(&tail[..], &full[full.len() - 5..], "short read only at EOF");
    assert!(
        c.read_range(&dataset(), &ds_sha, csv, size, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        c.read_range(&dataset(), &ds_sha, csv, size + 1000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(c.read_range(&dataset(), &ds_sha, csv, 0, 0).await.unwrap().is_empty());
    let head = c.head_file(&dataset(), &ds_sha, csv).await.unwrap();
    assert_eq!(head.size, size);
    assert_eq!(head.etag, entry.oid(), "regular files: ETag is the git blob id");
    assert_eq!(head.commit.as_deref(), Some(ds_sha.as_str()));
    assert!(head.xet_hash.is_none());

    // Plain LFS: a 302 to the blob origin, followed without the token.
    let bin = "data/blobs/images.bin";
    let entry = c
        .paths_info(&dataset(), &ds_sha, &[bin.to_string()])
        .await
        .unwrap()
        .remove(0);
    let TreeEntry::File { size, lfs_sha256, .. } = &entry else {
        panic!()
    };
    let size = *size;
    let before = resolve_requests(&hub);
    let full = c.read_range(&dataset(), &ds_sha, bin, 0, size).await.unwrap();
    assert_eq!(
        resolve_requests(&hub) - before,
        2,
        "the Hub's 302, then the blob origin"
    );
    assert_eq!(full.len() as u64, size);
    assert_eq!(Some(hex(&Sha256::digest(&full))), lfs_sha256.clone());
    let before = resolve_requests(&hub);
    let part = c.read_range(&dataset(), &ds_sha, bin, 1_000_003, 77_777).await.unwrap();
    assert_eq!(resolve_requests(&hub) - before, 1, "redirect target reused");
    assert_eq!(&part[..], &full[1_000_003..1_000_003 + 77_777]);
    let tail = c.read_range(&dataset(), &ds_sha, bin, size - 3, 4096).await.unwrap();
    assert_eq!(&tail[..], &full[full.len() - 3..]);
    assert!(
        c.read_range(&dataset(), &ds_sha, bin, size + 1, 1)
            .await
            .unwrap()
            .is_empty()
    );
    // By branch name the target is not cached (the branch may move): still correct.
    let part = c.read_range(&dataset(), "main", bin, 5, 11).await.unwrap();
    assert_eq!(&part[..], &full[5..16]);

    // Xet: the Hub's 302 carries X-Xet-Hash; the bytes must equal the seeded file.
    let expected = hubfs::local_hub::seed::demo_safetensors();
    let m_sha = c.repo_info(&model(), "main").await.unwrap().sha;
    let head = c.head_file(&model(), &m_sha, "model.safetensors").await.unwrap();
    assert_eq!(head.size, expected.len() as u64);
    assert_eq!(head.etag, hex(&Sha256::digest(&expected)));
    assert_eq!(head.xet_hash.as_ref().map(String::len), Some(64));
    assert_eq!(head.commit.as_deref(), Some(m_sha.as_str()));
    let first8 = c.read_range(&model(), &m_sha, "model.safetensors", 0, 8).await.unwrap();
    let header_len = u64::from_le_bytes(first8[..].try_into().unwrap());
    assert!(header_len > 10 && header_len < 10_000, "{header_len}");
    let header = c
        .read_range(&model(), &m_sha, "model.safetensors", 8, header_len)
        .await
        .unwrap();
    let header: Value = serde_json::from_slice(&header).expect("safetensors header is JSON");
    assert_eq!(header["model.head.bias"]["dtype"], "F32");
    for (start, len) in [(12_345_679u64, 1_000_001u64), (7, 3), (head.size - 1_234_567, 999_999)] {
        let got = c
            .read_range(&model(), &m_sha, "model.safetensors", start, len)
            .await
            .unwrap();
        assert_eq!(
            &got[..],
            &expected[start as usize..(start + len) as usize],
            "{start}+{len}"
        );
    }
    let tail = c
        .read_range(&model(), &m_sha, "model.safetensors", head.size - 10, 100)
        .await
        .unwrap();
    assert_eq!(&tail[..], &expected[expected.len() - 10..]);

    // Xet read token: cached, and one request for many concurrent callers.
    let fresh = client(&hub, Some(READ));
    let before = api_requests(&hub);
    let m = model();
    let tokens = futures::future::join_all((0..8).map(|_| fresh.xet_read_token(&m, &m_sha))).await;
    assert_eq!(api_requests(&hub) - before, 1, "single flight");
    let t = tokens.into_iter().next().unwrap().unwrap();
    assert_eq!(t.cas_url, hub.cas_url());
    assert!(!t.access_token.is_empty());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(t.exp > now + 60, "{t:?}");
    assert!(
        !format!("{t:?}").contains(&t.access_token),
        "Debug redacts the CAS token"
    );
    let before = api_requests(&hub);
    assert_eq!(fresh.xet_read_token(&model(), &m_sha).await.unwrap(), t);
    assert_eq!(api_requests(&hub), before, "cached until exp - 60 s");
    hub.stop().await;
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------------------------
// Revisions, errors, private repos, token hygiene
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_and_special_paths() {
    let hub = LocalHub::start_temp(true).await.unwrap();
    let c = client(&hub, Some(WRITE));
    let main = c.repo_info(&model(), "main").await.unwrap().sha;
    // A full commit id is a revision too.
    assert_eq!(c.repo_info(&model(), &main).await.unwrap().sha, main);
    let by_branch = c.list_dir(&model(), "main", "").await.unwrap();
    let by_commit = c.list_dir(&model(), &main, "").await.unwrap();
    assert_eq!(by_branch, by_commit);

    // A PR with files whose names need escaping.
    let files: [(&str, &[u8]); 4] = [
        ("pr-note.txt", b"from a PR\n"),
        ("dir with space/#hash?.txt", b"hash and question mark"),
        ("dir with space/100%.txt", b"percent"),
        ("ünïcødé/файл.txt", "non-ASCII".as_bytes()),
    ];
    let v = commit(&hub, "demo/tiny-model", &files, true).await;
    let url = v["pullRequestUrl"].as_str().expect("pullRequestUrl");
    let num: u64 = url.rsplit('/').next().unwrap().parse().unwrap();
    let pr_rev = format!("refs/pr/{num}");
    let pr = c.repo_info(&model(), &pr_rev).await.unwrap();
    assert!(is_hex40(&pr.sha));
    assert_ne!(pr.sha, main);
    for rev in [pr_rev.as_str(), pr.sha.as_str()] {
        let root = c.list_dir(&model(), rev, "").await.unwrap();
        assert!(find(&root, "pr-note.txt").size() > 0, "{rev}");
        for (path, content) in files {
            let got = c.read_range(&model(), rev, path, 0, 1000).await.unwrap();
            assert_eq!(&got[..], content, "{rev} {path}");
            assert_eq!(
                c.head_file(&model(), rev, path).await.unwrap().size,
                content.len() as u64
            );
        }
        let sub = c.list_dir(&model(), rev, "dir with space").await.unwrap();
        assert_eq!(sub.len(), 2, "{:?}", names(&sub));
        let got = c
            .paths_info(&model(), rev, &files.map(|(p, _)| p.to_string()))
            .await
            .unwrap();
        assert_eq!(got.len(), files.len());
    }
    // The PR did not touch main.
    let e = c.read_range(&model(), &main, "pr-note.txt", 0, 10).await.unwrap_err();
    assert!(matches!(e, HubClientError::NotFound { .. }), "{e:?}");
    hub.stop().await;
}

/// `commit_answer` with `create_pr`: the PR is opened from `parent` even though main moved, and
/// its URL and number come back; a plain commit has neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_answer_opens_a_pr_from_a_parent() {
    let hub = LocalHub::start_temp(false).await.unwrap();
    create_repo(&hub, "local", "pr-client", false).await;
    let c = client(&hub, Some(WRITE));
    let repo = RepoRef::model("local/pr-client").unwrap();
    let put = |path: &str| CommitRequest {
        summary: format!("add {path}"),
        ops: vec![CommitOp::Inline {
            path: path.to_string(),
            content: bytes::Bytes::copy_from_slice(path.as_bytes()),
        }],
        ..Default::default()
    };
    let old = c.commit(&repo, "main", &put("old.txt")).await.unwrap();
    let plain = c.commit_answer(&repo, "main", &put("later.txt")).await.unwrap();
    assert_eq!((plain.pr_url.as_deref(), plain.pr_num), (None, None));
    let later = plain.commit;

    let pr = CommitRequest {
        parent: Some(old.clone()),
        create_pr: true,
        ..put("pr.txt")
    };
    let ans = c.commit_answer(&repo, "main", &pr).await.unwrap();
    assert_eq!(ans.pr_num, Some(1), "{ans:?}");
    assert!(
        ans.pr_url
            .as_deref()
            .is_some_and(|u| u.ends_with("/local/pr-client/discussions/1")),
        "{ans:?}"
    );
    assert_eq!(c.repo_info(&repo, "refs/pr/1").await.unwrap().sha, ans.commit);
    let root = c.list_dir(&repo, "refs/pr/1", "").await.unwrap();
    let mut got = names(&root);
    got.sort_unstable();
    assert_eq!(got, [".gitattributes", "old.txt", "pr.txt"]);
    assert_eq!(c.repo_info(&repo, "main").await.unwrap().sha, later, "main stays");

    // A parent the repo does not have; and the stale parent without create_pr (412).
    let bad = CommitRequest {
        parent: Some("0".repeat(40)),
        ..pr.clone()
    };
    let e = c.commit_answer(&repo, "main", &bad).await.unwrap_err();
    assert!(matches!(e, HubClientError::RevisionNotFound { .. }), "{e:?}");
    let stale = CommitRequest { create_pr: false, ..pr };
    let e = c.commit(&repo, "main", &stale).await.unwrap_err();
    assert!(matches!(e, HubClientError::Conflict { .. }), "{e:?}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_mapped_with_context() {
    let hub = LocalHub::start_temp(true).await.unwrap();
    let c = client(&hub, Some(WRITE));
    let anon = client(&hub, None);
    let sha = c.repo_info(&model(), "main").await.unwrap().sha;

    let nope = RepoRef::model("demo/nope").unwrap();
    for cl in [&c, &anon] {
        let e = cl.repo_info(&nope, "main").await.unwrap_err();
        assert!(matches!(e, HubClientError::RepoNotFound { .. }), "{e:?}");
        assert_eq!(e.error_code(), Some("RepoNotFound"));
        assert!(e.to_string().contains("demo/nope@main"), "{e}");
        assert!(e.is_not_found());
        assert_eq!(e.ctx().attempts, 1, "4xx are not retried");
    }

    let e = c.repo_info(&model(), "no-such-branch").await.unwrap_err();
    assert!(matches!(e, HubClientError::RevisionNotFound { .. }), "{e:?}");
    let e = c.list_dir(&model(), "refs/pr/999", "").await.unwrap_err();
    assert!(matches!(e, HubClientError::RevisionNotFound { .. }), "{e:?}");
    assert!(e.to_string().contains("refs/pr/999"), "{e}");

    let e = c.read_range(&model(), &sha, "missing.bin", 0, 10).await.unwrap_err();
    assert!(matches!(e, HubClientError::NotFound { .. }), "{e:?}");
    assert_eq!(
        e.to_string().split(": ").take(2).collect::<Vec<_>>().join(": "),
        format!("GET demo/tiny-model@{sha} missing.bin: 404 EntryNotFound")
    );
    let e = c.head_file(&dataset(), "main", "data/missing.csv").await.unwrap_err();
    assert!(matches!(e, HubClientError::NotFound { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("HEAD datasets/demo/tiny-dataset@main data/missing.csv: 404"),
        "{e}"
    );

    // Refused before sending.
    let before = api_requests(&hub);
    for bad in ["../etc/passwd", "a//b", ""] {
        let e = c.read_range(&model(), &sha, bad, 0, 1).await.unwrap_err();
        assert!(matches!(e, HubClientError::BadInput { .. }), "{bad}: {e:?}");
    }
    assert!(matches!(
        c.repo_info(&model(), "bad rev").await.unwrap_err(),
        HubClientError::BadInput { .. }
    ));
    assert_eq!(api_requests(&hub), before);

    // A private repo: anonymous callers get RepoNotFound (401), token holders get the repo.
    create_repo(&hub, "local", "p", true).await;
    let p = RepoRef::model("local/p").unwrap();
    let e = anon.repo_info(&p, "main").await.unwrap_err();
    assert!(matches!(e, HubClientError::RepoNotFound { .. }), "{e:?}");
    assert_eq!(e.status(), Some(401));
    let info = c.repo_info(&p, "main").await.unwrap();
    assert!(info.private);
    assert!(client(&hub, Some(READ)).repo_info(&p, "main").await.unwrap().private);

    // A bad token: 401 without an error code; the token shows up nowhere.
    let secret = "hf_this_is_a_secret_token_value";
    let bogus = client(&hub, Some(secret));
    let e = bogus.repo_info(&model(), "main").await.unwrap_err();
    assert!(matches!(e, HubClientError::Unauthorized { .. }), "{e:?}");
    for text in [e.to_string(), format!("{e:?}"), format!("{bogus:?}")] {
        assert!(!text.contains(secret), "{text}");
    }
    let cfg = HubClientConfig {
        token: Some(secret.to_string()),
        ..Default::default()
    };
    assert!(!format!("{cfg:?}").contains(secret));
    assert!(!format!("{c:?}").contains(WRITE));
    assert!(format!("{c:?}").contains("redacted"));
    hub.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Faults: retries, rate limits, stalls, resets
// ---------------------------------------------------------------------------------------------

/// An unseeded Hub (fast to start) with a public model `local/faulty` holding `hello.txt` and a
/// 1 MiB `blob.bin`.
async fn small_hub() -> (LocalHub, RepoRef, Vec<u8>) {
    let hub = LocalHub::start_temp(false).await.unwrap();
    create_repo(&hub, "local", "faulty", false).await;
    let blob: Vec<u8> = (0..(1u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    commit(
        &hub,
        "local/faulty",
        &[("hello.txt", b"hello".as_slice()), ("blob.bin", blob.as_slice())],
        false,
    )
    .await;
    (hub, RepoRef::model("local/faulty").unwrap(), blob)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_exhaust_retries_within_bound() {
    let (hub, repo, _) = small_hub().await;
    let c = client_with(&hub, None, Duration::from_secs(5), 3);
    hub.set_faults(
        RouteClass::Api,
        FaultSettings {
            error_rate: 1.0,
            ..Default::default()
        },
    )
    .unwrap();
    let before = api_requests(&hub);
    let t0 = Instant::now();
    let e = c.repo_info(&repo, "main").await.unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(e, HubClientError::Server { .. }), "{e:?}");
    assert_eq!(e.status(), Some(500));
    assert_eq!(e.ctx().attempts, 4);
    assert!(e.to_string().contains("after 4 attempts"), "{e}");
    assert_eq!(api_requests(&hub) - before, 4, "1 attempt + 3 retries");
    // Backoff: 0.2 + 0.4 + 0.8 s at most; the documented bound is far above.
    assert!(took < Duration::from_millis(1400 + 1000), "{took:?}");
    let bound = HubClientConfig {
        timeout: Duration::from_secs(5),
        max_retries: 3,
        patience: Duration::ZERO,
        ..Default::default()
    }
    .exchange_time_bound();
    assert!(took < bound);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_hub_is_ridden_out_by_retries() {
    let (hub, repo, blob) = small_hub().await;
    // 13 attempts per exchange: a call fails only if 13 coin flips in a row come up "error".
    let c = client_with(&hub, None, Duration::from_secs(10), 12);
    let flaky = FaultSettings {
        error_rate: 0.5,
        ..Default::default()
    };
    hub.set_faults(RouteClass::Api, flaky.clone()).unwrap();
    hub.set_faults(RouteClass::Resolve, flaky).unwrap();
    for i in 0..5u64 {
        let info = c.repo_info(&repo, "main").await.unwrap();
        let got = c
            .read_range(&repo, &info.sha, "blob.bin", i * 1001, 5000)
            .await
            .unwrap();
        assert_eq!(&got[..], &blob[(i * 1001) as usize..(i * 1001 + 5000) as usize]);
    }
    let injected = hub.stats(RouteClass::Api).faults_injected + hub.stats(RouteClass::Resolve).faults_injected;
    assert!(injected > 0, "faults were injected");

    // Connections cut half-way through the body are retried too.
    hub.clear_faults();
    hub.set_faults(
        RouteClass::Resolve,
        FaultSettings {
            reset_rate: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    for _ in 0..4 {
        let got = c
            .read_range(&repo, "main", "blob.bin", 0, blob.len() as u64)
            .await
            .unwrap();
        assert!(got[..] == blob[..]);
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_are_waited_out() {
    let (hub, repo, _) = small_hub().await;
    let c = client(&hub, None);
    hub.set_faults(
        RouteClass::Api,
        FaultSettings {
            rate_limit: 2.0,
            ..Default::default()
        },
    )
    .unwrap();
    let t0 = Instant::now();
    for _ in 0..6 {
        c.repo_info(&repo, "main").await.unwrap();
    }
    let limited = hub.stats(RouteClass::Api).faults_injected;
    assert!(limited > 0, "the Hub answered 429 at least once");
    // Each 429 says t=1: the client waited about a second each time before retrying.
    assert!(t0.elapsed() >= Duration::from_millis(900), "{:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalls_end_in_timeout_not_a_hang() {
    let (hub, repo, _) = small_hub().await;
    let c = client_with(&hub, None, Duration::from_secs(1), 1);
    let sha = c.repo_info(&repo, "main").await.unwrap().sha;
    let stall = FaultSettings {
        stall_rate: 1.0,
        ..Default::default()
    };
    hub.set_faults(RouteClass::Api, stall.clone()).unwrap();
    let t0 = Instant::now();
    let e = c.list_dir(&repo, &sha, "").await.unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(e, HubClientError::Timeout { .. }), "{e:?}");
    assert_eq!(e.ctx().attempts, 2);
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(3),
        "{took:?}"
    );

    hub.clear_faults();
    hub.set_faults(RouteClass::Resolve, stall).unwrap();
    let t0 = Instant::now();
    let e = c.read_range(&repo, &sha, "hello.txt", 0, 5).await.unwrap_err();
    assert!(matches!(e, HubClientError::Timeout { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    hub.clear_faults();
    assert_eq!(
        &c.read_range(&repo, &sha, "hello.txt", 0, 5).await.unwrap()[..],
        b"hello"
    );
    hub.stop().await;
}

// ---------------------------------------------------------------------------------------------
// RepoRef::parse
// ---------------------------------------------------------------------------------------------

/// (kind, id, revision, subfolder)
type Parsed = (RepoKind, String, Option<String>, Option<String>);

fn parsed(s: &str) -> Parsed {
    let (r, rev, sub) = RepoRef::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    (r.kind, r.id(), rev, sub)
}

fn some(s: &str) -> Option<String> {
    Some(s.to_string())
}

#[test]
fn parse_accepted_forms() {
    use RepoKind::*;
    let cases: Vec<(&str, Parsed)> = vec![
        ("ns/name", (Model, "ns/name".into(), None, None)),
        ("models/ns/name", (Model, "ns/name".into(), None, None)),
        ("datasets/ns/name", (Dataset, "ns/name".into(), None, None)),
        ("spaces/ns/name", (Space, "ns/name".into(), None, None)),
        ("ns/name@main", (Model, "ns/name".into(), some("main"), None)),
        ("datasets/ns/name@v1.0", (Dataset, "ns/name".into(), some("v1.0"), None)),
        (
            "spaces/ns/name@refs/pr/3",
            (Space, "ns/name".into(), some("refs/pr/3"), None),
        ),
        (
            "ns/name@0123456789abcdef0123456789abcdef01234567",
            (
                Model,
                "ns/name".into(),
                some("0123456789abcdef0123456789abcdef01234567"),
                None,
            ),
        ),
        ("ns/m@refs%2Fpr%2F1", (Model, "ns/m".into(), some("refs/pr/1"), None)),
        ("hf://ns/name", (Model, "ns/name".into(), None, None)),
        ("hf://ns/name/", (Model, "ns/name".into(), None, None)),
        ("hf://ns/name/sub", (Model, "ns/name".into(), None, some("sub"))),
        (
            "hf://datasets/ns/name@rev/sub/dir",
            (Dataset, "ns/name".into(), some("rev"), some("sub/dir")),
        ),
        (
            "hf://datasets/ns/name@rev",
            (Dataset, "ns/name".into(), some("rev"), None),
        ),
        ("hf://spaces/ns/name/a/b/", (Space, "ns/name".into(), None, some("a/b"))),
        (
            "hf://ns/name@refs/pr/3",
            (Model, "ns/name".into(), some("refs/pr/3"), None),
        ),
        (
            "hf://datasets/ns/d@refs/pr/12/data",
            (Dataset, "ns/d".into(), some("refs/pr/12"), some("data")),
        ),
        (
            "hf://ns/m@refs/convert/parquet/x",
            (Model, "ns/m".into(), some("refs/convert/parquet"), some("x")),
        ),
        (
            "hf://ns/m@feature%2Fx/data",
            (Model, "ns/m".into(), some("feature/x"), some("data")),
        ),
        (
            "hf://ns/m@refs%2Fpr%2F1",
            (Model, "ns/m".into(), some("refs/pr/1"), None),
        ),
        ("Org-1/my_model.v2", (Model, "Org-1/my_model.v2".into(), None, None)),
        ("buckets/ns/b", (Bucket, "ns/b".into(), None, None)),
        ("hf://buckets/ns/b", (Bucket, "ns/b".into(), None, None)),
        (
            "hf://buckets/ns/b/ckpt/run1/",
            (Bucket, "ns/b".into(), None, some("ckpt/run1")),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(parsed(input), want, "{input}");
    }
    let (r, _, _) = RepoRef::parse("datasets/ns/name").unwrap();
    assert_eq!(r.api_path(), "/api/datasets/ns/name");
    assert_eq!(r.web_path(), "datasets/ns/name");
    let (r, _, _) = RepoRef::parse("ns/name").unwrap();
    assert_eq!(
        (r.api_path().as_str(), r.web_path().as_str()),
        ("/api/models/ns/name", "ns/name")
    );
    let (r, _, _) = RepoRef::parse("spaces/ns/name").unwrap();
    assert_eq!(r.web_path(), "spaces/ns/name");
    let (r, _, _) = RepoRef::parse("hf://buckets/ns/b/x").unwrap();
    assert_eq!(
        (r.api_path().as_str(), r.web_path().as_str()),
        ("/api/buckets/ns/b", "buckets/ns/b")
    );
}

#[test]
fn parse_rejected_forms() {
    for bad in [
        "",
        "name",
        "a/b/c",
        "datasets/ns/name/sub",
        "ns/na me",
        "ns/name!",
        "ns/-name",
        "ns/na..me",
        "ns/name@",
        "ns/name@a b",
        "ns/name@refs//x",
        "hf://",
        "hf://ns",
        "hf://ns/name@",
        "hf://ns//name",
        "hf://ns/name/../x",
        "/ns/name",
        "ns/name\n",
        "buckets/ns/b@main",
        "hf://buckets/ns/b@main/x",
        "buckets/ns/b/sub",
    ] {
        let e = RepoRef::parse(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad:?} was accepted"));
        assert!(matches!(e, HubClientError::BadInput { .. }), "{bad:?}: {e:?}");
    }
}

#[test]
fn config_and_client_never_show_the_token() {
    let c = HubClient::new(HubClientConfig {
        endpoint: "http://127.0.0.1:9/".to_string(),
        token: Some("hf_top_secret".to_string()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(c.endpoint(), "http://127.0.0.1:9");
    assert!(c.has_token());
    assert!(!format!("{c:?}").contains("hf_top_secret"));
    assert!(
        HubClient::new(HubClientConfig {
            endpoint: "ftp://x".to_string(),
            ..Default::default()
        })
        .is_err()
    );
    let e = HubClient::new(HubClientConfig {
        token: Some("hf_bad\ntoken".to_string()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(!e.to_string().contains("hf_bad"));
}

// ---------------------------------------------------------------------------------------------
// Redirect handling against a hand-made Hub and CDN: where the token goes, the redirect cache,
// servers that ignore or botch ranges
// ---------------------------------------------------------------------------------------------

mod fake {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use axum::extract::{Request, State};
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use parking_lot::Mutex;

    pub const DATA_LEN: usize = 1000;

    pub fn data() -> Vec<u8> {
        (0..DATA_LEN).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[derive(Default)]
    pub struct Seen {
        /// (origin, path, Authorization header)
        pub requests: Mutex<Vec<(&'static str, String, Option<String>)>>,
        pub hub_gen: AtomicU64,
        /// CDN URLs with a generation below this answer 403 (an expired signature).
        pub min_gen: AtomicU64,
        pub cdn: Mutex<String>,
    }

    impl Seen {
        pub fn count(&self, origin: &str) -> usize {
            self.requests.lock().iter().filter(|r| r.0 == origin).count()
        }
    }

    fn auth(req: &Request) -> Option<String> {
        req.headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }

    pub async fn serve(router: axum::Router) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, router).await.unwrap() });
        format!("http://{addr}")
    }

    /// `/ns/m/resolve/{rev}/{file}` → 302 to `{cdn}/{file}?gen=N`.
    pub async fn hub(State(s): State<Arc<Seen>>, req: Request) -> Response {
        let path = req.uri().path().to_string();
        s.requests.lock().push(("hub", path.clone(), auth(&req)));
        let file = path.rsplit('/').next().unwrap_or_default().to_string();
        let g = s.hub_gen.fetch_add(1, Ordering::SeqCst) + 1;
        let loc = format!("{}/{file}?gen={g}", s.cdn.lock());
        let mut r = StatusCode::FOUND.into_response();
        let h = r.headers_mut();
        h.insert(header::LOCATION, HeaderValue::from_str(&loc).unwrap());
        h.insert("x-linked-size", HeaderValue::from(DATA_LEN as u64));
        h.insert("x-linked-etag", HeaderValue::from_static("\"abc\""));
        h.insert(
            "x-repo-commit",
            HeaderValue::from_static("0123456789abcdef0123456789abcdef01234567"),
        );
        r
    }

    /// `/good` honours ranges, `/ignore-range` always answers 200 with everything, `/bad-range`
    /// answers a 206 for the wrong bytes.
    pub async fn cdn(State(s): State<Arc<Seen>>, req: Request) -> Response {
        let path = req.uri().path().to_string();
        s.requests.lock().push(("cdn", path.clone(), auth(&req)));
        let g: u64 = req
            .uri()
            .query()
            .and_then(|q| q.strip_prefix("gen="))
            .and_then(|g| g.parse().ok())
            .unwrap_or(0);
        if g < s.min_gen.load(Ordering::SeqCst) {
            return (StatusCode::FORBIDDEN, "expired").into_response();
        }
        let data = data();
        let range = req
            .headers()
            .get(header::RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("bytes="))
            .and_then(|v| v.split_once('-'))
            .map(|(a, b)| (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap()));
        match (path.as_str(), range) {
            ("/good", Some((a, b))) => {
                if a >= DATA_LEN {
                    return StatusCode::RANGE_NOT_SATISFIABLE.into_response();
                }
                let b = b.min(DATA_LEN - 1);
                let mut r = (StatusCode::PARTIAL_CONTENT, data[a..=b].to_vec()).into_response();
                let cr = format!("bytes {a}-{b}/{DATA_LEN}");
                r.headers_mut()
                    .insert(header::CONTENT_RANGE, HeaderValue::from_str(&cr).unwrap());
                r
            }
            ("/bad-range", Some(_)) => {
                let mut r = (StatusCode::PARTIAL_CONTENT, data[0..10].to_vec()).into_response();
                let cr = format!("bytes 0-9/{DATA_LEN}");
                r.headers_mut()
                    .insert(header::CONTENT_RANGE, HeaderValue::from_str(&cr).unwrap());
                r
            }
            _ => (StatusCode::OK, data).into_response(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_drop_the_token_and_are_cached() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    let seen = Arc::new(fake::Seen::default());
    let cdn = fake::serve(axum::Router::new().fallback(fake::cdn).with_state(seen.clone())).await;
    *seen.cdn.lock() = cdn;
    let hub = fake::serve(axum::Router::new().fallback(fake::hub).with_state(seen.clone())).await;
    let secret = "hf_fake_hub_secret";
    let c = HubClient::new(HubClientConfig {
        endpoint: hub,
        token: Some(secret.to_string()),
        timeout: Duration::from_secs(5),
        max_retries: 1,
        patience: Duration::ZERO,
        ..Default::default()
    })
    .unwrap();
    let repo = RepoRef::model("ns/m").unwrap();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let data = fake::data();

    let got = c.read_range(&repo, commit, "good", 10, 20).await.unwrap();
    assert_eq!(&got[..], &data[10..30]);
    {
        let reqs = seen.requests.lock();
        assert_eq!(reqs.len(), 2, "{reqs:?}");
        assert_eq!(
            reqs[0].2.as_deref(),
            Some(format!("Bearer {secret}").as_str()),
            "token to the Hub"
        );
        assert_eq!(reqs[1].2, None, "no token to the redirect target");
    }
    // Cached: only the CDN is asked.
    let got = c.read_range(&repo, commit, "good", 990, 100).await.unwrap();
    assert_eq!(&got[..], &data[990..], "short only at EOF");
    assert_eq!((seen.count("hub"), seen.count("cdn")), (1, 2));
    // The signature expires: the cached URL fails, the Hub is asked again, the read succeeds.
    seen.min_gen.store(2, Ordering::SeqCst);
    let got = c.read_range(&repo, commit, "good", 0, 5).await.unwrap();
    assert_eq!(&got[..], &data[0..5]);
    assert_eq!((seen.count("hub"), seen.count("cdn")), (2, 4));
    assert!(c.read_range(&repo, commit, "good", 5000, 5).await.unwrap().is_empty());

    // A server that ignores Range: the right slice anyway.
    let got = c.read_range(&repo, commit, "ignore-range", 100, 50).await.unwrap();
    assert_eq!(&got[..], &data[100..150]);
    let got = c.read_range(&repo, commit, "ignore-range", 980, 50).await.unwrap();
    assert_eq!(&got[..], &data[980..]);
    // A 206 for other bytes than asked is an error, not silent corruption.
    let e = c.read_range(&repo, commit, "bad-range", 500, 10).await.unwrap_err();
    assert!(matches!(e, HubClientError::InvalidResponse { .. }), "{e:?}");
    assert!(!e.to_string().contains(secret));

    // HEAD reads the metadata from the redirect and does not follow it.
    let before = seen.count("cdn");
    let head = c.head_file(&repo, commit, "other").await.unwrap();
    assert_eq!((head.size, head.etag.as_str()), (fake::DATA_LEN as u64, "abc"));
    assert_eq!(head.commit.as_deref(), Some(commit));
    assert_eq!(seen.count("cdn"), before);
    assert!(seen.requests.lock().iter().all(|r| r.0 == "hub" || r.2.is_none()));

    // A rotated token: later requests (of clones too) carry the new one, no request the old one.
    let clone = c.clone();
    c.set_token(Some("hf_rotated_secret")).unwrap();
    let n = seen.requests.lock().len();
    clone.head_file(&repo, commit, "other").await.unwrap();
    {
        let reqs = seen.requests.lock();
        assert_eq!(reqs[n].2.as_deref(), Some("Bearer hf_rotated_secret"));
    }
    assert!(c.set_token(Some("bad\ntoken")).is_err(), "an invalid token is refused");
    c.set_token(None).unwrap();
    assert!(!c.has_token());
    assert!(!format!("{c:?}").contains("hf_rotated_secret"));
}
