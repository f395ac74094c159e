//! Sidecar mode of the CSI driver, as a node runs it: the plugin in PID and mount namespaces of its
//! own (its container), each pod's `hubfs csi-sidecar` in another PID namespace as uid 65534, with
//! kubelet-shaped paths and the pod's emptyDir, against the local Hub. Checked: a volume keeps
//! serving every byte right while the plugin's whole namespace is killed mid-read (a container
//! restart), a new plugin leaves it alone and keeps publishing and unpublishing, a volume whose
//! handoff was pending when the plugin died is mounted again and served, a writable volume's
//! write reaches the Hub after unpublish, a pod without the sidecar still gets a shared source
//! mount, and a sidecar stops cleanly on SIGTERM.

mod common;

#[path = "csi_node/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::time::{Duration, Instant};

use harness::*;
use hubfs::local_hub::LocalHub;

fn drop_caches() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

#[test]
fn sidecar_volumes_outlive_the_plugin_and_its_restarts() {
    in_namespace("sidecar_volumes_outlive_the_plugin_and_its_restarts", || {
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let ep = hub.endpoint().to_string();
        let root = pod_tree();
        let mut plugin = Plugin::start_contained(root.path(), &ep, "a");
        let a = target(root.path(), "pod-a", "weights");
        let empty_a = sidecar_emptydir(root.path(), "pod-a");
        let want = rt.block_on(hub_file(&ep, "demo/tiny-model", "model.safetensors"));
        let req_a = publish_req(&a, &model_attrs(), None, Some(capability(ROX, "")));
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            publish(&ch, req_a.clone())
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
        });
        // The target is the FUSE mount itself: no source mount of the plugin.
        assert_eq!(hubfs_mounts().len(), 1, "{:?}", hubfs_mounts());
        let dev_a = hubfs_mounts()[0].1.clone();
        let mut sidecar_a = Sidecar::start(&empty_a, root.path().join("sidecar-a.log"));
        let got = read_bounded(&a.join("model.safetensors"))
            .unwrap_or_else(|e| panic!("{e}\n{}\n{}", plugin.log(), sidecar_a.log()));
        assert_eq!(common::sha256_hex(&got), common::sha256_hex(&want));

        // A pod whose sidecar has not started yet when the plugin dies: its handoff was pending.
        let p = target(root.path(), "pod-p", "weights");
        let empty_p = sidecar_emptydir(root.path(), "pod-p");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            publish(&ch, publish_req(&p, &model_attrs(), None, Some(capability(ROX, ""))))
                .await
                .unwrap();
        });

        // A container restart: the plugin's whole PID namespace dies while a pod process reads.
        drop_caches();
        let reader = read_slowly(&a.join("model.safetensors"));
        std::thread::sleep(Duration::from_millis(150));
        plugin.kill9();
        assert!(!reader.is_finished(), "the read ended before the plugin was killed");
        let got = reader.join().unwrap().expect("the read across the plugin's death");
        assert_eq!(common::sha256_hex(&got), common::sha256_hex(&want), "every byte right");
        assert!(sidecar_a.alive(), "the pod's sidecar outlives the plugin");

        // A new plugin: kubelet's republish finds the volume as it was. The pending one lost its
        // descriptor with the old plugin: it is mounted again and served once its sidecar starts.
        let plugin = Plugin::start_contained(root.path(), &ep, "b");
        let mut sidecar_p = Sidecar::start(&empty_p, root.path().join("sidecar-p.log"));
        let got = read_bounded(&p.join("config.json"))
            .unwrap_or_else(|e| panic!("{e}\n{}\n{}", plugin.log(), sidecar_p.log()));
        assert!(!got.is_empty());
        assert!(plugin.log().contains("its handoff was pending"), "{}", plugin.log());
        rt.block_on(async { unpublish(&connect(&plugin.sock).await, &p).await.unwrap() });
        let w = target(root.path(), "pod-w", "data");
        let empty_w = sidecar_emptydir(root.path(), "pod-w");
        let mut sidecar_w = Sidecar::start(&empty_w, root.path().join("sidecar-w.log"));
        let body = b"written from a pod with a sidecar\n".repeat(50);
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            publish(&ch, req_a.clone())
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            assert_eq!(
                hubfs_mounts(),
                vec![(a.clone(), dev_a.clone())],
                "republish changed nothing"
            );
            assert!(!read_bounded(&a.join("config.json")).unwrap().is_empty());

            // A writable volume in sidecar mode: its write reaches the Hub once it is unpublished
            // (the sidecar commits what the ended session left).
            let attrs = [("sourceType", "dataset"), ("sourceId", "demo/tiny-dataset")];
            publish(
                &ch,
                publish_req(&w, &attrs, Some(common::WRITE), Some(capability(RWO, ""))),
            )
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            std::fs::write(w.join("from-pod.txt"), &body)
                .unwrap_or_else(|e| panic!("{e}\n{}\n{}", plugin.log(), sidecar_w.log()));
            unpublish(&ch, &w).await.unwrap();
            assert!(!w.exists(), "the target directory is removed");
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let r = common::client()
                    .get(format!("{ep}/datasets/demo/tiny-dataset/resolve/main/from-pod.txt"))
                    .bearer_auth(common::WRITE)
                    .send()
                    .await
                    .unwrap();
                if r.status().is_success() {
                    assert_eq!(
                        r.bytes().await.unwrap().as_ref(),
                        &body[..],
                        "the Hub has the pod's bytes"
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the write never reached the Hub\n{}",
                    sidecar_w.log()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }

            // A pod without the sidecar: a shared source mount, as before.
            let b = target(root.path(), "pod-b", "weights");
            publish(&ch, publish_req(&b, &model_attrs(), None, Some(capability(ROX, ""))))
                .await
                .unwrap();
            assert_eq!(
                plugin.servers().len(),
                1,
                "a source server for the pod without a sidecar"
            );
            let got = read_bounded(&b.join("model.safetensors")).unwrap();
            assert_eq!(common::sha256_hex(&got), common::sha256_hex(&want));
            unpublish(&ch, &b).await.unwrap();

            // Unpublish leaves the sidecar alone: it serves the pod until the pod ends.
            unpublish(&ch, &a).await.unwrap();
            assert!(hubfs_mounts().is_empty(), "{:?}", hubfs_mounts());
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(sidecar_a.alive(), "unpublish stopped the sidecar\n{}", sidecar_a.log());
        for (name, s) in [("a", &mut sidecar_a), ("w", &mut sidecar_w), ("p", &mut sidecar_p)] {
            let st = s
                .stop(Duration::from_secs(20))
                .unwrap_or_else(|| panic!("sidecar {name} ignored SIGTERM"));
            assert!(st.success(), "sidecar {name} exited with {st}\n{}", s.log());
        }
        assert!(
            !empty_w.join("volumes").read_dir().unwrap().any(|_| true),
            "the unpublished volume's directory is removed"
        );
    });
}

