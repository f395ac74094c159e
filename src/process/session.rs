//! A repo opened as a VirtualFs and served: the checks a person can act on, opening it, a FUSE
//! session over it, waiting for a signal (or an external unmount) and leaving cleanly. Used by the
//! `mount`, `serve-nfs`, `demo` and `unmount` commands, the CSI plugin's servers, tests and benches.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};

use crate::fuse::{FuseAdapter, MAX_READ};
use crate::hub_client::{HubClient, HubClientConfig, HubClientError, RepoRef, WriteAccess};
use crate::process::exit::{self, Failure};
use crate::process::signals::StopSignals;
use crate::vfs::error::VfsError;
use crate::vfs::{VfsOptions, VirtualFs};

#[derive(Debug, Clone)]
pub struct MountRequest {
    pub repo: String,
    pub mountpoint: PathBuf,
    pub revision: Option<String>,
    pub client: HubClientConfig,
    pub vfs: VfsOptions,
    pub allow_other: bool,
}

/// A live mount: dropping it unmounts.
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    pub mountpoint: PathBuf,
    pub repo: RepoRef,
    pub commit: String,
    pub vfs: Arc<VirtualFs>,
    /// Opens the kernel served through FUSE passthrough.
    pub passthrough: crate::fuse::PassthroughStats,
}

impl Mounted {
    /// Unmounts and waits for the FUSE session to end.
    pub fn unmount(mut self) -> anyhow::Result<()> {
        if let Some(s) = self.session.take() {
            s.umount_and_join().context("unmounting")?;
        }
        Ok(())
    }

