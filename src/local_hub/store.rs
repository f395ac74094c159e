//! On-disk state of the local Hub and the only code that writes it.
//!
//! Layout under the data dir:
//! ```text
//! repos/{type}/{ns}/{name}/repo.json      settings and the repo's `_id`
//! repos/{type}/{ns}/{name}/refs.json      branches, tags, PR refs (replaced atomically)
//! repos/{type}/{ns}/{name}/commits/{id}.json
//! repos/{type}/{ns}/{name}/pr-bases.json  the branch each PR targets, where not main (optional)
//! objects/git/{aa}/{oid}                  regular file contents by git blob oid
//! objects/lfs/{aa}/{sha256}               plain-LFS contents by sha256
//! xet-bindings.jsonl                      sha256 → Xet file hash, learned from uploaded shards
//! cas/                                    the embedded Xet CAS
//! ```
//! Every file is written to a temporary name, synced and renamed, and a commit becomes visible only
//! when `refs.json` is replaced, so a commit lands whole or not at all, even across `kill -9`.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use super::error::{HubError, HubResult};
use super::limits;
use super::model::{Commit, Discussion, FileEntry, Refs, RepoMeta, Snapshot};
use super::names::{RepoId, RepoType, validate_ref_name};

/// A Xet file known to the CAS, bound to the sha256 its shard declared.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XetBinding {
    pub sha256: String,
    pub xet_hash: String,
    pub size: u64,
}

/// One loaded repo. Lock order: `write` (async, held for a whole commit) before `refs`/`meta`
/// (sync, never held across an await).
pub struct RepoState {
    pub id: RepoId,
    dir: PathBuf,
    pub meta: RwLock<RepoMeta>,
    pub refs: RwLock<Refs>,
    /// PR number → the ref its changes target (`refs/heads/dev`), for PRs that do not target main.
    /// A file of its own beside `refs.json`, absent in older data dirs (where every PR targets main);
    /// an entry whose PR never landed (crash before `refs.json`) is replaced when its number is used.
    pr_bases: RwLock<BTreeMap<u64, String>>,
    pub write: tokio::sync::Mutex<()>,
}

/// The ref a pull request targets when nothing else is recorded (every PR before targets existed).
pub const DEFAULT_PR_BASE: &str = "refs/heads/main";

impl RepoState {
    /// The ref pull request `num` targets, as the Hub names it in a discussion's `changes.base`.
    pub fn pr_base(&self, num: u64) -> String {
        self.pr_bases
            .read()
            .get(&num)
            .cloned()
            .unwrap_or_else(|| DEFAULT_PR_BASE.to_string())
    }
}

/// What a revision named in a URL resolved to.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub commit: String,
    /// The branch name when the revision is a branch or PR ref (commits can be made there).
    pub branch: Option<String>,
}

pub struct Store {
    root: PathBuf,
    /// Lock order: `create_lock` → `repos`; `repos` is never held while taking a repo's locks.
    repos: Mutex<HashMap<RepoId, Arc<RepoState>>>,
    snapshots: moka::sync::Cache<String, Arc<Snapshot>>,
    bindings: RwLock<HashMap<String, XetBinding>>,
    bindings_file: Mutex<()>,
    /// Most entries one directory may hold after a commit (the Hub's 10,000); 0 = no limit.
    dir_entry_limit: std::sync::atomic::AtomicUsize,
    /// Held for a whole repo creation (before `repos`).
    create_lock: Mutex<()>,
}

pub fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Writes `data` to `path` atomically: temp file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    write_file(path, data, true)
}

