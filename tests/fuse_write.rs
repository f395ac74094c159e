//! Writable FUSE mounts against an in-process local Hub: files written through the kernel are
//! checked from the Hub's side (tree, sizes, sha256, commits), with faults injected where the
//! promise is "nothing written is lost".

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use hubfs::hub_client::TreeEntry;
use hubfs::local_hub::RouteClass;
use hubfs::vfs::VfsOptions;

#[path = "common/write_env.rs"]
mod write_env;
use write_env::{Env, errno_of, get_json, local_files, pseudo, sha};

#[test]
fn written_files_land_on_the_hub_when_closed() {
    let mut env = Env::new();
    env.create_dataset("w1");
    let m = env.mount_rw("datasets/local/w1");
    let root = m.mountpoint.clone();
    let commits_before = env.commit_count("w1");

    let big = pseudo(1 << 20, 7);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty.txt", Vec::new()),
        ("one.txt", b"x".to_vec()),
        ("data/train.bin", big.clone()),
        ("data/notes é #1.md", b"hello hub\n".to_vec()),
    ];
    std::fs::create_dir(root.join("data")).unwrap();
    for (path, bytes) in &cases {
        let mut f = std::fs::File::create(root.join(path)).unwrap();
        f.write_all(bytes).unwrap();
        // close() returns after the commit: the Hub has the file now.
        drop(f);
        let hub = env.hub_files("w1");
        assert_eq!(
            hub.get(*path),
            Some(&(bytes.len() as u64, sha(bytes))),
            "{path} is on the Hub right after close"
        );
    }
    assert_eq!(
        env.commit_count("w1"),
        commits_before + cases.len(),
        "one commit per close here"
    );
    let status = m.vfs.status_report().unwrap();
    assert!(status.dirty.is_empty(), "nothing left dirty: {:?}", status.dirty);
    // Committed and closed: nothing is left staged (release reaches the mount just after close).
    let staging = env.staging_dir("w1");
    let journaled = || {
        std::fs::read_dir(&staging)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                let n = n.to_string_lossy();
                n.ends_with(".meta") || n.ends_with(".data")
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while journaled() > 0 {
        assert!(Instant::now() < deadline, "staged copies of committed files were kept");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(std::fs::read(root.join("data/train.bin")).unwrap(), big);
    // The hf-hub crate, a stock client, downloads the same bytes.
    let hf_cache = tempfile::tempdir().unwrap();
    let hf = hf_hub::HFClient::builder()
        .endpoint(env.hub().endpoint())
        .token(env.hub().write_token().unwrap())
        .cache_dir(hf_cache.path())
        .build()
        .unwrap();
    for (path, bytes) in &cases {
        let got = env
            .rt
            .block_on(
                hf.dataset("local", "w1")
                    .download_file_to_bytes()
                    .filename(*path)
                    .send(),
            )
            .unwrap();
        assert_eq!(sha(&got), sha(bytes), "hf-hub reads {path}");
    }

    // A remount (fresh content cache) shows the same tree and bytes.
    let mount_tree = local_files(&root);
    m.unmount().unwrap();
    let mut opts = env.write_opts(true);
    opts.cache_dir = None;
    let m2 = env.mount_with("datasets/local/w1", opts);
    assert_eq!(local_files(&m2.mountpoint), mount_tree);
    assert_eq!(local_files(&m2.mountpoint), env.hub_files("w1"));
}

#[test]
fn edits_renames_and_deletes() {
    let mut env = Env::new();
    env.create_dataset("w2");
    let m = env.mount_rw("datasets/local/w2");
    let root = m.mountpoint.clone();
    let base = pseudo(3 << 20, 11);
    std::fs::create_dir_all(root.join("dir/sub")).unwrap();
    std::fs::write(root.join("dir/a.bin"), &base).unwrap();
    std::fs::write(root.join("dir/sub/b.txt"), b"bee\n").unwrap();
    std::fs::write(root.join("top.txt"), b"0123456789").unwrap();

    // Random writes into a committed remote file (opened without O_TRUNC: content comes in first).
    let mut expect_a = base.clone();
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(root.join("dir/a.bin"))
            .unwrap();
        for (off, len) in [(0usize, 10usize), (1 << 20, 4096), ((3 << 20) - 5, 5), (777_777, 1)] {
            let patch = vec![0xAB; len];
            f.write_all_at(&patch, off as u64).unwrap();
            expect_a[off..off + len].copy_from_slice(&patch);
        }
    }
    // Append and truncate.
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(root.join("top.txt"))
            .unwrap();
        f.write_all(b"ABC").unwrap();
    }
    let t = std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("dir/sub/b.txt"))
        .unwrap();
    t.set_len(2).unwrap();
    drop(t);
    // O_TRUNC rewrite through a path that exists only on the Hub now.
    std::fs::write(root.join("top2.txt"), b"first").unwrap();
    std::fs::write(root.join("top2.txt"), b"second!").unwrap();

    let hub = env.hub_files("w2");
    assert_eq!(hub["dir/a.bin"], (expect_a.len() as u64, sha(&expect_a)));
    assert_eq!(hub["top.txt"].1, sha(b"0123456789ABC"));
    assert_eq!(hub["dir/sub/b.txt"].1, sha(b"be"));
    assert_eq!(hub["top2.txt"].1, sha(b"second!"));

    // Renames of a file and a folder, deletes, mkdir/rmdir.
    std::fs::rename(root.join("top.txt"), root.join("dir/moved.txt")).unwrap();
    std::fs::rename(root.join("dir"), root.join("renamed")).unwrap();
    std::fs::remove_file(root.join("top2.txt")).unwrap();
    std::fs::create_dir(root.join("empty")).unwrap();
    std::fs::create_dir(root.join("gone")).unwrap();
    std::fs::remove_dir(root.join("gone")).unwrap();
    assert_eq!(errno_of(std::fs::remove_dir(root.join("renamed"))), libc::ENOTEMPTY);
    assert!(root.join("empty").is_dir(), "an empty dir lives locally");
    assert!(!root.join("dir").exists());
    assert_eq!(std::fs::read(root.join("renamed/moved.txt")).unwrap(), b"0123456789ABC");

    // Namespace changes commit in the background: wait for them, bounded.
    let deadline = Instant::now() + Duration::from_secs(20);
    let want: std::collections::BTreeMap<String, (u64, String)> = [
        ("renamed/a.bin", expect_a.as_slice()),
        ("renamed/sub/b.txt", b"be".as_slice()),
        ("renamed/moved.txt", b"0123456789ABC".as_slice()),
    ]
    .into_iter()
    .map(|(p, b)| (p.to_string(), (b.len() as u64, sha(b))))
    .collect();
    loop {
        let hub = env.hub_files("w2");
        if hub == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Hub never reached the mount's tree: {hub:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(local_files(&root), want, "the mount shows what the Hub has");
    // RENAME_NOREPLACE and RENAME_EXCHANGE.
    let renameat2 = |from: &str, to: &str, flags: libc::c_uint| -> Option<i32> {
        let c = |p: &str| std::ffi::CString::new(root.join(p).as_os_str().as_encoded_bytes()).unwrap();
        let (a, b) = (c(from), c(to));
        // SAFETY: valid NUL-terminated paths that outlive the call.
        let rc = unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags) };
        (rc != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    };
    assert_eq!(
        renameat2("renamed/moved.txt", "renamed/a.bin", libc::RENAME_NOREPLACE),
        Some(libc::EEXIST)
    );
    assert_eq!(
        renameat2("renamed/moved.txt", "renamed/a.bin", libc::RENAME_EXCHANGE),
        Some(libc::EINVAL)
    );
    // Hard links: tests/fuse_links.rs (symlinks, modes and the rest: tests/fuse_metadata.rs).
    assert_eq!(
        errno_of(std::fs::File::create(root.join("x".repeat(256)))),
        libc::ENAMETOOLONG
    );
}

