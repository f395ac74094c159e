//! The permission checks an NFS server makes itself. A FUSE mount leaves them to the kernel
//! (`default_permissions`); over NFS the server is the only place they can be made, so these are
//! the rules a Linux server (knfsd over a local file system) applies, for the caller named by the
//! call's AUTH_UNIX credentials:
//!
//! - adding or removing a name needs write and search permission on the directory; in a sticky
//!   directory only root and the owners of the directory or of the entry remove or replace it
//!   (NFS3ERR_PERM); moving a directory to another parent needs write permission on it;
//! - WRITE and truncation need write permission, which the owner always has (NFS has no open: a
//!   file opened for writing and then chmod 0444 keeps being written, as knfsd allows); READ needs
//!   read or execute permission, the owner always;
//! - SETATTR: chown to another user only by root; chgrp by the owner only to a group they are in;
//!   chmod only by the owner or root (setgid dropped when the file's group is not the caller's);
//!   times set to given values only by the owner or root, to the server's time also by anyone with
//!   write permission (NFS3ERR_PERM, or NFS3ERR_ACCES for the last); a chown or chgrp of anything
//!   but a directory clears setuid, and setgid where group execute is set, as Linux does;
//! - device nodes are made by root only (CAP_MKNOD), NFS3ERR_PERM for others.
//!
//! Root (uid 0) passes every check (no root squashing: the export is the mount's, not a host's).

use nfsserve::nfs::nfsstat3;

use super::rpc::{ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND, ACCESS3_LOOKUP, ACCESS3_MODIFY, ACCESS3_READ};
use crate::vfs::{Attr, Caller, Kind, SetAttr, TimeSet, may_access};

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;
const S_IXGRP: u32 = 0o0010;
const R: u32 = libc::R_OK as u32;
const W: u32 = libc::W_OK as u32;
const X: u32 = libc::X_OK as u32;

/// The caller of one NFS call: ids and supplementary groups.
#[derive(Debug, Clone, Copy)]
pub struct User<'a> {
    pub caller: Caller,
    pub groups: &'a [u32],
}

impl User<'_> {
    pub fn is_root(&self) -> bool {
        self.caller.uid == 0
    }

    pub fn owns(&self, a: &Attr) -> bool {
        self.caller.uid == a.uid
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.caller.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the mode bits give the caller all of `mask` (`R_OK`, `W_OK`, `X_OK`).
    pub fn may(&self, a: &Attr, mask: u32) -> bool {
        may_access(a, &self.caller, self.groups, mask)
    }
}

/// Adding a name to directory `dir`, or removing one: write and search permission. Something that
/// is not a directory passes: the filesystem answers NFS3ERR_NOTDIR.
pub fn may_change_dir(user: &User<'_>, dir: &Attr) -> Result<(), nfsstat3> {
    if dir.kind != Kind::Dir || user.may(dir, W | X) {
        Ok(())
    } else {
        Err(nfsstat3::NFS3ERR_ACCES)
    }
}

/// Removing `child` from `dir` (REMOVE, RMDIR, the source of a RENAME and the entry it replaces):
/// `may_change_dir`, and the sticky bit.
pub fn may_unlink(user: &User<'_>, dir: &Attr, child: &Attr) -> Result<(), nfsstat3> {
    may_change_dir(user, dir)?;
    if u32::from(dir.perm) & S_ISVTX != 0 && !user.is_root() && !user.owns(dir) && !user.owns(child) {
        return Err(nfsstat3::NFS3ERR_PERM);
    }
    Ok(())
}

/// WRITE, or a truncation: write permission, which the owner always has.
pub fn may_write(user: &User<'_>, a: &Attr) -> Result<(), nfsstat3> {
    if user.owns(a) || user.may(a, W) {
        Ok(())
    } else {
        Err(nfsstat3::NFS3ERR_ACCES)
    }
}

/// READ: read or execute permission, which the owner always has.
pub fn may_read(user: &User<'_>, a: &Attr) -> Result<(), nfsstat3> {
    if user.owns(a) || user.may(a, R) || user.may(a, X) {
        Ok(())
    } else {
        Err(nfsstat3::NFS3ERR_ACCES)
    }
}

/// MKNOD of a character or block device: root only.
pub fn may_mknod_device(user: &User<'_>) -> Result<(), nfsstat3> {
    if user.is_root() {
        Ok(())
    } else {
        Err(nfsstat3::NFS3ERR_PERM)
    }
}

