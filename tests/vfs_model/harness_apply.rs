//! Runs one operation on both sides: the kernel's walk and the VirtualFs call the FUSE adapter
//! would make, and the model's answer; the two must agree, errno included.

use std::time::{Duration, SystemTime};

use hubfs::vfs::error::VfsError;
use hubfs::vfs::{Attr, Caller, Ino, Kind, NewNode, OpenMode, ROOT_INO, RenameFlags, SetAttr, TimeSet};

use super::{Case, SLACK};
use crate::model::{Entry, Res, SKIP, chown_kill};
use crate::ops::{Op, SetTime, Target, Who, payload};
use crate::walk::{self, Walked};

/// Handles kept open at once; opening one more closes the oldest first.
const MAX_HANDLES: usize = 4;

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// What a creating operation passes on: the mode (`None`: the mount's default) and the caller.
fn new_node(mode: Option<u32>, who: Option<Who>) -> NewNode {
    NewNode {
        mode,
        caller: who.map(|w| Caller { uid: w.uid, gid: w.gid }),
    }
}

fn time_set(t: SetTime) -> Option<TimeSet> {
    match t {
        SetTime::Omit => None,
        SetTime::Now => Some(TimeSet::Now),
        SetTime::At(t) => Some(TimeSet::At(t)),
    }
}

