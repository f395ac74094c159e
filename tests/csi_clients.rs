//! `hubfs csi-node` driven the way other clients drive it: volume attributes written for the
//! closest peer (`sourceType: repo`), and a stock Python `grpcio` client with default options,
//! which names the socket path as the HTTP/2 `:authority`. Same harness as tests/csi_node.rs.

mod common;

#[path = "csi_node/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::process::Command;

use harness::*;
use hubfs::csi::proto::*;
use hubfs::local_hub::LocalHub;
use prost::Message;

#[test]
fn peer_repo_attributes_publish_models_and_datasets() {
    in_namespace("peer_repo_attributes_publish_models_and_datasets", || {
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        let plugin = Plugin::start(root.path(), &ep, "a");
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let m = target(root.path(), "pod-m", "weights");
            let model = [("sourceType", "repo"), ("sourceId", "demo/tiny-model")];
            publish(&ch, publish_req(&m, &model, None, Some(capability(ROX, ""))))
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            let want = hub_file(&ep, "demo/tiny-model", "config.json").await;
            assert_eq!(read_bounded(&m.join("config.json")).unwrap(), want);
            assert!(std::fs::write(m.join("x"), b"x").is_err(), "a model stays read-only");

            let d = target(root.path(), "pod-d", "data");
            let dataset = [("sourceType", "repo"), ("sourceId", "datasets/demo/tiny-dataset")];
            publish(
                &ch,
                publish_req(&d, &dataset, Some(common::WRITE), Some(capability(RWO, ""))),
            )
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            let body = b"from a peer-shaped volume\n";
            std::fs::write(d.join("peer.txt"), body).unwrap();
            unpublish(&ch, &d).await.unwrap();
            let got = hub_file(&ep, "datasets/demo/tiny-dataset", "peer.txt").await;
            assert_eq!(got, body, "the dataset was mounted writable and the write committed");

            // A space id with no such space is looked up as a space (not found), not refused.
            let s = target(root.path(), "pod-s", "app");
            let space = [("sourceType", "repo"), ("sourceId", "spaces/demo/none")];
            let e = publish(&ch, publish_req(&s, &space, None, Some(capability(ROX, ""))))
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
            unpublish(&ch, &m).await.unwrap();
            assert!(hubfs_mounts().is_empty(), "{:?}", hubfs_mounts());
        });
    });
}

/// Calls the plugin with Python's grpcio, default channel options, raw bytes in and out.
const GRPCIO_CLIENT: &str = r#"
import sys, grpc
ch = grpc.insecure_channel("unix://" + sys.argv[1])
def call(method, req=b""):
    return ch.unary_unary(method, request_serializer=None, response_deserializer=None)(req, timeout=30)
print("info", call("/csi.v1.Identity/GetPluginInfo").hex())
print("probe", call("/csi.v1.Identity/Probe").hex())
print("node", call("/csi.v1.Node/NodeGetInfo").hex())
try:
    call("/csi.v1.Controller/CreateVolume")
    print("create OK")
except grpc.RpcError as e:
    print("create", e.code().name)
"#;

#[test]
fn python_grpcio_with_default_options_gets_answers() {
    let py = common::pyenv::python();
    let rt = runtime();
    let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
    let root = tempfile::tempdir().unwrap();
    let plugin = Plugin::start(root.path(), hub.endpoint(), "a");
    let out = Command::new(&py)
        .args(["-c", GRPCIO_CLIENT])
        .arg(&plugin.sock)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        plugin.log()
    );
    let field = |name: &str| -> Vec<u8> {
        let line = text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).unwrap();
        hex::decode(line.trim()).unwrap()
    };
    let info = GetPluginInfoResponse::decode(field("info").as_slice()).unwrap();
    assert_eq!(info.name, "hubfs.csi.huggingface.co");
    let probe = ProbeResponse::decode(field("probe").as_slice()).unwrap();
    assert_eq!(probe.ready.map(|b| b.value), Some(true));
    let node = NodeGetInfoResponse::decode(field("node").as_slice()).unwrap();
    assert_eq!(node.node_id, "test-node");
    // A method the plugin does not serve is an answer too (a status), not a reset stream.
    assert!(text.contains("create UNIMPLEMENTED"), "{text}");
}

