//! The CSI messages this plugin speaks, written by hand from the CSI spec (csi.proto, v1.13) with
//! its field numbers, so that building needs no protoc. Only what Identity, Node and an empty
//! Controller use is here; unknown fields sent by a newer kubelet are skipped by prost.
//!
//! `NodePublishVolumeRequest` carries secrets: its `Debug` prints their keys only.

use std::collections::HashMap;

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPluginInfoRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPluginInfoResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub vendor_version: String,
    #[prost(map = "string, string", tag = "3")]
    pub manifest: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPluginCapabilitiesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPluginCapabilitiesResponse {
    #[prost(message, repeated, tag = "1")]
    pub capabilities: Vec<PluginCapability>,
}

/// `PluginCapability { oneof type { Service service = 1; VolumeExpansion volume_expansion = 2; } }`;
/// only `service` is used.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginCapability {
    #[prost(message, optional, tag = "1")]
    pub service: Option<PluginService>,
}

/// `PluginCapability.Service`: `Type type = 1` (1 = CONTROLLER_SERVICE, 2 = VOLUME_ACCESSIBILITY_CONSTRAINTS).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginService {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProbeRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProbeResponse {
    /// google.protobuf.BoolValue
    #[prost(message, optional, tag = "1")]
    pub ready: Option<BoolValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BoolValue {
    #[prost(bool, tag = "1")]
    pub value: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ControllerGetCapabilitiesRequest {}

/// Always empty here: `repeated ControllerServiceCapability capabilities = 1`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ControllerGetCapabilitiesResponse {
    #[prost(message, repeated, tag = "1")]
    pub capabilities: Vec<Empty>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetCapabilitiesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetCapabilitiesResponse {
    #[prost(message, repeated, tag = "1")]
    pub capabilities: Vec<NodeServiceCapability>,
}

/// `oneof type { RPC rpc = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeServiceCapability {
    #[prost(message, optional, tag = "1")]
    pub rpc: Option<NodeRpc>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeRpc {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
}

/// `NodeServiceCapability.RPC.Type.VOLUME_MOUNT_GROUP`.
pub const NODE_RPC_VOLUME_MOUNT_GROUP: i32 = 6;

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetInfoRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeGetInfoResponse {
    #[prost(string, tag = "1")]
    pub node_id: String,
    #[prost(int64, tag = "2")]
    pub max_volumes_per_node: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct VolumeCapability {
    #[prost(message, optional, tag = "1")]
    pub block: Option<Empty>,
    #[prost(message, optional, tag = "2")]
    pub mount: Option<MountVolume>,
    #[prost(message, optional, tag = "3")]
    pub access_mode: Option<AccessMode>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MountVolume {
    #[prost(string, tag = "1")]
    pub fs_type: String,
    #[prost(string, repeated, tag = "2")]
    pub mount_flags: Vec<String>,
    #[prost(string, tag = "3")]
    pub volume_mount_group: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AccessMode {
    #[prost(int32, tag = "1")]
    pub mode: i32,
}

/// `VolumeCapability.AccessMode.Mode` values that only read.
pub const MODE_SINGLE_NODE_READER_ONLY: i32 = 2;
pub const MODE_MULTI_NODE_READER_ONLY: i32 = 3;

#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct NodePublishVolumeRequest {
    #[prost(string, tag = "1")]
    pub volume_id: String,
    #[prost(map = "string, string", tag = "2")]
    pub publish_context: HashMap<String, String>,
    #[prost(string, tag = "3")]
    pub staging_target_path: String,
    #[prost(string, tag = "4")]
    pub target_path: String,
    #[prost(message, optional, tag = "5")]
    pub volume_capability: Option<VolumeCapability>,
    #[prost(bool, tag = "6")]
    pub readonly: bool,
    #[prost(map = "string, string", tag = "7")]
    pub secrets: HashMap<String, String>,
    #[prost(map = "string, string", tag = "8")]
    pub volume_context: HashMap<String, String>,
}

impl std::fmt::Debug for NodePublishVolumeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys: Vec<&String> = self.secrets.keys().collect();
        keys.sort();
        f.debug_struct("NodePublishVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("target_path", &self.target_path)
            .field("volume_capability", &self.volume_capability)
            .field("readonly", &self.readonly)
            .field("secret_keys", &keys)
            .field("volume_context", &self.volume_context)
            .finish()
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodePublishVolumeResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnpublishVolumeRequest {
    #[prost(string, tag = "1")]
    pub volume_id: String,
    #[prost(string, tag = "2")]
    pub target_path: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnpublishVolumeResponse {}

/// Stage/unstage/stats/expand requests: decoded only to answer; their fields are not needed.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ignored {}