#[test]
fn failed_commit_returns_eio_and_keeps_the_data() {
    let mut env = Env::new();
    env.create_dataset("w3");
    let m = env.mount_rw("datasets/local/w3");
    let root = m.mountpoint.clone();
    std::fs::write(root.join("warmup.txt"), b"ok").unwrap();
    env.fault(RouteClass::Commit, |f| f.error_rate = 1.0);
    let start = Instant::now();
    let mut f = std::fs::File::create(root.join("kept.bin")).unwrap();
    f.write_all(&pseudo(100_000, 3)).unwrap();
    // close(2) itself reports the failure (Rust's drop would swallow it).
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    // SAFETY: fd was just taken from a File and is closed exactly once.
    let rc = unsafe { libc::close(fd) };
    let err = std::io::Error::last_os_error().raw_os_error();
    assert_eq!((rc, err), (-1, Some(libc::EIO)), "close returns EIO");
    assert!(start.elapsed() < Duration::from_secs(30), "no hang");
    assert_eq!(m.vfs.dirty_paths(), ["kept.bin"], "the data stays staged");
    assert_eq!(std::fs::read(root.join("kept.bin")).unwrap(), pseudo(100_000, 3));
    env.hub().clear_faults();
    // The background retry commits it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !m.vfs.dirty_paths().is_empty() {
        assert!(Instant::now() < deadline, "retry never landed");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(env.hub_files("w3")["kept.bin"].1, sha(&pseudo(100_000, 3)));
}

