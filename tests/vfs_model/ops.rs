//! The operations a case is made of (what the harness drives through VirtualFs and the model
//! answers), and the proptest strategy that generates random sequences of them over a tiny name
//! space.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;

use crate::model::MAX_TARGET;

/// The caller that creates an entry (FUSE: the request's ids); `None` in an op: the mount's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Who {
    pub uid: u32,
    pub gid: u32,
}

/// One time of utimensat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// UTIME_OMIT
    Omit,
    /// UTIME_NOW
    Now,
    At(SystemTime),
}

/// The type mknod is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeType {
    Regular,
    Fifo,
    Socket,
    Char(u32),
    Block(u32),
}

impl NodeType {
    /// The S_IFMT bits and device number mknod(2) is given.
    pub fn mode_and_rdev(self) -> (u32, u32) {
        match self {
            NodeType::Regular => (libc::S_IFREG, 0),
            NodeType::Fifo => (libc::S_IFIFO, 0),
            NodeType::Socket => (libc::S_IFSOCK, 0),
            NodeType::Char(r) => (libc::S_IFCHR, r),
            NodeType::Block(r) => (libc::S_IFBLK, r),
        }
    }
}

/// A symlink target (printed short: one is 4,095 bytes long).
#[derive(Clone, PartialEq, Eq)]
pub struct LinkTo(pub String);

impl fmt::Debug for LinkTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() > 40 {
            write!(f, "{:?}... ({} bytes)", &self.0[..8], self.0.len())
        } else {
            write!(f, "{:?}", self.0)
        }
    }
}

/// What an operation is aimed at: an open handle (by slot) or a path.
#[derive(Debug, Clone)]
pub enum Target {
    Handle(usize),
    Path(String),
}

#[derive(Debug, Clone)]
pub enum Op {
    /// open(O_CREAT [|O_EXCL] [|O_TRUNC] | O_RDWR, mode) by `who`; keeps the handle.
    Create {
        path: String,
        exclusive: bool,
        truncate: bool,
        mode: Option<u32>,
        who: Option<Who>,
    },
    /// open(O_RDWR [|O_TRUNC]) of an existing path; keeps the handle.
    OpenWrite {
        path: String,
        truncate: bool,
    },
    /// open(O_RDONLY) of an existing path; keeps the handle (writes through it are EBADF).
    OpenRead {
        path: String,
    },
    Write {
        h: usize,
        offset: u64,
        len: usize,
        seed: u8,
    },
    /// ftruncate (handle) or truncate (path).
    Truncate {
        target: Target,
        size: u64,
    },
    /// pread through a handle, or open(O_RDONLY) + pread + close of a path.
    Read {
        target: Target,
        offset: u64,
        len: u32,
    },
    Flush {
        h: usize,
    },
    Fsync {
        h: usize,
    },
    /// close(): flush, then release.
    Close {
        h: usize,
    },
    Rename {
        from: String,
        to: String,
        noreplace: bool,
        exchange: bool,
    },
    Unlink {
        path: String,
    },
    /// mkdir(path, mode) by `who` (the mode as the kernel passes it on: umask applied, setuid and
    /// setgid dropped).
    Mkdir {
        path: String,
        mode: Option<u32>,
        who: Option<Who>,
    },
    Rmdir {
        path: String,
    },
    Readdir {
        path: String,
    },
    /// stat(2): follows a last symlink.
    Stat {
        path: String,
    },
    /// chmod(2).
    Chmod {
        path: String,
        mode: u32,
    },
    /// chown(2), or lchown(2) when not `follow`.
    Chown {
        path: String,
        uid: Option<u32>,
        gid: Option<u32>,
        follow: bool,
    },
    /// utimensat(2), with AT_SYMLINK_NOFOLLOW when not `follow`.
    Utimens {
        path: String,
        atime: SetTime,
        mtime: SetTime,
        follow: bool,
    },
    /// symlink(target, path) by `who`.
    Symlink {
        path: String,
        target: LinkTo,
        who: Option<Who>,
    },
    /// mknod(path, type | mode, rdev) by `who`.
    Mknod {
        path: String,
        kind: NodeType,
        mode: u32,
        who: Option<Who>,
    },
    Readlink {
        path: String,
    },
    /// link(from, to).
    Link {
        from: String,
        to: String,
    },
    /// sync(): commit every pending change now (background commits otherwise land whenever the
    /// quiet period ends).
    Sync,
    /// Waits longer than the slack allowed on "now" times (fixed sequences only).
    Pause,
    /// Close every handle, drain the committer, drop the VirtualFs and open a new one.
    Remount,
}

