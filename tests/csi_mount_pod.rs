//! Mount-pod mode of the CSI driver: the plugin (in PID and mount namespaces of its own, as in its
//! container) asks a Kubernetes API for a pod on its node that serves a source mount, hands it the
//! descriptor, reuses it for later publishes of the same source, and deletes it after the last
//! unpublish. There is no kubelet here: a fake API server (the pod objects' documented shape)
//! "runs" each pod it is given the way kubelet would, as the pod's command (`hubfs csi-sidecar`)
//! in a PID namespace of its own as the pod's uid, with its hostPath volume where the pod mounts
//! it, and reports its phase from the process. Checked: one pod for two targets of one source, the
//! pod's spec (node, resources from volume attributes, security context, restart policy), every
//! byte right while the plugin's whole namespace is killed mid-read, a new plugin adopts the
//! source, the pod is deleted after the last unpublish, a rotated token reaches the pod, and a
//! writable volume's write is on the Hub when its unpublish returns.

mod common;

#[path = "csi_node/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::*;
use hubfs::local_hub::LocalHub;
use serde_json::{Value, json};

/// The fake cluster: pods created, running (as processes), deleted.
struct Cluster {
    running: Mutex<HashMap<String, Child>>,
    created: Mutex<Vec<Value>>,
    deleted: Mutex<Vec<String>>,
    logs: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, mut c) in self.running.lock().unwrap().drain() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn status(code: u16, reason: &str, message: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                      "code": code, "message": message});
    (axum::http::StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response()
}

async fn fake_api(cluster: Arc<Cluster>) -> String {
    use axum::extract::{Path as P, State};
    use axum::response::IntoResponse;
    async fn create(
        State(c): State<Arc<Cluster>>,
        P(ns): P<String>,
        axum::Json(pod): axum::Json<Value>,
    ) -> axum::response::Response {
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        if ns != "hubfs-csi" || name.is_empty() {
            return status(422, "Invalid", format!("pod {name:?} in {ns:?}"));
        }
        if c.running.lock().unwrap().contains_key(&name) {
            return status(409, "AlreadyExists", format!("pods {name:?} already exists"));
        }
        let child = run_pod(&pod, c.logs.join(format!("{name}.log")));
        c.running.lock().unwrap().insert(name, child);
        c.created.lock().unwrap().push(pod.clone());
        (axum::http::StatusCode::CREATED, axum::Json(pod)).into_response()
    }
    async fn get(State(c): State<Arc<Cluster>>, P((_, name)): P<(String, String)>) -> axum::response::Response {
        let mut running = c.running.lock().unwrap();
        let Some(child) = running.get_mut(&name) else {
            return status(404, "NotFound", format!("pods {name:?} not found"));
        };
        let phase = match child.try_wait().unwrap() {
            None => "Running",
            Some(s) if s.success() => "Succeeded",
            Some(_) => "Failed",
        };
        axum::Json(json!({"kind": "Pod", "metadata": {"name": name}, "status": {"phase": phase}})).into_response()
    }
    async fn delete(State(c): State<Arc<Cluster>>, P((_, name)): P<(String, String)>) -> axum::response::Response {
        let Some(mut child) = c.running.lock().unwrap().remove(&name) else {
            return status(404, "NotFound", format!("pods {name:?} not found"));
        };
        let _ = child.kill();
        let _ = child.wait();
        c.deleted.lock().unwrap().push(name.clone());
        axum::Json(json!({"kind": "Pod", "metadata": {"name": name}})).into_response()
    }
    let app = axum::Router::new()
        .route("/api/v1/namespaces/{ns}/pods", axum::routing::post(create))
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}",
            axum::routing::get(get).delete(delete),
        )
        .with_state(cluster);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[test]
