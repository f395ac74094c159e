//! NFS read benchmarks, FUSE beside them, measured in one run with fio:
//! - the NFS ceiling (`hubfs::nfs::ceiling`, a trivial nfsserve filesystem serving memory, through
//!   hubfs's RPC front) and hubfs's NFS server on a Xet file of the local Hub, both through fio's
//!   nfs engine (libnfs): sequential 1 MiB reads (cold once, then cached in hubfs) and 4 KiB random
//!   reads; the same memory server on nfsserve's own TCP listener beside them;
//! - the FUSE ceiling and hubfs's FUSE mount through fio's psync engine, page cache dropped;
//! - sustained 4 KiB random reads over NFS (90 s; `HUBFS_BENCH_SUSTAIN_SECS`, 0 skips), ceiling and
//!   hubfs: IOPS in the first 5 s beside the last 30 s, since per-request cost that grows with the
//!   requests served shows only over time.
//!
//! Needs root (FUSE, dropping caches) and fio with the nfs engine (`bash ci/fio-nfs.sh` builds it;
//! HUBFS_FIO_NFS names another binary); that one fio runs the psync jobs too, so no system fio is
//! needed. Prints figures; asserts nothing.
//! `cargo bench --bench nfs_read` (HUBFS_BENCH_MIB sets the file size, default 1024).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{drop_caches, median, requests, upload_xet_file};
use hubfs::hub_client::HubClientConfig;
use hubfs::local_hub::{DEFAULT_WRITE_TOKEN, LocalHub};
use hubfs::nfs::server::NfsServer;
use hubfs::process::session::{MountRequest, mount, open_vfs};
use hubfs::vfs::VfsOptions;

/// One fio job's result: bytes per second and IOPS.
struct Fio {
    bw: f64,
    iops: f64,
}

