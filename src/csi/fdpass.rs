//! The privileged half of a source mount: open `/dev/fuse`, mount it with mount(2), and hand the
//! descriptor to the hubfs server process over a unix socket (`SCM_RIGHTS`). The server never
//! needs to open `/dev/fuse` nor call mount itself. Also the bind mounts and unmounts of targets.

use std::ffi::CString;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::mount::{MountFlags, UnmountFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

/// Opens the FUSE device (close-on-exec: only the descriptor sent over the socket reaches the server).
pub fn open_fuse() -> io::Result<OwnedFd> {
    // std opens with O_CLOEXEC.
    let f = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse")?;
    Ok(f.into())
}

/// What the kernel mount of a source looks like.
pub struct FuseMount<'a> {
    /// Shown as the mount's source in mountinfo, e.g. `hubfs:demo/tiny-model`.
    pub fsname: &'a str,
    pub read_only: bool,
    /// Let the kernel check modes against uid/gid (read-only sources); writable sources leave
    /// access to the pod boundary so that any uid in the pod may write.
    pub default_permissions: bool,
    pub max_read: u32,
}

/// mount(2) of a FUSE filesystem served through `fd` at `dir`.
pub fn mount_fuse(fd: &OwnedFd, dir: &Path, m: &FuseMount<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut data = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,allow_other,max_read={}",
        fd.as_raw_fd(),
        m.max_read
    );
    if m.default_permissions {
        data.push_str(",default_permissions");
    }
    let mut flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOATIME;
    if m.read_only {
        flags |= MountFlags::RDONLY;
    }
    let data = CString::new(data).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "options"))?;
    Ok(rustix::mount::mount(
        m.fsname,
        dir,
        "fuse.hubfs",
        flags,
        data.as_c_str(),
    )?)
}

/// Bind-mounts `source` at `target`, read-only if asked (a second remount: the kernel ignores
/// MS_RDONLY on the bind itself).
pub fn bind(source: &Path, target: &Path, read_only: bool) -> io::Result<()> {
    rustix::mount::mount_bind(source, target)?;
    if read_only {
        // MS_REMOUNT | MS_BIND changes the bind's flags only; the kernel reads no data for it.
        let flags = MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
        if let Err(e) = rustix::mount::mount_remount(target, flags, "") {
            let _ = unmount(target, true);
            return Err(e.into());
        }
    }
    Ok(())
}

/// umount(2); `detach` for MNT_DETACH (never waits for busy users, never talks to the server).
pub fn unmount(dir: &Path, detach: bool) -> io::Result<()> {
    let flags = if detach {
        UnmountFlags::DETACH
    } else {
        UnmountFlags::empty()
    };
    Ok(rustix::mount::unmount(dir, flags)?)
}

/// Unmounts `dir`, detaching it if busy. Already gone (EINVAL: not a mount point, ENOENT) is fine.
pub fn unmount_any(dir: &Path) -> io::Result<()> {
    match unmount(dir, false) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            tracing::info!(dir = %dir.display(), "busy: detaching it (it goes when its last user does)");
            unmount(dir, true)
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A path naming socket `name` in `dir` that fits a `sockaddr_un` (108 bytes) however long `dir`
/// is: kubelet's pod directories alone take most of it. It goes through a descriptor of `dir`
/// (`/proc/self/fd/N/name`), valid while this value lives.
pub struct SocketPath {
    _dir: std::fs::File,
    pub path: std::path::PathBuf,
}

pub fn socket_in(dir: &Path, name: &str) -> io::Result<SocketPath> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let d = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)?;
    let path = std::path::PathBuf::from(format!("/proc/self/fd/{}/{name}", d.as_raw_fd()));
    Ok(SocketPath { _dir: d, path })
}

/// Sends `bytes` with `fd` attached (SCM_RIGHTS) on the connected unix socket `sock`.
pub fn send_fd(sock: impl AsFd, bytes: &[u8], fd: impl AsFd) -> io::Result<()> {
    let fds = [fd.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the descriptor in the control message"));
    }
    let n = rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL)?;
    if n != bytes.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
    }
    Ok(())
}

/// Receives one message of at most `max` bytes and the descriptor attached to it.
pub fn recv_fd(sock: impl AsFd, max: usize) -> io::Result<(Vec<u8>, OwnedFd)> {
    let mut buf = vec![0u8; max];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    // Every descriptor received is owned here: one is kept, any other closes when dropped.
    let mut fd = None;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            for f in fds {
                fd.get_or_insert(f);
            }
        }
    }
    let Some(fd) = fd else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no descriptor in the message",
        ));
    };
    buf.truncate(got.bytes.min(max));
    Ok((buf, fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_descriptor_crosses_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut r, mut w) = UnixStream::pair().unwrap();
        send_fd(&a, b"hello", &w).unwrap();
        let (bytes, fd) = recv_fd(&b, 64).unwrap();
        assert_eq!(bytes, b"hello");
        let mut w2 = UnixStream::from(fd);
        w2.write_all(b"x").unwrap();
        drop(w2);
        w.flush().unwrap();
        let mut one = [0u8; 1];
        r.read_exact(&mut one).unwrap();
        assert_eq!(&one, b"x");
    }
}
