//! A writable mount the token cannot write is refused before anything is mounted (issue 27, part 3):
//! the built binary against a local Hub, with classic read tokens, fine-grained tokens scoped
//! read-only or to another repo, and no token; a fine-grained token scoped to write the repo mounts
//! and its file lands on the Hub. Also what `HubClient::whoami` reads from the local Hub's answers.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoKind, RepoRef, TokenRole, WriteAccess};
use hubfs::local_hub::LocalHub;

const ALICE_WRITE: &str = "hf_alice_write";
/// Reads alice/data, writes nothing.
const FG_READ: &str = "hf_alice_fg_read";
/// Writes alice/other only.
const FG_OTHER: &str = "hf_alice_fg_other";
/// Reads and writes alice/data.
const FG_WRITE: &str = "hf_alice_fg_write";
/// Reads and writes everything of alice's (her buckets too).
const FG_NAMESPACE: &str = "hf_alice_fg_namespace";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The binary with its own home, cache and registry, pointed at `ep`, with `token` (or none).
struct Cli(common::isolated::Isolated);

impl Cli {
    fn new(ep: &str) -> Cli {
        Cli(common::isolated::Isolated::new(ep))
    }

    fn path(&self, p: &str) -> PathBuf {
        self.0.path(p)
    }

    fn run(&self, token: Option<&str>, args: &[&str]) -> Output {
        self.0.command(token).args(args).output().expect("run hubfs")
    }

    /// Runs `args` and checks it failed with `want` (all of them) in its last stderr line, that
    /// the token is in none of its output, and that nothing got mounted on `dir`.
    fn refused(&self, token: Option<&str>, args: &[&str], dir: &Path, want: &[&str]) {
        let o = self.run(token, args);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(!o.status.success(), "{args:?} succeeded: {out}{err}");
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        assert!(last.starts_with("hubfs: "), "{args:?}: {err}");
        for w in want {
            assert!(last.contains(w), "{args:?}: {w:?} not in {last:?}");
        }
        if let Some(t) = token {
            assert!(!err.contains(t) && !out.contains(t), "the token leaked: {out}{err}");
        }
        assert!(!out.contains("mounted") && !out.contains("serving"), "{args:?}: {out}");
        assert!(!mounted(dir), "{args:?} left a mount on {}", dir.display());
    }
}

