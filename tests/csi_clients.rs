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
