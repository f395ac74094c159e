//! Many readers at once (issue 29): N readers of N Xet files (a sharded model load), and N readers
//! of one file, through the real `hubfs mount` binary with default options and a fresh cache, on
//! loopback and on a distant Hub (30 ms per request, 200 Mbit/s per connection). Prints per run the
//! aggregate throughput, the Hub's bytes served over the distinct bytes read (fetch amplification:
//! N readers of one file want its bytes once), its requests, and the mount's peak RSS and CPU
//! time during the reads.
//!
//! Needs root (FUSE). Speed figures are printed, never asserted; with `HUBFS_BENCH_CHECK=1` the
//! byte ratio is asserted (≤ 1.02: no block fetched twice while it is wanted), which CI runs small.
//!
//! `cargo bench --bench many_readers`; environment: `HUBFS_BENCH_MIB` (size of each file, default
//! 64), `HUBFS_BENCH_READERS` (default `1,2,4,8,16`), `HUBFS_BENCH_PROFILES` (default
//! `loopback,30ms`), `HUBFS_BENCH_MODES` (default `files,one`), `HUBFS_BENCH_FRONTENDS`
//! (`fuse,nfs`; default `fuse`: `nfs` serves with `hubfs serve-nfs` and reads with libnfs's
//! `nfs-cat`), `HUBFS_BENCH_MOUNT_ARGS` (options
//! added to every FUSE mount; `serve-nfs` takes the variants' options only), `HUBFS_BENCH_BINS` (`NAME=PATH,…`: other `hubfs` binaries to run the same
//! rows with, one after the other, e.g. a build from before a change), `HUBFS_BENCH_VARIANTS`
//! (`NAME:OPTIONS;…`: mount options each row is also run with, e.g.
//! `default:;limit256:--memory-limit 256M`; default: one variant with none). With
//! `HUBFS_BENCH_CHECK=1` a variant whose options hold `--memory-limit SIZE` must also keep the
//! mount's peak RSS within 1.1 × SIZE (`HUBFS_BENCH_RSS_FACTOR` changes the factor); the byte
//! ratio's limit is the same with or without one.

mod common;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hubfs::local_hub::{FaultSettings, LocalHub, RouteClass};

/// The largest fetch amplification the check accepts.
const MAX_RATIO: f64 = 1.02;

/// Size of each read, as `dd bs=4M`.
const READ_SIZE: usize = 4 << 20;

/// Creates model repo `local/{name}` with `count` files `shard-NN.bin` of `size` pseudo-random
/// bytes each, uploaded through Xet in one commit.
async fn upload_shards(ep: &str, name: &str, count: usize, size: u64) {
    let files: Vec<_> = (0..count).map(|i| (shard(i), size, 100 + i as u64)).collect();
    common::upload_xet_files(ep, name, &files).await
}

fn shard(i: usize) -> String {
    format!("shard-{i:02}.bin")
}

/// Bytes and requests the Hub served since its last reset, over every class.
fn served(hub: &LocalHub) -> (u64, u64) {
    RouteClass::ALL.iter().fold((0, 0), |(b, r), c| {
        let s = hub.stats(*c);
        (b + s.bytes_out, r + s.requests)
    })
}

/// One row of the table.
struct Row {
    mb_s: f64,
    read: u64,
    hub_bytes: u64,
    requests: u64,
    peak_mib: u64,
    /// CPU time the mount process spent during the reads (user and system).
    cpu_secs: f64,
}

/// How readers reach the files: a FUSE mount (`hubfs mount`) or `hubfs serve-nfs` read with
/// libnfs's `nfs-cat` (this machine has no kernel NFS client).
#[derive(Clone, Copy, PartialEq)]
enum Frontend {
    Fuse,
    Nfs,
}

/// A running `hubfs serve-nfs` of `local/{repo}` and its address.
fn spawn_nfs(bin: &str, repo: &str, ep: &str, cache: &Path, extra: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(bin)
        .args(["serve-nfs", &format!("local/{repo}"), "--nfs-addr", "127.0.0.1:0"])
        .arg("--endpoint")
        .arg(ep)
        .arg("--token")
        .arg(hubfs::local_hub::DEFAULT_WRITE_TOKEN)
        .arg("--cache-dir")
        .arg(cache)
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut addr = None;
    for line in out.by_ref().lines() {
        let line = line.unwrap();
        if let Some(a) = line.strip_prefix("nfs: ") {
            addr = Some(a.trim().to_string());
        }
        if line.starts_with("serving") {
            break;
        }
    }
    (child, addr.expect("serve-nfs printed no address"))
}

