//! Attributes: what the Hub knows (kind, size) laid under what the mount keeps itself (modes, owners,
//! times, special files; `write::metadata`), with the POSIX rules for when times move.
//!
//! A path without a record shows the defaults: 0644 files and 0755 directories on a writable mount
//! (0444/0555 read-only), the mounting user's ids, and the commit's time (a staged file: its last
//! write). A record is made the first time anything about a path changes through the mount, and
//! from then on it is what the mount shows.

use std::time::SystemTime;

use super::remote::FileMeta;
use super::{Attr, Found, Ino, Kind, VirtualFs};
use crate::write::metadata::{Meta, MetaStore, Special, Stamp};

/// Who makes a change: the owner a new entry gets (FUSE: the request's ids; NFS: AUTH_UNIX).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

/// What a new entry gets besides its name: its mode (type bits ignored; the kernel has applied the
/// umask) and its creator (`None`: the mount's own ids).
#[derive(Debug, Clone, Copy, Default)]
pub struct NewNode {
    pub mode: Option<u32>,
    pub caller: Option<Caller>,
}

pub(super) const S_ISGID: u32 = 0o2000;

impl VirtualFs {
    /// The metadata store of a writable mount.
    pub(super) fn store(&self) -> Option<&MetaStore> {
        self.writer.as_ref().map(|w| &w.meta)
    }

    /// The record the mount keeps for `path` (mount-relative).
    pub(super) fn record(&self, path: &str) -> Option<Meta> {
        self.store()?.get(&self.remote_path(path))
    }

    /// Whether `--posix strict` refuses what the Hub cannot store.
    pub(super) fn strict(&self) -> bool {
        self.writer.as_ref().is_some_and(|w| w.opts.posix_strict)
    }

    /// Attributes of an entry found as `found` at `path` (`None`: unlinked while open, no record).
    pub(crate) fn attr_at(&self, ino: Ino, path: Option<&str>, found: &Found) -> Attr {
        let rec = path.and_then(|p| self.record(p));
        self.attr_with(ino, found, rec.as_ref())
    }

    /// `attr_at` with the record already in hand.
    pub(super) fn attr_with(&self, ino: Ino, found: &Found, rec: Option<&Meta>) -> Attr {
        let w = self.writer.is_some();
        let mut a = match found {
            Found::Dir => self.bare_attr(ino, Kind::Dir, 0, if w { 0o755 } else { 0o555 }, 2, self.mtime),
            Found::Remote(m) => self.remote_attr(ino, m),
            Found::Local(d) => self.bare_attr(ino, Kind::File, d.size(), 0o644, 1, d.mtime()),
            Found::Special => self.bare_attr(ino, Kind::Fifo, 0, 0o644, 1, self.mtime),
        };
        // A directory's record never describes a file at the same path, nor the reverse.
        let Some(r) = rec.filter(|r| r.dir == matches!(found, Found::Dir)) else {
            return a;
        };
        a.perm = (r.mode & 0o7777) as u16;
        a.uid = r.uid;
        a.gid = r.gid;
        a.atime = r.atime.into();
        a.mtime = r.mtime.into();
        a.ctime = r.ctime.into();
        if let (Some(id), Some(s)) = (r.link, self.store()) {
            a.nlink = s.link_count(id).max(1) as u32;
        }
        if let (Found::Special, Some(s)) = (found, &r.special) {
            match s {
                Special::Symlink { target } => {
                    a.kind = Kind::Symlink;
                    a.size = target.len() as u64;
                }
                Special::Fifo => a.kind = Kind::Fifo,
                Special::Socket => a.kind = Kind::Socket,
                Special::Char { rdev } => {
                    a.kind = Kind::CharDevice;
                    a.rdev = *rdev;
                }
                Special::Block { rdev } => {
                    a.kind = Kind::BlockDevice;
                    a.rdev = *rdev;
                }
            }
        }
        a
    }

