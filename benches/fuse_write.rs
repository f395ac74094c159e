//! Write benchmarks of a writable hubfs FUSE mount against a local Hub, measured in one run:
//! sequential 1 MiB writes to staging against a plain file on the same disk (the ceiling) and the
//! close latency after them; close latency of a large file against the hf-hub crate uploading the
//! same amount; bytes uploaded for an identical rewrite and for an append; `cp -r` of many small
//! files in stage mode (commits made, time until all is on the Hub) against commit-per-close mode;
//! peak RSS while writing a large file. Needs root (FUSE). Prints figures; asserts nothing.
//!
//! The local Hub runs as a child process (`hubfs local-hub`) so that this process's memory is the
//! mount's alone; this process tunes malloc as `hubfs mount` does (HUBFS_BENCH_MALLOC=default: not).
//!
//! `cargo bench --bench fuse_write`. HUBFS_BENCH_QUICK=1 shrinks every size 10x; single sizes:
//! HUBFS_BENCH_SEQ_MIB (1024), HUBFS_BENCH_CLOSE_MIB (500), HUBFS_BENCH_APPEND_MIB (10),
//! HUBFS_BENCH_FILES (10000), HUBFS_BENCH_FILES_WAIT (1000), HUBFS_BENCH_BIG_MIB (4096);
//! HUBFS_BENCH_DIR is where staging, the Hub's data and the ceiling file go (default /var/tmp);
//! HUBFS_BENCH_QUIET_MS sets the mounts' quiet period (default: WriteOptions's);
//! HUBFS_BENCH_ONLY_RSS=1 runs only the peak-RSS part, in a fresh process.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::DEFAULT_WRITE_TOKEN;
use hubfs::process::session::{MountRequest, Mounted, mount};
use hubfs::vfs::{VfsOptions, WriteOptions};

const MIB: u64 = 1 << 20;

/// Splitmix64 stream, the same bytes as `seed::demo_bytes` for lengths that are multiples of 8.
struct Gen(u64);

impl Gen {
    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            c.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes()[..c.len()]);
        }
    }
}

/// Opens `path` with `opts`, writes `len` pseudo-random bytes (seed `seed`) in 1 MiB write()
/// calls and closes it. Returns the time inside write() only (making the bytes is not counted),
/// the time of close(2), and close's result (Rust's drop would swallow it).
fn write_file(path: &Path, opts: &OpenOptions, len: u64, seed: u64) -> (Duration, Duration, std::io::Result<()>) {
    let mut f = opts.open(path).expect("open");
    let (mut g, mut buf) = (Gen(seed), vec![0u8; MIB as usize]);
    let (mut left, mut spent) = (len, Duration::ZERO);
    while left > 0 {
        let n = left.min(MIB) as usize;
        g.fill(&mut buf[..n]);
        let t = Instant::now();
        f.write_all(&buf[..n]).expect("write");
        spent += t.elapsed();
        left -= n as u64;
    }
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    let t = Instant::now();
    // SAFETY: fd was just taken from a File and is closed exactly once.
    let rc = unsafe { libc::close(fd) };
    let r = (rc == 0).then_some(()).ok_or_else(std::io::Error::last_os_error);
    (spent, t.elapsed(), r)
}

fn create() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true);
    o
}

/// A /proc/{pid}/status field in MiB (`pid` "self" for this process).
fn proc_mib(pid: &str, key: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    kib as f64 / 1024.0
}

/// Resets VmHWM to the current RSS; returns the current RSS in MiB.
fn reset_peak(pid: &str) -> f64 {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
    proc_mib(pid, "VmRSS:")
}

/// What `hubfs mount` does before its runtime starts (commands::serve::tune_malloc): two malloc arenas
/// and a thread trimming free arena pages once a second.
fn tune_malloc() {
    // SAFETY: allocator tuning, called before any other thread exists.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    std::thread::spawn(|| {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            // SAFETY: malloc_trim is thread-safe and has no preconditions.
            unsafe { libc::malloc_trim(0) };
        }
    });
}

fn env_u64(key: &str, default: u64, quick: bool) -> u64 {
    let d = if quick { (default / 10).max(1) } else { default };
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn ok(b: bool) -> &'static str {
    if b { "met" } else { "NOT met" }
}

