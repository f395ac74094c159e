//! Mount-pod mode: a source mount served by a pod of its own on the plugin's node instead of a
//! `hubfs csi-serve` process in the plugin's container, for pods the webhook cannot change. The
//! plugin creates the pod through the API (`nodeName` set: no scheduler), mounts the source and
//! hands it the descriptor the same way a sidecar gets one (`hubfs csi-sidecar --exit-when-idle`,
//! its socket dir a hostPath below the plugin's state dir). Later publishes of the same source bind
//! the same mount; after the last unpublish the pod commits what is pending, exits, and is deleted.
//! A restart of the plugin's container leaves mount pods serving.

use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::fdpass;
use super::kube::{Kube, KubeArgs, KubeError};
use super::server::ServeConfig;
use super::sidecar::{HANDOFF_SOCKET, Handoff};
use super::sources::{SourceError, internal};
use super::webhook_patch::SIDECAR_UID;

/// Where the pod sees its hostPath.
const POD_DIR: &str = "/hubfs-mount";
/// How long a new mount pod may take to start (image pull included) and answer.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// Label naming the plugin's mount pods.
pub const LABEL: &str = "hubfs.csi.huggingface.co/mount-pod";

/// What a mount pod gets: requests and limits from the volume's attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResources {
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub cpu_limit: Option<String>,
    pub memory_limit: Option<String>,
}

/// The plugin's side: the API, the image and where pods go.
pub struct MountPods {
    kube: Kube,
    rt: tokio::runtime::Runtime,
    image: String,
    namespace: String,
    node: String,
    /// `STATE_DIR/mountpods`: one socket dir per source.
    root: PathBuf,
}

/// The pod's name for source `key` (a DNS label).
pub fn pod_name(key: &str) -> String {
    let k: String = key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .take(40)
        .collect();
    format!("hubfs-mount-{k}")
}

/// The pod object for source `key`.
pub fn pod_spec(name: &str, key: &str, image: &str, node: &str, host_dir: &Path, r: &PodResources) -> Value {
    let pick = |pairs: [(&str, &Option<String>); 2]| -> serde_json::Map<String, Value> {
        pairs
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), Value::String(v.clone()?))))
            .collect()
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {LABEL: "true", "app.kubernetes.io/name": "hubfs-mount", "hubfs.csi.huggingface.co/source": key},
        },
        "spec": {
            "nodeName": node,
            // The descriptor dies with the container: a restart could not serve the mount again.
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 600,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "hubfs-mount",
                "image": image,
                "args": ["csi-sidecar", "--socket-dir", POD_DIR, "--exit-when-idle"],
                "securityContext": super::webhook_patch::unprivileged(),
                "resources": {
                    "requests": pick([("cpu", &r.cpu), ("memory", &r.memory)]),
                    "limits": pick([("cpu", &r.cpu_limit), ("memory", &r.memory_limit)]),
                },
                "volumeMounts": [{"name": "socket-dir", "mountPath": POD_DIR}],
            }],
            "volumes": [{"name": "socket-dir", "hostPath": {"path": host_dir, "type": "Directory"}}],
        },
    })
}

impl MountPods {
    pub fn new(
        args: &KubeArgs,
        image: String,
        namespace: String,
        node: String,
        state_root: &Path,
    ) -> anyhow::Result<MountPods> {
        let kube = Kube::new(args, Duration::from_secs(10))?;
        if !kube.configured() {
            anyhow::bail!("--mount-pod-image needs the Kubernetes API (run in a cluster, or set HUBFS_KUBE_API)");
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let root = state_root.join("mountpods");
        std::fs::create_dir_all(&root)?;
        Ok(MountPods {
            kube,
            rt,
            image,
            namespace,
            node,
            root,
        })
    }

    fn pods_path(&self) -> String {
        format!("/api/v1/namespaces/{}/pods", self.namespace)
    }

    /// Deletes pod `name` (gone already is fine).
    pub fn delete(&self, name: &str) {
        let path = format!("{}/{name}", self.pods_path());
        match self.rt.block_on(self.kube.delete(&path)) {
            Ok(()) => tracing::info!(pod = name, "mount pod deleted"),
            Err(e) => tracing::warn!(pod = name, error = %e, "could not delete a mount pod"),
        }
        // Its volume's directory is gone once everything it staged was committed; otherwise the
        // staged files stay on the node.
        let dir = self.root.join(name);
        if std::fs::read_dir(dir.join("volumes")).map_or(true, |mut d| d.next().is_none()) {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            tracing::warn!(pod = name, dir = %dir.display(), "the mount pod left files it could not commit");
        }
    }

    /// The pod's phase (`None`: no such pod).
    pub fn phase(&self, name: &str) -> Result<Option<String>, KubeError> {
        let pod = self
            .rt
            .block_on(self.kube.get(&format!("{}/{name}", self.pods_path())))?;
        Ok(pod.map(|p| p["status"]["phase"].as_str().unwrap_or("Pending").to_string()))
    }

    /// Waits up to `limit` for pod `name` to end (it exits once its mount is gone and its writes
    /// are committed); whether it did.
    pub fn wait_end(&self, name: &str, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            match self.phase(name) {
                Ok(Some(p)) if p == "Succeeded" || p == "Failed" => return true,
                Ok(None) => return true,
                Ok(Some(_)) | Err(_) => std::thread::sleep(Duration::from_millis(250)),
            }
        }
        false
    }

