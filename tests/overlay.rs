//! Overlay mounts as a person uses them: `hubfs mount --overlay --daemon` with a read token, edits
//! through the mount, a crash, a remount, `hubfs overlay diff`, `reset` and `commit` (to a branch
//! or as a pull request with a write token); every outcome checked on the Hub.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use hubfs::local_hub::LocalHub;
use serde_json::Value;
use sha2::{Digest, Sha256};

mod common;

const REPO: &str = "demo/tiny-model";

struct T {
    rt: tokio::runtime::Runtime,
    hub: Option<LocalHub>,
    dir: tempfile::TempDir,
}

impl T {
    fn new() -> T {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("m")).unwrap();
        T {
            rt,
            hub: Some(hub),
            dir,
        }
    }

    fn ep(&self) -> String {
        self.hub.as_ref().unwrap().endpoint().to_string()
    }

    fn mnt(&self) -> PathBuf {
        self.dir.path().join("m")
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    fn hubfs(&self, args: &[&str], token: &str) -> Output {
        Command::new(env!("CARGO_BIN_EXE_hubfs"))
            .args(args)
            .env("HF_ENDPOINT", self.ep())
            .env("HF_TOKEN", token)
            .env("HF_HOME", self.dir.path().join("hf-home"))
            .env("XDG_CACHE_HOME", self.dir.path().join("xdg"))
            .output()
            .expect("run hubfs")
    }

    /// `hubfs ARGS` that must succeed; its stdout.
    fn ok(&self, args: &[&str], token: &str) -> String {
        let o = self.hubfs(args, token);
        assert!(
            o.status.success(),
            "hubfs {args:?} failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Mounts the overlay as a daemon (read token); returns the mount's pid.
    fn mount(&self) -> u32 {
        self.mount_with(&[])
    }

    /// `mount` with more options.
    fn mount_with(&self, extra: &[&str]) -> u32 {
        let (m, c) = (self.mnt(), self.cache());
        let mut args = vec![
            "mount",
            REPO,
            m.to_str().unwrap(),
            "--overlay",
            "--daemon",
            "--cache-dir",
            c.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = self.ok(&args, "hf_local_read");
        out.split("(pid ")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {out:?}"))
    }

    fn unmount(&self) {
        self.ok(&["unmount", self.mnt().to_str().unwrap()], "hf_local_read");
    }

    fn get(&self, path: &str) -> Value {
        self.rt.block_on(async {
            let r = reqwest::Client::new()
                .get(format!("{}{path}", self.ep()))
                .header("authorization", "Bearer hf_local_write")
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "GET {path}: {}", r.status());
            r.json().await.unwrap()
        })
    }

    fn head(&self, rev: &str) -> String {
        let v = self.get(&format!("/api/models/{REPO}/revision/{}", rev.replace('/', "%2F")));
        v["sha"].as_str().unwrap().to_string()
    }

    /// Every file at `rev`: path → (size, content id: the LFS sha256, else the git oid).
    fn files(&self, rev: &str) -> BTreeMap<String, (u64, String)> {
        let v = self.get(&format!(
            "/api/models/{REPO}/tree/{}?recursive=true",
            rev.replace('/', "%2F")
        ));
        v.as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "file")
            .map(|e| {
                let id = e["lfs"]["oid"].as_str().or(e["oid"].as_str()).unwrap().to_string();
                (
                    e["path"].as_str().unwrap().to_string(),
                    (e["size"].as_u64().unwrap(), id),
                )
            })
            .collect()
    }

    fn content(&self, rev: &str, path: &str) -> Vec<u8> {
        self.rt.block_on(async {
            let r = reqwest::Client::new()
                .get(format!(
                    "{}/{REPO}/resolve/{}/{path}",
                    self.ep(),
                    rev.replace('/', "%2F")
                ))
                .header("authorization", "Bearer hf_local_write")
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "resolve {path}@{rev}: {}", r.status());
            r.bytes().await.unwrap().to_vec()
        })
    }

    /// Commits `path` = `text` to main through the Hub's API (someone else's change).
    fn hub_commit(&self, path: &str, text: &str) {
        use base64::Engine;
        let body = format!(
            "{}\n{}\n",
            serde_json::json!({"key": "header", "value": {"summary": "elsewhere"}}),
            serde_json::json!({"key": "file", "value": {"path": path, "encoding": "base64",
                "content": base64::engine::general_purpose::STANDARD.encode(text)}})
        );
        self.rt.block_on(async {
            let r = reqwest::Client::new()
                .post(format!("{}/api/models/{REPO}/commit/main", self.ep()))
                .header("authorization", "Bearer hf_local_write")
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "commit: {}", r.status());
        });
    }

    fn diff(&self, extra: &[&str]) -> Vec<Value> {
        let m = self.mnt();
        let mut args = vec!["overlay", "diff", m.to_str().unwrap(), "--json"];
        args.extend_from_slice(extra);
        let v: Value = serde_json::from_str(&self.ok(&args, "hf_local_read")).unwrap();
        v["changes"].as_array().unwrap().clone()
    }
}