    /// Blocks until the mount goes away (`umount`, `hubfs unmount`).
    pub fn join(mut self) -> anyhow::Result<()> {
        if let Some(s) = self.session.take() {
            s.join().context("FUSE session")?;
        }
        Ok(())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

/// Checks the mountpoint exists, is a directory and has nothing mounted on it yet.
pub fn check_mountpoint(mountpoint: &Path) -> anyhow::Result<()> {
    let bad = |message: String| exit::error(Failure::Mountpoint, message);
    let meta = std::fs::metadata(mountpoint).map_err(|_| {
        bad(format!(
            "mountpoint {} does not exist: create it first (mkdir -p {0})",
            mountpoint.display()
        ))
    })?;
    if !meta.is_dir() {
        return Err(bad(format!("mountpoint {} is not a directory", mountpoint.display())));
    }
    let canonical = mountpoint
        .canonicalize()
        .map_err(|e| bad(format!("mountpoint {}: {e}", mountpoint.display())))?;
    if let Some(parent) = canonical.parent()
        && let Ok(pm) = std::fs::metadata(parent)
        && pm.dev() != meta.dev()
    {
        return Err(bad(format!(
            "mountpoint {} is busy: something is already mounted there (unmount it with `hubfs unmount {0}`)",
            mountpoint.display()
        )));
    }
    Ok(())
}

/// Checks the mountpoint and FUSE before any network call, so the error names the real problem.
fn preflight(mountpoint: &Path) -> anyhow::Result<()> {
    check_mountpoint(mountpoint)?;
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        return Err(exit::error(
            Failure::FuseUnavailable,
            format!(
                "cannot open /dev/fuse ({e}): FUSE mounts need root here, or a kernel with FUSE \
                 (try `sudo hubfs mount …`, or serve over NFS: `hubfs mount --nfs` / `hubfs serve-nfs`)"
            ),
        ));
    }
    Ok(())
}

/// A repo revision opened as a VirtualFs, ready for a frontend.
pub struct Opened {
    pub vfs: Arc<VirtualFs>,
    pub repo: RepoRef,
    pub commit: String,
}

/// Parses the repo spec, resolves the revision and opens the VirtualFs; errors in the user's terms.
pub fn open_vfs(
    spec: &str,
    revision: Option<&str>,
    client: &HubClientConfig,
    opts: &VfsOptions,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<Opened> {
    let (repo, rev_in_spec, subfolder) = RepoRef::parse(spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    if repo.is_bucket() && revision.is_some() {
        anyhow::bail!("{spec}: a bucket has no revisions; drop --revision");
    }
    let revision = revision
        .map(str::to_string)
        .or(rev_in_spec)
        .unwrap_or_else(|| "main".to_string());
    let hub = HubClient::new(client.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut opts = opts.clone();
    // An overlay writes to local disk only: a read token is enough until it is published.
    if opts.write.as_ref().is_some_and(|w| w.overlay.is_none()) {
        check_write(&hub, &repo, spec, &mut opts, rt)?;
    }
    let vfs = rt
        .block_on(VirtualFs::new(hub, repo.clone(), &revision, subfolder.as_deref(), opts))
        .map_err(|e| exit::error(Failure::of_vfs(&e), explain(spec, &revision, &e)))?;
    let vfs = Arc::new(vfs);
    vfs.start_committer(rt.handle());
    let commit = rt.block_on(vfs.commit()).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Opened { vfs, repo, commit })
}

/// Refuses a writable mount the token cannot write, before anything is mounted, instead of
/// letting the first close fail: asks the Hub what the token may do (whoami), and for a bucket
/// also for a Xet write token. A bucket mount is writable by default (`unless_refused`): there a
/// refusal gives a read-only mount and a line on stderr. When the Hub cannot say (an old Hub, a
/// fine-grained token whose scopes do not name the repo's permissions), the mount goes ahead and
/// the Hub decides at the first write, as it does for a token that loses write access later.
fn check_write(
    hub: &HubClient,
    repo: &RepoRef,
    spec: &str,
    opts: &mut VfsOptions,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<()> {
    let optional = opts.write.as_ref().is_some_and(|w| w.unless_refused);
    let instead = if repo.is_bucket() {
        "mount with --read-only"
    } else {
        "mount without --write"
    };
    if !hub.has_token() {
        if optional {
            tracing::warn!("no token: mounting {repo} read-only");
            eprintln!("hubfs: no token, so {spec} is mounted read-only (pass --token or set HF_TOKEN to write)");
            opts.write = None;
            return Ok(());
        }
        return Err(exit::error(
            Failure::TokenRefused,
            format!("--write needs a token that may write to {spec}: pass --token or set HF_TOKEN, or {instead}"),
        ));
    }
    if let WriteAccess::No(why) = rt.block_on(hub.write_access(repo)) {
        if optional {
            tracing::warn!("the token may not write to {repo} ({why}): mounting it read-only");
            eprintln!("hubfs: the token may not write to {spec} ({why}): mounted read-only");
            opts.write = None;
            return Ok(());
        }
        return Err(exit::error(
            Failure::TokenRefused,
            format!("the token may not write to {spec} ({why}): pass a token that may, or {instead}"),
        ));
    }
    if repo.is_bucket() {
        check_bucket_write(hub, repo, spec, opts, rt)?;
    }
    Ok(())
}

/// A bucket's write permissions are not all named in whoami: asks for a Xet write token once, so
/// that a token that may only read gives a read-only mount (or, with an explicit `--write`, a clear
/// error) instead of failing at the first close.
fn check_bucket_write(
    hub: &HubClient,
    bucket: &RepoRef,
    spec: &str,
    opts: &mut VfsOptions,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<()> {
    let optional = opts.write.as_ref().is_some_and(|w| w.unless_refused);
    match rt.block_on(hub.xet_write_token(bucket, "main")) {
        Ok(_) => Ok(()),
        Err(HubClientError::Unauthorized { .. } | HubClientError::Forbidden { .. }) if optional => {
            tracing::warn!("the token may not write to {bucket}: mounting it read-only");
            eprintln!("hubfs: the token may not write to {spec}: mounted read-only");
            opts.write = None;
            Ok(())
        }
        Err(e @ (HubClientError::Unauthorized { .. } | HubClientError::Forbidden { .. })) => Err(exit::error(
            Failure::TokenRefused,
            format!("the token may not write to {spec} ({e}): pass a token that may, or mount with --read-only"),
        )),
        // Anything else (a missing bucket, an unreachable Hub) is for opening it to report.
        Err(_) => Ok(()),
    }
}

/// Explains a failure to open the repo in the user's terms.
pub fn explain(repo: &str, revision: &str, e: &VfsError) -> String {
    if RepoRef::parse(repo).is_ok_and(|(r, _, _)| r.is_bucket()) {
        match e {
            VfsError::Remote(HubClientError::RepoNotFound { .. } | HubClientError::NotFound { .. }) => {
                return format!(
                    "bucket {repo} not found, or it is private and no valid token was given \
                     (pass --token or set HF_TOKEN)"
                );
            }
            VfsError::NotFound => return format!("the prefix to mount does not exist in {repo}"),
            VfsError::Remote(HubClientError::Unauthorized { .. }) => {}
            VfsError::Remote(HubClientError::Forbidden { .. }) => {}
            other => return format!("cannot open {repo}: {other}"),
        }
    }
    match e {
        VfsError::Remote(HubClientError::RepoNotFound { .. }) => format!(
            "repository {repo} not found, or it is private and no valid token was given \
             (pass --token or set HF_TOKEN)"
        ),
        VfsError::Remote(HubClientError::RevisionNotFound { .. }) => {
            // The spec may name the revision itself (`ns/name@v9`): the repo is what precedes it.
            let repo = repo.split_once('@').map_or(repo, |(r, _)| r);
            format!("revision {revision:?} not found in {repo} (use a branch, tag, full commit id or refs/pr/N)")
        }
        VfsError::Remote(HubClientError::Unauthorized { .. }) => {
            "the Hub rejected the token: check --token, HF_TOKEN or the token file under HF_HOME".to_string()
        }
        VfsError::Remote(HubClientError::Forbidden { .. }) => format!("the token has no access to {repo}"),
        VfsError::NotFound => format!("the folder to mount does not exist in {repo}@{revision}"),
        other => format!("cannot open {repo}@{revision}: {other}"),
    }
}

/// Mounts; returns once the mount is usable.
pub fn mount(req: MountRequest, rt: &tokio::runtime::Runtime) -> anyhow::Result<Mounted> {
    // A bad repo spec is reported before the mountpoint is looked at.
    RepoRef::parse(&req.repo).map_err(|e| anyhow::anyhow!("{e}"))?;
    preflight(&req.mountpoint)?;
    let Opened { vfs, repo, commit } = open_vfs(&req.repo, req.revision.as_deref(), &req.client, &req.vfs, rt)?;

    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(format!("hubfs:{}", repo.id())),
        fuser::MountOption::Subtype("hubfs".to_string()),
        fuser::MountOption::NoAtime,
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::CUSTOM(format!("max_read={MAX_READ}")),
    ];
    if !vfs.is_writable() {
        config.mount_options.push(fuser::MountOption::RO);
    }
    if req.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(4);
    config.clone_fd = true;
    let adapter = FuseAdapter::new(vfs.clone(), rt.handle().clone());
    let passthrough = adapter.passthrough_stats();
    let session = fuser::Session::new(adapter, &req.mountpoint, &config)
        .map_err(|e| {
            exit::error(
                Failure::Mountpoint,
                format!("mounting at {}: {e}", req.mountpoint.display()),
            )
        })?
        .spawn()
        .context("starting the FUSE session")?;
    if vfs.is_overlay() {
        // `hubfs overlay reset` changes paths behind the kernel's back: tell it to forget them.
        let notifier = session.notifier();
        vfs.set_invalidator(Box::new(move |f| {
            let r = match f {
                crate::vfs::Forget::Entry { parent, name } => {
                    notifier.inval_entry(fuser::INodeNo(parent), std::ffi::OsStr::new(name))
                }
                crate::vfs::Forget::Inode(ino) => notifier.inval_inode(fuser::INodeNo(ino), 0, -1),
            };
            // ENOENT: the kernel did not have it cached.
            if let Err(e) = r
                && e.raw_os_error() != Some(libc::ENOENT)
            {
                tracing::debug!(error = %e, "kernel cache invalidation");
            }
        }));
    }
    crate::fuse::readahead::raise_readahead(&req.mountpoint, vfs.readahead());
    vfs.set_mountpoint(&req.mountpoint);
    Ok(Mounted {
        session: Some(session),
        mountpoint: req.mountpoint,
        repo,
        commit,
        vfs,
        passthrough,
    })
}

/// `hubfs unmount DIR`.
pub fn unmount(dir: &Path) -> anyhow::Result<()> {
    let err = match rustix::mount::unmount(dir, rustix::mount::UnmountFlags::empty()) {
        Ok(()) => return Ok(()),
        Err(e) => std::io::Error::from(e),
    };
    let status = std::process::Command::new("fusermount3").arg("-u").arg(dir).status();
    if matches!(status, Ok(s) if s.success()) {
        return Ok(());
    }
    bail!("cannot unmount {}: {err}", dir.display())
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
                unmount(&dir)?;
            }
            _ = rx => {}
        }
        Ok::<_, anyhow::Error>(())
    })?;
    joiner
        .join()
        .map_err(|_| anyhow::anyhow!("FUSE session thread panicked"))?
}
