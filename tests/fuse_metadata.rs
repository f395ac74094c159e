//! What a writable mount keeps that the Hub cannot store: modes, owners, times, symlinks, FIFOs and
//! device nodes, through a real FUSE mount (run as root), checked after a commit and a remount, and
//! refused under `--posix strict`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use hubfs::vfs::VfsOptions;

#[path = "common/write_env.rs"]
mod write_env;
use write_env::{Env, errno_of, sha};

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// utimensat(AT_SYMLINK_NOFOLLOW) with atime and mtime as (seconds, nanoseconds).
fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) -> i32 {
    let ts = [
        libc::timespec {
            tv_sec: atime.0,
            tv_nsec: atime.1,
        },
        libc::timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1,
        },
    ];
    // SAFETY: a valid NUL-terminated path and two timespecs that outlive the call.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c(p).as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    if rc == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }
}

fn mknod(p: &Path, mode: u32, dev: libc::dev_t) -> i32 {
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mknod(c(p).as_ptr(), mode, dev) };
    if rc == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }
}

/// What `ls -l` and `stat` would show of each entry the test made.
fn snapshot(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in [
        "data.bin", "exec.sh", "old.txt", "private", "link", "fifo", "null", "sock",
    ] {
        let p = root.join(name);
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            out.push((name.to_string(), "missing".into()));
            continue;
        };
        let ft = m.file_type();
        let kind = if ft.is_symlink() {
            format!("symlink->{}", std::fs::read_link(&p).unwrap().display())
        } else if ft.is_fifo() {
            "fifo".into()
        } else if ft.is_char_device() {
            format!("char {}:{}", libc::major(m.rdev()), libc::minor(m.rdev()))
        } else if ft.is_socket() {
            "socket".into()
        } else if ft.is_dir() {
            "dir".into()
        } else {
            format!("file {}", m.size())
        };
        out.push((
            name.to_string(),
            format!(
                "{kind} mode {:o} owner {}:{} mtime {}.{:09}",
                m.mode() & 0o7777,
                m.uid(),
                m.gid(),
                m.mtime(),
                m.mtime_nsec()
            ),
        ));
    }
    out
}

