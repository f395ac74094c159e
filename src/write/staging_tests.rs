//! Tests of `staging`: journal entries, seals and frozen snapshots.

use super::*;
use sha2::{Digest, Sha256};

/// The file's journal entry: its entry file, or (a new file not yet closed) the opens log's line.
fn journal_phase(f: &DirtyFile) -> (String, Phase) {
    match std::fs::read(&f.meta_path) {
        Ok(b) => {
            let m: Meta = serde_json::from_slice(&b).unwrap();
            (m.path, m.phase)
        }
        Err(_) => {
            let l = f.opens.entry_of(f.id).expect("an entry in the opens log");
            (l.path, if l.check.is_some() { Phase::Closed } else { Phase::Open })
        }
    }
}

/// A snapshot taken while another thread keeps rewriting the file is a consistent copy: its
/// bytes hash to its sha256, whatever the writer did meanwhile (uploads read the copy).
#[test]
fn snapshots_are_consistent_copies_under_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    let f = std::sync::Arc::new(area.create("busy.bin").unwrap());
    // Above FROZEN_IN_MEMORY_MAX: frozen as a file.
    f.write_at(0, &[0u8; 131072]).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (f, stop) = (f.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u8;
            while !stop.load(Ordering::Relaxed) {
                i = i.wrapping_add(1);
                f.write_at(u64::from(i) * 97, &[i; 4096]).unwrap();
                // Writes land between and during copies (a copy of 64 KiB takes tens of µs).
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    let mut checked = 0;
    for _ in 0..100 {
        match f.snapshot() {
            Ok(snap) => {
                let bytes = snap.read_all().unwrap();
                assert_eq!(bytes.len() as u64, snap.size);
                assert_eq!(hex::encode(Sha256::digest(&bytes)), snap.sha256, "a torn copy");
                checked += 1;
            }
            // Kept changing for every attempt: the caller retries later.
            Err(e) => assert!(e.to_string().contains("kept changing"), "{e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let last = f.snapshot().unwrap();
    let Frozen::File(copy) = last.frozen().unwrap() else {
        panic!("a 128 KiB file is frozen as a file")
    };
    let copy = copy.clone();
    assert!(copy.exists());
    drop(last);
    assert!(!copy.exists(), "the frozen copy goes with its last snapshot");
    // A small file is frozen in memory, with the same sha256 and sample.
    let small = area.create("small.txt").unwrap();
    small.write_at(0, b"hello small world").unwrap();
    let snap = small.snapshot().unwrap();
    assert!(matches!(snap.frozen().unwrap(), Frozen::Memory(_)));
    assert_eq!(&snap.read_all().unwrap()[..], b"hello small world");
    assert_eq!(snap.sha256, hex::encode(Sha256::digest(b"hello small world")));
    assert_eq!(snap.sample, b"hello small world");
    assert!(checked > 0, "no snapshot could be taken while the writer ran");
    println!("{checked} of 100 snapshots taken while the writer ran");
}

/// A seal with a writer still there (an NFS COMMIT) journals the file as closed under its
/// current path; a rename while open, or a new writer, journals it as open again.
#[test]
fn seal_while_open_follows_renames_and_new_writers() {
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    let f = area.create("a.bin").unwrap();
    f.add_writer().unwrap();
    f.write_at(0, b"abc").unwrap();
    assert_eq!(journal_phase(&f), ("a.bin".into(), Phase::Open));
    f.seal().unwrap();
    assert_eq!(journal_phase(&f), ("a.bin".into(), Phase::Closed));
    f.write_at(3, b"def").unwrap();
    f.seal().unwrap();
    assert_eq!(journal_phase(&f), ("a.bin".into(), Phase::Closed));
    f.set_path("b.bin").unwrap();
    assert_eq!(journal_phase(&f), ("b.bin".into(), Phase::Open), "renamed while open");
    f.seal().unwrap();
    assert_eq!(
        journal_phase(&f),
        ("b.bin".into(), Phase::Closed),
        "sealed again after the rename"
    );
    assert!(!f.remove_writer(false).unwrap());
    f.add_writer().unwrap();
    assert_eq!(journal_phase(&f), ("b.bin".into(), Phase::Open), "opened again");
    assert!(!f.remove_writer(false).unwrap());
    assert_eq!(journal_phase(&f), ("b.bin".into(), Phase::Closed));
}

#[test]
fn stage_write_read_and_recover() {
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    assert!(StagingArea::open(dir.path()).is_err(), "one mount per staging dir");
    let f = area.create("a/b.bin").unwrap();
    f.add_writer().unwrap();
    f.write_at(3, b"xyz").unwrap();
    assert_eq!(f.size(), 6);
    assert_eq!(&f.read_at(0, 100).unwrap()[..], b"\0\0\0xyz");
    assert_eq!(f.read_at(6, 10).unwrap().len(), 0);
    let open_one = area.create("still/open").unwrap();
    open_one.add_writer().unwrap();
    assert!(!f.remove_writer(false).unwrap());
    let snap = f.snapshot().unwrap();
    assert_eq!(snap.size, 6);
    assert_eq!(snap.path, "a/b.bin");
    f.set_path("a/c.bin").unwrap();
    assert_eq!(
        f.snapshot().unwrap().path,
        "a/c.bin",
        "a snapshot names the path of its generation"
    );
    f.set_path("a/b.bin").unwrap();
    assert_eq!(
        snap.sha256,
        hex::encode(Sha256::digest(b"\0\0\0xyz")),
        "hash of what was written"
    );
    let gone = area.create("gone").unwrap();
    gone.discard();
    drop(gone);
    std::mem::forget(f);
    std::mem::forget(open_one);
    drop(area);
    let area = StagingArea::open(dir.path()).unwrap();
    let mut found = area.recover().unwrap();
    found.sort_by_key(|r| r.file.repo_path());
    assert_eq!(found.len(), 2, "the discarded file is not recovered");
    assert_eq!(found[0].file.repo_path(), "a/b.bin");
    assert_eq!(found[0].phase, Phase::Closed);
    assert_eq!(&found[0].file.read_at(0, 100).unwrap()[..], b"\0\0\0xyz");
    assert_eq!(found[1].phase, Phase::Open);
    let next = area.create("new").unwrap();
    assert!(next.id() > found[1].file.id(), "ids are not reused");
}

#[test]
fn a_commit_of_an_older_generation_leaves_newer_writes_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    let f = area.create("g").unwrap();
    f.write_at(0, b"first").unwrap();
    let snap = f.snapshot().unwrap();
    f.write_at(0, b"second").unwrap();
    assert!(!f.committed(snap.generation), "written after the snapshot: still dirty");
    assert!(f.is_dirty());
    let later = f.snapshot().unwrap();
    assert_ne!(later.sha256, snap.sha256);
    assert!(f.committed(later.generation));
    assert!(!f.is_dirty());
}

#[test]
fn committed_files_are_deleted_on_drop_dirty_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    let clean = area.create("c").unwrap();
    clean.write_at(0, &vec![1u8; 100 << 10]).unwrap();
    let g = clean.generation();
    assert!(clean.committed(g));
    let data = clean.data_path().to_path_buf();
    drop(clean);
    assert!(!data.exists());
    let dirty = area.create("d").unwrap();
    dirty.write_at(0, &vec![1u8; 100 << 10]).unwrap();
    let data = dirty.data_path().to_path_buf();
    drop(dirty);
    assert!(data.exists(), "uncommitted bytes survive");
    // A small one the data log holds: kept there, and given a data file at the next start.
    let small = area.create("e").unwrap();
    small.write_at(0, b"1").unwrap();
    let data = small.data_path().to_path_buf();
    drop(small);
    assert!(!data.exists());
    drop(area);
    let _area = StagingArea::open(dir.path()).unwrap();
    assert_eq!(std::fs::read(&data).unwrap(), b"1", "uncommitted bytes survive");
}

/// A committed small file's data file is kept, emptied, and the next new file gets that inode
/// (no inode allocated); a large one is deleted.
#[test]
fn committed_small_files_leave_spares_that_new_files_reuse() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    // Small files get data files only when something needs one (a durable seal here).
    let small = area.create("a.txt").unwrap();
    small.write_at(0, b"first file's bytes").unwrap();
    small.seal().unwrap();
    let ino = std::fs::metadata(small.data_path()).unwrap().ino();
    assert!(small.committed(small.generation()));
    drop(small);
    assert_eq!(area.spares.count(), 1);

    let next = area.create("b.txt").unwrap();
    assert_eq!(next.size(), 0);
    next.write_at(0, b"b").unwrap();
    next.seal().unwrap();
    assert_eq!(
        std::fs::metadata(next.data_path()).unwrap().ino(),
        ino,
        "the spare's inode is reused"
    );
    assert_eq!(
        std::fs::metadata(next.data_path()).unwrap().len(),
        1,
        "a spare is emptied before it takes the file's bytes"
    );
    assert_eq!(&next.read_at(0, 100).unwrap()[..], b"b");
    assert_eq!(area.spares.count(), 0);

    let big = area.create("big.bin").unwrap();
    big.write_at(0, &vec![7u8; (spares::SPARE_MAX_BYTES + 1) as usize])
        .unwrap();
    let data = big.data_path().to_path_buf();
    assert!(big.committed(big.generation()));
    drop(big);
    assert!(!data.exists());
    assert_eq!(area.spares.count(), 0, "a large file is deleted, not kept");
}

/// Spares a previous run left (one still holding bytes, as a crash between the rename and the
/// truncate leaves it) are emptied at the next start and reused; recovery never takes a spare
/// for a staged file.
#[test]
fn spares_left_by_an_earlier_run_are_emptied_and_never_recovered() {
    let dir = tempfile::tempdir().unwrap();
    {
        let area = StagingArea::open(dir.path()).unwrap();
        let f = area.create("x").unwrap();
        f.write_at(0, b"committed").unwrap();
        f.seal().unwrap();
        assert!(f.committed(f.generation()));
        drop(f);
        assert_eq!(area.spares.count(), 1);
    }
    std::fs::write(dir.path().join("spare-99"), b"bytes of a file the Hub has").unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    assert!(area.recover().unwrap().is_empty(), "spares are not staged files");
    assert_eq!(area.spares.count(), 2);
    for name in ["a", "b"] {
        let f = area.create(name).unwrap();
        f.write_at(0, name.as_bytes()).unwrap();
        f.seal().unwrap();
        assert_eq!(
            std::fs::read(f.data_path()).unwrap(),
            name.as_bytes(),
            "{name}: a reused spare holds only the file's bytes"
        );
        std::mem::forget(f);
    }
    assert_eq!(area.spares.count(), 0);
    let f = area.create("c").unwrap();
    f.seal().unwrap();
    assert!(f.data_path().exists(), "with no spare left, a new file is created");
}

fn journal_check(f: &DirtyFile) -> Option<quick::Check> {
    match std::fs::read(&f.meta_path) {
        Ok(b) => serde_json::from_slice::<Meta>(&b).unwrap().check,
        Err(_) => f.opens.entry_of(f.id).and_then(|l| l.check),
    }
}

/// A quick close journals the file as closed with a check of its bytes and no fsync; the
/// sealer then makes it durable (an entry without a check). A large file does not qualify.
#[test]
fn a_quick_close_is_sealed_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    let f = std::sync::Arc::new(area.create("rows/a.json").unwrap());
    f.add_writer().unwrap();
    f.write_at(0, b"{\"id\": 1}\n").unwrap();
    assert!(f.remove_writer(true).unwrap(), "a small file closes quickly");
    assert_eq!(journal_phase(&f), ("rows/a.json".into(), Phase::Closed));
    assert!(journal_check(&f).is_some(), "a quick entry carries its check");
    assert!(
        !f.meta_path.exists(),
        "a new file's quick entry is a line in the opens log"
    );
    assert!(f.needs_seal());
    area.seal_later(&f);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while f.needs_seal() {
        assert!(std::time::Instant::now() < deadline, "the sealer never sealed the file");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(journal_phase(&f), ("rows/a.json".into(), Phase::Closed));
    let check = journal_check(&f);
    assert!(check.is_some(), "sealed as it was: the entry is not rewritten");
    assert!(f.settled(), "data and entry are durable");
    // Closed quickly once more at the same generation (release after flush): nothing rewritten.
    assert!(f.close_quick().unwrap());
    assert_eq!(journal_check(&f), check);
    // Written again and closed: a new quick entry, sealed again.
    f.add_writer().unwrap();
    f.write_at(0, b"{\"id\": 2}\n").unwrap();
    assert!(f.remove_writer(true).unwrap());
    assert_ne!(journal_check(&f), check);
    area.seal_later(&f);
    while f.needs_seal() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sealer never sealed the new content"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }

    let big = area.create("shards/b.bin").unwrap();
    big.add_writer().unwrap();
    big.write_at(0, &vec![7u8; (quick::QUICK_CLOSE_MAX + 1) as usize])
        .unwrap();
    assert!(
        !big.remove_writer(true).unwrap(),
        "past the limit a close seals at once"
    );
    assert!(!big.needs_seal());
    assert!(journal_check(&big).is_none());
}

/// After a crash, a quickly closed file whose bytes match its check is committed; one whose
/// bytes did not reach the disk whole (a power cut) is recovered as open, never committed.
#[test]
fn a_quick_entry_holds_only_over_the_bytes_it_checked() {
    let dir = tempfile::tempdir().unwrap();
    {
        let area = StagingArea::open(dir.path()).unwrap();
        for name in ["whole.txt", "torn.txt", "short.txt"] {
            let f = area.create(name).unwrap();
            f.add_writer().unwrap();
            f.write_at(0, b"hello, quick close").unwrap();
            assert!(f.remove_writer(true).unwrap());
            std::mem::forget(f); // a crash: nothing cleaned up
        }
    }
    // What a power cut could leave: other bytes, or fewer.
    let data = |id: u64| dir.path().join(format!("{id}.data"));
    for id in 1..=3 {
        assert!(
            !dir.path().join(format!("{id}.meta")).exists(),
            "no entry file: a line in the log"
        );
    }
    // A start gives the files the data log held their data files (then a clean stop).
    drop(StagingArea::open(dir.path()).unwrap());
    let log = opens::OpensLog::open(dir.path()).unwrap();
    let ids: std::collections::HashMap<String, u64> = (1..=3).map(|id| (log.path_of(id).unwrap(), id)).collect();
    drop(log);
    std::fs::write(data(ids["torn.txt"]), b"hello, QUICK close").unwrap();
    std::fs::write(data(ids["short.txt"]), b"hello").unwrap();
    {
        // A new file whose first entry file a crash tore as it was written: its open entry in
        // the opens log stands.
        let area = StagingArea::open(dir.path()).unwrap();
        let f = area.create("entry-torn.txt").unwrap();
        f.add_writer().unwrap();
        f.write_at(0, b"abc").unwrap();
        std::fs::write(dir.path().join(format!("{}.meta", f.id())), b"{\"pa").unwrap();
        std::mem::forget(f);
    }
    let area = StagingArea::open(dir.path()).unwrap();
    let mut phases: Vec<(String, Phase)> = area
        .recover()
        .unwrap()
        .into_iter()
        .map(|r| (r.file.repo_path(), r.phase))
        .collect();
    phases.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        phases,
        [
            ("entry-torn.txt".to_string(), Phase::Open),
            ("short.txt".to_string(), Phase::Open),
            ("torn.txt".to_string(), Phase::Open),
            ("whole.txt".to_string(), Phase::Closed),
        ]
    );
}

