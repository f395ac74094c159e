//! Sparse reads through the built binary, as a person runs it (`mount --daemon` of a dataset): small
//! reads spread over a file cost the Hub what they read, not the 8 MiB blocks around them, and a
//! later `cat` of the whole file fetches only what those reads did not (the Hub's bytes counted by
//! the local Hub). The figures with DuckDB and pyarrow are in `ci/bench-parquet.sh`.

mod common;

use std::os::unix::fs::FileExt;

use common::isolated::mounted_xet_dataset as mounted;
use hubfs::local_hub::{LocalHub, RouteClass};

const SIZE: usize = 24 << 20;
/// Reads of 512 KiB every 2 MiB: within the 4 MiB a reader may skip and still count as reading
/// on, but more skipped than read (a parquet reader's column chunks).
const READ: usize = 512 << 10;
const STRIDE: usize = 2 << 20;

#[test]
fn strided_reads_fetch_their_bytes_and_a_later_cat_only_the_rest() {
    let data = common::bytes(SIZE, 44);
    let Some(((_rt, hub, _cli), dir, _mounted)) = mounted("sparse", &[("table.parquet", &data)], &[]) else {
        return;
    };
    let path = dir.join("table.parquet");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), SIZE as u64);
    hub.reset_stats();
    let served = || -> u64 { RouteClass::ALL.iter().map(|c| hub.stats(*c).bytes_out).sum() };

    let f = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; READ];
    let mut reads = 0;
    let mut at = 4096;
    while at + READ < SIZE - (1 << 20) {
        f.read_exact_at(&mut buf, at as u64).unwrap();
        assert!(buf == data[at..at + READ], "bytes at {at}");
        reads += 1;
        at += STRIDE;
    }
    let wanted = (reads * READ) as u64;
    let sparse = served();
    // Whole pages around each read, and nothing else: before, each read within 4 MiB of the last
    // loaded the 8 MiB blocks around it and prefetched the next ones (the whole file).
    assert!(
        sparse <= wanted + reads as u64 * 8192,
        "{reads} reads of {READ} bytes cost the Hub {sparse} bytes"
    );

    // Now the whole file in order: the blocks load only the gaps around the parts already
    // fetched. A gap of a Xet file starts and ends inside Xet chunks (64 KiB on average, at most
    // 128 KiB) that the parts hold some of, and those chunks come again: at most 256 KiB a part.
    let all = std::fs::read(&path).unwrap();
    assert!(all == data, "the whole file equals the Hub's bytes");
    let total = served();
    let most = SIZE as u64 + reads as u64 * (256 << 10);
    assert!(
        total <= most && most < SIZE as u64 + wanted,
        "the Hub served {total} bytes for a {SIZE}-byte file after {sparse} of sparse reads: the \
         bytes those reads fetched were fetched again"
    );
}

/// Reads `path` (holding `data`) as a parquet reader reads column chunks 1.5 MiB apart: DuckDB's
/// reads of one chunk (from the bench's trace), 4 KiB, then 16 KiB, then 8 KiB. The bytes read,
/// the bytes the Hub served for them, and the file's pages in the page cache after them (while
/// it is still open: an open may drop them).
fn column_chunks(hub: &LocalHub, path: &std::path::Path, data: &[u8]) -> (u64, u64, usize) {
    let pieces = [(0usize, 4usize << 10), (4 << 10, 16 << 10), (20 << 10, 8 << 10)];
    let _ = std::fs::metadata(path).unwrap();
    hub.reset_stats();
    let f = std::fs::File::open(path).unwrap();
    let (mut read, mut at) = (0u64, 4usize);
    while at + (28 << 10) < SIZE - (2 << 20) {
        for (off, len) in pieces {
            let mut b = vec![0u8; len];
            f.read_exact_at(&mut b, (at + off) as u64).unwrap();
            assert!(b == data[at + off..at + off + len], "bytes at {}", at + off);
            read += len as u64;
        }
        at += 1536 << 10;
    }
    let served = RouteClass::ALL.iter().map(|c| hub.stats(*c).bytes_out).sum();
    (read, served, page_cached(&f))
}

/// With `--direct-io`, a file of a folder in which another file was just read through twice (the
/// shards of a full scan) is opened through the page cache, so the kernel reads ahead of it; a
/// file in another folder is still read directly.
#[test]
fn a_folder_being_scanned_is_read_through_the_page_cache() {
    let (a, b, c) = (
        common::bytes(SIZE, 46),
        common::bytes(SIZE, 47),
        common::bytes(SIZE, 48),
    );
    let files: [(&str, &[u8]); 3] = [("data/a.parquet", &a), ("data/b.parquet", &b), ("other/c.parquet", &c)];
    let Some(((_rt, hub, _cli), dir, _mounted)) = mounted("scan", &files, &["--direct-io", "*.parquet"]) else {
        return;
    };
    for _ in 0..2 {
        assert!(std::fs::read(dir.join("data/a.parquet")).unwrap() == a);
    }
    let (read, scanned, cached_b) = column_chunks(&hub, &dir.join("data/b.parquet"), &b);
    let (_, direct, cached_c) = column_chunks(&hub, &dir.join("other/c.parquet"), &c);
    eprintln!(
        "{read} bytes read: the Hub served {scanned} in the scanned folder ({cached_b} pages in the page \
         cache), {direct} in the other ({cached_c} pages)"
    );
    assert!(
        direct <= 2 * read,
        "another folder's file is read directly: {direct} bytes"
    );
    assert_eq!(cached_c, 0, "direct reads leave nothing in the page cache");
    assert!(
        cached_b * 4096 >= read as usize,
        "the scanned folder's file was read through the page cache: {cached_b} pages"
    );
    assert!(scanned > 2 * direct, "and loaded in blocks, as a scan: {scanned} bytes");
}