/// SETATTR of an object with attributes `a`: checks `req` (see the module's rules) and adjusts its
/// mode where Linux would (setgid dropped on a chmod by someone outside the group; setuid and setgid
/// cleared by a chown). `req.mode` holds permission bits only.
pub fn setattr(user: &User<'_>, a: &Attr, req: &mut SetAttr) -> Result<(), nfsstat3> {
    let (root, owner) = (user.is_root(), user.owns(a));
    if req.size.is_some() && a.kind != Kind::Dir {
        may_write(user, a)?;
    }
    if let Some(uid) = req.uid
        && !(root || (owner && uid == a.uid))
    {
        return Err(nfsstat3::NFS3ERR_PERM);
    }
    if let Some(gid) = req.gid
        && !(root || (owner && (gid == a.gid || user.in_group(gid))))
    {
        return Err(nfsstat3::NFS3ERR_PERM);
    }
    if let Some(mode) = req.mode.as_mut() {
        if !(root || owner) {
            return Err(nfsstat3::NFS3ERR_PERM);
        }
        if !root && !user.in_group(req.gid.unwrap_or(a.gid)) {
            *mode &= !S_ISGID;
        }
    }
    let given = |t: Option<TimeSet>| matches!(t, Some(TimeSet::At(_)));
    let now = |t: Option<TimeSet>| t == Some(TimeSet::Now);
    if (given(req.atime) || given(req.mtime)) && !(root || owner) {
        return Err(nfsstat3::NFS3ERR_PERM);
    }
    if (now(req.atime) || now(req.mtime)) && !(root || owner || user.may(a, W)) {
        return Err(nfsstat3::NFS3ERR_ACCES);
    }
    if (req.uid.is_some() || req.gid.is_some()) && a.kind != Kind::Dir {
        let base = req.mode.unwrap_or(u32::from(a.perm));
        let mut m = base & !S_ISUID;
        if m & S_IXGRP != 0 {
            m &= !S_ISGID;
        }
        if req.mode.is_some() || m != base {
            req.mode = Some(m);
        }
    }
    Ok(())
}

