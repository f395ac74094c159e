//! Benchmarks of the content side: the read planner (how a read is classified and which blocks it
//! fetches or prefetches), the block buffer pool, and the chunk store's memory and disk tiers with
//! real 8 MiB blocks.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use hubfs::chunk_store::buffer_pool::BufferPool;
use hubfs::chunk_store::{BLOCK_SIZE, ChunkStore, DiskTier};
use hubfs::vfs::error::VfsError;
use hubfs::vfs::read::{Access, MAX_WINDOW_BLOCKS, ReadState, classify, prefetch_blocks};

use crate::Ids;

const BLOCK: usize = BLOCK_SIZE as usize;

/// Size of the file the planner plans reads of.
const PLANNED_FILE: u64 = 4 << 30;

/// What `Reader::read` decides before any I/O: the blocks the read covers, and for a sequential
/// read the blocks to prefetch after them (a seek or a sparse read gets `None`: exactly its range
/// is fetched).
fn plan(st: &mut ReadState, size: u64, offset: u64, len: u64) -> (u64, u64, Option<std::ops::Range<u64>>) {
    let end = (offset + len).min(size);
    let window = classify(st, offset, end, hubfs::vfs::READAHEAD_MODEL);
    let (first, last) = (offset / BLOCK_SIZE, (end - 1) / BLOCK_SIZE);
    let window = match window {
        Access::Sequential(w) => Some(w),
        Access::Seek | Access::Sparse => None,
    };
    (first, last, window.map(|w| prefetch_blocks(size, last + 1, w)))
}

/// A small deterministic generator for random offsets.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

pub fn bench_planner(c: &mut Criterion, ids: &mut Ids) {
    let read = 128 << 10;
    // Checks first: a stream settles at the full window, random 4 KiB reads are seeks.
    let mut st = ReadState::default();
    let mut last = None;
    for i in 0..64 {
        last = plan(&mut st, PLANNED_FILE, i * read, read).2;
    }
    assert_eq!(last.map(|r| r.end - r.start), Some(MAX_WINDOW_BLOCKS));
    let (mut st, mut x, mut seeks) = (ReadState::default(), 0x9E37_79B9_7F4A_7C15u64, 0);
    for _ in 0..1_000 {
        let off = xorshift(&mut x) % (PLANNED_FILE - 4096);
        seeks += plan(&mut st, PLANNED_FILE, off, 4096).2.is_none() as u32;
    }
    assert!(seeks > 990, "random reads must plan as seeks ({seeks}/1000)");

    let mut g = c.benchmark_group("read_planner");
    g.bench_function("sequential_128k", |b| {
        let (mut st, mut off) = (ReadState::default(), 0u64);
        b.iter(|| {
            off = (off + read) % PLANNED_FILE;
            black_box(plan(&mut st, PLANNED_FILE, off, read))
        })
    });
    g.bench_function("random_4k", |b| {
        let (mut st, mut x) = (ReadState::default(), 0x9E37_79B9_7F4A_7C15u64);
        b.iter(|| {
            let off = xorshift(&mut x) % (PLANNED_FILE - 4096);
            black_box(plan(&mut st, PLANNED_FILE, off, 4096))
        })
    });
    g.finish();
    ids.add(
        "read_planner/sequential_128k",
        "classify + block range + prefetch range, 128 KiB stream",
    );
    ids.add("read_planner/random_4k", "the same for random 4 KiB reads (seeks)");
}

pub fn bench_pool(c: &mut Criterion, ids: &mut Ids) {
    let pool = BufferPool::new(BLOCK, 4);
    pool.prefill(4);
    let data = vec![0x5Au8; BLOCK];
    {
        let mut b = pool.acquire(BLOCK);
        b.extend_from_slice(&data);
        assert_eq!(b.freeze().len(), BLOCK);
        let s = pool.stats();
        assert!(s.free == 4 && s.reused >= 1, "the buffer came back: {s:?}");
    }

    let mut g = c.benchmark_group("buffer_pool");
    g.bench_function("acquire_release", |b| b.iter(|| drop(black_box(pool.acquire(BLOCK)))));
    g.bench_function("acquire_freeze_drop", |b| {
        b.iter(|| {
            let mut buf = pool.acquire(BLOCK);
            buf.extend_from_slice(&data[..4096]);
            drop(black_box(buf.freeze()))
        })
    });
    g.throughput(Throughput::Bytes(BLOCK as u64));
    g.bench_function("pool_fill_8mib", |b| {
        b.iter(|| {
            let mut buf = pool.acquire(BLOCK);
            buf.extend_from_slice(&data);
            drop(black_box(buf.freeze()))
        })
    });
    g.bench_function("fresh_vec_fill_8mib", |b| {
        b.iter(|| {
            let mut buf: Vec<u8> = Vec::with_capacity(BLOCK);
            buf.extend_from_slice(&data);
            drop(black_box(Bytes::from(buf)))
        })
    });
    g.bench_function("fresh_mmap_fill_8mib", |b| b.iter(|| fresh_mapping_fill(&data)));
    g.finish();
    let s = pool.stats();
    assert!(s.created <= 5, "the pool kept reusing its buffers: {s:?}");
    ids.add(
        "buffer_pool/acquire_release",
        "acquire an 8 MiB buffer and give it back",
    );
    ids.add(
        "buffer_pool/acquire_freeze_drop",
        "acquire, 4 KiB in, freeze to Bytes, drop (returns)",
    );
    ids.add(
        "buffer_pool/pool_fill_8mib",
        "pooled buffer filled with 8 MiB (prefaulted pages)",
    );
    ids.add(
        "buffer_pool/fresh_vec_fill_8mib",
        "fresh Vec filled with 8 MiB (glibc reuses the freed heap here: no page faults)",
    );
    ids.add(
        "buffer_pool/fresh_mmap_fill_8mib",
        "fresh 8 MiB mapping filled, then unmapped: every page faults (what the pool avoids)",
    );
}

