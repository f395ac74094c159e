//! `hubfs csi-serve`: the process that serves one source mount. The plugin started it in a session
//! of its own (so it outlives a plugin restart) with one end of a socket pair as descriptor 3; on
//! it arrive the mount's settings and, attached, the `/dev/fuse` descriptor the plugin mounted. It
//! answers `ready COMMIT` or `error: WHY`, serves until the kernel ends the session (the plugin
//! unmounted the source) or a SIGTERM, then commits what is pending within the drain timeout.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::hub_client::HubClientConfig;
use crate::process::signals::{StopSignals, runtime};
use crate::vfs::{VfsOptions, WriteOptions};

/// The handoff message: everything the server needs but the token, which it reads from
/// `token_file` (0600, tmpfs) so it appears in no argv, environment or socket buffer it logs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeConfig {
    pub spec: String,
    pub revision: String,
    pub endpoint: String,
    pub token_file: PathBuf,
    pub mountpoint: PathBuf,
    pub read_only: bool,
    pub uid: u32,
    pub gid: u32,
    pub cache_dir: PathBuf,
    pub memory_cache_size: u64,
    /// The memory budget (`memoryLimit`); `None`: the default (see `budget::default_limit`).
    #[serde(default)]
    pub memory_limit: Option<u64>,
    pub cache_size: u64,
    pub metadata_ttl_ms: u64,
    pub prefetch_files: usize,
    pub commit_every_ms: Option<u64>,
    pub drain_ms: u64,
    pub commit_message: String,
    /// The shared cache tier's URL; `None`: none.
    #[serde(default)]
    pub shared_cache: Option<String>,
    /// The server's log: rotated at `LOG_MAX`, one old file kept.
    pub log_file: PathBuf,
}

/// Size at which a server's log rotates.
const LOG_MAX: u64 = 10 << 20;

/// The descriptor number the plugin gives the server its socket on.
pub const HANDOFF_FD: i32 = 3;

pub(super) fn settings(cfg: &ServeConfig, token: Option<String>) -> (HubClientConfig, VfsOptions) {
    let client = HubClientConfig {
        endpoint: cfg.endpoint.clone(),
        token,
        ..Default::default()
    };
    let mut vfs = VfsOptions {
        metadata_ttl: Duration::from_millis(cfg.metadata_ttl_ms),
        uid: cfg.uid,
        gid: cfg.gid,
        memory_cache_bytes: cfg.memory_cache_size,
        memory_limit: Some(crate::chunk_store::budget::limit_or_default(
            cfg.memory_limit,
            "memoryLimit",
        )),
        cache_dir: Some(cfg.cache_dir.clone()),
        disk_cache_bytes: cfg.cache_size,
        prefetch_files: cfg.prefetch_files,
        passthrough: true,
        shared_cache: cfg.shared_cache.clone(),
        ..VfsOptions::default()
    };
    if !cfg.read_only {
        let mut w = WriteOptions {
            staging_root: cfg.cache_dir.join("staging"),
            commit_message: cfg.commit_message.clone(),
            status_dir: Some(cfg.cache_dir.join("mounts")),
            ..Default::default()
        };
        if let Some(ms) = cfg.commit_every_ms {
            w.quiet_period = Duration::from_millis(ms);
            w.max_batch_delay = Duration::from_millis(ms);
        }
        vfs.write = Some(w);
    }
    (client, vfs)
}

/// A volume being served on a handed-over FUSE descriptor.
pub(super) struct Serving {
    pub vfs: std::sync::Arc<crate::vfs::VirtualFs>,
    /// The commit it shows (`ready COMMIT`).
    pub commit: String,
    pub session: fuser::BackgroundSession,
}