/// Pages of open file `f` in the kernel's page cache (mincore of a mapping, which faults nothing
/// in).
fn page_cached(f: &std::fs::File) -> usize {
    let mut vec = vec![0u8; SIZE.div_ceil(4096)];
    // SAFETY: a shared read-only mapping of a file the caller holds open, only passed to mincore
    // (which reads no page) and unmapped before returning.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(f),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let rc = libc::mincore(p, SIZE, vec.as_mut_ptr());
        let err = std::io::Error::last_os_error();
        libc::munmap(p, SIZE);
        assert_eq!(rc, 0, "mincore: {err}");
    }
    vec.iter().filter(|v| *v & 1 == 1).count()
}

/// A parquet reader's column chunks, 1.5 MiB apart, each read as a page header, then its body in
/// two reads. Through the page cache the kernel reads ahead of each (its readahead
/// takes the two reads for a stream); parquet files are opened with direct I/O by default
/// (`--direct-io '*.parquet'`), and the Hub serves about what was read.
#[test]
fn direct_io_reads_cost_what_the_program_reads_and_the_file_still_maps() {
    let data = common::bytes(SIZE, 45);
    let files: [(&str, &[u8]); 2] = [("table.parquet", &data), ("table.bin", &data)];
    let Some(((_rt, hub, _cli), dir, _mounted)) = mounted("direct", &files, &[]) else {
        return;
    };
    let (read, direct, _) = column_chunks(&hub, &dir.join("table.parquet"), &data);
    let (_, cached, _) = column_chunks(&hub, &dir.join("table.bin"), &data);
    // Pages around each read, and what a continued read fetches ahead (as much as it has read).
    assert!(
        direct <= 2 * read,
        "direct I/O: {read} bytes read cost the Hub {direct} bytes"
    );
    assert!(
        cached > 2 * direct,
        "the page cache's readahead costs more ({cached} bytes) than direct I/O ({direct}): the \
         test no longer shows what --direct-io is for"
    );

    // mmap of a direct I/O file works (Polars and pyarrow's memory_map read parquet that way).
    let f = std::fs::File::open(dir.join("table.parquet")).unwrap();
    // SAFETY: a private read-only mapping of a file this test opened, read and unmapped below
    // while the file stays open; nothing else maps or resizes it.
    let mapped = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap of a direct I/O file: {}",
            std::io::Error::last_os_error()
        );
        let bytes = std::slice::from_raw_parts(p as *const u8, SIZE).to_vec();
        libc::munmap(p, SIZE);
        bytes
    };
    assert!(mapped == data, "a mapping of a direct I/O file reads the Hub's bytes");
}

/// A parquet file opened with direct I/O (the default) and read from its start, as `cp` reads it
/// (128 KiB at a time, with no kernel readahead to make the reads larger): its first read loads
/// the whole first block, as a stream's does. A parquet engine's first reads (the footer, then a
/// column chunk from offset 4) fetch only what they read.
#[test]
fn a_direct_io_file_read_from_its_start_is_fetched_as_a_stream() {
    let (a, b) = (common::bytes(SIZE, 49), common::bytes(SIZE, 50));
    let files: [(&str, &[u8]); 2] = [("copy/a.parquet", &a), ("query/b.parquet", &b)];
    let Some(((_rt, hub, _cli), dir, _mounted)) = mounted("stream", &files, &[]) else {
        return;
    };
    let served = || -> u64 { RouteClass::ALL.iter().map(|c| hub.stats(*c).bytes_out).sum() };
    let mut buf = vec![0u8; 128 << 10];

    let _ = std::fs::metadata(dir.join("copy/a.parquet")).unwrap();
    hub.reset_stats();
    let f = std::fs::File::open(dir.join("copy/a.parquet")).unwrap();
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf[..] == a[..128 << 10], "the first 128 KiB");
    let first = served();
    assert!(
        first >= 8 << 20,
        "a read from the start loads its 8 MiB block: {first} bytes"
    );
    let mut at = 128 << 10;
    while at < SIZE {
        let n = (SIZE - at).min(buf.len());
        f.read_exact_at(&mut buf[..n], at as u64).unwrap();
        assert!(buf[..n] == a[at..at + n], "bytes at {at}");
        at += n;
    }
    let total = served();
    assert!(
        total <= SIZE as u64 + (1 << 20),
        "read through, the file costs its size once: {total} bytes"
    );

    let _ = std::fs::metadata(dir.join("query/b.parquet")).unwrap();
    hub.reset_stats();
    let f = std::fs::File::open(dir.join("query/b.parquet")).unwrap();
    let mut footer = vec![0u8; 64 << 10];
    f.read_exact_at(&mut footer, (SIZE - (64 << 10)) as u64).unwrap();
    f.read_exact_at(&mut buf, 4).unwrap();
    assert!(buf[..] == b[4..4 + (128 << 10)], "the column chunk's bytes");
    let query = served();
    assert!(
        query <= 512 << 10,
        "a footer and a column chunk cost what they read, not a block: {query} bytes"
    );
}