/// The bytes a write puts down: printable, so most files go inline and holes make the LFS ones.
pub fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| b'a' + ((seed as usize + i * 7) % 26) as u8).collect()
}

/// Paths over a tiny name space (three names, up to three levels, mostly shallow) so that
/// collisions and every error case come up often.
fn path() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec!["a", "b", "c"]);
    prop_oneof![
        5 => name.clone().prop_map(str::to_string),
        5 => (name.clone(), name.clone()).prop_map(|(a, b)| format!("{a}/{b}")),
        1 => (name.clone(), name.clone(), name).prop_map(|(a, b, c)| format!("{a}/{b}/{c}")),
    ]
}

/// A path, or now and then the mount's root (`""`).
fn path_or_root() -> impl Strategy<Value = String> {
    prop_oneof![12 => path(), 1 => Just(String::new())]
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![6 => 0..64u64, 3 => 0..600u64, 1 => 4_000..40_000u64]
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![3 => Just(0u64), 6 => 0..600u64, 1 => 4_000..40_000u64]
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        3 => (0..4usize).prop_map(Target::Handle),
        2 => path().prop_map(Target::Path),
    ]
}

/// The creator of a new entry: mostly the mount's own ids, else another user.
fn who() -> impl Strategy<Value = Option<Who>> {
    prop_oneof![
        3 => Just(None),
        1 => prop::sample::select(vec![(1000, 1000), (1000, 100), (0, 50), (65534, 65534)])
            .prop_map(|(uid, gid)| Some(Who { uid, gid })),
    ]
}

/// Modes for chmod. None both sticky and world-writable: in such a directory Linux's
/// protected_symlinks/protected_regular refuse some follows and opens even to root.
fn chmod_mode() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![
        0o644, 0o600, 0o755, 0o700, 0o777, 0o000, 0o4755, 0o2755, 0o2775, 0o2644, 0o6750, 0o1755, 0o4644,
    ])
}

/// Times for utimensat: old, before 1970, with nanoseconds, past 2038.
fn time() -> impl Strategy<Value = SystemTime> {
    prop::sample::select(vec![
        UNIX_EPOCH,
        UNIX_EPOCH - Duration::new(1, 500_000_000),
        UNIX_EPOCH - Duration::from_secs(315_619_200), // 1960-01-01
        UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789),
        UNIX_EPOCH + Duration::new(1_700_000_000, 1),
        UNIX_EPOCH + Duration::new(2_147_483_655, 999_999_999), // past 2038-01-19
    ])
}

fn set_time() -> impl Strategy<Value = SetTime> {
    prop_oneof![1 => Just(SetTime::Omit), 1 => Just(SetTime::Now), 3 => time().prop_map(SetTime::At)]
}

/// Symlink targets: mostly paths of the name space (relative to the link's directory), some
/// dangling, one empty (ENOENT), one as long as Linux allows and one longer (ENAMETOOLONG).
fn link_target() -> impl Strategy<Value = LinkTo> {
    prop_oneof![
        12 => prop::sample::select(vec!["a", "b", "c", "a/b", "b/c", "c/a/b", "x", "no such file"])
            .prop_map(|t| LinkTo(t.to_string())),
        1 => prop::sample::select(vec![0usize, MAX_TARGET, MAX_TARGET + 1]).prop_map(|n| LinkTo("x".repeat(n))),
    ]
}

fn node_type() -> impl Strategy<Value = NodeType> {
    prop_oneof![
        3 => Just(NodeType::Fifo),
        2 => Just(NodeType::Socket),
        2 => prop::sample::select(vec![0x103u32, 0x440, 0x50000]).prop_map(NodeType::Char),
        1 => prop::sample::select(vec![0x801u32, 0x10300]).prop_map(NodeType::Block),
        1 => Just(NodeType::Regular),
    ]
}