/// The plugin's `/metrics` body.
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// Checks the text with the official Prometheus client's parser; the (name, labels) of every sample.
fn parsed(text: &str) -> Vec<(String, std::collections::BTreeMap<String, String>)> {
    use std::io::Write;
    let script = "import sys, json\nfrom prometheus_client.parser import text_string_to_metric_families as f\n\
                  print(json.dumps([[s.name, s.labels] for m in f(sys.stdin.read()) for s in m.samples]))";
    let mut child = Command::new(common::pyenv::python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}\n{text}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn plugin_metrics_show_each_volume_and_drop_it_after_unpublish() {
    in_namespace("plugin_metrics_show_each_volume_and_drop_it_after_unpublish", || {
        let rt = runtime();
        let hub = rt.block_on(LocalHub::start_temp(true)).unwrap();
        let ep = hub.endpoint().to_string();
        let root = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let plugin = Plugin::start_with(root.path(), &ep, "a", &["--metrics-addr", &addr]);
        rt.block_on(async {
            let ch = connect(&plugin.sock).await;
            let m = target(root.path(), "pod-m", "weights");
            let d = target(root.path(), "pod-d", "data");
            let model = [("sourceType", "model"), ("sourceId", "demo/tiny-model")];
            let dataset = [("sourceType", "dataset"), ("sourceId", "demo/tiny-dataset")];
            let mut rm = publish_req(&m, &model, None, Some(capability(ROX, "")));
            rm.volume_id = "vol-model".into();
            let mut rd = publish_req(&d, &dataset, Some(common::WRITE), Some(capability(RWO, "")));
            rd.volume_id = "vol-data".into();
            publish(&ch, rm)
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            publish(&ch, rd)
                .await
                .unwrap_or_else(|e| panic!("{e:?}\n{}", plugin.log()));
            assert!(!read_bounded(&m.join("config.json")).unwrap().is_empty());

            let text = tokio::task::spawn_blocking(move || scrape(port)).await.unwrap();
            let samples = parsed(&text);
            let volumes: Vec<_> = samples
                .iter()
                .filter(|(n, _)| n == "hubfs_csi_volume_info")
                .map(|(_, l)| (l["volume"].clone(), l["source_mount"].clone()))
                .collect();
            assert_eq!(volumes.len(), 2, "{volumes:?}\n{text}");
            // Each volume's source mount serves its own series, labelled with the source.
            for (volume, source) in &volumes {
                let has = |name: &str| {
                    samples
                        .iter()
                        .any(|(n, l)| n == name && l.get("source_mount") == Some(source))
                };
                assert!(has("hubfs_mount_info"), "no mount info for {volume}\n{text}");
                assert!(has("hubfs_hub_requests_total"), "no Hub traffic for {volume}\n{text}");
            }
            assert!(
                samples.iter().any(|(n, l)| n == "hubfs_csi_calls_total"
                    && l["method"] == "NodePublishVolume"
                    && l["code"] == "ok")
            );
            for secret in [common::WRITE, root.path().to_str().unwrap()] {
                assert!(!text.contains(secret), "{secret} in the plugin's metrics");
            }

            unpublish(&ch, &m).await.unwrap();
            unpublish(&ch, &d).await.unwrap();
            let text = tokio::task::spawn_blocking(move || scrape(port)).await.unwrap();
            let samples = parsed(&text);
            assert!(
                !samples
                    .iter()
                    .any(|(n, l)| n == "hubfs_csi_volume_info" || l.contains_key("source_mount")),
                "series left after unpublish:\n{text}"
            );
        });
    });
}