/// What a fresh 8 MiB allocation costs when it is a new mapping (glibc's large allocations are, until
/// its dynamic threshold moves up, and again after `malloc_trim`): map, fill (every page faults),
/// unmap.
fn fresh_mapping_fill(data: &[u8]) {
    // SAFETY: an anonymous private mapping of `data.len()` bytes, written only within its length
    // and unmapped before returning; nothing else refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            data.len(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(data.as_ptr(), p.cast::<u8>(), data.len());
        black_box(p);
        assert_eq!(libc::munmap(p, data.len()), 0);
    }
}

/// A disk-tier key (`kind:hex`, as content ids are).
fn disk_key(i: u64) -> (Arc<str>, u64) {
    (Arc::from(format!("xet:{:064x}", i / 4)), i % 4)
}

pub fn bench_chunk_store(c: &mut Criterion, ids: &mut Ids) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let block = Bytes::from(hubfs::local_hub::seed::demo_bytes(BLOCK, 7));
    let len = BLOCK_SIZE;

    // Memory tier: 16 blocks held of a 256 MiB budget; puts of new blocks evict old ones.
    let mem = ChunkStore::new(256 << 20);
    let key: Arc<str> = Arc::from("xet:micro-memory");
    rt.block_on(async {
        for idx in 0..16 {
            let b = block.clone();
            mem.get_or_fetch(&key, idx, len, async move { Ok::<_, VfsError>(b) })
                .await
                .unwrap();
        }
        for idx in 0..16 {
            assert_eq!(mem.get(&key, idx, len).await.unwrap(), block, "block {idx}");
        }
    });

    // Disk tier: 8 blocks written once for the reads; puts go to new keys in a 256 MiB budget.
    let dir = tempfile::Builder::new()
        .prefix("hubfs-micro-disk")
        .tempdir_in("/var/tmp")
        .unwrap();
    let disk = DiskTier::open(dir.path(), 256 << 20).unwrap();
    let pool = BufferPool::new(BLOCK, 4);
    // The tier's startup scan (a background thread) deletes every `.tmp` file it finds, including
    // one this process is writing at that moment: let it finish on the empty dir first.
    std::thread::sleep(std::time::Duration::from_millis(200));
    for i in 0..8 {
        disk.write(disk_key(i), &block);
        assert_eq!(disk.read(&disk_key(i), len, &pool).unwrap(), block, "disk block {i}");
    }
    assert!(
        disk.read(&disk_key(0), len - 1, &pool).is_none(),
        "a length mismatch is a miss"
    );
    disk.write(disk_key(0), &block);

    let mut g = c.benchmark_group("chunk_store");
    // A disk put takes milliseconds: fewer samples keep the group within its measurement time.
    g.sample_size(30);
    g.bench_function("mem_get_hit", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters {
                    black_box(mem.get(&key, i % 16, len).await.unwrap());
                }
                t.elapsed()
            })
        })
    });
    // New keys each iteration, across criterion's calls of the routine (a repeated key is a hit).
    let mut next = 1_000u64;
    g.bench_function("mem_put", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    next += 1;
                    let blk = block.clone();
                    black_box(
                        mem.get_or_fetch(&key, next, len, async move { Ok::<_, VfsError>(blk) })
                            .await
                            .unwrap(),
                    );
                }
                t.elapsed()
            })
        })
    });
    g.throughput(Throughput::Bytes(BLOCK_SIZE));
    g.bench_function("disk_get_hit", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % 8;
            black_box(disk.read(&disk_key(i), len, &pool).unwrap())
        })
    });
    // A key already on disk is skipped by `write`: every iteration writes a new one.
    let mut next = 1_000u64;
    g.bench_function("disk_put", |b| {
        b.iter(|| {
            next += 1;
            disk.write(disk_key(next), &block)
        })
    });
    g.finish();
    assert!(disk.weighted_size() <= 256 << 20, "the disk tier stays in its budget");
    ids.add(
        "chunk_store/mem_get_hit",
        "ChunkStore::get of an 8 MiB block held in memory",
    );
    ids.add(
        "chunk_store/mem_put",
        "ChunkStore::get_or_fetch of a new block (ready fetch): insert + eviction",
    );
    ids.add(
        "chunk_store/disk_get_hit",
        "DiskTier::read of an 8 MiB block into a pooled buffer (page cache warm)",
    );
    ids.add(
        "chunk_store/disk_put",
        "DiskTier::write of a new 8 MiB block (temp file + rename)",
    );
}
