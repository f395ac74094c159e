//! Criterion micro-benchmarks of the core's hot paths, in process (no kernel): inode numbering,
//! VirtualFs lookups and getattr served from its caches, readdir from a snapshot vs rebuilt per
//! page, the chunk store's two tiers, the block buffer pool, the read planner and the metadata
//! store of writable mounts.
//!
//! Metadata benchmarks run against a real local Hub (in process, over HTTP) and real `VirtualFs`
//! instances; every benchmark checks its result once before it is timed, and the cached paths
//! check that the Hub saw no request while they ran.
//!
//! `cargo bench --bench micro` measures and prints the medians as Markdown;
//! `cargo test --bench micro` runs every benchmark once as a smoke test.

#[path = "micro/fixture.rs"]
mod fixture;
#[path = "micro/metadata.rs"]
mod metadata;
#[path = "micro/readdir.rs"]
mod readdir;
#[path = "micro/report.rs"]
mod report;
#[path = "micro/store.rs"]
mod store;

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use hubfs::vfs::inode::InodeTable;
use hubfs::vfs::{DirEntry, Kind};

use fixture::{FILE_CONTENT, Fixture, LOOKUP_DIR_SIZE, SIZES, dir_name, file_name};

/// Benchmark ids (criterion's `group/function[/parameter]`) with what one iteration does, for the
/// report; ratios pair a snapshot id with its rebuilt-per-page counterpart.
#[derive(Default)]
pub struct Ids {
    pub rows: Vec<(String, String)>,
    pub ratios: Vec<(String, String, String)>,
}

impl Ids {
    pub fn add(&mut self, id: impl Into<String>, note: impl Into<String>) {
        self.rows.push((id.into(), note.into()));
    }
}

/// Paths in the populated inode table (a large mount's worth of kernel references).
const TABLE_PATHS: usize = 100_000;

fn bench_inode(c: &mut Criterion, ids: &mut Ids) {
    let table = InodeTable::new();
    let paths: Vec<String> = (0..TABLE_PATHS)
        .map(|i| format!("dir{:03}/file-{i:06}.bin", i / 1_000))
        .collect();
    let inos: Vec<u64> = paths.iter().map(|p| table.ino_for(p, 1)).collect();
    let fresh: Vec<String> = (0..4_096).map(|i| format!("other/new-{i:06}.bin")).collect();
    assert_eq!(table.len(), TABLE_PATHS + 1, "root and every path counted");
    assert_eq!(table.path(inos[42]).as_deref(), Some(paths[42].as_str()));
    assert_eq!(table.ino_for(&paths[42], 0), inos[42], "numbers are stable");
    assert_eq!(table.len(), TABLE_PATHS + 1, "a zero-count lookup registers nothing");

    let mut g = c.benchmark_group("inode");
    g.bench_function("ino_for_known", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 7919) % TABLE_PATHS;
            black_box(table.ino_for(&paths[i], 0))
        })
    });
    g.bench_function("ino_for_unregistered", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % fresh.len();
            black_box(table.ino_for(&fresh[i], 0))
        })
    });
    g.bench_function("path", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 7919) % TABLE_PATHS;
            black_box(table.path(inos[i]))
        })
    });
    g.finish();
    let n = format!("{TABLE_PATHS} paths counted");
    ids.add(
        "inode/ino_for_known",
        format!("InodeTable::ino_for of a known path, {n}"),
    );
    ids.add(
        "inode/ino_for_unregistered",
        format!("number for a path not in the table (what opendir does per entry), {n}"),
    );
    ids.add("inode/path", format!("InodeTable::path of a known inode, {n}"));
}

