//! `hubfs csi-webhook`: the mutating admission webhook of the CSI driver's sidecar mode. It adds a
//! native sidecar (`hubfs csi-sidecar`) to every pod created with a hubfs volume, so that the
//! volume's FUSE server runs in the pod and outlives restarts of the node plugin.
//!
//! The decision and the patch are pure ([`super::webhook_patch`]); this module is the I/O around
//! them: HTTPS (rustls, with the key pair re-read when its Secret is rotated), the 3 MiB body limit,
//! and the PersistentVolumeClaim look-ups against the Kubernetes API. Every failure of a look-up
//! means "no sidecar", never "no pod": the plugin serves the volume itself without one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use clap::Args;
use futures::StreamExt;

use super::kube::{Kube, KubeError};
use super::webhook_patch::{self as wp, Claim, ReviewError, Sidecar};

mod tls;

/// Largest AdmissionReview read: pods are far smaller (etcd stores at most 1.5 MiB per object).
pub const BODY_LIMIT: usize = 3 << 20;
/// An over-limit body is read and dropped up to this much, so its sender sees the 413 instead of a
/// connection reset; past it the connection is simply closed.
const DRAIN_LIMIT: u64 = 16 << 20;
/// Time to read one request body (the API server gives the whole call 5 s).
const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// `hubfs csi-webhook` options.
#[derive(Args, Debug)]
pub struct CsiWebhookArgs {
    /// Address of the HTTPS server (`--listen 127.0.0.1:0` picks a port; the real one is printed).
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// PEM certificate chain served; re-read when the file changes (Secret rotation).
    #[arg(long)]
    pub tls_cert: PathBuf,
    /// PEM private key of --tls-cert; re-read with it.
    #[arg(long)]
    pub tls_key: PathBuf,
    /// Image of the injected sidecar (the hubfs image, whose entrypoint is `hubfs`).
    #[arg(long)]
    pub sidecar_image: String,
    /// CPU request of the sidecar ("" for none).
    #[arg(long, default_value = "100m")]
    pub sidecar_cpu: String,
    /// Memory request of the sidecar ("" for none).
    #[arg(long, default_value = "512Mi")]
    pub sidecar_memory: String,
    /// CPU limit of the sidecar (default: none, so a busy read is not throttled).
    #[arg(long)]
    pub sidecar_cpu_limit: Option<String>,
    /// Memory limit of the sidecar (default: none).
    #[arg(long)]
    pub sidecar_memory_limit: Option<String>,
    #[command(flatten)]
    pub kube: super::kube::KubeArgs,
    /// How often the certificate files are checked for changes.
    #[arg(long, hide = true, default_value = "5", value_name = "SECONDS")]
    pub cert_check_interval: u64,
}

/// Why a review is answered with an error status instead of an AdmissionReview; mapped to HTTP in
/// one place ([`IntoResponse`]). None of these ever carries a patch.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error(transparent)]
    Review(#[from] ReviewError),
    #[error("request body over {BODY_LIMIT} bytes")]
    TooLarge,
    #[error("reading the request body: {0}")]
    Body(String),
}