impl Drop for T {
    fn drop(&mut self) {
        let m = self.mnt();
        if std::fs::read_to_string("/proc/mounts").is_ok_and(|s| s.contains(m.to_str().unwrap())) {
            let _ = self.hubfs(&["unmount", m.to_str().unwrap()], "hf_local_read");
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
        if let Some(h) = self.hub.take() {
            self.rt.block_on(h.stop());
        }
    }
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// kind and path of each change, sorted.
fn kinds(changes: &[Value]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = changes
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

fn kill9(pid: u32, mnt: &Path) {
    // The mount's FUSE connection, to abort if a thread of the dead mount waits on it.
    let conn = std::fs::metadata(mnt).ok().map(|m| {
        use std::os::unix::fs::MetadataExt;
        libc::minor(m.dev())
    });
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    // Gone once every thread has exited: a zombie leader alone still holds the process's files
    // (the staging lock) while another thread finishes dying, e.g. one blocked on the mount itself.
    let alive = || {
        std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|rd| {
            rd.flatten().any(|t| {
                std::fs::read_to_string(t.path().join("stat")).is_ok_and(|s| !s.contains(") Z ") && !s.contains(") X "))
            })
        })
    };
    for i in 0..200 {
        if !alive() {
            break;
        }
        if i == 40
            && let Some(c) = conn
        {
            let _ = std::fs::write(format!("/sys/fs/fuse/connections/{c}/abort"), "1");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("umount").arg("-l").arg(mnt).status();
}

#[test]
fn a_read_token_overlay_keeps_edits_through_a_crash_and_publishes_them_as_a_pull_request() {
    let t = T::new();
    let main_before = t.head("main");
    let hub_before = t.files("main");
    let model = hub_before["model.safetensors"].clone();
    let tokenizer = hub_before["tokenizer.json"].clone();

    let pid = t.mount();
    let m = t.mnt();
    let config = br#"{"architectures": ["TinyDemoModel"], "hidden_size": 64, "edited": true}"#;
    let eval = br#"{"accuracy": 0.93}"#;
    std::fs::write(m.join("config.json"), config).unwrap();
    std::fs::create_dir(m.join("notes")).unwrap();
    std::fs::write(m.join("notes/eval.json"), eval).unwrap();
    std::fs::remove_file(m.join("README.md")).unwrap();
    std::fs::rename(m.join("tokenizer.json"), m.join("tokenizer-v2.json")).unwrap();
    assert_eq!(t.head("main"), main_before, "an overlay wrote to the Hub");

    // A crash, then a remount: every change is there.
    kill9(pid, &m);
    t.mount();
    assert_eq!(std::fs::read(m.join("config.json")).unwrap(), config);
    assert_eq!(std::fs::read(m.join("notes/eval.json")).unwrap(), eval);
    assert!(!m.join("README.md").exists());
    assert!(!m.join("tokenizer.json").exists());
    assert_eq!(
        sha(&std::fs::read(m.join("tokenizer-v2.json")).unwrap()),
        sha(&t.content("main", "tokenizer.json"))
    );
    // Unchanged files read as the Hub has them.
    assert_eq!(
        sha(&std::fs::read(m.join("model.safetensors")).unwrap()),
        model.1,
        "model.safetensors through the overlay"
    );

    let changes = t.diff(&[]);
    assert_eq!(
        kinds(&changes),
        [
            ("added".into(), "notes/eval.json".into()),
            ("deleted".into(), "README.md".into()),
            ("modified".into(), "config.json".into()),
            ("renamed".into(), "tokenizer-v2.json".into()),
        ],
        "{changes:#?}"
    );
    let renamed = changes.iter().find(|c| c["kind"] == "renamed").unwrap();
    assert_eq!(renamed["from"], "tokenizer.json");
    let modified = changes.iter().find(|c| c["kind"] == "modified").unwrap();
    assert_eq!(modified["size"], config.len() as u64);

    // The read token cannot publish; nothing changes and the layer stays.
    let ms = m.to_str().unwrap();
    let o = t.hubfs(
        &["overlay", "commit", ms, "-m", "Eval results", "--pr"],
        "hf_local_read",
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("write"), "{err}");
    assert!(!err.contains("hf_local_read"), "the token is in an error: {err}");
    assert_eq!(t.diff(&[]).len(), 4);

    let out = t.ok(
        &["overlay", "commit", ms, "-m", "Eval results", "--pr"],
        "hf_local_write",
    );
    assert!(out.contains("/discussions/1"), "{out}");
    assert_eq!(t.head("main"), main_before, "main moved");
    assert_eq!(t.files("main"), hub_before);

    let discussions = t.get(&format!("/api/models/{REPO}/discussions"));
    let pr = &discussions["discussions"][0];
    assert_eq!(pr["isPullRequest"], true);
    assert_eq!(pr["title"], "Eval results");
    let pr_files = t.files("refs/pr/1");
    let mut want = hub_before.clone();
    want.remove("README.md");
    want.remove("tokenizer.json");
    want.insert("tokenizer-v2.json".into(), tokenizer);
    want.insert("config.json".into(), pr_files["config.json"].clone());
    want.insert("notes/eval.json".into(), pr_files["notes/eval.json"].clone());
    assert_eq!(pr_files, want, "the pull request's tree");
    assert_eq!(t.content("refs/pr/1", "config.json"), config);
    assert_eq!(t.content("refs/pr/1", "notes/eval.json"), eval);
    assert_eq!(pr_files["model.safetensors"], model, "the model file changed");
    let pr_commit = t.head("refs/pr/1");
    let info = t.get(&format!("/api/models/{REPO}/commits/refs%2Fpr%2F1"));
    assert_eq!(info[1]["id"], main_before, "the pull request's parent: {info}");

    // The layer is empty and the mount shows the pull request's commit.
    assert_eq!(t.diff(&[]), Vec::<Value>::new());
    assert_eq!(std::fs::read(m.join("config.json")).unwrap(), config);
    let status: Value = serde_json::from_str(&t.ok(&["status", "--json"], "hf_local_read")).unwrap();
    let mine = status
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mountpoint"] == ms)
        .cloned()
        .unwrap_or_default();
    assert_eq!(mine["mode"], "overlay", "{status}");
    let _ = pr_commit;
    t.unmount();
}

#[test]
fn an_overlay_never_overwrites_the_hub_and_reports_conflicts() {
    let t = T::new();
    t.mount();
    let m = t.mnt();
    let ms = m.to_str().unwrap();
    std::fs::write(m.join("config.json"), b"{\"mine\": 1}").unwrap();
    std::fs::write(m.join("extra.txt"), b"extra").unwrap();

    // Someone changes another file on main: the commit goes on top of the new head.
    t.hub_commit("README.md", "# changed elsewhere\n");
    let head = t.head("main");
    std::fs::write(m.join("config.json"), b"{\"mine\": 2}").unwrap();
    let out = t.ok(&["overlay", "commit", ms, "-m", "mine"], "hf_local_write");
    assert!(out.contains("committed"), "{out}");
    let after = t.files("main");
    assert_eq!(t.content("main", "config.json"), b"{\"mine\": 2}");
    assert_eq!(t.content("main", "README.md"), b"# changed elsewhere\n");
    assert!(after.contains_key("extra.txt"));
    let log = t.get(&format!("/api/models/{REPO}/commits/main"));
    assert_eq!(log[1]["id"], head.as_str(), "not on top of the moved head: {log}");

    // Someone changes a file the layer changed too: nothing is published, the conflict is shown.
    std::fs::write(m.join("config.json"), b"{\"mine\": 3}").unwrap();
    t.hub_commit("config.json", "{\"theirs\": 1}");
    let o = t.hubfs(&["overlay", "commit", ms, "-m", "again"], "hf_local_write");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("config.json"));
    assert_eq!(t.content("main", "config.json"), b"{\"theirs\": 1}");
    let changes = t.diff(&[]);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["conflict"], true, "{changes:?}");
    // Refused again without --force; with it, the layer's version wins.
    let o = t.hubfs(&["overlay", "commit", ms, "-m", "again"], "hf_local_write");
    assert!(!o.status.success());
    t.ok(&["overlay", "commit", ms, "-m", "again", "--force"], "hf_local_write");
    assert_eq!(t.content("main", "config.json"), b"{\"mine\": 3}");

    // A conflict found at remount: the layer's version is kept and marked; reset takes the Hub's.
    std::fs::write(m.join("config.json"), b"{\"mine\": 4}").unwrap();
    t.unmount();
    t.hub_commit("config.json", "{\"theirs\": 2}");
    t.mount();
    assert_eq!(std::fs::read(m.join("config.json")).unwrap(), b"{\"mine\": 4}");
    let changes = t.diff(&[]);
    assert_eq!(changes[0]["conflict"], true, "{changes:?}");
    let o = t.hubfs(&["overlay", "commit", ms, "-m", "x"], "hf_local_write");
    assert!(!o.status.success());
    t.ok(&["overlay", "reset", ms, "config.json"], "hf_local_read");
    assert_eq!(std::fs::read(m.join("config.json")).unwrap(), b"{\"theirs\": 2}");
    assert_eq!(t.diff(&[]), Vec::<Value>::new());
    t.unmount();
}

#[test]
fn a_layer_whose_mount_is_gone_can_be_listed_reset_and_published() {
    let t = T::new();
    t.mount();
    let m = t.mnt();
    let (ms, cache) = (m.to_str().unwrap().to_string(), t.cache());
    let cs = cache.to_str().unwrap();
    std::fs::write(m.join("a.txt"), b"a").unwrap();
    std::fs::write(m.join("b.txt"), b"b").unwrap();
    std::os::unix::fs::symlink("a.txt", m.join("link")).unwrap();
    std::fs::remove_file(m.join("README.md")).unwrap();
    t.unmount();

    // Without the cache dir, the layer is not found: the message says what to pass.
    let o = t.hubfs(&["overlay", "diff", &ms], "hf_local_read");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--cache-dir"));

    let changes = t.diff(&["--cache-dir", cs]);
    assert_eq!(
        kinds(&changes),
        [
            ("added".into(), "a.txt".into()),
            ("added".into(), "b.txt".into()),
            ("deleted".into(), "README.md".into()),
            ("local".into(), "link".into()),
        ]
    );
    t.ok(
        &["overlay", "reset", &ms, "b.txt", "README.md", "--cache-dir", cs],
        "hf_local_read",
    );
    assert_eq!(t.diff(&["--cache-dir", cs]).len(), 2);
    let before = t.head("main");
    t.ok(
        &[
            "overlay",
            "commit",
            &ms,
            "-m",
            "offline",
            "--branch",
            "offline",
            "--cache-dir",
            cs,
        ],
        "hf_local_write",
    );
    assert_eq!(t.head("main"), before);
    let files = t.files("offline");
    assert!(files.contains_key("a.txt") && files.contains_key("README.md") && !files.contains_key("b.txt"));
    assert!(!files.contains_key("link"), "a symlink reached the Hub");
    // What the Hub cannot store stays in the layer.
    assert_eq!(kinds(&t.diff(&["--cache-dir", cs])), [("local".into(), "link".into())]);

    // The next mount shows main again with the symlink still there.
    t.mount();
    assert!(!m.join("a.txt").exists());
    assert_eq!(std::fs::read_link(m.join("link")).unwrap(), Path::new("a.txt"));
    t.unmount();
}

mod nfs {
    //! The same layer over NFS: `hubfs serve-nfs --overlay`, written through a userspace NFS client.

    use std::io::BufRead;
    use std::process::{Command, Stdio};

    use nfs3_client::nfs3_types::nfs3::{self, diropargs3, filename3};
    use nfs3_client::nfs3_types::xdr_codec::Opaque;

    use super::*;

    fn name(s: &str) -> filename3<'static> {
        filename3(Opaque::owned(s.as_bytes().to_vec()))
    }

    /// CREATE `name` in `dir` (truncating one that exists) and WRITE `data` FILE_SYNC.
    async fn put(c: &mut super::common::NfsConn, dir: &nfs3::nfs_fh3, name: &str, data: &[u8]) {
        let r = c
            .create(&nfs3::CREATE3args {
                where_: diropargs3 {
                    dir: dir.clone(),
                    name: self::name(name),
                },
                how: nfs3::createhow3::UNCHECKED(nfs3::sattr3 {
                    size: nfs3::set_size3::Some(0),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .unwrap();
        let nfs3::post_op_fh3::Some(fh) = r.obj else {
            panic!("CREATE {name} returned no handle")
        };
        let w = c
            .write(&nfs3::WRITE3args {
                file: fh,
                offset: 0,
                count: data.len() as u32,
                stable: nfs3::stable_how::FILE_SYNC,
                data: Opaque::owned(data.to_vec()),
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(w.count as usize, data.len());
    }

    #[test]
    fn serve_nfs_overlay_carries_the_same_workflow_to_a_pull_request() {
        let t = T::new();
        let cache = t.cache();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hubfs"))
            .args([
                "serve-nfs",
                REPO,
                "--overlay",
                "--nfs-addr",
                "127.0.0.1:0",
                "--cache-dir",
            ])
            .arg(&cache)
            .env("HF_ENDPOINT", t.ep())
            .env("HF_TOKEN", "hf_local_read")
            .env("XDG_CACHE_HOME", t.dir.path().join("xdg"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn hubfs serve-nfs");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("serve-nfs printed nothing").unwrap();
        let addr: std::net::SocketAddr = first.strip_prefix("nfs: ").expect(&first).parse().unwrap();
        std::thread::spawn(move || for _ in lines {});
        let url = format!("nfs://{addr}/");
        let main_before = t.head("main");
        let hub_before = t.files("main");
        let config = br#"{"edited over": "NFS"}"#.to_vec();
        let eval = br#"{"accuracy": 0.91}"#.to_vec();

        t.rt.block_on(async {
            let mut c = super::common::nfs_mount(addr.port()).await.unwrap();
            let root = c.root_nfs_fh3();
            put(&mut c, &root, "config.json", &config).await;
            let made = c
                .mkdir(&nfs3::MKDIR3args {
                    where_: diropargs3 {
                        dir: root.clone(),
                        name: name("notes"),
                    },
                    attributes: nfs3::sattr3::default(),
                })
                .await
                .unwrap()
                .unwrap();
            let nfs3::post_op_fh3::Some(notes) = made.obj else {
                panic!("MKDIR returned no handle")
            };
            put(&mut c, &notes, "eval.json", &eval).await;
            c.remove(&nfs3::REMOVE3args {
                object: diropargs3 {
                    dir: root.clone(),
                    name: name("README.md"),
                },
            })
            .await
            .unwrap()
            .unwrap();
            c.rename(&nfs3::RENAME3args {
                from: diropargs3 {
                    dir: root.clone(),
                    name: name("tokenizer.json"),
                },
                to: diropargs3 {
                    dir: root,
                    name: name("tokenizer-v2.json"),
                },
            })
            .await
            .unwrap()
            .unwrap();
        });
        assert_eq!(t.head("main"), main_before, "an overlay wrote to the Hub");

        let out = t.ok(&["overlay", "diff", &url, "--json"], "hf_local_read");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            kinds(v["changes"].as_array().unwrap()),
            [
                ("added".into(), "notes/eval.json".into()),
                ("deleted".into(), "README.md".into()),
                ("modified".into(), "config.json".into()),
                ("renamed".into(), "tokenizer-v2.json".into()),
            ]
        );
        // The write handles the NFS server still holds do not stop a publish: the files were
        // written FILE_SYNC.
        let out = t.ok(&["overlay", "commit", &url, "-m", "over NFS", "--pr"], "hf_local_write");
        assert!(out.contains("pull request #1"), "{out}");
        assert_eq!(t.head("main"), main_before);
        assert_eq!(t.files("main"), hub_before);
        let pr = t.files("refs/pr/1");
        let mut want: Vec<&str> = hub_before.keys().map(String::as_str).collect();
        want.retain(|p| *p != "README.md" && *p != "tokenizer.json");
        want.extend(["notes/eval.json", "tokenizer-v2.json"]);
        want.sort();
        assert_eq!(pr.keys().map(String::as_str).collect::<Vec<_>>(), want);
        assert_eq!(pr["tokenizer-v2.json"], hub_before["tokenizer.json"]);
        assert_eq!(pr["model.safetensors"], hub_before["model.safetensors"]);
        assert_eq!(t.content("refs/pr/1", "config.json"), config);
        assert_eq!(t.content("refs/pr/1", "notes/eval.json"), eval);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The layer's staged data: bytes allocated on disk by its `*.data` files.
fn layer_allocated(cache: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![cache.join("overlays")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "data") {
                total += std::fs::metadata(&p).unwrap().blocks() * 512;
            }
        }
    }
    total
}

#[test]
fn a_small_write_into_a_large_hub_file_stores_only_what_was_written() {
    use std::os::unix::fs::FileExt;
    let t = T::new();
    let pid = t.mount();
    let m = t.mnt();
    let path = m.join("model.safetensors");
    let hub = t.content("main", "model.safetensors");
    let mut want = hub.clone();
    let off = (10 << 20) + 3;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[7u8; 4096], off as u64).unwrap();
    drop(f);
    want[off..off + 4096].fill(7);
    let stored = layer_allocated(&t.cache());
    println!(
        "copy-up of a 4 KiB write into a {} MiB Hub file: {stored} bytes on local disk",
        hub.len() >> 20
    );
    assert!(stored <= 1 << 20, "the copy-up stored {stored} bytes");
    // Read back whole, and across the written range's edges.
    assert_eq!(sha(&std::fs::read(&path).unwrap()), sha(&want));
    let f = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; 10_000];
    f.read_exact_at(&mut buf, (off - 3000) as u64).unwrap();
    assert_eq!(buf, want[off - 3000..off + 7000]);
    drop(f);

    // Cut and grown again: the Hub's bytes past the cut do not come back.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(20 << 20).unwrap();
    f.set_len(21 << 20).unwrap();
    drop(f);
    want.truncate(20 << 20);
    want.resize(21 << 20, 0);
    assert_eq!(sha(&std::fs::read(&path).unwrap()), sha(&want));

    // A crash, a remount: the same content, still not copied whole.
    kill9(pid, &m);
    t.mount();
    assert_eq!(sha(&std::fs::read(&path).unwrap()), sha(&want));
    assert!(layer_allocated(&t.cache()) <= 1 << 20);
    let changes = t.diff(&[]);
    assert_eq!(kinds(&changes), [("modified".into(), "model.safetensors".into())]);
    assert_eq!(changes[0]["size"], want.len() as u64);

    let ms = m.to_str().unwrap();
    let before = t.get("/admin/stats");
    let out = t.ok(
        &["overlay", "commit", ms, "-m", "patch", "--branch", "patched"],
        "hf_local_write",
    );
    let after = t.get("/admin/stats");
    let delta = |class: &str, field: &str| {
        after[class][field].as_u64().unwrap_or(0) - before[class][field].as_u64().unwrap_or(0)
    };
    println!(
        "publishing it: {}; the Hub served {} bytes of xorbs for the fill and took {} xorb-upload requests",
        out.trim(),
        delta("xorb-fetch", "bytes_out"),
        delta("xorb-upload", "requests")
    );
    let uploaded: u64 = out
        .split(", ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    // Xet deduplicates the unchanged chunks against the Hub file's: far less than the file goes up.
    assert!(uploaded < 1 << 20, "{out}");
    assert_eq!(sha(&t.content("patched", "model.safetensors")), sha(&want));
    assert_eq!(sha(&t.content("main", "model.safetensors")), sha(&hub));
    assert_eq!(sha(&std::fs::read(&path).unwrap()), sha(&want));
    t.unmount();
}

/// Random writes, truncates and reads on a copy-up, against the same operations on a local copy
/// of the Hub file (fsx truncates its file when it starts, so it never meets a copy-up).
#[test]
fn random_operations_on_a_copied_up_hub_file_match_a_local_copy() {
    use std::os::unix::fs::FileExt;
    let t = T::new();
    let pid = t.mount();
    let m = t.mnt();
    let path = m.join("model.safetensors");
    let reference = t.dir.path().join("reference.bin");
    std::fs::write(&reference, t.content("main", "model.safetensors")).unwrap();
    let open = |p: &Path| std::fs::OpenOptions::new().read(true).write(true).open(p).unwrap();
    let (mut f, r) = (open(&path), open(&reference));
    let mut x = 0x5eed_u64;
    let mut next = |n: u64| {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    };
    let mut size = r.metadata().unwrap().len();
    for op in 0..1500 {
        match next(20) {
            0 => {
                let s = next(size + (1 << 20));
                f.set_len(s).unwrap();
                r.set_len(s).unwrap();
                size = s;
            }
            1 => f = open(&path),
            2..=9 => {
                let (off, len) = (next(size + 4096), 1 + next(64 << 10) as usize);
                let data: Vec<u8> = (0..len).map(|i| (i as u64 ^ op) as u8).collect();
                f.write_all_at(&data, off).unwrap();
                r.write_all_at(&data, off).unwrap();
                size = size.max(off + len as u64);
            }
            _ => {
                let (off, len) = (next(size), 1 + next(256 << 10) as usize);
                let len = len.min((size - off) as usize);
                let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
                f.read_exact_at(&mut a, off).unwrap();
                r.read_exact_at(&mut b, off).unwrap();
                assert!(a == b, "op {op}: {len} bytes at {off} differ");
            }
        }
    }
    drop(f);
    let want = sha(&std::fs::read(&reference).unwrap());
    assert_eq!(sha(&std::fs::read(&path).unwrap()), want);
    kill9(pid, &m);
    t.mount();
    assert_eq!(sha(&std::fs::read(&path).unwrap()), want, "after a crash and a remount");
    let ms = m.to_str().unwrap();
    t.ok(
        &["overlay", "commit", ms, "-m", "random", "--branch", "random"],
        "hf_local_write",
    );
    assert_eq!(sha(&t.content("random", "model.safetensors")), want, "on the Hub");
    t.unmount();
}

/// A counter of the mount's Prometheus metrics at `addr`.
fn metric(t: &T, addr: &str, name: &str) -> u64 {
    let text = t.rt.block_on(async {
        reqwest::get(format!("http://{addr}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

/// Whether a joined content (`*.whole`) is anywhere under `dir`.
fn has_whole(dir: &Path) -> bool {
    std::fs::read_dir(dir).into_iter().flatten().flatten().any(|e| {
        let p = e.path();
        p.extension().is_some_and(|x| x == "whole") || (p.is_dir() && has_whole(&p))
    })
}

fn errno_of(r: std::io::Result<std::fs::File>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// Unchanged Hub files read as on a read-only mount, FUSE passthrough included (Linux 6.9+). A
/// write open or truncate beside a passthrough open is refused with ETXTBSY (the kernel takes no
/// other open of such an inode, and its readers would not see the write); once those readers
/// closed, the write copies up and later opens read the layer's bytes, not the cache file.
#[test]
fn unchanged_hub_files_pass_through_and_take_writes_once_their_readers_closed() {
    let t = T::new();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    t.mount_with(&["--metrics-addr", &addr]);
    let (m, cache) = (t.mnt(), t.cache());
    let file = m.join("model.safetensors");
    let hub = t.content("main", "model.safetensors");
    assert_eq!(sha(&std::fs::read(&file).unwrap()), sha(&hub));
    // The read's close joins the blocks into one cache file: the next open can pass through.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !has_whole(&cache.join("blocks")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the read content never became whole"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let opens = "hubfs_passthrough_opens_total";
    let before = metric(&t, &addr, opens);
    // Evicted, so that the open does not stay on the page cache the first read filled.
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    let reader = std::fs::File::open(&file).unwrap();
    assert_eq!(
        metric(&t, &addr, opens),
        before + 1,
        "an unchanged Hub file passes through"
    );

    let write_open = || std::fs::OpenOptions::new().write(true).open(&file);
    assert_eq!(
        errno_of(write_open()),
        Some(libc::ETXTBSY),
        "a write open beside a passthrough reader"
    );
    let path = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::truncate(path.as_ptr(), 10) };
    assert_eq!(rc, -1);
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ETXTBSY));
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut &reader, &mut got).unwrap();
    assert_eq!(sha(&got), sha(&hub), "the passthrough reader reads the Hub's bytes");
    drop(reader);

    // The reader's release reaches the mount shortly after its close.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let w = loop {
        match write_open() {
            Ok(w) => break w,
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("write open once the reader closed: {e}"),
        }
    };
    std::os::unix::fs::FileExt::write_all_at(&w, &[b'X'; 4096], 8192).unwrap();
    drop(w);
    let mut want = hub.clone();
    want[8192..8192 + 4096].fill(b'X');
    let through = metric(&t, &addr, opens);
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    assert_eq!(sha(&std::fs::read(&file).unwrap()), sha(&want), "the layer's bytes");
    assert_eq!(
        metric(&t, &addr, opens),
        through,
        "a changed file is not read from the cache file"
    );
    assert_eq!(
        kinds(&t.diff(&[])),
        vec![("modified".to_string(), "model.safetensors".to_string())]
    );
}

/// What a program creates inside a folder it has just made costs the Hub nothing: nothing below a
/// folder missing at the commit can be on the Hub (pjdfstest on an overlay once spent the free
/// user's 1,000-call API window in seconds on such lookups, one paths-info each).
#[test]
fn files_made_in_new_folders_cost_no_api_calls() {
    use hubfs::local_hub::RouteClass;
    let t = T::new();
    t.mount();
    let m = t.mnt();
    let hub = t.hub.as_ref().unwrap();
    hub.reset_stats();
    std::fs::create_dir(m.join("runs")).unwrap();
    for i in 0..30 {
        let d = m.join(format!("runs/r{i}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("metrics.json"), format!("{{\"step\": {i}}}")).unwrap();
        std::fs::hard_link(d.join("metrics.json"), d.join("latest.json")).unwrap();
        std::fs::create_dir(d.join("ckpt")).unwrap();
        std::fs::write(d.join("ckpt/state.bin"), [i as u8; 64]).unwrap();
    }
    let api = hub.stats(RouteClass::Api).requests;
    println!("150 entries made under a new folder: {api} API call(s)");
    assert!(
        api <= 2,
        "{api} API calls for entries below a folder the Hub does not have"
    );
    assert_eq!(std::fs::read_dir(m.join("runs")).unwrap().count(), 30);
}
