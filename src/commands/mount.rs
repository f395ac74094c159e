//! Running a mount in this process until it is stopped: `hubfs mount` (FUSE, or NFS with `--nfs`)
//! and `hubfs serve-nfs`, in the foreground or as the detached child of `mount --daemon`.
//!
//! Every running mount registers itself (see [`crate::registry`]) once it is usable and before it
//! says "mounted", so `hubfs status` run right after `mount --daemon` returns already lists it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::cli::{DaemonArgs, MountArgs, ServeNfsArgs, SourceArgs, StopSignals, runtime};
use crate::mount::{MountRequest, Mounted};
use crate::registry::{Frontend, MountRecord};

/// What this process is, as far as logging and detaching go.
struct ProcessSetup {
    /// The log file, when logging to one (daemon, or `--log-file`).
    log_file: Option<PathBuf>,
    /// This process is the detached child of `mount --daemon`: detach once mounted.
    daemon_child: bool,
}

/// Takes the daemon handover (the token) and opens the log file.
fn setup_process(source: &mut SourceArgs, mountpoint: &Path, d: &DaemonArgs) -> anyhow::Result<ProcessSetup> {
    let handover = crate::daemon::take_handover();
    let daemon_child = handover.is_some();
    if let Some(Some(token)) = handover {
        source.token = Some(token);
    }
    let log_file = match &d.log_file {
        Some(p) => Some(std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        None if daemon_child => Some(crate::logging::default_log_path(&cache_dir(source), mountpoint)),
        None => None,
    };
    if let Some(p) = &log_file {
        crate::logging::to_file(p, d.log_max_size).with_context(|| {
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

fn cache_dir(source: &SourceArgs) -> PathBuf {
    source.cache_dir.clone().unwrap_or_else(crate::vfs::default_cache_dir)
}

/// The revision asked for: `--revision`, else the `@REV` of the repo spec, else main.
fn revision_of(source: &SourceArgs) -> String {
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
fn record(
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
        mode: if writable { "writable" } else { "read-only" }.to_string(),
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

/// The control socket of a writable mount (`hubfs commit`, `hubfs sync`), noted in its record.
fn control(
    vfs: &std::sync::Arc<crate::vfs::VirtualFs>,
    rt: &tokio::runtime::Handle,
    rec: &mut MountRecord,
) -> Option<crate::control::ControlSocket> {
    if !vfs.is_writable() {
        return None;
    }
    match crate::control::listen(vfs.clone(), rt) {
        Ok(sock) => {
            rec.control_socket = Some(sock.path().display().to_string());
            Some(sock)
        }
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "hubfs commit and hubfs sync will not reach this mount");
            None
        }
    }
}

/// Prints the readiness line and, in a daemon child, lets go of the parent.
fn announce(line: String, setup: &ProcessSetup) -> anyhow::Result<()> {
    use std::io::Write;
    println!("{line}");
    std::io::stdout().flush()?;
    tracing::info!("{line}");
    if setup.daemon_child {
        crate::daemon::detach();
    }
    Ok(())
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Keeps the mount's resident memory close to what its caches hold (measured in
/// docs/BENCHMARKS.md). glibc gives threads their own malloc arenas (up to 8 per core) and keeps
/// freed space of multi-MiB download buffers resident inside them. Two arenas, and a thread that
/// hands free arena pages back to the kernel once a second, bound that; a fixed low mmap threshold
/// would do it too but costs a page fault per page of every large buffer (a third of the cold read
/// throughput here). Must run before the runtime starts its threads.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only adjusts allocator tuning; called before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
        let trim = std::thread::Builder::new()
            .name("hubfs-malloc-trim".to_string())
            .spawn(|| {
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                    // SAFETY: malloc_trim is thread-safe and has no preconditions.
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
            });
        if let Err(e) = trim {
            tracing::debug!(error = %e, "no malloc trim thread");
        }
    }
}

/// `hubfs mount`.
pub fn run_mount(mut args: MountArgs) -> anyhow::Result<()> {
    if args.daemon.daemon {
        if !args.nfs || !args.serve_only {
            // Fail here, in the user's terminal, when the mount could never happen.
            crate::mount::check_mountpoint(&args.mountpoint)?;
        }
        return crate::daemon::run_detached();
    }
    let setup = setup_process(&mut args.source, &args.mountpoint, &args.daemon)?;
    if args.nfs {
        let kernel_dir = (!args.serve_only).then(|| args.mountpoint.clone());
        return run_nfs(args.source, args.nfs_addr, Some(args.mountpoint), kernel_dir, setup);
    }
    tune_malloc();
    let (client, mut vfs) = args.source.to_settings();
    if let Some(w) = vfs.write.as_mut() {
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
    let mounted = crate::mount::mount(req, &rt)?;
    let mut rec = record(
        &args.source,
        mounted.vfs.is_writable(),
        &mounted.commit,
        absolute(&args.mountpoint).display().to_string(),
        Frontend::Fuse,
        None,
        &setup,
    );
    let _control = control(&mounted.vfs, rt.handle(), &mut rec);
    rec.readahead_kib =
        crate::mount::readahead_of(&args.mountpoint).map(|got| (mounted.vfs.readahead() / 1024, got / 1024));
    if !mounted.vfs.is_writable() {
        // The kernel's INIT has been answered once the root can be looked at.
        let _ = std::fs::metadata(&args.mountpoint);
        rec.passthrough = Some(mounted.passthrough.describe().to_string());
    }
    let _registration = crate::registry::register(rec);
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
    if vfs.is_writable() {
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

/// `hubfs serve-nfs`.
pub fn run_serve_nfs(args: ServeNfsArgs) -> anyhow::Result<()> {
    let setup = ProcessSetup {
        log_file: None,
        daemon_child: false,
    };
    run_nfs(args.source, args.nfs_addr, None, None, setup)
}

/// Serves over NFS. `dir`: the mountpoint named on the command line (`mount --nfs`), `kernel_dir`:
/// where to mount with the kernel's client (not with `--serve-only`).
fn run_nfs(
    source: SourceArgs,
    addr: SocketAddr,
    dir: Option<PathBuf>,
    kernel_dir: Option<PathBuf>,
    setup: ProcessSetup,
) -> anyhow::Result<()> {
    if let Some(d) = &kernel_dir {
        // Fail before any network call when the mount could never happen.
        crate::mount::check_mountpoint(d)?;
        if !crate::nfs::server::kernel_has_nfs_client() {
            anyhow::bail!(
                "this kernel has no NFS client (no \"nfs\" in /proc/filesystems): mount over FUSE instead \
                 (drop --nfs), or add --serve-only and point a userspace NFS client at the server"
            );
        }
    }
    tune_malloc();
    let (client, vfs) = source.to_settings();
    let ttl = vfs.metadata_ttl;
    let drain = source.drain_timeout;
    let rt = runtime()?;
    let mut signals = {
        let _g = rt.enter();
        StopSignals::new()?
    };
    let opened = crate::mount::open_vfs(&source.repo, source.revision.as_deref(), &client, &vfs, &rt)?;
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
        let rec = record(
            &source,
            opened.vfs.is_writable(),
            &opened.commit,
            registered_at,
            Frontend::Nfs,
            Some(served),
            &setup,
        );
        let _registration = crate::registry::register(rec);
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
            && let Err(e) = crate::mount::unmount(d)
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

/// Waits for SIGINT/SIGTERM (then unmounts) or for an external unmount.
pub fn wait_until_unmounted(
    rt: &tokio::runtime::Runtime,
    mounted: Mounted,
    mut signals: StopSignals,
) -> anyhow::Result<()> {
    let dir = mounted.mountpoint.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let joiner = std::thread::spawn(move || {
        let r = mounted.join();
        let _ = tx.send(());
        r
    });
    rt.block_on(async {
        tokio::select! {
            _ = signals.recv() => {
                tracing::info!("signal received, unmounting");
                crate::mount::unmount(&dir)?;
            }
            _ = rx => {}
        }
        Ok::<_, anyhow::Error>(())
    })?;
    joiner
        .join()
        .map_err(|_| anyhow::anyhow!("FUSE session thread panicked"))?
}
