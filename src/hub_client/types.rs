//! What the Hub answers, as the rest of hubfs sees it, and the JSON shapes they are read from.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Deserialize;

/// How a file's bytes are addressed: by Xet hash, LFS sha256 or git blob id. The key doubles as
/// the chunk store's content key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ContentId {
    Xet(String),
    Lfs(String),
    Git(String),
}

impl ContentId {
    pub fn key(&self) -> Arc<str> {
        match self {
            ContentId::Xet(h) => Arc::from(format!("xet:{h}")),
            ContentId::Lfs(h) => Arc::from(format!("sha256:{h}")),
            ContentId::Git(h) => Arc::from(format!("git:{h}")),
        }
    }
}

/// A file as the core knows it: where it is, how big, what content (from a tree listing or
/// paths-info; VirtualFs reads it, a writable mount's overlay remembers it for moved files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// Path in the repo (subfolder mounts included).
    pub remote_path: String,
    /// The commit this entry was listed at. Bytes fetched by path are fetched at this commit, never
    /// at a later one: after a move or delete of `remote_path` has landed, a later commit may hold
    /// nothing or other bytes there, while this one is immutable.
    pub commit: Arc<str>,
    pub size: u64,
    pub id: ContentId,
    /// sha256 of the content, known for LFS and Xet files (lets a rename re-commit it by reference).
    pub sha256: Option<String>,
    /// The date of the last commit that changed the file, when the Hub was asked for it
    /// (`--file-times last-commit`): the file's mtime.
    pub last_commit: Option<std::time::SystemTime>,
}

/// `GET /api/{type}s/{repo}/revision/{rev}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoInfo {
    /// 40-hex commit the revision points at.
    pub sha: String,
    pub last_modified: Option<SystemTime>,
    pub private: bool,
    /// The Hub's `_id` of the repo: stable for its life, new when a repo is deleted and created
    /// again under the same name (what tells a writable mount's local state whose it is).
    pub instance_id: Option<String>,
    /// `createdAt`, as sent: the same test where a Hub sends no `_id` (buckets).
    pub created_at: Option<String>,
}

/// One entry of a tree listing or of paths-info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeEntry {
    File {
        /// Full path from the repo root.
        path: String,
        /// Real content size (`lfs.size` for LFS/Xet files, not the pointer size).
        size: u64,
        /// Git blob id (of the LFS pointer for LFS files).
        oid: String,
        /// sha256 of the content for LFS and Xet files.
        lfs_sha256: Option<String>,
        /// Xet file hash when the content is stored in Xet.
        xet_hash: Option<String>,
        /// Date of the last commit touching the file (only when the Hub sends `lastCommit`).
        last_commit_date: Option<SystemTime>,
    },
    Dir {
        path: String,
        /// Git tree id.
        oid: String,
    },
}

impl TreeEntry {
    pub fn path(&self) -> &str {
        match self {
            TreeEntry::File { path, .. } | TreeEntry::Dir { path, .. } => path,
        }
    }

    /// Last path component.
    pub fn name(&self) -> &str {
        let p = self.path();
        p.rsplit_once('/').map_or(p, |(_, n)| n)
    }

    pub fn is_dir(&self) -> bool {
        matches!(self, TreeEntry::Dir { .. })
    }

    /// Content size of a file; 0 for a directory.
    pub fn size(&self) -> u64 {
        match self {
            TreeEntry::File { size, .. } => *size,
            TreeEntry::Dir { .. } => 0,
        }
    }

    pub fn oid(&self) -> &str {
        match self {
            TreeEntry::File { oid, .. } | TreeEntry::Dir { oid, .. } => oid,
        }
    }
}

/// A Xet CAS read token (`GET …/xet-read-token/{rev}`).
#[derive(Clone, PartialEq, Eq)]
pub struct XetToken {
    pub cas_url: String,
    pub access_token: String,
    /// Expiry, unix seconds.
    pub exp: u64,
}

impl fmt::Debug for XetToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XetToken")
            .field("cas_url", &self.cas_url)
            .field("access_token", &"<redacted>")
            .field("exp", &self.exp)
            .finish()
    }
}

/// Metadata of a file from `HEAD …/resolve/{rev}/{path}` (the first cross-origin redirect is not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHead {
    /// `X-Linked-Size`, else `Content-Length`.
    pub size: u64,
    /// `X-Linked-Etag`, else `ETag`, without `W/` and quotes: the sha256 for LFS/Xet files, the git
    /// blob id for regular files.
    pub etag: String,
    /// `X-Xet-Hash`.
    pub xet_hash: Option<String>,
    /// `X-Repo-Commit`.
    pub commit: Option<String>,
    /// `Last-Modified`.
    pub last_modified: Option<SystemTime>,
}