/// Reads `file` over NFS with `nfs-cat`, counting the bytes.
fn nfs_read_all(addr: &str, file: &str) -> u64 {
    let port = addr.rsplit(':').next().unwrap();
    let url = format!("nfs://127.0.0.1//{file}?nfsport={port}&mountport={port}");
    let mut child = std::process::Command::new("nfs-cat")
        .arg(&url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("nfs-cat (apt-get install libnfs-utils)");
    let mut out = child.stdout.take().unwrap();
    let mut buf = vec![0u8; READ_SIZE];
    let mut n = 0u64;
    loop {
        let r = out.read(&mut buf).unwrap();
        if r == 0 {
            break;
        }
        n += r as u64;
    }
    assert!(child.wait().unwrap().success(), "nfs-cat {url} failed");
    n
}

/// Serves `local/{repo}` with a fresh cache and `extra` options, reads `files` (one reader each,
/// in parallel, 4 MiB reads) and measures.
fn run(hub: &LocalHub, bin: &str, repo: &str, files: &[String], extra: &[&str], front: Frontend) -> Row {
    let ep = hub.endpoint().to_string();
    let d = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir_in("/var/tmp").unwrap();
    let (mut child, nfs_addr) = match front {
        Frontend::Fuse => (
            common::spawn_mount(bin, repo, d.path(), &ep, cache.path(), extra),
            String::new(),
        ),
        Frontend::Nfs => spawn_nfs(bin, repo, &ep, cache.path(), extra),
    };
    let pid = child.id();
    // Attributes first, so the timed part is the reads.
    if front == Frontend::Fuse {
        for f in files {
            std::fs::metadata(d.path().join(f)).unwrap();
        }
    }
    common::drop_caches();
    hub.reset_stats();
    let cpu_before = cpu_secs(pid);
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak) = (done.clone(), peak.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(common::vm_hwm_mib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let t = Instant::now();
    let readers: Vec<_> = files
        .iter()
        .map(|f| {
            let (path, file, addr) = (d.path().join(f), f.clone(), nfs_addr.clone());
            std::thread::spawn(move || match front {
                Frontend::Fuse => read_all(&path),
                Frontend::Nfs => nfs_read_all(&addr, &file),
            })
        })
        .collect();
    let read: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_secs(pid) - cpu_before;
    let (hub_bytes, requests) = served(hub);
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    peak.fetch_max(common::vm_hwm_mib(pid), Ordering::Relaxed);
    match front {
        Frontend::Fuse => hubfs::process::session::unmount(d.path()).unwrap(),
        // SAFETY: kill(2) on the server this run started.
        Frontend::Nfs => unsafe {
            libc::kill(pid as i32, libc::SIGTERM);
        },
    }
    let _ = child.wait();
    Row {
        mb_s: read as f64 / secs / 1e6,
        read,
        hub_bytes,
        requests,
        peak_mib: peak.load(Ordering::Relaxed),
        cpu_secs: cpu,
    }
}

/// User and system CPU time of process `pid` so far, in seconds (`/proc/PID/stat`); 0 if gone.
fn cpu_secs(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf(3) reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    ticks as f64 / hz as f64
}

/// The `--memory-limit` among mount options, in MiB (sizes as `256M`, `1G`).
fn memory_limit_mib(opts: &[&str]) -> Option<u64> {
    let at = opts.iter().position(|o| o.starts_with("--memory-limit"))?;
    let v = match opts[at].split_once('=') {
        Some((_, v)) => v,
        None => opts.get(at + 1)?,
    };
    Some(hubfs::util::units::parse_size(v).ok()? >> 20)
}

fn read_all(path: &Path) -> u64 {
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; READ_SIZE];
    let mut n = 0u64;
    loop {
        let r = f.read(&mut buf).unwrap();
        if r == 0 {
            return n;
        }
        n += r as u64;
    }
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The distant-Hub profile: 30 ms per request, 200 Mbit/s per connection, on every origin.
fn set_profile(hub: &LocalHub, profile: &str) {
    hub.clear_faults();
    if profile == "30ms" {
        for c in [RouteClass::Api, RouteClass::Resolve, RouteClass::Cas] {
            let s = FaultSettings {
                latency_ms: 30,
                bandwidth_mbps: 200.0,
                ..Default::default()
            };
            hub.set_faults(c, s).unwrap();
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --bench` passes nothing of use: same run.
    let mib: u64 = std::env::var("HUBFS_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let readers: Vec<usize> = env_list("HUBFS_BENCH_READERS", "1,2,4,8,16")
        .iter()
        .map(|s| s.parse().expect("HUBFS_BENCH_READERS: numbers"))
        .collect();
    let profiles = env_list("HUBFS_BENCH_PROFILES", "loopback,30ms");
    let modes = env_list("HUBFS_BENCH_MODES", "files,one");
    let fronts: Vec<Frontend> = env_list("HUBFS_BENCH_FRONTENDS", "fuse")
        .iter()
        .map(|f| match f.as_str() {
            "nfs" => Frontend::Nfs,
            _ => Frontend::Fuse,
        })
        .collect();
    let check = std::env::var_os("HUBFS_BENCH_CHECK").is_some();
    // The bound is 1.1 × the limit; a debug build under a small limit needs more headroom
    // (HUBFS_BENCH_RSS_FACTOR, see ci/test.sh).
    let rss_factor: f64 = std::env::var("HUBFS_BENCH_RSS_FACTOR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.1);
    let most = readers.iter().copied().max().unwrap_or(1);
    let mut bins = vec![("this".to_string(), env!("CARGO_BIN_EXE_hubfs").to_string())];
    for b in env_list("HUBFS_BENCH_BINS", "") {
        let (name, path) = b.split_once('=').expect("HUBFS_BENCH_BINS: NAME=PATH,…");
        bins.push((name.to_string(), path.to_string()));
    }

    let variants: Vec<(String, Vec<String>)> = match std::env::var("HUBFS_BENCH_VARIANTS") {
        Ok(v) if !v.trim().is_empty() => v
            .split(';')
            .map(|one| {
                let (name, opts) = one.split_once(':').unwrap_or((one, ""));
                (
                    name.trim().to_string(),
                    opts.split_whitespace().map(String::from).collect(),
                )
            })
            .collect(),
        _ => vec![("default".to_string(), Vec::new())],
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
    println!("uploading {most} Xet files of {mib} MiB...");
    rt.block_on(upload_shards(hub.endpoint(), "shards", most, mib << 20));

    println!(
        "| hubfs | frontend | options | Hub | readers | files | aggregate MB/s | Hub bytes / distinct bytes read | Hub requests | mount peak RSS | mount CPU |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut worst: f64 = 0.0;
    for profile in &profiles {
        set_profile(&hub, profile);
        for (front, mode) in fronts.iter().flat_map(|f| modes.iter().map(move |m| (*f, m))) {
            let fname = if front == Frontend::Nfs { "nfs" } else { "fuse" };
            for &n in &readers {
                let files: Vec<String> = match mode.as_str() {
                    "one" => vec![shard(0); n],
                    _ => (0..n).map(shard).collect(),
                };
                for ((name, bin), (variant, opts)) in bins.iter().flat_map(|b| variants.iter().map(move |v| (b, v))) {
                    let extra: Vec<&str> = opts.iter().map(String::as_str).collect();
                    let r = run(&hub, bin, "shards", &files, &extra, front);
                    let distinct = r.read / n as u64 * if mode == "one" { 1 } else { n as u64 };
                    let ratio = r.hub_bytes as f64 / distinct as f64;
                    println!(
                        "| {name} | {fname} | {variant} | {profile} | {n} | {} × {mib} MiB | {:.0} | {ratio:.3} ({} / {} MiB) | {} | {} MiB | {:.1} s |",
                        if mode == "one" { 1 } else { n },
                        r.mb_s,
                        r.hub_bytes >> 20,
                        distinct >> 20,
                        r.requests,
                        r.peak_mib,
                        r.cpu_secs,
                    );
                    if name != "this" {
                        continue;
                    }
                    worst = worst.max(ratio);
                    if check {
                        assert!(
                            ratio <= MAX_RATIO,
                            "{n} readers ({fname}, {mode}, {profile}, {variant}): the Hub served {ratio:.3} × the bytes read"
                        );
                        if let Some(limit) = memory_limit_mib(&extra) {
                            assert!(
                                r.peak_mib as f64 <= limit as f64 * rss_factor,
                                "{n} readers ({fname}, {mode}, {profile}, {variant}): peak RSS {} MiB over {rss_factor} × {limit} MiB",
                                r.peak_mib
                            );
                        }
                    }
                }
            }
        }
    }
    println!("worst Hub bytes / distinct bytes read: {worst:.3}");
    hub.clear_faults();
    rt.block_on(hub.stop());
}
