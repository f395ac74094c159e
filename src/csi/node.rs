//! The CSI Node service: capabilities, node info, and publish / unpublish checked the way the
//! spec asks (INVALID_ARGUMENT for a malformed request, before anything is mounted).

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use tonic::Status;

use super::Plugin;
use super::proto::*;
use super::sources::Republish;

pub fn capabilities() -> NodeGetCapabilitiesResponse {
    NodeGetCapabilitiesResponse {
        capabilities: vec![NodeServiceCapability {
            rpc: Some(NodeRpc {
                r#type: NODE_RPC_VOLUME_MOUNT_GROUP,
            }),
        }],
    }
}

/// An absolute path without `..`, as kubelet sends; anything else is refused before use.
fn target_path(volume_id: &str, target: &str) -> Result<PathBuf, Status> {
    if volume_id.is_empty() {
        return Err(Status::invalid_argument("volume_id is required"));
    }
    if target.is_empty() {
        return Err(Status::invalid_argument("target_path is required"));
    }
    let p = Path::new(target);
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(Status::invalid_argument(format!(
            "target_path {target:?} must be absolute and without '..'"
        )));
    }
    let p: PathBuf = p.components().collect();
    // mountinfo shows real paths: resolve symlinks in the parent (kubelet's own directory, safe to
    // stat), never in the target itself, which may be a mount whose server hangs.
    match (p.parent().map(Path::canonicalize), p.file_name()) {
        (Some(Ok(parent)), Some(name)) => Ok(parent.join(name)),
        _ => Ok(p),
    }
}

pub async fn publish(p: Arc<Plugin>, req: NodePublishVolumeRequest) -> Result<NodePublishVolumeResponse, Status> {
    let target = target_path(&req.volume_id, &req.target_path)?;
    if req.volume_capability.is_none() {
        return Err(Status::invalid_argument("volume_capability is required"));
    }
    let mut spec = super::volume::parse(&req.volume_context, req.volume_capability.as_ref(), req.readonly)
        .map_err(Status::invalid_argument)?;
    spec.settings.shared_cache =
        super::volume::shared_cache(spec.settings.shared_cache.take(), p.default_shared_cache.as_deref());
    let token = super::volume::token(&spec, &req.secrets).map_err(Status::invalid_argument)?;
    let mode = super::sidecar::mount_mode(&req.volume_context).map_err(Status::invalid_argument)?;
    tracing::info!(volume = %req.volume_id, target = %target.display(), source = %spec.display(),
        read_only = spec.read_only, "NodePublishVolume");
    // A pod's own sidecar serves its volume: a republish only passes on a rotated token.
    let (p2, t2, tok2) = (p.clone(), target.clone(), token.clone());
    let sidecar_volume = tokio::task::spawn_blocking(move || p2.sidecars.republish(&t2, tok2.as_deref()))
        .await
        .map_err(|e| Status::internal(format!("republish task: {e}")))?;
    if sidecar_volume {
        return Ok(NodePublishVolumeResponse {});
    }
    // Kubelet's periodic republish: the pod keeps its mount (a read-only volume keeps the commit it
    // started with even if its branch moved); only a rotated token is taken in.
    let (p2, t2, tok2) = (p.clone(), target.clone(), token.clone());
    let found = tokio::task::spawn_blocking(move || p2.sources.republish(&t2, tok2.as_deref()))
        .await
        .map_err(|e| Status::internal(format!("republish task: {e}")))?;
    match found {
        Republish::Done => return Ok(NodePublishVolumeResponse {}),
        Republish::TokenChanged { key, identity } => {
            let now = super::hub::identity(&spec, token.as_deref(), &p.default_endpoint).await?;
            if now == identity {
                let p2 = p.clone();
                tokio::task::spawn_blocking(move || p2.sources.rewrite_token(&key, token.as_deref()))
                    .await
                    .map_err(|e| Status::internal(format!("token task: {e}")))?
                    .map_err(Status::from)?;
                tracing::info!(target = %target.display(), "token rotated");
            } else {
                // Moving a running pod's volume to another mount would pull it from under the
                // pod's open files: the pod keeps the mount it has; new pods get the new account's.
                tracing::warn!(target = %target.display(), "the volume's token now belongs to another \
                    account; the running pod keeps its mount (and the old token) until it is restarted");
            }
            return Ok(NodePublishVolumeResponse {});
        }
        Republish::NotPublished => {}
    }
    let checked = super::hub::check(&spec, token.as_deref(), &p.default_endpoint)
        .await
        .inspect_err(|e| tracing::warn!(target = %target.display(), code = ?e.code(), error = e.message(), "NodePublishVolume refused"))?;
    let endpoint = super::hub::endpoint_of(&spec, &p.default_endpoint);
    if let Some(emptydir) = super::sidecar::Sidecars::choose(&target, mode).await? {
        let name = super::sidecar::Sidecars::name_of(&target);
        // Paths as the sidecar sees them are set there; the token travels with the descriptor.
        let config = super::sources::serve_config(
            &spec,
            &checked,
            &endpoint,
            &target,
            PathBuf::new(),
            PathBuf::new(),
            PathBuf::new(),
        );
        let t = target.clone();
        mount(&target, move || {
            p.sidecars.publish(&t, &emptydir, config, token.as_deref())
        })
        .await?;
        super::metrics::published(&req.volume_id, &target, &format!("sidecar-{name}"));
        return Ok(NodePublishVolumeResponse {});
    }
    let in_pod = match mode {
        super::sidecar::MountMode::Pod if !p.sources.has_mount_pods() => {
            return Err(Status::failed_precondition(
                "mountMode pod: the plugin runs without --mount-pod-image",
            ));
        }
        super::sidecar::MountMode::Pod | super::sidecar::MountMode::Auto => p.sources.has_mount_pods(),
        _ => false,
    };
    if in_pod {
        spec.settings.mount_pod = Some(spec.pod_resources.clone());
    }
    let key = super::sources::Sources::key(&spec, &checked, &endpoint);
    let t = target.clone();
    mount(&target, move || {
        p.sources.publish(&t, &spec, &checked, &endpoint, token.as_deref())
    })
    .await?;
    super::metrics::published(&req.volume_id, &target, &key);
    Ok(NodePublishVolumeResponse {})
}

/// Runs a publish's mount syscalls off the runtime; a failure is logged and becomes its status.
async fn mount(
    target: &Path,
    f: impl FnOnce() -> Result<(), super::sources::SourceError> + Send + 'static,
) -> Result<(), Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("publish task: {e}")))?
        .map_err(|e| {
            tracing::warn!(target = %target.display(), error = %e, "NodePublishVolume failed");
            Status::from(e)
        })
}

pub async fn unpublish(p: Arc<Plugin>, req: NodeUnpublishVolumeRequest) -> Result<NodeUnpublishVolumeResponse, Status> {
    let target = target_path(&req.volume_id, &req.target_path)?;
    tracing::info!(volume = %req.volume_id, target = %target.display(), "NodeUnpublishVolume");
    let t = target.clone();
    tokio::task::spawn_blocking(move || {
        p.sidecars.unpublish(&t);
        p.sources.unpublish(&t)
    })
    .await
    .map_err(|e| Status::internal(format!("unpublish task: {e}")))?
    .map_err(Status::from)?;
    super::metrics::unpublished(&target);
    Ok(NodeUnpublishVolumeResponse {})
}