#[test]
fn concurrent_remote_commit_is_rebased() {
    let mut env = Env::new();
    env.create_dataset("w4");
    let m = env.mount_rw("datasets/local/w4");
    let root = m.mountpoint.clone();
    std::fs::write(root.join("mine.txt"), b"1").unwrap();
    // Someone else commits another path: the mount's parent is now stale.
    env.remote_commit("w4", "theirs.txt", "x");
    std::fs::write(root.join("mine2.txt"), b"2").unwrap();
    let hub = env.hub_files("w4");
    assert_eq!(
        hub.keys().collect::<Vec<_>>(),
        ["mine.txt", "mine2.txt", "theirs.txt"],
        "both changes kept"
    );

    // The same path changed on the Hub while it was open here: a conflict, reported and kept.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(root.join("mine.txt"))
        .unwrap();
    f.write_all(b"local").unwrap();
    env.remote_commit("w4", "mine.txt", "remote");
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    // SAFETY: fd was just taken from a File and is closed exactly once.
    let rc = unsafe { libc::close(fd) };
    assert_eq!(
        (rc, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EIO))
    );
    let status = m.vfs.status_report().unwrap();
    assert_eq!(status.dirty.len(), 1, "kept staged");
    assert!(
        status.dirty[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("changed on the Hub")
    );
    assert_eq!(
        env.hub_files("w4")["mine.txt"].1,
        sha(b"remote"),
        "the Hub's version is not clobbered"
    );
    assert_eq!(
        std::fs::read(root.join("mine.txt")).unwrap(),
        b"local",
        "the mount keeps the local one"
    );
    // Writing it again is a decision: it is committed over the Hub's version.
    std::fs::write(root.join("mine.txt"), b"local again").unwrap();
    assert_eq!(env.hub_files("w4")["mine.txt"].1, sha(b"local again"));
    assert!(m.vfs.dirty_paths().is_empty());
}