/// A new file closed quickly and then discarded (unlinked while open, say) is never brought back
/// by a crash: the log's `gone` line outweighs its closed line, though the data is still there.
/// One that was sealed survives a crash as closed, whatever the log's rewrites.
#[test]
fn the_opens_log_forgets_a_discarded_file_and_keeps_a_sealed_one() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    {
        let area = StagingArea::open(dir.path()).unwrap();
        let gone = std::sync::Arc::new(area.create("gone.txt").unwrap());
        gone.add_writer().unwrap();
        gone.write_at(0, b"deleted").unwrap();
        assert!(gone.remove_writer(true).unwrap());
        gone.discard();
        let kept = std::sync::Arc::new(area.create("kept.txt").unwrap());
        kept.add_writer().unwrap();
        kept.write_at(0, b"sealed").unwrap();
        assert!(kept.remove_writer(true).unwrap());
        area.seal_later(&kept);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while kept.needs_seal() {
            assert!(std::time::Instant::now() < deadline, "never sealed");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!kept.meta_path.exists(), "sealed as the log's line");
        // A crash now leaves what is on disk at this moment (no drop runs, no log trimmed):
        // copied aside while the area and both files are alive.
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), crashed.path().join(e.file_name())).unwrap();
            }
        }
        std::mem::forget(gone);
        std::mem::forget(kept);
    }
    assert!(
        std::fs::metadata(crashed.path().join("data.log")).unwrap().len() > 0,
        "the discarded file's data is still there, in the data log"
    );
    let area = StagingArea::open(crashed.path()).unwrap();
    let found: Vec<(String, Phase)> = area
        .recover()
        .unwrap()
        .into_iter()
        .map(|r| (r.file.repo_path(), r.phase))
        .collect();
    assert_eq!(found, [("kept.txt".to_string(), Phase::Closed)]);
}

