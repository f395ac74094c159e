//! Uploads that follow the writer, through a real FUSE mount: a large file written in order is
//! sent to the Hub while it is written, and whatever the writer does meanwhile (rewrites, a
//! truncate, an unlink), what lands on the Hub is what the file holds at close.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use hubfs::local_hub::RouteClass;
use hubfs::vfs::{CloseMode, VfsOptions};

#[path = "common/write_env.rs"]
mod write_env;
use write_env::{Env, pseudo, sha};

fn opts(env: &Env, close: CloseMode) -> VfsOptions {
    let mut o = env.write_opts(false);
    if let Some(w) = o.write.as_mut() {
        w.close = close;
    }
    o
}

fn wait_clean(m: &hubfs::process::session::Mounted) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !m.vfs.dirty_paths().is_empty() {
        assert!(Instant::now() < deadline, "never committed");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `data` in 1 MiB writes.
fn write_in_order(f: &mut std::fs::File, data: &[u8]) {
    for piece in data.chunks(1 << 20) {
        f.write_all(piece).unwrap();
    }
}

/// `--close upload`: with more than a xorb written (64 MiB), xorbs reach the CAS before the
/// close; the close then only finishes the stream, and the Hub holds the file's exact bytes.
#[test]
fn a_large_file_written_in_order_reaches_the_cas_before_its_close() {
    let mut env = Env::new();
    env.create_dataset("f1");
    let m = env.mount_with("datasets/local/f1", opts(&env, CloseMode::Upload));
    let data = pseudo(80 << 20, 31);
    let cas_before = env.hub().stats(RouteClass::Cas).requests;
    let mut f = std::fs::File::create(m.mountpoint.join("big.bin")).unwrap();
    write_in_order(&mut f, &data[..(72 << 20)]);
    // The first xorb is full once 64 MiB are chunked: it goes while the file is still open.
    let deadline = Instant::now() + Duration::from_secs(30);
    while env.hub().stats(RouteClass::Cas).requests == cas_before {
        assert!(
            Instant::now() < deadline,
            "nothing reached the CAS while the file was written"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    write_in_order(&mut f, &data[(72 << 20)..]);
    drop(f);
    let status = m.vfs.status_report().unwrap();
    assert!(
        status.bytes_uploaded >= data.len() as u64 / 2,
        "the close returned with the content uploaded: {} bytes",
        status.bytes_uploaded
    );
    wait_clean(&m);
    assert_eq!(env.hub_files("f1")["big.bin"], (data.len() as u64, sha(&data)));
}

/// A rewrite below what was already fed, a truncate, a write past the end: the stream ends and
/// the close uploads the file itself; the Hub gets the final bytes.
#[test]
fn a_file_rewritten_while_followed_lands_as_it_is_at_close() {
    let mut env = Env::new();
    env.create_dataset("f2");
    let m = env.mount_with("datasets/local/f2", opts(&env, CloseMode::Upload));
    let mut data = pseudo(40 << 20, 32);
    let mut f = std::fs::File::create(m.mountpoint.join("rewritten.bin")).unwrap();
    write_in_order(&mut f, &data[..(30 << 20)]);
    // Let the follower feed what is there.
    std::thread::sleep(Duration::from_millis(500));
    let patch = pseudo(4096, 33);
    f.write_all_at(&patch, 1 << 20).unwrap();
    data[(1 << 20)..(1 << 20) + 4096].copy_from_slice(&patch);
    write_in_order(&mut f, &data[(30 << 20)..]);
    drop(f);
    wait_clean(&m);
    assert_eq!(env.hub_files("f2")["rewritten.bin"], (data.len() as u64, sha(&data)));

    let data = pseudo(30 << 20, 34);
    let mut f = std::fs::File::create(m.mountpoint.join("cut.bin")).unwrap();
    write_in_order(&mut f, &data[..(24 << 20)]);
    std::thread::sleep(Duration::from_millis(300));
    f.set_len(20 << 20).unwrap();
    let mut tail = data[..(20 << 20)].to_vec();
    tail.extend_from_slice(&data[(24 << 20)..]);
    f.write_all_at(&data[(24 << 20)..], 20 << 20).unwrap();
    drop(f);
    wait_clean(&m);
    assert_eq!(env.hub_files("f2")["cut.bin"], (tail.len() as u64, sha(&tail)));
}

/// `--close stage`: the background upload began with the writing; `sync` finds the file on the
/// Hub with its bytes. A file unlinked while it is written uploads nothing and commits nothing.
#[test]
fn staged_closes_and_unlinked_writers() {
    let mut env = Env::new();
    env.create_dataset("f3");
    let m = env.mount_with("datasets/local/f3", opts(&env, CloseMode::Stage));
    let data = pseudo(36 << 20, 35);
    let mut f = std::fs::File::create(m.mountpoint.join("staged.bin")).unwrap();
    write_in_order(&mut f, &data);
    drop(f);
    wait_clean(&m);
    assert_eq!(env.hub_files("f3")["staged.bin"], (data.len() as u64, sha(&data)));

    let commits = env.commit_count("f3");
    let mut f = std::fs::File::create(m.mountpoint.join("gone.bin")).unwrap();
    write_in_order(&mut f, &data[..(24 << 20)]);
    std::fs::remove_file(m.mountpoint.join("gone.bin")).unwrap();
    write_in_order(&mut f, &data[(24 << 20)..]);
    drop(f);
    std::thread::sleep(Duration::from_secs(1));
    wait_clean(&m);
    assert_eq!(
        env.commit_count("f3"),
        commits,
        "nothing to commit for an unlinked file"
    );
    assert!(!env.hub_files("f3").contains_key("gone.bin"));
    // The mount still takes new files after the cancelled follower.
    std::fs::write(m.mountpoint.join("after.bin"), &data).unwrap();
    wait_clean(&m);
    assert_eq!(env.hub_files("f3")["after.bin"], (data.len() as u64, sha(&data)));
}