#[test]
fn staged_close_groups_commits_and_survives_a_restart() {
    let mut env = Env::new();
    env.create_dataset("w5");
    let before = env.commit_count("w5");
    let opts = env.write_opts(false);
    let m = env.mount_with("datasets/local/w5", opts);
    let root = m.mountpoint.clone();
    std::fs::create_dir(root.join("many")).unwrap();
    for i in 0..300 {
        std::fs::write(root.join(format!("many/{i:04}.txt")), format!("file {i}\n")).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !m.vfs.dirty_paths().is_empty() || env.hub_files("w5").len() < 300 {
        assert!(Instant::now() < deadline, "group commits never finished");
        std::thread::sleep(Duration::from_millis(300));
    }
    let commits = env.commit_count("w5") - before;
    assert!(commits <= 10, "300 closes made {commits} commits");
    assert_eq!(env.hub_files("w5")["many/0123.txt"].1, sha(b"file 123\n"));

    // Closed but not committed when the mount goes away (Hub refusing commits): the next mount
    // of the same repo and cache dir commits it.
    env.fault(RouteClass::Commit, |f| f.error_rate = 1.0);
    let mut f = std::fs::File::create(root.join("late.bin")).unwrap();
    f.write_all(&pseudo(50_000, 9)).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    drop(f);
    let mut back = Vec::new();
    std::fs::File::open(root.join("late.bin"))
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, pseudo(50_000, 9));
    let vfs = m.vfs.clone();
    m.unmount().unwrap();
    drop(vfs);
    env.hub().clear_faults();
    let opts = env.write_opts(true);
    let m2 = env.mount_with("datasets/local/w5", opts);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.hub_files("w5").contains_key("late.bin") {
        assert!(
            Instant::now() < deadline,
            "the staged file never landed after the remount"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(env.hub_files("w5")["late.bin"].1, sha(&pseudo(50_000, 9)));
    drop(m2);
}

#[test]
fn stalled_cas_times_out_and_the_data_lands_later() {
    let mut env = Env::new();
    env.create_dataset("w7");
    let mut opts = env.write_opts(true);
    if let Some(w) = opts.write.as_mut() {
        w.upload_timeout = Duration::from_secs(3);
    }
    let m = env.mount_with("datasets/local/w7", opts);
    let root = m.mountpoint.clone();
    env.fault(RouteClass::Cas, |f| f.stall_rate = 1.0);
    let data = pseudo(2 << 20, 5);
    let start = Instant::now();
    let mut f = std::fs::File::create(root.join("weights.bin")).unwrap();
    f.write_all(&data).unwrap();
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    // SAFETY: fd was just taken from a File and is closed exactly once.
    let rc = unsafe { libc::close(fd) };
    let err = std::io::Error::last_os_error().raw_os_error();
    let took = start.elapsed();
    assert_eq!((rc, err), (-1, Some(libc::EIO)), "close reports the stalled upload");
    assert!(took < Duration::from_secs(20), "the upload timeout fired: {took:?}");
    assert_eq!(m.vfs.dirty_paths(), ["weights.bin"]);
    env.hub().clear_faults();
    let deadline = Instant::now() + Duration::from_secs(40);
    while !m.vfs.dirty_paths().is_empty() {
        assert!(Instant::now() < deadline, "never landed after the CAS recovered");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(env.hub_files("w7")["weights.bin"].1, sha(&data));
}

#[test]
fn plain_lfs_when_the_hub_offers_no_xet() {
    let mut env = Env::new();
    env.create_dataset("w8");
    env.hub().set_xet_uploads(false);
    let m = env.mount_rw("datasets/local/w8");
    let data = pseudo(3 << 20, 8);
    std::fs::write(m.mountpoint.join("plain.bin"), &data).unwrap();
    assert_eq!(env.hub_files("w8")["plain.bin"].1, sha(&data));
    let head = env.head("w8");
    let entries = env
        .rt
        .block_on(env.client().list_tree_recursive(&Env::repo("w8"), &head, ""))
        .unwrap();
    let entry = entries.iter().find(|e| e.path() == "plain.bin").unwrap();
    match entry {
        TreeEntry::File {
            lfs_sha256, xet_hash, ..
        } => {
            assert_eq!(lfs_sha256.as_deref(), Some(sha(&data).as_str()), "stored as LFS");
            assert!(xet_hash.is_none(), "not through Xet");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn files_open_at_a_crash_are_kept_not_uploaded() {
    let mut env = Env::new();
    env.create_dataset("w9");
    // A mount of the repo ran (its staging dir records the repo)…
    env.mount_rw("datasets/local/w9").unmount().unwrap();
    // …and what a crash leaves: one file closed (final), one still open for writing.
    let dir = env.staging_dir("w9");
    assert!(dir.join("instance.json").is_file());
    {
        // (The mount's committer lets go of the dir's lock just after unmount returns.)
        let deadline = Instant::now() + Duration::from_secs(10);
        let area = loop {
            match hubfs::write::staging::StagingArea::open(&dir) {
                Ok(a) => break a,
                Err(e) if Instant::now() < deadline => {
                    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("{e}"),
            }
        };
        let closed = area.create("done.txt").unwrap();
        closed.add_writer().unwrap();
        closed.write_at(0, b"finished").unwrap();
        // A small file's close journals it at once and leaves the fsyncs to a background
        // thread (a quick close): the crash comes before they ran.
        assert!(closed.remove_writer(true).unwrap(), "a small file closes quickly");
        let open = area.create("sub/half.txt").unwrap();
        open.add_writer().unwrap();
        open.write_at(0, b"half written").unwrap();
        // Another quick close, whose bytes a power cut did not let reach the disk: a small new
        // file's bytes are records of the staging dir's data log, and the last one is torn.
        let torn = area.create("torn.txt").unwrap();
        torn.add_writer().unwrap();
        torn.write_at(0, b"all of it").unwrap();
        assert!(torn.remove_writer(true).unwrap());
        let log = dir.join("data.log");
        let len = std::fs::metadata(&log).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(len - 2)
            .unwrap();
        // The process dies: nothing is dropped cleanly.
        std::mem::forget(torn);
        std::mem::forget(closed);
        std::mem::forget(open);
    }
    let m = env.mount_rw("datasets/local/w9");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !env.hub_files("w9").contains_key("done.txt") {
        assert!(
            Instant::now() < deadline,
            "the closed file was not committed after the restart"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(env.hub_files("w9")["done.txt"].1, sha(b"finished"));
    assert!(
        !env.hub_files("w9").contains_key("sub/half.txt"),
        "an open file is not uploaded"
    );
    assert_eq!(
        std::fs::read(dir.join("recovered/sub/half.txt")).unwrap(),
        b"half written",
        "its bytes are kept for a person to check"
    );
    assert!(!m.mountpoint.join("sub/half.txt").exists());
    assert!(
        !env.hub_files("w9").contains_key("torn.txt"),
        "a torn file is not uploaded"
    );
    assert_eq!(
        std::fs::read(dir.join("recovered/torn.txt")).unwrap(),
        b"",
        "what reached the disk of it: its create, not its write"
    );
}

#[test]
fn read_only_without_write_flag() {
    let mut env = Env::new();
    env.create_dataset("w6");
    let m = env.mount_with("datasets/local/w6", VfsOptions::default());
    assert_eq!(errno_of(std::fs::File::create(m.mountpoint.join("x"))), libc::EROFS);
}

#[test]
fn bad_names_get_clear_errors_and_create_nothing() {
    let mut env = Env::new();
    env.create_dataset("names");
    let m = env.mount_rw("datasets/local/names");
    let root = m.mountpoint.clone();
    let commits_before = env.commit_count("names");
    let create = |name: &std::ffi::OsStr| std::fs::File::create(root.join(name));
    std::fs::write(root.join("src.txt"), b"source").unwrap();

    // 255 bytes is the longest name: it works and lands under that name.
    let longest = "é".repeat(127) + "x"; // 255 bytes of UTF-8
    assert_eq!(longest.len(), 255);
    std::fs::write(root.join(&longest), b"long").unwrap();
    // 256 bytes: ENAMETOOLONG for every way of making or finding a name.
    let too_long = "a".repeat(256);
    assert_eq!(errno_of(create(too_long.as_ref())), libc::ENAMETOOLONG);
    assert_eq!(errno_of(std::fs::create_dir(root.join(&too_long))), libc::ENAMETOOLONG);
    assert_eq!(
        errno_of(std::fs::rename(root.join("src.txt"), root.join(&too_long))),
        libc::ENAMETOOLONG
    );
    assert_eq!(errno_of(std::fs::metadata(root.join(&too_long))), libc::ENAMETOOLONG);

    // `.` and `..` are the kernel's: they never reach the Hub as names.
    assert_eq!(errno_of(std::fs::create_dir(root.join("."))), libc::EEXIST);
    assert_eq!(errno_of(std::fs::create_dir(root.join("sub/.."))), libc::ENOENT);
    assert_eq!(errno_of(create(".".as_ref())), libc::EISDIR);
    assert_eq!(errno_of(std::fs::remove_dir(root.join("."))), libc::EINVAL);

    // Control characters: the Hub cannot store them, so EINVAL before anything is staged.
    for bad in ["new\nline.txt", "tab\there", "bell\x07", "esc\x1b[0m"] {
        assert_eq!(errno_of(create(bad.as_ref())), libc::EINVAL, "create {bad:?}");
        assert_eq!(
            errno_of(std::fs::create_dir(root.join(bad))),
            libc::EINVAL,
            "mkdir {bad:?}"
        );
        assert_eq!(
            errno_of(std::fs::rename(root.join("src.txt"), root.join(bad))),
            libc::EINVAL,
            "rename to {bad:?}"
        );
    }
    // The Hub reserves `.git` at the repo root: EINVAL, not a file that can never be committed.
    assert_eq!(errno_of(create(".git".as_ref())), libc::EINVAL);
    assert_eq!(errno_of(std::fs::create_dir(root.join(".git"))), libc::EINVAL);
    assert_eq!(
        errno_of(std::fs::rename(root.join("src.txt"), root.join(".git"))),
        libc::EINVAL
    );
    // Names that only look odd are fine.
    for ok in [".github", "..data", "a b #?%&+=.txt", "ünï ♥.bin"] {
        std::fs::write(root.join(ok), ok.as_bytes()).unwrap();
    }

    // Nothing half-created: the mount lists exactly the good names, nothing is left dirty or
    // failing, and the Hub holds exactly those files.
    let mut listed: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != ".gitattributes")
        .collect();
    listed.sort();
    let mut want = vec![
        longest.clone(),
        ".github".into(),
        "..data".into(),
        "a b #?%&+=.txt".into(),
        "ünï ♥.bin".into(),
        "src.txt".into(),
    ];
    want.sort();
    assert_eq!(listed, want);
    let status = m.vfs.status_report().unwrap();
    assert!(status.dirty.is_empty(), "nothing dirty: {:?}", status.dirty);
    assert!(status.last_error.is_none(), "no upload error: {:?}", status.last_error);
    let hub: Vec<String> = env.hub_files("names").into_keys().collect();
    assert_eq!(hub, want);
    assert_eq!(
        env.commit_count("names"),
        commits_before + want.len(),
        "one commit per good file"
    );
}

/// The kernel keeps a file's cached pages at open only when nothing but the content it opens
/// could have filled them. A handle opened on the old content that stays open across an overwrite
/// follows the file (it reads the new bytes, as on a local filesystem), so it cannot fill the page
/// cache with old bytes; and a later open of the new content must not keep any such pages.
#[test]
fn an_old_handle_does_not_leave_stale_pages_behind() {
    let mut env = Env::new();
    env.create_dataset("stale");
    let m = env.mount_rw("datasets/local/stale");
    let path = m.mountpoint.join("f.bin");
    let old = pseudo(256 << 10, 1);
    std::fs::write(&path, &old).unwrap();
    let mut new = old.clone();
    new[..4096].copy_from_slice(&pseudo(4096, 2));

    let mut h1 = std::fs::File::open(&path).unwrap();
    {
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&new[..4096], 0).unwrap();
    }
    assert_eq!(env.hub_files("stale")["f.bin"].1, sha(&new), "the overwrite landed");
    // Opens the new content (the kernel drops its cached pages), then reads through the handle
    // opened on the old content.
    let h2 = std::fs::File::open(&path).unwrap();
    let mut through_old = Vec::new();
    h1.read_to_end(&mut through_old).unwrap();
    drop((h1, h2));

    let again = std::fs::read(&path).unwrap();
    assert_eq!(
        sha(&through_old),
        sha(&new),
        "a descriptor opened before the overwrite reads the file's current bytes"
    );
    assert_eq!(
        sha(&again),
        sha(&new),
        "the new content, not pages of the old handle (old content: {})",
        sha(&old)
    );
}

/// A file renamed away and straight back while the commit of the first rename is in flight: that
/// commit deletes the original path, so the file must end up there again, not in neither place.
#[test]
fn renamed_back_while_the_move_away_is_being_committed() {
    let mut env = Env::new();
    env.create_dataset("back");
    let m = env.mount_rw("datasets/local/back");
    let root = m.mountpoint.clone();
    std::fs::write(root.join("a.txt"), b"stays\n").unwrap();
    env.fault(RouteClass::Commit, |f| f.latency_ms = 1500);
    std::fs::rename(root.join("a.txt"), root.join("b.txt")).unwrap();
    // The background round starts after the quiet period (200 ms) and waits on the slow commit.
    std::thread::sleep(Duration::from_millis(700));
    std::fs::rename(root.join("b.txt"), root.join("a.txt")).unwrap();
    env.fault(RouteClass::Commit, |_| {});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let _ = env.rt.block_on(m.vfs.sync_all());
        let st = m.vfs.status_report().unwrap();
        if st.dirty.is_empty() && st.pending_namespace_changes == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "never settled: {st:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"stays\n");
    assert!(!root.join("b.txt").exists());
    let hub: Vec<String> = env.hub_files("back").into_keys().collect();
    assert_eq!(hub, vec!["a.txt".to_string()]);
}

/// `--close stage`: a closed LFS-sized file starts uploading at once, before any commit, and the
/// round that commits it neither asks preupload nor uploads it again: the Hub's write calls are
/// the close's preupload and the commit.
#[test]
fn staged_close_uploads_in_the_background_once() {
    let mut env = Env::new();
    env.create_dataset("w10");
    let before = env.commit_count("w10");
    let mut opts = env.write_opts(false);
    if let Some(w) = opts.write.as_mut() {
        // Long enough that the upload seen below cannot be the round's.
        w.quiet_period = Duration::from_secs(4);
        w.max_batch_delay = Duration::from_secs(8);
    }
    let m = env.mount_with("datasets/local/w10", opts);
    let writes = env.hub().stats(RouteClass::Commit).requests;
    let data = pseudo(3 << 20, 21);
    std::fs::write(m.mountpoint.join("shard.bin"), &data).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while m.vfs.status_report().unwrap().bytes_uploaded < data.len() as u64 {
        assert!(Instant::now() < deadline, "the upload did not start at close");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(env.commit_count("w10"), before, "uploaded before any commit");
    assert_eq!(m.vfs.dirty_paths(), ["shard.bin"]);
    wait_clean(&m);
    assert_eq!(env.hub_files("w10")["shard.bin"].1, sha(&data));
    assert_eq!(
        env.hub().stats(RouteClass::Commit).requests - writes,
        2,
        "one preupload at close and one commit; the round asked again"
    );
}

/// `--close stage` with a slow CAS: the round starts while the upload begun at close still runs,
/// and waits for it instead of snapshotting and uploading the file itself.
#[test]
fn a_round_waits_for_the_upload_started_at_close() {
    let mut env = Env::new();
    env.create_dataset("w11");
    let m = env.mount_with("datasets/local/w11", env.write_opts(false));
    let writes = env.hub().stats(RouteClass::Commit).requests;
    env.fault(RouteClass::Cas, |f| f.latency_ms = 1500);
    let data = pseudo(2 << 20, 22);
    std::fs::write(m.mountpoint.join("slow.bin"), &data).unwrap();
    wait_clean(&m);
    env.hub().clear_faults();
    assert_eq!(env.hub_files("w11")["slow.bin"].1, sha(&data));
    assert_eq!(
        env.hub().stats(RouteClass::Commit).requests - writes,
        2,
        "one preupload at close and one commit; the round uploaded the file again"
    );
}

fn wait_clean(m: &hubfs::process::session::Mounted) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !m.vfs.dirty_paths().is_empty() {
        assert!(Instant::now() < deadline, "never committed");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A long stream of closes commits as it goes: once a whole commit's worth is closed (500 files
/// while the default budget's burst is full), a round goes without waiting for the stream to
/// pause, and carries every file closed by then. With early commits off (`--commit-every`, which promises
/// one commit per period) the same closes wait for the period, and a sync then commits them all
/// at once.
#[test]
fn a_full_commits_worth_of_closes_commits_before_the_stream_pauses() {
    for early in [true, false] {
        let mut env = Env::new();
        let name = if early { "full-early" } else { "full-period" };
        env.create_dataset(name);
        let before = env.commit_count(name);
        let mut opts = env.write_opts(false);
        if let Some(w) = opts.write.as_mut() {
            // Far longer than the test: only a full batch can start a round.
            w.quiet_period = Duration::from_secs(120);
            w.max_batch_delay = Duration::from_secs(120);
            w.early_full_commits = early;
            w.commit_budget = hubfs::vfs::BudgetSpec::parse("64/3600").unwrap();
        }
        let m = env.mount_with(&format!("datasets/local/{name}"), opts);
        for i in 0..520 {
            std::fs::write(
                m.mountpoint.join(format!("row-{i:04}.json")),
                format!("{{\"id\": {i}}}\n"),
            )
            .unwrap();
        }
        if !early {
            std::thread::sleep(Duration::from_secs(3));
            assert_eq!(env.commit_count(name), before, "a commit went before the period");
            assert_eq!(m.vfs.dirty_paths().len(), 520);
            // A sync ends the stream: one commit takes all 520, not the 500 a commit carries
            // while the stream lasts (a second commit for the last 20 would spend the budget).
            env.rt.block_on(m.vfs.sync_all()).unwrap();
            assert_eq!(env.commit_count(name), before + 1, "one commit for the whole stream");
            assert!(m.vfs.dirty_paths().is_empty(), "{:?} left", m.vfs.dirty_paths().len());
            assert_eq!(env.hub_files(name).len(), 520);
            continue;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while env.commit_count(name) == before {
            assert!(Instant::now() < deadline, "no commit while 520 closed files waited");
            std::thread::sleep(Duration::from_millis(100));
        }
        let on_hub = env.hub_files(name);
        assert!(
            (500..=520).contains(&on_hub.len()),
            "the first commit carries what was closed once 500 were: {}",
            on_hub.len()
        );
        for (path, (size, _)) in &on_hub {
            let i: usize = path["row-".len()..path.len() - ".json".len()].parse().unwrap();
            assert_eq!(*size, format!("{{\"id\": {i}}}\n").len() as u64, "{path}");
        }
        // Any left are the tail's: they wait for the period (no second early commit).
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(env.commit_count(name), before + 1);
        assert_eq!(m.vfs.dirty_paths().len(), 520 - on_hub.len());
    }
}

/// A large file is stored as xorbs of at most 8 MiB (the mount's cut, see `write::upload`), not
/// the crates' 64 MiB: the Hub's reconstruction of a 20 MiB file written through the mount lists
/// at least three xorbs, none holding more than 8 MiB of it, and the bytes come back whole.
#[test]
fn a_large_file_lands_as_small_xorbs() {
    let mut env = Env::new();
    env.create_dataset("w12");
    let m = env.mount_rw("datasets/local/w12");
    let data = pseudo(20 << 20, 23);
    std::fs::write(m.mountpoint.join("big.bin"), &data).unwrap();
    wait_clean(&m);
    assert_eq!(env.hub_files("w12")["big.bin"].1, sha(&data));
    let head = env.head("w12");
    let xet = env
        .rt
        .block_on(env.client().list_tree_recursive(&Env::repo("w12"), &head, ""))
        .unwrap()
        .into_iter()
        .find_map(|e| match e {
            TreeEntry::File { path, xet_hash, .. } if path == "big.bin" => xet_hash,
            _ => None,
        })
        .expect("big.bin is stored in Xet");
    let ep = env.hub().endpoint();
    let token = env.hub().write_token().unwrap();
    let terms = env.rt.block_on(async {
        let tok = get_json(&format!("{ep}/api/datasets/local/w12/xet-read-token/main"), &token).await;
        let cas = tok["accessToken"].as_str().unwrap();
        let r = get_json(&format!("{}/v1/reconstructions/{xet}", env.hub().cas_url()), cas).await;
        r["terms"].as_array().expect("terms").clone()
    });
    let xorbs: std::collections::BTreeSet<&str> = terms.iter().map(|t| t["hash"].as_str().unwrap()).collect();
    assert!(xorbs.len() >= 3, "20 MiB in {} xorbs: {terms:?}", xorbs.len());
    let lens: Vec<u64> = terms.iter().map(|t| t["unpacked_length"].as_u64().unwrap()).collect();
    assert!(lens.iter().all(|&l| l <= 8 << 20), "a term over 8 MiB: {lens:?}");
    assert_eq!(lens.iter().sum::<u64>(), data.len() as u64);
}
