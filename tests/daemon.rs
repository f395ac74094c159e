//! `hubfs mount --daemon`, `hubfs status` and `hubfs unmount` as a person runs them: the built binary
//! as separate processes, the starting process gone before the mount is used, the token handed
//! over out of sight, logs in a capped file, and every mount (FUSE read-only and writable, NFS)
//! listed whatever its cache dir.

mod common;

use common::isolated::{alive, daemon_started, wait_gone};

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use hubfs::local_hub::LocalHub;
use serde_json::Value;

/// The binary with a private registry, home and cache, pointed at `ep`.
struct Cli(common::isolated::Isolated);

impl Cli {
    fn new(ep: &str) -> Cli {
        Cli(common::isolated::Isolated::new(ep))
    }

    fn path(&self, p: &str) -> PathBuf {
        self.0.path(p)
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.0.command(None);
        c.args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("run hubfs")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_env(args, &[])
    }

    fn status(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["status", "--json"];
        args.extend_from_slice(extra);
        let o = self.run(&args);
        assert!(o.status.success(), "status: {}", text(&o));
        serde_json::from_slice::<Vec<Value>>(&o.stdout).expect("status --json is a JSON array")
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn mounted(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn line_count(p: &Path) -> usize {
    std::fs::read_to_string(p).map(|s| s.lines().count()).unwrap_or(0)
}

/// `hubfs unmount DIR` succeeds and returns once the mount's process is gone.
fn unmount_ok(cli: &Cli, dir: &Path, pid: i32) {
    let o = cli.run(&["unmount", dir.to_str().unwrap()]);
    assert!(o.status.success(), "unmount {}: {}", dir.display(), text(&o));
    wait_gone(pid);
    assert!(!mounted(dir));
}

/// A new dataset repo `local/NAME` on the Hub at `ep`.
fn create_dataset(rt: &tokio::runtime::Runtime, ep: &str, name: &str) -> common::Repo {
    let repo = common::Repo::dataset(&format!("local/{name}"));
    rt.block_on(common::create_repo_ok(
        &common::client(),
        ep,
        "hf_local_write",
        &repo,
        false,
    ));
    repo
}

/// The bytes of `path` at main, as the Hub serves them.
fn hub_file(rt: &tokio::runtime::Runtime, ep: &str, repo: &common::Repo, path: &str) -> Vec<u8> {
    rt.block_on(async {
        common::client()
            .get(repo.resolve(ep, "main", path))
            .header("authorization", common::bearer("hf_local_write"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .to_vec()
    })
}

fn hub() -> (tokio::runtime::Runtime, LocalHub) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
    (rt, hub)
}

#[test]
fn daemon_outlives_its_parent_hides_the_token_and_answers_python_quietly() {
    let (rt, hub) = hub();
    let cli = Cli::new(hub.endpoint());
    let mnt = cli.path("model");
    std::fs::create_dir(&mnt).unwrap();
    let cache = cli.path("cache");
    let o = cli.run_env(
        &[
            "mount",
            "demo/tiny-model",
            mnt.to_str().unwrap(),
            "--daemon",
            "--token",
            "hf_local_read",
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
        &[("HF_TOKEN", "hf_local_write")],
    );
    let (pid, log) = daemon_started(&o);
    // The parent (and with it every pipe the daemon was started with) is gone: `output()` returned.
    assert!(log.starts_with(&cache), "log under the cache dir: {}", log.display());

    // No token in argv or environment; a session of its own; stdio off the parent's pipes.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    for (what, bytes) in [("cmdline", &cmdline), ("environ", &environ)] {
        let s = String::from_utf8_lossy(bytes);
        assert!(!s.contains("hf_local_"), "token in /proc/{pid}/{what}: {s:?}");
    }
    // SAFETY: getsid only reads the session id of a process.
    assert_eq!(unsafe { libc::getsid(pid) }, pid, "the daemon leads its own session");
    let fd = |n: u32| std::fs::read_link(format!("/proc/{pid}/fd/{n}")).unwrap();
    assert_eq!(fd(0), Path::new("/dev/null"));
    assert_eq!(fd(1), Path::new("/dev/null"));
    assert_eq!(fd(2), log, "stderr goes to the log file");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .unwrap();
    assert_eq!(
        ignored & (1 << (libc::SIGHUP - 1)),
        1 << (libc::SIGHUP - 1),
        "SIGHUP is ignored"
    );

    // What Python's open() does to every file (TCGETS), 1,000 times, plus the other calls whose
    // fuser defaults used to log per call.
    let config = mnt.join("config.json");
    let want = std::fs::read(&config).unwrap();
    for i in 0..1000 {
        let mut f = File::open(&config).unwrap();
        // SAFETY: TCGETS writes a termios into the buffer we pass, which is large enough.
        let mut termios = [0u8; 256];
        let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::TCGETS, termios.as_mut_ptr()) };
        assert_eq!((r, errno()), (-1, libc::ENOTTY), "ioctl TCGETS, open #{i}");
        let mut got = Vec::new();
        f.read_to_end(&mut got).unwrap();
        assert_eq!(got, want);
    }
    let f = File::open(&config).unwrap();
    let size = want.len() as i64;
    // SAFETY: lseek on an open descriptor.
    unsafe {
        assert_eq!(libc::lseek(f.as_raw_fd(), 3, libc::SEEK_DATA), 3);
        assert_eq!(libc::lseek(f.as_raw_fd(), 3, libc::SEEK_HOLE), size);
        assert_eq!(libc::lseek(f.as_raw_fd(), size, libc::SEEK_DATA), -1);
        assert_eq!(errno(), libc::ENXIO);
    }
    // poll says ready; flock and fcntl locks are kept by the kernel.
    let mut pfd = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; flock and fcntl on an open descriptor.
    unsafe {
        assert_eq!(libc::poll(&mut pfd, 1, 1000), 1);
        assert_eq!(libc::flock(f.as_raw_fd(), libc::LOCK_SH), 0);
    }
    drop(f);
    assert!(std::fs::read_dir(&mnt).unwrap().count() >= 4, "mount alive");
    assert!(alive(pid));
    let lines = line_count(&log);
    assert!(
        lines < 20,
        "{lines} log lines for 1,000 opens:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );

    // `status` lists it with its log; `unmount` returns once the process is gone.
    let st = cli.status(&[]);
    let me = st
        .iter()
        .find(|m| m["mountpoint"] == mnt.to_str().unwrap())
        .unwrap_or_else(|| panic!("not in status: {st:?}"));
    assert_eq!(me["pid"], pid);
    assert_eq!(me["frontend"], "fuse");
    assert_eq!(me["mode"], "read-only");
    assert_eq!(me["log_file"], log.to_str().unwrap());
    assert_eq!(me["commit"].as_str().unwrap().len(), 40);
    let o = cli.run(&["unmount", mnt.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!alive(pid), "unmount waits for the process to exit");
    assert!(!mounted(&mnt));
    assert!(cli.status(&[]).is_empty());
    rt.block_on(hub.stop());
}

#[test]
fn status_lists_fuse_writable_and_nfs_mounts_of_three_cache_dirs() {
    let (rt, hub) = hub();
    let cli = Cli::new(hub.endpoint());
    let repo = create_dataset(&rt, hub.endpoint(), "daemon-w");
    let dirs: Vec<PathBuf> = ["ro", "rw", "nfs"].iter().map(|d| cli.path(d)).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let cache = |n: &str| cli.path(&format!("cache-{n}")).to_str().unwrap().to_string();
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let write_token = [("HF_TOKEN", "hf_local_write")];
    let (ro, _) = daemon_started(&cli.run(&[
        "mount",
        "demo/tiny-model",
        &s(&dirs[0]),
        "--daemon",
        "--cache-dir",
        &cache("ro"),
    ]));
    let (rw, rw_log) = daemon_started(&cli.run_env(
        &[
            "mount",
            "--write",
            "datasets/local/daemon-w",
            &s(&dirs[1]),
            "--daemon",
            "--cache-dir",
            &cache("rw"),
        ],
        &write_token,
    ));
    let (nfs, _) = daemon_started(&cli.run(&[
        "mount",
        "--nfs",
        "--serve-only",
        "demo/tiny-model",
        &s(&dirs[2]),
        "--daemon",
        "--cache-dir",
        &cache("nfs"),
    ]));
    // The write token reached the daemon by the handover alone.
    let environ = std::fs::read(format!("/proc/{rw}/environ")).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains("hf_local_write"));
    std::fs::write(dirs[1].join("note.txt"), b"written through a daemon mount\n").unwrap();

    let st = cli.status(&[]);
    assert_eq!(st.len(), 3, "{st:#?}");
    let find = |pid: i32| st.iter().find(|m| m["pid"] == pid).unwrap();
    let (a, b, n) = (find(ro), find(rw), find(nfs));
    assert_eq!(
        (a["frontend"].as_str(), a["mode"].as_str()),
        (Some("fuse"), Some("read-only"))
    );
    assert_eq!(
        (b["frontend"].as_str(), b["mode"].as_str()),
        (Some("fuse"), Some("writable"))
    );
    assert_eq!(
        (n["frontend"].as_str(), n["mode"].as_str()),
        (Some("nfs"), Some("read-only"))
    );
    assert_eq!(a["cache_dir"], cache("ro"));
    assert_eq!(b["cache_dir"], cache("rw"));
    assert_eq!(n["cache_dir"], cache("nfs"));
    assert_eq!(n["mountpoint"], s(&dirs[2]));
    assert!(n["nfs_addr"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(a["writable"].is_null() && n["writable"].is_null());
    // The kernel readahead by repo kind, asked and got (the tests run as root): 8 MiB for a model
    // (mmap'd weights), 1 MiB for a dataset (random reads of a mapping pay it per fault); none for
    // NFS.
    assert_eq!(a["readahead_kib"], serde_json::json!([8192, 8192]), "{a:#}");
    assert_eq!(b["readahead_kib"], serde_json::json!([1024, 1024]), "{b:#}");
    assert!(n["readahead_kib"].is_null(), "{n:#}");
    assert_eq!(b["writable"]["repo"], "datasets/local/daemon-w", "{b:#}");
    // The default share of the Hub's commit budget; the note itself is committed in the
    // background (checked on the Hub after unmount).
    assert_eq!(b["writable"]["commit_budget"], "64/3600s", "{b:#}");
    // --cache-dir narrows the list; the text form names every mount.
    let only = cli.status(&["--cache-dir", &cache("rw")]);
    assert_eq!(only.len(), 1);
    assert_eq!(only[0]["pid"], rw);
    let o = cli.run(&["status"]);
    let out = text(&o);
    for d in &dirs {
        assert!(out.contains(&format!(" at {} (pid ", d.display())), "{out}");
    }
    assert!(out.contains(&format!("log: {}", rw_log.display())), "{out}");
    assert!(
        out.contains("readahead: 8192 KiB") && out.contains("readahead: 1024 KiB"),
        "{out}"
    );

    // unmount refuses what is not a hubfs mount, in words.
    for (dir, want) in [
        (cli.path("ro-nope"), "not a hubfs mount"),
        (PathBuf::from("/proc"), "not a hubfs mount (it is a proc mount"),
    ] {
        let o = cli.run(&["unmount", dir.to_str().unwrap()]);
        assert!(!o.status.success());
        assert!(text(&o).contains(want), "{}", text(&o));
    }
    for (d, pid) in dirs.iter().zip([ro, rw, nfs]) {
        unmount_ok(&cli, d, pid);
    }
    assert!(cli.status(&[]).is_empty());
    // The writable mount's file is on the Hub, byte for byte.
    assert_eq!(
        hub_file(&rt, hub.endpoint(), &repo, "note.txt"),
        b"written through a daemon mount\n"
    );
    rt.block_on(hub.stop());
}

#[test]
fn daemon_log_is_capped_and_rotated_once() {
    let (rt, hub) = hub();
    let cli = Cli::new(hub.endpoint());
    let mnt = cli.path("m");
    std::fs::create_dir(&mnt).unwrap();
    let log = cli.path("logs/m.log");
    // RUST_LOG=debug logs every FUSE request: plenty to pass a 16 KiB cap many times over.
    let o = cli.run_env(
        &[
            "mount",
            "demo/tiny-model",
            mnt.to_str().unwrap(),
            "--daemon",
            "--log-file",
            log.to_str().unwrap(),
            "--log-max-size",
            "16K",
        ],
        &[("RUST_LOG", "debug")],
    );
    let (pid, got_log) = daemon_started(&o);
    assert_eq!(got_log, log);
    for _ in 0..300 {
        std::fs::read(mnt.join("config.json")).unwrap();
    }
    let rotated = cli.path("logs/m.log.1");
    let cap = 16 << 10;
    let (cur, old) = (
        std::fs::metadata(&log).unwrap().len(),
        std::fs::metadata(&rotated).unwrap().len(),
    );
    assert!(cur <= cap && old <= cap, "log {cur} B, rotated {old} B, cap {cap} B");
    assert!(old > cap / 2, "the rotated file was full: {old} B");
    unmount_ok(&cli, &mnt, pid);
    rt.block_on(hub.stop());
}

#[test]
fn commit_and_sync_publish_what_a_staging_mount_holds() {
    let (rt, hub) = hub();
    let cli = Cli::new(hub.endpoint());
    let c = common::client();
    let repo = create_dataset(&rt, hub.endpoint(), "daemon-commit");
    let mnt = cli.path("w");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    // A quiet period long enough that nothing is committed by itself during the test.
    let (pid, _) = daemon_started(&cli.run_env(
        &[
            "mount",
            "--write",
            "--close",
            "stage",
            "--commit-every",
            "10m",
            "datasets/local/daemon-commit",
            m,
            "--daemon",
        ],
        &[("HF_TOKEN", "hf_local_write")],
    ));
    let head = || {
        rt.block_on(common::head_sha(
            &c,
            hub.endpoint(),
            Some("hf_local_write"),
            &repo,
            "main",
        ))
    };
    let commits = || -> Vec<Value> {
        rt.block_on(async {
            c.get(format!("{}/commits/main", repo.api(hub.endpoint())))
                .header("authorization", common::bearer("hf_local_write"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        })
    };
    for i in 0..20 {
        std::fs::write(mnt.join(format!("f{i:02}.txt")), format!("file {i}\n")).unwrap();
    }
    let o = cli.run(&["commit", m, "-m", "twenty files at once"]);
    assert!(o.status.success(), "{}", text(&o));
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(id.len(), 40, "commit prints the commit id: {id:?}");
    assert_eq!(head(), id, "the Hub's head is the commit hubfs commit printed");
    let log = commits();
    assert_eq!(log[0]["title"], "twenty files at once", "{:#}", log[0]);
    // Nothing pending: no commit.
    let o = cli.run(&["commit", m]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("nothing to commit"), "{}", text(&o));
    assert_eq!(head(), id);

    // sync waits until renames, deletions and new files are all on the Hub.
    std::fs::rename(mnt.join("f00.txt"), mnt.join("renamed.txt")).unwrap();
    std::fs::remove_file(mnt.join("f01.txt")).unwrap();
    std::fs::write(mnt.join("late.txt"), b"late\n").unwrap();
    let o = cli.run(&["sync", m]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("everything is committed"), "{}", text(&o));
    let st = cli.status(&[]);
    assert!(st[0]["writable"]["dirty"].as_array().unwrap().is_empty(), "{st:#?}");
    assert_eq!(st[0]["writable"]["pending_namespace_changes"], 0);
    let files: Vec<String> = rt.block_on(async {
        let v: Vec<Value> = c
            .get(format!("{}/tree/main?recursive=true", repo.api(hub.endpoint())))
            .header("authorization", common::bearer("hf_local_write"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v.iter().filter_map(|e| e["path"].as_str().map(String::from)).collect()
    });
    assert!(
        files.contains(&"renamed.txt".to_string()) && files.contains(&"late.txt".to_string()),
        "{files:?}"
    );
    assert!(
        !files.contains(&"f00.txt".to_string()) && !files.contains(&"f01.txt".to_string()),
        "{files:?}"
    );

    // Read-only mounts and plain directories are refused in words.
    let ro = cli.path("ro");
    std::fs::create_dir(&ro).unwrap();
    let (ro_pid, _) = daemon_started(&cli.run(&["mount", "demo/tiny-model", ro.to_str().unwrap(), "--daemon"]));
    for (dir, want) in [
        (ro.clone(), "read-only"),
        (cli.path("nope"), "not a running hubfs mount"),
    ] {
        let o = cli.run(&["sync", dir.to_str().unwrap()]);
        assert!(!o.status.success());
        assert!(text(&o).contains(want), "{}", text(&o));
    }
    for (d, p) in [(ro, ro_pid), (mnt, pid)] {
        unmount_ok(&cli, &d, p);
    }
    rt.block_on(hub.stop());
}

/// The Hub's repo-wide commit limit, as the real Hub answers it (429, Retry-After): hubfs waits it
/// out without retrying in a loop, says so in `status`, loses nothing to `kill -9` meanwhile, and
/// `hubfs sync` returns once the files are on the Hub.
#[test]
fn the_hubs_commit_rate_limit_is_waited_out_and_nothing_is_lost() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    // Two commits per 20 s for every client of a repo together.
    let hub = rt.block_on(common::spawn_cli(data.path(), &["--commit-limit", "2/20"], &[], None));
    let cli = Cli::new(&hub.endpoint);
    let c = common::client();
    let ep = hub.endpoint.clone();
    let repo = create_dataset(&rt, &ep, "limited");
    let admin = |body: &str| -> Value {
        rt.block_on(async {
            let mut r = c.get(format!("{ep}/admin/limits"));
            if !body.is_empty() {
                r = c.post(format!("{ep}/admin/limits")).body(body.to_string());
            }
            r.header("authorization", common::bearer("hf_local_write"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        })
    };
    admin(r#"{"reset_commits": true}"#);
    let mnt = cli.path("w");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap().to_string();
    let cache = cli.path("cache").to_str().unwrap().to_string();
    let mount = || {
        daemon_started(&cli.run_env(
            &[
                "mount",
                "--write",
                "datasets/local/limited",
                &m,
                "--daemon",
                "--cache-dir",
                &cache,
                // hubfs's own budget off: this test is about the Hub's limit.
                "--commit-budget",
                "0",
            ],
            &[("HF_TOKEN", "hf_local_write")],
        ))
    };
    let (pid, _) = mount();
    let writable = |cli: &Cli| cli.status(&[])[0]["writable"].clone();
    let wait_for = |what: &str, f: &dyn Fn(&Value) -> bool| {
        let t = Instant::now();
        loop {
            let w = writable(&cli);
            if f(&w) {
                return w;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "{what}: {w:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // The mount's commit and another client's spend the repo's two; the mount's next is refused.
    std::fs::write(mnt.join("a.txt"), "a.txt\n").unwrap();
    wait_for("a commit", &|w| w["counters"]["commits"] == 1);
    rt.block_on(common::commit_ok(
        &c,
        &ep,
        "hf_local_write",
        &repo,
        &[
            common::header_line("another client", None),
            common::file_line("other.txt", b"other\n"),
        ],
    ));
    std::fs::write(mnt.join("c.txt"), "c.txt\n").unwrap();
    let w = wait_for("rate limited", &|w| w["rate_limited_until"].is_string());
    assert_eq!(w["dirty"][0]["path"], "c.txt", "{w:#}");
    let text_status = text(&cli.run(&["status"]));
    assert!(text_status.contains("rate-limited by the Hub until"), "{text_status}");
    // No retry in a loop while the Hub says wait: one refused commit after two seconds.
    std::thread::sleep(Duration::from_secs(2));
    let refused = |v: &Value| v["repos"]["datasets/local/limited"]["refused"].as_u64().unwrap_or(0);
    assert_eq!(refused(&admin("")), 1, "{:#}", admin(""));

    // kill -9 during the wait: the journal keeps c.txt; the next mount commits it once the
    // window opens, and `hubfs sync` returns then.
    // SAFETY: kill(2) on the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_gone(pid);
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    let (pid, _) = mount();
    let t = Instant::now();
    let o = cli.run(&["sync", &m]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("everything is committed"), "{}", text(&o));
    assert!(t.elapsed() < Duration::from_secs(40), "sync took {:?}", t.elapsed());
    assert_eq!(hub_file(&rt, &ep, &repo, "c.txt"), b"c.txt\n");
    assert!(refused(&admin("")) <= 3, "bounded refusals: {:#}", admin(""));
    unmount_ok(&cli, &mnt, pid);
    rt.block_on(hub.kill9());
}
