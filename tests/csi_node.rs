//! `hubfs csi-node` driven the way kubelet drives it: a separate plugin process, gRPC over its
//! unix socket, kubelet-shaped target paths, against the local Hub. Each test re-runs itself under
//! `unshare -m` so that its mounts live in a mount namespace of their own (tests run as root).

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hubfs::csi::proto::*;
use hubfs::local_hub::{LocalHub, RouteClass, TokenSpec};
use tonic::Code;
use tonic::transport::Channel;

const NS_ENV: &str = "HUBFS_CSI_TEST_NS";

/// Runs `body` in a private mount namespace: re-executes this test binary for test `name` under
/// `unshare -m`, or, inside that child, runs the body.
fn in_namespace(name: &str, body: impl FnOnce()) {
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
struct Plugin {
    child: Child,
    sock: PathBuf,
    state: PathBuf,
    log: PathBuf,
}

impl Plugin {
    fn start(root: &Path, ep: &str, tag: &str) -> Plugin {
        let sock = root.join("plugin/csi.sock");
        let state = root.join("state");
        let log = root.join(format!("plugin-{tag}.log"));
        let _ = std::fs::remove_file(&sock);
        let child = Command::new(env!("CARGO_BIN_EXE_hubfs"))
            .args(["csi-node", "--node-id", "test-node", "--hub-endpoint", ep])
            .arg("--endpoint")
            .arg(format!("unix://{}", sock.display()))
            .arg("--state-dir")
            .arg(&state)
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
        }
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Pids of the running source servers, from the state dir.
    fn servers(&self) -> Vec<u32> {
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
    fn token_files(&self) -> Vec<PathBuf> {
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
        kill_servers(&self.state);
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
fn kill_servers(state: &Path) {
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

async fn connect(sock: &Path) -> Channel {
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

async fn call<Req, Resp>(ch: &Channel, path: &'static str, req: Req) -> Result<Resp, tonic::Status>
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
fn target(root: &Path, pod: &str, vol: &str) -> PathBuf {
    root.join(format!(
        "var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~csi/{vol}/mount"
    ))
}

fn capability(mode: i32, group: &str) -> VolumeCapability {
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

const RWO: i32 = 1;
const ROX: i32 = 3;

fn publish_req(
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

async fn publish(ch: &Channel, req: NodePublishVolumeRequest) -> Result<(), tonic::Status> {
    call::<_, NodePublishVolumeResponse>(ch, "/csi.v1.Node/NodePublishVolume", req)
        .await
        .map(|_| ())
}

async fn unpublish(ch: &Channel, target: &Path) -> Result<(), tonic::Status> {
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
fn hubfs_mounts() -> Vec<(PathBuf, String)> {
    hubfs::csi::mountinfo::read()
        .into_iter()
        .filter(|e| e.fstype == "fuse.hubfs")
        .map(|e| (e.mountpoint, e.dev))
        .collect()
}

fn distinct_devs() -> usize {
    let mut d: Vec<String> = hubfs_mounts().into_iter().map(|(_, d)| d).collect();
    d.sort();
    d.dedup();
    d.len()
}

fn is_mounted(p: &Path) -> bool {
    hubfs_mounts().iter().any(|(m, _)| m == p)
}

/// Bytes the Hub sent, every route class together (`ALL`: the CAS steps are counted in `cas` too).
fn hub_bytes(hub: &LocalHub) -> u64 {
    RouteClass::ALL.iter().map(|c| hub.stats(*c).bytes_out).sum()
}

/// The Hub's bytes of a file (redirects followed).
async fn hub_file(ep: &str, repo_path: &str, path: &str) -> Vec<u8> {
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let r = c
        .get(if repo_path.starts_with("buckets/") {
            // Buckets have no revisions.
            format!("{ep}/{repo_path}/resolve/{path}")
        } else {
            format!("{ep}/{repo_path}/resolve/main/{path}")
        })
        .bearer_auth(common::WRITE)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "download {path}: {}", r.status());
    r.bytes().await.unwrap().to_vec()
}

fn token_spec(user: &str, token: &str, write: bool) -> TokenSpec {
    TokenSpec {
        user: user.to_string(),
        token: token.to_string(),
        write,
    }
}

/// Zeroes the Hub's request and byte counters.
async fn reset_stats(ep: &str) {
    let r = common::client()
        .get(format!("{ep}/admin/stats?reset=1"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn model_attrs() -> Vec<(&'static str, &'static str)> {
    vec![("sourceType", "model"), ("sourceId", "demo/tiny-model")]
}

/// Reads a file in a thread with a deadline (a mount gone wrong must fail the test, not hang it).
fn read_bounded(p: &Path) -> std::io::Result<Vec<u8>> {
    let p = p.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read(p));
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("read hung for 60 s")
}

/// sha256 of a file read in 1 MiB pieces (a 1 GiB figure run must not hold copies in memory).
fn sha256_of(p: &Path) -> String {
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

#[test]
fn model_is_published_shared_and_unpublished() {
    in_namespace("model_is_published_shared_and_unpublished", || {
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        let plugin = Plugin::start(root.path(), &ep, "a");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let a = target(root.path(), "pod-a", "weights");
            let b = target(root.path(), "pod-b", "weights");
            let want = hub_file(&ep, "demo/tiny-model", "model.safetensors").await;
            let req = publish_req(&a, &model_attrs(), None, Some(capability(ROX, "")));
            publish(&ch, req.clone())
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            // Publishing again is fine and changes nothing.
            publish(&ch, req).await.unwrap();
            assert_eq!(hubfs_mounts().len(), 2, "source + one target: {:?}", hubfs_mounts());

            reset_stats(&ep).await;
            let got = read_bounded(&a.join("model.safetensors")).unwrap();
            assert_eq!(
                common::sha256_hex(&got),
                common::sha256_hex(&want),
                "bytes equal the Hub's"
            );
            let first = hub_bytes(&hub);

            // A second pod asking the same shares the source mount: one FUSE session, no new fetch.
            publish(&ch, publish_req(&b, &model_attrs(), None, Some(capability(ROX, ""))))
                .await
                .unwrap();
            assert_eq!(distinct_devs(), 1, "one FUSE session: {:?}", hubfs_mounts());
            assert_eq!(hubfs_mounts().len(), 3);
            let got_b = read_bounded(&b.join("model.safetensors")).unwrap();
            assert_eq!(got_b, got);
            let second = hub_bytes(&hub) - first;
            println!(
                "model.safetensors ({} bytes): first pod cost the Hub {first} bytes, the second {second}",
                want.len()
            );
            assert!(second < 64 << 10, "the second pod fetched {second} bytes again");
            // Read-only: writes are refused.
            assert!(std::fs::write(b.join("x"), b"x").is_err());

            // Unpublishing one keeps the other.
            unpublish(&ch, &a).await.unwrap();
            assert!(!a.exists(), "the target directory is removed");
            assert!(is_mounted(&b));
            assert!(!read_bounded(&b.join("config.json")).unwrap().is_empty());
            // Unpublishing twice (or something never published) is fine.
            unpublish(&ch, &a).await.unwrap();

            let servers = plugin.servers();
            assert_eq!(servers.len(), 1);
            unpublish(&ch, &b).await.unwrap();
            assert!(
                hubfs_mounts().is_empty(),
                "the last unpublish removes the source: {:?}",
                hubfs_mounts()
            );
            assert!(plugin.servers().is_empty());
            assert!(
                !Path::new(&format!("/proc/{}", servers[0])).exists(),
                "the server exited"
            );
            assert!(plugin.token_files().is_empty(), "token file removed");
        });
    });
}

#[test]
fn errors_have_the_documented_codes() {
    in_namespace("errors_have_the_documented_codes", || {
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        let plugin = Plugin::start(root.path(), &ep, "a");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let t = target(root.path(), "pod-e", "v");
            let cap = || Some(capability(RWO, ""));
            let dataset = [("sourceType", "dataset"), ("sourceId", "demo/tiny-dataset")];
            let cases: Vec<(NodePublishVolumeRequest, Code, &str)> = vec![
                (
                    publish_req(&t, &[("sourceId", "demo/nope")], None, cap()),
                    Code::NotFound,
                    "unknown repo",
                ),
                (
                    publish_req(&t, &[("sourceId", "demo/tiny-model"), ("revision", "v9")], None, cap()),
                    Code::NotFound,
                    "unknown revision",
                ),
                (
                    publish_req(&t, &model_attrs(), Some("hf_refused"), cap()),
                    Code::PermissionDenied,
                    "refused token",
                ),
                (
                    publish_req(
                        &t,
                        &[("sourceId", "demo/tiny-model"), ("readOnly", "false")],
                        None,
                        cap(),
                    ),
                    Code::InvalidArgument,
                    "model asked writable",
                ),
                (
                    publish_req(&t, &dataset, Some(common::READ), cap()),
                    Code::PermissionDenied,
                    "writable dataset with a read token",
                ),
                (
                    publish_req(&t, &dataset, None, cap()),
                    Code::PermissionDenied,
                    "writable dataset without a token",
                ),
                (
                    publish_req(&t, &[("sourceType", "model")], None, cap()),
                    Code::InvalidArgument,
                    "no sourceId",
                ),
                (
                    publish_req(&t, &model_attrs(), None, None),
                    Code::InvalidArgument,
                    "no capability",
                ),
                (
                    publish_req(&t, &[("sourceId", "demo/tiny-model"), ("colour", "red")], None, cap()),
                    Code::InvalidArgument,
                    "unknown attribute",
                ),
                (
                    publish_req(
                        &t,
                        &[("sourceType", "bucket"), ("sourceId", "demo/no-such-bucket")],
                        Some(common::WRITE),
                        cap(),
                    ),
                    Code::NotFound,
                    "unknown bucket",
                ),
                (
                    NodePublishVolumeRequest {
                        target_path: "relative/path".into(),
                        ..publish_req(&t, &model_attrs(), None, cap())
                    },
                    Code::InvalidArgument,
                    "relative target",
                ),
                (
                    NodePublishVolumeRequest {
                        volume_capability: Some(VolumeCapability {
                            block: Some(Empty {}),
                            mount: None,
                            access_mode: Some(AccessMode { mode: RWO }),
                        }),
                        ..publish_req(&t, &model_attrs(), None, cap())
                    },
                    Code::InvalidArgument,
                    "block volume",
                ),
            ];
            for (req, code, what) in cases {
                let e = publish(&ch, req).await.expect_err(what);
                assert_eq!(e.code(), code, "{what}: {e:?}");
                assert!(!e.message().contains("hf_refused"), "the token leaked into {e:?}");
            }
            assert!(hubfs_mounts().is_empty());
            assert!(!plugin.log().contains("hf_refused"), "the token leaked into the log");

            // A target that cannot be created (its parent is a file): the source started for it is
            // stopped again, nothing is left mounted or running.
            let file = root.path().join("not-a-dir");
            std::fs::write(&file, b"x").unwrap();
            let bad = file.join("mount");
            let e = publish(&ch, publish_req(&bad, &model_attrs(), None, cap()))
                .await
                .expect_err("a target under a file");
            assert_eq!(e.code(), Code::Internal, "{e:?}");
            assert!(hubfs_mounts().is_empty(), "{:?}", hubfs_mounts());
            assert!(plugin.servers().is_empty());
        });
    });
}

#[test]
fn writable_dataset_commits_on_unpublish_with_fsgroup_ownership() {
    in_namespace("writable_dataset_commits_on_unpublish_with_fsgroup_ownership", || {
        use std::os::unix::fs::MetadataExt;
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        let plugin = Plugin::start(root.path(), &ep, "a");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let t = target(root.path(), "pod-w", "data");
            let attrs = [("sourceType", "dataset"), ("sourceId", "demo/tiny-dataset")];
            publish(
                &ch,
                publish_req(&t, &attrs, Some(common::WRITE), Some(capability(RWO, "2345"))),
            )
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            // VOLUME_MOUNT_GROUP: the pod's fsGroup owns the mount, kubelet need not chown it.
            assert_eq!(std::fs::metadata(&t).unwrap().gid(), 2345);
            // (A DirEntry keeps its directory open: dropped at once, or the target stays busy.)
            let gid = std::fs::read_dir(&t)
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .metadata()
                .unwrap()
                .gid();
            assert_eq!(gid, 2345);

            let body = b"written from a pod\n".repeat(100);
            std::fs::write(t.join("from-pod.txt"), &body).unwrap();
            let start = Instant::now();
            unpublish(&ch, &t).await.unwrap();
            println!("unpublish with a pending write took {:?}", start.elapsed());
            assert!(hubfs_mounts().is_empty());
            let got = hub_file(&ep, "datasets/demo/tiny-dataset", "from-pod.txt").await;
            assert_eq!(got, body, "the write was committed by unpublish");

            // A file still open at unpublish (a pod process that outlived its container): the
            // target is detached lazily, and stopping the source stays bounded by drainTimeout
            // plus margins: the connection is aborted, the held descriptor fails.
            let quick = [
                ("sourceType", "dataset"),
                ("sourceId", "demo/tiny-dataset"),
                ("drainTimeout", "1s"),
            ];
            publish(
                &ch,
                publish_req(&t, &quick, Some(common::WRITE), Some(capability(RWO, ""))),
            )
            .await
            .unwrap();
            let held = std::fs::File::open(t.join("from-pod.txt")).unwrap();
            let (ch2, t_busy) = (ch.clone(), t.clone());
            let slow = tokio::spawn(async move {
                let start = Instant::now();
                unpublish(&ch2, &t_busy).await.unwrap();
                start.elapsed()
            });
            // Meanwhile another volume comes and goes: the draining source does not hold it up.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let other = target(root.path(), "pod-o", "m");
            let start = Instant::now();
            publish(
                &ch,
                publish_req(&other, &model_attrs(), None, Some(capability(ROX, ""))),
            )
            .await
            .unwrap();
            unpublish(&ch, &other).await.unwrap();
            let quick = start.elapsed();
            assert!(
                quick < Duration::from_secs(5),
                "another volume waited {quick:?} for a draining one"
            );
            assert!(
                !slow.is_finished(),
                "the busy volume's unpublish returned before its bound"
            );
            let took = slow.await.unwrap();
            assert!(
                took < Duration::from_secs(25),
                "unpublish of a busy volume took {took:?}"
            );
            assert!(plugin.servers().is_empty());
            let mut buf = [0u8; 4];
            assert!(std::os::unix::fs::FileExt::read_at(&held, &mut buf, 0).is_err());
            drop(held);
            println!("unpublish of a busy writable volume took {took:?}");

            // Read-only when the access mode says so, even for a dataset.
            publish(
                &ch,
                publish_req(&t, &attrs, Some(common::WRITE), Some(capability(ROX, ""))),
            )
            .await
            .unwrap();
            assert!(std::fs::write(t.join("nope.txt"), b"x").is_err());
            unpublish(&ch, &t).await.unwrap();
        });
    });
}

#[test]
fn token_rotation_by_republish() {
    in_namespace("token_rotation_by_republish", || {
        let rt = runtime();
        let hub = rt
            .block_on(LocalHub::start_temp_with(true, |c| {
                c.tokens = vec![
                    token_spec("local", "hf_first", false),
                    token_spec("local", "hf_second", false),
                    token_spec("other", "hf_other", false),
                    token_spec("demo", "hf_demo_write", true),
                ];
            }))
            .unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        let plugin = Plugin::start(root.path(), &ep, "a");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let t = target(root.path(), "pod-r", "data");
            let attrs = [("sourceType", "dataset"), ("sourceId", "demo/tiny-dataset")];
            let cap = || Some(capability(ROX, ""));
            publish(&ch, publish_req(&t, &attrs, Some("hf_first"), cap()))
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            let files = plugin.token_files();
            assert_eq!(files.len(), 1);
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600);
            }
            assert_eq!(std::fs::read_to_string(&files[0]).unwrap(), "hf_first");
            let servers = plugin.servers();

            // kubelet's republish with the rotated token of the same account: same source mount,
            // the token file rewritten.
            publish(&ch, publish_req(&t, &attrs, Some("hf_second"), cap()))
                .await
                .unwrap();
            assert_eq!(plugin.servers(), servers);
            assert_eq!(std::fs::read_to_string(&files[0]).unwrap(), "hf_second");
            assert!(!plugin.log().contains("hf_second"), "the token leaked into the log");

            // A token of another account: the running pod keeps its mount (and the token it had);
            // a new pod with that token gets a source of its own.
            publish(&ch, publish_req(&t, &attrs, Some("hf_other"), cap()))
                .await
                .unwrap();
            assert_eq!(plugin.servers(), servers);
            assert_eq!(std::fs::read_to_string(&files[0]).unwrap(), "hf_second");
            assert!(plugin.log().contains("another account"), "{}", plugin.log());
            let t2 = target(root.path(), "pod-r2", "data");
            publish(&ch, publish_req(&t2, &attrs, Some("hf_other"), cap()))
                .await
                .unwrap();
            assert_eq!(plugin.servers().len(), 2);
            assert_eq!(distinct_devs(), 2);
            assert!(read_bounded(&t2.join("README.md")).is_ok());
            unpublish(&ch, &t2).await.unwrap();
            assert_eq!(plugin.servers(), servers);

            // The branch moves on the Hub: kubelet's republish keeps the pod on the commit it
            // started with; a new pod gets the new commit.
            let c = common::client();
            let repo = common::Repo::dataset("demo/tiny-dataset");
            common::commit_ok(
                &c,
                &ep,
                "hf_demo_write",
                &repo,
                &[
                    common::header_line("new file", None),
                    common::utf8_line("new.txt", "new\n"),
                ],
            )
            .await;
            publish(&ch, publish_req(&t, &attrs, Some("hf_second"), cap()))
                .await
                .unwrap();
            assert_eq!(plugin.servers(), servers);
            assert!(!t.join("new.txt").exists(), "the running pod's view changed under it");
            publish(&ch, publish_req(&t2, &attrs, Some("hf_second"), cap()))
                .await
                .unwrap();
            assert_eq!(read_bounded(&t2.join("new.txt")).unwrap(), b"new\n");
            assert_eq!(distinct_devs(), 2);
            unpublish(&ch, &t2).await.unwrap();
            unpublish(&ch, &t).await.unwrap();
            assert!(plugin.token_files().is_empty());
        });
    });
}

#[test]
fn plugin_restart_adopts_and_a_dead_server_is_detached() {
    in_namespace("plugin_restart_adopts_and_a_dead_server_is_detached", || {
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        let mut plugin = Plugin::start(root.path(), &ep, "a");
        let a = target(root.path(), "pod-a", "w");
        let b = target(root.path(), "pod-b", "w");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            for t in [&a, &b] {
                publish(&ch, publish_req(t, &model_attrs(), None, Some(capability(ROX, ""))))
                    .await
                    .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            }
        });
        // A third volume whose only target goes while the plugin is down: an orphan to sweep.
        let c = target(root.path(), "pod-c", "d");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let attrs = [("sourceType", "dataset"), ("sourceId", "demo/tiny-dataset")];
            publish(&ch, publish_req(&c, &attrs, None, Some(capability(ROX, ""))))
                .await
                .unwrap();
        });
        let c_pids = plugin.servers();
        // A fourth whose server dies while the plugin is down: its target must be detached.
        let d = target(root.path(), "pod-d", "d");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let attrs = [
                ("sourceType", "dataset"),
                ("sourceId", "demo/tiny-dataset"),
                ("cacheSize", "1G"),
            ];
            publish(&ch, publish_req(&d, &attrs, None, Some(capability(ROX, ""))))
                .await
                .unwrap();
        });
        let d_pid = *plugin.servers().iter().find(|p| !c_pids.contains(p)).unwrap();
        let mut servers = c_pids;
        assert_eq!(servers.len(), 2);
        // kill -9 of the plugin: pods keep their volumes.
        plugin.kill9();
        hubfs::csi::fdpass::unmount(&c, true).unwrap();
        // SAFETY: a signal to a server this test's plugin started.
        unsafe { libc::kill(d_pid as i32, libc::SIGKILL) };
        let start = Instant::now();
        while hubfs::csi::state::proc_start(d_pid).is_some_and(|(_, z)| !z) {
            assert!(start.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(is_mounted(&d));
        assert!(read_bounded(&b.join("config.json")).is_ok());
        assert!(read_bounded(&a.join("config.json")).is_ok());
        assert!(Path::new(&format!("/proc/{}", servers[0])).exists());

        let plugin = Plugin::start(root.path(), &ep, "b");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            assert!(plugin.log().contains("adopted"), "{}", plugin.log());
            // The orphan was stopped, the dead one's target detached, the used source kept.
            assert!(!is_mounted(&d), "{:?}", hubfs_mounts());
            let now = plugin.servers();
            assert_eq!(now.len(), 1, "{}", plugin.log());
            servers.retain(|p| now.contains(p));
            assert_eq!(now, servers);
            assert_eq!(distinct_devs(), 1, "{:?}", hubfs_mounts());
            unpublish(&ch, &a).await.unwrap();
            assert!(read_bounded(&b.join("config.json")).is_ok());
            unpublish(&ch, &b).await.unwrap();
            assert!(hubfs_mounts().is_empty(), "{:?}", hubfs_mounts());
            assert!(plugin.servers().is_empty());

            // A server killed under its pod: unpublish detaches without hanging.
            publish(&ch, publish_req(&a, &model_attrs(), None, Some(capability(ROX, ""))))
                .await
                .unwrap();
            let pid = plugin.servers()[0];
            // SAFETY: a signal to the server this test's plugin started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let start = Instant::now();
            while Path::new(&format!("/proc/{pid}/stat")).exists()
                && hubfs::csi::state::proc_start(pid).is_some_and(|(_, z)| !z)
            {
                assert!(start.elapsed() < Duration::from_secs(10));
                std::thread::sleep(Duration::from_millis(20));
            }
            let e = read_bounded(&a.join("config.json")).expect_err("a dead server's mount fails");
            // ENOTCONN, or ECONNABORTED for a request the abort caught in flight.
            assert!(
                matches!(e.raw_os_error(), Some(libc::ENOTCONN) | Some(libc::ECONNABORTED)),
                "{e}"
            );
            let start = Instant::now();
            unpublish(&ch, &a).await.unwrap();
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "unpublish took {:?}",
                start.elapsed()
            );
            assert!(hubfs_mounts().iter().all(|(m, _)| m != &a), "{:?}", hubfs_mounts());
            assert!(!a.exists());
        });
    });
}