/// Lookups, getattr and negative lookups served from VirtualFs's caches: `listed` has the
/// directory's listing cached (it was opened), `points` only knows the paths it looked up before
/// (one paths-info request each, then the point cache).
fn bench_vfs(fx: &Fixture, c: &mut Criterion, ids: &mut Ids) {
    let n = LOOKUP_DIR_SIZE;
    let names: Vec<String> = (0..n).map(|i| file_name(i, n)).collect();
    let missing: Vec<String> = (0..n).map(|i| format!("absent-{i:05}.parquet")).collect();
    let rt = &fx.rt;

    let listed = fx.vfs();
    let dir = fx.dir_ino(&listed, n);
    let fh = rt.block_on(listed.opendir(dir)).unwrap();
    listed.releasedir(fh);
    let listed_inos: Vec<u64> = names
        .iter()
        .map(|name| {
            let a = rt.block_on(listed.lookup(dir, name)).unwrap();
            assert_eq!((a.kind, a.size), (Kind::File, FILE_CONTENT.len() as u64), "{name}");
            a.ino
        })
        .collect();

    // The point cache is filled by one request per path: keep it to a sample of the names.
    let sample = 256;
    let points = fx.vfs();
    let pdir = fx.dir_ino(&points, n);
    let point_inos: Vec<u64> = names[..sample]
        .iter()
        .map(|name| rt.block_on(points.lookup(pdir, name)).unwrap().ino)
        .collect();
    assert_eq!(
        point_inos,
        listed_inos[..sample],
        "one path, one number in every VirtualFs"
    );
    for name in &missing[..sample] {
        let e = rt.block_on(points.lookup(pdir, name)).unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT);
    }

    // Everything below must be served from the caches: not one Hub request.
    let before = fx.hub_requests();
    rt.block_on(async {
        for (i, name) in names.iter().enumerate() {
            assert_eq!(listed.getattr(listed_inos[i]).await.unwrap().ino, listed_inos[i]);
            assert_eq!(listed.lookup(dir, &missing[i]).await.unwrap_err().errno(), libc::ENOENT);
            if i < sample {
                let a = points.getattr(point_inos[i]).await.unwrap();
                assert_eq!((a.kind, a.size), (Kind::File, FILE_CONTENT.len() as u64));
                assert_eq!(points.lookup(pdir, name).await.unwrap().ino, point_inos[i]);
                assert_eq!(
                    points.lookup(pdir, &missing[i]).await.unwrap_err().errno(),
                    libc::ENOENT
                );
            }
        }
    });
    assert_eq!(fx.hub_requests(), before, "cached lookups must not reach the Hub");

    let mut g = c.benchmark_group("vfs");
    g.bench_function("lookup_listed", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters as usize {
                    black_box(listed.lookup(dir, &names[i % n]).await.unwrap());
                }
                t.elapsed()
            })
        })
    });
    g.bench_function("lookup_points", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters as usize {
                    black_box(points.lookup(pdir, &names[i % sample]).await.unwrap());
                }
                t.elapsed()
            })
        })
    });
    g.bench_function("getattr_listed", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters as usize {
                    black_box(listed.getattr(listed_inos[i % n]).await.unwrap());
                }
                t.elapsed()
            })
        })
    });
    g.bench_function("getattr_points", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters as usize {
                    black_box(points.getattr(point_inos[i % sample]).await.unwrap());
                }
                t.elapsed()
            })
        })
    });
    g.bench_function("negative_listed", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters as usize {
                    black_box(listed.lookup(dir, &missing[i % n]).await.unwrap_err());
                }
                t.elapsed()
            })
        })
    });
    g.bench_function("negative_points", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters as usize {
                    black_box(points.lookup(pdir, &missing[i % sample]).await.unwrap_err());
                }
                t.elapsed()
            })
        })
    });
    g.finish();
    assert_eq!(fx.hub_requests(), before, "cached lookups must not reach the Hub");

    let d = format!("a {n}-entry directory");
    ids.add(
        "vfs/lookup_listed",
        format!("VirtualFs::lookup of a name in {d}, listing cached"),
    );
    ids.add(
        "vfs/lookup_points",
        format!("VirtualFs::lookup of a name in {d}, from the point cache"),
    );
    ids.add(
        "vfs/getattr_listed",
        "VirtualFs::getattr, attributes from the cached listing",
    );
    ids.add(
        "vfs/getattr_points",
        "VirtualFs::getattr, attributes from the point cache",
    );
    ids.add(
        "vfs/negative_listed",
        "lookup of a missing name, answered by the cached listing (ENOENT)",
    );
    ids.add(
        "vfs/negative_points",
        "lookup of a missing name the second time, point cache (ENOENT)",
    );
}

/// Names a listing has, in order: `.`, `..`, then the files sorted.
fn entry_names(entries: &[DirEntry]) -> Vec<String> {
    entries.iter().map(|e| e.name.clone()).collect()
}

