//! `hubfs serve-nfs`, and `hubfs mount --nfs`: a repo served over NFSv3, mounted with the kernel's
//! NFS client or left for any client.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::serve::{ProcessSetup, absolute, announce, control, record};
use super::source::SourceArgs;
use crate::process::registry::Frontend;
use crate::process::signals::{StopSignals, runtime};

#[derive(Args, Debug)]
pub struct ServeNfsArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Address to listen on, e.g. 127.0.0.1:2049 (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub nfs_addr: SocketAddr,
}

/// `hubfs serve-nfs`.
pub fn run(args: ServeNfsArgs) -> anyhow::Result<()> {
    let setup = ProcessSetup {
        log_file: None,
        daemon_child: false,
    };
    start_metrics(&args.source)?;
    run_nfs(args.source, args.nfs_addr, None, None, setup)
}

/// Starts the `/metrics` endpoint when `--metrics-addr` asks for one (it lives as long as the process).
pub(super) fn start_metrics(source: &SourceArgs) -> anyhow::Result<()> {
    if let Some(addr) = source.metrics_addr {
        crate::metrics::server::serve(addr, None)?;
    }
    Ok(())
}

/// Serves over NFS. `dir`: the mountpoint named on the command line (`mount --nfs`), `kernel_dir`:
/// where to mount with the kernel's client (not with `--serve-only`).
pub(super) fn run_nfs(
    source: SourceArgs,
    addr: SocketAddr,
    dir: Option<PathBuf>,
    kernel_dir: Option<PathBuf>,
    setup: ProcessSetup,
) -> anyhow::Result<()> {
    if let Some(d) = &kernel_dir {
        // Fail before any network call when the mount could never happen.
        crate::process::session::check_mountpoint(d)?;
        if !crate::nfs::server::kernel_has_nfs_client() {
            anyhow::bail!(
                "this kernel has no NFS client (no \"nfs\" in /proc/filesystems): mount over FUSE instead \
                 (drop --nfs), or add --serve-only and point a userspace NFS client at the server"
            );
        }
    }
    crate::process::allocator::tune();
    let (client, mut vfs) = source.to_settings();
    if let Some(o) = vfs.write.as_mut().and_then(|w| w.overlay.as_mut()) {
        o.mountpoint = dir.as_deref().map(absolute);
    }
    let ttl = vfs.metadata_ttl;
    let drain = source.drain_timeout;
    let rt = runtime()?;
    let mut signals = {
        let _g = rt.enter();
        StopSignals::new()?
    };
    let opened = crate::process::session::open_vfs(&source.repo, source.revision.as_deref(), &client, &vfs, &rt)?;
    let revision = crate::process::metrics::asked_revision(&source.repo, source.revision.as_deref());
    crate::process::metrics::watch(&opened.vfs, &opened.repo.to_string(), &revision, "nfs", None);
    rt.block_on(async {
        let server = crate::nfs::server::NfsServer::start(opened.vfs.clone(), addr).await?;
        let served = server.addr();
        println!("nfs: {served}");
        if let Some(d) = &kernel_dir {
            let k = d.clone();
            let writable = opened.vfs.is_writable();
            tokio::task::spawn_blocking(move || crate::nfs::server::kernel_mount(served, &k, ttl, writable)).await??;
            opened.vfs.set_mountpoint(&absolute(d));
        }
        let url = format!("nfs://{served}/");
        let registered_at = match &dir {
            Some(d) => absolute(d).display().to_string(),
            None => url.clone(),
        };
        let mut rec = record(
            &source,
            opened.vfs.is_writable(),
            &opened.commit,
            registered_at,
            Frontend::Nfs,
            Some(served),
            &setup,
        );
        let _control = control(&opened.vfs, &tokio::runtime::Handle::current(), &mut rec);
        let _registration = crate::process::registry::register(rec);
        let line = match (&dir, &kernel_dir) {
            (_, Some(d)) => format!("mounted {}@{} at {}", source.repo, opened.commit, d.display()),
            // `mount --nfs --serve-only` still says "mounted" so that --daemon knows it is ready.
            (Some(_), None) => format!("mounted {}@{} at {url}", source.repo, opened.commit),
            (None, None) => format!("serving {}@{}", source.repo, opened.commit),
        };
        announce(line, &setup)?;
        signals.recv().await;
        tracing::info!("signal received, stopping the NFS server");
        if let Some(d) = &kernel_dir
            && let Err(e) = crate::process::session::unmount(d)
        {
            tracing::warn!(error = %e, "unmounting the NFS mount");
        }
        server.stop();
        let vfs = &opened.vfs;
        if vfs.is_writable() {
            let left = vfs.drain(drain).await;
            vfs.remove_status();
            if left > 0 {
                tracing::warn!(
                    "{left} file(s) stay staged; the next `--write` mount or server of this repo commits them"
                );
            }
        }
        Ok(())
    })
}
