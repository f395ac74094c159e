//! What the RPC front calls beyond nfsserve's trait (`rpc::Served`): WRITE stability and COMMIT,
//! READ without a copy, and every call that changes something (or asks ACCESS) with the caller's
//! AUTH_UNIX credentials: permission checks (`perm`), and new entries owned by their creator with
//! the mode the client sent, as the FUSE mount gives them the kernel request's ids and mode.
//!
//! WRITE stability (docs/SEMANTICS.md): an UNSTABLE WRITE is answered once it is in the staging
//! file; a stable WRITE, and a COMMIT, once the file is fsynced and journaled as final, so that a
//! crash of the server's host no longer loses it (the next start commits it). READ hands the core's
//! bytes over without a copy, with the attributes it already looked up.
//!
//! A call without credentials (AUTH_NONE) stands for the mount's owner (`--uid`/`--gid`).

use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use nfsserve::nfs::{
    fattr3, fileid3, filename3, nfspath3, nfsstat3, nfstime3, sattr3, set_atime, set_gid3, set_mode3, set_mtime,
    set_size3, set_uid3, specdata3,
};

use super::perm::{self, User};
use super::rpc::{CreateHow, NodeType, Served, Stability, Who};
use super::{MAX_TRANSFER, NfsAdapter, name_str, nfs_status};
use crate::vfs::error::VfsError;
use crate::vfs::{Attr, Caller, Hold, Kind, NewNode, RenameFlags, SetAttr, TimeSet};

/// Largest device numbers Linux has (`MAJOR` 12 bits, `MINOR` 20 bits).
const MAX_MAJOR: u32 = 0xfff;
const MAX_MINOR: u32 = 0xf_ffff;

fn client_time(t: nfstime3) -> TimeSet {
    TimeSet::At(UNIX_EPOCH + Duration::new(u64::from(t.seconds), t.nseconds))
}

/// The attribute changes a `sattr3` asks for (the mode as permission bits only).
pub(super) fn set_attr(s: &sattr3) -> SetAttr {
    SetAttr {
        size: match s.size {
            set_size3::size(n) => Some(n),
            set_size3::Void => None,
        },
        atime: match s.atime {
            set_atime::SET_TO_CLIENT_TIME(t) => Some(client_time(t)),
            set_atime::SET_TO_SERVER_TIME => Some(TimeSet::Now),
            set_atime::DONT_CHANGE => None,
        },
        mtime: match s.mtime {
            set_mtime::SET_TO_CLIENT_TIME(t) => Some(client_time(t)),
            set_mtime::SET_TO_SERVER_TIME => Some(TimeSet::Now),
            set_mtime::DONT_CHANGE => None,
        },
        mode: match s.mode {
            set_mode3::mode(m) => Some(m & 0o7777),
            set_mode3::Void => None,
        },
        uid: match s.uid {
            set_uid3::uid(u) => Some(u),
            set_uid3::Void => None,
        },
        gid: match s.gid {
            set_gid3::gid(g) => Some(g),
            set_gid3::Void => None,
        },
        fh: None,
    }
}

/// A name for a new entry: one that is not UTF-8 cannot be stored on the Hub (FUSE: EINVAL).
fn new_name(name: &filename3) -> Result<&str, nfsstat3> {
    std::str::from_utf8(&name.0).map_err(|_| nfsstat3::NFS3ERR_INVAL)
}

/// The device number of MKNOD's `specdata3` (major, minor), in the `makedev` encoding the core keeps.
fn device(spec: specdata3) -> Result<u32, nfsstat3> {
    let (major, minor) = (spec.specdata1, spec.specdata2);
    if major > MAX_MAJOR || minor > MAX_MINOR {
        return Err(nfsstat3::NFS3ERR_INVAL);
    }
    // Within those limits the encoding fits 32 bits.
    Ok(libc::makedev(major, minor) as u32)
}

