//! Listings and point lookups through the shared tier (`--shared-cache`): what a commit fixes is
//! asked of the tier before the Hub and written to it after a Hub fetch
//! (`SharedTier::metadata`), so N nodes mounting one revision cost the Hub about one node's
//! metadata requests plus the `repo_info` each makes at mount.
//!
//! Only questions about a 40-hex commit id of a repo go there: the mount resolved that id itself
//! with its own token (a bucket's state id and a branch name are not immutable). The key names
//! the repo, the commit, the question (with whether entries carry their last commit, which
//! changes the answer) and the repo path; never a token. The stored form is this file's own
//! (`Stored`), versioned in the key ([`FORM`]), so a change of `TreeEntry` does not change what
//! other nodes read.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::chunk_store::{MetaKey, SharedTier};
use crate::hub_client::{HubClient, HubClientError, RepoRef, TreeEntry};

/// Version of the stored form: part of every key, so nodes of another version never read it.
const FORM: &str = "v1";

/// A tree entry as the tier stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub(super) enum Stored {
    File {
        path: String,
        size: u64,
        oid: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lfs_sha256: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        xet_hash: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_commit_date: Option<SystemTime>,
    },
    Dir {
        path: String,
        oid: String,
    },
}

impl From<TreeEntry> for Stored {
    fn from(e: TreeEntry) -> Stored {
        match e {
            TreeEntry::File {
                path,
                size,
                oid,
                lfs_sha256,
                xet_hash,
                last_commit_date,
            } => Stored::File {
                path,
                size,
                oid,
                lfs_sha256,
                xet_hash,
                last_commit_date,
            },
            TreeEntry::Dir { path, oid } => Stored::Dir { path, oid },
        }
    }
}

impl From<Stored> for TreeEntry {
    fn from(e: Stored) -> TreeEntry {
        match e {
            Stored::File {
                path,
                size,
                oid,
                lfs_sha256,
                xet_hash,
                last_commit_date,
            } => TreeEntry::File {
                path,
                size,
                oid,
                lfs_sha256,
                xet_hash,
                last_commit_date,
            },
            Stored::Dir { path, oid } => TreeEntry::Dir { path, oid },
        }
    }
}

/// The key of question `what` about repo path `path` at `commit`, if the answer is immutable: a
/// repo (not a bucket) at a full commit id.
fn key(client: &HubClient, repo: &RepoRef, commit: &str, what: &str, path: &str) -> Option<MetaKey> {
    if repo.is_bucket() || !super::is_commit_id(commit) {
        return None;
    }
    // Entries asked with their last commit (`--file-times last-commit`) are another answer.
    let what = match client.tree_expand() {
        true => format!("{what}-expand"),
        false => what.to_string(),
    };
    let scope = [FORM, repo.kind.plural(), &repo.namespace, &repo.name, commit];
    Some(MetaKey::new(&scope, &what, path))
}

/// The entries directly under repo directory `path` at `commit`: from the tier when it has them,
/// else from the Hub (then written to the tier).
pub(super) async fn list_dir(
    client: &HubClient,
    tier: Option<&SharedTier>,
    repo: &RepoRef,
    commit: &str,
    path: &str,
) -> Result<Vec<TreeEntry>, HubClientError> {
    let Some((tier, key)) = tier.zip(key(client, repo, commit, "tree", path)) else {
        return client.list_dir(repo, commit, path).await;
    };
    let fetch = async {
        let entries = client.list_dir(repo, commit, path).await?;
        Ok::<_, HubClientError>(entries.into_iter().map(Stored::from).collect::<Vec<_>>())
    };
    // Boxed: the tier's lookup, claim and wait make a large future, and lookups nest deep in
    // the VirtualFs calls of a test's current-thread runtime (a stack overflow in vfs_model).
    let stored = Box::pin(tier.metadata(&key, fetch)).await?;
    Ok(stored.into_iter().map(TreeEntry::from).collect())
}

/// What repo path `path` is at `commit` (a paths-info request for that one path), `None` if the
/// commit has nothing there: from the tier when it has the answer, else from the Hub (then
/// written to the tier; an absence is an answer too).
pub(super) async fn path_info(
    client: &HubClient,
    tier: Option<&SharedTier>,
    repo: &RepoRef,
    commit: &str,
    path: &str,
) -> Result<Option<TreeEntry>, HubClientError> {
    let fetch = async {
        let found = client.paths_info(repo, commit, &[path.to_string()]).await?;
        Ok::<_, HubClientError>(found.into_iter().find(|e| e.path() == path))
    };
    let Some((tier, key)) = tier.zip(key(client, repo, commit, "info", path)) else {
        return fetch.await;
    };
    let fetch = async { Ok::<_, HubClientError>(fetch.await?.map(Stored::from)) };
    // Boxed, as in `list_dir`.
    Ok(Box::pin(tier.metadata(&key, fetch)).await?.map(TreeEntry::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_round_trips_every_field() {
        let entries = vec![
            TreeEntry::File {
                path: "a/model.safetensors".into(),
                size: 1 << 30,
                oid: "0f".repeat(20),
                lfs_sha256: Some("ab".repeat(32)),
                xet_hash: Some("cd".repeat(32)),
                last_commit_date: Some(
                    SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(1_700_000_000_123_456_789),
                ),
            },
            TreeEntry::File {
                path: "a/config.json".into(),
                size: 12,
                oid: "1e".repeat(20),
                lfs_sha256: None,
                xet_hash: None,
                last_commit_date: None,
            },
            TreeEntry::Dir {
                path: "a/sub".into(),
                oid: "2d".repeat(20),
            },
        ];
        let stored: Vec<Stored> = entries.clone().into_iter().map(Stored::from).collect();
        let json = serde_json::to_vec(&stored).unwrap();
        let back: Vec<Stored> = serde_json::from_slice(&json).unwrap();
        let back: Vec<TreeEntry> = back.into_iter().map(TreeEntry::from).collect();
        assert_eq!(back, entries);
    }

    #[test]
    fn only_a_repo_at_a_commit_id_has_keys_and_they_never_name_a_token() {
        let client = HubClient::new(crate::hub_client::HubClientConfig {
            token: Some("hf_secret_token_value".into()),
            ..Default::default()
        })
        .unwrap();
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let repo = RepoRef::model("demo/tiny-model").unwrap();
        let k = key(&client, &repo, commit, "tree", "sub").unwrap();
        assert_eq!(k.id(), format!("v1/models/demo/tiny-model/{commit}/tree:sub"));
        assert!(!k.id().contains("hf_secret"));
        assert!(key(&client, &repo, "main", "tree", "").is_none(), "a branch moves");
        let bucket = RepoRef::new(crate::hub_client::RepoKind::Bucket, "demo", "b");
        assert!(
            key(&client, &bucket, commit, "tree", "").is_none(),
            "a bucket's state id is not immutable"
        );
        let d = RepoRef::dataset("demo/tiny-model").unwrap();
        assert_ne!(
            key(&client, &d, commit, "tree", "sub").unwrap(),
            k,
            "the repo kind is part of it"
        );
        assert_ne!(
            key(&client, &repo, commit, "info", "sub").unwrap(),
            k,
            "and the question"
        );
    }
}