#[test]
fn modes_owners_times_and_special_files_survive_a_commit_and_a_remount() {
    let mut env = Env::new();
    env.create_dataset("meta1");
    let m = env.mount_rw("datasets/local/meta1");
    let root = m.mountpoint.clone();

    std::fs::write(root.join("data.bin"), b"data").unwrap();
    std::fs::write(root.join("exec.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(root.join("exec.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(root.join("old.txt"), b"old").unwrap();
    assert_eq!(
        set_times(&root.join("old.txt"), (1_000_000_000, 5), (981_173_106, 123_456_789)),
        0
    );
    std::os::unix::fs::chown(root.join("data.bin"), Some(1234), Some(5678)).unwrap();
    std::fs::create_dir(root.join("private")).unwrap();
    std::fs::set_permissions(root.join("private"), PermissionsExt::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("data.bin", root.join("link")).unwrap();
    assert_eq!(set_times(&root.join("link"), (5, 0), (7, 0)), 0, "lutimes on a symlink");
    assert_eq!(mknod(&root.join("fifo"), libc::S_IFIFO | 0o640, 0), 0);
    assert_eq!(mknod(&root.join("null"), libc::S_IFCHR | 0o640, libc::makedev(1, 3)), 0);
    assert_eq!(mknod(&root.join("sock"), libc::S_IFSOCK | 0o600, 0), 0);
    assert_eq!(
        std::fs::read(root.join("link")).unwrap(),
        b"data",
        "reads follow the symlink"
    );
    let before = snapshot(&root);
    let want = [
        ("data.bin", "file 4 mode 644 owner 1234:5678"),
        ("exec.sh", "file 18 mode 755 owner 0:0"),
        ("old.txt", "file 3 mode 644 owner 0:0 mtime 981173106.123456789"),
        ("private", "dir mode 700 owner 0:0"),
        ("link", "symlink->data.bin mode 777 owner 0:0 mtime 7.000000000"),
        ("fifo", "fifo mode 640 owner 0:0"),
        ("null", "char 1:3 mode 640 owner 0:0"),
        ("sock", "socket mode 600 owner 0:0"),
    ];
    for ((name, got), (wname, prefix)) in before.iter().zip(want) {
        assert_eq!(name, wname);
        assert!(got.starts_with(prefix), "{name}: {got} (wanted {prefix}…)");
    }

    let report = m.vfs.status_report().unwrap();
    assert_eq!(
        (report.local_only_entries, report.metadata_changes),
        (4, 3),
        "status counts link, fifo, null, sock; and data.bin's owner, exec.sh's and private's modes"
    );

    // The regular files reach the Hub; the rest never does.
    env.rt.block_on(m.vfs.sync_all()).unwrap();
    let hub = env.hub_files("meta1");
    let names: Vec<&str> = hub.keys().map(String::as_str).collect();
    assert_eq!(names, ["data.bin", "exec.sh", "old.txt"]);
    assert_eq!(hub["data.bin"].1, sha(b"data"));
    assert_eq!(snapshot(&root), before, "a commit changes nothing the mount shows");

    // A remount with the same cache dir shows the same.
    m.unmount().unwrap();
    let m = env.mount_rw("datasets/local/meta1");
    assert_eq!(snapshot(&m.mountpoint), before, "after a remount");
    assert_eq!(
        std::fs::read_link(m.mountpoint.join("link")).unwrap(),
        Path::new("data.bin")
    );
    assert!(
        m.mountpoint.join("private").is_dir(),
        "an empty local directory is kept"
    );

    // Removing and renaming special entries.
    std::fs::rename(m.mountpoint.join("fifo"), m.mountpoint.join("private/fifo2")).unwrap();
    std::fs::remove_file(m.mountpoint.join("sock")).unwrap();
    assert!(
        std::fs::symlink_metadata(m.mountpoint.join("private/fifo2"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert_eq!(
        errno_of(std::fs::symlink_metadata(m.mountpoint.join("sock"))),
        libc::ENOENT
    );
    m.unmount().unwrap();
    let m = env.mount_rw("datasets/local/meta1");
    assert!(
        std::fs::symlink_metadata(m.mountpoint.join("private/fifo2"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert_eq!(
        errno_of(std::fs::symlink_metadata(m.mountpoint.join("sock"))),
        libc::ENOENT
    );
    assert_eq!(
        errno_of(std::fs::symlink_metadata(m.mountpoint.join("fifo"))),
        libc::ENOENT
    );
}

#[test]
fn a_symlink_renamed_over_a_hub_file_deletes_it_on_the_hub() {
    let mut env = Env::new();
    env.create_dataset("meta2");
    env.remote_commit("meta2", "a.txt", "from the hub");
    let m = env.mount_rw("datasets/local/meta2");
    let root = m.mountpoint.clone();
    std::os::unix::fs::symlink("elsewhere", root.join("l")).unwrap();
    std::fs::rename(root.join("l"), root.join("a.txt")).unwrap();
    assert_eq!(std::fs::read_link(root.join("a.txt")).unwrap(), Path::new("elsewhere"));
    env.rt.block_on(m.vfs.sync_all()).unwrap();
    assert!(env.hub_files("meta2").is_empty(), "the Hub's a.txt is deleted");
    assert_eq!(std::fs::read_link(root.join("a.txt")).unwrap(), Path::new("elsewhere"));
    m.unmount().unwrap();
    let m = env.mount_rw("datasets/local/meta2");
    assert_eq!(
        std::fs::read_link(m.mountpoint.join("a.txt")).unwrap(),
        Path::new("elsewhere")
    );
}

#[test]
fn posix_strict_refuses_what_the_hub_cannot_store() {
    let mut env = Env::new();
    env.create_dataset("meta3");
    let mut opts: VfsOptions = env.write_opts(true);
    if let Some(w) = opts.write.as_mut() {
        w.posix_strict = true;
    }
    let m = env.mount_with("datasets/local/meta3", opts);
    let root = m.mountpoint.clone();
    std::fs::write(root.join("f.txt"), b"x").unwrap();
    let mode = std::fs::metadata(root.join("f.txt")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o644);
    assert_eq!(
        errno_of(std::fs::set_permissions(
            root.join("f.txt"),
            PermissionsExt::from_mode(0o600)
        )),
        libc::EPERM
    );
    assert_eq!(
        errno_of(std::fs::set_permissions(
            root.join("f.txt"),
            PermissionsExt::from_mode(0o644)
        )),
        0,
        "chmod to the mode it has is fine"
    );
    assert_eq!(
        errno_of(std::os::unix::fs::chown(root.join("f.txt"), Some(1234), None)),
        libc::EPERM
    );
    assert_eq!(errno_of(std::os::unix::fs::symlink("x", root.join("l"))), libc::EPERM);
    assert_eq!(mknod(&root.join("p"), libc::S_IFIFO | 0o644, 0), libc::EPERM);
    assert_eq!(
        errno_of(std::fs::hard_link(root.join("f.txt"), root.join("h"))),
        libc::EPERM,
        "--posix strict refuses hard links"
    );
}

#[test]
fn file_times_last_commit_shows_each_files_last_commit_date() {
    let mut env = Env::new();
    env.create_dataset("meta4");
    env.remote_commit("meta4", "old.txt", "first");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    env.remote_commit("meta4", "new.txt", "second");
    let mtime = |root: &Path, name: &str| std::fs::metadata(root.join(name)).unwrap().mtime();
    let mut cfg = env.client_cfg();
    cfg.tree_expand = true;
    let m = env.mount_with_client("datasets/local/meta4", VfsOptions::default(), cfg);
    let (old, new) = (mtime(&m.mountpoint, "old.txt"), mtime(&m.mountpoint, "new.txt"));
    assert!(old < new, "last-commit: old.txt {old} before new.txt {new}");
    let listed: Vec<i64> = ["old.txt", "new.txt"]
        .iter()
        .map(|n| {
            std::fs::read_dir(&m.mountpoint)
                .unwrap()
                .map(|e| e.unwrap())
                .find(|e| e.file_name() == *n)
                .unwrap()
                .metadata()
                .unwrap()
                .mtime()
        })
        .collect();
    assert_eq!(listed, [old, new], "listing and lookup agree");
    let m2 = env.mount_with("datasets/local/meta4", VfsOptions::default());
    assert_eq!(
        mtime(&m2.mountpoint, "old.txt"),
        mtime(&m2.mountpoint, "new.txt"),
        "revision (default): every file shows the commit's time"
    );
}
