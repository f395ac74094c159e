//! The few Kubernetes API calls hubfs makes, with the pod's service account: the webhook reads
//! PersistentVolumeClaims and PersistentVolumes, the node plugin creates, reads and deletes its
//! mount pods. Plain JSON over HTTPS (the API server's CA, a bearer token re-read at every call
//! because projected tokens rotate), every call with a deadline, errors that never hold the token.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use reqwest::header;
use serde_json::Value;

const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Where the API is (in a pod, all defaults are right).
#[derive(Args, Debug, Clone)]
pub struct KubeArgs {
    /// Kubernetes API base URL (default: in-cluster, https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
    #[arg(long, hide = true, env = "HUBFS_KUBE_API")]
    pub kube_api: Option<String>,
    /// Bearer token file for the API, re-read at each call (projected tokens rotate).
    #[arg(
        long,
        hide = true,
        env = "HUBFS_KUBE_TOKEN_FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    pub kube_token_file: PathBuf,
    /// CA bundle of the API (default: the service account's ca.crt when it exists).
    #[arg(long, hide = true, env = "HUBFS_KUBE_CA_FILE")]
    pub kube_ca_file: Option<PathBuf>,
}

/// Why the Kubernetes API could not answer; the text never holds the token.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("no Kubernetes API configured (not in a cluster and no HUBFS_KUBE_API)")]
    NotConfigured,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("reading the token file {path}: {err}")]
    Token { path: PathBuf, err: std::io::Error },
    #[error("{0}")]
    Request(String),
    #[error("HTTP {status}: {message}")]
    Status { status: u16, message: String },
    #[error("{0} is not a valid object name")]
    BadName(String),
}

impl KubeError {
    /// The API answered 409 (the object exists already).
    pub fn is_conflict(&self) -> bool {
        matches!(self, KubeError::Status { status: 409, .. })
    }
}

pub struct Kube {
    base: Option<String>,
    /// Of each call.
    deadline: Duration,
    token_file: PathBuf,
    client: reqwest::Client,
}

impl Kube {
    /// A client whose every call ends within `deadline`.
    pub fn new(args: &KubeArgs, deadline: Duration) -> anyhow::Result<Kube> {
        let base = args.kube_api.clone().or_else(|| {
            let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
            let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
            Some(match host.contains(':') {
                true => format!("https://[{host}]:{port}"),
                false => format!("https://{host}:{port}"),
            })
        });
        let ca_file = args.kube_ca_file.clone().or_else(|| {
            let p = Path::new(SERVICE_ACCOUNT).join("ca.crt");
            p.exists().then_some(p)
        });
        let mut builder = reqwest::Client::builder().timeout(deadline).connect_timeout(deadline);
        if let Some(ca) = &ca_file {
            let pem = std::fs::read(ca).with_context(|| format!("Kubernetes API CA {}", ca.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("Kubernetes API CA {}", ca.display()))?;
            builder = builder.tls_certs_only(certs);
        }
        Ok(Kube {
            base: base.map(|b| b.trim_end_matches('/').to_string()),
            deadline,
            token_file: args.kube_token_file.clone(),
            client: builder.build()?,
        })
    }

    pub fn configured(&self) -> bool {
        self.base.is_some()
    }

    /// GETs an API path; `None` for 404.
    pub async fn get(&self, path: &str) -> Result<Option<Value>, KubeError> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// POSTs `body` to an API path (creates an object); the object as created.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, KubeError> {
        self.call(reqwest::Method::POST, path, Some(body))
            .await?
            .ok_or_else(|| KubeError::Request(format!("{path}: not found")))
    }

    /// DELETEs an API path; an object already gone is fine.
    pub async fn delete(&self, path: &str) -> Result<(), KubeError> {
        self.call(reqwest::Method::DELETE, path, None).await.map(|_| ())
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Option<Value>, KubeError> {
        let base = self.base.as_deref().ok_or(KubeError::NotConfigured)?;
        let call = async {
            let mut req = self.client.request(method, format!("{base}{path}"));
            if let Some(b) = body {
                req = req.json(b);
            }
            match tokio::fs::read_to_string(&self.token_file).await {
                Ok(token) => {
                    let mut value = http::HeaderValue::try_from(format!("Bearer {}", token.trim()))
                        .map_err(|_| KubeError::Request("the token is not a valid header value".into()))?;
                    value.set_sensitive(true);
                    req = req.header(header::AUTHORIZATION, value);
                }
                // Outside a cluster (tests, a local API proxy) there may be no token.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    return Err(KubeError::Token {
                        path: self.token_file.clone(),
                        err,
                    });
                }
            }
            let resp = req
                .send()
                .await
                .map_err(|e| KubeError::Request(error_chain(&e.without_url())))?;
            let status = resp.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                return Ok(None);
            }
            let body = resp
                .bytes()
                .await
                .map_err(|e| KubeError::Request(error_chain(&e.without_url())))?;
            let json: Value =
                serde_json::from_slice(&body).map_err(|e| KubeError::Request(format!("bad JSON: {e}")))?;
            if !status.is_success() {
                // A Kubernetes Status object: its message says what RBAC or the server refused.
                let message = json
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .chars()
                    .take(200)
                    .collect();
                return Err(KubeError::Status {
                    status: status.as_u16(),
                    message,
                });
            }
            Ok(Some(json))
        };
        tokio::time::timeout(self.deadline, call)
            .await
            .map_err(|_| KubeError::Timeout(self.deadline))?
    }
}

/// An error and its causes on one line ("error sending request" alone says little). reqwest's
/// errors carry the URL at most, never a header, so the token cannot show.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}
