//! Tests of the read path's policy (`classify`) and of its reader.

use super::*;

/// A model mount's readahead.
const RA: u64 = 8 << 20;

#[test]
fn assemble_across_blocks() {
    let a = Bytes::from(vec![1u8; 10]);
    let b = Bytes::from(vec![2u8; 10]);
    let out = assemble(&[a.clone(), b], 100, 105, 113);
    assert_eq!(&out[..], &[1, 1, 1, 1, 1, 2, 2, 2]);
    let out = assemble(&[a], 100, 101, 103);
    assert_eq!(&out[..], &[1, 1]);
}

#[test]
fn sequential_reads_grow_the_window_and_a_seek_resets_it() {
    let mut st = ReadState::default();
    let mib = 1 << 20;
    // A reader from the start of the file prefetches at once.
    assert_eq!(classify(&mut st, 0, mib, RA), Access::Sequential(2));
    assert_eq!(classify(&mut st, mib, 2 * mib, RA), Access::Sequential(4));
    // Out of order but within the slack (kernel readahead): still sequential.
    assert_eq!(classify(&mut st, 3 * mib, 4 * mib, RA), Access::Sequential(8));
    assert_eq!(
        classify(&mut st, 2 * mib, 3 * mib, RA),
        Access::Sequential(MAX_WINDOW_BLOCKS)
    );
    assert_eq!(classify(&mut st, 100 * mib, 101 * mib, RA), Access::Seek, "a seek");
    // A run that starts elsewhere gets no prefetch past its blocks for its first readahead
    // window (what one page fault's read-around looks like), then grows again.
    for i in 101..108 {
        assert_eq!(
            classify(&mut st, i * mib, (i + 1) * mib, RA),
            Access::Sequential(0),
            "read at {i} MiB"
        );
    }
    assert_eq!(classify(&mut st, 108 * mib, 109 * mib, RA), Access::Sequential(2));
    assert_eq!(classify(&mut st, 109 * mib, 110 * mib, RA), Access::Sequential(4));
    // Prefetch stops at the last block of the file.
    assert_eq!(prefetch_blocks(3 * BLOCK_SIZE + 1, 1, 8), 1..4);
    assert_eq!(prefetch_blocks(BLOCK_SIZE, 1, 8), 1..1);
    assert_eq!(prefetch_blocks(BLOCK_SIZE * 4, 1, 0), 1..1);
}

