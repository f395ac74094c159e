//! Mount-pod mode against a real Kubernetes API: kube-apiserver and etcd built from the Go module
//! proxy (`ci/kube.sh build`), RBAC on, the plugin authenticated as its service account with
//! exactly the Role of examples/kubernetes/rbac.yaml (applied from that file). There is no kubelet:
//! the test plays it, as the API lets a kubelet, watching pods bound to its node, running each as
//! its container's command (`hubfs csi-sidecar`, as its runAsUser, in a PID namespace of its own,
//! its hostPath where the pod mounts it), reporting its phase in the pod's status, and finishing
//! the deletion of pods it stopped. Checked: one pod for two targets, created by the plugin as the
//! API stored it; the bytes through it; the pod left while a target remains and deleted after the
//! last unpublish; and the plugin's account refused what the Role does not grant.

mod common;

#[path = "csi_node/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::*;
use hubfs::local_hub::LocalHub;
use serde_json::{Value, json};

const ADMIN: &str = "admin-token";
const PLUGIN: &str = "plugin-token";
const NS: &str = "hubfs-csi";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// etcd and kube-apiserver, killed on drop.
struct Cluster {
    procs: Vec<Child>,
    api: String,
    ca: PathBuf,
    http: reqwest::Client,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

impl Cluster {
    fn start(bins: &Path, dir: &Path) -> Cluster {
        let run = |cmd: &mut Command, log: &str| {
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(log)).unwrap())
                .spawn()
                .unwrap()
        };
        let ok = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(dir.join("sa.key"))
            .arg("2048")
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "openssl genrsa");
        // Static tokens: the admin, and the plugin's service account (its name and groups as the
        // API gives a service account's token).
        std::fs::write(
            dir.join("tokens.csv"),
            format!(
                "{ADMIN},admin,admin,\"system:masters\"\n\
                 {PLUGIN},system:serviceaccount:{NS}:hubfs-csi-node,sa-1,\"system:serviceaccounts,system:serviceaccounts:{NS}\"\n"
            ),
        )
        .unwrap();
        let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd = run(
            Command::new(bins.join("etcd"))
                .arg("--data-dir")
                .arg(dir.join("etcd"))
                .args(["--listen-client-urls", &etcd_url, "--advertise-client-urls", &etcd_url])
                .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer_port}")])
                .args([
                    "--initial-advertise-peer-urls",
                    &format!("http://127.0.0.1:{peer_port}"),
                ])
                .args(["--initial-cluster", &format!("default=http://127.0.0.1:{peer_port}")]),
            "etcd.log",
        );
        let apiserver = run(
            Command::new(bins.join("kube-apiserver"))
                .args(["--etcd-servers", &etcd_url, "--secure-port", &api_port.to_string()])
                .args(["--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1"])
                .arg("--cert-dir")
                .arg(dir.join("certs"))
                .arg("--token-auth-file")
                .arg(dir.join("tokens.csv"))
                .args(["--authorization-mode", "RBAC"])
                .arg("--service-account-key-file")
                .arg(dir.join("sa.key"))
                .arg("--service-account-signing-key-file")
                .arg(dir.join("sa.key"))
                .args(["--service-account-issuer", "https://kubernetes.default.svc"])
                .args(["--service-cluster-ip-range", "10.0.0.0/24"]),
            "apiserver.log",
        );
        let ca = dir.join("certs/apiserver.crt");
        let api = format!("https://127.0.0.1:{api_port}");
        let mut cluster = Cluster {
            procs: vec![etcd, apiserver],
            api,
            ca: ca.clone(),
            http: reqwest::Client::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready in 90 s:\n{}",
                std::fs::read_to_string(dir.join("apiserver.log")).unwrap_or_default()
            );
            if let Ok(pem) = std::fs::read(&ca) {
                let certs = reqwest::Certificate::from_pem_bundle(&pem).unwrap_or_default();
                if !certs.is_empty() {
                    cluster.http = reqwest::Client::builder()
                        .tls_certs_only(certs)
                        .timeout(Duration::from_secs(10))
                        .build()
                        .unwrap();
                    if cluster.ready() {
                        return cluster;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn ready(&self) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let r = self
                .http
                .get(format!("{}/readyz", self.api))
                .bearer_auth(ADMIN)
                .send()
                .await;
            r.is_ok_and(|r| r.status().is_success())
        })
    }
}

