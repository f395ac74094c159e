//! `hubfs csi-sidecar --socket-dir DIR`: the container `hubfs csi-webhook` adds to a pod, serving
//! the pod's hubfs volumes from inside the pod (`sidecar` has the plugin's half). It runs
//! unprivileged: it opens no device and mounts nothing, it serves FUSE connections the plugin
//! mounted and handed over.
//!
//! It looks for `DIR/volumes/*/handoff.sock` every quarter second, takes each volume once, and
//! keeps its caches in that volume's directory (the pod's emptyDir, so they are charged to the
//! pod). A volume the plugin unpublishes ends its FUSE session: its pending writes are committed
//! and its directory removed. SIGTERM (the pod is ending; kubelet stops sidecars after the pod's
//! own containers) commits what every writable volume has pending, then exits.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use super::server::{Serving, serve_fd};
use super::sidecar::{CONTROL_SOCKET, HANDOFF_SOCKET, Handoff, TokenUpdate};
use crate::process::signals::{StopSignals, runtime};
use crate::vfs::VirtualFs;

/// How often the socket dir is looked at for new volumes.
const SCAN: Duration = Duration::from_millis(250);
/// After a handoff that failed (the repo could not be opened), how long before trying it again.
const RETRY_AFTER: Duration = Duration::from_secs(30);

#[derive(clap::Args, Debug)]
pub struct CsiSidecarArgs {
    /// The emptyDir shared with the CSI plugin (`/hubfs-sidecar` in pods the webhook changed).
    #[arg(long, default_value = super::webhook_patch::SOCKET_DIR)]
    pub socket_dir: PathBuf,
    /// Exit once every volume taken has ended (a mount pod of the plugin's mount-pod mode), or if
    /// none arrives within 10 minutes.
    #[arg(long)]
    pub exit_when_idle: bool,
}

/// With `--exit-when-idle`: how long to wait for a first volume.
const FIRST_VOLUME_WITHIN: Duration = Duration::from_secs(600);

/// A volume this sidecar serves.
struct Volume {
    vfs: Arc<VirtualFs>,
    drain: Duration,
}

type Volumes = Arc<Mutex<HashMap<String, Volume>>>;