fn sync() {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
}

struct Bench {
    rt: tokio::runtime::Runtime,
    hub: std::process::Child,
    hub_pid: String,
    endpoint: String,
    work: tempfile::TempDir,
    quiet: Duration,
}

impl Bench {
    fn cfg(&self) -> HubClientConfig {
        HubClientConfig {
            endpoint: self.endpoint.clone(),
            token: Some(DEFAULT_WRITE_TOKEN.to_string()),
            timeout: Duration::from_secs(30),
            max_retries: 2,
            patience: std::time::Duration::ZERO,
            ..HubClientConfig::from_env()
        }
    }

    fn get_json(&self, url: String) -> serde_json::Value {
        let req = reqwest::Client::new().get(url).bearer_auth(DEFAULT_WRITE_TOKEN);
        self.rt
            .block_on(async { req.send().await.unwrap().json().await.unwrap() })
    }

    /// Creates dataset `local/{name}` and mounts it writable; cache and staging live in `work`.
    fn mount(&self, name: &str, close_waits: bool) -> Mounted {
        let body = serde_json::json!({"name": name, "organization": "local", "type": "dataset"});
        let req = reqwest::Client::new()
            .post(format!("{}/api/repos/create", self.endpoint))
            .bearer_auth(DEFAULT_WRITE_TOKEN)
            .json(&body);
        let status = self.rt.block_on(async { req.send().await.unwrap().status() });
        assert!(status.is_success(), "create repo: {status}");
        let cache = self.work.path().join("cache");
        // Removed with `work`.
        let dir = tempfile::tempdir_in(self.work.path()).unwrap().keep();
        let write = WriteOptions {
            staging_root: cache.join("staging"),
            status_dir: Some(cache.join("mounts")),
            close: if close_waits {
                hubfs::vfs::CloseMode::Commit
            } else {
                hubfs::vfs::CloseMode::Stage
            },
            quiet_period: self.quiet,
            ..WriteOptions::default()
        };
        let req = MountRequest {
            repo: format!("datasets/local/{name}"),
            mountpoint: dir,
            revision: None,
            client: self.cfg(),
            vfs: VfsOptions {
                cache_dir: Some(cache.join("content")),
                disk_cache_bytes: 1 << 30,
                write: Some(write),
                ..VfsOptions::default()
            },
            allow_other: false,
        };
        mount(req, &self.rt).expect("mount")
    }

    /// Commits on main, following the pages of the commit list (50 a page by default).
    fn commit_count(&self, name: &str) -> usize {
        let url = format!("{}/api/datasets/local/{name}/commits/main", self.endpoint);
        let mut n = 0;
        for p in 0.. {
            let len = self
                .get_json(format!("{url}?p={p}&limit=1000"))
                .as_array()
                .map_or(0, |a| a.len());
            n += len;
            if len < 1000 {
                return n;
            }
        }
        n
    }

    /// Files at the head of `local/{name}` (without .gitattributes).
    fn hub_file_count(&self, name: &str) -> usize {
        let client = HubClient::new(self.cfg()).unwrap();
        let repo = RepoRef::dataset(&format!("local/{name}")).unwrap();
        let tree = self.rt.block_on(async {
            let head = client.repo_info(&repo, "main").await.unwrap().sha;
            client.list_tree_recursive(&repo, &head, "").await.unwrap()
        });
        let file = |e: &TreeEntry| matches!(e, TreeEntry::File { path, .. } if path != ".gitattributes");
        tree.iter().filter(|e| file(e)).count()
    }

    /// The hf-hub crate committing `len` pseudo-random bytes to a new model repo; the time of the
    /// commit call only (hashing, Xet upload, commit).
    fn hf_hub_upload(&self, name: &str, len: u64, seed: u64) -> Duration {
        use hf_hub::repository::{AddSource, CommitOperation};
        let bytes = hubfs::local_hub::seed::demo_bytes(len as usize, seed);
        let cache = tempfile::tempdir_in(self.work.path()).unwrap();
        self.rt.block_on(async {
            let c = hf_hub::HFClient::builder()
                .endpoint(&self.endpoint)
                .token(DEFAULT_WRITE_TOKEN)
                .cache_dir(cache.path())
                .build()
                .unwrap();
            let id = format!("local/{name}");
            let created = c
                .create_repository()
                .repo_id(&id)
                .repo_type(hf_hub::RepoTypeModel)
                .send();
            created.await.unwrap();
            let op = CommitOperation::Add {
                path_in_repo: "pure.bin".into(),
                source: AddSource::Bytes(bytes.into()),
            };
            let t = Instant::now();
            let repo = c.model("local", name);
            let commit = repo.create_commit().operations(vec![op]);
            commit.commit_message("pure upload").send().await.unwrap();
            t.elapsed()
        })
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the child this process started.
        unsafe { libc::kill(self.hub.id() as i32, libc::SIGTERM) };
        let _ = self.hub.wait();
    }
}

