//! Read benchmarks of a hubfs FUSE mount against the FUSE ceiling, measured in one run:
//! the ceiling (`hubfs::ceiling`, a trivial filesystem serving memory), then hubfs on a Xet file of
//! the local Hub: cold sequential, warm re-read, cold 4 KiB random reads (Hub requests per read),
//! warm 4 KiB random IOPS, and cold sequential with the Hub at 30 ms latency and 200 Mbit/s per
//! connection. Needs root (FUSE mounts, dropping the page cache). Prints figures; asserts nothing.
//!
//! `cargo bench --bench fuse_read` (HUBFS_BENCH_MIB sets the file size, default 1024).

mod common;

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use common::{drop_caches, median, requests, upload_xet_file};
use hubfs::hub_client::HubClientConfig;
use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, FaultSettings, LocalHub, RouteClass};
use hubfs::mount::{MountRequest, mount};
use hubfs::vfs::VfsOptions;

/// Sequential read with 1 MiB requests; GB/s.
fn seq_read(path: &Path) -> f64 {
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
    n as f64 / t.elapsed().as_secs_f64() / 1e9
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

fn main() {
    let mib: u64 = std::env::var("HUBFS_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let size = mib << 20;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
    let ep = hub.endpoint().to_string();

    // A Xet file of `size` bytes, uploaded by the hf-hub crate as a client would.
    rt.block_on(upload_xet_file(&ep, "bench", "weights.bin", size, 3));

    println!("hubfs FUSE read benchmark: {mib} MiB Xet file, local Hub on loopback, 2 cores shared by all");
    // The ceiling.
    let dir = tempfile::tempdir().unwrap();
    let ceiling = {
        let s = hubfs::ceiling::mount(dir.path(), mib as usize).unwrap();
        let v: Vec<f64> = (0..3)
            .map(|_| {
                drop_caches();
                seq_read(&dir.path().join("data.bin"))
            })
            .collect();
        s.umount_and_join().unwrap();
        median(v)
    };

    let client = HubClientConfig {
        endpoint: ep.clone(),
        token: Some(DEFAULT_WRITE_TOKEN.to_string()),
        ..HubClientConfig::from_env()
    };
    let opts = VfsOptions {
        memory_cache_bytes: 2 * size + (64 << 20),
        ..VfsOptions::default()
    };
    let do_mount = |dir: &Path| {
        let req = MountRequest {
            repo: "local/bench".into(),
            mountpoint: dir.to_path_buf(),
            revision: None,
            client: client.clone(),
            vfs: opts.clone(),
            allow_other: false,
        };
        mount(req, &rt).unwrap()
    };

    // Cold (fresh mount, empty caches) and warm (served by hubfs's cache, page cache dropped).
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    let mut cold_reqs = 0;
    for _ in 0..3 {
        let d = tempfile::tempdir().unwrap();
        let m = do_mount(d.path());
        let file = d.path().join("weights.bin");
        drop_caches();
        hub.reset_stats();
        cold.push(seq_read(&file));
        cold_reqs = requests(&hub);
        drop_caches();
        warm.push(seq_read(&file));
        m.unmount().unwrap();
    }
    let (cold, warm) = (median(cold), median(warm));

    // Random 4 KiB reads: cold (each costs Hub requests), then warm.
    let d = tempfile::tempdir().unwrap();
    let m = do_mount(d.path());
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

    // A realistic network: 30 ms per request, 200 Mbit/s per connection, on the CAS and downloads.
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
    let m = do_mount(d.path());
    drop_caches();
    let t = Instant::now();
    let realistic = seq_read(&d.path().join("weights.bin"));
    let realistic_secs = t.elapsed();
    m.unmount().unwrap();
    hub.clear_faults();

    println!("| measurement | figure | ratio / target |");
    println!("|---|---|---|");
    println!("| FUSE ceiling (memory filesystem), sequential 1 MiB reads | {ceiling:.2} GB/s | 100% |");
    println!(
        "| hubfs cold sequential read | {cold:.2} GB/s | {:.0}% of ceiling (target ≥ 80%) |",
        100.0 * cold / ceiling
    );
    println!(
        "| hubfs warm re-read (hubfs cache, page cache dropped) | {warm:.2} GB/s | {:.0}% of ceiling (target ≥ 90%) |",
        100.0 * warm / ceiling
    );
    println!(
        "| Hub requests for one cold sequential read | {cold_reqs} | {:.1} MiB per request |",
        mib as f64 / cold_reqs.max(1) as f64
    );
    println!(
        "| hubfs cold 4 KiB random reads | {cold_iops:.0} reads/s | {per_read:.2} Hub requests per read (target 1) |"
    );
    println!("| hubfs warm 4 KiB random reads | {warm_iops:.0} IOPS | target ≥ 20,000 |");
    println!(
        "| hubfs cold sequential, Hub at 30 ms + 200 Mbit/s per connection | {realistic:.2} GB/s ({:.1} s) | target ≥ 0.40 GB/s |",
        realistic_secs.as_secs_f64()
    );
    println!(
        "| peak RSS of the whole run (local Hub, mounts, caches sized 2× the file) | {} MiB | |",
        peak_rss_mib()
    );
    rt.block_on(hub.stop());
}