/// A batch of quick closes of new files is sealed with one fsync of the opens log: every file
/// ends settled, its entry still the log's line with its check, and a crash then finds each
/// closed.
#[test]
fn a_batch_of_quick_closes_is_sealed_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    {
        let area = StagingArea::open(dir.path()).unwrap();
        let files: Vec<std::sync::Arc<DirtyFile>> = (0..12)
            .map(|i| {
                let f = std::sync::Arc::new(area.create(&format!("rows/{i}.json")).unwrap());
                f.add_writer().unwrap();
                f.write_at(0, format!("{{\"id\": {i}}}\n").as_bytes()).unwrap();
                assert!(f.remove_writer(true).unwrap());
                f
            })
            .collect();
        assert!(files.iter().all(|f| f.needs_seal()));
        quick::seal_batch(dir.path(), files.iter().map(std::sync::Arc::downgrade)).unwrap();
        for f in &files {
            assert!(f.settled(), "{} not settled", f.repo_path());
            assert!(!f.needs_seal());
            assert!(!f.meta_path.exists());
            assert!(journal_check(f).is_some());
        }
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), crashed.path().join(e.file_name())).unwrap();
            }
        }
        for f in files {
            std::mem::forget(f);
        }
    }
    let area = StagingArea::open(crashed.path()).unwrap();
    let found = area.recover().unwrap();
    assert_eq!(found.len(), 12);
    assert!(found.iter().all(|r| r.phase == Phase::Closed));
}