/// `hubfs csi-sidecar`.
pub fn run(args: CsiSidecarArgs) -> anyhow::Result<()> {
    let dir = args.socket_dir;
    if !dir.is_dir() {
        anyhow::bail!(
            "--socket-dir {}: no such directory (the pod's hubfs-sidecar emptyDir is mounted there)",
            dir.display()
        );
    }
    crate::process::allocator::tune();
    let rt = runtime()?;
    let mut signals = {
        let _g = rt.enter();
        StopSignals::new()?
    };
    let volumes: Volumes = Arc::default();
    let control = dir.join(CONTROL_SOCKET);
    let _ = std::fs::remove_file(&control);
    let listener = {
        let _g = rt.enter();
        super::fdpass::socket_in(&dir, CONTROL_SOCKET)
            .and_then(|short| tokio::net::UnixListener::bind(&short.path))
            .with_context(|| format!("listening on {}", control.display()))?
    };
    rt.spawn(serve_control(listener, volumes.clone()));
    tracing::info!(dir = %dir.display(), "hubfs sidecar waiting for volumes");
    let mut failed: HashMap<String, Instant> = HashMap::new();
    // Whether any volume was taken (`--exit-when-idle`).
    let mut served_any = false;
    let started = Instant::now();
    loop {
        if args.exit_when_idle {
            if served_any && volumes.lock().is_empty() {
                tracing::info!("every volume ended: exiting");
                break;
            }
            if !served_any && started.elapsed() > FIRST_VOLUME_WITHIN {
                anyhow::bail!("no volume was handed over within {FIRST_VOLUME_WITHIN:?}");
            }
        }
        let stop = rt.block_on(async {
            tokio::select! {
                _ = signals.recv() => true,
                _ = tokio::time::sleep(SCAN) => false,
            }
        });
        if stop {
            break;
        }
        for (name, vol_dir) in waiting_volumes(&dir) {
            // Served (its socket goes once the plugin has the answer), or failed lately.
            if volumes.lock().contains_key(&name) || failed.get(&name).is_some_and(|t| t.elapsed() < RETRY_AFTER) {
                continue;
            }
            // A socket nobody listens on: a plugin that died before the handoff; the next one
            // listens there again (tried again at the next look).
            let sock = match super::fdpass::socket_in(&vol_dir, HANDOFF_SOCKET)
                .and_then(|short| UnixStream::connect(&short.path))
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(volume = name, error = %e, "the plugin does not listen for this volume (yet)");
                    continue;
                }
            };
            match take(&name, &vol_dir, sock, &rt, &volumes) {
                Ok(()) => {
                    served_any = true;
                    failed.remove(&name);
                }
                Err(e) => {
                    tracing::warn!(volume = name, error = format!("{e:#}"), "could not serve a volume");
                    failed.insert(name, Instant::now());
                }
            }
        }
    }
    tracing::info!("stopping: committing what the pod's writable volumes have pending");
    let draining: Vec<(String, Volume)> = volumes.lock().drain().collect();
    let threads: Vec<_> = draining
        .into_iter()
        .filter(|(_, v)| v.vfs.is_writable())
        .map(|(name, v)| {
            let h = rt.handle().clone();
            std::thread::spawn(move || {
                let left = h.block_on(v.vfs.drain(v.drain));
                if left > 0 {
                    tracing::warn!(
                        volume = name,
                        "{left} file(s) could not be committed before the pod ended"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    let _ = std::fs::remove_file(&control);
    tracing::info!("stopped");
    Ok(())
}

/// Volumes whose plugin waits for a sidecar: (name, directory).
fn waiting_volumes(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(dir.join("volumes")) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.path().join(HANDOFF_SOCKET).exists())
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .collect()
}

/// Takes volume `name` from the plugin and serves it until its FUSE session ends.
fn take(
    name: &str,
    vol_dir: &Path,
    mut sock: UnixStream,
    rt: &tokio::runtime::Runtime,
    volumes: &Volumes,
) -> anyhow::Result<()> {
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let (bytes, fd) = super::fdpass::recv_fd(&sock, 1 << 16).context("receiving the FUSE descriptor")?;
    let handoff: Handoff = serde_json::from_slice(&bytes).context("the handoff message")?;
    let mut cfg = handoff.config;
    // This process's view: the caches live in the volume's directory of the pod's emptyDir.
    cfg.cache_dir = vol_dir.join("cache");
    let Serving { vfs, commit, session } = match serve_fd(&cfg, handoff.token, fd, rt) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(sock, "error: {e:#}");
            return Err(e);
        }
    };
    writeln!(sock, "ready {commit}").context("answering the plugin")?;
    tracing::info!(volume = name, spec = %cfg.spec, commit, writable = vfs.is_writable(), "serving");
    volumes.lock().insert(
        name.to_string(),
        Volume {
            vfs: vfs.clone(),
            drain: Duration::from_millis(cfg.drain_ms),
        },
    );
    let (name, vol_dir, volumes, handle) = (
        name.to_string(),
        vol_dir.to_path_buf(),
        volumes.clone(),
        rt.handle().clone(),
    );
    std::thread::Builder::new()
        .name("hubfs-volume".into())
        .spawn(move || {
            if session.join().is_err() {
                tracing::warn!(volume = name, "the FUSE session ended with an error");
            }
            // Unpublished (the plugin unmounted it), or the pod is ending (SIGTERM drains it).
            // Left in the table until drained: `--exit-when-idle` exits once it is empty.
            let Some((vfs, drain)) = volumes.lock().get(&name).map(|v| (v.vfs.clone(), v.drain)) else {
                return;
            };
            let left = if vfs.is_writable() {
                handle.block_on(vfs.drain(drain))
            } else {
                0
            };
            vfs.remove_status();
            volumes.lock().remove(&name);
            if left > 0 {
                tracing::warn!(
                    volume = name,
                    "{left} file(s) could not be committed; they stay staged in the volume's directory"
                );
            } else {
                let _ = std::fs::remove_dir_all(&vol_dir);
                tracing::info!(volume = name, "volume unpublished");
            }
        })
        .context("starting the volume's thread")?;
    Ok(())
}

/// Answers token updates from the plugin, one JSON line per connection.
async fn serve_control(listener: tokio::net::UnixListener, volumes: Volumes) {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let volumes = volumes.clone();
        tokio::spawn(async move {
            let (r, mut w) = conn.into_split();
            let mut line = String::new();
            let mut reader = tokio::io::BufReader::new(r.take(1 << 16));
            let read = tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut line));
            let answer = match read.await {
                Ok(Ok(_)) => match serde_json::from_str::<TokenUpdate>(&line) {
                    Ok(u) => {
                        let client = volumes.lock().get(&u.volume).map(|v| v.vfs.hub_client().clone());
                        match client {
                            Some(c) => match c.set_token(u.token.as_deref()) {
                                Ok(()) => {
                                    tracing::info!(volume = u.volume, "took a rotated token");
                                    "ok".to_string()
                                }
                                Err(e) => format!("error: {e}"),
                            },
                            None => format!("error: no volume {:?} here", u.volume),
                        }
                    }
                    Err(e) => format!("error: malformed token update: {e}"),
                },
                _ => "error: no request".to_string(),
            };
            let _ = w.write_all(format!("{answer}\n").as_bytes()).await;
        });
    }
}