#[test]
fn a_reader_holds_its_window_until_it_has_passed_it() {
    let store = ChunkStore::new(1 << 20);
    let key: Arc<str> = Arc::from("k");
    let mut st = ReadState::default();
    assert_eq!(st.hold(&store, &key, 0..4), vec![0, 1, 2, 3]);
    assert_eq!(st.hold(&store, &key, 2..6), vec![4, 5], "held once per reader");
    let gone = st.release_before(2);
    assert_eq!(gone.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(st.held.blocks.keys().copied().collect::<Vec<_>>(), vec![2, 3, 4, 5]);
    let gone = st.release_before(u64::MAX);
    assert_eq!(gone.len(), 4);
    assert!(st.held.blocks.is_empty(), "a seek lets go of everything");
}

#[test]
fn a_page_faults_read_around_prefetches_nothing_past_it() {
    // A fault at 200 MiB: the kernel reads 8 MiB around it in 1 MiB requests, in any order.
    let mib = 1 << 20;
    let mut st = ReadState::default();
    let _ = classify(&mut st, 0, mib, RA);
    for i in [197u64, 196, 199, 198, 200, 202, 201, 203] {
        let c = classify(&mut st, i * mib, (i + 1) * mib, RA);
        assert!(
            matches!(c, Access::Seek | Access::Sequential(0)),
            "read at {i} MiB: {c:?}"
        );
    }
    // The reader goes on past the window: now it is sequential for real.
    assert_eq!(classify(&mut st, 204 * mib, 205 * mib, RA), Access::Sequential(2));
}

#[test]
fn a_one_mib_readahead_loads_blocks_after_one_mib_and_prefetches_after_four() {
    // Dataset mounts: a fault reads around by 1 MiB (one request, a seek); a reader going on
    // from there loads the blocks it reads once its run has read 1 MiB, and prefetches past
    // them once it has read 4 MiB.
    let mib = 1 << 20;
    let mut st = ReadState::default();
    let _ = classify(&mut st, 0, mib, mib);
    assert_eq!(
        classify(&mut st, 50 * mib, 51 * mib, mib),
        Access::Seek,
        "past the 4 MiB slack"
    );
    for i in 51..53 {
        assert_eq!(
            classify(&mut st, i * mib, (i + 1) * mib, mib),
            Access::Sequential(0),
            "at {i} MiB"
        );
    }
    assert_eq!(classify(&mut st, 53 * mib, 54 * mib, mib), Access::Sequential(2));
}

#[test]
fn an_in_order_reader_is_one_until_a_read_arrives_behind_its_front() {
    let mut st = ReadState::default();
    assert!(st.held.out_of_order, "FUSE handles: the kernel's readahead reorders");
    st.expect_in_order();
    let mib = 1 << 20;
    for i in 0..8 {
        classify(&mut st, i * mib, (i + 1) * mib, 8 * mib);
    }
    assert!(!st.held.out_of_order, "in order so far");
    // The kernel's readahead: a later read first, then the one before it.
    classify(&mut st, 9 * mib, 10 * mib, 8 * mib);
    classify(&mut st, 8 * mib, 9 * mib, 8 * mib);
    assert!(st.held.out_of_order);
}

#[test]
fn a_direct_handle_loads_blocks_for_a_programs_read_of_a_mib() {
    let (kib, mib) = (1 << 10, 1 << 20);
    let mut st = ReadState::default();
    st.reads_direct();
    // Column chunks of 40 KiB, header then body, stay exact.
    let at = 10 * mib;
    assert_eq!(classify(&mut st, at, at + 4 * kib, mib), Access::Seek);
    assert_eq!(classify(&mut st, at + 4 * kib, at + 40 * kib, mib), Access::Sparse);
    // A 2 MiB column chunk arrives as two 1 MiB READs: blocks from the first.
    let at = 30 * mib;
    assert_eq!(classify(&mut st, at, at + mib, mib), Access::Sequential(0));
    assert_eq!(classify(&mut st, at + mib, at + 2 * mib, mib), Access::Sequential(0));
    // In a file being scanned, a large read elsewhere is the next row group: a window too.
    st.scanned = true;
    assert_eq!(classify(&mut st, 60 * mib, 61 * mib, mib), Access::Sequential(2));
    // Without direct I/O a READ of a MiB may be the kernel's readahead: exact, as before.
    let mut st = ReadState::default();
    assert_eq!(classify(&mut st, at, at + mib, mib), Access::Seek);
}

#[test]
fn a_direct_handle_read_through_from_its_start_is_sequential_at_once() {
    let (kib, mib) = (1 << 10, 1 << 20);
    // `cp` of a parquet shard: 128 KiB reads from offset 0, with no readahead to make them large.
    let mut st = ReadState::default();
    st.reads_direct();
    assert_eq!(classify(&mut st, 0, 128 * kib, mib), Access::Sequential(2));
    assert_eq!(classify(&mut st, 128 * kib, 256 * kib, mib), Access::Sequential(4));
    // A parquet engine reads the footer first, then a column chunk from offset 4: exact reads.
    let mut st = ReadState::default();
    st.reads_direct();
    let size = 48 * mib;
    assert_eq!(classify(&mut st, size - 64 * kib, size, mib), Access::Seek);
    assert_eq!(classify(&mut st, 4, 4 + 4 * kib, mib), Access::Seek);
    assert_eq!(classify(&mut st, 4 + 4 * kib, 4 + 132 * kib, mib), Access::Sparse);
    // So does a small first read at 0 (a program sniffing the file's magic number).
    let mut st = ReadState::default();
    st.reads_direct();
    assert_eq!(classify(&mut st, 0, 4 * kib, mib), Access::Sparse);
    assert_eq!(classify(&mut st, 4 * kib, 40 * kib, mib), Access::Sparse);
}

/// `pick_run`, then `classify`: what `Reader::read` does.
fn read_at(st: &mut ReadState, offset: u64, end: u64, readahead: u64) -> Access {
    st.pick_run(offset, end, readahead);
    classify(st, offset, end, readahead)
}

#[test]
fn two_streams_on_one_direct_handle_each_keep_their_window() {
    let mib = 1 << 20;
    let mut st = ReadState::default();
    st.reads_direct();
    // pyarrow's two pre-buffered ranges of one file, read 1 MiB at a time, in turn.
    let (a, b) = (0, 33 * mib);
    let mut last = (Access::Seek, Access::Seek);
    for i in 0..8 {
        last.0 = read_at(&mut st, a + i * mib, a + (i + 1) * mib, mib);
        last.1 = read_at(&mut st, b + i * mib, b + (i + 1) * mib, mib);
    }
    assert!(
        matches!(last, (Access::Sequential(x), Access::Sequential(y)) if x >= 2 && y >= 2),
        "both streams prefetch: {last:?}"
    );
    // One run alone starts over at every switch and never prefetches (a buffered handle, whose
    // reads the kernel's readahead already orders, keeps one run).
    let mut one = ReadState::default();
    one.reads_direct();
    for i in 0..8 {
        last.0 = classify(&mut one, a + i * mib, a + (i + 1) * mib, mib);
        last.1 = classify(&mut one, b + i * mib, b + (i + 1) * mib, mib);
    }
    assert_eq!(last, (Access::Sequential(0), Access::Sequential(0)));
    // A footer read in between parks nothing it would have to give back: the streams go on.
    assert_eq!(read_at(&mut st, 60 * mib, 60 * mib + 65536, mib), Access::Seek);
    assert!(matches!(read_at(&mut st, a + 8 * mib, a + 9 * mib, mib), Access::Sequential(x) if x >= 2));
    assert!(matches!(read_at(&mut st, b + 8 * mib, b + 9 * mib, mib), Access::Sequential(x) if x >= 2));
    // At most PARKED_RUNS runs wait besides the current one: the oldest goes.
    for k in 0..PARKED_RUNS as u64 + 1 {
        read_at(&mut st, (100 + 10 * k) * mib, (101 + 10 * k) * mib, mib);
    }
    assert_eq!(st.held.parked.len(), PARKED_RUNS);
    assert!(
        st.held
            .parked
            .iter()
            .all(|r| r.next != a + 9 * mib && r.next != b + 9 * mib)
    );
}

#[test]
fn column_chunks_stay_sparse_and_a_stream_loads_blocks_after_one_mib() {
    // A parquet reader on a dataset mount: a 40 KiB column chunk every 1.5 MiB (within the
    // slack of each other) from the first row group at offset 4 on. None loads whole blocks.
    let (kib, mib) = (1 << 10, 1 << 20);
    let mut st = ReadState::default();
    for i in 0..16u64 {
        let at = 4 + i * 1536 * kib;
        assert_eq!(classify(&mut st, at, at + 40 * kib, mib), Access::Sparse, "chunk {i}");
    }
    // The kernel's reads of one such chunk, header then body: 4 KiB, 128 KiB, 256 KiB.
    let at = 24 * mib;
    assert_eq!(classify(&mut st, at, at + 4 * kib, mib), Access::Sparse);
    assert_eq!(classify(&mut st, at + 4 * kib, at + 132 * kib, mib), Access::Sparse);
    assert_eq!(classify(&mut st, at + 132 * kib, at + 388 * kib, mib), Access::Sparse);
    // A 2 MiB column chunk read in one go: its second MiB loads its block, no window.
    let at = 30 * mib;
    let _ = classify(&mut st, at, at + mib, mib);
    assert_eq!(classify(&mut st, at + mib, at + 2 * mib, mib), Access::Sequential(0));
    // cat: 128 KiB, then the kernel's growing readahead: blocks from the first MiB on, a window
    // (at once: a run from offset 0) from the fourth.
    let mut st = ReadState::default();
    assert_eq!(classify(&mut st, 0, 128 * kib, mib), Access::Sparse);
    assert_eq!(classify(&mut st, 128 * kib, 384 * kib, mib), Access::Sparse);
    assert_eq!(classify(&mut st, 384 * kib, 1408 * kib, mib), Access::Sequential(0));
    let mut at = 1408 * kib;
    while at + mib < 4 * mib {
        assert_eq!(classify(&mut st, at, at + mib, mib), Access::Sequential(0));
        at += mib;
    }
    assert_eq!(classify(&mut st, at, at + mib, mib), Access::Sequential(2));
    // A model mount (a block of readahead) loads blocks from the first read.
    let mut st = ReadState::default();
    assert_eq!(classify(&mut st, 0, 128 * kib, RA), Access::Sequential(2));
    // There too, reads that skip more than they read start a new run each: a read-around's
    // blocks, no prefetch.
    let _ = classify(&mut st, 3 * mib, 3 * mib + 4 * kib, RA);
    assert_eq!(classify(&mut st, 6 * mib, 6 * mib + 4 * kib, RA), Access::Sequential(0));
}

#[test]
fn a_scanned_file_is_read_in_blocks_from_the_first_read() {
    let mib = 1 << 20;
    let mut st = ReadState::default();
    assert_eq!(classify(&mut st, 2 * mib, 2 * mib + 4096, mib), Access::Sparse);
    assert!(!st.proven);
    st.scanned = true;
    assert_eq!(classify(&mut st, 30 * mib, 30 * mib + 4096, mib), Access::Seek);
    assert_eq!(
        classify(&mut st, 30 * mib + 4096, 30 * mib + 8192, mib),
        Access::Sequential(0),
        "a run of a scanned file loads its blocks at once"
    );
    assert!(st.proven);
    let scans = crate::vfs::sparse::Scans::default();
    let key: Arc<str> = Arc::from("k");
    scans.proven(&key, "data");
    assert!(!scans.scanned(&key, "data"), "one run is a reader, not a scan");
    scans.proven(&key, "data");
    assert!(scans.scanned(&key, "data"));
    // A file scanned makes the folder's other files scanned too (a dataset's other shards).
    let next: Arc<str> = Arc::from("n");
    assert!(scans.scanned(&next, "data"), "a shard of a folder being scanned");
    assert!(!scans.scanned(&next, "other"), "not another folder's");
    // One proven run of a file marks nothing (a filtered scan's one large column chunk).
    let (once, third): (Arc<str>, Arc<str>) = (Arc::from("o"), Arc::from("t"));
    scans.proven(&once, "c");
    assert!(!scans.scanned(&third, "c"));
    // The folder counts when a file becomes scanned, not at each later run of it.
    scans.proven(&key, "b");
    assert!(!scans.scanned(&next, "b"));
    assert_eq!(crate::vfs::sparse::folder_of("data/part-0.parquet"), "data");
    assert_eq!(crate::vfs::sparse::folder_of("top.bin"), "");
}

#[test]
fn small_reads_keep_a_short_slack() {
    let mut st = ReadState::default();
    let kib = 1 << 10;
    let _ = classify(&mut st, 0, 4 * kib, RA);
    assert_eq!(
        classify(&mut st, 6 << 20, (6 << 20) + 4 * kib, RA),
        Access::Seek,
        "6 MiB away: a seek"
    );
    let _ = classify(&mut st, 0, 1 << 20, RA);
    assert!(
        matches!(classify(&mut st, 12 << 20, 13 << 20, RA), Access::Sequential(_)),
        "a readahead-sized read 11 MiB on is sequential"
    );
}