/// An upload that follows the writer feeds only a prefix no write can change: a new file's
/// appends keep it (the size); a write below the size, or a truncate, ends it for good.
#[test]
fn only_a_new_file_appended_in_order_has_a_stable_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    let f = area.create("a.bin").unwrap();
    assert_eq!(f.stable_prefix(), Some(0));
    f.write_at(0, &[1u8; 1000]).unwrap();
    f.write_at(1000, &[2u8; 500]).unwrap();
    assert_eq!(f.stable_prefix(), Some(1500));
    // Past the end (a hole of zeros, then the bytes): still only growing.
    f.write_at(2000, &[3u8; 10]).unwrap();
    assert_eq!(f.stable_prefix(), Some(2010));
    assert_eq!(f.read_exact_at(1500, 510).unwrap()[..500], [0u8; 500]);
    // Filling the hole rewrites bytes below the size.
    f.write_at(1500, &[4u8; 10]).unwrap();
    assert!(!f.grown_only());
    assert_eq!(f.stable_prefix(), None);
    f.write_at(2010, &[5u8; 10]).unwrap();
    assert_eq!(f.stable_prefix(), None, "once ended, never again for this file");

    let g = area.create("b.bin").unwrap();
    g.write_at(0, &[1u8; 100]).unwrap();
    g.truncate(100).unwrap();
    assert_eq!(g.stable_prefix(), None, "any truncate ends it");

    // A staged file found at startup may hold anything: never followed.
    let h = area.create("c.bin").unwrap();
    h.write_at(0, &[1u8; 100]).unwrap();
    h.seal().unwrap();
    drop(area);
    let area = StagingArea::open(dir.path()).unwrap();
    let found = area.recover().unwrap();
    let c = found.iter().find(|r| r.file.repo_path() == "c.bin").unwrap();
    assert_eq!(c.file.stable_prefix(), None);
}

/// A write that overlaps what a reader of the prefix may already have read clears the flag
/// before its bytes move: a reader that checks the flag after its read never keeps mixed bytes.
#[test]
fn a_rewrite_racing_a_prefix_read_is_always_seen() {
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    for round in 0..50u8 {
        let f = std::sync::Arc::new(area.create(&format!("r{round}.bin")).unwrap());
        f.write_at(0, &[7u8; 65536]).unwrap();
        let end = f.stable_prefix().unwrap();
        let writer = {
            let f = f.clone();
            std::thread::spawn(move || f.write_at(u64::from(round) * 1000, &[9u8; 4096]).unwrap())
        };
        let bytes = f.read_exact_at(0, end as usize).unwrap();
        let clean = bytes.iter().all(|b| *b == 7);
        let flagged = !f.grown_only();
        writer.join().unwrap();
        assert!(
            clean || flagged,
            "round {round}: mixed bytes read and the flag still set"
        );
        assert!(!f.grown_only(), "the rewrite always ends it");
    }
}
