//! Hard links on a writable FUSE mount (run as root): one inode under several names, writes through
//! one name seen through the others, unlink and rename rules, every name on the Hub with the file's
//! content (uploaded once), and the link kept across a remount with the same cache dir.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

#[path = "common/write_env.rs"]
mod write_env;
use write_env::{Env, errno_of, pseudo, sha};

fn ino_nlink(p: &Path) -> (u64, u64) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.ino(), m.nlink())
}

#[test]
fn links_share_one_inode_and_reach_the_hub_under_every_name() {
    let mut env = Env::new();
    env.create_dataset("links1");
    let m = env.mount_rw("datasets/local/links1");
    let root = m.mountpoint.clone();
    // Large enough to go through Xet (not inline): the second name must cost no upload.
    let big = pseudo(3 << 20, 7);
    std::fs::write(root.join("a.bin"), &big).unwrap();
    let uploaded = m.vfs.status_report().unwrap().bytes_uploaded;
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::hard_link(root.join("a.bin"), root.join("d/b.bin")).unwrap();
    std::fs::hard_link(root.join("a.bin"), root.join("c.bin")).unwrap();
    let (ino, nlink) = ino_nlink(&root.join("a.bin"));
    assert_eq!(nlink, 3);
    assert_eq!(ino_nlink(&root.join("d/b.bin")), (ino, 3), "one inode");
    assert_eq!(
        errno_of(std::fs::hard_link(root.join("a.bin"), root.join("c.bin"))),
        libc::EEXIST
    );
    assert_eq!(
        errno_of(std::fs::hard_link(root.join("d"), root.join("e"))),
        libc::EPERM,
        "no links to directories"
    );

    // Metadata is the inode's: a chmod through one name shows through the others.
    std::fs::set_permissions(root.join("c.bin"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert_eq!(std::fs::metadata(root.join("d/b.bin")).unwrap().mode() & 0o7777, 0o600);

    env.rt.block_on(m.vfs.sync_all()).unwrap();
    let hub = env.hub_files("links1");
    for name in ["a.bin", "c.bin", "d/b.bin"] {
        assert_eq!(hub[name], (big.len() as u64, sha(&big)), "{name} on the Hub");
    }
    assert_eq!(
        m.vfs.status_report().unwrap().bytes_uploaded,
        uploaded,
        "the other names uploaded nothing"
    );

    // A write through one name is seen through every other, before and after its commit.
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(root.join("d/b.bin"))
            .unwrap();
        f.write_all(b"tail").unwrap();
    }
    let mut want = big.clone();
    want.extend_from_slice(b"tail");
    for name in ["a.bin", "c.bin", "d/b.bin"] {
        assert_eq!(std::fs::read(root.join(name)).unwrap(), want, "{name} after the write");
    }
    env.rt.block_on(m.vfs.sync_all()).unwrap();
    let hub = env.hub_files("links1");
    for name in ["a.bin", "c.bin", "d/b.bin"] {
        assert_eq!(hub[name].1, sha(&want), "{name} on the Hub after the write");
    }
    let report = m.vfs.status_report().unwrap();
    assert_eq!(report.hard_links, 3, "status counts the names");

    // rename of a name onto another name of the same inode does nothing.
    std::fs::rename(root.join("c.bin"), root.join("a.bin")).unwrap();
    assert!(root.join("c.bin").exists() && root.join("a.bin").exists());
    assert_eq!(ino_nlink(&root.join("a.bin")), (ino, 3));

    // unlink of one name keeps the others; a rename over a name drops that name only.
    std::fs::remove_file(root.join("a.bin")).unwrap();
    assert_eq!(ino_nlink(&root.join("c.bin")), (ino, 2));
    std::fs::write(root.join("x.txt"), b"other").unwrap();
    std::fs::rename(root.join("x.txt"), root.join("c.bin")).unwrap();
    assert_eq!(ino_nlink(&root.join("d/b.bin")), (ino, 1));
    assert_eq!(std::fs::read(root.join("d/b.bin")).unwrap(), want);
    std::fs::hard_link(root.join("d/b.bin"), root.join("again.bin")).unwrap();
    env.rt.block_on(m.vfs.sync_all()).unwrap();
    let hub = env.hub_files("links1");
    let names: Vec<&str> = hub.keys().map(String::as_str).collect();
    assert_eq!(names, ["again.bin", "c.bin", "d/b.bin"]);
    assert_eq!(hub["c.bin"].1, sha(b"other"));
    assert_eq!(hub["again.bin"].1, sha(&want));

    // A remount with the same cache dir keeps the link: count, number, shared writes.
    m.unmount().unwrap();
    let m = env.mount_rw("datasets/local/links1");
    let root = m.mountpoint.clone();
    let (ino2, n) = ino_nlink(&root.join("again.bin"));
    assert_eq!(n, 2);
    assert_eq!(ino_nlink(&root.join("d/b.bin")), (ino2, 2));
    std::fs::write(root.join("again.bin"), b"rewritten").unwrap();
    assert_eq!(std::fs::read(root.join("d/b.bin")).unwrap(), b"rewritten");
    env.rt.block_on(m.vfs.sync_all()).unwrap();
    let hub = env.hub_files("links1");
    assert_eq!(hub["d/b.bin"].1, sha(b"rewritten"));
    assert_eq!(hub["again.bin"].1, sha(b"rewritten"));
}

#[test]
fn special_files_link_and_a_hub_change_splits_a_link() {
    let mut env = Env::new();
    env.create_dataset("links2");
    env.remote_commit("links2", "hub.txt", "from the hub");
    let m = env.mount_rw("datasets/local/links2");
    let root = m.mountpoint.clone();
    // A link of a FIFO: local only, like the FIFO, with its type and mode.
    let fifo = std::ffi::CString::new(root.join("p").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    std::fs::hard_link(root.join("p"), root.join("q")).unwrap();
    let q = std::fs::symlink_metadata(root.join("q")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&q.file_type()));
    assert_eq!((q.nlink(), q.mode() & 0o7777), (2, 0o640));
    // A link of a file the Hub has: committed by reference.
    std::fs::hard_link(root.join("hub.txt"), root.join("copy.txt")).unwrap();
    env.rt.block_on(m.vfs.sync_all()).unwrap();
    let hub = env.hub_files("links2");
    let names: Vec<&str> = hub.keys().map(String::as_str).collect();
    assert_eq!(names, ["copy.txt", "hub.txt"], "FIFOs never reach the Hub");
    assert_eq!(hub["copy.txt"].1, sha(b"from the hub"));
    m.unmount().unwrap();

    // Another client changes one name: at the next mount the names are two files.
    env.remote_commit("links2", "copy.txt", "changed elsewhere");
    let m = env.mount_rw("datasets/local/links2");
    let root = m.mountpoint.clone();
    assert_eq!(ino_nlink(&root.join("hub.txt")).1, 1);
    assert_eq!(ino_nlink(&root.join("copy.txt")).1, 1);
    assert_ne!(ino_nlink(&root.join("hub.txt")).0, ino_nlink(&root.join("copy.txt")).0);
    assert_eq!(std::fs::read(root.join("copy.txt")).unwrap(), b"changed elsewhere");
    std::fs::write(root.join("hub.txt"), b"mine").unwrap();
    assert_eq!(std::fs::read(root.join("copy.txt")).unwrap(), b"changed elsewhere");
    assert_eq!(ino_nlink(&root.join("q")).1, 2, "the FIFO's link is kept");
}
