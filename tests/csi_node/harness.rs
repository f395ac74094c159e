//! The harness of tests/csi_node.rs and tests/csi_sidecar.rs: a mount namespace per test, the
//! plugin as a separate process, a gRPC client over its unix socket, kubelet-shaped targets and
//! mountinfo checks, and a pod's sidecar.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubfs::csi::proto::*;
use hubfs::local_hub::{LocalHub, RouteClass, TokenSpec};
use tonic::transport::Channel;

pub const NS_ENV: &str = "HUBFS_CSI_TEST_NS";

/// Runs `body` in a private mount namespace: re-executes this test binary for test `name` under
/// `unshare -m`, or, inside that child, runs the body.
pub fn in_namespace(name: &str, body: impl FnOnce()) {
    if std::env::var_os(NS_ENV).is_some() {
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(NS_ENV, "1")
        .output()
        .expect("run unshare");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "{name} failed in its namespace");
    assert!(text.contains("1 passed"), "{name} did not run in its namespace: {text}");
}

/// A plugin process and what it needs.
pub struct Plugin {
    child: Child,
    pub sock: PathBuf,
    pub state: PathBuf,
    log: PathBuf,
    /// In PID and mount namespaces of its own (`start_contained`): its servers' recorded pids are
    /// that namespace's, and they die with it.
    contained: bool,
}

impl Plugin {
    pub fn start(root: &Path, ep: &str, tag: &str) -> Plugin {
        Plugin::start_with(root, ep, tag, &[])
    }

    /// [`Plugin::start`] with more command-line arguments.
    pub fn start_with(root: &Path, ep: &str, tag: &str, extra: &[&str]) -> Plugin {
        Plugin::launch(root, ep, tag, extra, false)
    }

    /// The plugin as its container runs it: in a PID namespace of its own (with its own /proc),
    /// whose whole process tree `kill9` ends as a container restart does, and a mount namespace
    /// whose mounts under `root` reach the test's (call [`share_mounts`] on `root` first: kubelet's
    /// directory is mounted into the plugin with Bidirectional propagation).
    pub fn start_contained(root: &Path, ep: &str, tag: &str) -> Plugin {
        Plugin::launch(root, ep, tag, &[], true)
    }

    /// [`Plugin::start_contained`] with more command-line arguments.
    pub fn start_contained_with(root: &Path, ep: &str, tag: &str, extra: &[&str]) -> Plugin {
        Plugin::launch(root, ep, tag, extra, true)
    }

    fn launch(root: &Path, ep: &str, tag: &str, extra: &[&str], contained: bool) -> Plugin {
        let sock = root.join("plugin/csi.sock");
        let state = root.join("state");
        let log = root.join(format!("plugin-{tag}.log"));
        let _ = std::fs::remove_file(&sock);
        let mut cmd = if contained {
            let mut c = Command::new("unshare");
            c.args([
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "--propagation",
                "unchanged",
                env!("CARGO_BIN_EXE_hubfs"),
            ]);
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_hubfs"))
        };
        let child = cmd
            .args(["csi-node", "--node-id", "test-node", "--hub-endpoint", ep])
            .arg("--endpoint")
            .arg(format!("unix://{}", sock.display()))
            .arg("--state-dir")
            .arg(&state)
            .args(extra)
            .env("RUST_LOG", "hubfs=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start hubfs csi-node");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !sock.exists() {
            assert!(Instant::now() < deadline, "the plugin did not listen within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Plugin {
            child,
            sock,
            state,
            log,
            contained,
        }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every source server's log, concatenated.
    pub fn server_logs(&self) -> String {
        let mut out = String::new();
        if let Ok(rd) = std::fs::read_dir(self.state.join("sources")) {
            for e in rd.flatten() {
                out.push_str(&std::fs::read_to_string(e.path().join("server.log")).unwrap_or_default());
            }
        }
        out
    }

    /// Pids of the running source servers, from the state dir.
    pub fn servers(&self) -> Vec<u32> {
        let mut out = vec![];
        if let Ok(rd) = std::fs::read_dir(self.state.join("sources")) {
            for e in rd.flatten() {
                if let Ok(b) = std::fs::read(e.path().join("source.json")) {
                    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
                    out.push(v["pid"].as_u64().unwrap() as u32);
                }
            }
        }
        out
    }

    /// The token files, wherever the plugin keeps them (the same choice of tmpfs as the plugin's).
    pub fn token_files(&self) -> Vec<PathBuf> {
        let dir = hubfs::csi::state::StateDir::open(&self.state).unwrap().token_dir;
        let mut out = vec![];
        if let Ok(rd) = std::fs::read_dir(dir) {
            out.extend(
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "token")),
            );
        }
        out
    }
}

