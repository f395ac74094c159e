use std::sync::Arc;

use super::super::{Phase, StagingArea};
use super::*;

fn data_file(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id}.data"))
}

/// A new small file has no data file: its bytes are in the log (and read back from it, holes
/// and truncates included). Growing past `LOGGED_MAX` gives it one holding every byte.
#[test]
fn a_small_file_lives_in_the_log_until_it_grows() {
    let dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    let f = area.create("a.bin").unwrap();
    f.add_writer().unwrap();
    f.write_at(0, b"hello").unwrap();
    f.write_at(8, b"world").unwrap();
    f.truncate(11).unwrap();
    assert!(!data_file(dir.path(), f.id()).exists(), "no data file for a small file");
    assert!(area.data.holds(f.id()));
    assert_eq!(&f.read_at(0, 100).unwrap()[..], b"hello\0\0\0wor");
    assert_eq!(f.read_exact_at(3, 4).unwrap(), b"lo\0\0");
    let big = vec![7u8; LOGGED_MAX as usize];
    f.write_at(11, &big).unwrap();
    assert!(!area.data.holds(f.id()), "promoted");
    let on_disk = std::fs::read(data_file(dir.path(), f.id())).unwrap();
    assert_eq!(on_disk.len(), 11 + big.len());
    assert_eq!(&on_disk[..11], b"hello\0\0\0wor");
    assert_eq!(f.read_at(11 + LOGGED_MAX - 2, 10).unwrap().len(), 2);
    // A durable seal names a data file: it promotes a file the log holds.
    let g = area.create("b.bin").unwrap();
    g.write_at(0, b"sealed").unwrap();
    g.seal().unwrap();
    assert_eq!(std::fs::read(data_file(dir.path(), g.id())).unwrap(), b"sealed");
    assert!(!area.data.holds(g.id()));
}

/// A crash (no drop runs) leaves every logged file in the log: the next start gives each its data
/// file with the bytes last written, and recovery then finds them as it finds any staged file.
/// Files committed or discarded before the crash stay gone.
#[test]
fn a_crash_restores_logged_files_and_forgets_settled_ones() {
    let dir = tempfile::tempdir().unwrap();
    {
        let area = StagingArea::open(dir.path()).unwrap();
        let closed = Arc::new(area.create("closed.txt").unwrap());
        closed.add_writer().unwrap();
        closed.write_at(0, b"first").unwrap();
        closed.write_at(0, b"final content").unwrap();
        assert!(closed.remove_writer(true).unwrap());
        let open = area.create("open.txt").unwrap();
        open.add_writer().unwrap();
        open.write_at(0, b"half of it").unwrap();
        open.truncate(4).unwrap();
        let committed = area.create("committed.txt").unwrap();
        committed.write_at(0, b"on the Hub").unwrap();
        assert!(committed.committed(committed.generation()));
        drop(committed);
        let discarded = area.create("discarded.txt").unwrap();
        discarded.add_writer().unwrap();
        discarded.write_at(0, b"unlinked").unwrap();
        discarded.discard();
        drop(discarded);
        let data_files = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".data"))
            .count();
        assert_eq!(data_files, 0, "nothing on disk but the logs");
        std::mem::forget(closed);
        std::mem::forget(open);
    }
    let area = StagingArea::open(dir.path()).unwrap();
    let mut found: Vec<(String, Phase, Vec<u8>)> = area
        .recover()
        .unwrap()
        .into_iter()
        .map(|r| {
            let bytes = r.file.read_at(0, 100).unwrap().to_vec();
            (r.file.repo_path(), r.phase, bytes)
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        found,
        [
            ("closed.txt".to_string(), Phase::Closed, b"final content".to_vec()),
            ("open.txt".to_string(), Phase::Open, b"half".to_vec()),
        ]
    );
    assert_eq!(
        std::fs::metadata(dir.path().join(LOG)).unwrap().len(),
        0,
        "replayed, then emptied"
    );
}

