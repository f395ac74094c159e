//! The exit status of a failed command: one number per kind of failure a caller handles in its own
//! way (ask for a token, create the repo, pick another directory, fall back to NFS, try later),
//! 1 for anything else. Errors are tagged where their cause is known ([`error`], or a Hub client
//! error kept in the chain); `main` reads the number in one place ([`failure_of`]).
//!
//! The numbers are part of the interface: scripts and the Python package (`python/hubfs/errors.py`)
//! test them, so a number never changes meaning. 2 is clap's (the command line was refused), 143
//! a mount stopped by SIGINT or SIGTERM before it was ready (`commands/mount.rs`).

use std::fmt;

use crate::hub_client::HubClientError;
use crate::vfs::error::VfsError;

/// Why a command failed, as far as its exit status tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 1: anything not named below.
    Other,
    /// 3: the repo or bucket does not exist, or it is private and the token cannot see it (the Hub
    /// answers both with 404).
    RepoNotFound,
    /// 4: the repo exists, the branch, tag or commit does not.
    RevisionNotFound,
    /// 5: the Hub refused the token (401), or the token may not do what was asked (403, a gated
    /// repo, `--write` without a token that may write).
    TokenRefused,
    /// 6: `/dev/fuse` cannot be opened (no FUSE in this kernel or container, or not root).
    FuseUnavailable,
    /// 7: the mountpoint does not exist, is not a directory, is busy, or the kernel refused to
    /// mount there.
    Mountpoint,
    /// 8: the Hub could not be reached, or kept failing, past every retry and wait: connection
    /// refused, DNS, timeouts, 5xx, 429.
    HubUnavailable,
}

impl Failure {
    /// Every kind, in the order of their numbers.
    pub const ALL: [Failure; 7] = [
        Failure::Other,
        Failure::RepoNotFound,
        Failure::RevisionNotFound,
        Failure::TokenRefused,
        Failure::FuseUnavailable,
        Failure::Mountpoint,
        Failure::HubUnavailable,
    ];

    /// The process's exit status.
    pub fn code(self) -> u8 {
        match self {
            Failure::Other => 1,
            Failure::RepoNotFound => 3,
            Failure::RevisionNotFound => 4,
            Failure::TokenRefused => 5,
            Failure::FuseUnavailable => 6,
            Failure::Mountpoint => 7,
            Failure::HubUnavailable => 8,
        }
    }

    /// The kind an exit status names (a child's, for `mount --daemon`); `None` for 0 and for
    /// numbers that are not one of these.
    pub fn from_code(code: i32) -> Option<Failure> {
        Failure::ALL.into_iter().find(|f| i32::from(f.code()) == code)
    }

    /// The kind a Hub client error is; `Other` for those that name none (a missing file, a
    /// conflict, a bad answer).
    pub fn of_hub(e: &HubClientError) -> Failure {
        match e {
            HubClientError::RepoNotFound { .. } => Failure::RepoNotFound,
            HubClientError::RevisionNotFound { .. } => Failure::RevisionNotFound,
            HubClientError::Unauthorized { .. } | HubClientError::Forbidden { .. } => Failure::TokenRefused,
            e if e.is_transient() => Failure::HubUnavailable,
            _ => Failure::Other,
        }
    }

    /// The kind a core error is: its Hub error's, else `Other`.
    pub fn of_vfs(e: &VfsError) -> Failure {
        match e {
            VfsError::Remote(h) => Failure::of_hub(h),
            VfsError::Shared(inner) => Failure::of_vfs(inner),
            _ => Failure::Other,
        }
    }
}

/// An error whose message is the user's and whose kind is known.
#[derive(Debug)]
pub struct Classified {
    pub failure: Failure,
    message: String,
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Classified {}

/// An error saying `message`, of kind `failure`.
pub fn error(failure: Failure, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Classified {
        failure,
        message: message.into(),
    })
}

/// The kind of a failed command's error: the first error in its chain whose kind is known
/// (tagged with [`error`], or a Hub client or core error), else `Other`.
pub fn failure_of(e: &anyhow::Error) -> Failure {
    for cause in e.chain() {
        let found = if let Some(c) = cause.downcast_ref::<Classified>() {
            c.failure
        } else if let Some(h) = cause.downcast_ref::<HubClientError>() {
            Failure::of_hub(h)
        } else if let Some(v) = cause.downcast_ref::<VfsError>() {
            Failure::of_vfs(v)
        } else {
            Failure::Other
        };
        if found != Failure::Other {
            return found;
        }
    }
    Failure::Other
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub_client::ErrorContext;

    fn ctx() -> Box<ErrorContext> {
        Box::default()
    }

    #[test]
    fn numbers_are_distinct_and_read_back() {
        let codes: Vec<u8> = Failure::ALL.iter().map(|f| f.code()).collect();
        assert_eq!(codes, [1, 3, 4, 5, 6, 7, 8]);
        for f in Failure::ALL {
            assert_eq!(Failure::from_code(i32::from(f.code())), Some(f));
        }
        assert_eq!(Failure::from_code(0), None);
        assert_eq!(Failure::from_code(2), None, "2 is clap's");
        assert_eq!(Failure::from_code(143), None);
    }

    #[test]
    fn the_kind_is_found_under_context() {
        use anyhow::Context as _;
        let e = Err::<(), _>(error(Failure::Mountpoint, "mountpoint /m is busy"))
            .context("mounting")
            .unwrap_err();
        assert_eq!(failure_of(&e), Failure::Mountpoint);
        assert_eq!(format!("{e:#}"), "mounting: mountpoint /m is busy");
        let e = anyhow::Error::new(HubClientError::RevisionNotFound { ctx: ctx() }).context("opening");
        assert_eq!(failure_of(&e), Failure::RevisionNotFound);
        let shared = VfsError::Shared(std::sync::Arc::new(VfsError::Remote(HubClientError::Network {
            ctx: ctx(),
        })));
        assert_eq!(failure_of(&anyhow::Error::new(shared)), Failure::HubUnavailable);
        assert_eq!(failure_of(&anyhow::anyhow!("something else")), Failure::Other);
        let missing_file = anyhow::Error::new(HubClientError::NotFound { ctx: ctx() });
        assert_eq!(
            failure_of(&missing_file),
            Failure::Other,
            "a missing file is not a missing repo"
        );
    }

    #[test]
    fn hub_errors_map_to_their_kind() {
        assert_eq!(
            Failure::of_hub(&HubClientError::Forbidden { ctx: ctx() }),
            Failure::TokenRefused
        );
        assert_eq!(
            Failure::of_hub(&HubClientError::Timeout { ctx: ctx() }),
            Failure::HubUnavailable
        );
        assert_eq!(
            Failure::of_hub(&HubClientError::RateLimited { ctx: ctx() }),
            Failure::HubUnavailable
        );
        assert_eq!(
            Failure::of_hub(&HubClientError::Conflict { ctx: ctx() }),
            Failure::Other
        );
    }
}
