//! Read-only FUSE mounts against an in-process local Hub: real kernel mounts (these tests need root
//! and /dev/fuse, as CI has), bytes compared with the Hub's hashes, errno values checked.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::{FaultSettings, LocalHub, RouteClass};
use hubfs::process::session::{MountRequest, Mounted, mount};
use hubfs::vfs::VfsOptions;
use serde_json::json;
use sha2::{Digest, Sha256};

struct Env {
    rt: tokio::runtime::Runtime,
    hub: Option<LocalHub>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Env {
    fn new() -> Env {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let hub = rt.block_on(LocalHub::start_temp(true)).expect("local hub");
        Env {
            rt,
            hub: Some(hub),
            _dirs: Vec::new(),
        }
    }

    fn hub(&self) -> &LocalHub {
        self.hub.as_ref().unwrap()
    }

    fn client_cfg(&self, token: bool) -> HubClientConfig {
        HubClientConfig {
            endpoint: self.hub().endpoint().to_string(),
            token: if token { self.hub().write_token() } else { None },
            timeout: Duration::from_secs(5),
            max_retries: 1,
            patience: std::time::Duration::ZERO,
            ..HubClientConfig::from_env()
        }
    }

    fn try_mount(
        &mut self,
        repo: &str,
        revision: Option<&str>,
        opts: VfsOptions,
        token: bool,
    ) -> anyhow::Result<Mounted> {
        let dir = tempfile::tempdir().unwrap();
        let req = MountRequest {
            repo: repo.to_string(),
            mountpoint: dir.path().to_path_buf(),
            revision: revision.map(str::to_string),
            client: self.client_cfg(token),
            vfs: opts,
            allow_other: false,
        };
        let r = mount(req, &self.rt);
        self._dirs.push(dir);
        r
    }

    fn mount(&mut self, repo: &str, revision: Option<&str>) -> Mounted {
        self.try_mount(repo, revision, VfsOptions::default(), true)
            .expect("mount")
    }

    fn listing(&self, repo: &str, commit: &str) -> Vec<TreeEntry> {
        let client = HubClient::new(self.client_cfg(true)).unwrap();
        let (r, _, _) = RepoRef::parse(repo).unwrap();
        self.rt.block_on(client.list_tree_recursive(&r, commit, "")).unwrap()
    }

    fn commit_file(&self, repo_api: &str, path: &str, content: &str, create_pr: bool) -> serde_json::Value {
        let files = [(path.to_string(), content.to_string())];
        self.commit_files(repo_api, &format!("add {path}"), &files, create_pr)
    }

    /// One commit of `files` (path, UTF-8 content) to main through the NDJSON commit API.
    fn commit_files(
        &self,
        repo_api: &str,
        summary: &str,
        files: &[(String, String)],
        create_pr: bool,
    ) -> serde_json::Value {
        let mut body = format!("{}\n", json!({"key": "header", "value": {"summary": summary}}));
        for (path, content) in files {
            let line = json!({"key": "file", "value": {"path": path, "content": content, "encoding": "utf-8"}});
            body.push_str(&format!("{line}\n"));
        }
        let url = format!(
            "{}/api/{repo_api}/commit/main{}",
            self.hub().endpoint(),
            if create_pr { "?create_pr=1" } else { "" }
        );
        let token = self.hub().write_token().unwrap();
        self.rt.block_on(async {
            let r = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "commit failed: {}", r.status());
            r.json::<serde_json::Value>().await.unwrap()
        })
    }