fn mounted(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

/// A dataset `ns/name` with one file, created with `token`.
fn create_dataset(rt: &tokio::runtime::Runtime, ep: &str, token: &str, id: &str, private: bool) -> common::Repo {
    let repo = common::Repo::dataset(id);
    let c = common::client();
    rt.block_on(async {
        common::create_repo_ok(&c, ep, token, &repo, private).await;
        common::commit_ok(
            &c,
            ep,
            token,
            &repo,
            &[
                common::header_line("seed", None),
                common::utf8_line("README.md", "seed\n"),
            ],
        )
        .await;
    });
    repo
}

/// Every way to ask for a writable mount of `spec` on `dir`: FUSE in the foreground and as a
/// daemon, NFS through `mount --nfs` and `serve-nfs`.
fn writable_mounts<'a>(spec: &'a str, dir: &'a str) -> Vec<Vec<&'a str>> {
    vec![
        vec!["mount", "--write", spec, dir],
        vec!["mount", "--write", "--daemon", spec, dir],
        vec!["mount", "--nfs", "--serve-only", "--write", spec, dir],
        vec!["serve-nfs", "--write", spec, "--nfs-addr", "127.0.0.1:0"],
    ]
}

#[test]
fn write_mounts_with_a_read_token_or_none_are_refused_before_mounting() {
    let rt = runtime();
    let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
    let ep = hub.endpoint().to_string();
    create_dataset(&rt, &ep, common::WRITE, "local/wa", false);
    let cli = Cli::new(&ep);
    let dir = cli.path("mnt");
    std::fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();

    for args in writable_mounts("datasets/local/wa", d) {
        cli.refused(
            Some(common::READ),
            &args,
            &dir,
            &["may not write to datasets/local/wa", "read token", "without --write"],
        );
    }
    // No token at all: said before asking the Hub anything.
    cli.refused(
        None,
        &["mount", "--write", "datasets/local/wa", d],
        &dir,
        &["--write needs a token", "HF_TOKEN"],
    );

    // The same token mounts the repo read-only, and the write token writable: the check refuses
    // the token, not the repo.
    let o = cli.run(Some(common::READ), &["mount", "--daemon", "datasets/local/wa", d]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(dir.join("README.md")).unwrap(), b"seed\n");
    unmount(&cli, &dir);
    let o = cli.run(
        Some(common::WRITE),
        &["mount", "--daemon", "--write", "datasets/local/wa", d],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    unmount(&cli, &dir);
    rt.block_on(hub.stop());
}

fn unmount(cli: &Cli, dir: &Path) {
    let o = cli.run(None, &["unmount", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = Instant::now();
    while mounted(dir) {
        assert!(t.elapsed() < Duration::from_secs(60), "still mounted");
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn fine_grained_hub() -> LocalHub {
    let tokens = [
        format!("alice:{ALICE_WRITE}:write"),
        format!("alice:{FG_READ}:fineGrained:dataset/alice/data=repo.content.read,global=discussion.write"),
        format!("alice:{FG_OTHER}:fineGrained:dataset/alice/other=repo.content.read+repo.write"),
        format!("alice:{FG_WRITE}:fineGrained:dataset/alice/data=repo.content.read+repo.write"),
        format!("alice:{FG_NAMESPACE}:fineGrained:user/alice=repo.content.read+repo.write"),
    ];
    LocalHub::start_temp_with(false, |c| {
        c.tokens = tokens.iter().map(|s| s.parse().unwrap()).collect()
    })
    .await
    .unwrap()
}

#[test]
fn fine_grained_tokens_mount_writable_only_where_they_may_write() {
    let rt = runtime();
    let hub = rt.block_on(fine_grained_hub());
    let ep = hub.endpoint().to_string();
    let repo = create_dataset(&rt, &ep, ALICE_WRITE, "alice/data", true);
    let cli = Cli::new(&ep);
    let dir = cli.path("mnt");
    std::fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();

    // The local Hub enforces the scopes as the Hub does: no commit without repo.write on the repo
    // (403), and a private repo the token may not read does not exist for it (404).
    let c = common::client();
    for (token, status) in [
        (FG_READ, reqwest::StatusCode::FORBIDDEN),
        (FG_OTHER, reqwest::StatusCode::NOT_FOUND),
    ] {
        let lines = [common::header_line("nope", None), common::utf8_line("x.txt", "x")];
        let r = rt.block_on(common::commit_raw(
            &c,
            &ep,
            token,
            &repo,
            "main",
            "",
            common::ndjson(&lines),
        ));
        assert_eq!(r.status(), status, "commit with {token}");
    }

    for token in [FG_READ, FG_OTHER] {
        for args in writable_mounts("datasets/alice/data", d) {
            cli.refused(
                Some(token),
                &args,
                &dir,
                &["may not write to datasets/alice/data", "fine-grained", "repo.write"],
            );
        }
    }
    // Read-only, the read-scoped token mounts the private repo.
    let o = cli.run(Some(FG_READ), &["mount", "--daemon", "datasets/alice/data", d]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(dir.join("README.md")).unwrap(), b"seed\n");
    unmount(&cli, &dir);

    // Scoped to write the repo: mounts writable, and a file written lands on the Hub.
    let o = cli.run(
        Some(FG_WRITE),
        &["mount", "--daemon", "--write", "datasets/alice/data", d],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(
        dir.join("from-fine-grained.txt"),
        b"written with a fine-grained token\n",
    )
    .unwrap();
    let o = cli.run(None, &["sync", d]);
    assert!(o.status.success(), "sync: {}", String::from_utf8_lossy(&o.stderr));
    unmount(&cli, &dir);
    let got = rt.block_on(async {
        c.get(repo.resolve(&ep, "main", "from-fine-grained.txt"))
            .header("authorization", common::bearer(ALICE_WRITE))
            .send()
            .await
            .unwrap()
    });
    assert_eq!(got.status(), reqwest::StatusCode::OK);
    assert_eq!(
        rt.block_on(got.bytes()).unwrap().as_ref(),
        b"written with a fine-grained token\n"
    );

    // A bucket: whoami names no bucket permissions, so a token scoped to one dataset is judged by
    // the Hub's answer to a Xet write token: refused with --write, read-only without.
    let r = rt.block_on(async {
        c.post(format!("{ep}/api/buckets/alice/b"))
            .header("authorization", common::bearer(ALICE_WRITE))
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap()
    });
    assert!(r.status().is_success(), "create bucket: {}", r.status());
    cli.refused(
        Some(FG_WRITE),
        &["mount", "--write", "buckets/alice/b", d],
        &dir,
        &["may not write to buckets/alice/b", "--read-only"],
    );
    let o = cli.run(Some(FG_WRITE), &["mount", "--daemon", "buckets/alice/b", d]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let e = std::fs::write(dir.join("x"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    unmount(&cli, &dir);
    // repo.write on the namespace covers its buckets.
    let o = cli.run(
        Some(FG_NAMESPACE),
        &["mount", "--daemon", "--write", "buckets/alice/b", d],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(dir.join("in-bucket.txt"), b"bucket\n").unwrap();
    let o = cli.run(None, &["sync", d]);
    assert!(o.status.success(), "sync: {}", String::from_utf8_lossy(&o.stderr));
    unmount(&cli, &dir);
    // The bucket's file is there: its download redirects to the blob origin (404 if missing).
    let got = rt.block_on(async {
        c.get(format!("{ep}/buckets/alice/b/resolve/in-bucket.txt"))
            .header("authorization", common::bearer(ALICE_WRITE))
            .send()
            .await
            .unwrap()
    });
    assert_eq!(got.status(), reqwest::StatusCode::FOUND);
    rt.block_on(hub.stop());
}

#[test]
fn whoami_reads_the_local_hubs_answers() {
    let rt = runtime();
    let hub = rt.block_on(fine_grained_hub());
    let ep = hub.endpoint().to_string();
    let client = |token: Option<&str>| {
        HubClient::new(HubClientConfig {
            endpoint: ep.clone(),
            token: token.map(str::to_string),
            ..Default::default()
        })
        .unwrap()
    };
    let data = RepoRef::dataset("alice/data").unwrap();
    let other = RepoRef::dataset("alice/other").unwrap();
    let bucket = RepoRef::new(RepoKind::Bucket, "alice", "b");
    rt.block_on(async {
        let w = client(Some(ALICE_WRITE)).whoami().await.unwrap();
        assert_eq!((w.name.as_str(), &w.token), ("alice", &TokenRole::Write));

        let r = client(Some(FG_READ)).whoami().await.unwrap();
        let TokenRole::FineGrained(fg) = &r.token else {
            panic!("{r:?}")
        };
        assert_eq!(fg.global, vec!["discussion.write".to_string()]);
        assert_eq!(fg.scoped[0].entity_type, "dataset");
        assert_eq!(fg.scoped[0].entity_name, "alice/data");
        assert!(matches!(r.write_access(&data), WriteAccess::No(_)));
        assert_eq!(r.write_access(&bucket), WriteAccess::Unknown);

        let o = client(Some(FG_OTHER)).write_access(&data).await;
        assert!(matches!(o, WriteAccess::No(m) if m.contains("fine-grained")));
        assert_eq!(client(Some(FG_OTHER)).write_access(&other).await, WriteAccess::Yes);
        assert_eq!(client(Some(FG_WRITE)).write_access(&data).await, WriteAccess::Yes);

        // No token: no; a token the Hub does not know: the Hub cannot say (opening reports it).
        assert!(matches!(client(None).write_access(&data).await, WriteAccess::No(_)));
        let e = client(Some("hf_unknown")).whoami().await.unwrap_err();
        assert!(
            matches!(e, hubfs::hub_client::HubClientError::Unauthorized { .. }),
            "{e:?}"
        );
        assert!(!e.to_string().contains("hf_unknown"));
        assert_eq!(
            client(Some("hf_unknown")).write_access(&data).await,
            WriteAccess::Unknown
        );
    });
    rt.block_on(hub.stop());
}
