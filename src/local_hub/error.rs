//! Errors of the local Hub, shaped like the real Hub's: a status, an `X-Error-Code` that clients
//! dispatch on before they look at the status, an `X-Error-Message`, and a JSON `{"error": ...}` body.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// One failure of a local-Hub request. Every handler returns this, so no request can panic its way
/// out and every client sees the same error shape.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("Repository not found")]
    RepoNotFound { anonymous: bool },
    /// A bucket that does not exist or that the caller may not see; the Hub sends the repos' code,
    /// which clients turn into their bucket error for `/api/buckets/` URLs.
    #[error("Bucket not found")]
    BucketNotFound { anonymous: bool },
    #[error("Invalid rev id: {0}")]
    RevisionNotFound(String),
    #[error("{0}")]
    EntryNotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("Invalid credentials in Authorization header")]
    BadToken,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Conflict(String),
    #[error("The branch was updated since you opened this page. Please refresh and try again.")]
    PreconditionFailed,
    #[error("Requested range not satisfiable")]
    RangeNotSatisfiable { size: u64 },
    #[error("Request body too large (limit {limit} bytes)")]
    PayloadTooLarge { limit: usize },
    #[error("Not found")]
    RouteNotFound,
    #[error("Method not allowed")]
    MethodNotAllowed,
    #[error("Internal error: {0}")]
    Internal(String),
    #[error("Upstream CAS error: {0}")]
    Upstream(String),
    /// The repo's commit budget is spent (see `limits`): 429 with `Retry-After` and `RateLimit`.
    #[error("{}", .0.message())]
    CommitRateLimited(super::limits::CommitRateLimited),
    /// A request window's quota is spent (see `windows`): 429 with `Retry-After` and `RateLimit`.
    #[error("{}", .0.message())]
    RequestRateLimited(Box<super::windows::RequestRateLimited>),
}

impl HubError {
    pub fn internal(e: impl std::fmt::Display) -> Self {
        HubError::Internal(e.to_string())
    }

    pub fn bad_request(msg: impl Into<String>) -> Self {
        HubError::BadRequest(msg.into())
    }

    pub fn status(&self) -> StatusCode {
        match self {
            HubError::RepoNotFound { anonymous: true } => StatusCode::UNAUTHORIZED,
            HubError::RepoNotFound { anonymous: false } => StatusCode::NOT_FOUND,
            HubError::BucketNotFound { anonymous: true } => StatusCode::UNAUTHORIZED,
            HubError::BucketNotFound { anonymous: false } => StatusCode::NOT_FOUND,
            HubError::RevisionNotFound(_) | HubError::EntryNotFound(_) | HubError::RouteNotFound => {
                StatusCode::NOT_FOUND
            }
            HubError::BadRequest(_) => StatusCode::BAD_REQUEST,
            HubError::BadToken => StatusCode::UNAUTHORIZED,
            HubError::Forbidden(_) => StatusCode::FORBIDDEN,
            HubError::Conflict(_) => StatusCode::CONFLICT,
            HubError::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            HubError::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            HubError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            HubError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            HubError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            HubError::Upstream(_) => StatusCode::BAD_GATEWAY,
            HubError::CommitRateLimited(_) | HubError::RequestRateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            HubError::RepoNotFound { .. } | HubError::BucketNotFound { .. } => Some("RepoNotFound"),
            HubError::RevisionNotFound(_) => Some("RevisionNotFound"),
            HubError::EntryNotFound(_) => Some("EntryNotFound"),
            _ => None,
        }
    }

    fn message(&self) -> String {
        match self {
            // The real Hub hides whether a private repo exists from anonymous callers this way.
            HubError::RepoNotFound { anonymous: true } | HubError::BucketNotFound { anonymous: true } => {
                "Invalid username or password.".to_string()
            }
            other => other.to_string(),
        }
    }
}

/// Error body plus headers; `X-Repo-Commit` is added by the caller where the Hub sends it on 404s.
impl IntoResponse for HubError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(error = %self, "local hub request failed");
        } else {
            tracing::debug!(error = %self, status = status.as_u16(), "local hub request refused");
        }
        let message = self.message();
        let body = serde_json::json!({ "error": message }).to_string();
        let mut resp = (status, body).into_response();
        let headers = resp.headers_mut();
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        if let Some(code) = self.code() {
            headers.insert("x-error-code", HeaderValue::from_static(code));
        }
        // Header values must be visible ASCII; fall back to a generic text otherwise.
        let header_msg: String = message
            .chars()
            .filter(|c| c.is_ascii() && !c.is_ascii_control())
            .collect();
        if let Ok(v) = HeaderValue::from_str(&header_msg) {
            headers.insert("x-error-message", v);
        }
        if let HubError::RangeNotSatisfiable { size } = self
            && let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}"))
        {
            headers.insert(axum::http::header::CONTENT_RANGE, v);
        }
        if let HubError::CommitRateLimited(r) = &self {
            for (name, value) in [
                ("retry-after", r.retry_after.to_string()),
                ("ratelimit", r.ratelimit_header()),
                ("ratelimit-policy", r.policy_header()),
            ] {
                if let Ok(v) = HeaderValue::from_str(&value) {
                    headers.insert(name, v);
                }
            }
        }
        if let HubError::RequestRateLimited(r) = &self {
            let [ratelimit, policy] = r.charge.headers();
            for (name, value) in [("retry-after", r.charge.reset_secs.to_string()), ratelimit, policy] {
                if let Ok(v) = HeaderValue::from_str(&value) {
                    headers.insert(name, v);
                }
            }
        }
        resp
    }
}

pub type HubResult<T> = Result<T, HubError>;