    fn create_repo(&self, name: &str, ty: &str, private: bool) {
        let token = self.hub().write_token().unwrap();
        let url = format!("{}/api/repos/create", self.hub().endpoint());
        self.rt.block_on(async {
            let r = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&json!({"name": name, "organization": "local", "type": ty, "private": private}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
        });
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(h) = self.hub.take() {
            self.rt.block_on(h.stop());
        }
    }
}

fn sha256_file(p: &Path) -> String {
    let mut f = std::fs::File::open(p).unwrap();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    hex::encode(h.finalize())
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

#[test]
fn model_tree_bytes_and_erofs() {
    let mut env = Env::new();
    let m = env.mount("demo/tiny-model", None);
    let root = m.mountpoint.clone();
    let listing = env.listing("demo/tiny-model", &m.commit);
    let mut files = 0;
    for e in &listing {
        if let TreeEntry::File {
            path,
            size,
            oid,
            lfs_sha256,
            ..
        } = e
        {
            let p = root.join(path);
            let meta = std::fs::metadata(&p).unwrap();
            assert_eq!(meta.len(), *size, "{path} size");
            assert_eq!(meta.permissions().mode() & 0o777, 0o444);
            match lfs_sha256 {
                Some(sha) => assert_eq!(&sha256_file(&p), sha, "{path} sha256"),
                None => assert_eq!(&hubfs::local_hub::model::git_blob_oid(&std::fs::read(&p).unwrap()), oid),
            }
            files += 1;
        }
    }
    assert_eq!(files, 5);
    let mut names: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".gitattributes",
            "README.md",
            "config.json",
            "model.safetensors",
            "tokenizer.json"
        ]
    );

    // Odd offsets and lengths across 1 MiB requests and 8 MiB cache blocks, compared with the source.
    let expected = hubfs::local_hub::seed::demo_safetensors();
    let mut f = std::fs::File::open(root.join("model.safetensors")).unwrap();
    for (off, len) in [
        (0u64, 8usize),
        (1, 4095),
        ((8 << 20) - 3, 7),
        ((16 << 20) + 12345, 3 << 20),
        (expected.len() as u64 - 5, 100),
    ] {
        f.seek(SeekFrom::Start(off)).unwrap();
        let mut buf = vec![0u8; len];
        let n = f.read(&mut buf).unwrap();
        let want = &expected[off as usize..(off as usize + len).min(expected.len())];
        assert_eq!(&buf[..n], &want[..n.min(want.len())], "read at {off}");
        assert!(n == want.len() || n > 0, "no progress at {off}");
    }

    drop(f);

