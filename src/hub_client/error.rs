//! Errors of the Hub client. Every variant carries an [`ErrorContext`]: the request (method, repo,
//! revision, path), the HTTP status and the Hub's `X-Error-Code` when there was an answer, the
//! Hub's message, and how many attempts were made. Display reads like
//! `GET datasets/ns/name@abc123 data/x.csv: 404 EntryNotFound: Entry not found`.
//!
//! The token is never part of an error: messages that come from the server are scrubbed of it.

use std::fmt;

/// Where and how a Hub request failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorContext {
    /// `GET`, `HEAD`, `POST`; empty for errors found before any request (bad input).
    pub method: String,
    /// `ns/name`, `datasets/ns/name` or `spaces/ns/name`.
    pub repo: Option<String>,
    pub revision: Option<String>,
    /// File or folder path inside the repo, or the offending input for [`HubClientError::BadInput`].
    pub path: Option<String>,
    pub status: Option<u16>,
    /// The Hub's `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`, …).
    pub error_code: Option<String>,
    /// The Hub's `X-Error-Message` / JSON `error`, or a description of a local failure.
    pub message: Option<String>,
    /// Attempts made (1 = no retry); 0 when no request was sent.
    pub attempts: u32,
    /// The wait a 429/503 asked for (`RateLimit: …;t=SECS` or `Retry-After`).
    pub retry_after: Option<std::time::Duration>,
}

impl ErrorContext {
    /// Template for a request on a repo; status, code and message are filled in when it fails.
    pub(crate) fn call(method: &str, repo: &super::RepoRef, revision: Option<&str>, path: Option<&str>) -> Self {
        ErrorContext {
            method: method.to_string(),
            repo: Some(repo.web_path()),
            revision: revision.map(str::to_string),
            path: path.filter(|p| !p.is_empty()).map(str::to_string),
            ..Default::default()
        }
    }

    pub(crate) fn with_message(&self, message: impl Into<String>) -> Box<Self> {
        Box::new(ErrorContext {
            message: Some(message.into()),
            ..self.clone()
        })
    }
}

impl fmt::Display for ErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut head: Vec<String> = Vec::new();
        if !self.method.is_empty() {
            head.push(self.method.clone());
        }
        match (&self.repo, &self.revision) {
            (Some(r), Some(rev)) => head.push(format!("{r}@{rev}")),
            (Some(r), None) => head.push(r.clone()),
            _ => {}
        }
        if let Some(p) = &self.path {
            head.push(p.clone());
        }
        if !head.is_empty() {
            write!(f, "{}: ", head.join(" "))?;
        }
        let mut outcome: Vec<String> = Vec::new();
        if let Some(s) = self.status {
            outcome.push(s.to_string());
        }
        if let Some(c) = &self.error_code {
            outcome.push(c.clone());
        }
        let outcome = outcome.join(" ");
        match (&self.message, outcome.is_empty()) {
            (Some(m), true) => write!(f, "{m}")?,
            (Some(m), false) => write!(f, "{outcome}: {m}")?,
            (None, false) => write!(f, "{outcome}")?,
            (None, true) => write!(f, "failed")?,
        }
        if self.attempts > 1 {
            write!(f, " (after {} attempts)", self.attempts)?;
        }
        Ok(())
    }
}

/// One failure of a Hub call. Cheap to clone (the context is boxed), so concurrent callers can
/// share one outcome.
#[derive(thiserror::Error, Debug, Clone)]
pub enum HubClientError {
    /// The file or folder does not exist at that revision (`EntryNotFound`, or a bare 404).
    #[error("{ctx}")]
    NotFound { ctx: Box<ErrorContext> },
    /// The repo does not exist, or is private and the token cannot see it (`RepoNotFound`).
    #[error("{ctx}")]
    RepoNotFound { ctx: Box<ErrorContext> },
    /// The branch, tag, PR ref or commit does not exist (`RevisionNotFound`).
    #[error("{ctx}")]
    RevisionNotFound { ctx: Box<ErrorContext> },
    /// 401 without a Hub error code: missing or invalid token.
    #[error("{ctx}")]
    Unauthorized { ctx: Box<ErrorContext> },
    /// 403, or a gated repo.
    #[error("{ctx}")]
    Forbidden { ctx: Box<ErrorContext> },
    /// 429 still answered after every retry.
    #[error("{ctx}")]
    RateLimited { ctx: Box<ErrorContext> },
    /// 5xx still answered after every retry (or a 5xx that is not retried, such as 501).
    #[error("{ctx}")]
    Server { ctx: Box<ErrorContext> },
    /// An attempt exceeded the per-request timeout, on every attempt.
    #[error("{ctx}")]
    Timeout { ctx: Box<ErrorContext> },
    /// Connection refused or reset, DNS failure, body cut short, … on every attempt.
    #[error("{ctx}")]
    Network { ctx: Box<ErrorContext> },
    /// The answer broke the protocol: bad JSON, missing field, wrong `Content-Range`, an
    /// unexpected status or redirect.
    #[error("{ctx}")]
    InvalidResponse { ctx: Box<ErrorContext> },
    /// Refused before sending (bad repo id, revision or path, invalid config), or a 400/413/422.
    #[error("{ctx}")]
    BadInput { ctx: Box<ErrorContext> },
    /// 409 or 412: the branch moved since `parentCommit`, or the resource already exists.
    #[error("{ctx}")]
    Conflict { ctx: Box<ErrorContext> },
}

