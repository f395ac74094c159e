//! `hubfs csi-webhook` as the API server drives it: the built binary in a process of its own,
//! HTTPS with a certificate made here (trusted through a throw-away CA), a fake Kubernetes API
//! (plain http, PVC and PV objects shaped like real ones) reached through the HUBFS_KUBE_* overrides,
//! and real AdmissionReview v1 requests. Every returned patch is applied to the pod and the
//! resulting pod is checked.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

const DRIVER: &str = "hubfs.csi.huggingface.co";
const TOKEN: &str = "test-token-never-logged";

/// A CA and what it signs.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl Ca {
    fn new() -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "hubfs test CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// A server certificate for 127.0.0.1: (cert PEM, key PEM, cert DER).
    fn leaf(&self, name: &str) -> (String, String, Vec<u8>) {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }
}

/// The fake API's objects, in the shape `kubectl get -o json` shows them.
fn pvc(name: &str, volume: Option<&str>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "ml", "uid": "3c7a9f4e-5d21-4b8e-9a0f-1e2d3c4b5a69",
                     "resourceVersion": "48213", "creationTimestamp": "2025-01-07T10:12:31Z"},
        "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}},
                 "storageClassName": "", "volumeMode": "Filesystem", "volumeName": volume.unwrap_or("")},
        "status": match volume {
            Some(_) => json!({"phase": "Bound", "accessModes": ["ReadOnlyMany"], "capacity": {"storage": "1Gi"}}),
            None => json!({"phase": "Pending"}),
        },
    })
}

fn pv(name: &str, driver: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "uid": "9b1f0c2e-7a3d-4e5f-8b6a-0c1d2e3f4a5b", "resourceVersion": "48210"},
        "spec": {"accessModes": ["ReadOnlyMany"], "capacity": {"storage": "1Gi"},
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "", "volumeMode": "Filesystem",
                 "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "ml", "name": "weights"},
                 "csi": {"driver": driver, "volumeHandle": name, "readOnly": true,
                         "volumeAttributes": {"repo": "openai-community/gpt2"}}},
        "status": {"phase": "Bound"},
    })
}

fn not_found(what: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                        "message": format!("{what} not found")});
    (axum::http::StatusCode::NOT_FOUND, axum::Json(status)).into_response()
}

/// A fake Kubernetes API on plain http; records the Authorization headers it saw.
async fn fake_api() -> (String, Arc<Mutex<Vec<String>>>) {
    use axum::extract::Path as P;
    use axum::response::IntoResponse;
    let auth = Arc::new(Mutex::new(Vec::new()));
    let seen = auth.clone();
    let app = axum::Router::new()
        .route(
            "/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}",
            axum::routing::get(|P((ns, name)): P<(String, String)>| async move {
                match (ns.as_str(), name.as_str()) {
                    ("ml", "weights") => axum::Json(pvc("weights", Some("pv-gpt2"))).into_response(),
                    ("ml", "scratch") => axum::Json(pvc("scratch", Some("pv-ebs"))).into_response(),
                    ("ml", "pending") => axum::Json(pvc("pending", None)).into_response(),
                    ("ml", "slow") => {
                        tokio::time::sleep(Duration::from_secs(10)).await;
                        axum::Json(pvc("slow", Some("pv-gpt2"))).into_response()
                    }
                    _ => not_found(&format!("persistentvolumeclaims {name:?}")),
                }
            }),
        )
        .route(
            "/api/v1/persistentvolumes/{name}",
            axum::routing::get(|P(name): P<String>| async move {
                match name.as_str() {
                    "pv-gpt2" => axum::Json(pv("pv-gpt2", DRIVER)).into_response(),
                    "pv-ebs" => axum::Json(pv("pv-ebs", "ebs.csi.aws.com")).into_response(),
                    _ => not_found(&format!("persistentvolumes {name:?}")),
                }
            }),
        )
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let seen = seen.clone();
                async move {
                    let h = req.headers().get("authorization").and_then(|v| v.to_str().ok());
                    seen.lock().unwrap().push(h.unwrap_or("").to_string());
                    next.run(req).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), auth)
}

/// The webhook process; killed on drop.
struct Webhook {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
}