/// One API call with `token`; (status, body).
async fn call(
    c: &reqwest::Client,
    api: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = c.request(method.clone(), format!("{api}{path}")).bearer_auth(token);
    if let Some(b) = body {
        let ct = if method == reqwest::Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        req = req.header("content-type", ct).body(b.to_string());
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Creates every object of a manifest (Namespace, ServiceAccount, Role, RoleBinding) as the admin.
async fn apply(c: &reqwest::Client, api: &str, manifest: &str) {
    for doc in serde_yaml::Deserializer::from_str(manifest) {
        let obj: Value = serde::Deserialize::deserialize(doc).unwrap();
        if obj.is_null() {
            continue;
        }
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or(NS);
        let path = match obj["kind"].as_str().unwrap() {
            "Namespace" => "/api/v1/namespaces".to_string(),
            "ServiceAccount" => format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            "Role" => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
            "RoleBinding" => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
            other => panic!("rbac.yaml has a {other} this test does not apply"),
        };
        let (st, body) = call(c, api, ADMIN, "POST", &path, Some(obj.clone())).await;
        assert!(st == 201, "creating {path}: {st} {body}");
    }
}

/// The test's kubelet for node `test-node`: runs the pods bound to it, reports their phase, and
/// completes the deletion of pods the plugin deleted.
async fn kubelet(c: reqwest::Client, api: String, logs: PathBuf, stop: Arc<std::sync::atomic::AtomicBool>) {
    let mut running: HashMap<String, (Child, Option<&'static str>)> = HashMap::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let (_, list) = call(&c, &api, ADMIN, "GET", &format!("/api/v1/namespaces/{NS}/pods"), None).await;
        for pod in list["items"].as_array().cloned().unwrap_or_default() {
            let name = pod["metadata"]["name"].as_str().unwrap().to_string();
            if pod["spec"]["nodeName"] != "test-node" {
                continue;
            }
            let path = format!("/api/v1/namespaces/{NS}/pods/{name}");
            if !pod["metadata"]["deletionTimestamp"].is_null() {
                if let Some((mut child, _)) = running.remove(&name) {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                let body = json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0});
                call(&c, &api, ADMIN, "DELETE", &path, Some(body)).await;
                continue;
            }
            let entry = running
                .entry(name.clone())
                .or_insert_with(|| (run_pod(&pod, logs.join(format!("{name}.log"))), None));
            let phase = match entry.0.try_wait().unwrap() {
                None => "Running",
                Some(s) if s.success() => "Succeeded",
                Some(_) => "Failed",
            };
            if entry.1 != Some(phase) {
                let patch = json!({"status": {"phase": phase}});
                let (st, body) = call(&c, &api, ADMIN, "PATCH", &format!("{path}/status"), Some(patch)).await;
                assert_eq!(st, 200, "status of {name}: {body}");
                entry.1 = Some(phase);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (_, (mut child, _)) in running {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn binaries() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var("HUBFS_KUBE_DIR").unwrap_or_else(|_| "/var/cache/hubfs-kube".into()));
    if dir.join("kube-apiserver").exists() && dir.join("etcd").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none() && std::env::var_os("HUBFS_REQUIRE_KUBE").is_none(),
        "CI must build kube-apiserver and etcd first (ci/kube.sh build)"
    );
    eprintln!("skipped: kube-apiserver and etcd are not built (ci/kube.sh build)");
    None
}

#[test]
fn mount_pods_through_a_real_api_server_with_the_example_rbac() {
    let Some(bins) = binaries() else {
        return;
    };
    in_namespace("mount_pods_through_a_real_api_server_with_the_example_rbac", || {
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let ep = hub.endpoint().to_string();
        let root = pod_tree();
        let kdir = root.path().join("kube");
        std::fs::create_dir_all(&kdir).unwrap();
        let cluster = Cluster::start(&bins, &kdir);
        let (c, api) = (cluster.http.clone(), cluster.api.clone());
        let rbac =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/kubernetes/rbac.yaml")).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        rt.block_on(async {
            apply(&c, &api, &rbac).await;
            // The controller-manager's part: every namespace has a `default` service account,
            // which the API's admission requires of a pod that names none.
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
            let (st, body) = call(
                &c,
                &api,
                ADMIN,
                "POST",
                &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
                Some(sa),
            )
            .await;
            assert_eq!(st, 201, "{body}");
            // The Role grants pods, nothing else.
            let (st, _) = call(
                &c,
                &api,
                PLUGIN,
                "GET",
                &format!("/api/v1/namespaces/{NS}/secrets"),
                None,
            )
            .await;
            assert_eq!(st, 403, "the plugin's account may read secrets");
            let (st, _) = call(&c, &api, PLUGIN, "GET", "/api/v1/namespaces/default/pods/x", None).await;
            assert_eq!(st, 403, "the plugin's account reaches pods of another namespace");
        });
        let _kubelet = rt.spawn(kubelet(c.clone(), api.clone(), root.path().to_path_buf(), stop.clone()));
        let token_file = kdir.join("plugin.token");
        std::fs::write(&token_file, PLUGIN).unwrap();
        let extra = [
            "--mount-pod-image",
            "registry.example/hubfs:test",
            "--kube-api",
            api.as_str(),
            "--kube-token-file",
            token_file.to_str().unwrap(),
            "--kube-ca-file",
            cluster.ca.to_str().unwrap(),
        ];
        let plugin = Plugin::start_contained_with(root.path(), &ep, "a", &extra);
        let (a, b) = (
            target(root.path(), "pod-a", "weights"),
            target(root.path(), "pod-b", "weights"),
        );
        let want = rt.block_on(hub_file(&ep, "demo/tiny-model", "model.safetensors"));
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            for t in [&a, &b] {
                publish(&ch, publish_req(t, &model_attrs(), None, Some(capability(ROX, ""))))
                    .await
                    .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            }
            let (_, list) = call(&c, &api, ADMIN, "GET", &format!("/api/v1/namespaces/{NS}/pods"), None).await;
            let pods: Vec<Value> = list["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["metadata"]["labels"]["hubfs.csi.huggingface.co/mount-pod"] == "true")
                .cloned()
                .collect();
            assert_eq!(pods.len(), 1, "one mount pod for one source");
            let pod = &pods[0];
            assert_eq!(pod["spec"]["nodeName"], "test-node");
            assert_eq!(pod["status"]["phase"], "Running");
            let name = pod["metadata"]["name"].as_str().unwrap().to_string();
            let got = read_bounded(&a.join("model.safetensors")).unwrap();
            assert_eq!(common::sha256_hex(&got), common::sha256_hex(&want));

            unpublish(&ch, &a).await.unwrap();
            let path = format!("/api/v1/namespaces/{NS}/pods/{name}");
            assert_eq!(
                call(&c, &api, ADMIN, "GET", &path, None).await.0,
                200,
                "a target is left: the pod stays"
            );
            assert!(!read_bounded(&b.join("config.json")).unwrap().is_empty());
            unpublish(&ch, &b).await.unwrap();
            assert!(hubfs_mounts().is_empty(), "{:?}", hubfs_mounts());
            let deadline = Instant::now() + Duration::from_secs(20);
            while call(&c, &api, ADMIN, "GET", &path, None).await.0 != 404 {
                assert!(
                    Instant::now() < deadline,
                    "the mount pod was not deleted\n{}",
                    plugin.log()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(!plugin.log().contains(PLUGIN), "the API token in the plugin's log");
    });
}