fn mount_pods_serve_sources_through_plugin_restarts_and_go_with_the_last_unpublish() {
    in_namespace(
        "mount_pods_serve_sources_through_plugin_restarts_and_go_with_the_last_unpublish",
        || {
            let rt = runtime();
            let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
            let ep = hub.endpoint().to_string();
            let root = pod_tree();
            let cluster = Arc::new(Cluster {
                running: Mutex::default(),
                created: Mutex::default(),
                deleted: Mutex::default(),
                logs: root.path().to_path_buf(),
            });
            let api = rt.block_on(fake_api(cluster.clone()));
            let no_token = root.path().join("no-service-account-token");
            let extra = [
                "--mount-pod-image",
                "registry.example/hubfs:test",
                "--kube-api",
                api.as_str(),
                "--kube-token-file",
                no_token.to_str().unwrap(),
            ];
            let mut plugin = Plugin::start_contained_with(root.path(), &ep, "a", &extra);
            let (a, b) = (
                target(root.path(), "pod-a", "weights"),
                target(root.path(), "pod-b", "weights"),
            );
            let mut attrs = model_attrs();
            attrs.extend([("mountPodMemory", "256Mi"), ("mountPodCpuLimit", "2")]);
            let want = rt.block_on(hub_file(&ep, "demo/tiny-model", "model.safetensors"));
            rt.block_on(async {
                let ch = connect(&plugin.sock).await;
                for t in [&a, &b] {
                    publish(&ch, publish_req(t, &attrs, None, Some(capability(ROX, ""))))
                        .await
                        .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
                }
            });
            let created = cluster.created.lock().unwrap().clone();
            assert_eq!(created.len(), 1, "one mount pod for one source");
            let pod = &created[0];
            let name = pod["metadata"]["name"].as_str().unwrap().to_string();
            assert_eq!(pod["spec"]["nodeName"], "test-node");
            assert_eq!(pod["spec"]["restartPolicy"], "Never");
            let c = &pod["spec"]["containers"][0];
            assert_eq!(c["image"], "registry.example/hubfs:test");
            assert_eq!(c["resources"]["requests"]["memory"], "256Mi");
            assert_eq!(c["resources"]["limits"]["cpu"], "2");
            assert_eq!(c["securityContext"]["runAsNonRoot"], true);
            assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
            assert_eq!(distinct_devs(), 1, "{:?}", hubfs_mounts());
            assert_eq!(hubfs_mounts().len(), 3, "the source and two binds");
            let got = read_bounded(&b.join("model.safetensors")).unwrap();
            assert_eq!(common::sha256_hex(&got), common::sha256_hex(&want));

            // The plugin's container restarts while a pod reads: the mount pod serves on.
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
            let reader = read_slowly(&a.join("model.safetensors"));
            std::thread::sleep(Duration::from_millis(150));
            plugin.kill9();
            assert!(!reader.is_finished(), "the read ended before the plugin was killed");
            let got = reader.join().unwrap().expect("the read across the plugin's death");
            assert_eq!(common::sha256_hex(&got), common::sha256_hex(&want), "every byte right");

            let plugin = Plugin::start_contained_with(root.path(), &ep, "b", &extra);
            assert!(
                plugin.log().contains("adopted a running source mount"),
                "{}",
                plugin.log()
            );
            let w = target(root.path(), "pod-w", "data");
            let body = b"written through a mount pod\n".repeat(40);
            rt.block_on(async {
                let ch = connect(&plugin.sock).await;
                publish(&ch, publish_req(&a, &attrs, None, Some(capability(ROX, ""))))
                    .await
                    .unwrap();
                unpublish(&ch, &a).await.unwrap();
                assert!(
                    cluster.deleted.lock().unwrap().is_empty(),
                    "a target is left: the pod stays"
                );
                unpublish(&ch, &b).await.unwrap();
                assert_eq!(
                    *cluster.deleted.lock().unwrap(),
                    vec![name.clone()],
                    "deleted with the last unpublish"
                );
                assert!(hubfs_mounts().is_empty(), "{:?}", hubfs_mounts());

                // A writable dataset: its write is committed before the unpublish returns.
                let attrs = [("sourceType", "dataset"), ("sourceId", "demo/tiny-dataset")];
                publish(
                    &ch,
                    publish_req(&w, &attrs, Some(common::WRITE), Some(capability(RWO, ""))),
                )
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
                // Kubelet's republish with a rotated token of the same account reaches the pod
                // (it cannot read the plugin's token files); then back to the write token.
                let pod_w = cluster.created.lock().unwrap()[1]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let pod_log = root.path().join(format!("{pod_w}.log"));
                for (token, times) in [(common::READ, 1), (common::WRITE, 2)] {
                    publish(&ch, publish_req(&w, &attrs, Some(token), Some(capability(RWO, ""))))
                        .await
                        .unwrap();
                    let taken = || {
                        std::fs::read_to_string(&pod_log)
                            .unwrap_or_default()
                            .matches("took a rotated token")
                            .count()
                    };
                    assert_eq!(taken(), times, "{}", plugin.log());
                }
                std::fs::write(w.join("from-pod.txt"), &body).unwrap();
                unpublish(&ch, &w).await.unwrap();
                let got = hub_file(&ep, "datasets/demo/tiny-dataset", "from-pod.txt").await;
                assert_eq!(got, body, "the write was committed by unpublish");
            });
            assert_eq!(cluster.created.lock().unwrap().len(), 2);
            assert_eq!(cluster.deleted.lock().unwrap().len(), 2);
            assert!(cluster.running.lock().unwrap().is_empty());
            // The pods' logs never show a token.
            for e in std::fs::read_dir(root.path()).unwrap().flatten() {
                if e.path().extension().is_some_and(|x| x == "log") {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    for t in [common::WRITE, common::READ] {
                        assert!(!text.contains(t), "a token in {}", e.path().display());
                    }
                }
            }
        },
    );
}