    // Every mutation answers EROFS.
    let erofs = libc::EROFS;
    assert_eq!(errno_of(std::fs::File::create(root.join("new.txt"))), erofs);
    assert_eq!(
        errno_of(std::fs::OpenOptions::new().write(true).open(root.join("config.json"))),
        erofs
    );
    assert_eq!(errno_of(std::fs::remove_file(root.join("config.json"))), erofs);
    assert_eq!(errno_of(std::fs::create_dir(root.join("d"))), erofs);
    assert_eq!(
        errno_of(std::fs::rename(root.join("config.json"), root.join("c2.json"))),
        erofs
    );
    assert_eq!(
        errno_of(std::fs::set_permissions(
            root.join("config.json"),
            std::fs::Permissions::from_mode(0o600)
        )),
        erofs
    );
    assert_eq!(
        errno_of(std::os::unix::fs::symlink("config.json", root.join("l"))),
        erofs
    );
    assert_eq!(
        errno_of(std::fs::hard_link(root.join("config.json"), root.join("h"))),
        erofs
    );
    let fifo = std::ffi::CString::new(root.join("p").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) };
    assert_eq!((rc, std::io::Error::last_os_error().raw_os_error()), (-1, Some(erofs)));
    assert_eq!(errno_of(std::fs::read_link(root.join("config.json"))), libc::EINVAL);
    assert_eq!(errno_of(std::fs::File::open(root.join("nope"))), libc::ENOENT);
    let long = "x".repeat(256);
    assert_eq!(errno_of(std::fs::metadata(root.join(long))), libc::ENAMETOOLONG);

    // No extended attributes: what a file system without them answers, every time (the kernel
    // answers itself after the first, so `ls -l` costs no request per file for its label and ACL).
    let cfg = std::ffi::CString::new(root.join("config.json").into_os_string().into_encoded_bytes()).unwrap();
    // (A POSIX ACL is the kernel's to answer: none, ENODATA.)
    for (attr, want) in [
        ("security.selinux", libc::EOPNOTSUPP),
        ("user.x", libc::EOPNOTSUPP),
        ("system.posix_acl_access", libc::ENODATA),
        ("security.selinux", libc::EOPNOTSUPP),
    ] {
        let name = std::ffi::CString::new(attr).unwrap();
        let mut buf = [0u8; 64];
        // SAFETY: valid NUL-terminated strings and a buffer of the length given.
        let rc = unsafe { libc::getxattr(cfg.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        let err = std::io::Error::last_os_error().raw_os_error();
        assert_eq!((rc, err), (-1, Some(want)), "getxattr {attr}");
    }
    // SAFETY: a valid NUL-terminated path and a buffer of the length given.
    let rc = unsafe { libc::listxattr(cfg.as_ptr(), [0 as libc::c_char; 64].as_mut_ptr(), 64) };
    let err = std::io::Error::last_os_error().raw_os_error();
    assert_eq!((rc, err), (-1, Some(libc::EOPNOTSUPP)), "listxattr");
    m.unmount().unwrap();
}

#[test]
fn dataset_listing_plain_lfs_and_subfolder() {
    let mut env = Env::new();
    let m = env.mount("datasets/demo/tiny-dataset", None);
    // Count without keeping DirEntry values: each holds the directory open (and the mount busy).
    let mut many = 0;
    for e in std::fs::read_dir(m.mountpoint.join("data/many")).unwrap() {
        e.unwrap();
        many += 1;
    }
    assert_eq!(many, hubfs::local_hub::seed::DEMO_MANY_FILES);
    let blob = m.mountpoint.join("data/blobs/images.bin");
    assert_eq!(
        sha256_file(&blob),
        hex::encode(Sha256::digest(hubfs::local_hub::seed::demo_bytes(3 << 20, 7)))
    );
    assert_eq!(
        std::fs::read_to_string(m.mountpoint.join("data/nested/a/b/c/deep.csv")).unwrap(),
        "x,y\n1,2\n"
    );
    m.unmount().unwrap();

    let sub = env.mount("hf://datasets/demo/tiny-dataset/data/train", None);
    let mut names: Vec<_> = std::fs::read_dir(&sub.mountpoint)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["shard-00000.csv", "shard-00001.csv", "shard-00002.csv"]);
    assert!(
        std::fs::read_to_string(sub.mountpoint.join("shard-00001.csv"))
            .unwrap()
            .starts_with("id,text,label\n200,")
    );
    sub.unmount().unwrap();
    assert!(
        env.try_mount(
            "hf://datasets/demo/tiny-dataset/no/such/dir",
            None,
            VfsOptions::default(),
            true
        )
        .is_err()
    );
}

#[test]
fn revisions_special_names_and_remote_updates() {
    let mut env = Env::new();
    env.create_repo("names", "dataset", false);
    let odd = ["a b/#hash?.txt", "pct%20/x.txt", "ünïcødé/日本.txt"];
    let mut first = String::new();
    for (i, p) in odd.iter().enumerate() {
        let r = env.commit_file("datasets/local/names", p, &format!("content {i}\n"), false);
        if i == 0 {
            first = r["commitOid"].as_str().unwrap().to_string();
        }
    }
    let pr = env.commit_file("datasets/local/names", "pr-only.txt", "from a PR\n", true);
    let pr_url = pr["pullRequestUrl"].as_str().unwrap();
    let pr_num = pr_url.rsplit('/').next().unwrap();

    let opts = VfsOptions {
        metadata_ttl: Duration::from_secs(1),
        ..VfsOptions::default()
    };
    let m = env.try_mount("datasets/local/names", None, opts, true).unwrap();
    for (i, p) in odd.iter().enumerate() {
        assert_eq!(
            std::fs::read_to_string(m.mountpoint.join(p)).unwrap(),
            format!("content {i}\n"),
            "{p}"
        );
    }
    assert!(!m.mountpoint.join("pr-only.txt").exists());

    // A remote commit shows up once the metadata TTL has passed.
    env.commit_file("datasets/local/names", "later.txt", "later\n", false);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !m.mountpoint.join("later.txt").exists() {
        assert!(Instant::now() < deadline, "remote commit never became visible");
        std::thread::sleep(Duration::from_millis(200));
    }
    m.unmount().unwrap();

    // Old commit id: only the first file. PR ref: the PR file. Tag-free branch name with '@' form.
    let old = env.mount(&format!("datasets/local/names@{first}"), None);
    assert!(old.mountpoint.join(odd[0]).exists());
    assert!(!old.mountpoint.join(odd[1]).exists());
    old.unmount().unwrap();
    let prm = env.mount("datasets/local/names", Some(&format!("refs/pr/{pr_num}")));
    assert_eq!(
        std::fs::read_to_string(prm.mountpoint.join("pr-only.txt")).unwrap(),
        "from a PR\n"
    );
    prm.unmount().unwrap();
    let err = env
        .try_mount(
            "datasets/local/names",
            Some("no-such-branch"),
            VfsOptions::default(),
            true,
        )
        .err()
        .unwrap();
    assert!(err.to_string().contains("revision"), "{err}");
}