impl Case<'_> {
    pub(super) fn step(&mut self, op: &Op) -> Result<(), String> {
        self.ops += 1;
        self.model.now = SystemTime::now();
        let r = self.apply(op);
        self.forget_lookups();
        r
    }

    /// The model said the kernel would answer this itself: nothing to run.
    fn skip<A>(&mut self, expected: &Res<A>) -> bool {
        let skip = matches!(expected, Err(SKIP));
        if skip {
            self.skipped += 1;
        }
        skip
    }

    fn apply(&mut self, op: &Op) -> Result<(), String> {
        if let Op::Remount = op {
            // No reference to the old VirtualFs may be alive here: its staging lock must go.
            return self.remount();
        }
        let vfs = self.vfs();
        match op {
            Op::Create {
                path,
                exclusive,
                truncate,
                mode,
                who,
            } => {
                self.make_room()?;
                let expected = self.model.create(path, *exclusive, *truncate, *mode, *who);
                if self.skip(&expected) {
                    return Ok(());
                }
                // O_EXCL: a last symlink is not followed; VirtualFs answers EEXIST for it.
                let actual = match self.walk(path, !exclusive) {
                    Ok(w) => self
                        .call(vfs.create_as(w.parent.ino, &w.name, *exclusive, *truncate, new_node(*mode, *who)))?
                        .map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some((attr, fh)) = self.agree("create", &expected, actual)? {
                    self.handles.push((fh, attr.ino));
                    self.writable.push(true);
                    let want = self.model.content(*expected.as_ref().unwrap()).len() as u64;
                    if attr.size != want {
                        return Err(format!("create: size {} , model {want}", attr.size));
                    }
                }
            }
            Op::OpenWrite { path, truncate } => {
                self.make_room()?;
                let expected = self.model.open_write(path, *truncate);
                if self.skip(&expected) {
                    return Ok(());
                }
                let actual = match self.resolve(path, true) {
                    Ok(a) => {
                        let mode = OpenMode {
                            write: true,
                            truncate: *truncate,
                        };
                        self.call(vfs.open_with(a.ino, mode))?
                            .map(|(fh, _)| (fh, a.ino))
                            .map_err(|e| e.errno())
                    }
                    Err(e) => Err(e),
                };
                if let Some((fh, ino)) = self.agree("open for writing", &expected, actual)? {
                    // The handle keeps the final lookup, released at close.
                    let pos = self.lookups.iter().rposition(|i| *i == ino).unwrap();
                    self.lookups.remove(pos);
                    self.handles.push((fh, ino));
                    self.writable.push(true);
                }
            }
            Op::OpenRead { path } => {
                self.make_room()?;
                let expected = self.model.open_read(path);
                if self.skip(&expected) {
                    return Ok(());
                }
                let actual = match self.resolve(path, true) {
                    Ok(a) => self
                        .call(vfs.open_with(a.ino, OpenMode::default()))?
                        .map(|(fh, _)| (fh, a.ino))
                        .map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some((fh, ino)) = self.agree("open for reading", &expected, actual)? {
                    let pos = self.lookups.iter().rposition(|i| *i == ino).unwrap();
                    self.lookups.remove(pos);
                    self.handles.push((fh, ino));
                    self.writable.push(false);
                }
            }
            Op::Write { h, offset, len, seed } => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                let data = payload(*len, *seed);
                if !self.writable[s] {
                    let r = vfs.write(self.handles[s].0, *offset, &data).map_err(|e| e.errno());
                    self.agree("write to a read-only handle", &Err::<(), _>(libc::EBADF), r)?;
                    return Ok(());
                }
                let n = vfs
                    .write(self.handles[s].0, *offset, &data)
                    .map_err(|e| format!("write: {e}"))?;
                if n as usize != data.len() {
                    return Err(format!("write returned {n}, wrote {}", data.len()));
                }
                let id = self.model.handles[s];
                self.model.write(id, *offset, &data);
            }
            Op::Truncate { target, size } => self.truncate(target, *size)?,
            Op::Read { target, offset, len } => self.read(target, *offset, *len)?,
            Op::Flush { h } | Op::Fsync { h } => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                let fh = self.handles[s].0;
                let r = match op {
                    Op::Flush { .. } => self.call(vfs.flush(fh))?,
                    _ => self.call(vfs.fsync(fh))?,
                };
                r.map_err(|e| format!("flush/fsync: {e}"))?;
            }
            Op::Close { h } => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                self.close(s)?;
            }
            Op::Rename {
                from,
                to,
                noreplace,
                exchange,
            } => self.rename(from, to, *noreplace, *exchange)?,
            Op::Unlink { path } | Op::Rmdir { path } => {
                let rmdir = matches!(op, Op::Rmdir { .. });
                let expected = if rmdir {
                    self.model.rmdir(path)
                } else {
                    self.model.unlink(path)
                };
                let actual = match self.walk(path, false) {
                    Ok(Walked { last: None, .. }) => Err(libc::ENOENT),
                    Ok(w) if rmdir => self.call(vfs.rmdir(w.parent.ino, &w.name))?.map_err(|e| e.errno()),
                    Ok(w) => self.call(vfs.unlink(w.parent.ino, &w.name))?.map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                self.agree(if rmdir { "rmdir" } else { "unlink" }, &expected, actual)?;
            }
            Op::Mkdir { path, mode, who } => {
                let expected = self.model.mkdir(path, *mode, *who);
                // The kernel answers EEXIST itself; VirtualFs is asked anyway, as NFS would.
                let actual = match self.walk(path, false) {
                    Ok(w) => self
                        .call(vfs.mkdir_as(w.parent.ino, &w.name, new_node(*mode, *who)))?
                        .map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some(a) = self.agree("mkdir", &expected, actual)? {
                    self.lookups.push(a.ino);
                    if a.kind != Kind::Dir {
                        return Err("mkdir: not a directory".into());
                    }
                }
            }
            Op::Readdir { path } => {
                let expected = self.model.readdir(path);
                let actual = match self.resolve(path, true) {
                    Ok(a) => self.list(a.ino),
                    Err(e) => Err(e),
                };
                if let Some(got) = self.agree("readdir", &expected, actual)? {
                    let (dir, _) = expected.unwrap();
                    self.same_listing(&dir, &got)?;
                }
            }
            Op::Stat { path } => {
                let expected = self.model.stat(path, true);
                let actual = self.resolve(path, true);
                if let Some(a) = self.agree("stat", &expected, actual)? {
                    let (p, e) = expected.unwrap();
                    self.same_attr(&p, &a, &e)?;
                }
            }
            Op::Chmod { path, mode } => {
                let expected = self.model.chmod(path, *mode);
                let req = SetAttr {
                    mode: Some(*mode),
                    ..SetAttr::default()
                };
                self.setattr("chmod", path, true, &expected, |_| req)?;
            }
            Op::Chown { path, uid, gid, follow } => {
                let expected = self.model.chown(path, *uid, *gid, *follow);
                // What the kernel sends a FUSE file system without handle_killpriv: the ids, and
                // the mode without setuid (and setgid with group execute) for a non-directory.
                let (uid, gid) = (*uid, *gid);
                self.setattr("chown", path, *follow, &expected, |a| SetAttr {
                    uid,
                    gid,
                    mode: if a.kind == Kind::Dir {
                        None
                    } else {
                        chown_kill(a.perm as u32)
                    },
                    ..SetAttr::default()
                })?;
            }
            Op::Utimens {
                path,
                atime,
                mtime,
                follow,
            } => {
                let expected = self.model.utimens(path, *mtime, *follow);
                let req = SetAttr {
                    atime: time_set(*atime),
                    mtime: time_set(*mtime),
                    ..SetAttr::default()
                };
                if let Some(a) = self.setattr("utimens", path, *follow, &expected, |_| req)?
                    && let SetTime::At(t) = atime
                    && a.atime != *t
                {
                    return Err(format!("utimens {path}: atime {:?}, set to {t:?}", a.atime));
                }
            }
            Op::Symlink { path, target, who } => {
                let expected = self.model.symlink(path, &target.0, *who);
                let node = new_node(None, *who);
                let actual = if target.0.is_empty() || target.0.len() > 4095 {
                    // The kernel refuses the target before it walks the path; so does VirtualFs.
                    self.call(vfs.symlink(ROOT_INO, split(path).1, &target.0, node))?
                        .map_err(|e| e.errno())
                } else {
                    match self.walk(path, false) {
                        Ok(w) => self
                            .call(vfs.symlink(w.parent.ino, &w.name, &target.0, node))?
                            .map_err(|e| e.errno()),
                        Err(e) => Err(e),
                    }
                };
                if let Some(a) = self.agree("symlink", &expected, actual)? {
                    self.lookups.push(a.ino);
                    if a.kind != Kind::Symlink || a.size != target.0.len() as u64 {
                        return Err(format!("symlink: made a {:?} of size {}", a.kind, a.size));
                    }
                }
            }
            Op::Mknod { path, kind, mode, who } => {
                let expected = self.model.mknod(path, *kind, *mode, *who);
                let (ty, rdev) = kind.mode_and_rdev();
                let actual = match self.walk(path, false) {
                    Ok(w) => self
                        .call(vfs.mknod(w.parent.ino, &w.name, ty | *mode, rdev, new_node(Some(*mode), *who)))?
                        .map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some(a) = self.agree("mknod", &expected, actual)? {
                    self.lookups.push(a.ino);
                }
            }
            Op::Readlink { path } => {
                let expected = self.model.readlink(path);
                // The kernel answers EINVAL itself for what is not a symlink; VirtualFs is asked
                // anyway (NFS READLINK does).
                let actual = match self.resolve(path, false) {
                    Ok(a) => self.call(vfs.readlink(a.ino))?.map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some(got) = self.agree("readlink", &expected, actual)?
                    && got != *expected.as_ref().unwrap()
                {
                    return Err(format!("readlink {path}: {got:?}, model {:?}", expected.unwrap()));
                }
            }
            Op::Link { from, to } => {
                let expected = self.model.link(from, to);
                // The kernel walks the source, then the new name's directory (a non-directory
                // there is handed to VirtualFs, which must say ENOTDIR itself, as NFS LINK needs),
                // and answers EEXIST itself; VirtualFs is asked anyway.
                let walked = (|| {
                    let src = self.resolve(from, false)?;
                    let dir = match to.rsplit_once('/') {
                        None => ROOT_INO,
                        Some((d, _)) => self.resolve(d, true)?.ino,
                    };
                    Ok((src.ino, dir))
                })();
                let actual = match walked {
                    Ok((src, dir)) => self.call(vfs.link(src, dir, split(to).1))?.map_err(|e| e.errno()),
                    Err(e) => Err(e),
                };
                if let Some(a) = self.agree("link", &expected, actual)? {
                    // The new name's lookup, forgotten when the operation ends.
                    self.lookups.push(a.ino);
                }
            }
            Op::Pause => std::thread::sleep(SLACK + Duration::from_secs(1)),
            Op::Sync => self.call(vfs.sync_all())?.map_err(|e| format!("sync: {e}"))?,
            Op::Remount => unreachable!("handled above"),
        }
        Ok(())
    }

    /// chmod, chown, utimens: the kernel's walk, then setattr with what `req` makes of the
    /// attributes found; the reply must be the model's entry. Returns the reply.
    fn setattr(
        &mut self,
        what: &str,
        path: &str,
        follow: bool,
        expected: &Res<(String, Entry)>,
        req: impl FnOnce(&Attr) -> SetAttr,
    ) -> Result<Option<Attr>, String> {
        let vfs = self.vfs();
        let actual = match self.resolve(path, follow) {
            Ok(a) => self.call(vfs.setattr(a.ino, req(&a)))?.map_err(|e| e.errno()),
            Err(e) => Err(e),
        };
        let got = self.agree(what, expected, actual)?;
        if let (Some(a), Ok((p, e))) = (&got, expected) {
            self.same_attr(p, a, e).map_err(|e| format!("{what} reply: {e}"))?;
        }
        Ok(got)
    }

    /// Keeps at most MAX_HANDLES open: closes the oldest before opening another.
    fn make_room(&mut self) -> Result<(), String> {
        if self.handles.len() >= MAX_HANDLES {
            self.close(0)?;
        }
        Ok(())
    }

    /// close(): flush (which commits, close_waits) then release and the handle's lookup.
    pub(super) fn close(&mut self, slot: usize) -> Result<(), String> {
        let vfs = self.vfs();
        let (fh, ino) = self.handles.remove(slot);
        self.writable.remove(slot);
        let flushed = self.call(vfs.flush(fh))?;
        vfs.release(fh);
        vfs.forget(ino, 1);
        self.model.close(slot);
        flushed.map_err(|e| format!("close: {e}"))
    }

    fn truncate(&mut self, target: &Target, size: u64) -> Result<(), String> {
        let vfs = self.vfs();
        match target {
            Target::Handle(h) => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                if !self.writable[s] {
                    // ftruncate of a read-only descriptor never reaches the filesystem.
                    self.skipped += 1;
                    return Ok(());
                }
                let (fh, ino) = self.handles[s];
                let req = SetAttr {
                    size: Some(size),
                    fh: Some(fh),
                    ..SetAttr::default()
                };
                let a = self
                    .call(vfs.setattr(ino, req))?
                    .map_err(|e| format!("ftruncate: {e}"))?;
                let id = self.model.handles[s];
                self.model.truncate_id(id, size);
                if a.size != size {
                    return Err(format!("ftruncate: size {} after truncating to {size}", a.size));
                }
            }
            Target::Path(path) => {
                let expected = self.model.truncate_path(path, size);
                let actual = match self.resolve(path, true) {
                    Ok(a) => {
                        let req = SetAttr {
                            size: Some(size),
                            ..SetAttr::default()
                        };
                        self.call(vfs.setattr(a.ino, req))?.map_err(|e| e.errno())
                    }
                    Err(e) => Err(e),
                };
                if let Some(a) = self.agree("truncate", &expected, actual)?
                    && a.size != size
                {
                    return Err(format!("truncate: size {} after truncating to {size}", a.size));
                }
            }
        }
        Ok(())
    }

    fn read(&mut self, target: &Target, offset: u64, len: u32) -> Result<(), String> {
        let vfs = self.vfs();
        match target {
            Target::Handle(h) => {
                let Some(s) = self.slot(*h) else {
                    self.skipped += 1;
                    return Ok(());
                };
                let got = self
                    .call(vfs.read(self.handles[s].0, offset, len))?
                    .map_err(|e| format!("read: {e}"))?;
                let want = self.model.read_id(self.model.handles[s], offset, len);
                if got[..] != want[..] {
                    return Err(format!(
                        "read at {offset}+{len}: {} bytes differ from the model's {}",
                        got.len(),
                        want.len()
                    ));
                }
            }
            Target::Path(path) => {
                let expected = self.model.read_path(path, offset, len);
                if self.skip(&expected) {
                    return Ok(());
                }
                let actual = match self.resolve(path, true) {
                    Ok(a) => self.read_path(a.ino, offset, len)?,
                    Err(e) => Err(e),
                };
                if let Some(got) = self.agree("read", &expected, actual)?
                    && got != *expected.as_ref().unwrap()
                {
                    return Err(format!(
                        "read of {path} at {offset}+{len}: bytes differ from the model's"
                    ));
                }
            }
        }
        Ok(())
    }

    /// open(O_RDONLY), pread, close.
    pub(super) fn read_path(&mut self, ino: Ino, offset: u64, len: u32) -> Result<Result<Vec<u8>, i32>, String> {
        let vfs = self.vfs();
        let fh = match self.call(vfs.open_with(ino, OpenMode::default()))? {
            Ok((fh, _)) => fh,
            Err(e) => return Ok(Err(e.errno())),
        };
        let r = self.call(vfs.read(fh, offset, len))?;
        let flushed = self.call(vfs.flush(fh))?;
        vfs.release(fh);
        flushed.map_err(|e| format!("close after read: {e}"))?;
        Ok(r.map(|b| b.to_vec()).map_err(|e| e.errno()))
    }

    fn rename(&mut self, from: &str, to: &str, noreplace: bool, exchange: bool) -> Result<(), String> {
        let vfs = self.vfs();
        let expected = self.model.rename(from, to, noreplace, exchange);
        // The kernel resolves both parents, then looks up the source (and, to exchange, the target).
        let actual = (|| {
            let (fp, fname) = walk::walk_parent(self, from)?;
            let (tp, tname) = walk::walk_parent(self, to)?;
            self.lookup_in(fp.ino, &fname)?;
            if exchange {
                self.lookup_in(tp.ino, &tname)?;
            }
            Ok((fp.ino, fname, tp.ino, tname))
        })();
        let actual = match actual {
            Ok((fp, fname, tp, tname)) => {
                let flags = RenameFlags { noreplace, exchange };
                self.call(vfs.rename(fp, &fname, tp, &tname, flags))?
                    .map_err(|e: VfsError| e.errno())
            }
            Err(e) => Err(e),
        };
        self.agree("rename", &expected, actual)?;
        Ok(())
    }
}
