//! Sidecar mode, the plugin's half: a volume of a pod that `hubfs csi-webhook` gave the
//! `hubfs-sidecar` container is mounted at its target directly (no shared source mount) and served
//! by that container, inside the pod. The plugin then holds nothing the pod needs: a restart or an
//! upgrade of the plugin leaves the volume serving, and its memory and CPU are the pod's.
//!
//! The handoff: at NodePublish the pod's containers have not started yet (kubelet sets up every
//! volume first), so the plugin mounts `/dev/fuse` at the target, writes the volume's directory in
//! the pod's `hubfs-sidecar` emptyDir (`volumes/<name>/`, owned by the sidecar's uid) and listens
//! there on `handoff.sock`. The sidecar, once started, connects, receives the settings, the token
//! and the descriptor (SCM_RIGHTS), and answers `ready COMMIT`; only then does the plugin close
//! its copy. Until then the kernel queues the pod's requests, and a sidecar that dies before
//! answering can connect again. A later token (kubelet's republish of a rotated Secret) goes to
//! the sidecar's `sidecar.sock`.
//!
//! A plugin restart before the handoff loses the descriptor (the connection is aborted): the next
//! plugin mounts the target again from its record and listens anew (`adopt`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tonic::Status;

use super::fdpass;
use super::server::ServeConfig;
use super::sources::{SourceError, internal};
use super::state::StateDir;
use super::webhook_patch::{SIDECAR_NAME, SIDECAR_UID};
use crate::process::mountinfo;

/// Token files of sidecar volumes waiting for their handoff are `sidecar-<name>` in the token dir
/// (a restarted plugin needs the token to mount them again); the sources' cleanup leaves them.
pub const TOKEN_PREFIX: &str = "sidecar-";
/// The volume's socket in `volumes/<name>/`, where the plugin waits for the sidecar.
pub const HANDOFF_SOCKET: &str = "handoff.sock";
/// The sidecar's own socket in the emptyDir, for later tokens.
pub const CONTROL_SOCKET: &str = "sidecar.sock";
/// How long `mountMode: auto` waits for kubelet to create the emptyDir before serving the volume
/// from a shared source instead: kubelet sets up a pod's volumes concurrently, and an emptyDir is a
/// mkdir, done long before its CSI call reaches the plugin. A pod without the sidecar pays this
/// once, at its first publish.
const AUTO_WAIT: Duration = Duration::from_millis(500);
/// How long `mountMode: sidecar` waits for it.
const SIDECAR_WAIT: Duration = Duration::from_secs(30);
/// How long a connected sidecar may take to open the repo and answer.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// `mountMode`, a volume attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountMode {
    /// The pod's sidecar when it has one, else a shared source mount (default).
    Auto,
    /// The pod's sidecar, or the publish fails.
    Sidecar,
    /// A source mount of the plugin, shared by the node's pods asking for the same thing.
    Shared,
    /// A source mount served by a mount pod (the plugin's `--mount-pod-image`), shared too.
    Pod,
}

pub fn mount_mode(context: &HashMap<String, String>) -> Result<MountMode, String> {
    context.get("mountMode").map_or(Ok(MountMode::Auto), |v| parse_mode(v))
}

pub fn parse_mode(v: &str) -> Result<MountMode, String> {
    match v.trim() {
        "" | "auto" => Ok(MountMode::Auto),
        "sidecar" => Ok(MountMode::Sidecar),
        "shared" => Ok(MountMode::Shared),
        "pod" => Ok(MountMode::Pod),
        other => Err(format!("mountMode {other:?}: use auto, sidecar, pod or shared")),
    }
}

/// The pod's `hubfs-sidecar` emptyDir as the plugin sees it, from a kubelet target path
/// (`…/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount`).
pub fn emptydir_of(target: &Path) -> Option<PathBuf> {
    let csi = target.parent()?.parent()?;
    let volumes = csi.parent()?;
    let pod = volumes.parent()?;
    let shaped = csi.file_name()? == "kubernetes.io~csi"
        && volumes.file_name()? == "volumes"
        && pod.parent()?.file_name()? == "pods";
    shaped.then(|| volumes.join("kubernetes.io~empty-dir").join(SIDECAR_NAME))
}

/// What the sidecar receives with the descriptor. Not `Debug`: it carries the token.
#[derive(Serialize, Deserialize)]
pub struct Handoff {
    pub config: ServeConfig,
    pub token: Option<String>,
}

/// A later token for a served volume (`sidecar.sock`). Not `Debug`: it carries the token.
#[derive(Serialize, Deserialize)]
pub struct TokenUpdate {
    pub volume: String,
    pub token: Option<String>,
}