    /// Pod `name`'s socket dir, as the plugin sees it.
    pub fn socket_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Starts a mount pod for source `key` and hands it `fd` (mounted at `cfg.mountpoint`); its
    /// name and the commit it serves once it answered.
    pub fn start(
        &self,
        key: &str,
        cfg: ServeConfig,
        token: Option<&str>,
        fd: &OwnedFd,
        resources: &PodResources,
    ) -> Result<(String, String), SourceError> {
        let name = pod_name(key);
        let host_dir = self.root.join(&name);
        let vol = host_dir.join("volumes").join(key);
        // What a previous pod of this source could not commit stays in `vol/cache`: this one
        // recovers it. Only its socket is stale.
        let _ = std::fs::remove_file(vol.join(HANDOFF_SOCKET));
        let dirs = std::fs::create_dir_all(&vol).and_then(|()| {
            for d in [host_dir.as_path(), &host_dir.join("volumes"), &vol] {
                std::fs::set_permissions(d, PermissionsExt::from_mode(0o755))?;
                std::os::unix::fs::chown(d, Some(SIDECAR_UID), Some(SIDECAR_UID))?;
            }
            Ok(())
        });
        dirs.map_err(|e| internal("preparing the mount pod's directory", e))?;
        let listener = fdpass::socket_in(&vol, HANDOFF_SOCKET)
            .and_then(|short| UnixListener::bind(&short.path))
            .map_err(|e| internal("listening for the mount pod", e))?;
        let sock = vol.join(HANDOFF_SOCKET);
        let owned = std::os::unix::fs::chown(&sock, Some(SIDECAR_UID), Some(SIDECAR_UID))
            .and_then(|()| std::fs::set_permissions(&sock, PermissionsExt::from_mode(0o600)));
        owned.map_err(|e| internal("handing the socket to the mount pod's user", e))?;

        let spec = pod_spec(&name, key, &self.image, &self.node, &host_dir, resources);
        let created = self.rt.block_on(async {
            match self.kube.post(&self.pods_path(), &spec).await {
                // A pod left by a plugin that died while starting it: it never got a descriptor.
                Err(e) if e.is_conflict() => {
                    self.kube.delete(&format!("{}/{name}", self.pods_path())).await?;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    self.kube.post(&self.pods_path(), &spec).await
                }
                r => r,
            }
        });
        if let Err(e) = created {
            return Err(SourceError::Server(format!("creating mount pod {name}: {e}")));
        }
        tracing::info!(pod = name, node = %self.node, key, "mount pod created");
        let message = serde_json::to_vec(&Handoff {
            config: cfg,
            token: token.map(str::to_string),
        })
        .map_err(|e| internal("handoff", std::io::Error::other(e)))?;
        let answer = self.hand_over(&listener, &name, &message, fd);
        let _ = std::fs::remove_file(&sock);
        match answer {
            Ok(commit) => Ok((name, commit)),
            Err(e) => {
                self.delete(&name);
                Err(e)
            }
        }
    }

    fn hand_over(
        &self,
        listener: &UnixListener,
        name: &str,
        message: &[u8],
        fd: &OwnedFd,
    ) -> Result<String, SourceError> {
        listener
            .set_nonblocking(true)
            .map_err(|e| internal("listening for the mount pod", e))?;
        let start = Instant::now();
        let mut last_check = Instant::now();
        loop {
            match listener.accept() {
                Ok((conn, _)) => {
                    let io = |e| internal("handing the FUSE descriptor to the mount pod", e);
                    conn.set_nonblocking(false).map_err(io)?;
                    conn.set_read_timeout(Some(READY_TIMEOUT)).map_err(io)?;
                    fdpass::send_fd(&conn, message, fd).map_err(io)?;
                    let mut line = String::new();
                    let _ = BufReader::new(&conn).read_line(&mut line);
                    let line = line.trim();
                    return match line.strip_prefix("ready ") {
                        Some(commit) => Ok(commit.to_string()),
                        None => {
                            let why = line
                                .strip_prefix("error: ")
                                .unwrap_or("the mount pod exited without answering");
                            Err(if why.contains("not found") {
                                SourceError::NotFound(why.to_string())
                            } else if why.contains("token") {
                                SourceError::Refused(why.to_string())
                            } else {
                                SourceError::Server(why.to_string())
                            })
                        }
                    };
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(internal("waiting for the mount pod", e)),
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(SourceError::Server(format!(
                    "mount pod {name} did not connect within {READY_TIMEOUT:?}"
                )));
            }
            // A pod that cannot start (its image, its resources) says so in its phase.
            if last_check.elapsed() > Duration::from_secs(2) {
                last_check = Instant::now();
                if let Ok(Some(p)) = self.phase(name)
                    && (p == "Failed" || p == "Succeeded")
                {
                    return Err(SourceError::Server(format!(
                        "mount pod {name} ended ({p}) before it served"
                    )));
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