impl Drop for Plugin {
    /// Also on a failed assertion: no server outlives the test, no token directory stays in /run.
    fn drop(&mut self) {
        self.kill9();
        if std::env::var_os("HUBFS_CSI_SHOW_LOG").is_some() {
            println!("--- plugin log\n{}", self.log());
        }
        if !self.contained {
            kill_servers(&self.state);
        }
        if let Ok(s) = hubfs::csi::state::StateDir::open(&self.state)
            && s.token_dir.starts_with("/")
            && !s.token_dir.starts_with(&s.root)
            && let Some(per_root) = s.token_dir.parent()
        {
            let _ = std::fs::remove_dir_all(per_root);
        }
    }
}

/// Kills every server still recorded (end of a test: the namespace's mounts go with them).
pub fn kill_servers(state: &Path) {
    if let Ok(rd) = std::fs::read_dir(state.join("sources")) {
        for e in rd.flatten() {
            if let Ok(b) = std::fs::read(e.path().join("source.json")) {
                let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
                // SAFETY: a signal to a process this test started.
                unsafe { libc::kill(v["pid"].as_u64().unwrap() as i32, libc::SIGKILL) };
            }
        }
    }
}

pub async fn connect(sock: &Path) -> Channel {
    let sock = sock.to_path_buf();
    tonic::transport::Endpoint::try_from("http://localhost")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let s = sock.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(s).await?,
                ))
            }
        }))
        .await
        .expect("connect to the plugin")
}

pub async fn call<Req, Resp>(ch: &Channel, path: &'static str, req: Req) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut g = tonic::client::Grpc::new(ch.clone());
    g.ready().await.map_err(|e| tonic::Status::unknown(e.to_string()))?;
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    let r = tokio::time::timeout(
        Duration::from_secs(120),
        g.unary(
            tonic::Request::new(req),
            http::uri::PathAndQuery::from_static(path),
            codec,
        ),
    )
    .await
    .map_err(|_| tonic::Status::deadline_exceeded("the plugin did not answer within 120 s"))?;
    r.map(|r| r.into_inner())
}

/// A kubelet-shaped target under `root`.
pub fn target(root: &Path, pod: &str, vol: &str) -> PathBuf {
    root.join(format!(
        "var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~csi/{vol}/mount"
    ))
}

pub fn capability(mode: i32, group: &str) -> VolumeCapability {
    VolumeCapability {
        block: None,
        mount: Some(MountVolume {
            fs_type: String::new(),
            mount_flags: vec![],
            volume_mount_group: group.to_string(),
        }),
        access_mode: Some(AccessMode { mode }),
    }
}

pub const RWO: i32 = 1;
pub const ROX: i32 = 3;

pub fn publish_req(
    target: &Path,
    attrs: &[(&str, &str)],
    token: Option<&str>,
    cap: Option<VolumeCapability>,
) -> NodePublishVolumeRequest {
    let mut secrets = HashMap::new();
    if let Some(t) = token {
        secrets.insert("token".to_string(), t.to_string());
    }
    let mut volume_context: HashMap<String, String> =
        attrs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    volume_context.insert("csi.storage.k8s.io/pod.name".into(), "p".into());
    NodePublishVolumeRequest {
        volume_id: "vol-1".into(),
        publish_context: HashMap::new(),
        staging_target_path: String::new(),
        target_path: target.display().to_string(),
        volume_capability: cap,
        readonly: false,
        secrets,
        volume_context,
    }
}

pub async fn publish(ch: &Channel, req: NodePublishVolumeRequest) -> Result<(), tonic::Status> {
    call::<_, NodePublishVolumeResponse>(ch, "/csi.v1.Node/NodePublishVolume", req)
        .await
        .map(|_| ())
}

pub async fn unpublish(ch: &Channel, target: &Path) -> Result<(), tonic::Status> {
    call::<_, NodeUnpublishVolumeResponse>(
        ch,
        "/csi.v1.Node/NodeUnpublishVolume",
        NodeUnpublishVolumeRequest {
            volume_id: "vol-1".into(),
            target_path: target.display().to_string(),
        },
    )
    .await
    .map(|_| ())
}

/// hubfs mounts in this namespace: (mountpoint, dev).
pub fn hubfs_mounts() -> Vec<(PathBuf, String)> {
    hubfs::csi::mountinfo::read()
        .into_iter()
        .filter(|e| e.fstype == "fuse.hubfs")
        .map(|e| (e.mountpoint, e.dev))
        .collect()
}

pub fn distinct_devs() -> usize {
    let mut d: Vec<String> = hubfs_mounts().into_iter().map(|(_, d)| d).collect();
    d.sort();
    d.dedup();
    d.len()
}

pub fn is_mounted(p: &Path) -> bool {
    hubfs_mounts().iter().any(|(m, _)| m == p)
}

/// Bytes the Hub sent, every route class together (`ALL`: the CAS steps are counted in `cas` too).
pub fn hub_bytes(hub: &LocalHub) -> u64 {
    RouteClass::ALL.iter().map(|c| hub.stats(*c).bytes_out).sum()
}

