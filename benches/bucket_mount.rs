//! A bucket mount beside a writable repo mount, measured in one run against one local Hub: a
//! large sequential file written through each (write() and close(), then until the Hub holds it),
//! `cp -r` of many small files (until the Hub holds them all), and a cold sequential read of the
//! large file through a fresh read-only mount of each. The ratios are bucket / repo. Needs root
//! (FUSE). Prints figures; asserts nothing.
//!
//! The repo mount runs without a commit budget (the local Hub without its commit limit), so both
//! measure what the mount and the Hub's endpoints cost, not the repo's 128 commits an hour; a
//! bucket has no commit limit at all.
//!
//! `cargo bench --bench bucket_mount`. HUBFS_BENCH_SEQ_MIB (1024), HUBFS_BENCH_FILES (10000),
//! HUBFS_BENCH_DIR (default /var/tmp: the Hub's data, caches and the small-file source).

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use hubfs::hub_client::{HubClient, HubClientConfig, RepoRef, TreeEntry};
use hubfs::local_hub::DEFAULT_WRITE_TOKEN;
use hubfs::process::session::{MountRequest, Mounted, mount};
use hubfs::vfs::{VfsOptions, WriteOptions};

const MIB: u64 = 1 << 20;

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Bench {
    rt: tokio::runtime::Runtime,
    hub: std::process::Child,
    endpoint: String,
    work: tempfile::TempDir,
}

impl Drop for Bench {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the child this process started.
        unsafe { libc::kill(self.hub.id() as i32, libc::SIGTERM) };
        let _ = self.hub.wait();
    }
}

/// One side of the comparison: `datasets/local/NAME` or `buckets/local/NAME`.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    Repo,
    Bucket,
}

impl Side {
    fn spec(self, name: &str) -> String {
        match self {
            Side::Repo => format!("datasets/local/{name}"),
            Side::Bucket => format!("buckets/local/{name}"),
        }
    }
}

impl Bench {
    fn cfg(&self) -> HubClientConfig {
        HubClientConfig {
            endpoint: self.endpoint.clone(),
            token: Some(DEFAULT_WRITE_TOKEN.to_string()),
            timeout: Duration::from_secs(60),
            max_retries: 2,
            patience: std::time::Duration::ZERO,
            ..HubClientConfig::from_env()
        }
    }

    fn create(&self, side: Side, name: &str) {
        let c = reqwest::Client::new();
        let req = match side {
            Side::Repo => c
                .post(format!("{}/api/repos/create", self.endpoint))
                .json(&serde_json::json!({"name": name, "organization": "local", "type": "dataset"})),
            Side::Bucket => c
                .post(format!("{}/api/buckets/local/{name}", self.endpoint))
                .json(&serde_json::json!({})),
        };
        let status = self
            .rt
            .block_on(async { req.bearer_auth(DEFAULT_WRITE_TOKEN).send().await.unwrap().status() });
        assert!(status.is_success(), "create {name}: {status}");
    }

    /// A mount of `side`/`name`, writable or not, with its own cache dir (no disk tier when read-only:
    /// the read is then a cold read from the Hub every time).
    fn mount(&self, side: Side, name: &str, writable: bool) -> Mounted {
        let cache = tempfile::tempdir_in(self.work.path()).unwrap().keep();
        let dir = tempfile::tempdir_in(self.work.path()).unwrap().keep();
        let write = writable.then(|| WriteOptions {
            staging_root: cache.join("staging"),
            status_dir: Some(cache.join("mounts")),
            close: hubfs::vfs::CloseMode::Upload,
            ..WriteOptions::default()
        });
        let req = MountRequest {
            repo: side.spec(name),
            mountpoint: dir,
            revision: None,
            client: self.cfg(),
            vfs: VfsOptions {
                cache_dir: Some(cache.join("content")),
                disk_cache_bytes: if writable { 1 << 30 } else { 0 },
                write,
                ..VfsOptions::default()
            },
            allow_other: false,
        };
        mount(req, &self.rt).expect("mount")
    }

    /// Files the Hub holds for `side`/`name` now.
    fn hub_files(&self, side: Side, name: &str) -> usize {
        let client = HubClient::new(self.cfg()).unwrap();
        let (repo, _, _) = RepoRef::parse(&side.spec(name)).unwrap();
        let tree = self.rt.block_on(async {
            let head = client.repo_info(&repo, "main").await.unwrap().sha;
            client.list_tree_recursive(&repo, &head, "").await.unwrap()
        });
        let file = |e: &TreeEntry| matches!(e, TreeEntry::File { path, .. } if path != ".gitattributes");
        tree.iter().filter(|e| file(e)).count()
    }
}

