//! The process's tokio runtime and its stop signals (SIGINT, SIGTERM), shared by every command that
//! serves something until it is stopped; signals sent to other hubfs processes, and the one signal
//! a detached mount ignores (SIGHUP).

/// The multi-threaded runtime every long-running command uses; SIGUSR1/SIGUSR2 change its log
/// level while it runs ([`super::logging::level_signals`]).
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.spawn(super::logging::level_signals());
    Ok(rt)
}

/// SIGINT and SIGTERM, caught from the moment this is created: a mount creates it before it says
/// it is ready, so a stop sent right after that unmounts and drains instead of killing the process.
pub struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Must run inside the tokio runtime.
    pub fn new() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves at the next SIGINT or SIGTERM (or one that arrived since `new`).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Resolves on SIGINT or SIGTERM (caught from this call on).
pub async fn wait_for_signal() -> anyhow::Result<()> {
    StopSignals::new()?.recv().await;
    Ok(())
}

/// Sends `sig` to the process `pid` (a recorded hubfs process, checked alive by its caller). A pid
/// that is no single process (0, or past `i32::MAX`, which kill(2) would take for a process group)
/// is refused with EINVAL instead of signalling a group.
pub fn send(pid: u32, sig: rustix::process::Signal) -> std::io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::kill_process(pid, sig)?)
}

/// Ignores SIGHUP from now on (`SIG_IGN`, which the processes it starts inherit too). A detached
/// mount leads a session with no terminal, so a SIGHUP can only come from someone who means it as
/// "reload"; there is nothing to reload, and the default action would kill the mount.
pub fn ignore_hangup() {
    // SAFETY: installing `SIG_IGN` replaces the disposition with no handler code to run, so no
    // async-signal-safety rule applies, and it has no other precondition. rustix and std offer
    // no safe call for it.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
}
