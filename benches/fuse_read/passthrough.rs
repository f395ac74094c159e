//! The `passthrough` part of `fuse_read`: re-reads of a file the disk tier holds whole, in each
//! order of events (issue 27), with passthrough on (`auto`) and off, alternated:
//! - a: cold read, the join into one cache file finishes, then the first re-read (same mount);
//! - b: cold read, re-read at once (the join most likely still running), then again after it;
//! - c: a second mount on the same cache dir (page cache dropped);
//! - d: the mount of (a) after `drop_caches` (the kernel evicts the inode and its pages), twice:
//!   the first read of the cache file the join just wrote is slow from this machine's disk
//!   whatever reads it (the file read directly, without hubfs: 0.38–0.51 GB/s, then 1.41–1.94;
//!   still so 8 s after the join), so the second pass compares the two paths on a disk that has
//!   served the file before, as (c) does.
//!
//! Beside each figure: the Hub's requests and bytes during the step, the process's peak RSS during
//! it (Hub, mount and reader share the process: the Hub is idle in every step but the cold read),
//! and the page cache the disk tier's files hold after it (a copy of the file beside the FUSE
//! inode's own pages would show there). With passthrough off no join happens: (a) and (b) only
//! differ by the wait.

use std::path::Path;
use std::time::{Duration, Instant};

use hubfs::local_hub::{LocalHub, RouteClass};
use hubfs::vfs::VfsOptions;

use super::common::{drop_caches, median, requests};
use super::{Bench, CpuSpan, dir_bytes, find_whole, page_cache_bytes, peak_rss_mib, seq_read};

/// One measured read of the whole file.
#[derive(Clone, Copy, Default)]
struct Step {
    gbps: f64,
    hub_requests: u64,
    hub_bytes: u64,
    peak_rss_mib: u64,
    cache_pages_mib: u64,
    mount_cpu: f64,
    /// The open passed through / stayed on the page cache of a whole file.
    through: bool,
    kept: bool,
    /// The mount read the cache file ahead because it was out of the page cache.
    warmed: bool,
}

const ORDERS: [(&str, &str); 7] = [
    ("cold", "cold read (fresh mount, empty cache dir)"),
    ("b1", "b: first re-read at once (join still running)"),
    ("b2", "b: second re-read, after the join"),
    ("a", "a: first re-read after the join"),
    ("c", "c: second mount, same cache dir, page cache dropped"),
    ("d", "d: same mount after drop_caches"),
    ("d2", "d: the same again (the disk has served the file once)"),
];

fn hub_bytes(hub: &LocalHub) -> u64 {
    RouteClass::ALL.iter().map(|c| hub.stats(*c).bytes_out).sum()
}

/// Reads `file` once, measured.
fn step(hub: &LocalHub, m: &hubfs::process::session::Mounted, file: &Path, cache: &Path) -> Step {
    hub.reset_stats();
    // Resets the process's VmHWM to its current RSS (Linux 4.0+).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (opened, kept, warmed) = (
        m.passthrough.opened(),
        m.passthrough.kept_cached(),
        m.passthrough.warmed(),
    );
    let span = CpuSpan::begin();
    let (gbps, _) = seq_read(file);
    let cpu = span.end();
    Step {
        gbps,
        hub_requests: requests(hub),
        hub_bytes: hub_bytes(hub),
        peak_rss_mib: peak_rss_mib(),
        cache_pages_mib: page_cache_bytes(&cache.join("blocks")) >> 20,
        mount_cpu: cpu.mount,
        through: m.passthrough.opened() > opened,
        kept: m.passthrough.kept_cached() > kept,
        warmed: m.passthrough.warmed() > warmed,
    }
}

