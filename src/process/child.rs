//! Child processes of hubfs: what runs in a child between fork and exec (a session of its own, a
//! descriptor put at a fixed number), and the child's side of that descriptor. The only place
//! hubfs runs code between fork and exec, or takes ownership of a descriptor by its number.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// The child leads a session of its own (setsid(2) between fork and exec): no controlling
/// terminal, and the end of the caller's session or process group does not reach it.
pub fn new_session(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe calls
    // are allowed: it makes one system call (setsid, a raw syscall in rustix), allocates nothing,
    // takes no lock and touches no memory shared with the parent's other threads.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()?;
            Ok(())
        });
    }
}

/// As [`new_session`], and the child finds `fd` at descriptor number `at`, open across exec (its
/// close-on-exec flag cleared). `fd` must stay open in the parent until `spawn` returns: the
/// caller holds what it borrows from.
pub fn new_session_with_fd(cmd: &mut Command, fd: BorrowedFd<'_>, at: RawFd) {
    let from = fd.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec: it makes only async-signal-safe
    // system calls (setsid, then fcntl or dup2 on plain descriptor numbers), allocates nothing and
    // takes no lock. `from` is open in the child (the parent holds it open until spawn returns, and
    // the child's table is a copy); dup2 replaces whatever `at` was, which is what the child is for.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            let r = if from == at {
                libc::fcntl(at, libc::F_SETFD, 0)
            } else {
                libc::dup2(from, at)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Set once the inherited socket is taken: a descriptor number is owned once.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The child's side of [`new_session_with_fd`]: the unix socket its parent put at `at`, owned from
/// now on. `None` when `at` is not an open socket (the process was started by hand) or was taken
/// already.
pub fn take_inherited_socket(at: RawFd) -> Option<UnixStream> {
    // Asked of /proc, which needs no descriptor of ours: a closed `at` is simply not there.
    let meta = std::fs::metadata(format!("/proc/self/fd/{at}")).ok()?;
    if !meta.file_type().is_socket() || TAKEN.swap(true, Ordering::SeqCst) {
        return None;
    }
    // SAFETY: `at` is open and a socket (its /proc entry says so), put there by the parent for this
    // process; nothing else in this process owns it (hubfs opens no descriptor at a fixed number,
    // and `TAKEN` lets this happen once), so the stream may own and close it.
    Some(unsafe { UnixStream::from_raw_fd(at) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_or_other_descriptor_is_not_taken() {
        // No process has this many descriptors open.
        assert!(take_inherited_socket(1 << 20).is_none());
        let f = tempfile::tempfile().unwrap();
        assert!(take_inherited_socket(f.as_raw_fd()).is_none(), "a file is no socket");
    }

    #[test]
    fn a_child_leads_its_own_session_and_finds_the_descriptor() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "test -S /proc/self/fd/7 && echo $$ $(ps -o sid= -p $$)"]);
        new_session_with_fd(&mut cmd, std::os::fd::AsFd::as_fd(&a), 7);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "fd 7 is the socket in the child");
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert_eq!(ids.len(), 2, "pid and session id: {ids:?}");
        assert_eq!(ids[0], ids[1], "the child leads its session");
    }
}
