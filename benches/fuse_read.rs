//! Read benchmarks of a hubfs FUSE mount against the FUSE ceiling, measured in one run:
//! the ceiling (`hubfs::fuse::ceiling`, a trivial filesystem serving memory), then hubfs on a Xet file of
//! the local Hub: cold sequential, warm re-read, cold 4 KiB random reads (Hub requests per read),
//! warm 4 KiB random IOPS, and cold sequential with the Hub at 30 ms latency and 200 Mbit/s per
//! connection. Needs root (FUSE mounts, dropping the page cache). Prints figures; asserts only what
//! the passthrough part must do (which opens pass through).
//!
//! Wall-clock figures on a shared 2-core machine are noisy, so every sequential pass also reports
//! the CPU it cost per GiB, split by side: the local Hub (its own runtime, threads `hub-*`), the
//! mount (runtime `mnt-*` and the FUSE session threads) and the reading thread (`reader`).
//!
//! `cargo bench --bench fuse_read`. HUBFS_BENCH_MIB sets the file size (default 1024),
//! HUBFS_BENCH_ONLY a comma list of parts to run (ceiling, seq, floor, random, slow, disk,
//! passthrough (re-reads in each order of events, passthrough on against off: `fuse_read/passthrough.rs`),
//! mmap; default all),
//! HUBFS_BENCH_RUNS the number of cold+warm sequential passes (default 3).

mod common;
#[path = "fuse_read/passthrough.rs"]
mod passthrough;

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use common::{drop_caches, median, requests, upload_xet_file};
use hubfs::hub_client::HubClientConfig;
use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, FaultSettings, LocalHub, LocalHubConfig, RouteClass};
use hubfs::process::session::{MountRequest, mount};
use hubfs::vfs::VfsOptions;

/// Sequential read with 1 MiB requests on a thread of its own; GB/s and that thread's CPU seconds.
fn seq_read(path: &Path) -> (f64, f64) {
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("reader".into())
        .spawn(move || {
            let mut f = std::fs::File::open(path).unwrap();
            let mut buf = vec![0u8; 1 << 20];
            let t = Instant::now();
            let mut n = 0u64;
            loop {
                let r = f.read(&mut buf).unwrap();
                if r == 0 {
                    break;
                }
                n += r as u64;
            }
            (
                n as f64 / t.elapsed().as_secs_f64() / 1e9,
                rusage_secs(libc::RUSAGE_THREAD),
            )
        })
        .unwrap()
        .join()
        .unwrap()
}

fn offsets(size: u64, count: usize, seed: u64) -> Vec<u64> {
    let mut x = seed;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (size / 4096)) * 4096
        })
        .collect()
}

/// 4 KiB preads at the given offsets; reads per second.
fn rand_read(path: &Path, offs: &[u64]) -> f64 {
    let f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; 4096];
    let t = Instant::now();
    for &o in offs {
        f.read_exact_at(&mut buf, o).unwrap();
    }
    offs.len() as f64 / t.elapsed().as_secs_f64()
}

fn peak_rss_mib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// Maps `file` and reads one byte of every page in order, as a loader walking its tensors does.
fn touch_pages(file: &Path, size: u64) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(file).unwrap();
    let len = size as usize;
    // SAFETY: a read-only private mapping of a file we hold open, unmapped below; reads stay
    // within `len` bytes of it.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED, "mmap");
        let p = addr as *const u8;
        let mut sum = 0u64;
        let mut off = 0;
        while off < len {
            sum = sum.wrapping_add(std::ptr::read_volatile(p.add(off)) as u64);
            off += 4096;
        }
        std::hint::black_box(sum);
        libc::munmap(addr, len);
    }
}

/// A disk-tier whole file (`HASH.whole`) under `dir`.
fn find_whole(dir: &Path) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(w) = find_whole(&p) {
                return Some(w);
            }
        } else if p.extension().is_some_and(|x| x == "whole") {
            return Some(p);
        }
    }
    None
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            n += dir_bytes(&p);
        } else if let Ok(m) = p.metadata() {
            n += m.len();
        }
    }
    n
}

