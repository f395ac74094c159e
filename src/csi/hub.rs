//! What the plugin asks the Hub before mounting, so that a pod gets the spec's code at once
//! instead of a mount that fails later: who the token belongs to (the source key's token identity,
//! and PERMISSION_DENIED for a refused token), and which commit the revision points at (the source
//! key's resolved revision, and NOT_FOUND for an unknown repo or revision).

use std::time::Duration;

use tonic::Status;

use super::volume::{SourceKind, VolumeSpec};
use crate::hub_client::{HubClient, HubClientConfig, HubClientError, RepoRef, TokenRole, Whoami, WriteAccess};

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

/// A Hub client for whoami with `token`: one exchange ends within WHOAMI_TIMEOUT × WHOAMI_TRIES
/// plus backoff, so a publish is answered before kubelet gives up on it.
fn whoami_client(endpoint: &str, token: &str) -> Result<HubClient, Status> {
    let cfg = HubClientConfig {
        endpoint: endpoint.to_string(),
        token: Some(token.to_string()),
        timeout: WHOAMI_TIMEOUT,
        max_retries: WHOAMI_TRIES - 1,
        patience: std::time::Duration::ZERO,
        ..Default::default()
    };
    HubClient::new(cfg).map_err(|e| Status::invalid_argument(e.to_string()))
}

/// `GET /api/whoami-v2`: the token's account and what it may do. A token the Hub refuses is
/// PERMISSION_DENIED.
async fn whoami(endpoint: &str, token: &str) -> Result<Whoami, Status> {
    match whoami_client(endpoint, token)?.whoami().await {
        Ok(who) => Ok(who),
        Err(HubClientError::Unauthorized { .. } | HubClientError::Forbidden { .. }) => {
            Err(Status::permission_denied("the Hub refused the volume's token"))
        }
        // The client's errors never carry the token.
        Err(e) => Err(Status::unavailable(format!(
            "the Hub at {endpoint} did not answer whoami: {e}"
        ))),
    }
}

/// The account `token` belongs to (`anonymous` without one).
pub async fn identity(spec: &VolumeSpec, token: Option<&str>, default_endpoint: &str) -> Result<String, Status> {
    match token {
        Some(t) => Ok(whoami(&endpoint_of(spec, default_endpoint), t).await?.name),
        None => Ok("anonymous".to_string()),
    }
}

/// A writable volume whose token may not write to its repo or bucket is PERMISSION_DENIED. When
/// whoami cannot say (a role this client does not know, a fine-grained token on a bucket), the
/// volume is published and the Hub decides at the first write.
fn refuse_unwritable(spec: &VolumeSpec, who: &Whoami, repo: &RepoRef) -> Result<(), Status> {
    match (&who.token, who.write_access(repo)) {
        (TokenRole::Read, _) => Err(Status::permission_denied(format!(
            "{} is asked writable but the volume's token is a read token: use a write token, \
             or readOnly: \"true\"",
            spec.display()
        ))),
        (_, WriteAccess::No(why)) => Err(Status::permission_denied(format!(
            "{} is asked writable but the volume's token may not write to it ({why}): use a token \
             that may, or readOnly: \"true\"",
            spec.display()
        ))),
        _ => Ok(()),
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
            if !spec.read_only {
                refuse_unwritable(spec, &who, &repo)?;
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
