//! Errors of the filesystem core, and their errno: the one place where a failure becomes a number
//! the kernel (or the NFS adapter) understands.

use crate::chunk_store::ChunkStoreError;
use crate::hub_client::HubClientError;

#[derive(Debug, thiserror::Error)]
pub enum VfsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("read-only file system")]
    ReadOnly,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("file name too long")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("stale file handle")]
    BadHandle,
    #[error("{0}")]
    Remote(#[from] HubClientError),
    #[error("xet read failed: {0}")]
    Xet(String),
    #[error("short read from the Hub: wanted {wanted} bytes at {offset}, got {got}")]
    ShortRead { offset: u64, wanted: u64, got: u64 },
    #[error("remote read timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("content cache: {0}")]
    Cache(String),
    #[error("file exists")]
    Exists,
    #[error("directory not empty")]
    NotEmpty,
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    #[error("local staging: {0}")]
    Io(String),
    #[error("upload failed: {0}")]
    Upload(String),
    #[error("no space left for staging: {0}")]
    NoSpace(String),
    /// Upload or commit failed; `errno` is chosen where the cause is known (EACCES, ENOSPC, EIO).
    #[error("commit failed: {msg}")]
    Commit { msg: String, errno: i32 },
    /// One failure shared by every caller that waited on the same fetch.
    #[error("{0}")]
    Shared(std::sync::Arc<VfsError>),
}

impl VfsError {
    pub fn errno(&self) -> i32 {
        match self {
            VfsError::NotFound => libc::ENOENT,
            VfsError::ReadOnly => libc::EROFS,
            VfsError::NotDir => libc::ENOTDIR,
            VfsError::IsDir => libc::EISDIR,
            VfsError::NameTooLong => libc::ENAMETOOLONG,
            VfsError::Invalid(_) => libc::EINVAL,
            VfsError::BadHandle => libc::EBADF,
            VfsError::Remote(e) => match e {
                HubClientError::NotFound { .. } => libc::ENOENT,
                HubClientError::RepoNotFound { .. }
                | HubClientError::Unauthorized { .. }
                | HubClientError::Forbidden { .. } => libc::EACCES,
                HubClientError::RevisionNotFound { .. } => libc::ENOENT,
                HubClientError::BadInput { .. } => libc::EINVAL,
                _ => libc::EIO,
            },
            VfsError::Xet(_) | VfsError::ShortRead { .. } | VfsError::Timeout(_) | VfsError::Cache(_) => libc::EIO,
            VfsError::Exists => libc::EEXIST,
            VfsError::NotEmpty => libc::ENOTEMPTY,
            VfsError::NotPermitted(_) => libc::EPERM,
            VfsError::Io(_) | VfsError::Upload(_) => libc::EIO,
            VfsError::NoSpace(_) => libc::ENOSPC,
            VfsError::Commit { errno, .. } => *errno,
            VfsError::Shared(e) => e.errno(),
        }
    }
}

impl From<std::io::Error> for VfsError {
    /// A staging failure: a full disk is ENOSPC, anything else EIO.
    fn from(e: std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => VfsError::NoSpace(e.to_string()),
            _ => VfsError::Io(e.to_string()),
        }
    }
}

impl From<ChunkStoreError<VfsError>> for VfsError {
    /// A block load's failure is its fetch's error, shared by every caller that waited on it.
    fn from(e: ChunkStoreError<VfsError>) -> Self {
        match e {
            ChunkStoreError::Fetch(e) => VfsError::Shared(e),
        }
    }
}

pub type VfsResult<T> = Result<T, VfsError>;