#[test]
fn mount_mode_sidecar_without_the_sidecar_is_refused_and_shared_ignores_it() {
    in_namespace(
        "mount_mode_sidecar_without_the_sidecar_is_refused_and_shared_ignores_it",
        || {
            let rt = runtime();
            let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
            let ep = hub.endpoint().to_string();
            let root = tempfile::tempdir().unwrap();
            let plugin = Plugin::start(root.path(), &ep, "a");
            rt.block_on(async {
                let ch = connect(&plugin.sock).await;
                let t = target(root.path(), "pod-x", "weights");
                let mut attrs = model_attrs();
                attrs.push(("mountMode", "sideways"));
                let e = publish(&ch, publish_req(&t, &attrs, None, Some(capability(ROX, ""))))
                    .await
                    .unwrap_err();
                assert_eq!(e.code(), tonic::Code::InvalidArgument);
                assert!(e.message().contains("mountMode"), "{}", e.message());

                // `shared` ignores an emptyDir that is there.
                sidecar_emptydir(root.path(), "pod-x");
                let mut attrs = model_attrs();
                attrs.push(("mountMode", "shared"));
                publish(&ch, publish_req(&t, &attrs, None, Some(capability(ROX, ""))))
                    .await
                    .unwrap();
                assert_eq!(plugin.servers().len(), 1);
                unpublish(&ch, &t).await.unwrap();
            });
        },
    );
}

#[test]
fn a_rotated_token_reaches_the_sidecar_and_no_log_shows_it() {
    in_namespace("a_rotated_token_reaches_the_sidecar_and_no_log_shows_it", || {
        use std::os::unix::fs::PermissionsExt;
        let rt = runtime();
        let hub = rt
            .block_on(LocalHub::start_temp_with(true, |c| {
                c.tokens = vec![
                    token_spec("local", "hf_first", false),
                    token_spec("local", "hf_second", false),
                ];
            }))
            .unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let plugin = Plugin::start(root.path(), &ep, "a");
        let t = target(root.path(), "pod-t", "weights");
        let mut sidecar = Sidecar::start(&sidecar_emptydir(root.path(), "pod-t"), root.path().join("sidecar.log"));
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            publish(
                &ch,
                publish_req(&t, &model_attrs(), Some("hf_first"), Some(capability(ROX, ""))),
            )
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            assert!(!read_bounded(&t.join("config.json")).unwrap().is_empty());
            // Kubelet's republish with the Secret's new token.
            publish(
                &ch,
                publish_req(&t, &model_attrs(), Some("hf_second"), Some(capability(ROX, ""))),
            )
            .await
            .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !sidecar.log().contains("took a rotated token") {
                assert!(
                    Instant::now() < deadline,
                    "the sidecar never took the token\n{}",
                    sidecar.log()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(plugin.log().contains("token rotated (sidecar)"));
            assert!(!read_bounded(&t.join("tokenizer.json")).unwrap().is_empty());
            unpublish(&ch, &t).await.unwrap();
        });
        for log in [plugin.log(), sidecar.log()] {
            assert!(
                !log.contains("hf_first") && !log.contains("hf_second"),
                "a token in a log:\n{log}"
            );
        }
        assert!(sidecar.stop(Duration::from_secs(20)).is_some_and(|s| s.success()));
    });
}
