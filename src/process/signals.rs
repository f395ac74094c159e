//! The process's tokio runtime and its stop signals (SIGINT, SIGTERM), shared by every command that
//! serves something until it is stopped.

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