/// A sidecar volume as the plugin recorded it (`STATE/sidecars/<name>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    name: String,
    target: PathBuf,
    /// The pod's emptyDir.
    emptydir: PathBuf,
    /// Its settings (the token is not among them).
    config: ServeConfig,
    /// A hash of the token it was given, to notice a rotated one.
    token_hash: String,
    /// The sidecar answered `ready`.
    handed: bool,
}

/// The plugin's sidecar volumes. `pending` is a leaf lock; `state` files are written under it.
pub struct Sidecars {
    state: StateDir,
    /// Waiting handoffs by volume name: set to stop one (unpublish).
    pending: Mutex<HashMap<String, Arc<AtomicBool>>>,
}

fn token_hash(token: Option<&str>) -> String {
    crate::csi::short_hash(token.unwrap_or("").as_bytes())
}

fn chown(p: &Path) -> std::io::Result<()> {
    std::os::unix::fs::chown(p, Some(SIDECAR_UID), Some(SIDECAR_UID))
}

impl Sidecars {
    pub fn new(state: StateDir) -> std::io::Result<Sidecars> {
        std::fs::create_dir_all(state.root.join("sidecars"))?;
        Ok(Sidecars {
            state,
            pending: Mutex::new(HashMap::new()),
        })
    }

    fn record_path(&self, name: &str) -> PathBuf {
        self.state.root.join("sidecars").join(format!("{name}.json"))
    }

    fn records(&self) -> Vec<Record> {
        let Ok(rd) = std::fs::read_dir(self.state.root.join("sidecars")) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
            .collect()
    }