pub fn op() -> impl Strategy<Value = Op> {
    let h = 0..4usize;
    // Modes as the kernel hands them on: umask applied; setgid never asked for (Linux strips it
    // from a caller outside the group), and mkdir keeps permission and sticky bits only.
    let file_mode = prop_oneof![
        3 => Just(None),
        1 => prop::sample::select(vec![0o600, 0o640, 0o755, 0o4755, 0o1644]).prop_map(Some),
    ];
    let dir_mode = prop_oneof![
        3 => Just(None),
        1 => prop::sample::select(vec![0o700, 0o750, 0o775, 0o1755]).prop_map(Some),
    ];
    let new_file =
        (path(), any::<bool>(), any::<bool>(), file_mode, who()).prop_map(|(path, exclusive, truncate, mode, who)| {
            Op::Create {
                path,
                exclusive,
                truncate,
                mode,
                who,
            }
        });
    let ids = prop_oneof![1 => Just(None), 2 => prop::sample::select(vec![0u32, 1000, 65534]).prop_map(Some)];
    let chown = (path_or_root(), ids.clone(), ids, prop::bool::weighted(0.8))
        // chown(-1, -1) is left out: FUSE passes no change on (the ctime it would move is the
        // kernel's request alone).
        .prop_filter("an id to set", |(_, u, g, _)| u.is_some() || g.is_some())
        .prop_map(|(path, uid, gid, follow)| Op::Chown { path, uid, gid, follow });
    let utimens = (path_or_root(), set_time(), set_time(), prop::bool::weighted(0.8))
        // Both UTIME_OMIT: Linux returns 0 without even walking the path.
        .prop_filter("a time to set", |(_, a, m, _)| {
            *a != SetTime::Omit || *m != SetTime::Omit
        })
        .prop_map(|(path, atime, mtime, follow)| Op::Utimens {
            path,
            atime,
            mtime,
            follow,
        });
    prop_oneof![
        6 => new_file,
        3 => (path(), prop::bool::weighted(0.2)).prop_map(|(path, truncate)| Op::OpenWrite { path, truncate }),
        2 => path().prop_map(|path| Op::OpenRead { path }),
        8 => (h.clone(), offset(), 1..200usize, any::<u8>())
            .prop_map(|(h, offset, len, seed)| Op::Write { h, offset, len, seed }),
        3 => (target(), size()).prop_map(|(target, size)| Op::Truncate { target, size }),
        3 => (target(), 0..700u64, 1..400u32).prop_map(|(target, offset, len)| Op::Read { target, offset, len }),
        1 => h.clone().prop_map(|h| Op::Flush { h }),
        1 => h.clone().prop_map(|h| Op::Fsync { h }),
        3 => h.prop_map(|h| Op::Close { h }),
        5 => (path(), path(), prop::bool::weighted(0.2), prop::bool::weighted(0.05))
            // Both flags at once never reach a filesystem: Linux refuses them up front.
            .prop_map(|(from, to, noreplace, exchange)| Op::Rename { from, to, noreplace: noreplace && !exchange, exchange }),
        3 => path().prop_map(|path| Op::Unlink { path }),
        6 => (path(), dir_mode, who()).prop_map(|(path, mode, who)| Op::Mkdir { path, mode, who }),
        3 => path().prop_map(|path| Op::Rmdir { path }),
        1 => path_or_root().prop_map(|path| Op::Readdir { path }),
        1 => path_or_root().prop_map(|path| Op::Stat { path }),
        2 => (path_or_root(), chmod_mode()).prop_map(|(path, mode)| Op::Chmod { path, mode }),
        1 => chown,
        2 => utimens,
        3 => (path(), link_target(), who()).prop_map(|(path, target, who)| Op::Symlink { path, target, who }),
        2 => (path(), node_type(), prop::sample::select(vec![0o644, 0o600, 0o666, 0o4755]), who())
            .prop_map(|(path, kind, mode, who)| Op::Mknod { path, kind, mode, who }),
        2 => path().prop_map(|path| Op::Readlink { path }),
        2 => (path(), path()).prop_map(|(from, to)| Op::Link { from, to }),
        2 => Just(Op::Sync),
        1 => Just(Op::Remount),
    ]
}