impl HubClientError {
    pub fn ctx(&self) -> &ErrorContext {
        match self {
            HubClientError::NotFound { ctx }
            | HubClientError::RepoNotFound { ctx }
            | HubClientError::RevisionNotFound { ctx }
            | HubClientError::Unauthorized { ctx }
            | HubClientError::Forbidden { ctx }
            | HubClientError::RateLimited { ctx }
            | HubClientError::Server { ctx }
            | HubClientError::Timeout { ctx }
            | HubClientError::Network { ctx }
            | HubClientError::InvalidResponse { ctx }
            | HubClientError::Conflict { ctx }
            | HubClientError::BadInput { ctx } => ctx,
        }
    }

    /// HTTP status of the last answer, if there was one.
    pub fn status(&self) -> Option<u16> {
        self.ctx().status
    }

    /// The Hub's `X-Error-Code`, if it sent one.
    pub fn error_code(&self) -> Option<&str> {
        self.ctx().error_code.as_deref()
    }

    /// For a 429: how long the Hub asked us to wait before trying again.
    pub fn rate_limited_for(&self) -> Option<std::time::Duration> {
        match self {
            HubClientError::RateLimited { ctx } => Some(ctx.retry_after.unwrap_or_default()),
            _ => None,
        }
    }

    /// The path, repo or revision named by the request does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            HubClientError::NotFound { .. }
                | HubClientError::RepoNotFound { .. }
                | HubClientError::RevisionNotFound { .. }
        )
    }

    /// A failure that may go away by itself (worth retrying later at a higher level).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            HubClientError::RateLimited { .. }
                | HubClientError::Server { .. }
                | HubClientError::Timeout { .. }
                | HubClientError::Network { .. }
        )
    }

    /// Input refused before any request: `what` is the offending input (never a token).
    pub fn bad_input(what: impl Into<String>, why: impl Into<String>) -> Self {
        HubClientError::BadInput {
            ctx: Box::new(ErrorContext {
                path: Some(what.into()),
                message: Some(why.into()),
                ..Default::default()
            }),
        }
    }

    pub(crate) fn invalid(ctx: &ErrorContext, why: impl Into<String>) -> Self {
        HubClientError::InvalidResponse {
            ctx: ctx.with_message(why),
        }
    }

    /// Maps an HTTP error answer: the Hub's `X-Error-Code` first, then the status.
    pub(crate) fn from_status(status: u16, code: Option<&str>, ctx: Box<ErrorContext>) -> Self {
        match code {
            Some("RepoNotFound") => return HubClientError::RepoNotFound { ctx },
            Some("RevisionNotFound") => return HubClientError::RevisionNotFound { ctx },
            Some("EntryNotFound") => return HubClientError::NotFound { ctx },
            Some("GatedRepo") | Some("DisabledRepo") => return HubClientError::Forbidden { ctx },
            _ => {}
        }
        match status {
            401 => HubClientError::Unauthorized { ctx },
            403 => HubClientError::Forbidden { ctx },
            404 | 410 => HubClientError::NotFound { ctx },
            429 => HubClientError::RateLimited { ctx },
            409 | 412 => HubClientError::Conflict { ctx },
            500..=599 => HubClientError::Server { ctx },
            400 | 413 | 414 | 422 => HubClientError::BadInput { ctx },
            _ => HubClientError::InvalidResponse { ctx },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_reads_like_a_log_line() {
        let ctx = ErrorContext {
            method: "GET".into(),
            repo: Some("datasets/ns/name".into()),
            revision: Some("abc123".into()),
            path: Some("data/x.csv".into()),
            status: Some(404),
            error_code: Some("EntryNotFound".into()),
            message: None,
            attempts: 1,
            retry_after: None,
        };
        let e = HubClientError::from_status(404, Some("EntryNotFound"), Box::new(ctx));
        assert!(matches!(e, HubClientError::NotFound { .. }));
        assert_eq!(
            e.to_string(),
            "GET datasets/ns/name@abc123 data/x.csv: 404 EntryNotFound"
        );
        let e = HubClientError::bad_input("a/b/c", "expected ns/name");
        assert_eq!(e.to_string(), "a/b/c: expected ns/name");
    }

    #[test]
    fn code_wins_over_status() {
        let c = || Box::<ErrorContext>::default();
        assert!(matches!(
            HubClientError::from_status(401, Some("RepoNotFound"), c()),
            HubClientError::RepoNotFound { .. }
        ));
        assert!(matches!(
            HubClientError::from_status(401, None, c()),
            HubClientError::Unauthorized { .. }
        ));
        assert!(matches!(
            HubClientError::from_status(404, Some("RevisionNotFound"), c()),
            HubClientError::RevisionNotFound { .. }
        ));
        assert!(matches!(
            HubClientError::from_status(503, None, c()),
            HubClientError::Server { .. }
        ));
        assert!(matches!(
            HubClientError::from_status(412, None, c()),
            HubClientError::Conflict { .. }
        ));
        assert!(matches!(
            HubClientError::from_status(418, None, c()),
            HubClientError::InvalidResponse { .. }
        ));
    }
}
