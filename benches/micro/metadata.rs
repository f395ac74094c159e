//! Benchmarks of the metadata store a writable mount keeps (modes, owners, times, special files),
//! populated with 100,000 records as after a copy of a large tree: the per-file operations a copy
//! or an `rsync -a` makes (a new record, a rename, a removal) must not depend on how many records
//! the store holds.

use std::hint::black_box;

use criterion::Criterion;
use hubfs::write::metadata::{Meta, MetaStore, Stamp};

use crate::Ids;

/// Records in the populated store.
const RECORDS: usize = 100_000;

fn meta(mode: u32) -> Meta {
    Meta {
        dir: false,
        mode,
        uid: 1000,
        gid: 1000,
        atime: Stamp { s: 1, n: 0 },
        mtime: Stamp { s: 2, n: 0 },
        ctime: Stamp { s: 3, n: 0 },
        special: None,
        link: None,
    }
}

pub fn bench_metadata(c: &mut Criterion, ids: &mut Ids) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = MetaStore::open(dir.path()).expect("metadata log");
    for i in 0..RECORDS {
        store.set(&format!("dir{:03}/file-{i:06}.bin", i / 1_000), meta(0o644));
    }
    assert_eq!(store.len(), RECORDS);
    store.rename("dir042/file-042000.bin", "dir042/.tmp");
    assert!(store.get("dir042/file-042000.bin").is_none() && store.get("dir042/.tmp").is_some());
    store.rename("dir042/.tmp", "dir042/file-042000.bin");
    assert_eq!(store.len(), RECORDS, "a rename moves one record");

    let mut g = c.benchmark_group("metadata");
    let mut n = 0u64;
    g.bench_function("set_new", |b| {
        b.iter(|| {
            n += 1;
            let p = format!("new/f{n}");
            store.set(&p, meta(0o600));
            store.remove_tree(&p);
        })
    });
    ids.add(
        "metadata/set_new",
        format!("a new file's record and its removal, each one log line, in a store of {RECORDS}"),
    );
    g.bench_function("rename", |b| {
        b.iter(|| {
            store.rename("dir050/file-050000.bin", "dir050/.rsync-tmp");
            store.rename("dir050/.rsync-tmp", "dir050/file-050000.bin");
        })
    });
    ids.add("metadata/rename", "two renames of one file (log lines included)");
    g.bench_function("get", |b| b.iter(|| black_box(store.get("dir077/file-077777.bin"))));
    ids.add(
        "metadata/get",
        "one record looked up (what every getattr of a writable mount does)",
    );
    g.bench_function("touch", |b| {
        b.iter(|| store.touch("dir010/file-010010.bin", |m| m.mtime = Stamp { s: 9, n: 9 }))
    });
    ids.add("metadata/touch", "a write's mtime moved in memory");
    g.finish();
}
