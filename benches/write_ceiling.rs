//! The FUSE ceiling for a `cp -r` of small files: the same copy into a plain tmpfs folder (no
//! FUSE) and into `fuse::ceiling_write`'s sink, which keeps names and sizes and drops the bytes.
//! What the sink reaches bounds any FUSE filesystem on this machine, hubfs included; BENCHMARKS
//! compares it with publishing through a mount and with `upload_folder`.
//!
//! `cargo bench --bench write_ceiling` (root, for the mount). HUBFS_BENCH_FILES (default 10,000)
//! sets the count; the files are short text rows in folders of 500, as `ci/bench-publish.sh`
//! writes them, on /dev/shm.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn make_tree(root: &Path, n: usize) -> u64 {
    let mut bytes = 0;
    for i in 0..n {
        let d = root.join("rows").join(format!("part-{:03}", i / 500));
        std::fs::create_dir_all(&d).expect("source folder");
        let row = format!("{{\"id\": {i}, \"text\": \"{}\"}}\n", "x".repeat(i % 300));
        bytes += row.len() as u64;
        std::fs::write(d.join(format!("row-{i:05}.json")), row).expect("source file");
    }
    bytes
}

/// Seconds a `cp -r SRC/. DST/` took.
fn cp(src: &Path, dst: &Path) -> f64 {
    let t = Instant::now();
    let st = Command::new("cp")
        .arg("-r")
        .arg(src.join("."))
        .arg(format!("{}/", dst.display()))
        .status()
        .expect("cp");
    assert!(st.success(), "cp -r into {} failed", dst.display());
    t.elapsed().as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("HUBFS_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let shm = tempfile::tempdir_in("/dev/shm").expect("a folder on /dev/shm");
    let src = shm.path().join("src");
    let bytes = make_tree(&src, n);
    println!("cp -r of {n} small files ({bytes} bytes, folders of 500) from /dev/shm, 3 runs each:");
    println!("| into | run 1 | run 2 | run 3 | files/s (best) |");
    println!("|---|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for way in ["tmpfs (no FUSE)", "FUSE sink (drops the bytes)"] {
        let mut times = Vec::new();
        for run in 0..3 {
            let dst = shm.path().join(format!("dst-{run}"));
            std::fs::create_dir_all(&dst).expect("destination");
            let t = if way.starts_with("tmpfs") {
                cp(&src, &dst)
            } else {
                let (session, totals) = hubfs::fuse::ceiling_write::mount(&dst).expect("mount the sink (root)");
                let t = cp(&src, &dst);
                assert_eq!(totals.totals(), (n as u64, bytes), "the sink got every file and byte");
                drop(session);
                t
            };
            let _ = std::fs::remove_dir_all(&dst);
            times.push(t);
        }
        let best = times.iter().cloned().fold(f64::MAX, f64::min);
        println!(
            "| {way} | {:.2} s | {:.2} s | {:.2} s | {:.0} |",
            times[0],
            times[1],
            times[2],
            n as f64 / best
        );
        rows.push(best);
    }
    println!(
        "FUSE sink / tmpfs: {:.1}x the time; per file through FUSE: {:.0} us (best runs)",
        rows[1] / rows[0],
        rows[1] / n as f64 * 1e6
    );
}