/// Waits for the join (passthrough on) or for every block to be on disk (off).
fn settle(cache: &Path, size: u64, joins: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let blocks = cache.join("blocks");
    while Instant::now() < deadline {
        let done = if joins {
            find_whole(&blocks).is_some()
        } else {
            dir_bytes(&blocks) >= size
        };
        if done {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!joins, "the disk tier never joined the file into one");
}

/// Runs the part, prints its table, and adds its summary to the bench's `rows`.
pub(super) fn run(b: &Bench, hub: &LocalHub, size: u64, runs: usize, rows: &mut Vec<String>) {
    let opts = |cache: &Path, passthrough: bool| VfsOptions {
        memory_cache_bytes: 64 << 20,
        cache_dir: Some(cache.to_path_buf()),
        disk_cache_bytes: 10 << 30,
        passthrough,
        ..VfsOptions::default()
    };
    // Steps by mode (auto, off), then by order.
    let mut all: [Vec<Vec<Step>>; 2] = [vec![Vec::new(); ORDERS.len()], vec![Vec::new(); ORDERS.len()]];
    let mut direct = Vec::new();
    let mut joined_early = 0;
    for _ in 0..runs {
        for (mode, on) in [(0, true), (1, false)] {
            let steps = &mut all[mode];
            // b: re-read at once, then after the join.
            let cache = tempfile::tempdir_in("/var/tmp").unwrap();
            let d = tempfile::tempdir().unwrap();
            let m = b.mount_with(d.path(), opts(cache.path(), on));
            let file = d.path().join("weights.bin");
            std::fs::metadata(&file).unwrap();
            drop_caches();
            steps[0].push(step(hub, &m, &file, cache.path()));
            joined_early += usize::from(on && find_whole(&cache.path().join("blocks")).is_some());
            steps[1].push(step(hub, &m, &file, cache.path()));
            settle(cache.path(), size, on);
            steps[2].push(step(hub, &m, &file, cache.path()));
            m.unmount().unwrap();
            // a: the first re-read after the join; d: then after drop_caches.
            let cache = tempfile::tempdir_in("/var/tmp").unwrap();
            let d = tempfile::tempdir().unwrap();
            let m = b.mount_with(d.path(), opts(cache.path(), on));
            let file = d.path().join("weights.bin");
            std::fs::metadata(&file).unwrap();
            drop_caches();
            steps[0].push(step(hub, &m, &file, cache.path()));
            settle(cache.path(), size, on);
            steps[3].push(step(hub, &m, &file, cache.path()));
            drop_caches();
            steps[5].push(step(hub, &m, &file, cache.path()));
            drop_caches();
            steps[6].push(step(hub, &m, &file, cache.path()));
            m.unmount().unwrap();
            // c: a second mount on the same cache dir.
            let d = tempfile::tempdir().unwrap();
            let m = b.mount_with(d.path(), opts(cache.path(), on));
            let file = d.path().join("weights.bin");
            std::fs::metadata(&file).unwrap();
            drop_caches();
            steps[4].push(step(hub, &m, &file, cache.path()));
            m.unmount().unwrap();
            if on {
                let whole = find_whole(&cache.path().join("blocks")).expect("the whole file");
                drop_caches();
                direct.push(seq_read(&whole).0);
            }
        }
    }
    // What each order must do with passthrough on: stay on the page cache the mount filled (a, b),
    // pass through where that cache is cold (c, d).
    let auto = &all[0];
    assert!(
        auto[3].iter().all(|s| s.kept && !s.through),
        "a: kept on the page cache"
    );
    assert!(
        auto[2].iter().all(|s| s.kept && !s.through),
        "b: kept on the page cache"
    );
    assert!(auto[4].iter().all(|s| s.through), "c: passed through");
    assert!(auto[5].iter().chain(&auto[6]).all(|s| s.through), "d: passed through");
    assert!(
        all[1].iter().flatten().all(|s| !s.through && !s.kept),
        "off: plain opens"
    );

    let gib = size as f64 / (1u64 << 30) as f64;
    for (i, (key, _)) in ORDERS.iter().enumerate() {
        let g = |m: usize| all[m][i].iter().map(|s| s.gbps).collect::<Vec<_>>();
        println!("passthrough {key}: auto {:.2?} GB/s, off {:.2?} GB/s", g(0), g(1));
    }
    println!(
        "the cache file read directly {direct:.2?} GB/s; b's first re-read found the join done in {joined_early} of {runs} runs"
    );
    println!(
        "| passthrough, order of events | auto GB/s | off GB/s | auto / off | Hub requests, MiB (auto; off) | peak RSS MiB (auto; off) | cache files in page cache MiB (auto; off) | mount CPU-s/GiB (auto; off) | auto's opens |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut worst = f64::INFINITY;
    for (i, (_, label)) in ORDERS.iter().enumerate() {
        let med = |m: usize, f: &dyn Fn(&Step) -> f64| median(all[m][i].iter().map(f).collect());
        let max = |m: usize, f: &dyn Fn(&Step) -> u64| all[m][i].iter().map(f).max().unwrap_or(0);
        let (on, off) = (med(0, &|s| s.gbps), med(1, &|s| s.gbps));
        let opens = match (
            all[0][i].iter().filter(|s| s.through).count(),
            all[0][i].iter().filter(|s| s.kept).count(),
        ) {
            (0, 0) => "plain (not whole yet)".to_string(),
            (t, 0) => match all[0][i].iter().filter(|s| s.warmed).count() {
                0 => format!("passthrough ({t})"),
                w => format!("passthrough ({t}), cache file read ahead ({w})"),
            },
            (0, k) => format!("kept on the page cache ({k})"),
            (t, k) => format!("passthrough {t}, kept {k}"),
        };
        if i > 0 {
            worst = worst.min(on / off);
        }
        println!(
            "| {label} | {on:.2} | {off:.2} | {:.2} | {}, {}; {}, {} | {}; {} | {}; {} | {:.3}; {:.3} | {opens} |",
            on / off,
            max(0, &|s| s.hub_requests),
            max(0, &|s| s.hub_bytes) >> 20,
            max(1, &|s| s.hub_requests),
            max(1, &|s| s.hub_bytes) >> 20,
            max(0, &|s| s.peak_rss_mib),
            max(1, &|s| s.peak_rss_mib),
            max(0, &|s| s.cache_pages_mib),
            max(1, &|s| s.cache_pages_mib),
            med(0, &|s| s.mount_cpu) / gib,
            med(1, &|s| s.mount_cpu) / gib,
        );
    }
    let c = median(all[0][4].iter().map(|s| s.gbps).collect());
    let dr = median(direct);
    rows.push(format!(
        "| passthrough auto against off, every re-read order (a, b, c, d; table above) | worst {worst:.2}× | target ≥ 1 (noise aside) |"
    ));
    rows.push(format!(
        "| fully cached file, second mount, passthrough | {c:.2} GB/s | {:.0}% of reading the cache file directly ({dr:.2} GB/s; target ≥ 80%) |",
        100.0 * c / dr
    ));
}