/// A power cut that keeps a quick close's entry but not the end of the data log: the log is
/// replayed up to its torn record, the check fails on what is left, and the file comes back open
/// (kept for a person), never committed.
#[test]
fn a_torn_log_tail_leaves_a_quick_close_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let area = StagingArea::open(dir.path()).unwrap();
        let f = area.create("x.json").unwrap();
        f.add_writer().unwrap();
        f.write_at(0, b"{\"quick\": true}").unwrap();
        assert!(f.remove_writer(true).unwrap());
        std::mem::forget(f);
    }
    let log = dir.path().join(LOG);
    let len = std::fs::metadata(&log).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    let found = area.recover().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].file.repo_path(), "x.json");
    assert_eq!(found[0].phase, Phase::Open);
    assert_eq!(
        found[0].file.size(),
        0,
        "the create's record survived, the write's did not"
    );
}

/// The log is rewritten once it is mostly records of files no longer held, and what it holds then
/// replays whole.
#[test]
fn the_log_is_rewritten_when_mostly_settled() {
    let dir = tempfile::tempdir().unwrap();
    let log = DataLog::open(dir.path()).unwrap();
    assert!(log.adopt(1).unwrap());
    assert!(log.write(1, 0, b"kept across rewrites").unwrap());
    let block = vec![3u8; 60 << 10];
    for id in 2..700u64 {
        assert!(log.adopt(id).unwrap());
        assert!(log.write(id, 0, &block).unwrap());
        log.forget(id);
    }
    let len = std::fs::metadata(dir.path().join(LOG)).unwrap().len();
    assert!(len < REWRITE_AT, "not rewritten: {len} bytes");
    assert!(!log.write(1, LOGGED_MAX - 1, b"ab").unwrap(), "past LOGGED_MAX");
    std::mem::forget(log);
    let left = replay(&dir.path().join(LOG)).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[&1], b"kept across rewrites");
    // A rewrite cut short by a crash leaves its temporary file: the next start removes it, and
    // the directory then holds only the logs.
    std::fs::write(dir.path().join("data.log.tmp"), b"half a rewrite").unwrap();
    std::fs::write(dir.path().join("opened.log.tmp"), b"half a rewrite").unwrap();
    let area = StagingArea::open(dir.path()).unwrap();
    assert!(!dir.path().join("data.log.tmp").exists());
    assert!(!dir.path().join("opened.log.tmp").exists());
    assert_eq!(
        std::fs::read(data_file(dir.path(), 1)).unwrap(),
        b"kept across rewrites",
        "what the log held got its data file"
    );
    drop(area);
}

/// The log holds at most `HELD_MAX` bytes: past it a new file is refused (the staging area gives
/// it a data file at create) and so is a write that would grow a held file; a file let go makes
/// room again.
#[test]
fn the_log_holds_at_most_held_max() {
    let dir = tempfile::tempdir().unwrap();
    let log = DataLog::open(dir.path()).unwrap();
    let full = vec![1u8; LOGGED_MAX as usize];
    let files = HELD_MAX / LOGGED_MAX;
    for id in 1..=files {
        assert!(log.adopt(id).unwrap());
        assert!(log.write(id, 0, &full).unwrap());
    }
    assert!(!log.adopt(files + 1).unwrap(), "a new file past the limit");
    assert!(log.write(1, 0, b"rewrite in place").unwrap(), "no growth: still held");
    assert!(!log.truncate(1, LOGGED_MAX + 1).unwrap());
    log.forget(2);
    assert!(log.adopt(files + 1).unwrap(), "room again");
    drop(log);

    // The staging area then gives new files data files.
    let area_dir = tempfile::tempdir().unwrap();
    let area = StagingArea::open(area_dir.path()).unwrap();
    let held: Vec<_> = (0..files)
        .map(|i| {
            let f = area.create(&format!("{i}.bin")).unwrap();
            f.write_at(0, &full).unwrap();
            f
        })
        .collect();
    assert!(held.iter().all(|f| area.data.holds(f.id())));
    let over = area.create("over.bin").unwrap();
    assert!(data_file(area_dir.path(), over.id()).exists());
}