    /// A Hub file's attributes with no record laid over them (all a read-only mount shows).
    pub(super) fn remote_attr(&self, ino: Ino, m: &FileMeta) -> Attr {
        let perm = if self.writer.is_some() { 0o644 } else { 0o444 };
        self.bare_attr(ino, Kind::File, m.size, perm, 1, m.last_commit.unwrap_or(self.mtime))
    }

    fn bare_attr(&self, ino: Ino, kind: Kind, size: u64, perm: u16, nlink: u32, t: SystemTime) -> Attr {
        Attr {
            ino,
            kind,
            size,
            atime: t,
            mtime: t,
            ctime: t,
            perm,
            nlink,
            uid: self.opts.uid,
            gid: self.opts.gid,
            rdev: 0,
        }
    }

    /// The record `path` would have now: its own, or one made from what it shows.
    pub(super) fn record_or_default(&self, path: &str, found: &Found) -> Meta {
        if let Some(r) = self.record(path).filter(|r| r.dir == matches!(found, Found::Dir)) {
            return r;
        }
        let a = self.attr_with(0, found, None);
        Meta {
            dir: matches!(found, Found::Dir),
            mode: a.perm as u32,
            uid: a.uid,
            gid: a.gid,
            atime: a.atime.into(),
            mtime: a.mtime.into(),
            ctime: a.ctime.into(),
            special: None,
            link: None,
        }
    }

    /// Changes `path`'s record (making one first) and logs it.
    pub(super) fn update_record(&self, path: &str, found: &Found, f: impl FnOnce(&mut Meta)) -> Meta {
        let mut m = self.record_or_default(path, found);
        f(&mut m);
        if let Some(s) = self.store() {
            s.set(&self.remote_path(path), m.clone());
        }
        m
    }

    /// An entry was added to or removed from directory `dir`: its mtime and ctime move. Kept in
    /// memory when the directory already has a record (logged at the next close of a written file
    /// or sync), so a copy of many files logs its directory once per file at most.
    pub(super) fn dir_changed(&self, dir: &str) {
        let Some(s) = self.store() else { return };
        let now = Stamp::now();
        let key = self.remote_path(dir);
        let touched = s.touch(&key, |m| {
            if m.dir {
                m.mtime = now;
                m.ctime = now;
            }
        });
        if !touched {
            self.update_record(dir, &Found::Dir, |m| {
                m.mtime = now;
                m.ctime = now;
            });
        }
    }

    /// A regular file's content or size changed: mtime and ctime move (in memory; logged when the
    /// file is sealed). A Hub file written for the first time gets its record now, so the time of
    /// the write outlives its commit (the Hub's copy would show the revision's time again).
    pub(super) fn content_changed(&self, path: &str) {
        let Some(s) = self.store() else { return };
        let now = Stamp::now();
        let key = self.remote_path(path);
        let touched = s.touch(&key, |m| {
            if !m.dir {
                m.mtime = now;
                m.ctime = now;
            }
        });
        if !touched {
            let m = Meta {
                dir: false,
                mode: 0o644,
                uid: self.opts.uid,
                gid: self.opts.gid,
                atime: Stamp::from(self.mtime),
                mtime: now,
                ctime: now,
                special: None,
                link: None,
            };
            s.set(&key, m);
        }
    }