    fn write_record(&self, r: &Record) -> std::io::Result<()> {
        let path = self.record_path(&r.name);
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(r).map_err(std::io::Error::other)?)?;
        std::fs::rename(tmp, path)
    }

    fn forget(&self, name: &str) {
        let _ = std::fs::remove_file(self.record_path(name));
        self.state.remove_token(&format!("{TOKEN_PREFIX}{name}"));
        if let Some(stop) = self.pending.lock().remove(name) {
            stop.store(true, Ordering::Relaxed);
        }
    }

    /// The volume's name: one per target.
    pub fn name_of(target: &Path) -> String {
        crate::csi::short_hash(target.as_os_str().as_encoded_bytes())
    }

    /// The emptyDir to serve `target` through, per `mode`: `None` for a shared source mount.
    pub async fn choose(target: &Path, mode: MountMode) -> Result<Option<PathBuf>, Status> {
        if matches!(mode, MountMode::Shared | MountMode::Pod) {
            return Ok(None);
        }
        let Some(dir) = emptydir_of(target) else {
            return match mode {
                MountMode::Sidecar => Err(Status::invalid_argument(format!(
                    "mountMode sidecar: {} is not a kubelet pod volume path",
                    target.display()
                ))),
                _ => Ok(None),
            };
        };
        let wait = if mode == MountMode::Sidecar {
            SIDECAR_WAIT
        } else {
            AUTO_WAIT
        };
        let deadline = Instant::now() + wait;
        loop {
            if dir.is_dir() {
                return Ok(Some(dir));
            }
            if Instant::now() >= deadline {
                return match mode {
                    MountMode::Sidecar => Err(Status::failed_precondition(format!(
                        "mountMode sidecar: the pod has no {SIDECAR_NAME} emptyDir (is hubfs csi-webhook \
                         installed, and was the pod created after it?)"
                    ))),
                    _ => Ok(None),
                };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether `target` is a sidecar volume; if so, a rotated token goes to its sidecar.
    pub fn republish(&self, target: &Path, token: Option<&str>) -> bool {
        let name = Self::name_of(target);
        // Every publish asks (kubelet republishes each volume every minute or so): one file read.
        let Ok(body) = std::fs::read(self.record_path(&name)) else {
            return false;
        };
        let Ok(mut rec) = serde_json::from_slice::<Record>(&body) else {
            return false;
        };
        if mountinfo::at(&mountinfo::read(), target).is_none() {
            // Kubelet unmounted it behind our back (or the node rebooted): publish afresh.
            self.forget(&name);
            return false;
        }
        let hash = token_hash(token);
        if hash == rec.token_hash {
            return true;
        }
        let sent = if rec.handed {
            send_token(&rec.emptydir, &name, token)
        } else {
            self.state
                .write_token(&format!("{TOKEN_PREFIX}{name}"), token)
                .map(|_| ())
        };
        match sent {
            Ok(()) => {
                rec.token_hash = hash;
                let _ = self.write_record(&rec);
                tracing::info!(target = %target.display(), "token rotated (sidecar)");
            }
            Err(e) => tracing::warn!(target = %target.display(), error = %e,
                "the sidecar did not take the rotated token; the next republish tries again"),
        }
        true
    }

    /// Mounts FUSE at `target` and waits, in the background, for the pod's sidecar to take it.
    pub fn publish(
        &self,
        target: &Path,
        emptydir: &Path,
        config: ServeConfig,
        token: Option<&str>,
    ) -> Result<(), SourceError> {
        let name = Self::name_of(target);
        if let Some(e) = mountinfo::at(&mountinfo::read(), target) {
            if e.fstype != "fuse.hubfs" {
                return Err(SourceError::Busy {
                    target: target.to_path_buf(),
                    fstype: e.fstype.clone(),
                    mounted: e.source.clone(),
                });
            }
            fdpass::unmount_any(target).map_err(|e| internal("unmounting the old mount", e))?;
        }
        self.forget(&name);
        let rec = Record {
            name: name.clone(),
            target: target.to_path_buf(),
            emptydir: emptydir.to_path_buf(),
            token_hash: token_hash(token),
            handed: false,
            config,
        };
        self.state
            .write_token(&format!("{TOKEN_PREFIX}{name}"), token)
            .map_err(|e| internal("writing the token file", e))?;
        self.write_record(&rec)
            .map_err(|e| internal("writing the sidecar record", e))?;
        let r = self.mount_and_listen(&rec);
        if r.is_err() {
            self.forget(&name);
        }
        r
    }

    /// Mounts `rec`'s target and starts waiting for its sidecar (the token is in its file).
    fn mount_and_listen(&self, rec: &Record) -> Result<(), SourceError> {
        let target = &rec.target;
        let vol = rec.emptydir.join("volumes").join(&rec.name);
        // The sidecar's: it keeps its caches there and removes a volume's directory when done.
        let volumes = rec.emptydir.join("volumes");
        let dirs = std::fs::create_dir_all(&vol)
            .and_then(|()| std::fs::set_permissions(&volumes, PermissionsExt::from_mode(0o755)))
            .and_then(|()| chown(&volumes))
            .and_then(|()| std::fs::set_permissions(&vol, PermissionsExt::from_mode(0o700)))
            .and_then(|()| chown(&vol));
        dirs.map_err(|e| internal("preparing the volume's directory in the pod's emptyDir", e))?;
        let sock = vol.join(HANDOFF_SOCKET);
        let _ = std::fs::remove_file(&sock);
        let listener = fdpass::socket_in(&vol, HANDOFF_SOCKET)
            .and_then(|short| UnixListener::bind(&short.path))
            .map_err(|e| internal("listening for the sidecar", e))?;
        let owned = chown(&sock).and_then(|()| std::fs::set_permissions(&sock, PermissionsExt::from_mode(0o600)));
        owned.map_err(|e| internal("handing the socket to the sidecar's user", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| internal("listening for the sidecar", e))?;

        // No socket may stay behind a failed publish: the sidecar would keep knocking on it.
        let mounted = std::fs::create_dir_all(target)
            .map_err(|e| internal("creating the target directory", e))
            .and_then(|()| fdpass::open_fuse().map_err(SourceError::NoFuse))
            .and_then(|fd| {
                let fsname = format!("hubfs:{}", rec.config.spec);
                let m = fdpass::FuseMount {
                    fsname: &fsname,
                    read_only: rec.config.read_only,
                    default_permissions: rec.config.read_only,
                    max_read: crate::fuse::MAX_READ,
                };
                fdpass::mount_fuse(&fd, target, &m).map_err(|e| internal("mounting FUSE", e))?;
                Ok(fd)
            });
        let fd = mounted.inspect_err(|_| {
            let _ = std::fs::remove_file(&sock);
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        self.pending.lock().insert(rec.name.clone(), stop.clone());
        let job = Waiting {
            record: self.record_path(&rec.name),
            sock,
            listener,
            fd,
            config: rec.config.clone(),
            state: self.state.clone(),
            token_key: format!("{TOKEN_PREFIX}{}", rec.name),
            stop,
        };
        std::thread::Builder::new()
            .name("hubfs-handoff".into())
            .spawn(move || job.run())
            .map_err(|e| internal("starting the handoff thread", e))?;
        tracing::info!(target = %target.display(), spec = %rec.config.spec, "published for the pod's sidecar");
        Ok(())
    }

    /// Forgets `target` if it is a sidecar volume (its mount is then taken down like any other).
    pub fn unpublish(&self, target: &Path) {
        let name = Self::name_of(target);
        if self.record_path(&name).exists() {
            self.forget(&name);
            tracing::info!(target = %target.display(), "sidecar volume unpublished; the sidecar drains it");
        }
    }

    /// After a plugin restart: a volume still waiting for its sidecar lost its descriptor with the
    /// old plugin, so it is mounted again; a volume whose mount is gone is forgotten.
    pub fn adopt(&self) {
        let table = mountinfo::read();
        for rec in self.records() {
            let mounted = mountinfo::at(&table, &rec.target).is_some();
            if !mounted {
                tracing::info!(target = %rec.target.display(), "sidecar volume no longer mounted: forgotten");
                self.forget(&rec.name);
                continue;
            }
            if rec.handed {
                tracing::info!(target = %rec.target.display(), "sidecar volume served by its pod: left alone");
                continue;
            }
            let _ = fdpass::unmount(&rec.target, true);
            match self.mount_and_listen(&rec) {
                Ok(()) => {
                    tracing::info!(target = %rec.target.display(), "sidecar volume mounted again: its handoff was pending")
                }
                Err(e) => {
                    tracing::warn!(target = %rec.target.display(), error = %e, "could not mount a pending sidecar volume again");
                    self.forget(&rec.name);
                }
            }
        }
    }
}

/// Sends a rotated token to the sidecar serving volume `name`.
pub(super) fn send_token(emptydir: &Path, name: &str, token: Option<&str>) -> std::io::Result<()> {
    let mut s = UnixStream::connect(fdpass::socket_in(emptydir, CONTROL_SOCKET)?.path)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    let msg = TokenUpdate {
        volume: name.to_string(),
        token: token.map(str::to_string),
    };
    let mut line = serde_json::to_vec(&msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    s.write_all(&line)?;
    let mut answer = String::new();
    BufReader::new(&s).read_line(&mut answer)?;
    match answer.trim() {
        "ok" => Ok(()),
        other => Err(std::io::Error::other(format!("the sidecar answered {other:?}"))),
    }
}

/// One volume waiting for its sidecar.
struct Waiting {
    record: PathBuf,
    sock: PathBuf,
    listener: UnixListener,
    fd: OwnedFd,
    config: ServeConfig,
    /// The token is read from its file at the handoff: a republish may have rotated it meanwhile.
    state: StateDir,
    token_key: String,
    stop: Arc<AtomicBool>,
}

impl Waiting {
    fn run(self) {
        while !self.stop.load(Ordering::Relaxed) {
            let conn = match self.listener.accept() {
                Ok((c, _)) => c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "waiting for the sidecar");
                    std::thread::sleep(Duration::from_millis(500));
                    continue;
                }
            };
            match self.hand_over(&conn) {
                Ok(commit) => {
                    tracing::info!(commit, socket = %self.sock.display(), "the pod's sidecar serves the volume");
                    // The sidecar has it; later tokens go to its socket.
                    self.state.remove_token(&self.token_key);
                    if let Ok(b) = std::fs::read(&self.record)
                        && let Ok(mut rec) = serde_json::from_slice::<Record>(&b)
                    {
                        rec.handed = true;
                        let tmp = self.record.with_extension("json.tmp");
                        if let Ok(body) = serde_json::to_vec_pretty(&rec)
                            && std::fs::write(&tmp, body).is_ok()
                        {
                            let _ = std::fs::rename(tmp, &self.record);
                        }
                    }
                    break;
                }
                // A sidecar that died before answering may come back (its container restarts):
                // the descriptor stays here until one answers.
                Err(e) => tracing::warn!(error = %e, "handoff to the sidecar failed; waiting for it again"),
            }
        }
        let _ = std::fs::remove_file(&self.sock);
    }

    fn hand_over(&self, conn: &UnixStream) -> std::io::Result<String> {
        conn.set_nonblocking(false)?;
        conn.set_read_timeout(Some(READY_TIMEOUT))?;
        let message = Handoff {
            config: self.config.clone(),
            token: self.state.read_token(&self.token_key),
        };
        let message = serde_json::to_vec(&message).map_err(std::io::Error::other)?;
        fdpass::send_fd(conn, &message, &self.fd)?;
        let mut line = String::new();
        BufReader::new(conn).read_line(&mut line)?;
        let line = line.trim();
        match line.strip_prefix("ready ") {
            Some(commit) => Ok(commit.to_string()),
            None => Err(std::io::Error::other(if line.is_empty() {
                "the sidecar closed the connection without answering".to_string()
            } else {
                line.to_string()
            })),
        }
    }
}