/// The figure of docs/KUBERNETES.md: N pods on one node reading the same file cost the Hub the
/// file's bytes once. HUBFS_CSI_FIGURE_MIB sets the size (default 32 MiB), HUBFS_CSI_FIGURE_PODS
/// the pod count (default 4).
#[test]
fn n_pods_cost_the_hub_one_copy() {
    in_namespace("n_pods_cost_the_hub_one_copy", || {
        let mib: usize = std::env::var("HUBFS_CSI_FIGURE_MIB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32);
        let pods: usize = std::env::var("HUBFS_CSI_FIGURE_PODS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4);
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(false)).unwrap();
        let ep = hub.endpoint().to_string();
        let data = common::bytes(mib << 20, 7);
        rt.block_on(async {
            let c = common::client();
            let repo = common::Repo::model("fig/big");
            common::create_repo_ok(&c, &ep, common::WRITE, &repo, false).await;
            let oid = common::lfs_upload_basic(&c, &ep, common::WRITE, &repo, &data).await;
            common::commit_ok(
                &c,
                &ep,
                common::WRITE,
                &repo,
                &[
                    common::header_line("big file", None),
                    common::lfs_line("big.bin", &oid, data.len() as u64),
                ],
            )
            .await;
        });
        let root = tempfile::tempdir().unwrap();
        let plugin = Plugin::start(root.path(), &ep, "a");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let attrs = [("sourceId", "fig/big")];
            let targets: Vec<PathBuf> = (0..pods)
                .map(|i| target(root.path(), &format!("pod-{i}"), "w"))
                .collect();
            for t in &targets {
                publish(
                    &ch,
                    publish_req(t, &attrs, Some(common::WRITE), Some(capability(ROX, ""))),
                )
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            }
            assert_eq!(distinct_devs(), 1);
            reset_stats(&ep).await;
            // Every pod reads the whole file at once.
            let start = Instant::now();
            let want = common::sha256_hex(&data);
            let readers: Vec<_> = targets
                .iter()
                .map(|t| {
                    let p = t.join("big.bin");
                    std::thread::spawn(move || sha256_of(&p))
                })
                .collect();
            for r in readers {
                assert_eq!(r.join().unwrap(), want, "a pod read other bytes");
            }
            let took = start.elapsed();
            let bytes = hub_bytes(&hub);
            let ratio = bytes as f64 / data.len() as f64;
            println!(
                "figure: {pods} pods on one node read the same {mib} MiB file at once: the Hub sent {bytes} bytes \
                 = {ratio:.3}x the file ({:.1} s)",
                took.as_secs_f64()
            );
            assert!(ratio < 1.1, "the Hub sent {ratio:.3}x the file");
            for t in &targets {
                unpublish(&ch, t).await.unwrap();
            }
            assert!(hubfs_mounts().is_empty());
        });
    });
}