impl Webhook {
    fn start(ca: &Ca, api: &str) -> Webhook {
        let dir = tempfile::tempdir().unwrap();
        let (cert_pem, key_pem, _) = ca.leaf("webhook-1");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, cert_pem).unwrap();
        std::fs::write(&key, key_pem).unwrap();
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
        let log = dir.path().join("webhook.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_hubfs"))
            .args([
                "csi-webhook",
                "--listen",
                "127.0.0.1:0",
                "--sidecar-image",
                "ghcr.io/example/hubfs:test",
            ])
            .args(["--sidecar-memory-limit", "1Gi", "--cert-check-interval", "1"])
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .env("HUBFS_KUBE_API", api)
            .env("HUBFS_KUBE_TOKEN_FILE", dir.path().join("token"))
            .env_remove("HUBFS_KUBE_CA_FILE")
            .env("RUST_LOG", "hubfs=debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no `listening on` line: {}", std::fs::read_to_string(&log).unwrap()));
        let addr = line.strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}"));
        assert!(!addr.ends_with(":0"), "the real port is printed: {addr}");
        Webhook {
            child,
            url: format!("https://{addr}"),
            log,
            _dir: dir,
            cert,
            key,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client trusting only the test CA; a new one per call means a new connection and handshake.
fn client(ca: &Ca) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap()])
        .tls_info(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn review(uid: &str, kind: &str, operation: &str, pod: &Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": kind},
            "operation": operation,
            "namespace": "ml",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        }
    })
}

fn pod(volumes: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "trainer-7d9c5b-", "namespace": "ml", "labels": {"app": "trainer"}},
        "spec": {
            "containers": [{"name": "app", "image": "python:3.12",
                            "volumeMounts": [{"name": "model", "mountPath": "/model", "readOnly": true}]}],
            "volumes": volumes,
        }
    })
}

fn inline() -> Value {
    json!({"name": "model", "csi": {"driver": DRIVER, "readOnly": true,
           "volumeAttributes": {"repo": "openai-community/gpt2"}}})
}

fn claim(name: &str) -> Value {
    json!({"name": "model", "persistentVolumeClaim": {"claimName": name, "readOnly": true}})
}

