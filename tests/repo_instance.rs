//! Local-only state (modes, symlinks, empty folders, staged files) belongs to one repo instance on
//! one Hub (issue 27, part 1): the built binary as a person runs it (`mount --daemon --write`,
//! one default cache dir), against local Hubs that come and go.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hubfs::local_hub::LocalHub;
use serde_json::{Value, json};

const TOKEN: &str = "hf_local_write";

/// The binary with a private home, registry and (default) cache dir; `ep` may change between runs.
/// Mounts still up when it is dropped (a failed assertion) are detached and their daemons killed.
struct Cli {
    bin: common::isolated::Isolated,
    daemons: std::cell::RefCell<Vec<(PathBuf, i32)>>,
}

impl Drop for Cli {
    fn drop(&mut self) {
        for (dir, pid) in self.daemons.take() {
            let _ = Command::new("umount").arg("-l").arg(&dir).status();
            // SAFETY: kill(2) on a daemon this test started (already gone: ESRCH, ignored).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Cli {
    fn new(ep: &str) -> Cli {
        Cli {
            bin: common::isolated::Isolated::new(ep),
            daemons: Default::default(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.bin.path(p)
    }

    fn run(&self, args: &[&str]) -> Output {
        self.bin.command(Some(TOKEN)).args(args).output().expect("run hubfs")
    }

    fn staging(&self) -> PathBuf {
        self.bin.cache_dir().join("staging")
    }

    /// `mount --daemon --write` of `repo` at a new mount point `name`: (mount point, pid, log).
    fn mount(&self, repo: &str, name: &str, extra: &[&str]) -> (PathBuf, i32, PathBuf) {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut args = vec!["mount", "--write", repo, dir.to_str().unwrap(), "--daemon"];
        args.extend_from_slice(extra);
        let o = self.run(&args);
        let (pid, log) = common::isolated::daemon_started(&o);
        self.daemons.borrow_mut().push((dir.clone(), pid));
        (dir, pid, log)
    }

    fn unmount(&self, dir: &Path, pid: i32) {
        let o = self.run(&["unmount", dir.to_str().unwrap()]);
        assert!(o.status.success(), "unmount {}: {}", dir.display(), text(&o));
        common::isolated::wait_gone(pid);
        self.daemons.borrow_mut().retain(|(_, p)| *p != pid);
    }

    fn sync(&self, dir: &Path) {
        let o = self.run(&["sync", dir.to_str().unwrap()]);
        assert!(o.status.success(), "sync: {}", text(&o));
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn sh(script: &str) {
    let o = Command::new("sh").arg("-c").arg(script).output().unwrap();
    assert!(o.status.success(), "{script}: {}", text(&o));
}

fn hub(rt: &tokio::runtime::Runtime) -> LocalHub {
    rt.block_on(LocalHub::start_temp(false)).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn create(rt: &tokio::runtime::Runtime, ep: &str, name: &str) -> common::Repo {
    let repo = common::Repo::dataset(&format!("local/{name}"));
    rt.block_on(common::create_repo_ok(&common::client(), ep, TOKEN, &repo, false));
    repo
}

fn delete(rt: &tokio::runtime::Runtime, ep: &str, name: &str) {
    rt.block_on(async {
        let r = common::client()
            .delete(format!("{ep}/api/repos/delete"))
            .header("authorization", common::bearer(TOKEN))
            .json(&json!({"name": name, "organization": "local", "type": "dataset"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "delete: {}", r.status());
    });
}

fn repo_id(rt: &tokio::runtime::Runtime, ep: &str, repo: &common::Repo) -> String {
    rt.block_on(async {
        let v: Value = common::client()
            .get(repo.api(ep))
            .header("authorization", common::bearer(TOKEN))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["_id"].as_str().unwrap_or_default().to_string()
    })
}

/// Path → sha256 of every file on the Hub at main, as the Hub serves it.
fn hub_tree(rt: &tokio::runtime::Runtime, ep: &str, repo: &common::Repo) -> BTreeMap<String, String> {
    rt.block_on(async {
        let c = common::client();
        let v: Vec<Value> = c
            .get(format!("{}/tree/main?recursive=true", repo.api(ep)))
            .header("authorization", common::bearer(TOKEN))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut out = BTreeMap::new();
        for e in v.iter().filter(|e| e["type"] == "file") {
            let path = e["path"].as_str().unwrap().to_string();
            let body = c
                .get(repo.resolve(ep, "main", &path))
                .header("authorization", common::bearer(TOKEN))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            out.insert(path, common::sha256_hex(&body));
        }
        out
    })
}

/// What a directory tree holds, by path: `d` folders, `l -> target` symlinks, `f MODE sha256` files.
fn walk(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            let full = root.join(&r);
            let m = std::fs::symlink_metadata(&full).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("l -> {}", std::fs::read_link(&full).unwrap().display())
            } else if m.is_dir() {
                stack.push(r.clone());
                "d".to_string()
            } else {
                let b = std::fs::read(&full).unwrap();
                format!("f {:o} {}", m.mode() & 0o777, common::sha256_hex(&b))
            };
            out.insert(r.to_string_lossy().into_owned(), what);
        }
    }
    out
}

/// The folder a person copies in: a 0755 script, a symlink beside it, plain files.
fn source(cli: &Cli) -> PathBuf {
    let src = cli.path("src");
    std::fs::create_dir_all(src.join("bin")).unwrap();
    std::fs::create_dir_all(src.join("data")).unwrap();
    std::fs::write(src.join("notes.txt"), b"notes\n").unwrap();
    std::fs::write(src.join("data/a.txt"), b"a\n").unwrap();
    std::fs::write(src.join("bin/run.sh"), b"#!/bin/sh\necho run\n").unwrap();
    std::fs::set_permissions(src.join("bin/run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("../notes.txt", src.join("bin/link.txt")).unwrap();
    src
}

/// What `cp -a SRC DEST/<prefix>` puts on the Hub from a fresh cache: every regular file of SRC
/// below `prefix/` (symlinks stay in the mount), plus the repo's `.gitattributes`.
fn expected_on_hub(src: &Path, prefix: &str, gitattributes: &str) -> BTreeMap<String, String> {
    let mut want: BTreeMap<String, String> = walk(src)
        .into_iter()
        .filter(|(_, w)| w.starts_with("f "))
        .map(|(p, w)| (format!("{prefix}/{p}"), w.rsplit(' ').next().unwrap().to_string()))
        .collect();
    want.insert(".gitattributes".into(), gitattributes.to_string());
    want
}

/// Every directory below `root` that holds a file named `name`.
fn dirs_holding(root: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if e.file_name() == name {
                out.push(d.clone());
            }
        }
    }
    out
}

/// The sequence: a first local Hub, `cp -a` and `tar -xpf` of a folder with a symlink and a
/// 0755 script into a mount, unmount; a second local Hub (new data dir, new port) with a new empty
/// repo of the same name, mounted with the same default cache dir. The second mount shows the
/// second Hub's tree, and `cp -a` lands where it does on a fresh cache.
#[test]
fn a_new_hub_with_the_same_repo_name_shows_its_own_tree() {
    let rt = rt();
    let hub1 = hub(&rt);
    let mut cli = Cli::new(hub1.endpoint());
    let src = source(&cli);
    let repo = create(&rt, &cli.bin.ep, "tools");
    let (w1, pid, _) = cli.mount("datasets/local/tools", "w1", &[]);
    sh(&format!("cp -a {} {}/cpa", src.display(), w1.display()));
    sh(&format!(
        "mkdir {w}/tarx && tar -C {s} -cf - . | tar -C {w}/tarx -xpf -",
        s = src.display(),
        w = w1.display()
    ));
    let seen = walk(&w1.join("cpa"));
    assert_eq!(seen, walk(&src), "the first mount holds the copy as made");
    cli.unmount(&w1, pid);
    let first = hub_tree(&rt, &cli.bin.ep, &repo);
    assert!(
        first.contains_key("cpa/bin/run.sh") && first.contains_key("tarx/bin/run.sh"),
        "{first:?}"
    );
    rt.block_on(hub1.stop());

    // A new Hub, a new empty repo of the same name, the same cache dir.
    let hub2 = hub(&rt);
    cli.bin.ep = hub2.endpoint().to_string();
    let repo = create(&rt, &cli.bin.ep, "tools");
    let fresh = hub_tree(&rt, &cli.bin.ep, &repo);
    assert_eq!(fresh.keys().collect::<Vec<_>>(), [".gitattributes"]);
    let (w2, pid, log) = cli.mount("datasets/local/tools", "w2", &[]);
    let shown = walk(&w2);
    assert_eq!(
        shown.keys().collect::<Vec<_>>(),
        [".gitattributes"],
        "the mount shows the new repo's tree, nothing of the first Hub's: {shown:#?}"
    );
    sh(&format!("cp -a {} {}/cpa", src.display(), w2.display()));
    assert_eq!(walk(&w2.join("cpa")), walk(&src), "cp -a made cpa/, not cpa/src/");
    cli.sync(&w2);
    assert_eq!(
        hub_tree(&rt, &cli.bin.ep, &repo),
        expected_on_hub(&src, "cpa", &fresh[".gitattributes"]),
        "the Hub holds what the same cp -a gives on a fresh cache"
    );
    cli.unmount(&w2, pid);
    let log = std::fs::read_to_string(log).unwrap();
    assert!(!log.contains("restored local-only entries"), "{log}");
    rt.block_on(hub2.stop());
}

/// Remounting the same repo keeps its local-only state; a path the Hub now holds as something
/// else shows the Hub's entry; a deleted and recreated repo (same Hub, same name, new `_id`) gets
/// nothing of the old one, not even its uncommitted staged files, which wait in quarantine.
#[test]
fn a_remount_keeps_local_state_and_a_recreated_repo_starts_clean() {
    let rt = rt();
    let hub = hub(&rt);
    let cli = Cli::new(hub.endpoint());
    let src = source(&cli);
    let repo = create(&rt, &cli.bin.ep, "life");
    let first_id = repo_id(&rt, &cli.bin.ep, &repo);
    assert_eq!(first_id.len(), 24, "a repo id of the Hub's shape: {first_id:?}");

    let (w, pid, _) = cli.mount("datasets/local/life", "w", &[]);
    sh(&format!(
        "cp -a {} {}/cpa && mkdir {}/empty",
        src.display(),
        w.display(),
        w.display()
    ));
    cli.unmount(&w, pid);
    // Someone else commits a file where the mount kept an empty local folder.
    rt.block_on(common::commit_ok(
        &common::client(),
        &cli.bin.ep,
        TOKEN,
        &repo,
        &[
            common::header_line("theirs", None),
            common::utf8_line("empty", "a file now\n"),
        ],
    ));

    let (w, pid, _) = cli.mount("datasets/local/life", "w", &[]);
    assert_eq!(
        walk(&w.join("cpa")),
        walk(&src),
        "symlink and 0755 mode survive a remount"
    );
    let m = std::fs::symlink_metadata(w.join("empty")).unwrap();
    assert!(m.is_file(), "the Hub's file wins over the local folder");
    assert_eq!(std::fs::read(w.join("empty")).unwrap(), b"a file now\n");
    cli.unmount(&w, pid);
    // The local folder's record went when the Hub's file won: once the file goes, no folder
    // comes back from the old record.
    rt.block_on(common::commit_ok(
        &common::client(),
        &cli.bin.ep,
        TOKEN,
        &repo,
        &[common::header_line("theirs", None), common::deleted_file_line("empty")],
    ));
    let (w, pid, _) = cli.mount("datasets/local/life", "w", &[]);
    assert!(std::fs::symlink_metadata(w.join("empty")).is_err(), "no stale folder");
    assert_eq!(
        std::fs::read_link(w.join("cpa/bin/link.txt")).unwrap(),
        Path::new("../notes.txt")
    );
    cli.unmount(&w, pid);
    // A file staged, never committed: the mount dies before its commit.
    let (w, pid, _) = cli.mount(
        "datasets/local/life",
        "w",
        &["--close", "stage", "--commit-every", "10m"],
    );
    std::fs::write(w.join("pending.txt"), b"staged, never committed\n").unwrap();
    // SAFETY: kill(2) on the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    common::isolated::wait_gone(pid);
    let _ = Command::new("umount").arg("-l").arg(&w).status();

    delete(&rt, &cli.bin.ep, "life");
    let repo = create(&rt, &cli.bin.ep, "life");
    assert_ne!(
        repo_id(&rt, &cli.bin.ep, &repo),
        first_id,
        "a recreated repo has a new id"
    );
    let fresh = hub_tree(&rt, &cli.bin.ep, &repo);
    let (w, pid, log) = cli.mount("datasets/local/life", "w2", &[]);
    assert_eq!(walk(&w).keys().collect::<Vec<_>>(), [".gitattributes"]);
    sh(&format!("cp -a {} {}/cpa", src.display(), w.display()));
    cli.sync(&w);
    assert_eq!(
        hub_tree(&rt, &cli.bin.ep, &repo),
        expected_on_hub(&src, "cpa", &fresh[".gitattributes"]),
        "nothing of the old repo reaches the new one"
    );
    cli.unmount(&w, pid);
    let log = std::fs::read_to_string(log).unwrap();
    assert!(
        log.contains("set aside"),
        "the mount says where the old state went: {log}"
    );
    let set_aside = dirs_holding(&cli.staging().join("quarantine"), "instance.json");
    assert_eq!(set_aside.len(), 1, "{set_aside:?}");
    let staged: Vec<Vec<u8>> = std::fs::read_dir(&set_aside[0])
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "data"))
        .map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    assert_eq!(
        staged,
        [b"staged, never committed\n".to_vec()],
        "the staged file waits there"
    );
    let o = cli.run(&["status"]);
    assert!(text(&o).contains("quarantine"), "status points at it: {}", text(&o));
    rt.block_on(hub.stop());
}

/// A staging dir of the layout before endpoint keys says nothing of its Hub or repo instance: it is
/// set aside, not shown or committed, and its staged files stay there.
#[test]
fn an_old_layout_staging_dir_is_set_aside() {
    let rt = rt();
    let hub = hub(&rt);
    let cli = Cli::new(hub.endpoint());
    let repo = create(&rt, &cli.bin.ep, "old");
    let fresh = hub_tree(&rt, &cli.bin.ep, &repo);
    let legacy = cli.staging().join("datasets/local/old/main");
    std::fs::create_dir_all(&legacy).unwrap();
    let times = json!({"atime": {"s": 0, "n": 0}, "mtime": {"s": 0, "n": 0}, "ctime": {"s": 0, "n": 0}});
    let record = |p: &str, dir: bool, mode: u32, special: Value| {
        let mut m = json!({"dir": dir, "mode": mode, "uid": 0, "gid": 0, "special": special});
        for (k, v) in times.as_object().unwrap() {
            m[k] = v.clone();
        }
        json!({"op": "set", "p": p, "m": m}).to_string()
    };
    let log = [
        record("legacy", true, 0o755, Value::Null),
        record("legacy/link", false, 0o777, json!({"t": "symlink", "target": "x"})),
    ]
    .join("\n");
    std::fs::write(legacy.join("metadata.log"), log + "\n").unwrap();
    // A closed staged file, as the staging journal keeps one.
    std::fs::write(legacy.join("1.data"), b"from an older hubfs\n").unwrap();
    std::fs::write(
        legacy.join("1.meta"),
        json!({"path": "old.txt", "phase": "closed"}).to_string(),
    )
    .unwrap();

    let (w, pid, _) = cli.mount("datasets/local/old", "w", &[]);
    assert_eq!(
        walk(&w).keys().collect::<Vec<_>>(),
        [".gitattributes"],
        "nothing of it is shown"
    );
    cli.sync(&w);
    cli.unmount(&w, pid);
    assert_eq!(hub_tree(&rt, &cli.bin.ep, &repo), fresh, "nothing of it is committed");
    assert!(!legacy.exists());
    let set_aside = dirs_holding(&cli.staging().join("quarantine"), "metadata.log");
    assert_eq!(set_aside.len(), 1, "{set_aside:?}");
    assert!(
        set_aside[0].ends_with("datasets/local/old/main"),
        "{}",
        set_aside[0].display()
    );
    assert_eq!(
        std::fs::read(set_aside[0].join("1.data")).unwrap(),
        b"from an older hubfs\n"
    );
    rt.block_on(hub.stop());
}

/// The local Hub gives each repo a random `_id` at creation, as the Hub does: the same across
/// commits and restarts; a data dir written before ids existed gets one, once.
#[test]
fn the_local_hubs_repo_ids_are_stable_and_new_per_creation() {
    let rt = rt();
    let data = tempfile::tempdir().unwrap();
    let start = || {
        rt.block_on(LocalHub::start(hubfs::local_hub::LocalHubConfig::new(data.path())))
            .unwrap()
    };
    let hub = start();
    let ep = hub.endpoint().to_string();
    let a = create(&rt, &ep, "a");
    let b = create(&rt, &ep, "b");
    let id_a = repo_id(&rt, &ep, &a);
    assert!(
        id_a.len() == 24 && id_a.bytes().all(|c| c.is_ascii_hexdigit()),
        "{id_a:?}"
    );
    assert_ne!(id_a, repo_id(&rt, &ep, &b));
    rt.block_on(common::commit_ok(
        &common::client(),
        &ep,
        TOKEN,
        &a,
        &[common::header_line("x", None), common::utf8_line("x.txt", "x")],
    ));
    assert_eq!(repo_id(&rt, &ep, &a), id_a, "a commit keeps the id");
    rt.block_on(hub.stop());

    // An older data dir: repo.json without an id.
    let meta_path = data.path().join("repos/datasets/local/b/repo.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    meta.as_object_mut().unwrap().remove("id");
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let hub = start();
    let ep = hub.endpoint().to_string();
    assert_eq!(repo_id(&rt, &ep, &a), id_a, "a restart keeps the id");
    let id_b = repo_id(&rt, &ep, &b);
    assert_eq!(id_b.len(), 24, "an id is assigned: {id_b:?}");
    rt.block_on(hub.stop());
    let hub = start();
    assert_eq!(repo_id(&rt, hub.endpoint(), &b), id_b, "once, and kept");
    rt.block_on(hub.stop());
}