impl WebhookError {
    fn status(&self) -> StatusCode {
        match self {
            WebhookError::Review(_) | WebhookError::Body(_) => StatusCode::BAD_REQUEST,
            WebhookError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }
}

impl IntoResponse for WebhookError {
    fn into_response(self) -> Response {
        let line = self.to_string().replace(['\r', '\n'], " ");
        tracing::warn!(status = self.status().as_u16(), "admission review refused: {line}");
        (
            self.status(),
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            line + "\n",
        )
            .into_response()
    }
}

/// The webhook's look-ups: whether a pod's claims are bound to hubfs volumes.
struct Claims(Kube);

impl Claims {
    /// Whether one claim of `namespace` is bound to a hubfs PV.
    async fn claim(&self, namespace: &str, name: &str) -> Result<Claim, KubeError> {
        for n in [namespace, name] {
            if !wp::is_object_name(n) {
                return Err(KubeError::BadName(format!("{n:?}")));
            }
        }
        let pvc = self
            .0
            .get(&format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"))
            .await?
            .ok_or_else(|| KubeError::Request("no such PersistentVolumeClaim".into()))?;
        let Some(pv) = wp::bound_volume(&pvc) else {
            return Ok(Claim::Unbound);
        };
        if !wp::is_object_name(pv) {
            return Err(KubeError::BadName(format!("{pv:?}")));
        }
        let pv = self
            .0
            .get(&format!("/api/v1/persistentvolumes/{pv}"))
            .await?
            .ok_or_else(|| KubeError::Request(format!("its PersistentVolume {pv:?} does not exist")))?;
        Ok(wp::claim_of_pv(&pv))
    }

    /// Looks the claims up concurrently (each with its own deadlines).
    async fn resolve(&self, namespace: &str, names: &[String]) -> BTreeMap<String, Claim> {
        let lookups = names.iter().map(|name| async move {
            let claim = self
                .claim(namespace, name)
                .await
                .unwrap_or_else(|e| Claim::Failed(e.to_string()));
            (name.clone(), claim)
        });
        futures::future::join_all(lookups).await.into_iter().collect()
    }
}

struct App {
    sidecar: Sidecar,
    kube: Claims,
}

/// `POST /mutate`: one AdmissionReview in, one out.
async fn mutate(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Result<Response, WebhookError> {
    let body = read_limited(&headers, body).await?;
    let req = wp::parse_review(&body)?;
    let claims = wp::claims_to_resolve(&req);
    let looked_up = app.kube.resolve(&req.namespace, &claims).await;
    let decision = wp::decide(&req, &looked_up, &app.sidecar);
    let (ns, pod, uid) = (&req.namespace, wp::pod_name(&req), &req.uid);
    match &decision {
        wp::Decision::Inject(_) => tracing::info!(namespace = %ns, pod = %pod, uid = %uid, "sidecar injected"),
        wp::Decision::Skip(s) if s.is_warning() => {
            tracing::warn!(namespace = %ns, pod = %pod, uid = %uid, "no sidecar: {s}")
        }
        wp::Decision::Skip(s) => tracing::debug!(namespace = %ns, pod = %pod, uid = %uid, "no sidecar: {s}"),
    }
    Ok(axum::Json(wp::response(&req.uid, &decision)).into_response())
}

/// Reads at most [`BODY_LIMIT`] bytes of body; a longer one is drained (not kept) up to
/// [`DRAIN_LIMIT`] and refused.
async fn read_limited(headers: &HeaderMap, body: Body) -> Result<Vec<u8>, WebhookError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > DRAIN_LIMIT) {
        return Err(WebhookError::TooLarge);
    }
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n.min(BODY_LIMIT as u64) as usize));
    let mut seen = 0u64;
    let mut stream = body.into_data_stream();
    let deadline = tokio::time::Instant::now() + BODY_DEADLINE;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        let chunk = match next {
            Ok(Some(Ok(chunk))) => chunk,
            Ok(None) => break,
            Ok(Some(Err(e))) if seen <= BODY_LIMIT as u64 => return Err(WebhookError::Body(e.to_string())),
            Err(_) if seen <= BODY_LIMIT as u64 => return Err(WebhookError::Body("timed out".into())),
            Ok(Some(Err(_))) | Err(_) => return Err(WebhookError::TooLarge),
        };
        seen += chunk.len() as u64;
        if seen > DRAIN_LIMIT {
            return Err(WebhookError::TooLarge);
        }
        if seen > BODY_LIMIT as u64 {
            buf = Vec::new();
        } else {
            buf.extend_from_slice(&chunk);
        }
    }
    if seen > BODY_LIMIT as u64 {
        return Err(WebhookError::TooLarge);
    }
    Ok(buf)
}

fn sidecar_of(args: &CsiWebhookArgs) -> anyhow::Result<Sidecar> {
    if args.sidecar_image.trim().is_empty() {
        anyhow::bail!("--sidecar-image must not be empty");
    }
    let quantity = |flag: &str, v: Option<&String>| -> anyhow::Result<Option<String>> {
        match v.map(|s| s.trim()).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => wp::check_quantity(s)
                .map(|()| Some(s.to_string()))
                .map_err(|e| anyhow::anyhow!("--{flag}: {e}")),
        }
    };
    Ok(Sidecar {
        image: args.sidecar_image.trim().to_string(),
        cpu_request: quantity("sidecar-cpu", Some(&args.sidecar_cpu))?,
        memory_request: quantity("sidecar-memory", Some(&args.sidecar_memory))?,
        cpu_limit: quantity("sidecar-cpu-limit", args.sidecar_cpu_limit.as_ref())?,
        memory_limit: quantity("sidecar-memory-limit", args.sidecar_memory_limit.as_ref())?,
    })
}

/// `hubfs csi-webhook`.
pub fn run(args: CsiWebhookArgs) -> anyhow::Result<()> {
    let sidecar = sidecar_of(&args)?;
    let pair = tls::KeyPair::load(&args.tls_cert, &args.tls_key).context("--tls-cert/--tls-key")?;
    let config = pair.server_config()?;
    // The API server gives the whole review 5 s.
    let kube = Kube::new(&args.kube, Duration::from_secs(2))?;
    match kube.configured() {
        true => tracing::info!("PersistentVolumeClaims are looked up in the Kubernetes API"),
        false => tracing::warn!("no Kubernetes API: pods whose hubfs volumes are PVCs get no sidecar"),
    }
    let app = Arc::new(App {
        sidecar,
        kube: Claims(kube),
    });
    let router = axum::Router::new()
        .route("/mutate", axum::routing::post(mutate))
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .with_state(app);
    let rt = crate::process::signals::runtime()?;
    rt.block_on(async move {
        let mut signals = crate::process::signals::StopSignals::new()?;
        let tcp = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("--listen {}", args.listen))?;
        let listener = tls::listen(tcp, config)?;
        let local = axum::serve::Listener::local_addr(&listener)?;
        tokio::spawn(pair.watch(Duration::from_secs(args.cert_check_interval.max(1))));
        tracing::info!(addr = %local, image = %args.sidecar_image, "admission webhook listening");
        println!("listening on {local}");
        use std::io::Write;
        std::io::stdout().flush()?;
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { signals.recv().await })
            .await?;
        Ok(())
    })
}