/// Bytes of the files under `dir` that sit in the page cache (mincore over each file).
fn page_cache_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            n += page_cache_bytes(&p);
            continue;
        }
        // Counted without mapping the file: a mapping would set its atime, which the mount reads
        // as "the disk has served it" (`fuse/warm.rs`).
        if let Ok(f) = std::fs::File::open(&p) {
            n += hubfs::fuse::page_cache_bytes(&f).unwrap_or(0);
        }
    }
    n
}

/// Names the calling thread (threads it creates inherit the name, so unnamed helper threads a
/// mount starts are counted with it; fuser names its own `fuser-*`).
fn name_thread(name: &str) {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from a valid pointer.
    unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Nanoseconds on CPU of every live thread of this process, by thread id, with its name.
fn thread_cpu() -> HashMap<String, (String, u64)> {
    let mut out = HashMap::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let dir = e.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0);
        out.insert(
            e.file_name().to_string_lossy().into_owned(),
            (comm.trim().to_string(), ns),
        );
    }
    out
}

/// User + system CPU of the whole process (threads that exited included), seconds.
fn process_cpu() -> f64 {
    rusage_secs(libc::RUSAGE_SELF)
}

/// User + system CPU seconds of `who` (the process or the calling thread).
fn rusage_secs(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut r) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

/// CPU seconds spent during a span, by side.
#[derive(Default, Clone, Copy)]
struct CpuUse {
    hub: f64,
    mount: f64,
    reader: f64,
    total: f64,
}

struct CpuSpan {
    threads: HashMap<String, (String, u64)>,
    total: f64,
}

impl CpuSpan {
    fn begin() -> CpuSpan {
        CpuSpan {
            threads: thread_cpu(),
            total: process_cpu(),
        }
    }

    fn end(&self) -> CpuUse {
        let mut u = CpuUse {
            total: process_cpu() - self.total,
            ..Default::default()
        };
        for (tid, (comm, ns)) in thread_cpu() {
            let before = self.threads.get(&tid).map_or(0, |(_, b)| *b);
            let secs = ns.saturating_sub(before) as f64 / 1e9;
            if comm.starts_with("hub") {
                u.hub += secs;
            } else if comm.starts_with("mnt") || comm.starts_with("fuser") {
                u.mount += secs;
            }
        }
        u
    }
}

/// "hub 0.41 + mount 0.52 + reader 0.20 = 1.13 (process 1.15) CPU s/GiB".
fn per_gib(u: CpuUse, bytes: u64) -> String {
    let g = bytes as f64 / (1u64 << 30) as f64;
    format!(
        "hub {:.2} + mount {:.2} + reader {:.2} (process {:.2}) CPU s/GiB",
        u.hub / g,
        u.mount / g,
        u.reader / g,
        u.total / g
    )
}