fn uploaded(m: &Mounted) -> u64 {
    m.vfs.status_report().unwrap().bytes_uploaded
}

/// `count` small text files (100 B–4 KiB, hex of pseudo-random bytes) in 10 subdirectories.
fn small_tree(root: &Path, count: usize, seed: u64) -> u64 {
    let (mut g, mut total, mut rnd) = (Gen(seed), 0, [0u8; 2048]);
    for i in 0..count {
        let dir = root.join(format!("d{:02}", i % 10));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = [0u8; 8];
        g.fill(&mut s);
        let size = 100 + (u64::from_le_bytes(s) % 3997) as usize;
        g.fill(&mut rnd[..size.div_ceil(2)]);
        let text = hex::encode(&rnd[..size.div_ceil(2)]);
        std::fs::write(dir.join(format!("f{i:05}.txt")), &text[..size]).unwrap();
        total += size as u64;
    }
    total
}

/// `cp -r src mount/tree`; returns (cp wall time, time until the Hub holds all `count` files, commits).
fn cp_tree(b: &Bench, m: &Mounted, name: &str, src: &Path, count: usize) -> (f64, f64, usize) {
    let before = b.commit_count(name);
    let t = Instant::now();
    let st = std::process::Command::new("cp")
        .arg("-r")
        .arg(src)
        .arg(m.mountpoint.join("tree"))
        .status();
    let cp = t.elapsed().as_secs_f64();
    if !st.as_ref().is_ok_and(|s| s.success()) {
        println!("  !! cp -r: {st:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let r = m.vfs.status_report().unwrap();
        if r.dirty.is_empty() && r.pending_namespace_changes == 0 && b.hub_file_count(name) >= count {
            break;
        }
        if Instant::now() > deadline {
            println!(
                "  !! not all committed after 30 min: {:?}",
                (r.dirty.len(), r.last_error)
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (cp, t.elapsed().as_secs_f64(), b.commit_count(name) - before)
}

fn main() {
    let quick = std::env::var("HUBFS_BENCH_QUICK").is_ok_and(|v| v != "0" && !v.is_empty());
    let seq = env_u64("HUBFS_BENCH_SEQ_MIB", 1024, quick) * MIB;
    let closesz = env_u64("HUBFS_BENCH_CLOSE_MIB", 500, quick) * MIB;
    let append = env_u64("HUBFS_BENCH_APPEND_MIB", 10, quick) * MIB;
    let nfiles = env_u64("HUBFS_BENCH_FILES", 10_000, quick) as usize;
    let nwait = env_u64("HUBFS_BENCH_FILES_WAIT", 1_000, quick) as usize;
    let big = env_u64("HUBFS_BENCH_BIG_MIB", 4096, quick) * MIB;
    let tuned = std::env::var("HUBFS_BENCH_MALLOC").map_or(true, |v| v != "default");
    if tuned {
        tune_malloc();
    }
    // Staging, mountpoints, the Hub's data and the ceiling file share one directory (one disk).
    let work = tempfile::tempdir_in(std::env::var("HUBFS_BENCH_DIR").unwrap_or("/var/tmp".into())).unwrap();
    let mut hub = std::process::Command::new(env!("CARGO_BIN_EXE_hubfs"))
        .args(["local-hub", "--data-dir"])
        .arg(work.path().join("hub"))
        // The commit-per-close run makes one commit per file (1,000 by default) in one repo, far
        // past the Hub's 128 per hour: this measures the mount, not the commit budget.
        .args(["--commit-limit", "0"])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start hubfs local-hub");
    let out = std::io::BufReader::new(hub.stdout.take().unwrap());
    let endpoint = std::io::BufRead::lines(out)
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("endpoint: ").map(str::to_string))
        .expect("local-hub endpoint");
    let rt = hubfs::process::signals::runtime().unwrap();
    let hub_pid = hub.id().to_string();
    let quiet = std::env::var("HUBFS_BENCH_QUIET_MS").ok().and_then(|v| v.parse().ok());
    let quiet = quiet.map_or(WriteOptions::default().quiet_period, Duration::from_millis);
    let b = Bench {
        rt,
        hub,
        hub_pid,
        endpoint,
        work,
        quiet,
    };
    let mut rows: Vec<String> = Vec::new();
    let mut row = |r: String| {
        println!("  {r}");
        rows.push(r);
    };
    let malloc = if tuned { "tuned as in hubfs mount" } else { "default" };
    println!(
        "hubfs FUSE write benchmark: local Hub = child process {}, 2 shared cores, work dir {}, quiet period {:?}, \
         malloc {malloc}",
        b.hub_pid,
        b.work.path().display(),
        b.quiet,
    );

    // HUBFS_BENCH_ONLY_RSS=1: only part 5, in a process that has done nothing else (its peak RSS is
    // then the mount's alone, without what earlier parts and the hf-hub upload left behind).
    let only_rss = std::env::var("HUBFS_BENCH_ONLY_RSS").is_ok_and(|v| v == "1");
    if !only_rss {
        // 1. Sequential 1 MiB writes, 3 rounds of: plain file (the ceiling), then a new file in the
        // mount (distinct content each round) with its close timed apart.
        let m = b.mount("seq", true);
        let (rss0, hub0) = (reset_peak("self"), reset_peak(&b.hub_pid));
        let (mut ceil, mut staged, mut closes) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..3 {
            sync();
            let plain = b.work.path().join("ceiling.bin");
            let (t, _, _) = write_file(&plain, &create(), seq, 10 + i);
            std::fs::remove_file(&plain).unwrap();
            sync();
            ceil.push(gbps(seq, t));
            let (w, close, r) = write_file(&m.mountpoint.join(format!("seq{i}.bin")), &create(), seq, 20 + i);
            staged.push(gbps(seq, w));
            closes.push(close.as_secs_f64());
            if let Err(e) = r {
                println!("  !! close of seq{i}.bin: {e}");
            }
        }
        let (peak, hubpeak) = (proc_mib("self", "VmHWM:"), proc_mib(&b.hub_pid, "VmHWM:"));
        m.unmount().unwrap();
        let f = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ");
        let rounds = format!(
            "rounds: ceiling {}; staging {}; close {}",
            f(&ceil),
            f(&staged),
            f(&closes)
        );
        let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let (c, sb) = (best(&ceil), best(&staged));
        let (s, cl) = (median(staged), median(closes));
        let tag = format!("{} MiB", seq / MIB);
        row(format!(
            "1. seq write {tag}, plain file (ceiling) | {c:.2} GB/s | best of 3; {rounds}"
        ));
        let pc = 100.0 * sb / c;
        row(format!(
            "1. seq write {tag} to staging (write() only) | {s:.2} GB/s | median of 3; best {sb:.2} = {pc:.0}% of the best ceiling; target >= 1 GB/s: {}",
            ok(s >= 1.0)
        ));
        let rate = seq as f64 / cl / 1e9;
        row(format!(
            "1. close latency, {tag} (upload+commit) | {cl:.2} s | median of 3 = {rate:.2} GB/s of file"
        ));
        let up = peak - rss0;
        row(format!(
            "1. peak RSS of the mount process in 1. | {peak:.0} MiB | (before {rss0:.0}, +{up:.0}; Hub process peak {hubpeak:.0} MiB, before {hub0:.0})"
        ));

        // 2. Close latency of a large file beside the hf-hub crate's upload+commit of the same size.
        let m = b.mount("close", true);
        let (tag, p) = (format!("{} MiB", closesz / MIB), m.mountpoint.join("big.bin"));
        let (w, close, r) = write_file(&p, &create(), closesz, 2);
        let pure = b.hf_hub_upload("pure", closesz, 3);
        let (w, cl, pu) = (w.as_secs_f64(), close.as_secs_f64(), pure.as_secs_f64());
        row(format!(
            "2. close latency, {tag} new file | {cl:.2} s | (write() {w:.2} s; close result {r:?})"
        ));
        row(format!(
            "2. hf-hub create_commit, {tag} (pure upload) | {pu:.2} s | close / pure = {:.2}x",
            cl / pu
        ));

        // 3. Identical rewrite (O_TRUNC), then an append: bytes sent to the CAS.
        let (u0, t) = (uploaded(&m), Instant::now());
        let (_, close, r) = write_file(&p, &create(), closesz, 2);
        let (all, du) = (t.elapsed().as_secs_f64(), uploaded(&m) - u0);
        let (pct, cl) = (100.0 * du as f64 / closesz as f64, close.as_secs_f64());
        let target = ok(pct < 1.0);
        row(format!(
            "3. identical rewrite {tag}: bytes uploaded | {du} B = {pct:.3}% | (open..close {all:.2} s, close {cl:.2} s, {r:?}); target < 1%: {target}"
        ));
        let (u0, t) = (uploaded(&m), Instant::now());
        let (_, close, r) = write_file(&p, OpenOptions::new().append(true), append, 4);
        let (all, du, cl) = (t.elapsed().as_secs_f64(), uploaded(&m) - u0, close.as_secs_f64());
        let (pct, amib) = (100.0 * du as f64 / append as f64, append / MIB);
        row(format!(
            "3. append {amib} MiB to it: bytes uploaded | {du} B = {pct:.1}% of the append | (open..close {all:.2} s, close {cl:.2} s, {r:?})"
        ));
        m.unmount().unwrap();

        // 4. cp -r of many small files: stage mode, then commit-per-close mode.
        for (name, count, waits) in [("cpstage", nfiles, false), ("cpwait", nwait, true)] {
            let src = b.work.path().join(format!("src-{name}"));
            let bytes = small_tree(&src, count, 5);
            let t = Instant::now();
            let st = std::process::Command::new("cp")
                .arg("-r")
                .arg(&src)
                .arg(b.work.path().join(name))
                .status();
            let (plain, _) = (t.elapsed().as_secs_f64(), st.unwrap());
            let m = b.mount(name, waits);
            let (cp, all, commits) = cp_tree(&b, &m, name, &src, count);
            let own = m.vfs.status_report().unwrap().counters.commits;
            let mode = if waits { "close_waits=true" } else { "stage mode" };
            let target = if waits {
                String::new()
            } else {
                format!("target <= 20: {}", ok(commits <= 20))
            };
            let (rate, kib) = (count as f64 / all, bytes / 1024);
            row(format!(
                "4. cp -r {count} files ({kib} KiB), {mode} | {all:.1} s to all committed, {commits} commits | (cp itself {cp:.1} s, to a plain dir {plain:.2} s; {rate:.0} files/s; mount counted {own} commits) {target}"
            ));
            m.unmount().unwrap();
        }
    }

    // 5. Peak RSS writing a large file, close (upload+commit) included.
    let m = b.mount("rss", true);
    let (rss0, hub0) = (reset_peak("self"), reset_peak(&b.hub_pid));
    let t = Instant::now();
    let (w, close, r) = write_file(&m.mountpoint.join("huge.bin"), &create(), big, 6);
    let all = t.elapsed().as_secs_f64();
    let (peak, hubpeak) = (proc_mib("self", "VmHWM:"), proc_mib(&b.hub_pid, "VmHWM:"));
    let (mb, up, w, cl, target) = (
        peak * 1.048_576,
        peak - rss0,
        w.as_secs_f64(),
        close.as_secs_f64(),
        ok(peak * 1.048_576 < 300.0),
    );
    row(format!(
        "5. peak RSS of the mount process, {} MiB write + close | {peak:.0} MiB = {mb:.0} MB | (before {rss0:.0}, +{up:.0}; Hub process peak {hubpeak:.0} MiB, before {hub0:.0}; write() {w:.1} s, close {cl:.1} s, total {all:.1} s, {r:?}); target < 300 MB: {target}",
        big / MIB
    ));
    m.unmount().unwrap();

    println!("\n| measure | figure | notes |\n|---|---|---|");
    for r in &rows {
        println!("| {r} |");
    }
}
