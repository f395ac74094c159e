//! The privileged half of a source mount: open `/dev/fuse`, mount it with mount(2), and hand the
//! descriptor to the hubfs server process over a unix socket (`SCM_RIGHTS`). The server never
//! needs to open `/dev/fuse` nor call mount itself. Also the bind mounts and unmounts of targets.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path has a NUL byte"))
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Opens the FUSE device (close-on-exec: only the descriptor sent over the socket reaches the server).
pub fn open_fuse() -> io::Result<OwnedFd> {
    let path = c"/dev/fuse";
    // SAFETY: a valid NUL-terminated path; the returned descriptor is owned below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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
    let mut data = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,allow_other,max_read={}",
        fd.as_raw_fd(),
        m.max_read
    );
    if m.default_permissions {
        data.push_str(",default_permissions");
    }
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOATIME;
    if m.read_only {
        flags |= libc::MS_RDONLY;
    }
    let src = CString::new(m.fsname).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "fsname"))?;
    let target = cpath(dir)?;
    let data = CString::new(data).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "options"))?;
    // SAFETY: every pointer is a valid NUL-terminated string alive for the call.
    check(unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            c"fuse.hubfs".as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    })
}

/// Bind-mounts `source` at `target`, read-only if asked (a second remount: the kernel ignores
/// MS_RDONLY on the bind itself).
pub fn bind(source: &Path, target: &Path, read_only: bool) -> io::Result<()> {
    let s = cpath(source)?;
    let t = cpath(target)?;
    // SAFETY: valid NUL-terminated paths; null fstype and data are allowed for MS_BIND.
    check(unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    })?;
    if read_only {
        let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
        // SAFETY: as above.
        let r = check(unsafe { libc::mount(std::ptr::null(), t.as_ptr(), std::ptr::null(), flags, std::ptr::null()) });
        if let Err(e) = r {
            let _ = unmount(target, true);
            return Err(e);
        }
    }
    Ok(())
}

/// umount(2); `detach` for MNT_DETACH (never waits for busy users, never talks to the server).
pub fn unmount(dir: &Path, detach: bool) -> io::Result<()> {
    let c = cpath(dir)?;
    let flags = if detach { libc::MNT_DETACH } else { 0 };
    // SAFETY: a valid NUL-terminated path.
    check(unsafe { libc::umount2(c.as_ptr(), flags) })
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

/// Sends `bytes` with `fd` attached (SCM_RIGHTS) on the connected unix socket `sock`.
pub fn send_fd(sock: RawFd, bytes: &[u8], fd: RawFd) -> io::Result<()> {
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives sendmsg.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer is CMSG_SPACE bytes for one descriptor, so the first header and
    // its data fit in it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    // SAFETY: `msg` is fully initialised above.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != bytes.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
    }
    Ok(())
}

/// Receives one message of at most `max` bytes and the descriptor attached to it.
pub fn recv_fd(sock: RawFd, max: usize) -> io::Result<(Vec<u8>, OwnedFd)> {
    let mut buf = vec![0u8; max];
    // SAFETY: pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as in send_fd.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at buffers that outlive the call.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled the control buffer; CMSG_FIRSTHDR checks its length.
    let fd = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS {
            None
        } else {
            Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>()))
        }
    };
    let Some(fd) = fd else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no descriptor in the message",
        ));
    };
    buf.truncate(n as usize);
    // SAFETY: the kernel installed this descriptor in our table for us.
    Ok((buf, unsafe { OwnedFd::from_raw_fd(fd) }))
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
        send_fd(a.as_raw_fd(), b"hello", w.as_raw_fd()).unwrap();
        let (bytes, fd) = recv_fd(b.as_raw_fd(), 64).unwrap();
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
