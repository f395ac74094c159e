//! The data the local Hub keeps: repo settings, refs, commits (each a full manifest of its files)
//! and the directory view derived from a commit. Plain serde types; persistence lives in `store`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};

/// Settings of one repo, in `repo.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RepoMeta {
    pub private: bool,
    pub created_at: String,
    /// The Hub's `_id`: made at creation and never changed, so a client can tell a deleted and
    /// recreated repo (same name, new id) from the one it knew. Empty in data dirs written before
    /// it existed; `Store::repo` assigns one once.
    #[serde(default)]
    pub id: String,
}

/// Branches, tags and pull-request refs, in `refs.json`. Replaced atomically on every change, so
/// a crash leaves either the old or the new set of refs, never a mix.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Refs {
    pub branches: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    pub prs: BTreeMap<u64, String>,
    /// Discussions and pull requests share one numbering, as on the Hub.
    #[serde(default)]
    pub discussions: BTreeMap<u64, Discussion>,
}

impl Refs {
    pub fn next_discussion_num(&self) -> u64 {
        let a = self.prs.keys().next_back().copied().unwrap_or(0);
        let b = self.discussions.keys().next_back().copied().unwrap_or(0);
        a.max(b) + 1
    }
}

/// A discussion or pull request (its changes live in `refs/pr/N`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Discussion {
    pub title: String,
    pub author: String,
    pub created_at: String,
    pub is_pr: bool,
}

/// How an LFS-class file is stored: its sha256 and the size of the git pointer that stands for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LfsMeta {
    pub sha256: String,
    pub pointer_size: u64,
}

/// One file of a commit. `oid` is the git blob sha1 of the content (regular files) or of the LFS
/// pointer (LFS files), exactly as the Hub reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub size: u64,
    pub oid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lfs: Option<LfsMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xet_hash: Option<String>,
}

impl FileEntry {
    pub fn regular(content: &[u8]) -> Self {
        FileEntry {
            size: content.len() as u64,
            oid: git_blob_oid(content),
            lfs: None,
            xet_hash: None,
        }
    }

    pub fn lfs(sha256: &str, size: u64, xet_hash: Option<String>) -> Self {
        let pointer = lfs_pointer(sha256, size);
        FileEntry {
            size,
            oid: git_blob_oid(pointer.as_bytes()),
            lfs: Some(LfsMeta {
                sha256: sha256.to_string(),
                pointer_size: pointer.len() as u64,
            }),
            xet_hash,
        }
    }

    /// The ETag the Hub sends on resolve: the sha256 for LFS files, the blob oid otherwise.
    pub fn etag(&self) -> &str {
        self.lfs.as_ref().map(|l| l.sha256.as_str()).unwrap_or(&self.oid)
    }
}

/// One commit with the full manifest of the files at that commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Commit {
    pub id: String,
    pub parents: Vec<String>,
    pub title: String,
    pub message: String,
    pub authors: Vec<String>,
    pub date: String,
    pub files: BTreeMap<String, FileEntry>,
}

impl Commit {
    /// A commit id is the sha1 of everything else in the commit, so equal ids mean equal commits.
    pub fn compute_id(&self) -> String {
        let mut h = Sha1::new();
        h.update(self.parents.join(",").as_bytes());
        h.update([0]);
        h.update(self.title.as_bytes());
        h.update([0]);
        h.update(self.message.as_bytes());
        h.update([0]);
        h.update(self.authors.join(",").as_bytes());
        h.update([0]);
        h.update(self.date.as_bytes());
        for (path, e) in &self.files {
            h.update([0]);
            h.update(path.as_bytes());
            h.update([0]);
            h.update(e.oid.as_bytes());
        }
        hex::encode(h.finalize())
    }
}

/// `sha1("blob {len}\0" + content)`, git's object id for a file.
pub fn git_blob_oid(content: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", content.len()).as_bytes());
    h.update(content);
    hex::encode(h.finalize())
}

pub fn lfs_pointer(sha256: &str, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n")
}

/// One entry of a directory listing.
#[derive(Debug, Clone)]
pub enum Node {
    File { path: String, entry: FileEntry },
    Dir { path: String, oid: String },
}

impl Node {
    pub fn path(&self) -> &str {
        match self {
            Node::File { path, .. } | Node::Dir { path, .. } => path,
        }
    }
}

/// The directory view of a commit, built once per commit and cached: every directory with its
/// direct children sorted by name, and a git-tree-like oid per directory.
#[derive(Debug)]
pub struct Snapshot {
    pub commit: Arc<Commit>,
    /// Directory path ("" for the root) → direct children, sorted by path.
    pub dirs: HashMap<String, Vec<Node>>,
}