/// Writes `data` to `path` through a temporary name and a rename. With `sync`, the file and its
/// directory are synced, so the new name survives a power cut; without, the caller syncs later
/// (many small objects of one commit share one `syncfs`).
fn write_file(path: &Path, data: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("path has no parent"))?;
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(data)?;
    if sync {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    if sync {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Flushes everything written under `dir`'s filesystem (one syscall for a commit's many objects).
fn sync_filesystem(dir: &Path) -> std::io::Result<()> {
    let f = std::fs::File::open(dir)?;
    Ok(rustix::fs::syncfs(&f)?)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> HubResult<T> {
    let data = std::fs::read(path).map_err(|e| HubError::internal(format!("reading {}: {e}", path.display())))?;
    serde_json::from_slice(&data).map_err(|e| HubError::internal(format!("parsing {}: {e}", path.display())))
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> HubResult<()> {
    let data = serde_json::to_vec(v).map_err(HubError::internal)?;
    write_atomic(path, &data).map_err(|e| HubError::internal(format!("writing {}: {e}", path.display())))
}

/// A repo's `_id`: 24 hex digits, the shape of the Hub's (a MongoDB object id), random.
fn new_repo_id() -> String {
    super::state::random_hex(12)
}

/// File of a repo's dir naming the branch each PR targets (see `RepoState::pr_bases`).
const PR_BASES: &str = "pr-bases.json";

fn is_commit_id(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Default `.gitattributes` of a new repo: the LFS patterns the Hub puts in every repo it creates.
pub const DEFAULT_GITATTRIBUTES: &str = "*.7z filter=lfs diff=lfs merge=lfs -text
*.arrow filter=lfs diff=lfs merge=lfs -text
*.bin filter=lfs diff=lfs merge=lfs -text
*.bz2 filter=lfs diff=lfs merge=lfs -text
*.ckpt filter=lfs diff=lfs merge=lfs -text
*.ftz filter=lfs diff=lfs merge=lfs -text
*.gz filter=lfs diff=lfs merge=lfs -text
*.h5 filter=lfs diff=lfs merge=lfs -text
*.joblib filter=lfs diff=lfs merge=lfs -text
*.lfs.* filter=lfs diff=lfs merge=lfs -text
*.mlmodel filter=lfs diff=lfs merge=lfs -text
*.model filter=lfs diff=lfs merge=lfs -text
*.msgpack filter=lfs diff=lfs merge=lfs -text
*.npy filter=lfs diff=lfs merge=lfs -text
*.npz filter=lfs diff=lfs merge=lfs -text
*.onnx filter=lfs diff=lfs merge=lfs -text
*.ot filter=lfs diff=lfs merge=lfs -text
*.parquet filter=lfs diff=lfs merge=lfs -text
*.pb filter=lfs diff=lfs merge=lfs -text
*.pickle filter=lfs diff=lfs merge=lfs -text
*.pkl filter=lfs diff=lfs merge=lfs -text
*.pt filter=lfs diff=lfs merge=lfs -text
*.pth filter=lfs diff=lfs merge=lfs -text
*.rar filter=lfs diff=lfs merge=lfs -text
*.safetensors filter=lfs diff=lfs merge=lfs -text
saved_model/**/* filter=lfs diff=lfs merge=lfs -text
*.tar.* filter=lfs diff=lfs merge=lfs -text
*.tar filter=lfs diff=lfs merge=lfs -text
*.tflite filter=lfs diff=lfs merge=lfs -text
*.tgz filter=lfs diff=lfs merge=lfs -text
*.wasm filter=lfs diff=lfs merge=lfs -text
*.xz filter=lfs diff=lfs merge=lfs -text
*.zip filter=lfs diff=lfs merge=lfs -text
*.zst filter=lfs diff=lfs merge=lfs -text
*tfevents* filter=lfs diff=lfs merge=lfs -text
";

/// One change of a commit, already validated and with its content stored.
#[derive(Debug, Clone)]
pub enum Op {
    Put { path: String, entry: FileEntry },
    DeleteFile { path: String },
    DeleteFolder { path: String },
}

pub struct CommitRequest {
    pub title: String,
    pub message: String,
    pub author: String,
    pub parent: Option<String>,
    pub create_pr: bool,
    pub ops: Vec<Op>,
}

pub struct CommitOutcome {
    pub commit: String,
    pub pr_num: Option<u64>,
}

impl Store {
    pub fn open(root: &Path) -> HubResult<Store> {
        for sub in ["repos", "objects/git", "objects/lfs", "objects/tmp", "cas"] {
            std::fs::create_dir_all(root.join(sub))
                .map_err(|e| HubError::internal(format!("creating {}: {e}", root.join(sub).display())))?;
        }
        let mut bindings = HashMap::new();
        if let Ok(text) = std::fs::read_to_string(root.join("xet-bindings.jsonl")) {
            // A torn last line (crash mid-append) is skipped; earlier lines stay valid.
            for line in text.lines() {
                if let Ok(b) = serde_json::from_str::<XetBinding>(line) {
                    bindings.insert(b.sha256.clone(), b);
                }
            }
        }
        Ok(Store {
            root: root.to_path_buf(),
            repos: Mutex::new(HashMap::new()),
            snapshots: moka::sync::Cache::builder()
                .weigher(|_k: &String, v: &Arc<Snapshot>| v.commit.files.len().min(u32::MAX as usize) as u32 + 1)
                .max_capacity(2_000_000)
                .build(),
            bindings: RwLock::new(bindings),
            bindings_file: Mutex::new(()),
            dir_entry_limit: std::sync::atomic::AtomicUsize::new(limits::MAX_DIR_ENTRIES),
            create_lock: Mutex::new(()),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Most entries (files and folders) a commit may leave in one directory it adds to; 0 = no limit.
    pub fn dir_entry_limit(&self) -> usize {
        self.dir_entry_limit.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set_dir_entry_limit(&self, n: usize) {
        self.dir_entry_limit.store(n, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn cas_dir(&self) -> PathBuf {
        self.root.join("cas")
    }

    fn repo_dir(&self, id: &RepoId) -> PathBuf {
        self.root
            .join("repos")
            .join(id.ty.plural())
            .join(&id.namespace)
            .join(&id.name)
    }

    pub fn git_object_path(&self, oid: &str) -> PathBuf {
        self.root.join("objects/git").join(&oid[..2.min(oid.len())]).join(oid)
    }

    pub fn lfs_object_path(&self, sha256: &str) -> PathBuf {
        self.root
            .join("objects/lfs")
            .join(&sha256[..2.min(sha256.len())])
            .join(sha256)
    }

    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("objects/tmp")
    }

    pub fn has_lfs_object(&self, sha256: &str) -> bool {
        is_sha256(sha256) && self.lfs_object_path(sha256).is_file()
    }

    /// Stores regular file content by its git blob oid (idempotent).
    pub fn put_git_object(&self, content: &[u8]) -> HubResult<FileEntry> {
        let entry = FileEntry::regular(content);
        let path = self.git_object_path(&entry.oid);
        if !path.exists() {
            // Synced with the rest of the commit in `apply_commit`, before the commit can land.
            write_file(&path, content, false).map_err(HubError::internal)?;
        }
        Ok(entry)
    }

    pub fn read_git_object(&self, oid: &str) -> HubResult<Vec<u8>> {
        std::fs::read(self.git_object_path(oid)).map_err(|e| HubError::internal(format!("git object {oid}: {e}")))
    }

    pub fn xet_binding(&self, sha256: &str) -> Option<XetBinding> {
        self.bindings.read().get(sha256).cloned()
    }

    pub fn add_xet_binding(&self, b: XetBinding) -> HubResult<()> {
        if self
            .bindings
            .read()
            .get(&b.sha256)
            .is_some_and(|old| old.xet_hash == b.xet_hash)
        {
            return Ok(());
        }
        let line = serde_json::to_string(&b).map_err(HubError::internal)? + "\n";
        {
            let _g = self.bindings_file.lock();
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.root.join("xet-bindings.jsonl"))
                .map_err(HubError::internal)?;
            f.write_all(line.as_bytes()).map_err(HubError::internal)?;
            f.sync_data().map_err(HubError::internal)?;
        }
        self.bindings.write().insert(b.sha256.clone(), b);
        Ok(())
    }

    /// The repo, loaded from disk on first use; `None` if it does not exist.
    pub fn repo(&self, id: &RepoId) -> HubResult<Option<Arc<RepoState>>> {
        if let Some(r) = self.repos.lock().get(id) {
            return Ok(Some(r.clone()));
        }
        let dir = self.repo_dir(id);
        if !dir.join("refs.json").is_file() {
            return Ok(None);
        }
        let mut meta: RepoMeta = read_json(&dir.join("repo.json"))?;
        if meta.id.is_empty() {
            // A data dir from before repos had ids: one is made now and kept from then on.
            meta.id = new_repo_id();
            write_json(&dir.join("repo.json"), &meta)?;
        }
        let refs: Refs = read_json(&dir.join("refs.json"))?;
        let pr_bases: BTreeMap<u64, String> = if dir.join(PR_BASES).is_file() {
            read_json(&dir.join(PR_BASES))?
        } else {
            BTreeMap::new()
        };
        let state = Arc::new(RepoState {
            id: id.clone(),
            dir,
            meta: RwLock::new(meta),
            refs: RwLock::new(refs),
            pr_bases: RwLock::new(pr_bases),
            write: tokio::sync::Mutex::new(()),
        });
        Ok(Some(self.repos.lock().entry(id.clone()).or_insert(state).clone()))
    }

    /// Creates a repo with an initial commit holding the default `.gitattributes`.
    pub fn create_repo(&self, id: &RepoId, private: bool, author: &str) -> HubResult<Arc<RepoState>> {
        let dir = self.repo_dir(id);
        // One creation at a time: the existence check and the writes must not interleave.
        let _creating = self.create_lock.lock();
        if self.repos.lock().contains_key(id) || dir.join("refs.json").is_file() {
            return Err(HubError::Conflict(format!(
                "You already created this {} repo",
                id.ty.singular()
            )));
        }
        let meta = RepoMeta {
            private,
            created_at: now_iso(),
            id: new_repo_id(),
        };
        let mut commit = Commit {
            id: String::new(),
            parents: vec![],
            title: "initial commit".to_string(),
            message: String::new(),
            authors: vec![author.to_string()],
            date: meta.created_at.clone(),
            files: Default::default(),
        };
        let ga = self.put_git_object(DEFAULT_GITATTRIBUTES.as_bytes())?;
        commit.files.insert(".gitattributes".to_string(), ga);
        commit.id = commit.compute_id();
        write_json(&dir.join("commits").join(format!("{}.json", commit.id)), &commit)?;
        write_json(&dir.join("repo.json"), &meta)?;
        let mut refs = Refs::default();
        refs.branches.insert("main".to_string(), commit.id.clone());
        // refs.json last: its presence is what makes the repo exist.
        write_json(&dir.join("refs.json"), &refs)?;
        let state = Arc::new(RepoState {
            id: id.clone(),
            dir,
            meta: RwLock::new(meta),
            refs: RwLock::new(refs),
            pr_bases: RwLock::new(BTreeMap::new()),
            write: tokio::sync::Mutex::new(()),
        });
        Ok(self.repos.lock().entry(id.clone()).or_insert(state).clone())
    }

    pub fn delete_repo(&self, id: &RepoId) -> HubResult<()> {
        let dir = self.repo_dir(id);
        if !dir.join("refs.json").is_file() {
            return Err(HubError::RepoNotFound { anonymous: false });
        }
        // Remove refs.json first so a crash mid-delete leaves no half-visible repo.
        std::fs::remove_file(dir.join("refs.json")).map_err(HubError::internal)?;
        self.repos.lock().remove(id);
        std::fs::remove_dir_all(&dir).map_err(HubError::internal)?;
        Ok(())
    }

    pub fn list_repos(&self, ty: RepoType) -> Vec<RepoId> {
        let mut out = Vec::new();
        let base = self.root.join("repos").join(ty.plural());
        let Ok(nss) = std::fs::read_dir(&base) else {
            return out;
        };
        for ns in nss.flatten() {
            let Ok(names) = std::fs::read_dir(ns.path()) else {
                continue;
            };
            for name in names.flatten() {
                if name.path().join("refs.json").is_file()
                    && let (Some(n), Some(m)) = (ns.file_name().to_str(), name.file_name().to_str())
                    && let Ok(id) = RepoId::new(ty, n, m)
                {
                    out.push(id);
                }
            }
        }
        out.sort();
        out
    }

    pub fn set_private(&self, repo: &RepoState, private: bool) -> HubResult<()> {
        let mut meta = repo.meta.read().clone();
        meta.private = private;
        write_json(&repo.dir.join("repo.json"), &meta)?;
        *repo.meta.write() = meta;
        Ok(())
    }

    /// Resolves a branch, tag, `refs/pr/N` or full commit id.
    pub fn resolve(&self, repo: &RepoState, rev: &str) -> HubResult<Resolved> {
        let refs = repo.refs.read();
        if let Some(c) = refs.branches.get(rev) {
            return Ok(Resolved {
                commit: c.clone(),
                branch: Some(rev.to_string()),
            });
        }
        if let Some(c) = refs.tags.get(rev) {
            return Ok(Resolved {
                commit: c.clone(),
                branch: None,
            });
        }
        if let Some(n) = rev.strip_prefix("refs/pr/").and_then(|n| n.parse::<u64>().ok())
            && let Some(c) = refs.prs.get(&n)
        {
            return Ok(Resolved {
                commit: c.clone(),
                branch: Some(rev.to_string()),
            });
        }
        if let Some(b) = rev.strip_prefix("refs/heads/")
            && let Some(c) = refs.branches.get(b)
        {
            return Ok(Resolved {
                commit: c.clone(),
                branch: Some(b.to_string()),
            });
        }
        drop(refs);
        if is_commit_id(rev) && repo.dir.join("commits").join(format!("{rev}.json")).is_file() {
            return Ok(Resolved {
                commit: rev.to_string(),
                branch: None,
            });
        }
        Err(HubError::RevisionNotFound(rev.to_string()))
    }

    pub fn commit(&self, repo: &RepoState, id: &str) -> HubResult<Arc<Commit>> {
        Ok(self.snapshot(repo, id)?.commit.clone())
    }

    /// The directory view of a commit, cached (commits never change).
    pub fn snapshot(&self, repo: &RepoState, id: &str) -> HubResult<Arc<Snapshot>> {
        if !is_commit_id(id) {
            return Err(HubError::RevisionNotFound(id.to_string()));
        }
        let key = format!("{}/{id}", repo.id);
        if let Some(s) = self.snapshots.get(&key) {
            return Ok(s);
        }
        let path = repo.dir.join("commits").join(format!("{id}.json"));
        if !path.is_file() {
            return Err(HubError::RevisionNotFound(id.to_string()));
        }
        let commit: Commit = read_json(&path)?;
        let snap = Arc::new(Snapshot::build(Arc::new(commit)));
        self.snapshots.insert(key, snap.clone());
        Ok(snap)
    }

    /// The commit a commit to `rev` is made on top of: `rev`'s head, or the request's parent when
    /// opening a PR, which the Hub then creates *from* that parent even if `rev` moved since. A
    /// parent that is no commit of this repo is `RevisionNotFound`, as any unknown revision; without
    /// `create_pr` a parent other than the head is 412, so a stale writer cannot overwrite newer work.
    pub fn commit_base(
        &self,
        repo: &RepoState,
        head: &str,
        parent: Option<&str>,
        create_pr: bool,
    ) -> HubResult<String> {
        match parent {
            Some(parent) if create_pr => Ok(self.snapshot(repo, parent)?.commit.id.clone()),
            Some(parent) if parent != head => Err(HubError::PreconditionFailed),
            _ => Ok(head.to_string()),
        }
    }

    /// Applies a commit to `rev` (a branch or PR ref; any revision when opening a PR). Caller holds
    /// `repo.write`. The new commit is durable before the ref moves.
    pub fn apply_commit(&self, repo: &RepoState, rev: &str, req: CommitRequest) -> HubResult<CommitOutcome> {
        let resolved = self.resolve(repo, rev)?;
        if !req.create_pr && resolved.branch.is_none() {
            return Err(HubError::bad_request(format!(
                "Cannot commit to revision {rev:?}: only branches and refs/pr/N accept commits"
            )));
        }
        let parent = self.commit_base(repo, &resolved.commit, req.parent.as_deref(), req.create_pr)?;
        let base = self.commit(repo, &parent)?;
        let mut files = base.files.clone();
        // Directories that gain entries, and the paths added (for the Hub's limits below).
        let mut touched = std::collections::BTreeSet::new();
        let mut added = Vec::new();
        for op in req.ops {
            match op {
                Op::Put { path, entry } => {
                    touched.extend(limits::ancestors(&path).map(str::to_string));
                    added.push(path.clone());
                    let prefix = format!("{path}/");
                    if files
                        .range(prefix.clone()..)
                        .next()
                        .is_some_and(|(k, _)| k.starts_with(&prefix))
                    {
                        return Err(HubError::bad_request(format!(
                            "{path:?} is a directory in this revision"
                        )));
                    }
                    let mut parent = path.as_str();
                    while let Some((p, _)) = parent.rsplit_once('/') {
                        if files.contains_key(p) {
                            return Err(HubError::bad_request(format!("{p:?} is a file in this revision")));
                        }
                        parent = p;
                    }
                    files.insert(path, entry);
                }
                Op::DeleteFile { path } => {
                    if files.remove(&path).is_none() {
                        return Err(HubError::EntryNotFound(format!(
                            "A file with this name doesn't exist: {path}"
                        )));
                    }
                }
                Op::DeleteFolder { path } => {
                    let prefix = format!("{}/", path.trim_end_matches('/'));
                    let before = files.len();
                    files.retain(|k, _| !k.starts_with(&prefix));
                    if files.len() == before {
                        return Err(HubError::EntryNotFound(format!(
                            "A folder with this name doesn't exist: {path}"
                        )));
                    }
                }
            }
        }
        // The Hub's pre-receive checks, named by the ref being written.
        let git_ref = if req.create_pr {
            format!("refs/pr/{}", repo.refs.read().next_discussion_num())
        } else {
            limits::full_ref(resolved.branch.as_deref().unwrap_or_default())
        };
        limits::check_regular_sizes(
            added
                .iter()
                .filter_map(|p| files.get_key_value(p))
                .map(|(p, e)| (p.as_str(), e)),
            &git_ref,
        )?;
        limits::check_dir_entries(&files, &touched, &git_ref, self.dir_entry_limit())?;
        let mut commit = Commit {
            id: String::new(),
            parents: vec![parent],
            title: req.title,
            message: req.message,
            authors: vec![req.author],
            date: now_iso(),
            files,
        };
        commit.id = commit.compute_id();
        // Objects of this commit were written without their own fsync: make them durable first.
        sync_filesystem(&self.root).map_err(HubError::internal)?;
        write_json(&repo.dir.join("commits").join(format!("{}.json", commit.id)), &commit)?;

        let mut refs = repo.refs.read().clone();
        let pr_num = if req.create_pr {
            let n = refs.next_discussion_num();
            // The PR targets the branch named in the URL (a tag or commit id is kept as given).
            let target = resolved
                .branch
                .as_deref()
                .map_or_else(|| rev.to_string(), limits::full_ref);
            self.set_pr_base(repo, n, &target)?;
            refs.prs.insert(n, commit.id.clone());
            refs.discussions.insert(
                n,
                Discussion {
                    title: commit.title.clone(),
                    author: commit.authors.join(","),
                    created_at: commit.date.clone(),
                    is_pr: true,
                },
            );
            Some(n)
        } else {
            let branch = resolved.branch.unwrap_or_default();
            if let Some(n) = branch.strip_prefix("refs/pr/").and_then(|n| n.parse::<u64>().ok()) {
                refs.prs.insert(n, commit.id.clone());
            } else {
                refs.branches.insert(branch, commit.id.clone());
            }
            None
        };
        self.write_refs(repo, refs)?;
        Ok(CommitOutcome {
            commit: commit.id,
            pr_num,
        })
    }

    /// Records that PR `n` targets `target`; written before `refs.json`, so a PR is never visible
    /// with the wrong target. Main, the common case, is the default and costs no write.
    fn set_pr_base(&self, repo: &RepoState, n: u64, target: &str) -> HubResult<()> {
        let mut bases = repo.pr_bases.read().clone();
        let changed = if target == DEFAULT_PR_BASE {
            bases.remove(&n).is_some()
        } else {
            bases.insert(n, target.to_string()).as_deref() != Some(target)
        };
        if changed {
            write_json(&repo.dir.join(PR_BASES), &bases)?;
            *repo.pr_bases.write() = bases;
        }
        Ok(())
    }

    fn write_refs(&self, repo: &RepoState, refs: Refs) -> HubResult<()> {
        write_json(&repo.dir.join("refs.json"), &refs)?;
        *repo.refs.write() = refs;
        Ok(())
    }

    /// Opens a discussion; a pull request also gets `refs/pr/N` at `base`. Caller holds `repo.write`.
    pub fn create_discussion(
        &self,
        repo: &RepoState,
        title: &str,
        author: &str,
        pr_base: Option<String>,
    ) -> HubResult<u64> {
        let mut refs = repo.refs.read().clone();
        let n = refs.next_discussion_num();
        let d = Discussion {
            title: title.to_string(),
            author: author.to_string(),
            created_at: now_iso(),
            is_pr: pr_base.is_some(),
        };
        if let Some(base) = pr_base {
            // Such PRs are opened against main.
            self.set_pr_base(repo, n, DEFAULT_PR_BASE)?;
            refs.prs.insert(n, base);
        }
        refs.discussions.insert(n, d);
        self.write_refs(repo, refs)?;
        Ok(n)
    }

    /// Creates or deletes a branch or tag. Caller holds `repo.write`.
    pub fn set_ref(&self, repo: &RepoState, kind: RefKind, name: &str, target: Option<String>) -> HubResult<()> {
        validate_ref_name(name)?;
        let mut refs = repo.refs.read().clone();
        let map = match kind {
            RefKind::Branch => &mut refs.branches,
            RefKind::Tag => &mut refs.tags,
        };
        match target {
            Some(c) => {
                if map.contains_key(name) {
                    return Err(HubError::Conflict(format!("Reference {name} already exists")));
                }
                map.insert(name.to_string(), c);
            }
            None => {
                if kind == RefKind::Branch && name == "main" {
                    return Err(HubError::Forbidden("Cannot delete the main branch".to_string()));
                }
                if map.remove(name).is_none() {
                    return Err(HubError::RevisionNotFound(name.to_string()));
                }
            }
        }
        self.write_refs(repo, refs)
    }

    /// History of a commit, newest first, following first parents.
    pub fn history(&self, repo: &RepoState, head: &str, limit: usize) -> HubResult<Vec<Arc<Commit>>> {
        let mut out = Vec::new();
        let mut cur = Some(head.to_string());
        while let Some(id) = cur {
            if out.len() >= limit {
                break;
            }
            let c = self.commit(repo, &id)?;
            cur = c.parents.first().cloned();
            out.push(c);
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefKind {
    Branch,
    Tag,
}

pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