/// Bucket volumes: `sourceType: bucket` becomes `hf://buckets/NS/NAME[/PREFIX]`; read-only by
/// access mode, writable otherwise, the write committed (a bucket batch) by unpublish.
#[test]
fn bucket_volumes_read_write_and_prefixes() {
    in_namespace("bucket_volumes_read_write_and_prefixes", || {
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        let plugin = Plugin::start(root.path(), &ep, "a");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let bucket = [("sourceType", "bucket"), ("sourceId", "demo/scratch-bucket")];
            let r = target(root.path(), "pod-b1", "b");
            publish(&ch, publish_req(&r, &bucket, None, Some(capability(ROX, ""))))
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            assert_eq!(
                read_bounded(&r.join("hello.txt")).unwrap(),
                b"Hello from the hubfs demo bucket!\n"
            );
            assert!(std::fs::write(r.join("x"), b"x").is_err(), "read-only by access mode");

            // A prefix of the bucket as the volume's root.
            let p = target(root.path(), "pod-b2", "b");
            let prefixed = [("sourceType", "bucket"), ("sourceId", "demo/scratch-bucket/data")];
            publish(&ch, publish_req(&p, &prefixed, None, Some(capability(ROX, ""))))
                .await
                .unwrap();
            let csv = read_bounded(&p.join("numbers.csv")).unwrap();
            assert!(csv.starts_with(b"n,square\n"));
            unpublish(&ch, &p).await.unwrap();
            unpublish(&ch, &r).await.unwrap();

            // Writable with a read token: refused at publish.
            let e = publish(
                &ch,
                publish_req(&r, &bucket, Some(common::READ), Some(capability(RWO, ""))),
            )
            .await
            .expect_err("a read token on a writable bucket");
            assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

            // Writable: the write is in the bucket once unpublish returns.
            publish(
                &ch,
                publish_req(&r, &bucket, Some(common::WRITE), Some(capability(RWO, "3456"))),
            )
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            {
                use std::os::unix::fs::MetadataExt;
                assert_eq!(std::fs::metadata(&r).unwrap().gid(), 3456);
            }
            let body = b"bucket write from a pod\n".repeat(50);
            std::fs::write(r.join("from-pod.txt"), &body).unwrap();
            unpublish(&ch, &r).await.unwrap();
            assert!(hubfs_mounts().is_empty());
            let got = hub_file(&ep, "buckets/demo/scratch-bucket", "from-pod.txt").await;
            assert_eq!(got, body, "the bucket write was committed by unpublish");
        });
    });
}