#[test]
fn private_repo_needs_a_token() {
    let mut env = Env::new();
    env.create_repo("secret", "model", true);
    env.commit_file("models/local/secret", "s.txt", "shh\n", false);
    let err = env
        .try_mount("local/secret", None, VfsOptions::default(), false)
        .err()
        .unwrap();
    assert!(err.to_string().contains("private"), "{err}");
    let m = env
        .try_mount("local/secret", None, VfsOptions::default(), true)
        .unwrap();
    assert_eq!(std::fs::read_to_string(m.mountpoint.join("s.txt")).unwrap(), "shh\n");
    m.unmount().unwrap();
}

#[test]
fn hub_errors_and_stalls_give_eio_then_recover() {
    let mut env = Env::new();
    let opts = VfsOptions {
        read_timeout: Duration::from_secs(3),
        ..VfsOptions::default()
    };
    let m = env.try_mount("datasets/demo/tiny-dataset", None, opts, true).unwrap();
    // A plain-LFS file (redirected to the blob origin) and a regular file, each read first under a fault.
    let cases = [
        (
            "data/blobs/images.bin",
            3usize << 20,
            FaultSettings {
                error_rate: 1.0,
                ..Default::default()
            },
        ),
        (
            "data/train/shard-00002.csv",
            0,
            FaultSettings {
                stall_rate: 1.0,
                ..Default::default()
            },
        ),
    ];
    for (path, size, fault) in cases {
        let file = m.mountpoint.join(path);
        std::fs::metadata(&file).unwrap();
        env.hub().set_faults(RouteClass::Resolve, fault.clone()).unwrap();
        let t = Instant::now();
        let r = std::fs::read(&file);
        assert_eq!(errno_of(r), libc::EIO, "{fault:?}");
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "took {:?} under {fault:?}",
            t.elapsed()
        );
        env.hub().clear_faults();
        // A failed fetch is not cached, so the next read works.
        let data = std::fs::read(&file).unwrap();
        if size > 0 {
            assert_eq!(data.len(), size);
        } else {
            assert!(data.starts_with(b"id,text,label\n"));
        }
    }
    m.unmount().unwrap();
}

/// Content read once is served from the disk cache by a later mount with the same cache dir, even
/// when the CAS and the download origin fail every request; identical bytes are stored once.
/// A program that opens many files of one directory by name without listing it (a data loader,
/// fio) costs a few metadata requests for the directory, not one per file: after a few point
/// lookups the directory's listing is fetched once, in the background, and answers the rest.
#[test]
fn opening_many_files_by_name_lists_their_directory_once() {
    const FILES: usize = 60;
    let mut env = Env::new();
    env.create_repo("scan", "dataset", false);
    let files: Vec<(String, String)> = (0..FILES)
        .map(|i| (format!("d/f{i:02}.txt"), format!("file {i}\n")))
        .collect();
    env.commit_files("datasets/local/scan", "many files", &files, false);
    let m = env.mount("datasets/local/scan", None);
    env.hub().reset_stats();
    for i in 0..FILES {
        let got = std::fs::read_to_string(m.mountpoint.join(format!("d/f{i:02}.txt"))).unwrap();
        assert_eq!(got, format!("file {i}\n"));
        // Paced a little, as a loader would be: the background listing lands meanwhile.
        std::thread::sleep(Duration::from_millis(5));
    }
    let api = env.hub().stats(RouteClass::Api).requests;
    assert!(
        api <= 20,
        "{api} metadata requests for {FILES} files opened by name (one per file would be {FILES})"
    );
    assert_eq!(
        errno_of(std::fs::metadata(m.mountpoint.join("d/missing.txt"))),
        libc::ENOENT,
        "a name the listing lacks is absent"
    );
    m.unmount().unwrap();
}

