//! What the shared-tier tests share (`tests/shared_cache.rs`, `tests/shared_fleet.rs`): SeaweedFS's
//! `weed mini` as the S3 store (built by `ci/weed.sh build`), nodes as `hubfs mount --daemon`
//! processes with cache dirs of their own, the store's environment per kind, the Hub's request
//! counts, and whether a test can run here.

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub, RouteClass};
use object_store::ObjectStore;
use sha2::Digest;

pub const BUCKET: &str = "hubfs-shared";
pub const KEY_ID: &str = "hubfs";
pub const SECRET: &str = "hubfs-secret";
pub const S3: &str = "http://127.0.0.1:8333";
pub const BLOCK: u64 = 8 << 20;

pub fn weed_bin() -> Option<PathBuf> {
    let p = std::env::var_os("HUBFS_WEED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/hubfs-weed/weed"));
    p.exists().then_some(p)
}

/// One `weed mini` over a data dir of the test's; stopped (with the child it re-executes) on drop.
pub struct Weed {
    bin: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

impl Weed {
    pub fn start(bin: &Path, dir: &Path) -> Weed {
        let mut w = Weed {
            bin: bin.to_path_buf(),
            dir: dir.to_path_buf(),
            child: None,
        };
        w.run();
        w
    }

    pub fn run(&mut self) {
        std::fs::create_dir_all(&self.dir).unwrap();
        let log = std::fs::File::create(self.dir.with_extension("log")).unwrap();
        // `HUBFS_WEED_CPUS=0` runs the store on CPU 0 alone (`taskset`), to tell the store's
        // CPU from the node's when the test itself runs under `taskset -c 1`.
        let mut cmd = match std::env::var("HUBFS_WEED_CPUS") {
            Ok(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpus]).arg(&self.bin);
                c
            }
            Err(_) => Command::new(&self.bin),
        };
        let child = cmd
            .arg("mini")
            .arg(format!("-dir={}", self.dir.display()))
            .arg(format!("-bucket={BUCKET}"))
            .arg("-admin.ui=false")
            .env("AWS_ACCESS_KEY_ID", KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        // Up when the bucket answers a signed listing.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let t = Instant::now();
        loop {
            let ok = rt.block_on(async {
                let s = store();
                let l = s.list_with_delimiter(None).await;
                l.is_ok()
            });
            if ok {
                return;
            }
            assert!(t.elapsed() < Duration::from_secs(60), "weed mini did not come up");
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Kills every process of this instance (`weed mini` re-executes itself: match its `-dir=`).
    pub fn kill(&mut self) {
        let needle = format!("-dir={}", self.dir.display());
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if cmd.split(|b| *b == 0).any(|a| a == needle.as_bytes()) {
                // SAFETY: kill(2) on a process of the weed instance this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Its ports must be free before a restart.
        let t = Instant::now();
        while std::net::TcpStream::connect("127.0.0.1:8333").is_ok() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The test's own client of the store (to look at and damage objects).
pub fn store() -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(BUCKET)
        .with_endpoint(S3)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(KEY_ID)
        .with_secret_access_key(SECRET)
        .build()
        .unwrap()
}

/// A mount as one node: its own cache dir, the shared tier at `url`.
pub struct Node {
    pub dir: PathBuf,
    pub pid: i32,
    pub log: PathBuf,
}

impl Node {
    pub fn mount(cli: &crate::common::isolated::Isolated, name: &str, url: &str, extra: &[&str]) -> Node {
        Node::start(cli, name, url, &[&["--shared-cache", url], extra].concat())
    }

    /// A node without the tier: what a cold read costs from the Hub alone.
    pub fn mount_hub_only(cli: &crate::common::isolated::Isolated, name: &str) -> Node {
        Node::start(cli, name, "s3://", &[])
    }

    /// A mount of `local/shared` with the store environment of `url`'s kind.
    pub fn start(cli: &crate::common::isolated::Isolated, name: &str, url: &str, args: &[&str]) -> Node {
        Node::start_as(cli, name, "local/shared", Some(DEFAULT_WRITE_TOKEN), url, args)
    }

    /// A mount of `repo` with `token` (`None`: anonymous) and the store environment of `url`'s
    /// kind.
    pub fn start_as(
        cli: &crate::common::isolated::Isolated,
        name: &str,
        repo: &str,
        token: Option<&str>,
        url: &str,
        args: &[&str],
    ) -> Node {
        let dir = cli.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        let cache = cli.path(&format!("{name}-cache"));
        let o = store_env(url, cli.command(token))
            .args(["mount", repo, dir.to_str().unwrap(), "--daemon"])
            .args(["--cache-dir", cache.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        let (pid, log) = crate::common::isolated::daemon_started(&o);
        Node { dir, pid, log }
    }

    /// The mount process's peak resident memory (VmHWM), MiB.
    pub fn peak_rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
        kib.unwrap_or(0) >> 10
    }

    /// Reads the file whole (4 MiB reads), calling `at` after each; its sha256 and the time taken.
    pub fn read(&self, mut at: impl FnMut(u64)) -> (String, Duration) {
        let t = Instant::now();
        let mut f = std::fs::File::open(self.dir.join("weights.bin")).unwrap();
        // Not from the kernel's page cache of an earlier pass: this pass must ask the mount.
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fadvise on an open descriptor of ours.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let mut h = sha2::Sha256::new();
        let mut buf = vec![0u8; 4 << 20];
        let mut done = 0u64;
        loop {
            let n = f.read(&mut buf).unwrap_or_else(|e| panic!("read at {done}: {e}"));
            if n == 0 {
                return (hex::encode(h.finalize()), t.elapsed());
            }
            h.update(&buf[..n]);
            done += n as u64;
            at(done);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        // SAFETY: kill(2) on the daemon this test started (gone already: ESRCH, ignored).
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }
}

/// The environment a node of `url`'s store is given: the ecosystem's own variables for weed
/// (`s3://`), fake-gcs-server (`gs://`) and Azurite (`az://`).
pub fn store_env(url: &str, mut c: Command) -> Command {
    let log = std::env::var("HUBFS_TEST_RUST_LOG");
    c.env(
        "RUST_LOG",
        log.as_deref()
            .unwrap_or("hubfs=info,hubfs::chunk_store::shared=debug,hubfs::vfs::revision=debug"),
    )
    .stdin(Stdio::null());
    if url.starts_with("gs://") {
        c.env("STORAGE_EMULATOR_HOST", "127.0.0.1:4443");
    } else if url.starts_with("az://") {
        c.env("AZURE_STORAGE_USE_EMULATOR", "true");
    } else {
        c.env("AWS_ENDPOINT_URL", S3)
            .env("AWS_ACCESS_KEY_ID", KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_REGION", "us-east-1");
    }
    c
}

pub fn hub_bytes(hub: &LocalHub) -> u64 {
    RouteClass::ALL.iter().map(|c| hub.stats(*c).bytes_out).sum()
}

pub fn hub_requests(hub: &LocalHub) -> u64 {
    RouteClass::ALL.iter().map(|c| hub.stats(*c).requests).sum()
}

/// `hubfs cache shared URL --json`.
pub fn tier_size(cli: &crate::common::isolated::Isolated, url: &str) -> serde_json::Value {
    let o = store_env(url, cli.command(None))
        .args(["cache", "shared", url, "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Waits until the tier at `url` holds `blocks` blocks, or its count has not moved for 3 s (a
/// block may be dropped under pressure: the Hub bytes of the nodes after are what is checked).
pub fn wait_blocks(cli: &crate::common::isolated::Isolated, url: &str, blocks: u64) {
    let (t, mut last, mut since) = (Instant::now(), None, Instant::now());
    loop {
        let v = tier_size(cli, url);
        let n = v["blocks"].as_u64();
        if n == Some(blocks) || (n == last && since.elapsed() > Duration::from_secs(3)) {
            return;
        }
        if n != last {
            (last, since) = (n, Instant::now());
        }
        assert!(t.elapsed() < Duration::from_secs(120), "tier never settled: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The file's size: `HUBFS_SHARED_TEST_MIB`, else 64 MiB.
pub fn test_size() -> u64 {
    std::env::var("HUBFS_SHARED_TEST_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
        << 20
}

/// Waits until `node` has no upload queued, in flight or deferred; its tier report (`hubfs status`).
pub fn wait_uploaded(cli: &crate::common::isolated::Isolated, node: &Node) -> serde_json::Value {
    let t = Instant::now();
    loop {
        let o = cli.command(None).args(["status", "--json"]).output().unwrap();
        let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let mine = all.as_array().and_then(|a| {
            a.iter()
                .find(|m| m["mountpoint"].as_str().map(Path::new) == Some(node.dir.as_path()))
        });
        let tier = mine.map(|m| m["memory"]["shared"].clone()).unwrap_or_default();
        if tier["pending_uploads"].as_u64() == Some(0) {
            return tier;
        }
        assert!(t.elapsed() < Duration::from_secs(180), "uploads never finished: {tier}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn mib(b: u64, d: Duration) -> String {
    format!(
        "{:.2} s ({:.0} MiB/s)",
        d.as_secs_f64(),
        b as f64 / (1 << 20) as f64 / d.as_secs_f64()
    )
}

/// Whether a test can run: FUSE needs root, and the store's server must be installed (`found`;
/// `install` says how). Under CI (`CI` or `HUBFS_REQUIRE_STORES`) a missing server fails.
pub fn can_run(found: bool, install: &str) -> bool {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: FUSE mounts need root here");
        return false;
    }
    if !found {
        assert!(
            std::env::var_os("CI").is_none() && std::env::var_os("HUBFS_REQUIRE_STORES").is_none(),
            "CI must install the store's server first ({install})"
        );
        eprintln!("skipped: the store's server is not installed ({install})");
    }
    found
}

/// A local Hub serving `local/shared/weights.bin` (`size` bytes of pattern `seed`), the CLI over
/// it, and the file's sha256.
pub struct Fleet {
    pub rt: tokio::runtime::Runtime,
    pub hub: LocalHub,
    pub cli: crate::common::isolated::Isolated,
    pub want: String,
}

impl Fleet {
    /// A local Hub with the demo repos (`--seed-demo`) and the CLI over it (`want` is empty).
    pub fn demo() -> Fleet {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let cli = crate::common::isolated::Isolated::new(hub.endpoint());
        Fleet {
            rt,
            hub,
            cli,
            want: String::new(),
        }
    }

    pub fn new(size: u64, seed: u64) -> Fleet {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
        let ep = hub.endpoint().to_string();
        let data = crate::common::bytes(size as usize, seed);
        let want = crate::common::sha256_hex(&data);
        rt.block_on(crate::common::upload_xet_files(
            &ep,
            &crate::common::Repo::model("local/shared"),
            &[("weights.bin".to_string(), data)],
        ));
        let cli = crate::common::isolated::Isolated::new(&ep);
        Fleet { rt, hub, cli, want }
    }
}