impl NfsAdapter {
    /// The caller a call's credentials name; AUTH_NONE stands for the mount's owner.
    fn user<'a>(&self, who: Who<'a>) -> User<'a> {
        match who {
            Some(c) => User {
                caller: Caller { uid: c.uid, gid: c.gid },
                groups: c.groups(),
            },
            None => {
                let o = self.vfs.options();
                User {
                    caller: Caller { uid: o.uid, gid: o.gid },
                    groups: &[],
                }
            }
        }
    }

    /// Whether `--posix strict` keeps modes and owners the mount's own.
    fn strict(&self) -> bool {
        self.vfs.options().write.as_ref().is_some_and(|w| w.posix_strict)
    }

    fn writable(&self) -> Result<(), nfsstat3> {
        if self.vfs.is_writable() {
            Ok(())
        } else {
            Err(nfs_status(&self.vfs.refuse_write()))
        }
    }

    async fn attr(&self, id: fileid3) -> Result<Attr, nfsstat3> {
        self.vfs.getattr(id).await.map_err(|e| nfs_status(&e))
    }

    /// Whether `user` may add a name to directory `dirid`.
    async fn may_add(&self, user: &User<'_>, dirid: fileid3) -> Result<(), nfsstat3> {
        if user.is_root() {
            return Ok(());
        }
        perm::may_change_dir(user, &self.attr(dirid).await?)
    }

    /// What a new entry gets: `mode` (None: the mount's default) and its creator's ids.
    fn node(user: &User<'_>, mode: Option<u32>) -> NewNode {
        NewNode {
            mode,
            caller: Some(user.caller),
        }
    }

    /// After CREATE, MKDIR, SYMLINK or MKNOD made `ino`: what its `sattr3` asked besides the mode
    /// and size. Owner and group are taken from root only (knfsd ignores them from others: a new
    /// entry is its creator's), and not on a `--posix strict` mount; times from anyone. None when
    /// nothing was asked.
    async fn settle_new(&self, ino: fileid3, attr: &sattr3, user: &User<'_>) -> Result<Option<Attr>, nfsstat3> {
        let asked = set_attr(attr);
        let mut req = SetAttr {
            atime: asked.atime,
            mtime: asked.mtime,
            ..SetAttr::default()
        };
        if user.is_root() && !self.strict() {
            req.uid = asked.uid;
            req.gid = asked.gid;
        }
        if req.uid.is_none() && req.gid.is_none() && req.atime.is_none() && req.mtime.is_none() {
            return Ok(None);
        }
        self.vfs.setattr(ino, req).await.map(Some).map_err(|e| nfs_status(&e))
    }

    /// A SETATTR that passed the checks: a truncate goes through the file's write handle when it
    /// has one, as ftruncate would.
    async fn apply_setattr(&self, id: fileid3, mut req: SetAttr) -> Result<Attr, nfsstat3> {
        let writer = self.writers.enter(id);
        req.fh = writer.as_ref().map(|w| w.fh);
        self.vfs.setattr(id, req).await.map_err(|e| nfs_status(&e))
    }
}

#[async_trait]
impl Served for NfsAdapter {
    async fn read_attr(
        &self,
        who: Who<'_>,
        id: fileid3,
        offset: u64,
        count: u32,
    ) -> Result<(Bytes, bool, Option<fattr3>), nfsstat3> {
        let a = self.attr(id).await?;
        if a.kind == Kind::Dir {
            return Err(nfsstat3::NFS3ERR_ISDIR);
        }
        perm::may_read(&self.user(who), &a)?;
        let f = self.open_file(id).await?;
        let data = self
            .vfs
            .read(f.held.fh, offset, count.min(MAX_TRANSFER))
            .await
            .map_err(|e| nfs_status(&e))?;
        let eof = offset.saturating_add(data.len() as u64) >= a.size;
        // A read-only file's attributes do not change under the read; a writable mount's may.
        let after = if self.vfs.is_writable() {
            self.attr(id).await.ok().map(|a| self.fattr(&a))
        } else {
            Some(self.fattr(&a))
        };
        Ok((data, eof, after))
    }

    async fn write_durable(
        &self,
        who: Who<'_>,
        id: fileid3,
        offset: u64,
        data: &[u8],
        asked: Stability,
    ) -> Result<(fattr3, Stability), nfsstat3> {
        self.writable()?;
        let user = self.user(who);
        if !user.is_root() {
            perm::may_write(&user, &self.attr(id).await?)?;
        }
        let w = self.writer(id).await?;
        self.vfs.write(w.fh, offset, data).map_err(|e| nfs_status(&e))?;
        let reached = match asked {
            Stability::Unstable => Stability::Unstable,
            Stability::DataSync | Stability::FileSync => {
                self.seal(id, Some(w.fh)).await?;
                Stability::FileSync
            }
        };
        Ok((self.fattr(&self.attr(id).await?), reached))
    }

