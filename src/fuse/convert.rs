//! Conversions between the kernel's FUSE types and VirtualFs's, and the answers the adapter
//! computes itself (SEEK_DATA/SEEK_HOLE); kept apart from the request handlers in `mod.rs`.

use std::ffi::OsStr;

use fuser::{Errno, FileAttr, FileType, INodeNo, Request, TimeOrNow};

use crate::vfs::error::VfsError;
use crate::vfs::{Attr, Caller, Kind, NewNode, TimeSet};

pub(super) fn errno(e: &VfsError) -> Errno {
    let n = e.errno();
    if n == libc::EIO {
        tracing::debug!(error = %e, "answering EIO");
    }
    Errno::from_i32(n)
}

pub(super) fn file_type(k: Kind) -> FileType {
    match k {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDevice => FileType::CharDevice,
        Kind::BlockDevice => FileType::BlockDevice,
    }
}

pub fn to_fuse(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 1 << 20,
        flags: 0,
    }
}

/// The creator of a new entry: the ids the kernel sent with the request.
pub(super) fn new_node(req: &Request, mode: u32) -> NewNode {
    NewNode {
        mode: Some(mode),
        caller: Some(Caller {
            uid: req.uid(),
            gid: req.gid(),
        }),
    }
}

pub(super) fn name_of(name: &OsStr) -> Option<String> {
    name.to_str().map(str::to_string)
}

pub(super) fn time_of(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::SpecificTime(t) => TimeSet::At(t),
        TimeOrNow::Now => TimeSet::Now,
    }
}

/// A name that is not UTF-8 cannot be a Hub path.
pub(super) fn bad_name() -> Errno {
    Errno::EINVAL
}

/// The answer of a file system without holes to `lseek(fd, offset, SEEK_DATA | SEEK_HOLE)`: data
/// runs from 0 to `size`, the only hole is the virtual one at the end.
pub(super) fn seek_data_hole(offset: i64, whence: i32, size: i64) -> Result<i64, i32> {
    if offset < 0 {
        return Err(libc::EINVAL);
    }
    match whence {
        libc::SEEK_DATA if offset < size => Ok(offset),
        libc::SEEK_HOLE if offset < size => Ok(size),
        libc::SEEK_DATA | libc::SEEK_HOLE => Err(libc::ENXIO),
        _ => Err(libc::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seek_data_and_hole_as_a_file_without_holes() {
        assert_eq!(seek_data_hole(0, libc::SEEK_DATA, 10), Ok(0));
        assert_eq!(seek_data_hole(4, libc::SEEK_DATA, 10), Ok(4));
        assert_eq!(seek_data_hole(4, libc::SEEK_HOLE, 10), Ok(10));
        assert_eq!(seek_data_hole(10, libc::SEEK_DATA, 10), Err(libc::ENXIO));
        assert_eq!(seek_data_hole(10, libc::SEEK_HOLE, 10), Err(libc::ENXIO));
        assert_eq!(seek_data_hole(0, libc::SEEK_DATA, 0), Err(libc::ENXIO));
        assert_eq!(seek_data_hole(-1, libc::SEEK_DATA, 10), Err(libc::EINVAL));
        assert_eq!(seek_data_hole(0, 99, 10), Err(libc::EINVAL));
    }
}