// ---- wire shapes ----------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct RawInfo {
    pub sha: Option<String>,
    #[serde(rename = "_id")]
    pub id: Option<String>,
    #[serde(rename = "createdAt")]
    pub created_at: Option<String>,
    #[serde(rename = "lastModified")]
    pub last_modified: Option<String>,
    #[serde(default)]
    pub private: bool,
}

#[derive(Deserialize)]
pub(crate) struct RawLfs {
    pub oid: Option<String>,
    pub size: Option<u64>,
}

#[derive(Deserialize)]
pub(crate) struct RawLastCommit {
    pub date: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct RawEntry {
    #[serde(rename = "type")]
    pub ty: String,
    pub path: String,
    #[serde(default)]
    pub oid: String,
    #[serde(default)]
    pub size: u64,
    pub lfs: Option<RawLfs>,
    #[serde(rename = "xetHash")]
    pub xet_hash: Option<String>,
    #[serde(rename = "lastCommit")]
    pub last_commit: Option<RawLastCommit>,
}

impl RawEntry {
    /// `None` for entry types hubfs does not know (they are skipped).
    pub fn into_entry(self) -> Option<TreeEntry> {
        match self.ty.as_str() {
            "directory" => Some(TreeEntry::Dir {
                path: self.path,
                oid: self.oid,
            }),
            "file" => {
                let size = self.lfs.as_ref().and_then(|l| l.size).unwrap_or(self.size);
                Some(TreeEntry::File {
                    path: self.path,
                    size,
                    oid: self.oid,
                    lfs_sha256: self.lfs.and_then(|l| l.oid),
                    xet_hash: self.xet_hash,
                    last_commit_date: self.last_commit.and_then(|c| c.date).as_deref().and_then(parse_date),
                })
            }
            _ => None,
        }
    }
}

/// A bucket tree or paths-info entry: `{"type":"file","path","size","xetHash","mtime","uploadedAt"}`
/// or `{"type":"directory","path","uploadedAt"}`.
#[derive(Deserialize)]
pub(crate) struct RawBucketEntry {
    #[serde(rename = "type")]
    pub ty: String,
    pub path: String,
    #[serde(default)]
    pub size: u64,
    #[serde(rename = "xetHash")]
    pub xet_hash: Option<String>,
    pub mtime: Option<String>,
    #[serde(rename = "uploadedAt")]
    pub uploaded_at: Option<String>,
}

impl RawBucketEntry {
    /// A bucket file is always Xet content: its Xet hash stands in for the git oid. Its mtime
    /// (else its upload time) is the date shown, where a repo shows its last commit's.
    pub fn into_entry(self) -> Option<TreeEntry> {
        match self.ty.as_str() {
            "directory" => Some(TreeEntry::Dir {
                path: self.path,
                oid: String::new(),
            }),
            "file" => {
                let hash = self.xet_hash.filter(|h| !h.is_empty())?;
                let date = self.mtime.or(self.uploaded_at);
                Some(TreeEntry::File {
                    path: self.path,
                    size: self.size,
                    oid: hash.clone(),
                    lfs_sha256: None,
                    xet_hash: Some(hash),
                    last_commit_date: date.as_deref().and_then(parse_date),
                })
            }
            _ => None,
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct RawXetToken {
    #[serde(rename = "casUrl")]
    pub cas_url: Option<String>,
    #[serde(rename = "accessToken")]
    pub access_token: Option<String>,
    pub exp: Option<u64>,
}

/// RFC 3339 (`2024-01-01T00:00:00.000Z`).
pub(crate) fn parse_date(s: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(s).ok().map(SystemTime::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_from_json() {
        let raw: Vec<RawEntry> = serde_json::from_str(
            r#"[{"type":"directory","oid":"t","size":0,"path":"d/sub"},
                {"type":"file","oid":"p","size":134,"path":"w.bin","lfs":{"oid":"s","size":10240,"pointerSize":134},
                 "xetHash":"x","lastCommit":{"id":"c","title":"t","date":"2024-01-01T00:00:00.000Z"}},
                {"type":"unknown","path":"z"}]"#,
        )
        .unwrap();
        let e: Vec<TreeEntry> = raw.into_iter().filter_map(RawEntry::into_entry).collect();
        assert_eq!(e.len(), 2);
        assert!(e[0].is_dir());
        assert_eq!(e[0].name(), "sub");
        let TreeEntry::File {
            size,
            lfs_sha256,
            xet_hash,
            last_commit_date,
            ..
        } = &e[1]
        else {
            panic!()
        };
        assert_eq!(*size, 10240);
        assert_eq!(lfs_sha256.as_deref(), Some("s"));
        assert_eq!(xet_hash.as_deref(), Some("x"));
        assert_eq!(
            *last_commit_date,
            Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_704_067_200))
        );
    }
}