    async fn commit(&self, id: fileid3) -> Result<(), nfsstat3> {
        let w = self.writers.enter(id);
        self.seal(id, w.as_ref().map(|w| w.fh)).await
    }

    /// A read-only mount grants what is asked, as before credentials were read: clients such as
    /// libnfs (and fio on it) open files read-write and would be refused otherwise, and every
    /// change is NFS3ERR_ROFS anyway.
    async fn access_by(&self, who: Who<'_>, id: fileid3, asked: u32) -> Result<(fattr3, u32), nfsstat3> {
        let a = self.attr(id).await?;
        let granted = if self.vfs.is_writable() {
            perm::access(&self.user(who), &a, asked)
        } else {
            asked
        };
        Ok((self.fattr(&a), granted))
    }

    async fn setattr_by(&self, who: Who<'_>, id: fileid3, attr: sattr3) -> Result<fattr3, nfsstat3> {
        self.writable()?;
        let mut req = set_attr(&attr);
        let now = self.attr(id).await?;
        perm::setattr(&self.user(who), &now, &mut req)?;
        Ok(self.fattr(&self.apply_setattr(id, req).await?))
    }

    async fn create_by(
        &self,
        who: Who<'_>,
        dirid: fileid3,
        name: &filename3,
        how: CreateHow,
    ) -> Result<(fileid3, Option<fattr3>), nfsstat3> {
        self.writable()?;
        let user = self.user(who);
        let name = new_name(name)?;
        let (attr, exclusive) = match how {
            CreateHow::Unchecked(a) => (Some(a), false),
            CreateHow::Guarded(a) => (Some(a), true),
            CreateHow::Exclusive => (None, true),
        };
        let existing = match self.vfs.lookup_as(dirid, name, Hold::Remembered).await {
            Ok(a) => Some(a),
            Err(VfsError::NotFound) => None,
            Err(e) => return Err(nfs_status(&e)),
        };
        let truncate = matches!(attr.map(|a| a.size), Some(set_size3::size(0)));
        match &existing {
            Some(_) if exclusive => return Err(nfsstat3::NFS3ERR_EXIST),
            // UNCHECKED over a file opens it, truncated if asked, which needs write permission.
            Some(a) if truncate && a.kind == Kind::File => perm::may_write(&user, a)?,
            Some(_) => {}
            None => self.may_add(&user, dirid).await?,
        }
        let mode = attr.and_then(|a| set_attr(&a).mode);
        let (ino, a) = self
            .create_file(dirid, name, exclusive, truncate, Self::node(&user, mode))
            .await?;
        let a = match (&attr, existing) {
            (Some(s), None) => self.settle_new(ino, s, &user).await?.unwrap_or(a),
            _ => a,
        };
        Ok((ino, Some(self.fattr(&a))))
    }

    async fn mkdir_by(
        &self,
        who: Who<'_>,
        dirid: fileid3,
        name: &filename3,
        attr: sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        self.writable()?;
        let user = self.user(who);
        let name = new_name(name)?;
        self.may_add(&user, dirid).await?;
        let node = Self::node(&user, set_attr(&attr).mode);
        let a = self.vfs.mkdir_as(dirid, name, node).await.map_err(|e| nfs_status(&e))?;
        let ino = self.remembered(dirid, name, a.ino)?;
        let a = self.settle_new(ino, &attr, &user).await?.unwrap_or(a);
        Ok((ino, self.fattr(&a)))
    }

    /// SYMLINK: the link's mode is 0777, as on Linux, whatever the attributes say.
    async fn symlink_by(
        &self,
        who: Who<'_>,
        dirid: fileid3,
        name: &filename3,
        target: &nfspath3,
        attr: sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        self.writable()?;
        let user = self.user(who);
        let name = new_name(name)?;
        let target = std::str::from_utf8(&target.0).map_err(|_| nfsstat3::NFS3ERR_INVAL)?;
        self.may_add(&user, dirid).await?;
        let a = self
            .vfs
            .symlink(dirid, name, target, Self::node(&user, None))
            .await
            .map_err(|e| nfs_status(&e))?;
        let ino = self.remembered(dirid, name, a.ino)?;
        let a = self.settle_new(ino, &attr, &user).await?.unwrap_or(a);
        Ok((ino, self.fattr(&a)))
    }

