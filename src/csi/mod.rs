//! `hubfs csi-node`: a Kubernetes CSI node plugin. Kubelet asks it over a unix socket to publish a
//! volume (a model, dataset, space or storage bucket) at a pod's target directory;
//! it bind-mounts a per-node *source* mount shared by every pod asking for the same thing, served
//! by a `hubfs csi-serve` process that received the `/dev/fuse` descriptor the plugin mounted, or,
//! for a pod that has the hubfs sidecar, mounts the target itself and hands it to that sidecar.
//!
//! - [`authority`]: lets grpc-core clients (Python) in despite the socket path they send as `:authority`;
//! - [`proto`]: the CSI messages (hand-written from the spec's field numbers, no protoc);
//! - [`grpc`]: the three services routed by hand over tonic;
//! - [`identity`], [`node`]: the RPCs; [`volume`]: volume attributes; [`hub`]: checks against the Hub;
//! - [`sources`]: the source mounts, shared, started, stopped and adopted after a restart;
//! - [`state`]: the state directory and token files; [`mountinfo`] (shared with `hubfs unmount`): what is mounted;
//! - [`metrics`]: the plugin's `/metrics`, its servers' merged in;
//! - [`fdpass`]: /dev/fuse, mount(2), binds and SCM_RIGHTS; [`server`]: the serving process.
//! - [`sidecar`]: sidecar mode, the plugin's half (a pod's volume mounted at its target and handed
//!   to the pod's own `hubfs csi-sidecar`, [`sidecar_serve`]), so volumes outlive plugin restarts;
//!   [`mount_pod`]: mount-pod mode, a source served by a pod the plugin creates ([`kube`]: the API).
//! - [`webhook`] (`hubfs csi-webhook`): the admission webhook adding the sidecar of sidecar mode to
//!   pods with hubfs volumes; [`webhook_patch`]: its decision and JSON Patch, pure.
//!
//! docs/KUBERNETES.md says how to deploy it and what was tested.
//!
//! [`authority`]: crate::csi::authority
//! [`proto`]: crate::csi::proto
//! [`grpc`]: crate::csi::grpc
//! [`identity`]: crate::csi::identity
//! [`node`]: crate::csi::node
//! [`volume`]: crate::csi::volume
//! [`hub`]: crate::csi::hub
//! [`sources`]: crate::csi::sources
//! [`state`]: crate::csi::state
//! [`mountinfo`]: crate::csi::mountinfo
//! [`metrics`]: crate::csi::metrics
//! [`fdpass`]: crate::csi::fdpass
//! [`server`]: crate::csi::server
//! [`sidecar`]: crate::csi::sidecar
//! [`sidecar_serve`]: crate::csi::sidecar_serve
//! [`mount_pod`]: crate::csi::mount_pod
//! [`kube`]: crate::csi::kube
//! [`webhook`]: crate::csi::webhook
//! [`webhook_patch`]: crate::csi::webhook_patch

pub mod authority;
pub mod fdpass;
pub mod grpc;
pub mod hub;
pub mod identity;
pub mod kube;
pub mod metrics;
pub mod mount_pod;
pub use crate::process::mountinfo;
pub mod node;
pub mod proto;
pub mod server;
pub mod sidecar;
pub mod sidecar_serve;
pub mod sources;
pub mod state;
pub mod volume;
pub mod webhook;
pub mod webhook_patch;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use sha2::Digest;

/// `hubfs csi-node` options.
#[derive(Args, Debug)]
pub struct CsiNodeArgs {
    /// The gRPC socket kubelet talks to, `unix:///csi/csi.sock`.
    #[arg(long)]
    pub endpoint: String,
    /// This node's name (NodeGetInfo), usually the Kubernetes node name.
    #[arg(long)]
    pub node_id: String,
    /// Where source mounts and their records live; must survive a plugin restart (a hostPath).
    #[arg(long, default_value = "/var/lib/hubfs-csi")]
    pub state_dir: PathBuf,
    /// Root of the sources' disk caches (default: STATE_DIR/cache).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Hub endpoint of volumes that name none (default: $HF_ENDPOINT, else <https://huggingface.co>).
    #[arg(long)]
    pub hub_endpoint: Option<String>,
    /// Serve Prometheus metrics, the plugin's and its source mounts', at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Shared cache tier of volumes that set no `sharedCache` attribute, e.g. s3://bucket/prefix,
    /// gs://… or az://… (credentials and endpoint from the plugin's environment, which its source
    /// mounts inherit; see docs/KUBERNETES.md).
    #[arg(long, value_name = "URL")]
    pub shared_cache: Option<String>,
    /// Mount-pod mode: serve source mounts from pods of this image on the node (created in
    /// --mount-pod-namespace through the Kubernetes API) instead of from the plugin's container,
    /// so that they outlive its restarts; see docs/KUBERNETES.md.
    #[arg(long, value_name = "IMAGE")]
    pub mount_pod_image: Option<String>,
    /// Namespace of the mount pods.
    #[arg(long, default_value = "hubfs-csi")]
    pub mount_pod_namespace: String,
    #[command(flatten)]
    pub kube: kube::KubeArgs,
}

