//! Running a mount in this process until it is stopped, as `hubfs mount` (FUSE, or NFS with
//! `--nfs`) and `hubfs serve-nfs` both do, in the foreground or as the detached child of
//! `mount --daemon`: the log file, the registry record, the control socket, the readiness line.
//!
//! Every running mount registers itself (see [`crate::process::registry`]) once it is usable and
//! before it says "mounted", so `hubfs status` run right after `mount --daemon` returns already
//! lists it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::source::{DaemonArgs, SourceArgs};
use crate::process::registry::{Frontend, MountRecord};

/// What this process is, as far as logging and detaching go.
pub(super) struct ProcessSetup {
    /// The log file, when logging to one (daemon, or `--log-file`).
    pub(super) log_file: Option<PathBuf>,
    /// This process is the detached child of `mount --daemon`: detach once mounted.
    pub(super) daemon_child: bool,
}

/// Takes the daemon handover (the token) and opens the log file.
pub(super) fn setup_process(
    source: &mut SourceArgs,
    mountpoint: &Path,
    d: &DaemonArgs,
) -> anyhow::Result<ProcessSetup> {
    let handover = crate::process::daemon::take_handover();
    let daemon_child = handover.is_some();
    if let Some(Some(token)) = handover {
        source.token = Some(token);
    }
    let log_file = match &d.log_file {
        Some(p) => Some(std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        None if daemon_child => Some(crate::process::logging::default_log_path(
            &cache_dir(source),
            mountpoint,
        )),
        None => None,
    };
    if let Some(p) = &log_file {
        crate::process::logging::to_file(p, d.log_max_size).with_context(|| {
            format!(
                "cannot write the log file {} (choose another with --log-file)",
                p.display()
            )
        })?;
        if daemon_child {
            // Before "mounted": the parent prints it, also when mounting fails.
            println!("log: {}", p.display());
        }
    }
    Ok(ProcessSetup { log_file, daemon_child })
}

pub(super) fn cache_dir(source: &SourceArgs) -> PathBuf {
    source.cache_dir.clone().unwrap_or_else(crate::vfs::default_cache_dir)
}

/// The revision asked for: `--revision`, else the `@REV` of the repo spec, else main.
pub(super) fn revision_of(source: &SourceArgs) -> String {
    source
        .revision
        .clone()
        .or_else(|| {
            crate::hub_client::RepoRef::parse(&source.repo)
                .ok()
                .and_then(|(_, rev, _)| rev)
        })
        .unwrap_or_else(|| "main".to_string())
}

/// The registry record of a mount of `source` (pid and start time are filled in by `register`).
pub(super) fn record(
    source: &SourceArgs,
    writable: bool,
    commit: &str,
    mountpoint: String,
    frontend: Frontend,
    nfs_addr: Option<SocketAddr>,
    setup: &ProcessSetup,
) -> MountRecord {
    let cache = cache_dir(source);
    MountRecord {
        pid: 0,
        start_time: 0,
        repo: source.repo.clone(),
        revision: revision_of(source),
        commit: commit.to_string(),
        mountpoint,
        frontend,
        mode: if source.overlay.is_some() {
            "overlay"
        } else if writable {
            "writable"
        } else {
            "read-only"
        }
        .to_string(),
        nfs_addr: nfs_addr.map(|a| a.to_string()),
        log_file: setup.log_file.as_ref().map(|p| p.display().to_string()),
        status_file: writable.then(|| {
            cache
                .join("mounts")
                .join(format!("{}.json", std::process::id()))
                .display()
                .to_string()
        }),
        cache_dir: cache.display().to_string(),
        drain_secs: if writable { source.drain_timeout.as_secs() } else { 0 },
        control_socket: None,
        passthrough: None,
        readahead_kib: None,
    }
}

/// The mount's control socket (`hubfs status`, and `hubfs commit` and `hubfs sync` of a writable
/// mount), noted in its record.
pub(super) fn control(
    vfs: &std::sync::Arc<crate::vfs::VirtualFs>,
    rt: &tokio::runtime::Handle,
    rec: &mut MountRecord,
) -> Option<crate::process::control::ControlSocket> {
    match crate::process::control::listen(vfs.clone(), rt) {
        Ok(sock) => {
            rec.control_socket = Some(sock.path().display().to_string());
            Some(sock)
        }
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "hubfs status, commit and sync will not reach this mount");
            None
        }
    }
}

/// Prints the readiness line and, in a daemon child, lets go of the parent.
pub(super) fn announce(line: String, setup: &ProcessSetup) -> anyhow::Result<()> {
    use std::io::Write;
    println!("{line}");
    std::io::stdout().flush()?;
    tracing::info!("{line}");
    if setup.daemon_child {
        crate::process::daemon::detach();
    }
    Ok(())
}

pub(super) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}
