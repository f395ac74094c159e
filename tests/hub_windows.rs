//! The Hub's request windows and outages met the way users meet them: `hubfs local-hub` enforcing
//! windows scaled down for CI (10-second windows, a fifth of the free tier's quotas), a
//! `mount --daemon` of the built binary, and `cat` one file after another and 8 readers at once
//! over thousands of small git-stored files (one `/resolve/` each; four windows' worth). No read may fail: each waits
//! for its window, and `hubfs status` and the metrics say so while it lasts. Then the local Hub
//! killed mid-read and started again on its data dir, its CAS on a new port: the read in flight and
//! every later one return the Hub's bytes.
//!
//! `HUBFS_WINDOW_FILES` sets the number of small files (default 4,000: three window boundaries to
//! wait out per run; 10,000, the folder limit, takes nine), `HUBFS_WINDOW_READERS`
//! the runs (default `1,8`), `HUBFS_TEST_MOUNT_ARGS` adds mount options to them.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::isolated::{Isolated, daemon_started, wait_gone};
use serde_json::Value;

const WINDOW_SECS: u64 = 10;
const QUOTA_SCALE: &str = "0.2";
/// The free tier's resolvers quota (5,000) scaled down.
const RESOLVERS_PER_WINDOW: u64 = 1000;
const TOKEN: &str = "hf_local_write";

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The tests of this file time reads against windows and start many processes: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the test can run: FUSE mounts need root here.
fn root() -> bool {
    let ok = unsafe { libc::geteuid() } == 0;
    if !ok {
        eprintln!("skipped: FUSE mounts need root here");
    }
    ok
}

/// `name` from the environment as a number, else `default`.
fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn content(i: usize) -> String {
    format!("small file {i:05}\n")
}

fn name(i: usize) -> String {
    format!("f{i:05}.txt")
}

/// `datasets/local/small` with `n` small regular (git-stored) files in `data/`, in one commit.
async fn seed_small_files(ep: &str, n: usize) -> common::Repo {
    let c = common::client();
    let repo = common::Repo::dataset("local/small");
    common::create_repo_ok(&c, ep, TOKEN, &repo, false).await;
    let mut lines = vec![common::header_line("small files", None)];
    lines.extend((0..n).map(|i| common::utf8_line(&format!("data/{}", name(i)), &content(i))));
    common::commit_ok(&c, ep, TOKEN, &repo, &lines).await;
    repo
}