/// Opens `cfg`'s repo and serves it on `fuse_fd`, a FUSE connection someone else mounted: the
/// process needs neither `/dev/fuse` nor the right to mount (`csi-serve`, `csi-sidecar`).
pub(super) fn serve_fd(
    cfg: &ServeConfig,
    token: Option<String>,
    fuse_fd: std::os::fd::OwnedFd,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<Serving> {
    let (client, vfs_opts) = settings(cfg, token);
    // Buckets have no revision (empty): the spec alone names what to open.
    let revision = (!cfg.revision.is_empty()).then_some(cfg.revision.as_str());
    let opened = crate::process::session::open_vfs(&cfg.spec, revision, &client, &vfs_opts, rt)?;
    let vfs = opened.vfs.clone();
    let adapter = crate::fuse::FuseAdapter::new(vfs.clone(), rt.handle().clone());
    let mut config = fuser::Config::default();
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(4);
    // Every thread shares the handed descriptor: no need to open /dev/fuse.
    config.clone_fd = false;
    let session = fuser::Session::from_fd(adapter, fuse_fd, fuser::SessionACL::All, config)
        .and_then(|s| s.spawn())
        .context("FUSE session")?;
    vfs.set_mountpoint(&cfg.mountpoint);
    let shown_revision = if cfg.revision.is_empty() {
        "none"
    } else {
        cfg.revision.as_str()
    };
    crate::process::metrics::watch(&vfs, &opened.repo.to_string(), shown_revision, "fuse", None);
    Ok(Serving {
        vfs,
        commit: opened.commit,
        session,
    })
}

/// `hubfs csi-serve`.
pub fn run() -> anyhow::Result<()> {
    // Run by hand, descriptor 3 is closed or something else: say so instead of taking it.
    let Some(mut sock) = crate::process::child::take_inherited_socket(HANDOFF_FD) else {
        anyhow::bail!("csi-serve is started by `hubfs csi-node` with a FUSE descriptor, not by hand");
    };
    let (bytes, fuse_fd) = super::fdpass::recv_fd(&sock, 1 << 16).context("receiving the FUSE descriptor")?;
    let cfg: ServeConfig = serde_json::from_slice(&bytes).context("the handoff message")?;
    // Until here stderr (the same file, appended to) caught anything; from now on the log rotates
    // and stderr (panics) follows it.
    match crate::process::logging::to_file(&cfg.log_file, LOG_MAX) {
        Ok(f) => {
            if let Err(e) = f.redirect_stderr() {
                tracing::warn!(error = %e, "stderr stays where the plugin pointed it");
            }
        }
        Err(e) => tracing::warn!(error = %e, "logging to stderr"),
    }
    let token = std::fs::read_to_string(&cfg.token_file)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    crate::process::allocator::tune();
    let rt = runtime()?;
    let mut signals = {
        let _g = rt.enter();
        StopSignals::new()?
    };
    let Serving { vfs, commit, session } = match serve_fd(&cfg, token, fuse_fd, &rt) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(sock, "error: {e:#}");
            return Err(e);
        }
    };
    if let Some(dir) = cfg.mountpoint.parent() {
        super::metrics::serve_for_plugin(dir);
    }
    writeln!(sock, "ready {commit}").context("answering the plugin")?;
    drop(sock);
    tracing::info!(spec = %cfg.spec, commit, mountpoint = %cfg.mountpoint.display(), "serving");

    // Kubelet's republish rewrites the token file when the secret rotates: the running mount
    // takes the new token within seconds (it never reaches argv, environment or logs).
    rt.spawn(watch_token(cfg.token_file.clone(), vfs.hub_client().clone()));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let joiner = std::thread::spawn(move || {
        let r = session.join();
        let _ = tx.send(());
        r
    });
    let mountpoint = cfg.mountpoint.clone();
    rt.block_on(async {
        tokio::select! {
            _ = signals.recv() => {
                tracing::info!("signal received: detaching the source mount");
                if let Err(e) = super::fdpass::unmount(&mountpoint, true) {
                    tracing::warn!(error = %e, "detaching the source mount");
                }
            }
            _ = rx => tracing::info!("the source mount was unmounted"),
        }
    });
    if joiner.join().is_err() {
        tracing::warn!("the FUSE session thread panicked");
    }
    if vfs.is_writable() {
        let left = rt.block_on(vfs.drain(Duration::from_millis(cfg.drain_ms)));
        vfs.remove_status();
        if left > 0 {
            tracing::warn!("{left} file(s) could not be committed within the drain timeout; they stay staged");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// How often the token file is looked at.
const TOKEN_POLL: Duration = Duration::from_secs(2);

/// Reads `file` every [`TOKEN_POLL`] and gives the client the token it holds whenever it changed.
/// A file that cannot be read leaves the current token in place.
pub(super) async fn watch_token(file: PathBuf, client: crate::hub_client::HubClient) {
    let read = |f: &PathBuf| std::fs::read_to_string(f).ok().map(|t| t.trim().to_string());
    let mut last = read(&file);
    loop {
        tokio::time::sleep(TOKEN_POLL).await;
        let Some(now) = read(&file) else { continue };
        if last.as_deref() == Some(now.as_str()) {
            continue;
        }
        match client.set_token((!now.is_empty()).then_some(now.as_str())) {
            Ok(()) => tracing::info!("the token file changed: later requests carry the new token"),
            Err(e) => tracing::warn!(error = %e, "the token file holds no usable token; keeping the current one"),
        }
        last = Some(now);
    }
}