    /// The record of a new entry at `path`: its mode and owner as the creator asked (a setgid
    /// parent gives its group, and to a new directory its setgid bit), every time now.
    pub(super) fn new_record(&self, path: &str, dir: bool, node: NewNode, special: Option<Special>) -> Meta {
        let now = Stamp::now();
        let parent = path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        let parent_rec = self.record(parent).filter(|r| r.dir);
        let strict = self.strict() && special.is_none();
        let default_mode = if dir { 0o755 } else { 0o644 };
        let mut mode = match node.mode {
            Some(m) if !strict => m & 0o7777,
            _ => default_mode,
        };
        let (mut uid, mut gid) = match node.caller {
            Some(c) if !strict => (c.uid, c.gid),
            _ => (self.opts.uid, self.opts.gid),
        };
        if let Some(p) = parent_rec
            && p.mode & S_ISGID != 0
            && !strict
        {
            gid = p.gid;
            if dir {
                mode |= S_ISGID;
            }
        }
        if strict {
            uid = self.opts.uid;
        }
        let m = Meta {
            dir,
            mode,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            special,
            link: None,
        };
        if let Some(s) = self.store() {
            s.set(&self.remote_path(path), m.clone());
        }
        m
    }

    /// The records of `path` and below are gone with it.
    pub(super) fn drop_records(&self, path: &str) {
        if let Some(s) = self.store() {
            s.remove_tree(&self.remote_path(path));
        }
    }

    /// The records of `from` and below follow a rename; the moved entry's ctime moves.
    pub(super) fn move_records(&self, from: &str, to: &str, found: &Found) {
        let Some(s) = self.store() else { return };
        s.rename(&self.remote_path(from), &self.remote_path(to));
        let now = Stamp::now();
        self.update_record(to, found, |m| m.ctime = now);
    }

    /// Makes the metadata log durable (with a file's seal, fsync, unmount).
    pub(super) fn sync_records(&self) -> std::io::Result<()> {
        match self.store() {
            Some(s) => s.sync(),
            None => Ok(()),
        }
    }

    /// Logs the times kept in memory (a closing file's, its directories'), without an fsync.
    pub(super) fn flush_records(&self) {
        if let Some(s) = self.store() {
            s.flush();
        }
    }
}

/// Whether `caller` may access an entry with attributes `a` for `mask` (`R_OK`, `W_OK`, `X_OK` bits):
/// the owner, group and other classes, root passing every check but execute without any `x` bit.
/// FUSE leaves this to the kernel (`default_permissions`); NFS asks it.
pub fn may_access(a: &Attr, caller: &Caller, groups: &[u32], mask: u32) -> bool {
    let mode = a.perm as u32;
    if caller.uid == 0 {
        return mask & libc::X_OK as u32 == 0 || a.kind == Kind::Dir || mode & 0o111 != 0;
    }
    let bits = if caller.uid == a.uid {
        (mode >> 6) & 7
    } else if caller.gid == a.gid || groups.contains(&a.gid) {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    bits & mask == mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn attr(perm: u16, uid: u32, gid: u32, kind: Kind) -> Attr {
        let t = SystemTime::UNIX_EPOCH;
        Attr {
            ino: 2,
            kind,
            size: 0,
            atime: t,
            mtime: t,
            ctime: t,
            perm,
            nlink: 1,
            uid,
            gid,
            rdev: 0,
        }
    }

    #[test]
    fn access_classes() {
        let me = Caller { uid: 1000, gid: 1000 };
        let root = Caller { uid: 0, gid: 0 };
        let r = libc::R_OK as u32;
        let w = libc::W_OK as u32;
        let x = libc::X_OK as u32;
        assert!(may_access(&attr(0o600, 1000, 5, Kind::File), &me, &[], r | w));
        assert!(!may_access(&attr(0o060, 1000, 1000, Kind::File), &me, &[], r));
        assert!(may_access(&attr(0o060, 1, 1000, Kind::File), &me, &[], r | w));
        assert!(may_access(&attr(0o040, 1, 7, Kind::File), &me, &[7], r));
        assert!(!may_access(&attr(0o004, 1, 7, Kind::File), &me, &[7], r));
        assert!(may_access(&attr(0o000, 1, 1, Kind::File), &root, &[], r | w));
        assert!(!may_access(&attr(0o644, 1, 1, Kind::File), &root, &[], x));
        assert!(may_access(&attr(0o000, 1, 1, Kind::Dir), &root, &[], x));
    }
}