#[test]
fn disk_cache_serves_a_remount_without_the_hub() {
    let mut env = Env::new();
    let cache = tempfile::tempdir().unwrap();
    let opts = VfsOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        disk_cache_bytes: 1 << 30,
        memory_cache_bytes: 16 << 20,
        read_timeout: Duration::from_secs(3),
        ..VfsOptions::default()
    };
    let m = env.try_mount("demo/tiny-model", None, opts.clone(), true).unwrap();
    let commit = m.commit.clone();
    let weights = m.mountpoint.join("model.safetensors");
    let size = std::fs::metadata(&weights).unwrap().len();
    let want = env
        .listing("demo/tiny-model", &commit)
        .into_iter()
        .find_map(|e| match e {
            TreeEntry::File { path, lfs_sha256, .. } if path == "model.safetensors" => lfs_sha256,
            _ => None,
        })
        .unwrap();
    let full = std::fs::read(&weights).unwrap();
    assert_eq!(hex::encode(Sha256::digest(&full)), want);
    m.unmount().unwrap();

    // Blocks land on disk in the background: wait until all of the file is there.
    let on_disk = |dir: &Path| -> u64 {
        fn walk(p: &Path) -> u64 {
            std::fs::read_dir(p)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| {
                            let m = e.metadata().unwrap();
                            if m.is_dir() { walk(&e.path()) } else { m.len() }
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        walk(&dir.join("blocks"))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while on_disk(cache.path()) < size && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        on_disk(cache.path()),
        size,
        "the disk cache holds the file exactly once"
    );

    // Remount at the same commit with every content request failing: bytes come from disk.
    let fail = FaultSettings {
        error_rate: 1.0,
        ..Default::default()
    };
    env.hub().set_faults(RouteClass::Cas, fail.clone()).unwrap();
    env.hub().set_faults(RouteClass::Resolve, fail).unwrap();
    // Control: with an empty cache dir the same read fails, so the bytes below come from the disk.
    let empty = tempfile::tempdir().unwrap();
    let cold_opts = VfsOptions {
        cache_dir: Some(empty.path().to_path_buf()),
        ..opts.clone()
    };
    let m = env
        .try_mount("demo/tiny-model", Some(&commit), cold_opts, true)
        .unwrap();
    assert_eq!(
        errno_of(std::fs::read(m.mountpoint.join("model.safetensors"))),
        libc::EIO
    );
    m.unmount().unwrap();

    let m = env.try_mount("demo/tiny-model", Some(&commit), opts, true).unwrap();
    let weights = m.mountpoint.join("model.safetensors");
    // Seeks first, while the memory tier is empty: each is served by reading just its range out of
    // a disk block (a whole-block load would also do, but these must not need the Hub either).
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&weights).unwrap();
        let mut indexed = false;
        for _ in 0..50 {
            let mut probe = [0u8; 4096];
            if f.read_exact_at(&mut probe, size / 2).is_ok() {
                assert_eq!(&probe[..], &full[(size / 2) as usize..][..4096]);
                indexed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(indexed, "the remount never served a seek from the disk cache");
        for off in [size - 4096 - 3, 20 << 20, (8 << 20) - 100, 4096 * 1001 + 7, 50 << 20] {
            let mut buf = vec![0u8; 4096];
            f.read_exact_at(&mut buf, off).unwrap();
            assert_eq!(buf, &full[off as usize..][..4096], "4 KiB at {off} from the disk cache");
        }
    }
    let mut got = None;
    // The new mount indexes the cache dir in the background; give it a moment.
    for _ in 0..50 {
        match std::fs::read(&weights) {
            Ok(d) => {
                got = Some(d);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let got = got.expect("the remount never read the file from the disk cache");
    assert_eq!(hex::encode(Sha256::digest(&got)), want);
    env.hub().clear_faults();
    m.unmount().unwrap();
}