async fn admin_stats(ep: &str) -> Value {
    common::client()
        .get(format!("{ep}/admin/stats"))
        .header("authorization", common::bearer(TOKEN))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `/resolve/` requests the Hub has answered so far.
async fn resolves(ep: &str) -> u64 {
    admin_stats(ep).await["resolve"]["requests"].as_u64().unwrap_or(0)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `hubfs mount --daemon` of `repo` at a new dir under the isolated root with a cache dir of its
/// own (the default wait bound), with `token` (`None`: anonymous): (mount dir, pid), or the
/// mount's error.
fn mount_as(
    cli: &Isolated,
    repo: &str,
    tag: &str,
    token: Option<&str>,
    extra: &[&str],
) -> Result<(PathBuf, i32), String> {
    let dir = cli.path(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = cli.path(&format!("cache-{tag}"));
    let o = cli
        .command(token)
        .args(["mount", repo, dir.to_str().unwrap(), "--daemon", "--cache-dir"])
        .arg(&cache)
        .args(extra)
        .output()
        .unwrap();
    if !o.status.success() {
        return Err(text(&o));
    }
    let (pid, _log) = daemon_started(&o);
    Ok((dir, pid))
}

/// `mount_as` with the write token, which must succeed.
fn mount(cli: &Isolated, repo: &str, tag: &str, extra: &[&str]) -> (PathBuf, i32) {
    mount_as(cli, repo, tag, Some(TOKEN), extra).unwrap_or_else(|e| panic!("mount {repo}: {e}"))
}

fn unmount(cli: &Isolated, dir: &Path, pid: i32) {
    let o = cli
        .command(None)
        .args(["unmount", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "unmount: {}", text(&o));
    wait_gone(pid);
}

/// Sleeps until just after the next window boundary (the local Hub's windows are aligned to the
/// wall clock), so a run starts with a whole window.
fn wait_for_window_start() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = Duration::from_millis((now.as_millis() % (WINDOW_SECS as u128 * 1000)) as u64);
    std::thread::sleep(Duration::from_secs(WINDOW_SECS) - into + Duration::from_millis(300));
}

/// What a watcher saw of a wait while the readers ran.
#[derive(Default, Debug)]
struct Seen {
    status_wait: Option<String>,
    metrics_wait: Option<String>,
}

/// Polls `hubfs status --json` and the metrics endpoint until `stop`, keeping the first report of
/// a resolvers wait from each.
fn watch(cli: &Isolated, metrics: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Seen> {
    let mut status_cmd = cli.command(None);
    status_cmd.args(["status", "--json"]);
    std::thread::spawn(move || {
        let mut seen = Seen::default();
        while !stop.load(Ordering::Relaxed) {
            if seen.status_wait.is_none()
                && let Ok(o) = status_cmd.output()
                && let Ok(v) = serde_json::from_slice::<Value>(&o.stdout)
            {
                let waiting = v[0]["hub"].as_array().and_then(|bs| {
                    bs.iter()
                        .find(|b| b["bucket"] == "resolvers" && b["waiting_until"].is_string())
                        .map(|b| b.to_string())
                });
                seen.status_wait = waiting;
            }
            if seen.metrics_wait.is_none()
                && let Ok(o) = Command::new("curl").args(["-s", "-m", "2", &metrics]).output()
            {
                seen.metrics_wait = String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .find(|l| {
                        l.starts_with("hubfs_hub_window_wait_seconds{bucket=\"resolvers\"}")
                            && l.rsplit(' ')
                                .next()
                                .and_then(|v| v.parse::<f64>().ok())
                                .is_some_and(|v| v > 0.0)
                    })
                    .map(str::to_string);
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        seen
    })
}

/// Reads every file of `dir` (sorted names) with `readers` readers: one `cat` after another
/// (`readers` = 1, the output compared with the expected bytes), or `xargs -P` with `sha256sum`
/// (each sum compared). Returns (failed reads, wrong files, seconds).
fn read_all(dir: &Path, n: usize, readers: usize) -> (usize, usize, f64) {
    let t = Instant::now();
    let script = if readers == 1 {
        "for f in $(ls | sort); do cat \"$f\"; done".to_string()
    } else {
        format!("ls | sort | xargs -P {readers} -n 25 sha256sum")
    };
    let o = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let secs = t.elapsed().as_secs_f64();
    let failed = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains("error") || l.contains("No such"))
        .count();
    let wrong = if readers == 1 {
        let want: String = (0..n).map(content).collect();
        let got = String::from_utf8_lossy(&o.stdout);
        if got == want {
            0
        } else {
            // Count the files whose line is missing or different.
            let lines: std::collections::HashSet<&str> = got.lines().collect();
            (0..n)
                .filter(|i| !lines.contains(content(*i).trim_end()))
                .count()
                .max(1)
        }
    } else {
        let sums: std::collections::HashMap<String, String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_once("  ").map(|(s, f)| (f.to_string(), s.to_string())))
            .collect();
        (0..n)
            .filter(|i| sums.get(&name(*i)) != Some(&common::sha256_hex(content(*i).as_bytes())))
            .count()
    };
    (failed, wrong, secs)
}

#[test]
fn small_files_wait_out_the_hubs_windows_and_no_read_fails() {
    if !root() {
        return;
    }
    let _one_at_a_time = serial();
    let n = env_or("HUBFS_WINDOW_FILES", 4_000);
    let rt = rt();
    let data = tempfile::tempdir().unwrap();
    let window = WINDOW_SECS.to_string();
    let hub = rt.block_on(common::spawn_cli(
        data.path(),
        &["--request-window-secs", &window, "--request-quota-scale", QUOTA_SCALE],
        &[],
        None,
    ));
    let ep = hub.endpoint.clone();
    rt.block_on(seed_small_files(&ep, n));
    let cli = Isolated::new(&ep);

    // A few files of the big folder cost a few resolves, whatever the folder holds.
    let (dir, pid) = mount(&cli, "datasets/local/small", "few", &[]);
    let before = rt.block_on(resolves(&ep));
    for i in [n / 3, 7, n - 2] {
        let got = std::fs::read_to_string(dir.join("data").join(name(i))).unwrap();
        assert_eq!(got, content(i));
    }
    let spent = rt.block_on(resolves(&ep)) - before;
    println!("3 files of a {n}-file folder: {spent} resolves");
    assert!(spent <= 10, "3 files cost {spent} resolves");
    unmount(&cli, &dir, pid);

    let readers_list: Vec<usize> = std::env::var("HUBFS_WINDOW_READERS")
        .ok()
        .map(|v| v.split(',').filter_map(|r| r.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8]);
    for readers in readers_list {
        let port = free_port();
        let metrics = format!("http://127.0.0.1:{port}/metrics");
        let addr = format!("127.0.0.1:{port}");
        let extra = std::env::var("HUBFS_TEST_MOUNT_ARGS").unwrap_or_default();
        let args: Vec<&str> = ["--metrics-addr", addr.as_str()]
            .into_iter()
            .chain(extra.split_whitespace())
            .collect();
        let (dir, pid) = mount(&cli, "datasets/local/small", &format!("r{readers}"), &args);
        // The listing first (api bucket), so the run's resolves start with a whole window.
        assert_eq!(std::fs::read_dir(dir.join("data")).unwrap().count(), n);
        wait_for_window_start();
        let before = rt.block_on(resolves(&ep));
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = watch(&cli, metrics, stop.clone());
        let (failed, wrong, secs) = read_all(&dir.join("data"), n, readers);
        stop.store(true, Ordering::Relaxed);
        let seen = watcher.join().unwrap();
        let spent = rt.block_on(resolves(&ep)) - before;
        // Window boundaries the reads must wait for, one resolve a file; the reads of the last
        // window take little.
        let boundaries = (n as u64).div_ceil(RESOLVERS_PER_WINDOW).saturating_sub(1);
        let allowed = (boundaries * WINDOW_SECS) as f64;
        println!(
            "{n} small files, {readers} reader(s): {secs:.1} s, {failed} failed, {wrong} wrong, {spent} resolves \
             ({RESOLVERS_PER_WINDOW} per {WINDOW_SECS} s window: the windows allow {allowed:.0} s; {:.2}x); \
             status saw {:?}, metrics saw {:?}",
            secs / allowed.max(1.0),
            seen.status_wait,
            seen.metrics_wait
        );
        assert_eq!(
            (failed, wrong),
            (0, 0),
            "{readers} reader(s): every read returns the Hub's bytes"
        );
        assert!(spent >= n as u64, "every file cost a resolve");
        assert!(
            spent <= n as u64 * 102 / 100,
            "{readers} reader(s): {spent} resolves for {n} files: none fetched twice"
        );
        assert!(
            secs <= allowed * 1.2 + 3.0,
            "{readers} reader(s): {secs:.1} s against {allowed} s the windows allow"
        );
        assert!(seen.status_wait.is_some(), "hubfs status showed the wait");
        assert!(seen.metrics_wait.is_some(), "the metrics showed the wait");
        unmount(&cli, &dir, pid);
    }
    rt.block_on(hub.kill9());
}

#[test]
fn a_hub_restarted_mid_read_on_a_new_cas_port_is_waited_for() {
    if !root() {
        return;
    }
    let _one_at_a_time = serial();
    let rt = rt();
    let data = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    // Xorb bytes at 4 Mbit/s a connection (the reader keeps several busy: about 10 s for the big
    // file), so its read is still going when the Hub dies.
    let args = ["--addr", addr.as_str(), "--bandwidth-mbps", "xorb-fetch=4"];
    let hub = rt.block_on(common::spawn_cli(data.path(), &args, &[], None));
    let ep = hub.endpoint.clone();
    let repo = common::Repo::model("local/restart");
    let files: Vec<(String, Vec<u8>)> = std::iter::once(("big.bin".to_string(), common::bytes(48 << 20, 7)))
        .chain((0..4).map(|i| (format!("later-{i}.bin"), common::bytes((3 << 20) + i, 100 + i as u64))))
        .collect();
    rt.block_on(common::upload_xet_files(&ep, &repo, &files));
    let cli = Isolated::new(&ep);
    let (dir, pid) = mount(&cli, "local/restart", "m", &[]);

    let reader = Command::new("sha256sum")
        .arg(dir.join("big.bin"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut reader = reader;
    assert!(
        reader.try_wait().unwrap().is_none(),
        "the read is still going when the Hub dies"
    );
    let cas_before = rt.block_on(async {
        let r = common::client()
            .get(format!("{ep}/api/models/local/restart/xet-read-token/main"))
            .header("authorization", common::bearer(TOKEN))
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()["casUrl"].as_str().unwrap().to_string()
    });
    rt.block_on(hub.kill9());
    std::thread::sleep(Duration::from_secs(6));
    let hub = rt.block_on(common::spawn_cli(data.path(), &args[..2], &[], None));
    assert_eq!(hub.endpoint, ep, "the Hub came back on its API port");
    let cas_after = rt.block_on(async {
        let r = common::client()
            .get(format!("{ep}/api/models/local/restart/xet-read-token/main"))
            .header("authorization", common::bearer(TOKEN))
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()["casUrl"].as_str().unwrap().to_string()
    });
    assert_ne!(cas_before, cas_after, "the CAS came back at another address");

    let o = reader.wait_with_output().unwrap();
    assert!(o.status.success(), "the read in flight: {}", text(&o));
    let sum = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string();
    assert_eq!(
        sum,
        common::sha256_hex(&files[0].1),
        "the read in flight got the Hub's bytes"
    );
    for (path, bytes) in &files[1..] {
        let got = std::fs::read(dir.join(path)).unwrap_or_else(|e| panic!("{path} after the restart: {e}"));
        assert!(got == *bytes, "{path}: the Hub's bytes after the restart");
    }
    unmount(&cli, &dir, pid);
    let _ = std::io::stdout().flush();
    rt.block_on(hub.kill9());
}

#[test]
fn a_fleet_on_one_anonymous_ip_waits_for_its_windows_and_no_read_fails() {
    if !root() {
        return;
    }
    let _one_at_a_time = serial();
    let nodes = env_or("HUBFS_WINDOW_NODES", 12);
    let rt = rt();
    let data = tempfile::tempdir().unwrap();
    // An anonymous IP's quotas at 4% per 10 s window: 20 api calls, 120 resolves. Every node spends
    // a few api calls (the revision, listings, a Xet token), so the fleet needs several windows.
    let window = WINDOW_SECS.to_string();
    let args = [
        "--seed-demo",
        "--request-window-secs",
        &window,
        "--request-quota-scale",
        "0.04",
    ];
    let hub = rt.block_on(common::spawn_cli(data.path(), &args, &[], None));
    let ep = hub.endpoint.clone();
    let want: Vec<(String, String)> = rt.block_on(async {
        let mut out = Vec::new();
        let tree: Value = common::client()
            .get(format!("{ep}/api/models/demo/tiny-model/tree/main"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for e in tree.as_array().unwrap() {
            let path = e["path"].as_str().unwrap().to_string();
            if e["type"] != "file" {
                continue;
            }
            // Large files answer 302 to the blob origin: follow it.
            let r = common::client()
                .get(format!("{ep}/demo/tiny-model/resolve/main/{path}"))
                .header("authorization", common::bearer(TOKEN))
                .send()
                .await
                .unwrap();
            let r = match r.headers().get("location").and_then(|l| l.to_str().ok()) {
                Some(loc) => common::client().get(loc).send().await.unwrap(),
                None => r,
            };
            assert!(r.status().is_success(), "{path}: {}", r.status());
            out.push((path, common::sha256_hex(&r.bytes().await.unwrap())));
        }
        out
    });
    assert!(want.len() >= 2, "the demo model has files: {want:?}");
    let cli = Arc::new(Isolated::new(&ep));
    wait_for_window_start();
    let t = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // Whether `hubfs status` showed a mounted node waiting for a window, and which.
    let watcher = {
        let mut status_cmd = cli.command(None);
        status_cmd.args(["status", "--json"]);
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut seen = None;
            while !stop.load(Ordering::Relaxed) && seen.is_none() {
                if let Ok(o) = status_cmd.output()
                    && let Ok(v) = serde_json::from_slice::<Value>(&o.stdout)
                {
                    seen = v.as_array().into_iter().flatten().find_map(|m| {
                        m["hub"]
                            .as_array()?
                            .iter()
                            .find(|b| b["waiting_until"].is_string())
                            .map(|b| b.to_string())
                    });
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            seen
        })
    };
    let workers: Vec<_> = (0..nodes)
        .map(|i| {
            let (cli, want) = (cli.clone(), want.clone());
            std::thread::spawn(move || -> Result<(PathBuf, i32, usize), String> {
                let (dir, pid) = mount_as(&cli, "demo/tiny-model", &format!("node{i}"), None, &[])?;
                let mut wrong = 0;
                for (path, sum) in &want {
                    match std::fs::read(dir.join(path)) {
                        Ok(b) if common::sha256_hex(&b) == *sum => {}
                        Ok(_) => wrong += 1,
                        Err(e) => return Err(format!("node {i}: {path}: {e}")),
                    }
                }
                Ok((dir, pid, wrong))
            })
        })
        .collect();
    let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let status_wait = watcher.join().unwrap();
    let stats = rt.block_on(admin_stats(&ep));
    let refused = &stats["request_windows"]["refused"];
    println!(
        "{nodes} anonymous nodes on one IP, 20 api calls and 120 resolves per 10 s window: {secs:.1} s; \
         Hub refused {refused}; status saw {status_wait:?}"
    );
    let mut failed = Vec::new();
    for r in &results {
        match r {
            Ok((dir, pid, wrong)) => {
                if *wrong > 0 {
                    failed.push(format!("{}: {wrong} wrong files", dir.display()));
                }
                unmount(&cli, dir, *pid);
            }
            Err(e) => failed.push(e.clone()),
        }
    }
    assert!(
        failed.is_empty(),
        "every node mounted and read the Hub's bytes: {failed:?}"
    );
    assert!(
        secs > WINDOW_SECS as f64,
        "the fleet needed more than one window ({secs:.1} s)"
    );
    assert!(status_wait.is_some(), "hubfs status showed a node waiting for a window");
    rt.block_on(hub.kill9());
}
