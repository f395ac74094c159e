//! What the plugin asks the Hub before mounting, so that a pod gets the spec's code at once
//! instead of a mount that fails later: who the token belongs to (the source key's token identity,
//! and PERMISSION_DENIED for a refused token), and which commit the revision points at (the source
//! key's resolved revision, and NOT_FOUND for an unknown repo or revision).

use std::time::Duration;

use tonic::Status;

use super::volume::{SourceKind, VolumeSpec};
use crate::hub_client::{HubClient, HubClientConfig, HubClientError, RepoRef};

/// Deadline of one whoami exchange, and how many times a network failure or 5xx is retried.
const WHOAMI_TIMEOUT: Duration = Duration::from_secs(15);
const WHOAMI_TRIES: u32 = 3;

/// The answer of the checks.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Read-only volumes: the commit the revision points at (the source shows exactly it).
    /// Writable ones: the branch, which moves with their own commits.
    pub revision: String,
    /// The account the token belongs to (`anonymous` without one).
    pub identity: String,
}

pub fn endpoint_of(spec: &VolumeSpec, default: &str) -> String {
    spec.endpoint
        .as_deref()
        .unwrap_or(default)
        .trim_end_matches('/')
        .to_string()
}

fn status_of(spec: &VolumeSpec, e: &HubClientError) -> Status {
    let what = spec.display();
    match e {
        HubClientError::RepoNotFound { .. } => Status::not_found(format!(
            "{what} not found on the Hub, or it is private and the volume's token cannot see it"
        )),
        HubClientError::RevisionNotFound { .. } | HubClientError::NotFound { .. } => Status::not_found(format!(
            "revision {:?} of {what} not found (use a branch, tag or full commit id)",
            spec.revision.as_deref().unwrap_or("main")
        )),
        HubClientError::Unauthorized { .. } => Status::permission_denied("the Hub refused the volume's token"),
        HubClientError::Forbidden { .. } => {
            Status::permission_denied(format!("the volume's token has no access to {what}"))
        }
        HubClientError::BadInput { .. } => Status::invalid_argument(format!("{what}: {e}")),
        other => Status::unavailable(format!("the Hub did not answer for {what}: {other}")),
    }
}

/// The account a token belongs to, and whether the Hub calls it a read-only token.
struct Who {
    name: String,
    read_only_token: bool,
}

/// `GET /api/whoami-v2`: the token's account name and role. 401 is PERMISSION_DENIED.
async fn whoami(endpoint: &str, token: &str) -> Result<Who, Status> {
    let client = reqwest::Client::builder()
        .timeout(WHOAMI_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|e| Status::internal(format!("HTTP client: {e}")))?;
    let url = format!("{endpoint}/api/whoami-v2");
    let mut last = String::new();
    for attempt in 0..WHOAMI_TRIES {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
        }
        let r = client.get(&url).bearer_auth(token).send().await;
        match r {
            Ok(resp) if resp.status().is_success() => {
                let v: serde_json::Value = resp
                    .json()
                    .await
                    .map_err(|_| Status::unavailable("the Hub's whoami answer is not JSON"))?;
                let name = v["name"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| Status::unavailable("the Hub's whoami answer has no name"))?;
                // Fine-grained tokens say "fineGrained": only a plain "read" is known not to write.
                let read_only_token = v["auth"]["accessToken"]["role"].as_str() == Some("read");
                return Ok(Who { name, read_only_token });
            }
            Ok(resp)
                if resp.status() == reqwest::StatusCode::UNAUTHORIZED
                    || resp.status() == reqwest::StatusCode::FORBIDDEN =>
            {
                return Err(Status::permission_denied("the Hub refused the volume's token"));
            }
            Ok(resp) if resp.status().is_server_error() || resp.status().as_u16() == 429 => {
                last = format!("HTTP {}", resp.status());
            }
            Ok(resp) => return Err(Status::unavailable(format!("whoami answered HTTP {}", resp.status()))),
            // The error text names the URL only, never the header holding the token.
            Err(e) => last = e.without_url().to_string(),
        }
    }
    Err(Status::unavailable(format!(
        "the Hub at {endpoint} did not answer whoami: {last}"
    )))
}

/// The account `token` belongs to (`anonymous` without one).
pub async fn identity(spec: &VolumeSpec, token: Option<&str>, default_endpoint: &str) -> Result<String, Status> {
    match token {
        Some(t) => Ok(whoami(&endpoint_of(spec, default_endpoint), t).await?.name),
        None => Ok("anonymous".to_string()),
    }
}

/// Runs both checks.
pub async fn check(spec: &VolumeSpec, token: Option<&str>, default_endpoint: &str) -> Result<Checked, Status> {
    // A bucket's mount spec is `hf://buckets/NS/NAME[/PREFIX]`.
    let (repo, _, _): (RepoRef, _, _) =
        RepoRef::parse(&spec.mount_spec()).map_err(|e| Status::invalid_argument(e.to_string()))?;
    let bucket = spec.kind == SourceKind::Bucket;
    if bucket != repo.is_bucket() {
        return Err(Status::invalid_argument(format!(
            "{}: the sourceType and the id disagree on whether this is a bucket",
            spec.display()
        )));
    }
    let endpoint = endpoint_of(spec, default_endpoint);
    let identity = match token {
        Some(t) => {
            let who = whoami(&endpoint, t).await?;
            if !spec.read_only && who.read_only_token {
                return Err(Status::permission_denied(format!(
                    "{} is asked writable but the volume's token is a read token: use a write token, \
                     or readOnly: \"true\"",
                    spec.display()
                )));
            }
            who.name
        }
        None if !spec.read_only => {
            return Err(Status::permission_denied(format!(
                "{} is asked writable but the volume has no token (nodePublishSecretRef)",
                spec.display()
            )));
        }
        None => "anonymous".to_string(),
    };
    let cfg = HubClientConfig {
        endpoint: endpoint.clone(),
        token: token.map(str::to_string),
        ..Default::default()
    };
    let hub = HubClient::new(cfg).map_err(|e| Status::invalid_argument(e.to_string()))?;
    if bucket {
        // No revisions: the source shows the bucket as it is now and follows it.
        hub.repo_info(&repo, "main").await.map_err(|e| status_of(spec, &e))?;
        return Ok(Checked {
            revision: String::new(),
            identity,
        });
    }
    let asked = spec.revision.clone().unwrap_or_else(|| "main".to_string());
    let info = hub.repo_info(&repo, &asked).await.map_err(|e| status_of(spec, &e))?;
    let revision = if spec.read_only { info.sha } else { asked };
    Ok(Checked { revision, identity })
}