    /// MKNOD: devices (root only), sockets and FIFOs; without a mode in the attributes, 0644.
    async fn mknod_by(
        &self,
        who: Who<'_>,
        dirid: fileid3,
        name: &filename3,
        what: NodeType,
        attr: sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        self.writable()?;
        let user = self.user(who);
        let name = new_name(name)?;
        self.may_add(&user, dirid).await?;
        let (kind, rdev) = match what {
            NodeType::Char(spec) | NodeType::Block(spec) => {
                perm::may_mknod_device(&user)?;
                let kind = if matches!(what, NodeType::Char(_)) {
                    libc::S_IFCHR
                } else {
                    libc::S_IFBLK
                };
                (kind, device(spec)?)
            }
            NodeType::Socket => (libc::S_IFSOCK, 0),
            NodeType::Fifo => (libc::S_IFIFO, 0),
        };
        let mode = kind | set_attr(&attr).mode.unwrap_or(0o644);
        let a = self
            .vfs
            .mknod(dirid, name, mode, rdev, Self::node(&user, None))
            .await
            .map_err(|e| nfs_status(&e))?;
        let ino = self.remembered(dirid, name, a.ino)?;
        let a = self.settle_new(ino, &attr, &user).await?.unwrap_or(a);
        Ok((ino, self.fattr(&a)))
    }

    /// LINK: a second name for a file (the client looks it up when it needs its handle).
    async fn link_by(&self, who: Who<'_>, id: fileid3, dirid: fileid3, name: &filename3) -> Result<(), nfsstat3> {
        self.writable()?;
        let user = self.user(who);
        let name = new_name(name)?;
        self.may_add(&user, dirid).await?;
        self.vfs
            .link_as(id, dirid, name, Hold::Remembered)
            .await
            .map(|_| ())
            .map_err(|e| nfs_status(&e))
    }

    async fn remove_by(&self, who: Who<'_>, dirid: fileid3, name: &filename3) -> Result<(), nfsstat3> {
        self.writable()?;
        let name = name_str(name)?;
        let child = self
            .vfs
            .lookup_as(dirid, name, Hold::Remembered)
            .await
            .map_err(|e| nfs_status(&e))?;
        let user = self.user(who);
        if !user.is_root() {
            perm::may_unlink(&user, &self.attr(dirid).await?, &child)?;
        }
        // Closed before the removal, as a FUSE client's close would be.
        self.writers.cache.invalidate(&child.ino);
        self.releaser.flush();
        let r = match child.kind {
            Kind::Dir => self.vfs.rmdir(dirid, name).await,
            _ => self.vfs.unlink(dirid, name).await,
        };
        r.map_err(|e| nfs_status(&e))
    }

    async fn rename_by(
        &self,
        who: Who<'_>,
        from_dirid: fileid3,
        from: &filename3,
        to_dirid: fileid3,
        to: &filename3,
    ) -> Result<(), nfsstat3> {
        self.writable()?;
        let (from, to) = (name_str(from)?, new_name(to)?);
        let user = self.user(who);
        if !user.is_root() {
            let child = self
                .vfs
                .lookup_as(from_dirid, from, Hold::Remembered)
                .await
                .map_err(|e| nfs_status(&e))?;
            let from_dir = self.attr(from_dirid).await?;
            perm::may_unlink(&user, &from_dir, &child)?;
            let to_dir = if to_dirid == from_dirid {
                from_dir
            } else {
                self.attr(to_dirid).await?
            };
            match self.vfs.lookup_as(to_dirid, to, Hold::Remembered).await {
                Ok(replaced) => perm::may_unlink(&user, &to_dir, &replaced)?,
                Err(_) => perm::may_change_dir(&user, &to_dir)?,
            }
            // A directory moved to another parent has its ".." rewritten.
            if child.kind == Kind::Dir && from_dirid != to_dirid && !user.may(&child, libc::W_OK as u32) {
                return Err(nfsstat3::NFS3ERR_ACCES);
            }
        }
        self.vfs
            .rename(from_dirid, from, to_dirid, to, RenameFlags::default())
            .await
            .map_err(|e| nfs_status(&e))
    }
}