/// ACCESS: which of the `asked` bits the caller has on an object with attributes `a` (knfsd's
/// tables: a directory answers READ, LOOKUP, MODIFY, EXTEND and DELETE, anything else READ,
/// MODIFY, EXTEND and EXECUTE; bits that do not apply are not granted).
pub fn access(user: &User<'_>, a: &Attr, asked: u32) -> u32 {
    let table: &[(u32, u32)] = if a.kind == Kind::Dir {
        &[
            (ACCESS3_READ, R),
            (ACCESS3_LOOKUP, X),
            (ACCESS3_MODIFY, W | X),
            (ACCESS3_EXTEND, W | X),
            (ACCESS3_DELETE, W | X),
        ]
    } else {
        &[
            (ACCESS3_READ, R),
            (ACCESS3_MODIFY, W),
            (ACCESS3_EXTEND, W),
            (ACCESS3_EXECUTE, X),
        ]
    };
    table
        .iter()
        .filter(|(bit, mask)| asked & bit != 0 && user.may(a, *mask))
        .fold(0, |granted, (bit, _)| granted | bit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn attr(kind: Kind, perm: u16, uid: u32, gid: u32) -> Attr {
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

    fn user(uid: u32, gid: u32, groups: &[u32]) -> User<'_> {
        User {
            caller: Caller { uid, gid },
            groups,
        }
    }

    fn check(u: &User<'_>, a: &Attr, req: SetAttr) -> Result<SetAttr, nfsstat3> {
        let mut req = req;
        setattr(u, a, &mut req).map(|()| req)
    }

    /// The status of a refusal (nfsstat3 has no PartialEq), 0 for Ok.
    fn code<T>(r: Result<T, nfsstat3>) -> u32 {
        r.err().map_or(0, |s| s as u32)
    }

    const PERM: u32 = nfsstat3::NFS3ERR_PERM as u32;
    const ACCES: u32 = nfsstat3::NFS3ERR_ACCES as u32;

    #[test]
    fn owners_groups_and_modes() {
        let f = attr(Kind::File, 0o644, 1000, 100);
        let (owner, other, root) = (user(1000, 100, &[200]), user(2000, 300, &[]), user(0, 0, &[]));
        let chown = |uid| SetAttr {
            uid: Some(uid),
            ..SetAttr::default()
        };
        let chgrp = |gid| SetAttr {
            gid: Some(gid),
            ..SetAttr::default()
        };
        let chmod = |mode| SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        assert_eq!(code(check(&owner, &f, chown(2000))), PERM);
        assert!(check(&owner, &f, chown(1000)).is_ok(), "chown to oneself");
        assert!(check(&root, &f, chown(2000)).is_ok());
        assert_eq!(code(check(&other, &f, chown(2000))), PERM);
        assert!(check(&owner, &f, chgrp(200)).is_ok(), "a supplementary group");
        assert_eq!(code(check(&owner, &f, chgrp(300))), PERM);
        assert_eq!(code(check(&other, &f, chgrp(300))), PERM);
        assert_eq!(code(check(&other, &f, chmod(0o600))), PERM);
        assert_eq!(check(&owner, &f, chmod(0o2755)).unwrap().mode, Some(0o2755));
        // Outside the file's group, setgid is dropped (the group given in the same call counts).
        let stranger = user(1000, 999, &[200]);
        assert_eq!(check(&stranger, &f, chmod(0o2755)).unwrap().mode, Some(0o755));
        let d = attr(Kind::Dir, 0o755, 1000, 100);
        assert_eq!(check(&stranger, &d, chmod(0o2755)).unwrap().mode, Some(0o755));
        let mut both = chmod(0o2755);
        both.gid = Some(200);
        assert_eq!(check(&stranger, &d, both.clone()).unwrap().mode, Some(0o2755));
        // A file's chgrp clears setgid (with group execute), even in the same call.
        assert_eq!(check(&stranger, &f, both).unwrap().mode, Some(0o755));
        assert_eq!(check(&root, &f, chmod(0o2755)).unwrap().mode, Some(0o2755));
    }

    #[test]
    fn a_chown_clears_setuid_and_setgid_of_files() {
        let root = user(0, 0, &[]);
        let f = attr(Kind::File, 0o6755, 1000, 100);
        let req = SetAttr {
            uid: Some(5),
            ..SetAttr::default()
        };
        assert_eq!(check(&root, &f, req).unwrap().mode, Some(0o755));
        // setgid without group execute is mandatory locking, not setgid: kept.
        let f = attr(Kind::File, 0o6745, 1000, 100);
        let req = SetAttr {
            gid: Some(5),
            ..SetAttr::default()
        };
        assert_eq!(check(&root, &f, req).unwrap().mode, Some(0o2745));
        // Nothing to clear: no mode change is added; directories keep their bits.
        let f = attr(Kind::File, 0o755, 1000, 100);
        let req = SetAttr {
            uid: Some(5),
            ..SetAttr::default()
        };
        assert_eq!(check(&root, &f, req).unwrap().mode, None);
        let d = attr(Kind::Dir, 0o2775, 1000, 100);
        let req = SetAttr {
            gid: Some(5),
            ..SetAttr::default()
        };
        assert_eq!(check(&root, &d, req).unwrap().mode, None);
    }

    #[test]
    fn times_and_sizes() {
        let f = attr(Kind::File, 0o644, 1000, 100);
        let (owner, other) = (user(1000, 100, &[]), user(2000, 300, &[]));
        let at = TimeSet::At(SystemTime::UNIX_EPOCH);
        let times = |t: TimeSet| SetAttr {
            mtime: Some(t),
            ..SetAttr::default()
        };
        assert!(check(&owner, &f, times(at)).is_ok());
        assert_eq!(code(check(&other, &f, times(at))), PERM);
        assert_eq!(code(check(&other, &f, times(TimeSet::Now))), ACCES);
        let writable = attr(Kind::File, 0o666, 1000, 100);
        assert!(check(&other, &writable, times(TimeSet::Now)).is_ok());
        assert_eq!(code(check(&other, &writable, times(at))), PERM);
        let size = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        assert_eq!(code(check(&other, &f, size.clone())), ACCES);
        assert!(check(&other, &writable, size.clone()).is_ok());
        let readonly = attr(Kind::File, 0o444, 1000, 100);
        assert!(check(&owner, &readonly, size).is_ok(), "the owner may truncate");
    }

    #[test]
    fn directories_sticky_bits_and_access() {
        let (owner, other, root) = (user(1000, 100, &[]), user(2000, 300, &[]), user(0, 0, &[]));
        let dir = attr(Kind::Dir, 0o755, 1000, 100);
        assert!(may_change_dir(&owner, &dir).is_ok());
        assert_eq!(code(may_change_dir(&other, &dir)), ACCES);
        assert!(may_change_dir(&root, &dir).is_ok());
        let tmp = attr(Kind::Dir, 0o1777, 0, 0);
        let theirs = attr(Kind::File, 0o644, 1000, 100);
        assert_eq!(code(may_unlink(&other, &tmp, &theirs)), PERM);
        assert!(may_unlink(&owner, &tmp, &theirs).is_ok());
        assert!(may_unlink(&root, &tmp, &theirs).is_ok());
        let all = ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE | ACCESS3_EXECUTE;
        assert_eq!(
            access(&owner, &dir, all),
            ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
        );
        assert_eq!(access(&other, &dir, all), ACCESS3_READ | ACCESS3_LOOKUP);
        assert_eq!(access(&other, &theirs, all), ACCESS3_READ);
        assert_eq!(
            access(&owner, &theirs, all),
            ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND
        );
        assert_eq!(access(&owner, &theirs, ACCESS3_READ), ACCESS3_READ, "only bits asked");
        assert_eq!(code(may_read(&other, &attr(Kind::File, 0o600, 1000, 100))), ACCES);
        assert!(may_read(&owner, &attr(Kind::File, 0o000, 1000, 100)).is_ok());
        assert_eq!(code(may_write(&other, &theirs)), ACCES);
        assert_eq!(code(may_mknod_device(&owner)), PERM);
    }
}