/// Reads `local/bench/weights.bin` the way a Xet client does (read token, one reconstruction, xorb
/// ranges in `part`-byte requests, `depth` in flight) and drops the bytes; returns the byte count
/// of the file's terms.
async fn drain_xet_file(ep: &str, part: u64, depth: usize) -> u64 {
    use futures::StreamExt;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let head = http
        .head(format!("{ep}/local/bench/resolve/main/weights.bin"))
        .bearer_auth(DEFAULT_WRITE_TOKEN)
        .send()
        .await
        .unwrap();
    let hash = head.headers()["x-xet-hash"].to_str().unwrap().to_string();
    let tok: serde_json::Value = http
        .get(format!("{ep}/api/models/local/bench/xet-read-token/main"))
        .bearer_auth(DEFAULT_WRITE_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (cas, token) = (tok["casUrl"].as_str().unwrap(), tok["accessToken"].as_str().unwrap());
    let recon: xet_client::cas_types::QueryReconstructionResponseV2 = http
        .get(format!("{cas}/v2/reconstructions/{hash}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut ranges = Vec::new();
    for fetches in recon.xorbs.values() {
        for f in fetches {
            for d in &f.ranges {
                let mut a = d.bytes.start;
                while a <= d.bytes.end {
                    let b = (a + part - 1).min(d.bytes.end);
                    ranges.push((f.url.clone(), a, b));
                    a = b + 1;
                }
            }
        }
    }
    futures::stream::iter(ranges)
        .map(|(url, a, b)| {
            let http = http.clone();
            async move {
                let mut r = http
                    .get(url)
                    .header("range", format!("bytes={a}-{b}"))
                    .send()
                    .await
                    .unwrap();
                let mut n = 0u64;
                while let Some(c) = r.chunk().await.unwrap() {
                    n += c.len() as u64;
                }
                assert_eq!(n, b - a + 1);
            }
        })
        .buffer_unordered(depth)
        .collect::<Vec<()>>()
        .await;
    recon.terms.iter().map(|t| t.unpacked_length as u64).sum()
}

struct Bench {
    rt: tokio::runtime::Runtime,
    client: HubClientConfig,
    opts: VfsOptions,
}

impl Bench {
    /// Mounts `local/bench`; the FUSE session's threads are created under the name `mnt-fuse`.
    fn mount(&self, dir: &Path) -> hubfs::process::session::Mounted {
        self.mount_with(dir, self.opts.clone())
    }

    fn mount_with(&self, dir: &Path, vfs: VfsOptions) -> hubfs::process::session::Mounted {
        let req = MountRequest {
            repo: "local/bench".into(),
            mountpoint: dir.to_path_buf(),
            revision: None,
            client: self.client.clone(),
            vfs,
            allow_other: false,
        };
        name_thread("mnt-fuse");
        let m = mount(req, &self.rt).unwrap();
        name_thread("bench-main");
        m
    }
}

/// Reads every file under `dir` once, so the local Hub's data is in the page cache (as a CDN
/// serves from memory) while hubfs's side stays cold.
fn warm_files(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            warm_files(&p);
        } else if let Ok(mut f) = std::fs::File::open(&p) {
            std::io::copy(&mut f, &mut std::io::sink()).unwrap();
        }
    }
}

/// One measured cold sequential pass over `file` (page cache dropped; with `hub_data`, the local
/// Hub's files read back into it first): GB/s and CPU.
fn measured_seq(file: &Path, hub_data: Option<&Path>) -> (f64, CpuUse) {
    drop_caches();
    if let Some(d) = hub_data {
        warm_files(d);
    }
    let span = CpuSpan::begin();
    let (gbps, reader) = seq_read(file);
    let mut cpu = span.end();
    cpu.reader = reader;
    if std::env::var_os("HUBFS_BENCH_THREADS").is_some() {
        let mut t: Vec<_> = thread_cpu().into_values().collect();
        t.sort();
        eprintln!("threads: {t:?}");
    }
    (gbps, cpu)
}

fn main() {
    let mib: u64 = std::env::var("HUBFS_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let runs: usize = std::env::var("HUBFS_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let only = std::env::var("HUBFS_BENCH_ONLY").unwrap_or_default();
    let part = |name: &str| only.is_empty() || only.split(',').any(|p| p.trim() == name);
    let size = mib << 20;
    name_thread("bench-main");
    // The local Hub and the mount get runtimes of their own, as separate processes would.
    let hub_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("hub-rt")
        .enable_all()
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("mnt-rt")
        .enable_all()
        .build()
        .unwrap();
    let hub_dir = tempfile::tempdir().unwrap();
    let hub = hub_rt
        .block_on(LocalHub::start(LocalHubConfig::new(hub_dir.path())))
        .unwrap();
    let ep = hub.endpoint().to_string();

    // A Xet file of `size` bytes, uploaded by the hf-hub crate as a client would.
    hub_rt.block_on(upload_xet_file(&ep, "bench", "weights.bin", size, 3));

    println!("hubfs FUSE read benchmark: {mib} MiB Xet file, local Hub on loopback, 2 cores shared by all");
    let mut rows: Vec<String> = Vec::new();

    // The ceiling.
    let mut ceiling = f64::NAN;
    if part("ceiling") {
        let dir = tempfile::tempdir().unwrap();
        name_thread("mnt-fuse");
        let s = hubfs::fuse::ceiling::mount(dir.path(), mib as usize).unwrap();
        name_thread("bench-main");
        let file = dir.path().join("data.bin");
        let passes: Vec<(f64, CpuUse)> = (0..3).map(|_| measured_seq(&file, None)).collect();
        s.umount_and_join().unwrap();
        ceiling = median(passes.iter().map(|p| p.0).collect());
        rows.push(format!(
            "| FUSE ceiling (memory filesystem), sequential 1 MiB reads | {ceiling:.2} GB/s | 100%; {} |",
            per_gib(passes[passes.len() - 1].1, size)
        ));
    }

    let b = Bench {
        client: HubClientConfig {
            endpoint: ep.clone(),
            token: Some(DEFAULT_WRITE_TOKEN.to_string()),
            ..HubClientConfig::from_env()
        },
        opts: VfsOptions {
            memory_cache_bytes: 2 * size + (64 << 20),
            ..VfsOptions::default()
        },
        rt,
    };

    // Cold (fresh mount, empty caches) and warm (served by hubfs's cache, page cache dropped).
    if part("seq") {
        let (mut cold, mut warm, mut hub_warm) = (Vec::new(), Vec::new(), Vec::new());
        let (mut cold_reqs, mut cold_cpu, mut warm_cpu, mut hub_warm_cpu) =
            (0, CpuUse::default(), CpuUse::default(), CpuUse::default());
        for _ in 0..runs {
            let d = tempfile::tempdir().unwrap();
            let m = b.mount(d.path());
            let file = d.path().join("weights.bin");
            std::fs::metadata(&file).unwrap();
            hub.reset_stats();
            let (g, c) = measured_seq(&file, None);
            cold.push(g);
            cold_reqs = requests(&hub);
            cold_cpu = c;
            let (g, c) = measured_seq(&file, None);
            warm.push(g);
            warm_cpu = c;
            m.unmount().unwrap();
            // Cold again, with the Hub's files in memory: what hubfs itself costs and reaches.
            let d = tempfile::tempdir().unwrap();
            let m = b.mount(d.path());
            let file = d.path().join("weights.bin");
            std::fs::metadata(&file).unwrap();
            let (g, c) = measured_seq(&file, Some(hub_dir.path()));
            hub_warm.push(g);
            hub_warm_cpu = c;
            m.unmount().unwrap();
        }
        println!(
            "cold passes {cold:.2?} GB/s, warm passes {warm:.2?} GB/s, cold with the Hub's files cached {hub_warm:.2?} GB/s"
        );
        let (cold, warm, hub_warm) = (median(cold), median(warm), median(hub_warm));
        rows.push(format!(
            "| hubfs cold sequential read | {cold:.2} GB/s | {:.0}% of ceiling (target ≥ 80%); {} |",
            100.0 * cold / ceiling,
            per_gib(cold_cpu, size)
        ));
        rows.push(format!(
            "| hubfs cold sequential read, the Hub's files in its page cache | {hub_warm:.2} GB/s | {:.0}% of ceiling; {} |",
            100.0 * hub_warm / ceiling,
            per_gib(hub_warm_cpu, size)
        ));
        rows.push(format!(
            "| hubfs warm re-read (hubfs cache, page cache dropped) | {warm:.2} GB/s | {:.0}% of ceiling (target ≥ 90%); {} |",
            100.0 * warm / ceiling,
            per_gib(warm_cpu, size)
        ));
        rows.push(format!(
            "| Hub requests for one cold sequential read | {cold_reqs} | {:.0} per GiB, {:.1} MiB per request |",
            cold_reqs as f64 * 1024.0 / mib as f64,
            mib as f64 / cold_reqs.max(1) as f64
        ));
    }

    // The floor: the local Hub serving the same xorb ranges to a client that only counts the bytes
    // (8 MiB ranges, 8 in flight), the Hub's files in its page cache. Whatever hubfs does, a cold
    // Xet read costs at least this Hub CPU on the machine's two shared cores.
    if part("floor") {
        drop_caches();
        warm_files(hub_dir.path());
        let span = CpuSpan::begin();
        let t = Instant::now();
        let got = b.rt.block_on(drain_xet_file(&ep, 8 << 20, 8));
        let secs = t.elapsed().as_secs_f64();
        let cpu = span.end();
        assert_eq!(got, size, "the floor client read the whole file");
        rows.push(format!(
            "| floor: the local Hub serving the xorb ranges to a client that discards them | {:.2} GB/s | {} (the client counts as mount) |",
            got as f64 / secs / 1e9,
            per_gib(cpu, size)
        ));
    }

    // Random 4 KiB reads: cold (each costs Hub requests), then warm.
    if part("random") {
        let d = tempfile::tempdir().unwrap();
        let m = b.mount(d.path());
        let file = d.path().join("weights.bin");
        std::fs::metadata(&file).unwrap();
        drop_caches();
        hub.reset_stats();
        let cold_offs = offsets(size, 200, 7);
        let cold_iops = rand_read(&file, &cold_offs);
        let per_read = requests(&hub) as f64 / cold_offs.len() as f64;
        seq_read(&file);
        drop_caches();
        let warm_offs = offsets(size, 20_000, 11);
        let warm_iops = rand_read(&file, &warm_offs);
        m.unmount().unwrap();
        rows.push(format!(
            "| hubfs cold 4 KiB random reads | {cold_iops:.0} reads/s | {per_read:.2} Hub requests per read (target 1) |"
        ));
        rows.push(format!(
            "| hubfs warm 4 KiB random reads | {warm_iops:.0} IOPS | target ≥ 20,000 |"
        ));
    }

    // A realistic network: 30 ms per request, 200 Mbit/s per connection, on the CAS and downloads.
    if part("slow") {
        let slow = FaultSettings {
            latency_ms: 30,
            bandwidth_mbps: 200.0,
            ..Default::default()
        };
        hub.set_faults(RouteClass::Cas, slow.clone()).unwrap();
        hub.set_faults(RouteClass::Resolve, slow).unwrap();
        hub.set_faults(
            RouteClass::Api,
            FaultSettings {
                latency_ms: 30,
                ..Default::default()
            },
        )
        .unwrap();
        let d = tempfile::tempdir().unwrap();
        let m = b.mount(d.path());
        let file = d.path().join("weights.bin");
        std::fs::metadata(&file).unwrap();
        hub.reset_stats();
        let t = Instant::now();
        let (realistic, cpu) = measured_seq(&file, None);
        let secs = t.elapsed().as_secs_f64();
        let reqs = requests(&hub);
        m.unmount().unwrap();
        hub.clear_faults();
        rows.push(format!(
            "| hubfs cold sequential, Hub at 30 ms + 200 Mbit/s per connection | {realistic:.2} GB/s ({secs:.1} s, {reqs} requests) | target ≥ 0.40 GB/s; {} |",
            per_gib(cpu, size)
        ));
    }

    // The disk tier's cost: cold sequential reads with the CLI's default caches (64 MiB of memory
    // above a disk tier) against the same mount with the disk tier off, alternated; then the file
    // read again by a fresh mount on the same cache dir (page cache dropped): served by the disk tier.
    if part("disk") {
        let cli = |cache: Option<&Path>| VfsOptions {
            memory_cache_bytes: 64 << 20,
            cache_dir: cache.map(Path::to_path_buf),
            disk_cache_bytes: if cache.is_some() { 10 << 30 } else { 0 },
            ..VfsOptions::default()
        };
        let (mut on, mut off, mut warm) = (Vec::new(), Vec::new(), Vec::new());
        let (mut on_cpu, mut off_cpu, mut warm_cpu) = (Vec::new(), Vec::new(), Vec::new());
        let mut resident = 0u64;
        for _ in 0..runs {
            for with_disk in [true, false] {
                let cache = tempfile::tempdir_in("/var/tmp").unwrap();
                let d = tempfile::tempdir().unwrap();
                let m = b.mount_with(d.path(), cli(with_disk.then_some(cache.path())));
                let file = d.path().join("weights.bin");
                std::fs::metadata(&file).unwrap();
                let (g, c) = measured_seq(&file, Some(hub_dir.path()));
                m.unmount().unwrap();
                if !with_disk {
                    off.push(g);
                    off_cpu.push(c.mount);
                    continue;
                }
                on.push(g);
                on_cpu.push(c.mount);
                let blocks = cache.path().join("blocks");
                // The last blocks may still be on their way to disk.
                let mut cached = dir_bytes(&blocks);
                for _ in 0..50 {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    let now = dir_bytes(&blocks);
                    if now == cached && now >= size {
                        break;
                    }
                    cached = now;
                }
                resident = resident.max(page_cache_bytes(&blocks));
                assert!(
                    resident <= size / 4,
                    "the disk tier's files hold {resident} bytes of page cache after a {size}-byte read"
                );
                assert!(cached >= size * 9 / 10, "the disk tier kept {cached} of {size} bytes");
                let d = tempfile::tempdir().unwrap();
                let m = b.mount_with(d.path(), cli(Some(cache.path())));
                let file = d.path().join("weights.bin");
                std::fs::metadata(&file).unwrap();
                hub.reset_stats();
                let (g, c) = measured_seq(&file, None);
                assert!(requests(&hub) <= 3, "the re-read was served by the disk tier");
                warm.push(g);
                warm_cpu.push(c.mount);
                m.unmount().unwrap();
            }
        }
        let gib = size as f64 / (1u64 << 30) as f64;
        let per = |v: &[f64]| v.iter().map(|c| c / gib).collect::<Vec<_>>();
        println!(
            "disk tier on {on:.2?} GB/s ({:.2?} mount CPU s/GiB), off {off:.2?} GB/s ({:.2?}), re-read from it {warm:.2?} GB/s ({:.2?})",
            per(&on_cpu),
            per(&off_cpu),
            per(&warm_cpu)
        );
        let (on, off, warm) = (median(on), median(off), median(warm));
        rows.push(format!(
            "| cold sequential, CLI caches (64 MiB memory + disk tier) | {on:.2} GB/s | {:.0}% of the same read with the disk tier off ({off:.2} GB/s; target ≥ 90%); mount {:.2} CPU s/GiB (off: {:.2}; target ≤ 1.5) |",
            100.0 * on / off,
            median(on_cpu) / gib,
            median(off_cpu) / gib
        ));
        rows.push(format!(
            "| re-read from the disk tier (fresh mount, page cache dropped) | {warm:.2} GB/s | mount {:.2} CPU s/GiB (target ≤ 0.5) |",
            median(warm_cpu) / gib
        ));
        rows.push(format!(
            "| the disk tier's files in the page cache after a cold read | {} MiB | of a {mib} MiB file |",
            resident >> 20
        ));
    }

    // FUSE passthrough: re-reads in each order of events, passthrough on against off.
    if part("passthrough") {
        passthrough::run(&b, &hub, size, runs, &mut rows);
    }

    // Page-fault reads (safetensors and numpy memmap load through mmap): a cold pass that touches
    // every page of an mmap of the file in order, against a cold `read` pass of the same mount
    // build, alternated.
    if part("mmap") {
        let (mut faults, mut reads) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            for by_fault in [true, false] {
                let d = tempfile::tempdir().unwrap();
                let m = b.mount(d.path());
                let file = d.path().join("weights.bin");
                std::fs::metadata(&file).unwrap();
                drop_caches();
                warm_files(hub_dir.path());
                let t = Instant::now();
                if by_fault {
                    touch_pages(&file, size);
                } else {
                    seq_read(&file);
                }
                let gbps = size as f64 / t.elapsed().as_secs_f64() / 1e9;
                m.unmount().unwrap();
                if by_fault { faults.push(gbps) } else { reads.push(gbps) }
            }
        }
        println!("mmap page-fault passes {faults:.2?} GB/s, read passes {reads:.2?} GB/s");
        let (f, r) = (median(faults), median(reads));
        rows.push(format!(
            "| cold mmap read, every page touched in order | {f:.2} GB/s | {:.0}% of a cold sequential read of the same build ({r:.2} GB/s; target ≥ 80%) |",
            100.0 * f / r
        ));
    }

    println!("| measurement | figure | ratio / target |");
    println!("|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    println!(
        "| peak RSS of the whole run (local Hub, mounts, caches sized 2× the file) | {} MiB | |",
        peak_rss_mib()
    );
    drop(b);
    hub_rt.block_on(hub.stop());
}
