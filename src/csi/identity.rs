//! The CSI Identity service: the driver's name, and no plugin capability (no controller service,
//! no topology): hubfs volumes need no provisioning and exist on every node alike.

use super::proto::{GetPluginCapabilitiesResponse, GetPluginInfoResponse};

/// The driver name the CSIDriver object and the PVs' `driver:` field use.
pub const DRIVER_NAME: &str = "hubfs.csi.huggingface.co";

pub fn plugin_info() -> GetPluginInfoResponse {
    GetPluginInfoResponse {
        name: DRIVER_NAME.to_string(),
        vendor_version: env!("CARGO_PKG_VERSION").to_string(),
        manifest: Default::default(),
    }
}

pub fn capabilities() -> GetPluginCapabilitiesResponse {
    GetPluginCapabilitiesResponse::default()
}