/// The Hub's bytes of a file (redirects followed).
pub async fn hub_file(ep: &str, repo_path: &str, path: &str) -> Vec<u8> {
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let r = c
        .get(if repo_path.starts_with("buckets/") {
            // Buckets have no revisions.
            format!("{ep}/{repo_path}/resolve/{path}")
        } else {
            format!("{ep}/{repo_path}/resolve/main/{path}")
        })
        .bearer_auth(crate::common::WRITE)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "download {path}: {}", r.status());
    r.bytes().await.unwrap().to_vec()
}

pub fn token_spec(user: &str, token: &str, write: bool) -> TokenSpec {
    let role = if write { "write" } else { "read" };
    format!("{user}:{token}:{role}").parse().unwrap()
}

/// Zeroes the Hub's request and byte counters.
pub async fn reset_stats(ep: &str) {
    let r = crate::common::client()
        .get(format!("{ep}/admin/stats?reset=1"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub fn model_attrs() -> Vec<(&'static str, &'static str)> {
    vec![("sourceType", "model"), ("sourceId", "demo/tiny-model")]
}

/// Reads a file in a thread with a deadline (a mount gone wrong must fail the test, not hang it).
pub fn read_bounded(p: &Path) -> std::io::Result<Vec<u8>> {
    let p = p.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read(p));
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("read hung for 60 s")
}

/// sha256 of a file read in 1 MiB pieces (a 1 GiB figure run must not hold copies in memory).
pub fn sha256_of(p: &Path) -> String {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(p).unwrap();
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    hex::encode(h.finalize())
}

/// Makes `root` a shared mount of its own, so that mounts a plugin in another mount namespace makes
/// below it show here too.
pub fn share_mounts(root: &Path) {
    for args in [vec!["--bind", "", ""], vec!["--make-rshared", ""]] {
        let mut c = Command::new("mount");
        for a in args {
            if a.is_empty() {
                c.arg(root);
            } else {
                c.arg(a);
            }
        }
        assert!(c.status().unwrap().success(), "mount {c:?}");
    }
}

/// A pod's `hubfs csi-sidecar`: its own PID namespace, uid and gid 65534 (as the webhook's
/// securityContext asks), the pod's emptyDir as its socket dir.
pub struct Sidecar {
    child: Child,
    pub log: PathBuf,
}

impl Sidecar {
    pub fn start(emptydir: &Path, log: PathBuf) -> Sidecar {
        let child = Command::new("unshare")
            .args([
                "--pid",
                "--fork",
                "--kill-child",
                "setpriv",
                "--reuid",
                "65534",
                "--regid",
                "65534",
            ])
            .args([
                "--clear-groups",
                "--",
                env!("CARGO_BIN_EXE_hubfs"),
                "csi-sidecar",
                "--socket-dir",
            ])
            .arg(emptydir)
            .env("RUST_LOG", "hubfs=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start hubfs csi-sidecar");
        Sidecar { child, log }
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM to the sidecar itself (kubelet's stop of the container), then its exit status.
    pub fn stop(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let me = self.child.id();
        // unshare's child (setpriv, which became hubfs) runs the sidecar.
        let children = std::fs::read_to_string(format!("/proc/{me}/task/{me}/children")).unwrap_or_default();
        for pid in children.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            // SAFETY: a signal to a process this test started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pod's `hubfs-sidecar` emptyDir, as kubelet lays it out beside its CSI volumes.
pub fn sidecar_emptydir(root: &Path, pod: &str) -> PathBuf {
    let d = root.join(format!(
        "var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~empty-dir/hubfs-sidecar"
    ));
    std::fs::create_dir_all(&d).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    d
}

/// Runs `pod` as kubelet would: its one container's args under the hubfs binary (the image's
/// entrypoint), its hostPath volume at the container's mountPath, as its runAsUser.
pub fn run_pod(pod: &serde_json::Value, log: PathBuf) -> Child {
    let c = &pod["spec"]["containers"][0];
    let mount_path = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let host_path = pod["spec"]["volumes"][0]["hostPath"]["path"].as_str().unwrap();
    assert!(
        std::path::Path::new(host_path).is_dir(),
        "hostPath {host_path} (type Directory) is missing"
    );
    let uid = c["securityContext"]["runAsUser"].as_u64().unwrap().to_string();
    let args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().replace(mount_path, host_path))
        .collect();
    Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--kill-child",
            "setpriv",
            "--reuid",
            &uid,
            "--regid",
            &uid,
        ])
        .args(["--clear-groups", "--", env!("CARGO_BIN_EXE_hubfs")])
        .args(&args)
        .env("RUST_LOG", "hubfs=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// A kubelet-like tree for a contained plugin and pods: traversable by the pods' uid 65534 (as a
/// real kubelet tree is) and shared back from the plugin's mount namespace ([`share_mounts`]).
pub fn pod_tree() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    share_mounts(root.path());
    root
}

/// Reads `p` in 256 KiB pieces with a pause after each (a reader still reading while a test kills
/// the plugin), returning the bytes or the first error.
pub fn read_slowly(p: &Path) -> std::thread::JoinHandle<std::io::Result<Vec<u8>>> {
    let p = p.to_path_buf();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut f = std::fs::File::open(p)?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}
