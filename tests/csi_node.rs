//! `hubfs csi-node` driven the way kubelet drives it: a separate plugin process, gRPC over its
//! unix socket, kubelet-shaped target paths, against the local Hub. Each test re-runs itself under
//! `unshare -m` so that its mounts live in a mount namespace of their own (tests run as root).

mod common;

#[path = "csi_node/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::*;
use hubfs::csi::proto::*;
use hubfs::local_hub::LocalHub;
use tonic::Code;

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
            // The running server takes the rotated token (it polls its token file).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !plugin.server_logs().contains("the token file changed") {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the server did not pick up the rotated token:\n{}",
                    plugin.server_logs()
                );
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            assert!(
                !plugin.server_logs().contains("hf_second"),
                "the token leaked into a server log"
            );
            assert!(
                read_bounded(&t.join("README.md")).is_ok(),
                "reads go on after the rotation"
            );

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

/// A writable volume is published only with a token that may write to its repo: fine-grained
/// tokens scoped read-only, or to write another repo, are PERMISSION_DENIED at publish; one scoped
/// to write the repo gets a writable volume whose file reaches the Hub.
#[test]
fn writable_volumes_need_a_token_that_may_write_the_repo() {
    in_namespace("writable_volumes_need_a_token_that_may_write_the_repo", || {
        let rt = runtime();
        let scoped = |token: &str, scopes: &str| format!("demo:{token}:fineGrained:{scopes}").parse().unwrap();
        let hub = rt
            .block_on(LocalHub::start_temp_with(true, |c| {
                c.tokens = vec![
                    token_spec("demo", "hf_demo_write", true),
                    scoped("hf_fg_read", "dataset/demo/tiny-dataset=repo.content.read"),
                    scoped("hf_fg_other", "dataset/demo/other=repo.content.read+repo.write"),
                    scoped("hf_fg_write", "dataset/demo/tiny-dataset=repo.content.read+repo.write"),
                ];
            }))
            .unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        let plugin = Plugin::start(root.path(), &ep, "a");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let t = target(root.path(), "pod-fg", "data");
            let attrs = [("sourceType", "dataset"), ("sourceId", "demo/tiny-dataset")];
            let cap = || Some(capability(RWO, ""));
            for token in ["hf_fg_read", "hf_fg_other"] {
                let e = publish(&ch, publish_req(&t, &attrs, Some(token), cap()))
                    .await
                    .expect_err(token);
                assert_eq!(e.code(), Code::PermissionDenied, "{token}: {e:?}");
                assert!(e.message().contains("fine-grained"), "{token}: {e:?}");
                assert!(!e.message().contains(token), "the token leaked into {e:?}");
            }
            assert!(hubfs_mounts().is_empty());
            // Read-only, the read-scoped token is fine.
            let ro = target(root.path(), "pod-fg-ro", "data");
            publish(
                &ch,
                publish_req(&ro, &attrs, Some("hf_fg_read"), Some(capability(ROX, ""))),
            )
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            unpublish(&ch, &ro).await.unwrap();

            publish(&ch, publish_req(&t, &attrs, Some("hf_fg_write"), cap()))
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            std::fs::write(t.join("from-fine-grained.txt"), b"fine-grained\n").unwrap();
            unpublish(&ch, &t).await.unwrap();
            assert!(hubfs_mounts().is_empty());
            let got = common::client()
                .get(format!(
                    "{ep}/datasets/demo/tiny-dataset/resolve/main/from-fine-grained.txt"
                ))
                .bearer_auth("hf_demo_write")
                .send()
                .await
                .unwrap();
            assert_eq!(got.status(), reqwest::StatusCode::OK);
            assert_eq!(got.bytes().await.unwrap().as_ref(), b"fine-grained\n");
            assert!(!plugin.log().contains("hf_fg_"), "a token leaked into the log");
        });
    });
}