impl Snapshot {
    pub fn build(commit: Arc<Commit>) -> Snapshot {
        // Collect the set of directories and their direct children.
        let mut children: BTreeMap<String, BTreeMap<String, Option<&FileEntry>>> = BTreeMap::new();
        children.entry(String::new()).or_default();
        for (path, entry) in &commit.files {
            let mut parent = String::new();
            let segs: Vec<&str> = path.split('/').collect();
            for (i, seg) in segs.iter().enumerate() {
                let child = if parent.is_empty() {
                    seg.to_string()
                } else {
                    format!("{parent}/{seg}")
                };
                let is_file = i + 1 == segs.len();
                children
                    .entry(parent.clone())
                    .or_default()
                    .insert(child.clone(), is_file.then_some(entry));
                if !is_file {
                    children.entry(child.clone()).or_default();
                }
                parent = child;
            }
        }
        // Directory oids bottom-up: deepest paths first (longer paths sort after their parents,
        // so walking the BTreeMap in reverse visits children before parents).
        let mut dir_oids: HashMap<String, String> = HashMap::new();
        for (dir, kids) in children.iter().rev() {
            let mut h = Sha1::new();
            for (child, file) in kids {
                let name = child.rsplit('/').next().unwrap_or(child);
                let oid = match file {
                    Some(e) => e.oid.clone(),
                    None => dir_oids.get(child).cloned().unwrap_or_default(),
                };
                h.update(format!(
                    "{} {}\0{}",
                    if file.is_some() { "100644" } else { "40000" },
                    name,
                    oid
                ));
            }
            dir_oids.insert(dir.clone(), hex::encode(h.finalize()));
        }
        let dirs = children
            .into_iter()
            .map(|(dir, kids)| {
                let nodes = kids
                    .into_iter()
                    .map(|(child, file)| match file {
                        Some(e) => Node::File {
                            path: child,
                            entry: e.clone(),
                        },
                        None => {
                            let oid = dir_oids.get(&child).cloned().unwrap_or_default();
                            Node::Dir { path: child, oid }
                        }
                    })
                    .collect();
                (dir, nodes)
            })
            .collect();
        Snapshot { commit, dirs }
    }

    /// The node at `path` (a file or a directory), if it exists.
    pub fn node(&self, path: &str) -> Option<Node> {
        if path.is_empty() {
            return Some(Node::Dir {
                path: String::new(),
                oid: String::new(),
            });
        }
        if let Some(e) = self.commit.files.get(path) {
            return Some(Node::File {
                path: path.to_string(),
                entry: e.clone(),
            });
        }
        let parent = path.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
        self.dirs.get(parent)?.iter().find(|n| n.path() == path).cloned()
    }

    /// Every entry below `dir` (directories included), parents before children.
    pub fn walk(&self, dir: &str) -> Vec<Node> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_string()];
        while let Some(d) = stack.pop() {
            if let Some(kids) = self.dirs.get(&d) {
                for k in kids {
                    if let Node::Dir { path, .. } = k {
                        stack.push(path.clone());
                    }
                    out.push(k.clone());
                }
            }
        }
        out.sort_by(|a, b| a.path().cmp(b.path()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_oid_matches_git() {
        // `printf hello | git hash-object --stdin`
        assert_eq!(git_blob_oid(b"hello"), "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0");
        assert_eq!(git_blob_oid(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    }

    #[test]
    fn snapshot_lists_dirs() {
        let mut files = BTreeMap::new();
        files.insert("a/b/c.txt".to_string(), FileEntry::regular(b"1"));
        files.insert("a/d.txt".to_string(), FileEntry::regular(b"2"));
        files.insert("e.txt".to_string(), FileEntry::regular(b"3"));
        let c = Commit {
            id: String::new(),
            parents: vec![],
            title: "t".into(),
            message: String::new(),
            authors: vec![],
            date: String::new(),
            files,
        };
        let s = Snapshot::build(Arc::new(c));
        let root: Vec<_> = s.dirs[""].iter().map(|n| n.path().to_string()).collect();
        assert_eq!(root, ["a", "e.txt"]);
        assert!(matches!(s.node("a/b"), Some(Node::Dir { .. })));
        assert!(matches!(s.node("a/b/c.txt"), Some(Node::File { .. })));
        assert!(s.node("a/x").is_none());
        let all: Vec<_> = s.walk("a").iter().map(|n| n.path().to_string()).collect();
        assert_eq!(all, ["a/b", "a/b/c.txt", "a/d.txt"]);
    }
}