/// Posts a review: the response AdmissionReview, and the pod with its patch applied (`None`
/// without a patch).
async fn admit(wh: &Webhook, ca: &Ca, uid: &str, kind: &str, op: &str, pod: &Value) -> (Value, Option<Value>) {
    let resp = client(ca)
        .post(format!("{}/mutate", wh.url))
        .json(&review(uid, kind, op, pod))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", wh.log());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(body["kind"], "AdmissionReview");
    assert_eq!(body["response"]["uid"], uid);
    assert_eq!(body["response"]["allowed"], true);
    let Some(patch) = body["response"]["patch"].as_str() else {
        assert!(body["response"].get("patchType").is_none());
        return (body, None);
    };
    assert_eq!(body["response"]["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch).unwrap();
    let ops: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut out = pod.clone();
    json_patch::patch(&mut out, &ops).unwrap();
    (body, Some(out))
}

fn assert_injected(pod: &Value) {
    let init = &pod["spec"]["initContainers"][0];
    assert_eq!(init["name"], "hubfs-sidecar");
    assert_eq!(init["image"], "ghcr.io/example/hubfs:test");
    assert_eq!(init["args"], json!(["csi-sidecar", "--socket-dir", "/hubfs-sidecar"]));
    assert_eq!(init["restartPolicy"], "Always");
    assert_eq!(init["securityContext"]["runAsUser"], 65534);
    assert_eq!(init["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        init["resources"],
        json!({"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}})
    );
    assert_eq!(
        init["volumeMounts"],
        json!([{"name": "hubfs-sidecar", "mountPath": "/hubfs-sidecar"}])
    );
    let vols = pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(vols.last().unwrap(), &json!({"name": "hubfs-sidecar", "emptyDir": {}}));
    assert_eq!(
        pod["metadata"]["annotations"]["hubfs.csi.huggingface.co/sidecar"],
        "injected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_mutated_over_https() {
    let ca = Ca::new();
    let (api, auth) = fake_api().await;
    let wh = Webhook::start(&ca, &api);

    let health = client(&ca).get(format!("{}/healthz", wh.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "ok");

    // Inline CSI volume: no API call needed.
    let p = pod(json!([inline()]));
    let (_, out) = admit(&wh, &ca, "u-inline", "Pod", "CREATE", &p).await;
    let out = out.unwrap_or_else(|| panic!("inline: no patch\n{}", wh.log()));
    assert_injected(&out);
    assert_eq!(out["spec"]["containers"], p["spec"]["containers"]);
    assert!(auth.lock().unwrap().is_empty(), "inline volumes need no look-up");

    // The patched pod, reviewed again (a reinvocation): nothing more.
    let (_, again) = admit(&wh, &ca, "u-again", "Pod", "CREATE", &out).await;
    assert!(again.is_none());

    // A PVC bound to a hubfs PV, beside one bound to another driver.
    let p = pod(json!([claim("scratch"), claim("weights")]));
    let (_, out) = admit(&wh, &ca, "u-pvc", "Pod", "CREATE", &p).await;
    assert_injected(&out.unwrap_or_else(|| panic!("pvc: no patch\n{}", wh.log())));
    let seen = auth.lock().unwrap().clone();
    assert!(
        !seen.is_empty() && seen.iter().all(|h| h == &format!("Bearer {TOKEN}")),
        "{seen:?}"
    );

    // Existing init containers run after the sidecar.
    let mut p = pod(json!([claim("weights")]));
    p["spec"]["initContainers"] = json!([{"name": "fetch", "image": "busybox"}, {"name": "warm", "image": "busybox"}]);
    let (_, out) = admit(&wh, &ca, "u-init", "Pod", "CREATE", &p).await;
    let out = out.unwrap();
    assert_injected(&out);
    let names: Vec<&str> = out["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hubfs-sidecar", "fetch", "warm"]);

    // No patch: unbound, missing or foreign claims, no hubfs volume, opted out, already there.
    let mut opted_out = pod(json!([inline()]));
    opted_out["metadata"]["annotations"] = json!({"hubfs.csi.huggingface.co/inject": "false"});
    let mut has_sidecar = pod(json!([inline()]));
    has_sidecar["spec"]["initContainers"] = json!([{"name": "hubfs-sidecar", "image": "x"}]);
    for (uid, p) in [
        ("u-pending", pod(json!([claim("pending")]))),
        ("u-missing", pod(json!([claim("nope")]))),
        ("u-foreign", pod(json!([claim("scratch")]))),
        ("u-none", pod(json!([{"name": "model", "emptyDir": {}}]))),
        ("u-optout", opted_out),
        ("u-has", has_sidecar),
    ] {
        let (body, out) = admit(&wh, &ca, uid, "Pod", "CREATE", &p).await;
        assert!(out.is_none(), "{uid}: {body}");
        assert!(body["response"].get("warnings").is_none(), "{uid}: {body}");
    }
    let log = wh.log();
    assert!(log.contains("\"pending\" is not bound yet"), "{log}");
    assert!(log.contains("\"nope\" could not be looked up"), "{log}");
    assert!(!log.contains(TOKEN), "the token is never logged");

    // A user volume named like the sidecar's: no patch, a warning.
    let p = pod(json!([inline(), {"name": "hubfs-sidecar", "emptyDir": {}}]));
    let (body, out) = admit(&wh, &ca, "u-clash", "Pod", "CREATE", &p).await;
    assert!(out.is_none());
    assert!(
        body["response"]["warnings"][0]
            .as_str()
            .unwrap()
            .contains("hubfs-sidecar"),
        "{body}"
    );

    // Only pod CREATEs.
    let (_, out) = admit(&wh, &ca, "u-update", "Pod", "UPDATE", &pod(json!([inline()]))).await;
    assert!(out.is_none());
    let (_, out) = admit(&wh, &ca, "u-svc", "Service", "CREATE", &pod(json!([inline()]))).await;
    assert!(out.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_api_means_no_sidecar_within_the_deadline() {
    let ca = Ca::new();
    let (api, _) = fake_api().await;
    let wh = Webhook::start(&ca, &api);
    let t = Instant::now();
    let (_, out) = admit(&wh, &ca, "u-slow", "Pod", "CREATE", &pod(json!([claim("slow")]))).await;
    assert!(out.is_none());
    let took = t.elapsed();
    assert!(took < Duration::from_secs(4), "answered after {took:?}");
    assert!(wh.log().contains("\"slow\" could not be looked up"), "{}", wh.log());

    // No API at all (a port nobody listens on): the same, quickly.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let wh = Webhook::start(&ca, &dead_url);
    let (_, out) = admit(&wh, &ca, "u-dead", "Pod", "CREATE", &pod(json!([claim("weights")]))).await;
    assert!(out.is_none());
    // Inline volumes still get it.
    let (_, out) = admit(&wh, &ca, "u-dead-inline", "Pod", "CREATE", &pod(json!([inline()]))).await;
    assert_injected(&out.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_without_a_patch() {
    let ca = Ca::new();
    let (api, _) = fake_api().await;
    let wh = Webhook::start(&ca, &api);
    let post = |body: reqwest::Body| client(&ca).post(format!("{}/mutate", wh.url)).body(body).send();

    let check = |resp: reqwest::Response, status: u16, needle: &'static str| async move {
        assert_eq!(resp.status(), status);
        let text = resp.text().await.unwrap();
        assert!(text.contains(needle), "{text:?}");
        assert_eq!(text.trim_end().lines().count(), 1, "one line: {text:?}");
        assert!(!text.contains("patch"), "{text:?}");
    };
    check(
        post(r#"{"apiVersion": "admission.k8s.io/v1", "#.into()).await.unwrap(),
        400,
        "malformed",
    )
    .await;

    let mut beta = review("u-beta", "Pod", "CREATE", &pod(json!([inline()])));
    beta["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let beta = serde_json::to_vec(&beta).unwrap();
    check(
        post(beta.into()).await.unwrap(),
        400,
        "only AdmissionReview admission.k8s.io/v1 is supported",
    )
    .await;

    let mut no_uid = review("x", "Pod", "CREATE", &pod(json!([inline()])));
    no_uid["request"].as_object_mut().unwrap().remove("uid");
    check(
        post(serde_json::to_vec(&no_uid).unwrap().into()).await.unwrap(),
        400,
        "no uid",
    )
    .await;

    // 4 MiB: with a length, and streamed without one.
    let big = vec![b' '; 4 << 20];
    check(post(big.into()).await.unwrap(), 413, "over").await;
    let chunks = (0..4).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1 << 20]));
    check(
        post(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
            .await
            .unwrap(),
        413,
        "over",
    )
    .await;

    // The server is still fine.
    let (_, out) = admit(&wh, &ca, "u-after", "Pod", "CREATE", &pod(json!([inline()]))).await;
    assert_injected(&out.unwrap());
}

async fn peer_certificate(wh: &Webhook, ca: &Ca) -> Vec<u8> {
    let resp = client(ca).get(format!("{}/healthz", wh.url)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let info = resp.extensions().get::<reqwest::tls::TlsInfo>().unwrap();
    info.peer_certificate().unwrap().to_vec()
}

async fn wait_for_certificate(wh: &Webhook, ca: &Ca, want: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while peer_certificate(wh, ca).await != want {
        assert!(Instant::now() < deadline, "new certificate not served\n{}", wh.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_to_new_connections() {
    let ca = Ca::new();
    let (api, _) = fake_api().await;
    let wh = Webhook::start(&ca, &api);
    let first = peer_certificate(&wh, &ca).await;

    let (cert, key, der) = ca.leaf("webhook-2");
    assert_ne!(der, first);
    write(&wh.key, &key);
    write(&wh.cert, &cert);
    wait_for_certificate(&wh, &ca, &der).await;
    assert!(wh.log().contains("TLS certificate reloaded"), "{}", wh.log());

    // A broken pair (key of another certificate, then garbage) is logged; the last good one stays.
    let (_, other_key, _) = ca.leaf("webhook-3");
    write(&wh.key, &other_key);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    write(&wh.cert, "not a certificate");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(peer_certificate(&wh, &ca).await, der);
    assert!(wh.log().contains("serving the previous one"), "{}", wh.log());

    // Secret rotation the kubelet way: both files replaced by a rename.
    let (cert, key, der) = ca.leaf("webhook-4");
    let dir = wh.cert.parent().unwrap();
    write(&dir.join("new.crt"), &cert);
    write(&dir.join("new.key"), &key);
    std::fs::rename(dir.join("new.key"), &wh.key).unwrap();
    std::fs::rename(dir.join("new.crt"), &wh.cert).unwrap();
    wait_for_certificate(&wh, &ca, &der).await;
    let (_, out) = admit(&wh, &ca, "u-rotated", "Pod", "CREATE", &pod(json!([inline()]))).await;
    assert_injected(&out.unwrap());
}