fn bench_readdir(fx: &Fixture, c: &mut Criterion, ids: &mut Ids) {
    let rt = &fx.rt;
    let vfs = fx.vfs();
    let mut buf = Vec::with_capacity(readdir::REPLY_BYTES);
    let mut cases = Vec::new();
    for n in SIZES {
        let dir = fx.dir_ino(&vfs, n);
        let fh = rt.block_on(vfs.opendir(dir)).unwrap();
        let mut want = vec![".".to_string(), "..".to_string()];
        want.extend((0..n).map(|i| file_name(i, n)));
        assert_eq!(entry_names(&vfs.dir_entries(fh).unwrap()), want, "{}", dir_name(n));
        // Both ways serve byte-identical replies, in the same number of requests.
        let (mut snap, mut rebuilt) = (Vec::new(), Vec::new());
        let pages = rt.block_on(readdir::list_snapshot(&vfs, dir, &mut buf, |p| {
            snap.extend_from_slice(p)
        }));
        let pages2 = rt.block_on(readdir::list_rebuilt(&vfs, dir, &mut buf, |p| {
            rebuilt.extend_from_slice(p)
        }));
        assert_eq!(pages, pages2);
        assert!(
            snap == rebuilt && !snap.is_empty(),
            "the two ways disagree for {n} entries"
        );
        // A page from the middle of the listing: the offset the kernel asks for there.
        let mut offsets = vec![0];
        while let Some(&o) = offsets.last() {
            let next = readdir::page_from_snapshot(&vfs, fh, o, &mut buf);
            if buf.is_empty() {
                break;
            }
            offsets.push(next);
        }
        let mid = offsets[offsets.len() / 2];
        cases.push((n, dir, fh, mid, pages));
    }
    let before = fx.hub_requests();

    let mut g = c.benchmark_group("readdir_page");
    for &(n, dir, fh, mid, _) in &cases {
        g.bench_with_input(BenchmarkId::new("snapshot", n), &n, |b, _| {
            b.iter(|| black_box(readdir::page_from_snapshot(&vfs, fh, mid, &mut buf)))
        });
        g.bench_with_input(BenchmarkId::new("rebuilt", n), &n, |b, _| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        black_box(readdir::page_rebuilt(&vfs, dir, mid, &mut buf).await);
                    }
                    t.elapsed()
                })
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("readdir_listing");
    g.sampling_mode(SamplingMode::Flat).sample_size(10);
    for &(n, dir, _, _, _) in &cases {
        g.bench_with_input(BenchmarkId::new("snapshot", n), &n, |b, _| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        black_box(
                            readdir::list_snapshot(&vfs, dir, &mut buf, |p| {
                                black_box(p.len());
                            })
                            .await,
                        );
                    }
                    t.elapsed()
                })
            })
        });
        g.bench_with_input(BenchmarkId::new("rebuilt", n), &n, |b, _| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        black_box(
                            readdir::list_rebuilt(&vfs, dir, &mut buf, |p| {
                                black_box(p.len());
                            })
                            .await,
                        );
                    }
                    t.elapsed()
                })
            })
        });
    }
    g.finish();
    assert_eq!(
        fx.hub_requests(),
        before,
        "readdir from cached listings must not reach the Hub"
    );
    for (_, _, fh, _, _) in &cases {
        vfs.releasedir(*fh);
    }

    for &(n, _, _, mid, pages) in &cases {
        let page = format!("one 4 KiB READDIR reply at offset {mid} of {n} entries");
        ids.add(
            format!("readdir_page/snapshot/{n}"),
            format!("{page}, from the opendir snapshot"),
        );
        ids.add(
            format!("readdir_page/rebuilt/{n}"),
            format!("{page}, listing rebuilt for it"),
        );
        let all = format!("opendir, {pages} READDIR requests, releasedir: all {n} entries");
        ids.add(format!("readdir_listing/snapshot/{n}"), format!("{all}, one snapshot"));
        ids.add(
            format!("readdir_listing/rebuilt/{n}"),
            format!("{all}, rebuilt per request"),
        );
        ids.ratios.push((
            format!("one page, {n} entries"),
            format!("readdir_page/snapshot/{n}"),
            format!("readdir_page/rebuilt/{n}"),
        ));
        ids.ratios.push((
            format!("whole listing, {n} entries ({pages} requests)"),
            format!("readdir_listing/snapshot/{n}"),
            format!("readdir_listing/rebuilt/{n}"),
        ));
    }
}

fn main() {
    let started = SystemTime::now();
    let args: Vec<String> = std::env::args().collect();
    let measuring = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test" || a == "--list");
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut ids = Ids::default();

    bench_inode(&mut c, &mut ids);
    store::bench_planner(&mut c, &mut ids);
    store::bench_pool(&mut c, &mut ids);
    store::bench_chunk_store(&mut c, &mut ids);
    metadata::bench_metadata(&mut c, &mut ids);
    {
        let fx = Fixture::start();
        bench_vfs(&fx, &mut c, &mut ids);
        bench_readdir(&fx, &mut c, &mut ids);
    }

    c.final_summary();
    if measuring {
        report::print(&ids.rows, &ids.ratios, started);
    }
}