/// Waits until the mount has nothing pending and the Hub holds `count` files; the time since `t`.
fn until_on_hub(b: &Bench, m: &Mounted, side: Side, name: &str, count: usize, t: Instant) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let r = m.vfs.status_report().unwrap();
        if r.dirty.is_empty() && r.pending_namespace_changes == 0 && b.hub_files(side, name) >= count {
            return t.elapsed().as_secs_f64();
        }
        if Instant::now() > deadline {
            println!("  !! {name}: not all on the Hub after 30 min: {:?}", r.last_error);
            return f64::NAN;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `len` pseudo-random bytes in 1 MiB writes; (write+close seconds).
fn write_big(path: &Path, len: u64) -> f64 {
    let bytes = hubfs::local_hub::seed::demo_bytes(MIB as usize, 5);
    let t = Instant::now();
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    let mut left = len;
    let mut i = 0u8;
    let mut buf = bytes.clone();
    while left > 0 {
        // A different first byte per MiB: no block is a duplicate of another.
        buf[0] = i;
        i = i.wrapping_add(1);
        let n = left.min(MIB) as usize;
        f.write_all(&buf[..n]).unwrap();
        left -= n as u64;
    }
    drop(f);
    t.elapsed().as_secs_f64()
}

fn small_tree(root: &Path, count: usize) {
    for i in 0..count {
        let dir = root.join(format!("d{:02}", i % 10));
        std::fs::create_dir_all(&dir).unwrap();
        let size = 100 + (i * 7919) % 3997;
        std::fs::write(
            dir.join(format!("f{i:05}.txt")),
            hubfs::local_hub::seed::demo_bytes(size, i as u64),
        )
        .unwrap();
    }
}

fn read_all(path: &Path) -> (u64, f64) {
    let t = Instant::now();
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; MIB as usize];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf).unwrap();
        if k == 0 {
            break;
        }
        n += k as u64;
    }
    (n, t.elapsed().as_secs_f64())
}

fn drop_caches() {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn main() {
    let seq = env_u64("HUBFS_BENCH_SEQ_MIB", 1024) * MIB;
    let nfiles = env_u64("HUBFS_BENCH_FILES", 10_000) as usize;
    let work = tempfile::tempdir_in(std::env::var("HUBFS_BENCH_DIR").unwrap_or("/var/tmp".into())).unwrap();
    let mut hub = std::process::Command::new(env!("CARGO_BIN_EXE_hubfs"))
        .args(["local-hub", "--data-dir"])
        .arg(work.path().join("hub"))
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
    let b = Bench {
        rt: hubfs::process::signals::runtime().unwrap(),
        hub,
        endpoint,
        work,
    };
    let src = b.work.path().join("small-src");
    small_tree(&src, nfiles);
    println!(
        "hubfs bucket vs repo mount benchmark: local Hub = child process, {} MiB file, {nfiles} small files, work dir {}",
        seq / MIB,
        b.work.path().display()
    );
    let mut figures = Vec::new();
    for side in [Side::Repo, Side::Bucket] {
        let label = if side == Side::Repo { "repo" } else { "bucket" };
        let (big, small) = (format!("{label}-seq"), format!("{label}-small"));
        b.create(side, &big);
        b.create(side, &small);

        let m = b.mount(side, &big, true);
        let t = Instant::now();
        let wrote = write_big(&m.mountpoint.join("big.bin"), seq);
        let landed = until_on_hub(&b, &m, side, &big, 1, t);
        m.unmount().unwrap();
        let to_hub = seq as f64 / landed / 1e6;
        println!(
            "  {label}: {} MiB sequential: write+close {wrote:.1} s, on the Hub after {landed:.1} s = {to_hub:.0} MB/s",
            seq / MIB
        );

        let m = b.mount(side, &small, true);
        let t = Instant::now();
        let st = std::process::Command::new("cp")
            .arg("-r")
            .arg(&src)
            .arg(m.mountpoint.join("tree"))
            .status();
        let cp = t.elapsed().as_secs_f64();
        if !st.as_ref().is_ok_and(|s| s.success()) {
            println!("  !! cp -r: {st:?}");
        }
        let all = until_on_hub(&b, &m, side, &small, nfiles, t);
        m.unmount().unwrap();
        let fps = nfiles as f64 / all;
        println!(
            "  {label}: cp -r of {nfiles} small files: cp {cp:.1} s, all on the Hub after {all:.1} s = {fps:.0} files/s"
        );

        figures.push((to_hub, fps, 0.0));
    }
    // Cold reads, alternating sides (repo, bucket, bucket, repo, …) so that a noisy neighbour
    // weighs on both; the median of each side.
    let mut reads: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..4 {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (side, label) = if i == 0 {
                (Side::Repo, "repo")
            } else {
                (Side::Bucket, "bucket")
            };
            drop_caches();
            let m = b.mount(side, &format!("{label}-seq"), false);
            let (n, secs) = read_all(&m.mountpoint.join("big.bin"));
            m.unmount().unwrap();
            reads[i].push(n as f64 / secs / 1e6);
        }
    }
    for (i, label) in ["repo", "bucket"].iter().enumerate() {
        let v: Vec<String> = reads[i].iter().map(|r| format!("{r:.0}")).collect();
        let mut sorted = reads[i].clone();
        sorted.sort_by(f64::total_cmp);
        let median = (sorted[1] + sorted[2]) / 2.0;
        println!(
            "  {label}: cold sequential read of {} MiB: median {median:.0} MB/s ({} MB/s)",
            seq / MIB,
            v.join(", ")
        );
        figures[i].2 = median;
    }
    let (r, k) = (figures[0], figures[1]);
    println!(
        "ratios bucket/repo (one run): large file to the Hub {:.2}, small files to the Hub {:.2}, cold read {:.2}",
        k.0 / r.0,
        k.1 / r.1,
        k.2 / r.2
    );
}