/// What the RPC handlers share.
pub struct Plugin {
    pub node_id: String,
    pub default_endpoint: String,
    /// `--shared-cache`: the shared tier of volumes that name none.
    pub default_shared_cache: Option<String>,
    pub sources: sources::Sources,
    /// Volumes served by their pods' sidecars.
    pub sidecars: sidecar::Sidecars,
}

impl Plugin {
    pub fn probe(&self) -> proto::ProbeResponse {
        let ready = self.sources.state().root.join("sources").is_dir();
        proto::ProbeResponse {
            ready: Some(proto::BoolValue { value: ready }),
        }
    }

    pub fn node_info(&self) -> proto::NodeGetInfoResponse {
        proto::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
        }
    }
}

/// First 16 hex digits of the sha256 of `b`: names of source directories and token files.
pub fn short_hash(b: &[u8]) -> String {
    hex::encode(&sha2::Sha256::digest(b)[..8])
}

fn socket_path(endpoint: &str) -> anyhow::Result<PathBuf> {
    let p = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    if !p.starts_with('/') {
        anyhow::bail!("--endpoint {endpoint:?}: use unix:///absolute/path/csi.sock");
    }
    Ok(PathBuf::from(p))
}

/// `hubfs csi-node`.
pub fn run(args: CsiNodeArgs) -> anyhow::Result<()> {
    let socket = socket_path(&args.endpoint)?;
    if args.node_id.trim().is_empty() {
        anyhow::bail!("--node-id must not be empty");
    }
    let state =
        state::StateDir::open(&args.state_dir).with_context(|| format!("state dir {}", args.state_dir.display()))?;
    let cache = args.cache_dir.clone().unwrap_or_else(|| state.root.join("cache"));
    if let Some(addr) = args.metrics_addr {
        let render = metrics::render(state.root.join("sources"));
        crate::metrics::server::serve(addr, Some(Box::new(render)))?;
    }
    let default_endpoint = args
        .hub_endpoint
        .clone()
        .unwrap_or_else(|| crate::hub_client::HubClientConfig::from_env().endpoint)
        .trim_end_matches('/')
        .to_string();
    let pods = match args.mount_pod_image.as_deref().map(str::trim) {
        None => None,
        Some("") => anyhow::bail!("--mount-pod-image must not be empty"),
        Some(image) => Some(mount_pod::MountPods::new(
            &args.kube,
            image.to_string(),
            args.mount_pod_namespace.clone(),
            args.node_id.clone(),
            &state.root,
        )?),
    };
    let plugin = Arc::new(Plugin {
        node_id: args.node_id.clone(),
        default_endpoint,
        default_shared_cache: args.shared_cache.clone(),
        sidecars: sidecar::Sidecars::new(state.clone())?,
        sources: sources::Sources::new(state, cache, pods)?,
    });
    // Before serving: kubelet's first calls after a restart find the old mounts known.
    plugin.sources.adopt();
    plugin.sidecars.adopt();
    let rt = crate::process::signals::runtime()?;
    rt.block_on(async move {
        let mut signals = crate::process::signals::StopSignals::new()?;
        tracing::info!(socket = %socket.display(), node = %args.node_id, "CSI node plugin listening");
        println!("listening on {}", socket.display());
        use std::io::Write;
        std::io::stdout().flush()?;
        // Source mounts are left running on exit: pods keep their volumes, the next plugin adopts them.
        grpc::serve(plugin, &socket, async move { signals.recv().await }).await
    })
}

/// `hubfs csi-sidecar` (the container the webhook adds to pods).
pub fn run_sidecar(args: sidecar_serve::CsiSidecarArgs) -> anyhow::Result<()> {
    sidecar_serve::run(args)
}

/// `hubfs csi-serve` (started by the plugin, not by people).
pub fn run_serve() -> anyhow::Result<()> {
    server::run()
}
