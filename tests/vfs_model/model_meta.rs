//! The model's metadata operations (chmod, chown, utimens) and its special entries (symlink,
//! mknod, readlink, link), each with Linux's answer.

use super::{Entry, MAX_TARGET, Model, Node, Res, S_ISGID, S_ISUID, S_IXGRP, Special, Time};
use crate::ops::{NodeType, SetTime, Who};

impl Model {
    pub fn chmod(&mut self, path: &str, mode: u32) -> Res<(String, Entry)> {
        let (p, _) = self.stat(path, true)?;
        let m = self.meta_mut(&p).expect("exists");
        m.mode = mode & 0o7777;
        self.changed(&p);
        Ok((p.clone(), self.entry(&p).unwrap()))
    }

    /// chown: also clears setuid, and setgid with group execute, of anything but a directory
    /// (the kernel sends that mode change along to a FUSE file system without handle_killpriv).
    pub fn chown(&mut self, path: &str, uid: Option<u32>, gid: Option<u32>, follow: bool) -> Res<(String, Entry)> {
        let (p, e) = self.stat(path, follow)?;
        let dir = e.node == Node::Dir;
        let m = self.meta_mut(&p).expect("exists");
        if let Some(u) = uid {
            m.uid = u;
        }
        if let Some(g) = gid {
            m.gid = g;
        }
        if !dir {
            m.mode = chown_kill(m.mode).unwrap_or(m.mode);
        }
        self.changed(&p);
        Ok((p.clone(), self.entry(&p).unwrap()))
    }

    pub fn utimens(&mut self, path: &str, mtime: SetTime, follow: bool) -> Res<(String, Entry)> {
        let (p, _) = self.stat(path, follow)?;
        let now = self.now;
        let m = self.meta_mut(&p).expect("exists");
        match mtime {
            SetTime::Omit => {}
            SetTime::Now => m.mtime = Time::After(now),
            SetTime::At(t) => m.mtime = Time::Exact(t),
        }
        self.changed(&p);
        Ok((p.clone(), self.entry(&p).unwrap()))
    }

    pub fn symlink(&mut self, path: &str, target: &str, who: Option<Who>) -> Res<()> {
        // The target is read (getname) before the walk.
        if target.is_empty() {
            return Err(libc::ENOENT);
        }
        if target.len() > MAX_TARGET {
            return Err(libc::ENAMETOOLONG);
        }
        let at = self.place(path, false)?;
        if at.node.is_some() {
            return Err(libc::EEXIST);
        }
        self.insert(&at.parent, at.path, Node::Symlink(target.to_string()), 0o777, who);
        Ok(())
    }

    pub fn mknod(&mut self, path: &str, kind: NodeType, mode: u32, who: Option<Who>) -> Res<()> {
        let at = self.place(path, false)?;
        if at.node.is_some() {
            return Err(libc::EEXIST);
        }
        let node = match kind {
            NodeType::Regular => Node::File(self.new_file()),
            NodeType::Fifo => Node::Special(Special::Fifo),
            NodeType::Socket => Node::Special(Special::Socket),
            NodeType::Char(r) => Node::Special(Special::Char(r)),
            NodeType::Block(r) => Node::Special(Special::Block(r)),
        };
        self.insert(&at.parent, at.path, node, mode, who);
        self.collect();
        Ok(())
    }

    pub fn readlink(&mut self, path: &str) -> Res<String> {
        match self.place(path, false)?.node {
            None => Err(libc::ENOENT),
            Some(Node::Symlink(t)) => Ok(t),
            Some(_) => Err(libc::EINVAL),
        }
    }

    /// link(2) (linkat without AT_SYMLINK_FOLLOW): the source is walked, then the new name's
    /// directory, which must not hold the name yet; a directory source is EPERM. The new name is
    /// the same inode: one content, one metadata, ctime moved.
    pub fn link(&mut self, from: &str, to: &str) -> Res<()> {
        let src = self.place(from, false)?;
        if src.node.is_none() {
            return Err(libc::ENOENT);
        }
        let at = self.place(to, false)?;
        if at.node.is_some() {
            return Err(libc::EEXIST);
        }
        if src.node == Some(Node::Dir) {
            return Err(libc::EPERM);
        }
        let group = match self.tree.get(&src.path).and_then(|e| e.link) {
            Some(g) => g,
            None => {
                self.next_link += 1;
                self.next_link
            }
        };
        let mut e = self.tree.get(&src.path).cloned().expect("exists");
        e.link = Some(group);
        if let Some(s) = self.tree.get_mut(&src.path) {
            s.link = Some(group);
        }
        self.tree.insert(at.path.clone(), e);
        self.changed(&src.path);
        self.dir_changed(&at.parent);
        Ok(())
    }
}

/// The mode a chown leaves on a non-directory whose setuid (or setgid with group execute) bit
/// it clears; `None`: nothing to clear.
pub fn chown_kill(mode: u32) -> Option<u32> {
    let mut m = mode;
    if m & S_ISUID != 0 {
        m &= !S_ISUID;
    }
    if m & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP {
        m &= !S_ISGID;
    }
    (m != mode).then_some(m)
}
