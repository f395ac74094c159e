//! `hubfs mount`: a repo at a directory over FUSE (or over NFS with `--nfs`), in the foreground or
//! detached with `--daemon`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::serve::{absolute, announce, control, record, setup_process};
use super::source::{DaemonArgs, SourceArgs};
use crate::process::registry::Frontend;
use crate::process::session::{MountRequest, wait_until_unmounted};
use crate::process::signals::{StopSignals, runtime};

#[derive(Args, Debug)]
pub struct MountArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Existing, empty directory to mount on.
    pub mountpoint: PathBuf,
    /// Let other users access the mount.
    #[arg(long)]
    pub allow_other: bool,
    #[command(flatten)]
    pub daemon: DaemonArgs,
    /// Serve over NFSv3 and mount with the kernel's NFS client instead of FUSE.
    #[arg(long)]
    pub nfs: bool,
    /// With --nfs: the address the NFS server listens on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0", requires = "nfs")]
    pub nfs_addr: SocketAddr,
    /// With --nfs: serve only, do not mount (for a kernel without an NFS client, or another host).
    #[arg(long, requires = "nfs")]
    pub serve_only: bool,
    /// With --write: what close() waits for. `upload` (default): the file is durable in the local
    /// journal and, if the Hub stores it through LFS/Xet (files of 1 MiB and more), its content is
    /// uploaded, so close() reports upload errors; the commit follows, grouped with others. `commit`:
    /// the Hub commit holding the file (one commit per close when closes come one by one: mind the
    /// Hub's 128 commits an hour). `stage`: durable in the local journal only; upload and commit
    /// follow, grouped. fsync does what `upload` does (`commit` with --close commit).
    #[arg(long, default_value = "upload", value_parser = ["upload", "commit", "stage"], requires = "write")]
    pub close: String,
}

/// `hubfs mount`.
pub fn run(mut args: MountArgs) -> anyhow::Result<()> {
    if args.daemon.daemon {
        if !args.nfs || !args.serve_only {
            // Fail here, in the user's terminal, when the mount could never happen.
            crate::process::session::check_mountpoint(&args.mountpoint)?;
        }
        return crate::process::daemon::run_detached();
    }
    let setup = setup_process(&mut args.source, &args.mountpoint, &args.daemon)?;
    super::serve_nfs::start_metrics(&args.source)?;
    if args.nfs {
        let kernel_dir = (!args.serve_only).then(|| args.mountpoint.clone());
        return super::serve_nfs::run_nfs(args.source, args.nfs_addr, Some(args.mountpoint), kernel_dir, setup);
    }
    crate::process::allocator::tune();
    let (client, mut vfs) = args.source.to_settings();
    if let Some(o) = vfs.write.as_mut().and_then(|w| w.overlay.as_mut()) {
        o.mountpoint = Some(absolute(&args.mountpoint));
    }
    if let Some(w) = vfs.write.as_mut().filter(|w| w.overlay.is_none()) {
        w.close = match args.close.as_str() {
            "commit" => crate::vfs::CloseMode::Commit,
            "stage" => crate::vfs::CloseMode::Stage,
            _ => crate::vfs::CloseMode::Upload,
        };
    }
    let drain = args.source.drain_timeout;
    let req = MountRequest {
        repo: args.source.repo.clone(),
        mountpoint: args.mountpoint.clone(),
        revision: args.source.revision.clone(),
        client,
        vfs,
        allow_other: args.allow_other,
    };
    let rt = runtime()?;
    let signals = {
        let _g = rt.enter();
        StopSignals::new()?
    };
    let ready = stop_before_ready(&rt, &args.mountpoint)?;
    let mounted = crate::process::session::mount(req, &rt)?;
    ready.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut rec = record(
        &args.source,
        mounted.vfs.is_writable(),
        &mounted.commit,
        absolute(&args.mountpoint).display().to_string(),
        Frontend::Fuse,
        None,
        &setup,
    );
    let revision = crate::process::metrics::asked_revision(&args.source.repo, args.source.revision.as_deref());
    let passthrough = Some(mounted.passthrough.clone());
    crate::process::metrics::watch(&mounted.vfs, &mounted.repo.to_string(), &revision, "fuse", passthrough);
    let _control = control(&mounted.vfs, rt.handle(), &mut rec);
    rec.readahead_kib =
        crate::fuse::readahead::readahead_of(&args.mountpoint).map(|got| (mounted.vfs.readahead() / 1024, got / 1024));
    if !mounted.vfs.is_writable() {
        // The kernel's INIT has been answered once the root can be looked at.
        let _ = std::fs::metadata(&args.mountpoint);
        rec.passthrough = Some(mounted.passthrough.describe().to_string());
    }
    let _registration = crate::process::registry::register(rec);
    announce(
        format!(
            "mounted {}@{} at {}",
            args.source.repo,
            mounted.commit,
            args.mountpoint.display()
        ),
        &setup,
    )?;
    let vfs = mounted.vfs.clone();
    let r = wait_until_unmounted(&rt, mounted, signals);
    if vfs.is_overlay() {
        // Nothing is committed: the layer is made durable and stays for the next mount.
        rt.block_on(vfs.drain(drain));
        vfs.remove_status();
    }
    if vfs.is_writable() && !vfs.is_overlay() {
        // The kernel released every handle: commit what is left, within the drain timeout.
        let left = rt.block_on(vfs.drain(drain));
        vfs.remove_status();
        if left > 0 {
            tracing::warn!(
                "{left} file(s) could not be committed before the drain timeout; they stay staged and the \
                 next `hubfs mount --write` of this repo commits them"
            );
        }
    }
    tracing::info!("unmounted");
    r
}

/// Stops the process at SIGINT or SIGTERM while the mount is not ready yet: opening the repo waits
/// for the Hub (up to `--max-hub-wait`, 10 minutes by default, when it refuses or is down), and a
/// stop sent meanwhile was caught and then left unanswered until that wait ended. There is nothing
/// to drain before the mount is ready; a FUSE mount this process made already is detached so
/// that none is left behind. Set the returned flag once the mount is ready: stops are the
/// mount's own from then on.
fn stop_before_ready(
    rt: &tokio::runtime::Runtime,
    mountpoint: &std::path::Path,
) -> anyhow::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut early = {
        let _g = rt.enter();
        StopSignals::new()?
    };
    let (flag, dir) = (ready.clone(), absolute(mountpoint));
    rt.spawn(async move {
        early.recv().await;
        if flag.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        // The mountpoint was checked free before: a hubfs mount there now is this process's.
        if crate::process::mountinfo::mounted_at(&dir).is_some_and(|m| m.fstype == "fuse.hubfs") {
            let _ = rustix::mount::unmount(&dir, rustix::mount::UnmountFlags::DETACH);
        }
        tracing::info!("stopped before the mount was ready");
        eprintln!("hubfs: stopped before {} was mounted", dir.display());
        std::process::exit(143);
    });
    Ok(ready)
}