fn fio_bin() -> String {
    if let Ok(b) = std::env::var("HUBFS_FIO_NFS") {
        return b;
    }
    let out = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/ci/fio-nfs.sh"))
        .output()
        .expect("run ci/fio-nfs.sh");
    assert!(out.status.success(), "ci/fio-nfs.sh failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("fio")
        .to_string()
}

/// How long one fio run may take before it is killed (libnfs 4.0 can hang in its unmount after a
/// job with requests in flight: see `examples/bench_suite/fio.rs`).
const FIO_LIMIT_SECS: &str = "300";

/// Runs one fio job (`args` add the engine, target and pattern) and reads its JSON report.
fn fio(bin: &str, args: &[String]) -> Fio {
    let out = Command::new("timeout")
        .args(["-s", "KILL", FIO_LIMIT_SECS, bin])
        .args(["--name=bench", "--output-format=json", "--thread"])
        .args(args)
        .output()
        .expect("run fio");
    let text = String::from_utf8_lossy(&out.stdout);
    // fio prints libnfs teardown chatter before the JSON on some runs.
    let json = &text[text.find('{').unwrap_or(0)..];
    let v: serde_json::Value = serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("fio output ({e}): {text}\n{}", String::from_utf8_lossy(&out.stderr)));
    let job = &v["jobs"][0];
    let read = &job["read"];
    if job["error"].as_i64().unwrap_or(0) != 0 || read["io_bytes"].as_u64().unwrap_or(0) == 0 {
        eprintln!(
            "fio {args:?} did no I/O (error {}): {}",
            job["error"],
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    Fio {
        bw: read["bw_bytes"].as_f64().unwrap_or(0.0),
        iops: read["iops"].as_f64().unwrap_or(0.0),
    }
}

fn nfs_args(addr: SocketAddr, file: &str, rw: &str, bs: &str, extra: &[&str]) -> Vec<String> {
    let port = addr.port();
    let mut a = vec![
        "--ioengine=nfs".to_string(),
        format!("--nfs_url=nfs://127.0.0.1/?nfsport={port}&mountport={port}"),
        format!("--filename={file}"),
        format!("--rw={rw}"),
        format!("--bs={bs}"),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn psync_args(path: &Path, rw: &str, bs: &str, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "--ioengine=psync".to_string(),
        format!("--filename={}", path.display()),
        format!("--rw={rw}"),
        format!("--bs={bs}"),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

const RAND: &[&str] = &["--runtime=6", "--time_based", "--randrepeat=1"];

/// Seconds of the sustained random-read runs (0 skips them).
fn sustain_secs() -> u64 {
    std::env::var("HUBFS_BENCH_SUSTAIN_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(90)
}

/// A sustained 4 KiB random-read run of `secs` seconds: IOPS in its first 5 s and in its last 30 s
/// (fio's IOPS log, averaged per 5 s).
fn sustained(bin: &str, addr: SocketAddr, file: &str, size: &str, secs: u64) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("s");
    let runtime = format!("--runtime={secs}");
    let log = format!("--write_iops_log={}", prefix.display());
    fio(
        bin,
        &nfs_args(
            addr,
            file,
            "randread",
            "4k",
            &[
                size,
                &runtime,
                "--time_based",
                "--randrepeat=1",
                &log,
                "--log_avg_msec=5000",
            ],
        ),
    );
    let text = std::fs::read_to_string(dir.path().join("s_iops.1.log")).unwrap_or_default();
    // Lines: "msec, iops, direction, block size, offset".
    let points: Vec<(u64, f64)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split(',').map(str::trim);
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    let first = points.first().map_or(0.0, |p| p.1);
    let tail: Vec<f64> = points
        .iter()
        .filter(|p| p.0 + 30_000 > secs * 1000)
        .map(|p| p.1)
        .collect();
    (first, tail.iter().sum::<f64>() / tail.len().max(1) as f64)
}

/// fio's nfs engine cannot size a file by itself: every NFS job names the file size.
fn sized<'a>(size: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![size];
    v.extend_from_slice(extra);
    v
}

fn main() {
    let mib: u64 = std::env::var("HUBFS_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let size = mib << 20;
    let fio_bin = fio_bin();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
    let ep = hub.endpoint().to_string();
    rt.block_on(upload_xet_file(&ep, "bench", "weights.bin", size, 3));
    let file_size = format!("--size={mib}m");
    println!(
        "hubfs NFS and FUSE read benchmark: {mib} MiB Xet file, local Hub on loopback, fio, 2 cores shared by all"
    );

    // NFS ceiling.
    let (addr, task) = rt
        .block_on(hubfs::nfs::ceiling::serve(mib as usize, "127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let ceil_seq = median(
        (0..3)
            .map(|_| fio(&fio_bin, &nfs_args(addr, "data.bin", "read", "1m", &[&file_size])).bw)
            .collect(),
    );
    let ceil_rand = fio(
        &fio_bin,
        &nfs_args(addr, "data.bin", "randread", "4k", &sized(&file_size, RAND)),
    )
    .iops;
    let ceil_rand16 = fio(
        &fio_bin,
        &nfs_args(
            addr,
            "data.bin",
            "randread",
            "4k",
            &sized(&file_size, &[RAND, &["--iodepth=16"]].concat()),
        ),
    )
    .iops;
    let secs = sustain_secs();
    let ceil_sustained = (secs > 0).then(|| sustained(&fio_bin, addr, "data.bin", &file_size, secs));
    task.abort();

    // The same memory server through nfsserve's own TCP listener, which hubfs's RPC front replaced.
    let (addr, task) = rt
        .block_on(hubfs::nfs::ceiling::serve_nfsserve(
            mib as usize,
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
    let stock_seq = median(
        (0..3)
            .map(|_| fio(&fio_bin, &nfs_args(addr, "data.bin", "read", "1m", &[&file_size])).bw)
            .collect(),
    );
    let stock_sustained = (secs > 0).then(|| sustained(&fio_bin, addr, "data.bin", &file_size, secs));
    task.abort();

    // hubfs over NFS: its caches hold the file after the first (cold) pass.
    let client = HubClientConfig {
        endpoint: ep.clone(),
        token: Some(DEFAULT_WRITE_TOKEN.to_string()),
        ..HubClientConfig::from_env()
    };
    let opts = VfsOptions {
        memory_cache_bytes: size + (256 << 20),
        ..VfsOptions::default()
    };
    let opened = open_vfs("local/bench", None, &client, &opts, &rt).unwrap();
    let server = rt
        .block_on(NfsServer::start(opened.vfs.clone(), "127.0.0.1:0".parse().unwrap()))
        .unwrap();
    let addr = server.addr();
    hub.reset_stats();
    let nfs_cold = fio(&fio_bin, &nfs_args(addr, "weights.bin", "read", "1m", &[&file_size])).bw;
    let nfs_cold_reqs = requests(&hub);
    let nfs_warm = median(
        (0..3)
            .map(|_| fio(&fio_bin, &nfs_args(addr, "weights.bin", "read", "1m", &[&file_size])).bw)
            .collect(),
    );
    let nfs_rand = fio(
        &fio_bin,
        &nfs_args(addr, "weights.bin", "randread", "4k", &sized(&file_size, RAND)),
    )
    .iops;
    let nfs_rand16 = fio(
        &fio_bin,
        &nfs_args(
            addr,
            "weights.bin",
            "randread",
            "4k",
            &sized(&file_size, &[RAND, &["--iodepth=16"]].concat()),
        ),
    )
    .iops;
    let nfs_sustained = (secs > 0).then(|| sustained(&fio_bin, addr, "weights.bin", &file_size, secs));
    server.stop();
    drop(server);
    drop(opened);

    // FUSE beside it: the ceiling and hubfs (warm: hubfs's cache, page cache dropped).
    let d = tempfile::tempdir().unwrap();
    let s = hubfs::fuse::ceiling::mount(d.path(), mib as usize).unwrap();
    let data = d.path().join("data.bin");
    let fuse_ceil_seq = median(
        (0..3)
            .map(|_| {
                drop_caches();
                fio(&fio_bin, &psync_args(&data, "read", "1m", &[])).bw
            })
            .collect(),
    );
    drop_caches();
    let fuse_ceil_rand = fio(&fio_bin, &psync_args(&data, "randread", "4k", RAND)).iops;
    s.umount_and_join().unwrap();

    let d = tempfile::tempdir().unwrap();
    let m = mount(
        MountRequest {
            repo: "local/bench".into(),
            mountpoint: d.path().to_path_buf(),
            revision: None,
            client: client.clone(),
            vfs: opts.clone(),
            allow_other: false,
        },
        &rt,
    )
    .unwrap();
    let weights = d.path().join("weights.bin");
    drop_caches();
    hub.reset_stats();
    let fuse_cold = fio(&fio_bin, &psync_args(&weights, "read", "1m", &[])).bw;
    let fuse_cold_reqs = requests(&hub);
    let fuse_warm = median(
        (0..3)
            .map(|_| {
                drop_caches();
                fio(&fio_bin, &psync_args(&weights, "read", "1m", &[])).bw
            })
            .collect(),
    );
    drop_caches();
    let fuse_rand = fio(&fio_bin, &psync_args(&weights, "randread", "4k", RAND)).iops;
    m.unmount().unwrap();
    std::thread::sleep(Duration::from_millis(200));

    let gb = |b: f64| b / 1e9;
    let pct = |a: f64, b: f64| 100.0 * a / b.max(1.0);
    println!("| measurement | NFS (fio nfs engine) | FUSE (fio psync) |");
    println!("|---|---|---|");
    println!(
        "| ceiling, sequential 1 MiB reads | {:.2} GB/s | {:.2} GB/s |",
        gb(ceil_seq),
        gb(fuse_ceil_seq)
    );
    println!(
        "| hubfs cold sequential 1 MiB reads | {:.2} GB/s ({nfs_cold_reqs} Hub requests) | {:.2} GB/s ({fuse_cold_reqs} Hub requests) |",
        gb(nfs_cold),
        gb(fuse_cold)
    );
    println!(
        "| hubfs cached sequential 1 MiB reads | {:.2} GB/s = **{:.0}%** of ceiling (target ≥ 80%) | {:.2} GB/s = {:.0}% of ceiling |",
        gb(nfs_warm),
        pct(nfs_warm, ceil_seq),
        gb(fuse_warm),
        pct(fuse_warm, fuse_ceil_seq)
    );
    println!("| ceiling, 4 KiB random reads, iodepth 1 | {ceil_rand:.0} IOPS | {fuse_ceil_rand:.0} IOPS |");
    println!(
        "| hubfs cached 4 KiB random reads, iodepth 1 | **{nfs_rand:.0} IOPS** = {:.0}% of ceiling (target ≥ 3,000) | {fuse_rand:.0} IOPS = {:.0}% of ceiling |",
        pct(nfs_rand, ceil_rand),
        pct(fuse_rand, fuse_ceil_rand)
    );
    println!(
        "| 4 KiB random reads, iodepth 16 (NFS only) | ceiling {ceil_rand16:.0} IOPS, hubfs {nfs_rand16:.0} IOPS = {:.0}% | |",
        pct(nfs_rand16, ceil_rand16)
    );
    if let (Some((c0, c1)), Some((h0, h1))) = (ceil_sustained, nfs_sustained) {
        println!(
            "| sustained 4 KiB random reads, {secs} s (NFS only): first 5 s → last 30 s | ceiling {c0:.0} → {c1:.0} IOPS, hubfs {h0:.0} → **{h1:.0} IOPS** = {:.0}% (target ≥ 3,000) | |",
            pct(h1, c1)
        );
    }
    println!(
        "| memory server on nfsserve's own listener: sequential 1 MiB reads | {:.2} GB/s (hubfs cached = {:.0}% of it) | |",
        gb(stock_seq),
        pct(nfs_warm, stock_seq)
    );
    if let Some((s0, s1)) = stock_sustained {
        println!(
            "| memory server on nfsserve's own listener: sustained 4 KiB random reads, first 5 s → last 30 s | {s0:.0} → {s1:.0} IOPS | |"
        );
    }
    rt.block_on(hub.stop());
}
