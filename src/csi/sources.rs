//! Source mounts: one FUSE mount per node for each (source, resolved revision, read-only,
//! uid/gid, token identity, settings), under `STATE/sources/<key>/mnt`, served by its own
//! `hubfs csi-serve` process and bind-mounted into every pod target that asks for the same thing.
//! A node therefore fetches a block once whatever its pod count.
//!
//! Which targets use a source is read from mountinfo (binds carry the source's `MAJ:MIN`), never
//! kept in memory alone, so a restarted plugin knows exactly what the old one left.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustix::process::Signal;
use tonic::Status;

use super::fdpass;
use super::hub::Checked;
use super::mountinfo;
use super::server::{HANDOFF_FD, ServeConfig};
use super::state::{SourceRecord, StateDir, proc_start, server_alive};
use super::volume::VolumeSpec;
use crate::process::signals;

/// How long a new server may take to open the repo and answer the handoff.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Added to a source's drain timeout while waiting for its server to exit after the last unmount.
const EXIT_MARGIN: Duration = Duration::from_secs(10);
/// After the connection is aborted, how long the server gets before SIGKILL.
const KILL_AFTER_ABORT: Duration = Duration::from_secs(10);

/// Aborts the FUSE connection of the filesystem `dev` (`MAJ:MIN`) through fusectl, mounting fusectl
/// first if needed: a source whose last target was detached lazily (something still had a file
/// open) keeps its session alive until then; this ends it, so stopping stays bounded.
pub(super) fn abort_connection(dev: &str) {
    let Some(minor) = dev.split(':').nth(1) else {
        return;
    };
    let dir = Path::new("/sys/fs/fuse/connections");
    if !dir.join(minor).exists() {
        let _ = Command::new("mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    match std::fs::write(dir.join(minor).join("abort"), b"1") {
        Ok(()) => tracing::warn!(dev, "aborted the FUSE connection of a source still in use"),
        Err(e) => tracing::warn!(dev, error = %e, "could not abort the FUSE connection"),
    }
}

/// A source taken out of service whose server is still finishing.
struct Stopping {
    key: String,
    running: Running,
    dev: Option<String>,
}

/// What [`Sources::republish`] found.
#[derive(Debug, PartialEq)]
pub enum Republish {
    /// Not mounted, or its source is gone: a full publish is needed.
    NotPublished,
    /// Mounted from a live source with this very token: nothing to do.
    Done,
    /// Mounted from a live source whose token file holds another token: the new token's account
    /// decides whether it may replace it.
    TokenChanged { key: String, identity: String },
}

struct Running {
    record: SourceRecord,
    /// Our child when this plugin started it; `None` for a server adopted after a restart.
    child: Option<Child>,
}

/// The source mounts of this node.
///
/// Locking: one lock, `running`, held for the whole of a publish or unpublish (mount syscalls
/// included): serialising them keeps the map, the state dir and mountinfo in step. Two things run
/// without it: the Hub checks before, and the wait for a stopping source's server to drain after
/// (the source is out of the map and unmounted by then; its files are removed under the lock again,
/// unless a new source of the same key started meanwhile).
pub struct Sources {
    state: StateDir,
    /// Mount-pod mode (`--mount-pod-image`): sources served by pods of their own.
    pods: Option<super::mount_pod::MountPods>,
    cache_root: PathBuf,
    exe: PathBuf,
    running: Mutex<HashMap<String, Running>>,
}

/// Why a source mount or a target could not be set up or taken down.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot open /dev/fuse ({0}): the plugin must run privileged")]
    NoFuse(std::io::Error),
    #[error("{} already has a {fstype} mount of {mounted}", target.display())]
    Busy {
        target: PathBuf,
        fstype: String,
        mounted: String,
    },
    #[error("{what}: {err}")]
    Io { what: &'static str, err: std::io::Error },
    /// The server could not open the repo: not found (a race with the Hub check).
    #[error("{0}")]
    NotFound(String),
    /// The server's Hub refused the token.
    #[error("{0}")]
    Refused(String),
    #[error("starting the source mount: {0}")]
    Server(String),
}

impl From<SourceError> for Status {
    fn from(e: SourceError) -> Status {
        let msg = e.to_string();
        match e {
            SourceError::NoFuse(_) => Status::failed_precondition(msg),
            SourceError::Busy { .. } => Status::already_exists(msg),
            SourceError::NotFound(_) => Status::not_found(msg),
            SourceError::Refused(_) => Status::permission_denied(msg),
            SourceError::Io { .. } | SourceError::Server(_) => Status::internal(msg),
        }
    }
}

pub(super) fn internal(what: &'static str, err: impl Into<std::io::Error>) -> SourceError {
    SourceError::Io { what, err: err.into() }
}

/// Whether the FUSE mount at `dir` answers ENOTCONN (its server is gone). A hung server never
/// answers: the probe gives up after two seconds and says "not dead".
pub fn answers_enotconn(dir: &Path) -> bool {
    let dir = dir.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("hubfs-csi-probe".into())
        .spawn(move || {
            let errno = rustix::fs::statfs(&dir).err().map(|e| e.raw_os_error());
            let _ = tx.send(errno);
        });
    if spawned.is_err() {
        return false;
    }
    matches!(
        rx.recv_timeout(Duration::from_secs(2)),
        Ok(Some(libc::ENOTCONN | libc::ECONNABORTED))
    )
}

/// What a server of `spec` is told at the handoff.
pub(super) fn serve_config(
    spec: &VolumeSpec,
    checked: &Checked,
    endpoint: &str,
    mountpoint: &Path,
    cache_dir: PathBuf,
    token_file: PathBuf,
    log_file: PathBuf,
) -> ServeConfig {
    let s = &spec.settings;
    ServeConfig {
        spec: spec.mount_spec(),
        revision: checked.revision.clone(),
        endpoint: endpoint.to_string(),
        token_file,
        mountpoint: mountpoint.to_path_buf(),
        read_only: spec.read_only,
        uid: spec.uid,
        gid: spec.gid,
        cache_dir,
        memory_cache_size: s.memory_cache_size,
        memory_limit: s.memory_limit,
        cache_size: s.cache_size,
        metadata_ttl_ms: s.metadata_ttl.as_millis() as u64,
        prefetch_files: s.prefetch_files,
        commit_every_ms: s.commit_every.map(|d| d.as_millis() as u64),
        drain_ms: s.drain_timeout.as_millis() as u64,
        commit_message: s.commit_message.clone(),
        shared_cache: s.shared_cache.clone(),
        log_file,
    }
}

impl Sources {
    pub fn new(
        state: StateDir,
        cache_root: PathBuf,
        pods: Option<super::mount_pod::MountPods>,
    ) -> anyhow::Result<Sources> {
        let exe = std::env::current_exe()?;
        std::fs::create_dir_all(&cache_root)?;
        Ok(Sources {
            state,
            pods,
            cache_root,
            exe,
            running: Mutex::new(HashMap::new()),
        })
    }

    pub fn state(&self) -> &StateDir {
        &self.state
    }

    /// The source key of a request: a hash of everything that makes two mounts differ.
    pub fn key(spec: &VolumeSpec, checked: &Checked, endpoint: &str) -> String {
        super::short_hash(
            format!(
                "{endpoint}|{}|rev={}|who={}",
                spec.canonical(),
                checked.revision,
                checked.identity
            )
            .as_bytes(),
        )
    }

    /// Whether mount-pod mode is on.
    pub fn has_mount_pods(&self) -> bool {
        self.pods.is_some()
    }

    fn alive(&self, r: &mut Running) -> bool {
        if r.record.pod.is_some() {
            // Only the pod holds the descriptor: its end aborts the connection.
            let mnt = self.state.source_mnt(&r.record.key);
            return mountinfo::at(&mountinfo::read(), &mnt).is_some() && !answers_enotconn(&mnt);
        }
        if let Some(c) = r.child.as_mut()
            && !matches!(c.try_wait(), Ok(None))
        {
            return false;
        }
        server_alive(&r.record)
    }

    /// Kubelet's republish of a target already served by a live source (every minute or so with
    /// `requiresRepublish`): nothing is remounted, and the Hub is not asked unless the token changed.
    pub fn republish(&self, target: &Path, token: Option<&str>) -> Republish {
        let mut running = self.running.lock();
        let table = mountinfo::read();
        let Some(e) = mountinfo::at(&table, target) else {
            return Republish::NotPublished;
        };
        let key = running
            .keys()
            .find(|k| mountinfo::at(&table, &self.state.source_mnt(k)).is_some_and(|m| m.dev == e.dev));
        let Some(key) = key.cloned() else {
            return Republish::NotPublished;
        };
        let Some(r) = running.get_mut(&key) else {
            return Republish::NotPublished;
        };
        if !self.alive(r) {
            return Republish::NotPublished;
        }
        if self.state.read_token(&key).as_deref() == token {
            return Republish::Done;
        }
        Republish::TokenChanged {
            key,
            identity: r.record.identity.clone(),
        }
    }

    /// Rewrites the token file of a source (a rotated token of the same account).
    pub fn rewrite_token(&self, key: &str, token: Option<&str>) -> Result<(), SourceError> {
        let running = self.running.lock();
        // A mount pod cannot read the plugin's token files: it is sent the token.
        if let (Some(pods), Some(pod)) = (&self.pods, running.get(key).and_then(|r| r.record.pod.as_ref())) {
            super::sidecar::send_token(&pods.socket_dir(pod), key, token)
                .map_err(|e| internal("sending the token to the mount pod", e))?;
        }
        self.state
            .write_token(key, token)
            .map(|_| ())
            .map_err(|e| internal("writing the token file", e))
    }

    /// Mounts `spec` at `target` (idempotent; a target showing a dead or unknown hubfs source is
    /// moved to this one).
    pub fn publish(
        &self,
        target: &Path,
        spec: &VolumeSpec,
        checked: &Checked,
        endpoint: &str,
        token: Option<&str>,
    ) -> Result<(), SourceError> {
        let mut stopping = Vec::new();
        let r = {
            let mut running = self.running.lock();
            self.publish_locked(&mut running, &mut stopping, target, spec, checked, endpoint, token)
        };
        for s in stopping {
            self.finish_stop(s);
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn publish_locked(
        &self,
        running: &mut HashMap<String, Running>,
        stopping: &mut Vec<Stopping>,
        target: &Path,
        spec: &VolumeSpec,
        checked: &Checked,
        endpoint: &str,
        token: Option<&str>,
    ) -> Result<(), SourceError> {
        let key = Self::key(spec, checked, endpoint);
        let table = mountinfo::read();
        let mnt = self.state.source_mnt(&key);
        let alive = running.get_mut(&key).is_some_and(|r| self.alive(r));
        let source_dev = if alive {
            mountinfo::at(&table, &mnt).map(|e| e.dev.clone())
        } else {
            None
        };
        if let Some(e) = mountinfo::at(&table, target) {
            if Some(&e.dev) == source_dev.as_ref() {
                // Published already (or kubelet's republish): only the token may have changed.
                self.state
                    .write_token(&key, token)
                    .map_err(|e| internal("writing the token file", e))?;
                tracing::debug!(target = %target.display(), key, "already published");
                return Ok(());
            }
            if e.fstype != "fuse.hubfs" {
                return Err(SourceError::Busy {
                    target: target.to_path_buf(),
                    fstype: e.fstype.clone(),
                    mounted: e.source.clone(),
                });
            }
            tracing::info!(target = %target.display(), "switching the target to another source mount");
            let old_dev = e.dev.clone();
            fdpass::unmount_any(target).map_err(|e| internal("unmounting the old source", e))?;
            stopping.extend(self.release_dev(running, &old_dev));
        }
        let started = source_dev.is_none();
        if started {
            self.start(running, &key, spec, checked, endpoint, token)?;
        } else {
            self.state
                .write_token(&key, token)
                .map_err(|e| internal("writing the token file", e))?;
        }
        let bound = std::fs::create_dir_all(target)
            .map_err(|e| internal("creating the target directory", e))
            .and_then(|()| {
                fdpass::bind(&mnt, target, spec.read_only).map_err(|e| internal("bind-mounting the source", e))
            });
        if let Err(e) = bound {
            // A source started for this target alone would be left without any.
            if started {
                stopping.extend(self.begin_stop(running, &key));
            }
            return Err(e);
        }
        tracing::info!(target = %target.display(), key, source = %spec.display(), "published");
        Ok(())
    }

    /// Starts the server of `key` (after clearing a dead one).
    fn start(
        &self,
        running: &mut HashMap<String, Running>,
        key: &str,
        spec: &VolumeSpec,
        checked: &Checked,
        endpoint: &str,
        token: Option<&str>,
    ) -> Result<(), SourceError> {
        let mnt = self.state.source_mnt(key);
        if let Some(old) = running.remove(key) {
            tracing::warn!(
                key,
                pid = old.record.pid,
                "the source's server is gone; starting a new one"
            );
        }
        if mountinfo::at(&mountinfo::read(), &mnt).is_some() {
            let _ = fdpass::unmount(&mnt, true);
        }
        std::fs::create_dir_all(&mnt).map_err(|e| internal("creating the source mountpoint", e))?;
        let token_file = self
            .state
            .write_token(key, token)
            .map_err(|e| internal("writing the token file", e))?;
        let fd = fdpass::open_fuse().map_err(SourceError::NoFuse)?;
        let fsname = format!("hubfs:{}", spec.display());
        fdpass::mount_fuse(
            &fd,
            &mnt,
            &fdpass::FuseMount {
                fsname: &fsname,
                read_only: spec.read_only,
                default_permissions: spec.read_only,
                max_read: crate::fuse::MAX_READ,
            },
        )
        .map_err(|e| internal("mounting FUSE", e))?;
        let fail = |child: Option<&mut Child>, st: SourceError| {
            if let Some(c) = child {
                let _ = c.kill();
                let _ = c.wait();
            }
            let _ = fdpass::unmount(&mnt, true);
            self.state.remove_source(key);
            st
        };
        let cfg = serve_config(
            spec,
            checked,
            endpoint,
            &mnt,
            self.cache_root.join(key),
            token_file,
            self.state.source_dir(key).join("server.log"),
        );
        if let Some(resources) = &spec.settings.mount_pod {
            return self.start_pod(running, key, spec, checked, cfg, token, fd, resources);
        }
        let (ours, theirs) = UnixStream::pair().map_err(|e| fail(None, internal("socket pair", e)))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.state.source_dir(key).join("server.log"))
            .map_err(|e| fail(None, internal("server log", e)))?;
        let log2 = log.try_clone().map_err(|e| fail(None, internal("server log", e)))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("csi-serve")
            .env_remove("HF_TOKEN")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // Its own session: a plugin restart (or its process group's death) leaves it running.
        crate::process::child::new_session_with_fd(&mut cmd, theirs.as_fd(), HANDOFF_FD);
        let mut child = cmd
            .spawn()
            .map_err(|e| fail(None, internal("starting hubfs csi-serve", e)))?;
        drop(theirs);
        let msg = serde_json::to_vec(&cfg)
            .map_err(|e| fail(Some(&mut child), internal("handoff", std::io::Error::other(e))))?;
        if let Err(e) = fdpass::send_fd(&ours, &msg, &fd) {
            return Err(fail(Some(&mut child), internal("handing the FUSE descriptor over", e)));
        }
        // Only the server may hold the device now: if it dies, the kernel aborts the connection
        // (ENOTCONN) instead of leaving readers waiting on a descriptor nobody serves.
        drop(fd);
        let _ = ours.set_read_timeout(Some(READY_TIMEOUT));
        let mut line = String::new();
        let _ = BufReader::new(&ours).read_line(&mut line);
        let line = line.trim();
        let Some(commit) = line.strip_prefix("ready ") else {
            let why = line
                .strip_prefix("error: ")
                .unwrap_or("the server exited without answering");
            let st = if why.contains("not found") {
                SourceError::NotFound(why.to_string())
            } else if why.contains("token") {
                SourceError::Refused(why.to_string())
            } else {
                SourceError::Server(why.to_string())
            };
            return Err(fail(Some(&mut child), st));
        };
        let pid = child.id();
        let start_time = proc_start(pid).map(|(t, _)| t).unwrap_or(0);
        let record = SourceRecord {
            key: key.to_string(),
            spec: spec.mount_spec(),
            revision: checked.revision.clone(),
            read_only: spec.read_only,
            pid,
            start_time,
            drain_secs: spec.settings.drain_timeout.as_secs(),
            identity: checked.identity.clone(),
            pod: None,
        };
        if let Err(e) = self.state.write_record(&record) {
            return Err(fail(Some(&mut child), internal("writing the source record", e)));
        }
        crate::fuse::readahead::raise_readahead(&mnt, spec.readahead());
        tracing::info!(key, pid, source = %spec.display(), commit, "source mount started");
        running.insert(
            key.to_string(),
            Running {
                record,
                child: Some(child),
            },
        );
        Ok(())
    }

    /// [`start`](Self::start) of a source served by a mount pod: `fd` is mounted at its `mnt`.
    #[allow(clippy::too_many_arguments)]
    fn start_pod(
        &self,
        running: &mut HashMap<String, Running>,
        key: &str,
        spec: &VolumeSpec,
        checked: &Checked,
        cfg: ServeConfig,
        token: Option<&str>,
        fd: std::os::fd::OwnedFd,
        resources: &super::mount_pod::PodResources,
    ) -> Result<(), SourceError> {
        let mnt = cfg.mountpoint.clone();
        let fail = |st: SourceError| {
            let _ = fdpass::unmount(&mnt, true);
            self.state.remove_source(key);
            st
        };
        let Some(pods) = &self.pods else {
            return Err(fail(SourceError::Server(
                "mount-pod mode is off (the plugin has no --mount-pod-image)".into(),
            )));
        };
        let (pod, commit) = pods.start(key, cfg, token, &fd, resources).map_err(fail)?;
        // The pod holds the descriptor now: its end aborts the connection.
        drop(fd);
        let record = SourceRecord {
            key: key.to_string(),
            spec: spec.mount_spec(),
            revision: checked.revision.clone(),
            read_only: spec.read_only,
            pid: 0,
            start_time: 0,
            drain_secs: spec.settings.drain_timeout.as_secs(),
            identity: checked.identity.clone(),
            pod: Some(pod.clone()),
        };
        if let Err(e) = self.state.write_record(&record) {
            pods.delete(&pod);
            return Err(fail(internal("writing the source record", e)));
        }
        crate::fuse::readahead::raise_readahead(&mnt, spec.readahead());
        tracing::info!(key, pod, source = %spec.display(), commit, "source mount started in a mount pod");
        running.insert(key.to_string(), Running { record, child: None });
        Ok(())
    }

    /// Unmounts `target` (idempotent), removes it, and stops its source if no target is left.
    pub fn unpublish(&self, target: &Path) -> Result<(), SourceError> {
        let stopping = {
            let mut running = self.running.lock();
            let table = mountinfo::read();
            match mountinfo::at(&table, target) {
                Some(e) => {
                    let dev = e.dev.clone();
                    fdpass::unmount_any(target).map_err(|e| internal("unmounting the target", e))?;
                    tracing::info!(target = %target.display(), "unpublished");
                    self.release_dev(&mut running, &dev)
                }
                None => None,
            }
        };
        // The last pod of a source is gone: its pending writes are committed before we answer.
        if let Some(s) = stopping {
            self.finish_stop(s);
        }
        match std::fs::remove_dir(target) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                std::fs::remove_file(target).map_err(|e| internal("removing the target", e))
            }
            Err(e) => Err(internal("removing the target directory", e)),
        }
    }

    /// Begins stopping the source whose filesystem is `dev` if no bind of it is left.
    fn release_dev(&self, running: &mut HashMap<String, Running>, dev: &str) -> Option<Stopping> {
        let table = mountinfo::read();
        let key = running
            .keys()
            .find(|k| mountinfo::at(&table, &self.state.source_mnt(k)).is_some_and(|e| e.dev == dev));
        let key = key.cloned()?;
        let mnt = self.state.source_mnt(&key);
        let users = mountinfo::with_dev(&table, dev).filter(|e| e.mountpoint != mnt).count();
        if users == 0 {
            self.begin_stop(running, &key)
        } else {
            None
        }
    }

    /// Takes a source out of the map and unmounts it; its server then ends its session and
    /// commits what is pending. Waiting for that ([`finish_stop`](Self::finish_stop)) happens
    /// without the lock, so a draining source does not hold up other volumes.
    fn begin_stop(&self, running: &mut HashMap<String, Running>, key: &str) -> Option<Stopping> {
        let r = running.remove(key)?;
        let mnt = self.state.source_mnt(key);
        let dev = mountinfo::at(&mountinfo::read(), &mnt).map(|e| e.dev.clone());
        if let Err(e) = fdpass::unmount_any(&mnt) {
            tracing::warn!(key, error = %e, "unmounting the source");
        }
        Some(Stopping {
            key: key.to_string(),
            running: r,
            dev,
        })
    }

    /// Waits (bounded) for a stopping source's server to exit, then removes its files unless a
    /// new source of the same key started meanwhile. Must be called without the lock.
    fn finish_stop(&self, s: Stopping) {
        let Stopping {
            key,
            running: mut r,
            dev,
        } = s;
        let limit = Duration::from_secs(r.record.drain_secs) + EXIT_MARGIN;
        if let (Some(pod), Some(pods)) = (&r.record.pod, &self.pods) {
            if !pods.wait_end(pod, limit) {
                tracing::warn!(key, pod, "the mount pod did not exit within its drain timeout");
                if let Some(dev) = &dev {
                    abort_connection(dev);
                }
                pods.wait_end(pod, KILL_AFTER_ABORT);
            }
            pods.delete(pod);
        }
        let start = Instant::now();
        let mut aborted = false;
        while r.record.pod.is_none() && self.alive(&mut r) {
            if start.elapsed() > limit && !aborted {
                tracing::warn!(
                    key,
                    pid = r.record.pid,
                    "the server did not exit within its drain timeout"
                );
                if let Some(dev) = &dev {
                    abort_connection(dev);
                }
                // The pid is checked alive with its start time.
                let _ = signals::send(r.record.pid, Signal::TERM);
                aborted = true;
            } else if start.elapsed() > limit + KILL_AFTER_ABORT {
                tracing::warn!(key, pid = r.record.pid, "SIGKILL");
                let _ = signals::send(r.record.pid, Signal::KILL);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(mut c) = r.child.take() {
            let _ = c.wait();
        }
        let running = self.running.lock();
        if !running.contains_key(&key) {
            self.state.remove_source(&key);
        }
        tracing::info!(key, source = %r.record.spec, "source mount stopped");
    }

    /// At start: adopts the sources a previous plugin left running, clears dead ones (their
    /// targets detached: they answer ENOTCONN) and stops live ones no target uses.
    pub fn adopt(&self) {
        let mut stopping = Vec::new();
        self.adopt_locked(&mut self.running.lock(), &mut stopping);
        for s in stopping {
            self.finish_stop(s);
        }
    }

    fn adopt_locked(&self, running: &mut HashMap<String, Running>, stopping: &mut Vec<Stopping>) {
        let table = mountinfo::read();
        let records: HashMap<String, SourceRecord> =
            self.state.records().into_iter().map(|r| (r.key.clone(), r)).collect();
        for key in self.state.source_keys() {
            let mnt = self.state.source_mnt(&key);
            let mounted = mountinfo::at(&table, &mnt).cloned();
            let rec = records.get(&key);
            // A mount pod's liveness is its connection's (checked below).
            let alive = rec.is_some_and(|r| r.pod.is_some() || server_alive(r));
            match (rec, mounted) {
                (Some(r), Some(m)) if alive && !answers_enotconn(&mnt) => {
                    tracing::info!(key, pid = r.pid, source = %r.spec, "adopted a running source mount");
                    running.insert(
                        key.clone(),
                        Running {
                            record: r.clone(),
                            child: None,
                        },
                    );
                    let users = mountinfo::with_dev(&table, &m.dev)
                        .filter(|e| e.mountpoint != mnt)
                        .count();
                    if users == 0 {
                        tracing::info!(key, "no target uses it: stopping");
                        stopping.extend(self.begin_stop(running, &key));
                    }
                }
                (_, Some(m)) => {
                    tracing::warn!(key, "the source's server is gone: detaching it and its targets");
                    for e in mountinfo::with_dev(&table, &m.dev) {
                        let _ = fdpass::unmount(&e.mountpoint, true);
                    }
                    self.delete_pod_of(rec);
                    self.state.remove_source(&key);
                }
                (Some(r), None) if r.pod.is_some() => {
                    self.delete_pod_of(rec);
                    self.state.remove_source(&key);
                }
                (Some(r), None) => {
                    if alive {
                        // The recorded, live server.
                        let _ = signals::send(r.pid, Signal::TERM);
                    }
                    self.state.remove_source(&key);
                }
                (None, None) => self.state.remove_source(&key),
            }
        }
        // Token files of sources that no longer exist (a crash between stop and cleanup).
        let keys = self.state.source_keys();
        let orphan = |k: &String| !keys.contains(k) && !k.starts_with(super::sidecar::TOKEN_PREFIX);
        for stale in self.state.token_keys().into_iter().filter(orphan) {
            tracing::info!(key = stale, "removing an orphaned token file");
            self.state.remove_token(&stale);
        }
    }

    /// Deletes the mount pod of record `rec`, if it has one.
    fn delete_pod_of(&self, rec: Option<&SourceRecord>) {
        match (rec.and_then(|r| r.pod.as_deref()), &self.pods) {
            (Some(pod), Some(pods)) => pods.delete(pod),
            (Some(pod), None) => tracing::warn!(
                pod,
                "a mount pod is left: this plugin has no --mount-pod-image to delete it"
            ),
            _ => {}
        }
    }

    /// Number of running sources (Probe and tests).
    pub fn count(&self) -> usize {
        self.running.lock().len()
    }
}
